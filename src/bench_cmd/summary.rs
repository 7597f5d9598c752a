//! What `bootscope bench` prints on standard error as it runs (a line per
//! run) and the table it prints at the end.

use std::fmt::Write as _;
use std::path::Path;

use bootscope_bench::compare::{self, format_value};
use bootscope_bench::doc::{BenchDoc, ConfigResult};
use bootscope_bench::metrics::{self, MetricKind};
use bootscope_bench::runner::Progress;
use bootscope_bench::stats;
use bootscope_bench::{Sample, TestKind};
use bootscope_model::human::ms;

/// The line printed after every run.
pub(super) fn print_progress(p: &Progress) {
    let r = p.run;
    let which = if r.warmup {
        format!("warm-up {}/{}", r.round + 1, p.warmup_rounds)
    } else {
        format!(
            "run {}/{}",
            r.round + 1 - p.warmup_rounds,
            p.rounds - p.warmup_rounds
        )
    };
    let mut line = format!(
        "bench: [{:>w$}/{}] {} {which}: ",
        p.done,
        p.total,
        p.label,
        w = p.total.to_string().len()
    );
    if r.ok {
        line.push_str("ok");
    } else {
        line.push_str("FAILED");
    }
    let m = &r.metrics;
    if let Some(w) = m.get("wall") {
        let _ = write!(line, ", wall {}", ms(*w));
    }
    if let Some(t) = m.get("time_to_userspace") {
        let _ = write!(line, ", to userspace {}", ms(*t));
    }
    if let Some(e) = m.get("exits:total") {
        let _ = write!(line, ", {e} exits");
    }
    if let Some(err) = &r.error {
        let first = err.lines().next().unwrap_or("");
        let _ = write!(line, " ({first})");
    }
    if let Some(vm) = r.vm {
        let _ = write!(line, " [storm VM {vm}]");
    } else if r.solo {
        line.push_str(" [alone]");
    }
    eprintln!("{line}");
    if let Some(storm) = p.storm {
        eprintln!("{}", crate::bench_storm::progress_line(p.label, storm));
    }
}

/// The table printed at the end of a benchmark.
pub(super) fn summary_text(doc: &BenchDoc) -> String {
    let mut s = String::new();
    if let Some(p) = doc.provenance.text() {
        let _ = writeln!(s, "\nmeasured: {p}");
    }
    for c in &doc.configs {
        config_table(&mut s, doc, c);
    }
    if doc.configs.len() == 2 {
        comparison_text(&mut s, doc);
    }
    s
}

/// One configuration's lines of the table: its runs, then each metric
/// shown (the time metrics, the others that are not all zero) with its
/// statistics, then its storm's lines.
fn config_table(s: &mut String, doc: &BenchDoc, c: &ConfigResult) {
    let ok = c.measured().count();
    let _ = match doc.settings.parallel {
        // Every VM of every storm is a run of its own.
        Some(_) => writeln!(
            s,
            "\n{}: {} ok, {} failed of {} measured boot(s) in {} round(s)",
            c.label,
            ok,
            c.failures(),
            c.runs.iter().filter(|r| !r.warmup).count(),
            doc.settings.runs
        ),
        None => writeln!(
            s,
            "\n{}: {} ok, {} failed of {} measured run(s)",
            c.label,
            ok,
            c.failures(),
            doc.settings.runs
        ),
    };
    let _ = writeln!(
        s,
        "  {:<34} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "metric", "mean", "sd", "min", "median", "max"
    );
    let mut names: Vec<&String> = c
        .summary
        .keys()
        .filter(|k| {
            let shown = !k.starts_with("kvm:")
                && !k.starts_with("faults:pf_")
                && !k.starts_with("storm:")
                && !k.starts_with("solo:");
            let nonzero = c.summary[*k].stats.max > 0.0;
            shown && (nonzero || metrics::kind(k) == MetricKind::Time)
        })
        .collect();
    names.sort_by_key(|k| compare::order_key(k));
    for name in names {
        let m = &c.summary[name];
        let f = |v: f64| format_value(m.kind, v);
        let _ = writeln!(
            s,
            "  {:<34} {:>11} {:>11} {:>11} {:>11} {:>11}",
            metrics::display_name(name),
            f(m.stats.mean),
            f(m.stats.sd),
            f(m.stats.min),
            f(m.stats.median),
            f(m.stats.max)
        );
    }
    s.push_str(&crate::bench_storm::storm_text(c));
}

/// The second configuration compared with the first, paired by round
/// where the rounds are enough, else by Welch's test.
fn comparison_text(s: &mut String, doc: &BenchDoc) {
    let path = Path::new("(this run)");
    let samples: Result<Vec<Sample>, _> = doc
        .configs
        .iter()
        .map(|c| Sample::from_doc(doc, path, Some(&c.label)))
        .collect();
    if let Ok(samples) = samples {
        // The two ran interleaved, round by round: paired where there
        // are rounds enough for the paired test to reach p < 0.01.
        let pairs = samples[0].runs.min(samples[1].runs);
        let test = if stats::min_attainable_p(TestKind::Wilcoxon, pairs, pairs) < 0.01 {
            TestKind::Wilcoxon
        } else {
            TestKind::Welch
        };
        match compare::compare(&samples[0], &samples[1], &[], test, 0.01) {
            Ok(r) => {
                let _ = writeln!(
                    s,
                    "\n{} compared with {} ({}):",
                    samples[1].label,
                    samples[0].label,
                    test.title()
                );
                for c in &r.metrics {
                    let _ = writeln!(s, "  {}", c.words());
                }
            }
            Err(e) => {
                let _ = writeln!(s, "\n(no comparison: {e})");
            }
        }
    }
}
