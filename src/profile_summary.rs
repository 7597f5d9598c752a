//! The short report `profile` and a profiled `run` print: the target, its
//! exits by reason and exit sites, MMIO, phases, page faults, NUMA
//! allocations, threads, run-queue waits and the profiler's own cost.

use std::fmt::Write as _;
use std::path::Path;

use bootscope_model::human::ms;
use bootscope_profiler::sites::{ExitSites, MODULE_SPACE, MODULE_TAG};
use bootscope_profiler::Profile;

/// The short report printed after profiling, its control characters
/// (but newlines) shown escaped.
pub fn summary(p: &Profile, output: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nbootscope: profile of pid {} ({}) over {} -> {}",
        p.target.pid,
        p.target.name,
        ms(p.duration_ns),
        output.display()
    );
    if let Some(c) = p.target.exit_code {
        let _ = writeln!(s, "target exit status: {c}");
    }
    let e = &p.exits;
    let source = if e.source.is_empty() {
        "none"
    } else {
        &e.source
    };
    let _ = write!(s, "exits: {} from {source} ({})", e.total, e.isa);
    if let Some(k) = e.kvm_stats_exits {
        let _ = write!(s, "; KVM's own count: {k}");
    }
    s.push('\n');
    for r in e.by_reason.iter().take(8) {
        let lat = match (r.latency_total_ns, r.count) {
            (Some(t), c) if c > 0 => format!("  avg {:.1} us", t as f64 / c as f64 / 1e3),
            _ => String::new(),
        };
        let _ = writeln!(s, "  {:<28} {:>10}{lat}", r.reason, r.count);
    }
    s.push_str(&sites_summary(p));
    if !e.marker_writes.is_empty() {
        let m: Vec<String> = e
            .marker_writes
            .iter()
            .map(|m| format!("0x{:x}=0x{:x} x{}", m.port, m.value, m.count))
            .collect();
        let _ = writeln!(s, "marker port writes: {}", m.join(", "));
    }
    mmio_summary(&mut s, &e.mmio);
    if e.emulated_instructions > 0 {
        let _ = writeln!(s, "emulated instructions: {}", e.emulated_instructions);
    }
    if !p.phases.is_empty() {
        let ph: Vec<String> = p
            .phases
            .iter()
            .map(|x| format!("{} {}", x.name, ms(x.end_ns.saturating_sub(x.start_ns))))
            .collect();
        let _ = writeln!(s, "phases: {}", ph.join(", "));
    }
    memory_summary(&mut s, p);
    threads_summary(&mut s, p);
    let waits = bootscope_profiler::runqueue::phase_wait_lines(p);
    if !waits.is_empty() {
        let _ = writeln!(s, "run-queue waits (runnable, not running):");
        for line in waits {
            let _ = writeln!(s, "  {line}");
        }
    }
    if let Some(g) = &p.guest_read {
        s.push_str(&crate::guest_mem::summary::summary(g));
    }
    if let Some(units) = &p.units {
        s.push_str(&bootscope_vmm::units::summary(units, guest_start_ns(p)));
    }
    cost_summary(&mut s, p);
    let _ = writeln!(
        s,
        "lost events: {}{}",
        p.lost_events,
        if p.map_overflows > 0 {
            format!(" (and {} not counted: a map was full)", p.map_overflows)
        } else {
            String::new()
        }
    );
    // Names from the target (its thread names, its command) and the guest
    // (functions, phases): the text rule for a terminal.
    bootscope_model::text::printable_keeping(&s, &['\n']).into_owned()
}

/// When the guest started running, as near as the profile knows: the
/// start of its first boot phase (firmware, boot loader or kernel; the
/// VMM's first `KVM_RUN` is not seen from outside), else the profile's.
fn guest_start_ns(p: &Profile) -> u64 {
    p.phases
        .iter()
        .find(|x| matches!(x.name.as_str(), "firmware" | "bootloader" | "kernel"))
        .map_or(0, |x| x.start_ns)
}

/// The guest code named in the fault tail's line of the summary.
const TAIL_SITES: usize = 3;

