//! The initcalls' summary printed after `run --initcalls`: how they were
//! read, the level groups, and the initcalls that took longest or exited
//! most.

use std::fmt::Write as _;

use super::{Initcall, InitcallsDoc};

/// The summary printed after a run: the level groups, the `top` slowest
/// initcalls and, when the VMM counted them, those with the most port I/O
/// exits.
pub fn summary(doc: &InitcallsDoc, top: usize) -> String {
    let mut out = String::new();
    if let Some(e) = &doc.error {
        let _ = writeln!(out, "initcalls: none recorded: {e}");
        if doc.initcalls.is_empty() {
            return out;
        }
    }
    notes(&mut out, doc);
    tables(&mut out, doc, top);
    sampled_rows(&mut out, doc, top);
    out
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The lines above the tables: how many initcalls, how the guest's clock
/// was aligned, events the trace lost, how the durations compare with the
/// kernel's own.
fn notes(out: &mut String, doc: &InitcallsDoc) {
    let clock = match &doc.clock {
        Some(c) => format!("guest clock aligned ±{:.3} ms", ms(c.error_ns)),
        None => "guest clock not aligned (no console anchor): guest times".to_string(),
    };
    let _ = writeln!(
        out,
        "initcalls: {} in {} levels ({clock}; log read in {:.1} ms)",
        doc.initcalls.len(),
        doc.levels.len(),
        ms(doc.read_ns)
    );
    if let Some(n) = doc.trace_overrun.filter(|&n| n > 0) {
        let _ = writeln!(
            out,
            "initcalls: the kernel's trace buffer overwrote {n} events: the earliest initcalls \
             are missing (give a larger trace_buf_size= on --cmdline)"
        );
    }
    if let Some(c) = &doc.kernel_durations {
        let _ = writeln!(
            out,
            "initcalls: {} of {} durations within 10 % or 50 µs of the kernel's own \
             (initcall_debug; {} before its clocksource left jiffies not compared){}",
            c.agree,
            c.compared,
            c.coarse,
            c.worst.as_ref().map_or(String::new(), |(n, t, k)| format!(
                "; largest difference {n}: {:.3} ms traced, {:.3} ms by the kernel",
                ms(*t),
                ms(*k)
            ))
        );
    }
}

/// The level groups, the `top` slowest initcalls and, when the VMM
/// counted them, those with the most port I/O exits.
fn tables(out: &mut String, doc: &InitcallsDoc, top: usize) {
    let exits = |n: Option<u64>| n.map_or("-".to_string(), |n| n.to_string());
    let header = |out: &mut String, first: &str, last: &str| {
        let _ = writeln!(
            out,
            "{first:<36} {:>10} {:>12} {:>8} {last:>8}",
            "start ms", "duration ms", "io exits"
        );
    };
    header(out, "initcall level", "count");
    for l in &doc.levels {
        let _ = writeln!(
            out,
            "{:<36} {:>10.3} {:>12.3} {:>8} {:>8}",
            l.level,
            ms(l.start_ns),
            ms(l.duration_ns),
            exits(l.io_exits),
            l.initcalls
        );
    }
    let mut rows = |title: &str, key: &dyn Fn(&Initcall) -> u64| {
        let mut sorted: Vec<&Initcall> = doc.initcalls.iter().collect();
        sorted.sort_by_key(|c| std::cmp::Reverse(key(c)));
        header(out, title, "level");
        for c in sorted.into_iter().take(top) {
            let _ = writeln!(
                out,
                "{:<36} {:>10.3} {:>12.3} {:>8} {:>8}",
                // Names parsed from a console log: shown escaped.
                bootscope_model::text::printable(&c.name),
                ms(c.start_ns),
                ms(c.duration_ns),
                exits(c.io_exits),
                c.level
            );
        }
    };
    rows("slowest initcalls", &|c| c.duration_ns);
    if doc.initcalls.iter().any(|c| c.io_exits.is_some()) {
        rows("most io exits", &|c| c.io_exits.unwrap_or(0));
    }
}

/// The initcalls with the most exits the profiler counted (or sampled).
fn sampled_rows(out: &mut String, doc: &InitcallsDoc, top: usize) {
    let how = match (doc.slot_ns, doc.sample_spacing_ns) {
        (Some(w), None) => format!("profiler, per {} µs slot", w / 1_000),
        (Some(w), Some(s)) => format!(
            "profiler, per {} µs slot; sampled {:.0} ms apart after its slots filled",
            w / 1_000,
            s as f64 / 1e6
        ),
        (None, Some(s)) => format!("profiler, samples {:.0} ms apart", s as f64 / 1e6),
        (None, None) => return,
    };
    let exits = |c: &Initcall| c.profiled().map_or(0, |s| s.exits);
    let mut sorted: Vec<&Initcall> = doc.initcalls.iter().collect();
    sorted.sort_by_key(|c| std::cmp::Reverse(exits(c)));
    let _ = writeln!(
        out,
        "{:<36} {:>10} {:>12} {:>8} {:>8}  ({how})",
        "most exits", "start ms", "duration ms", "exits", "faults",
    );
    for c in sorted.into_iter().take(top) {
        let s = c.profiled().cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<36} {:>10.3} {:>12.3} {:>8} {:>8}",
            bootscope_model::text::printable(&c.name),
            c.start_ns as f64 / 1e6,
            c.duration_ns as f64 / 1e6,
            s.exits,
            s.guest_faults + s.host_faults
        );
    }
}