/// Page faults, page allocations by node and a restore's fault tail.
fn memory_summary(s: &mut String, p: &Profile) {
    let f = &p.page_faults;
    let _ = writeln!(
        s,
        "page faults: guest {}{}, host {} (user {}, kernel {})",
        f.guest_total,
        if f.guest_source.is_empty() {
            String::new()
        } else {
            format!(" ({})", f.guest_source)
        },
        f.host_total,
        f.host_user,
        f.host_kernel
    );
    let n = &p.numa;
    let _ = writeln!(
        s,
        "pages allocated: {} ({} MiB): local {}, remote {}, unknown node {}",
        n.pages_allocated,
        n.bytes_allocated >> 20,
        n.pages_local,
        n.pages_remote,
        n.pages_unknown_node
    );
    if let Some(t) = &p.fault_tail {
        let _ = writeln!(s, "{}", t.summary_line());
        if let Some(line) = t.top_sites_line(TAIL_SITES) {
            let _ = writeln!(s, "{line}");
        }
    }
}

/// The busiest 16 threads: their CPUs, run time and nodes.
fn threads_summary(s: &mut String, p: &Profile) {
    let _ = writeln!(
        s,
        "threads ({}):\n  {:>8} {:<16} {:<8} {:>10} {:>10}  cpus (run time) / nodes",
        p.threads.len(),
        "tid",
        "name",
        "role",
        "run",
        "MiB alloc"
    );
    let mut threads: Vec<_> = p.threads.iter().collect();
    threads.sort_by(|a, b| b.run_ns.cmp(&a.run_ns).then(a.tid.cmp(&b.tid)));
    for t in threads.iter().take(16) {
        let cpus: Vec<String> = t
            .cpus
            .iter()
            .map(|c| format!("{} ({})", c.cpu, ms(c.run_ns)))
            .collect();
        let nodes: Vec<String> = t.nodes.iter().map(|n| n.to_string()).collect();
        let _ = writeln!(
            s,
            "  {:>8} {:<16} {:<8} {:>10} {:>10}  {} / {}",
            t.tid,
            t.name,
            t.role,
            ms(t.run_ns),
            t.bytes_allocated >> 20,
            if cpus.is_empty() {
                "-".into()
            } else {
                cpus.join(", ")
            },
            if nodes.is_empty() {
                "-".into()
            } else {
                nodes.join(",")
            }
        );
    }
    if threads.len() > 16 {
        let _ = writeln!(s, "  ... {} more in the profile", threads.len() - 16);
    }
}

/// The eBPF programs as they attached, and what profiling cost.
fn cost_summary(s: &mut String, p: &Profile) {
    let by_status = |st: &str| -> Vec<String> {
        p.sources
            .iter()
            .filter(|x| x.status == st)
            .map(|x| x.name.clone())
            .collect()
    };
    let attached = by_status("attached").len();
    let _ = writeln!(s, "sources: {attached} attached");
    for st in ["fallback", "missing", "failed"] {
        let v = by_status(st);
        if !v.is_empty() {
            let _ = writeln!(s, "  {st}: {}", v.join(", "));
        }
    }
    if !p.startup.is_empty() {
        let wall: u64 = p.startup.iter().map(|x| x.ns).sum();
        let cpu: u64 = p.startup.iter().map(|x| x.cpu_ns).sum();
        let _ = writeln!(
            s,
            "profiler start-up: {} ({} CPU; startup[] has the stages)",
            ms(wall),
            ms(cpu)
        );
    }
    if let Some(c) = &p.collector {
        let _ = writeln!(
            s,
            "profiler reading: {} CPU ({} samples, {} of it)",
            ms(c.cpu_ns),
            c.samples,
            ms(c.sample_cpu_ns)
        );
    }
    let mut timed: Vec<_> = p.timed_sources().collect();
    if !timed.is_empty() {
        let runs: u64 = timed.iter().map(|t| t.1).sum();
        let ns: u64 = timed.iter().map(|t| t.2).sum();
        timed.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.name.cmp(&b.0.name)));
        let top: Vec<String> = timed
            .iter()
            .take(3)
            .filter(|t| t.1 > 0)
            .map(|t| format!("{} {} runs {}", t.0.name, t.1, ms(t.2)))
            .collect();
        let _ = writeln!(
            s,
            "eBPF programs: {runs} runs, {} in all{}{}",
            ms(ns),
            if top.is_empty() { "" } else { "; most: " },
            top.join(", ")
        );
    }
}

/// MMIO accesses by what they reached (`virtio-blk0 notify write`), most
/// first, when the profile's addresses are labelled.
fn mmio_summary(s: &mut String, mmio: &[bootscope_profiler::profile::MmioStat]) {
    let mut by: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for m in mmio {
        if let Some(l) = &m.label {
            *by.entry(format!("mmio {l} {}", m.kind)).or_default() += m.count;
        }
    }
    if by.is_empty() {
        return;
    }
    let mut v: Vec<(String, u64)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let _ = writeln!(s, "MMIO by device:");
    for (what, n) in v.iter().take(8) {
        let _ = writeln!(s, "  {what:<44} {n:>10}");
    }
}

/// How many sites of each reason the summary shows.
const TOP_SITES: usize = 5;

/// The top sites of each reason: `function+offset`, exits, share of the
/// reason, mean latency.
fn sites_summary(p: &Profile) -> String {
    let mut s = String::new();
    let Some(sites) = &p.exits.sites else {
        return s;
    };
    let how = sites
        .symbols
        .as_ref()
        .map(|i| format!("{}; KASLR {}", i.source, i.kaslr))
        .unwrap_or_else(|| "not symbolized".into());
    let _ = writeln!(s, "exit sites ({how}):");
    let totals = sites.reason_totals();
    for r in p.exits.by_reason.iter().take(6) {
        let total = totals.get(&r.reason).copied().unwrap_or(0);
        let _ = writeln!(s, "  {} ({total} exits):", r.reason);
        for t in sites.top_sites(&r.reason).iter().take(TOP_SITES) {
            let share = 100.0 * t.count as f64 / total.max(1) as f64;
            let mean = if t.timed > 0 {
                format!("{:.1} us", t.mean_ns() as f64 / 1e3)
            } else {
                "-".into()
            };
            let _ = writeln!(
                s,
                "    {:<44} {:>10} {:>6.1}%  {mean}",
                t.name, t.count, share
            );
        }
    }
    npf_summary(&mut s, sites);
    if let Some(i) = sites.symbols.as_ref().filter(|i| i.in_modules > 0) {
        let (n, named) = (i.in_modules, i.in_modules_named);
        let _ = match (named, i.modules.len()) {
            (0, 0) => writeln!(
                s,
                "  {n} sites are in the kernel's module area ({:#x}..{:#x}): shown by \
                 address, tagged {}",
                MODULE_SPACE.start, MODULE_SPACE.end, MODULE_TAG
            ),
            (named, loaded) => writeln!(
                s,
                "  {n} sites are in the kernel's module area: {named} named `function \
                 [module]` from the guest's {loaded} loaded modules, {} by address, tagged {}",
                n - named,
                MODULE_TAG
            ),
        };
    }
    if sites.overflows > 0 {
        let _ = writeln!(
            s,
            "  {} exits found the site map full: counted as [unattributed]",
            sites.overflows
        );
    }
    s
}

/// The guest-physical ranges with the most nested page faults.
fn npf_summary(s: &mut String, sites: &ExitSites) {
    let by = sites.npf_by_range();
    if by.is_empty() {
        return;
    }
    let total: u64 = by.iter().map(|r| r.3).sum();
    let _ = writeln!(s, "  nested page faults by guest-physical range ({total}):");
    for (a, b, label, n) in by.iter().take(TOP_SITES) {
        let share = 100.0 * *n as f64 / total.max(1) as f64;
        let what = label.as_deref().unwrap_or("-");
        let _ = writeln!(s, "    {a:#012x}-{b:#012x} {n:>10} {share:>6.1}%  {what}");
    }
    if by.iter().all(|r| r.2.is_none()) {
        let _ = writeln!(
            s,
            "    (not labelled: the VM's memory slots were not learned; see guest memory below)"
        );
    }
}
