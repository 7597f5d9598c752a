//! Metric names and where their values come from.
//!
//! | name | kind | source |
//! |---|---|---|
//! | `wall` | time | spawn to exit of the run's process, measured by `bench` |
//! | `time_to_userspace` | time | VMM start (the `vmm setup` phase's start) to the `userspace` phase's start; a `profiler attach` phase before the VMM is not counted, the `profiler guest attach` wait before the first `KVM_RUN` is |
//! | `phase:NAME` | time | the timeline's phase `NAME`, `duration_ns` |
//! | `prealloc` | time | the timeline's `memory.elapsed_ns`: preallocating guest memory (`run --prealloc`) |
//! | `memory_ready` | time | the timeline's `vmm: process start` mark to `vmm: memory ready`: the VMM's guest memory set-up |
//! | `console:NAME` | time | spawn to the first console line (standard output) matching pattern `NAME` |
//! | `exits:total` | count | KVM statistic `exits` |
//! | `exits:KEY` | count | KVM statistics named `*_exits` (`io_exits`, `mmio_exits`, `halt_exits`, ...) |
//! | `faults:KEY` | count | KVM statistics named `pf_*` (`pf_taken`, `pf_fixed`, ...) |
//! | `kvm:KEY` | count | every other cumulative KVM statistic (`insn_emulation`, `halt_wakeup`, ...) |
//! | `exit-reason:NAME`, `exit-reason:total` | count | the profile's `exits.by_reason` (`bench --profile`) |
//! | `faults:guest`, `faults:host` | count | the profile's `page_faults.guest_total` / `host_total` |
//! | `pio:PORT DIRECTION` | count | the profile's `exits.pio`: the guest's port I/O to one port (`pio:0x3f8 write`), all access sizes together (`bench --profile`) |
//! | `mark:NAME` | time | the first mark `NAME` the guest gave (every source but the VMM's own steps): from the timeline, nanoseconds since the VMM's process start (its `t_ns`); with `bench --profile`, the profile's first mark `NAME` from the profile's start (the launch of the command, or the process start of a `bootscope run` profiling itself), in its place; e.g. `mark:port 0x80: userspace 0x60` for either VMM: the time to a workload's marker |
//! | `memory:rss`, `memory:pss`, `memory:uss` | bytes | the VMM's `/proc/PID/smaps_rollup` at the userspace mark (the timeline's `host_memory`; for a command, read by `bench` at its console's `userspace` pattern) |
//! | `storm:METRIC:STAT`, `storm:makespan` | as METRIC, time | `bench --parallel N`: per storm, [`crate::storm`] |
//! | `solo:METRIC` | as METRIC | `bench --parallel N`: the one VM booted alone before each storm |

use std::collections::BTreeMap;

pub use bootscope_model::bench::MetricKind;
use bootscope_model::mark::MarkSource;
use bootscope_model::profile::Profile;
use bootscope_model::timeline::Timeline;

/// The statistics a storm keeps of a per-VM metric (`sum` for memory
/// only): `storm:METRIC:STAT`.
pub const STATISTICS: [&str; 5] = ["p50", "p90", "p99", "max", "sum"];

/// The kind of a metric, from its name: a storm's statistic of a per-VM
/// metric (`storm:time_to_userspace:p99`, `storm:memory:pss:sum`) and the
/// single-VM figure beside it (`solo:time_to_userspace`) are of that
/// metric's kind; `storm:makespan` is a time.
pub fn kind(name: &str) -> MetricKind {
    if let Some(rest) = name.strip_prefix("solo:") {
        return kind(rest);
    }
    if let Some(rest) = name.strip_prefix("storm:") {
        if rest == "makespan" {
            return MetricKind::Time;
        }
        let base = STATISTICS
            .iter()
            .find_map(|s| rest.strip_suffix(s).and_then(|r| r.strip_suffix(':')))
            .unwrap_or(rest);
        return kind(base);
    }
    if name.starts_with("memory:") {
        return MetricKind::Bytes;
    }
    if name == "wall"
        || name == "time_to_userspace"
        || name == "prealloc"
        || name == "memory_ready"
        || name == "bpf:run_ns"
        || name.starts_with("phase:")
        || name.starts_with("console:")
        || name.starts_with("mark:")
    {
        MetricKind::Time
    } else {
        MetricKind::Count
    }
}

/// A metric as people read it: `kernel phase`, `time to userspace`,
/// `io_exits`.
pub fn display_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("solo:") {
        return format!("{} (one VM alone)", display_name(rest));
    }
    if let Some(rest) = name.strip_prefix("storm:") {
        if rest == "makespan" {
            return "storm makespan".into();
        }
        if let Some((base, stat)) = rest.rsplit_once(':') {
            if STATISTICS.contains(&stat) {
                return format!("{} {stat} per storm", display_name(base));
            }
        }
    }
    if let Some(m) = name.strip_prefix("memory:") {
        return format!("{} (host memory)", m.to_uppercase());
    }
    if let Some(mark) = name.strip_prefix("mark:") {
        return format!("time to {mark}");
    }
    if let Some(p) = name.strip_prefix("phase:") {
        format!("{p} phase")
    } else if let Some(c) = name.strip_prefix("console:") {
        format!("console {c:?}")
    } else if name == "exits:total" {
        "exits (total)".into()
    } else if name == "prealloc" {
        "preallocation".into()
    } else if name == "memory_ready" {
        "memory set-up".into()
    } else if name == "exit-reason:total" {
        "exits traced (total)".into()
    } else if let Some(r) = name.strip_prefix("exit-reason:") {
        format!("{r} exits")
    } else if let Some(io) = name.strip_prefix("pio:") {
        format!("port {io}s")
    } else if name == "faults:guest" || name == "faults:host" {
        format!("{} page faults", &name[7..])
    } else if let Some(k) = name
        .strip_prefix("exits:")
        .or_else(|| name.strip_prefix("faults:"))
        .or_else(|| name.strip_prefix("kvm:"))
    {
        k.into()
    } else if name == "wall" {
        "wall time".into()
    } else if name == "bpf:run_ns" {
        "eBPF programs' run time".into()
    } else if name == "bpf:runs" {
        "eBPF program runs".into()
    } else {
        name.replace('_', " ")
    }
}

/// True for metrics that count VM exits (for histograms).
pub fn is_exit_count(name: &str) -> bool {
    (name.starts_with("exits:") && name != "exits:total")
        || (name.starts_with("exit-reason:") && name != "exit-reason:total")
}

/// What a bootscope timeline says about one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimelineFacts {
    pub metrics: BTreeMap<String, u64>,
    /// `outcome.reason`.
    pub outcome: String,
    /// `outcome.clean`.
    pub clean: bool,
    /// `outcome.detail`.
    pub detail: String,
    /// The mark that opened the `userspace` phase (the first userspace
    /// mark), when the guest reached userspace.
    pub userspace_mark: Option<String>,
}

/// What to give instead of a file that is no timeline.
pub const TIMELINE_HINT: &str = "give a file written by `bootscope run --timeline FILE`";

/// The metrics of a `bootscope.timeline` document
/// ([`crate::schema::parse_timeline`] reads one).
pub fn from_timeline(t: &Timeline) -> TimelineFacts {
    let outcome = t.outcome.clone().unwrap_or_default();
    let mut facts = TimelineFacts {
        outcome: outcome.reason,
        clean: outcome.clean.unwrap_or(false),
        detail: outcome.detail,
        ..Default::default()
    };
    for phase in &t.phases {
        facts
            .metrics
            .insert(format!("phase:{}", phase.name), phase.duration_ns);
    }
    // From the VMM's start: a profiler that attached before it has its own
    // phase (`profiler attach`).
    if let Some(user) = t.phase("userspace") {
        let vmm_start = t.phase("vmm setup").map_or(0, |p| p.start_ns);
        facts.metrics.insert(
            "time_to_userspace".into(),
            user.start_ns.saturating_sub(vmm_start),
        );
        facts.userspace_mark = t
            .marks
            .iter()
            .find(|m| m.t_ns == user.start_ns)
            .map(|m| m.name.clone());
    }
    if let Some(ns) = t.memory.as_ref().and_then(|m| m.elapsed_ns) {
        facts.metrics.insert("prealloc".into(), ns);
    }
    if let Some(m) = &t.host_memory {
        facts.metrics.extend(memory_metrics(&m.usage));
    }
    // The VMM's start to its guest memory set up: the whole of a
    // `--stop-after memory` run.
    let mark = |name: &str| t.marks.iter().find(|m| m.name == name).map(|m| m.t_ns);
    if let Some(ready) = mark("vmm: memory ready") {
        let start = mark("vmm: process start").unwrap_or(0);
        facts
            .metrics
            .insert("memory_ready".into(), ready.saturating_sub(start));
    }
    for (key, v) in t.kvm_stats.iter().flatten() {
        facts.metrics.insert(kvm_stat_metric(key), *v);
    }
    facts.metrics.extend(timeline_marks(t));
    facts
}

/// The metric of the time to the mark `name`: `mark:NAME`.
pub fn mark_metric(name: &str) -> String {
    format!("mark:{name}")
}

/// The time to each mark the guest gave (its port writes, its console's
/// milestones, systemd's start on its own clock), the first of each name:
/// the timeline's `t_ns`, since the VMM's process start. The VMM's own
/// steps are left out (the phases measure them).
fn timeline_marks(t: &Timeline) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for m in t.marks.iter().filter(|m| m.source != MarkSource::Vmm) {
        let e = out.entry(mark_metric(&m.name)).or_insert(m.t_ns);
        *e = (*e).min(m.t_ns);
    }
    out
}

/// The host memory metrics of one VMM: `memory:rss`, `memory:pss`,
/// `memory:uss` (and `memory:hugetlb` when it maps hugetlb pages).
pub fn memory_metrics(m: &bootscope_model::smaps::MemoryUse) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = [
        ("memory:rss".to_string(), m.rss_bytes),
        ("memory:pss".to_string(), m.pss_bytes),
        ("memory:uss".to_string(), m.uss_bytes),
    ]
    .into_iter()
    .collect();
    if m.hugetlb_bytes > 0 {
        out.insert("memory:hugetlb".into(), m.hugetlb_bytes);
    }
    out
}

/// The metric name of a KVM statistic.
pub fn kvm_stat_metric(key: &str) -> String {
    if key == "exits" {
        "exits:total".into()
    } else if key.ends_with("_exits") {
        format!("exits:{key}")
    } else if key.starts_with("pf_") {
        format!("faults:{key}")
    } else {
        format!("kvm:{key}")
    }
}

/// The exit and fault counts of a `bootscope.profile` document, its first
/// marks and, with `--bpf-stats`, its eBPF programs' runs.
pub fn from_profile(p: &Profile) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for r in &p.exits.by_reason {
        m.insert(format!("exit-reason:{}", r.reason), r.count);
    }
    m.insert("exit-reason:total".into(), p.exits.total);
    m.insert("faults:guest".into(), p.page_faults.guest_total);
    m.insert("faults:host".into(), p.page_faults.host_total);
    // Where the I/O exits go: one count per port and direction.
    for io in &p.exits.pio {
        *m.entry(format!("pio:{:#x} {}", io.port, io.direction))
            .or_insert(0) += io.count;
    }
    // The first of each mark (the guest's port writes, its console's
    // milestones), on the profile's clock.
    for mark in &p.marks {
        let e = m.entry(mark_metric(&mark.name)).or_insert(mark.t_ns);
        *e = (*e).min(mark.t_ns);
    }
    // With `--bpf-stats`: what the kernel accounted to the eBPF programs.
    let stats: Vec<(u64, u64)> = p.timed_sources().map(|(_, r, ns)| (r, ns)).collect();
    if !stats.is_empty() {
        m.insert("bpf:runs".into(), stats.iter().map(|s| s.0).sum());
        m.insert("bpf:run_ns".into(), stats.iter().map(|s| s.1).sum());
    }
    m
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::error::BenchError;

    #[test]
    fn kinds_and_names() {
        assert_eq!(kind("phase:kernel"), MetricKind::Time);
        assert_eq!(kind("console:run init"), MetricKind::Time);
        assert_eq!(kind("exits:io_exits"), MetricKind::Count);
        assert_eq!(kind("faults:guest"), MetricKind::Count);
        assert_eq!(display_name("phase:kernel"), "kernel phase");
        assert_eq!(display_name("time_to_userspace"), "time to userspace");
        assert_eq!(display_name("exits:io_exits"), "io_exits");
        assert_eq!(display_name("exits:total"), "exits (total)");
        assert_eq!(display_name("exit-reason:npf"), "npf exits");
        assert_eq!(display_name("faults:host"), "host page faults");
        assert_eq!(display_name("pio:0x3f8 write"), "port 0x3f8 writes");
        assert_eq!(kind("pio:0x80 write"), MetricKind::Count);
        assert_eq!(kvm_stat_metric("exits"), "exits:total");
        assert_eq!(kvm_stat_metric("halt_exits"), "exits:halt_exits");
        assert_eq!(kvm_stat_metric("pf_fixed"), "faults:pf_fixed");
        assert_eq!(kvm_stat_metric("insn_emulation"), "kvm:insn_emulation");
        assert!(is_exit_count("exits:io_exits") && !is_exit_count("exits:total"));
    }

    /// A timeline document's metrics, read as bench reads a run's file.
    fn read(doc: &serde_json::Value) -> Result<TimelineFacts, BenchError> {
        let bytes = serde_json::to_vec(doc).unwrap();
        let t = crate::schema::parse_timeline(&bytes, Path::new("t.json"), TIMELINE_HINT)?;
        Ok(from_timeline(&t))
    }

    #[test]
    fn timeline_metrics() {
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 1,
            "outcome": {"reason": "guest_halt", "clean": true, "detail": "halted"},
            "phases": [
                {"name": "kernel", "start_ns": 5, "end_ns": 105, "duration_ns": 100},
                {"name": "userspace", "start_ns": 105, "end_ns": 205, "duration_ns": 100}
            ],
            "kvm_stats": {"exits": 10, "io_exits": 7, "pf_fixed": 3, "insn_emulation": 2},
            "memory": {"regions": [], "elapsed_ns": 42},
            "marks": [
                {"name": "vmm: first KVM_RUN", "source": "vmm", "t_ns": 5},
                {"name": "port 0x80: userspace 0x60", "source": "debug_port", "t_ns": 105}
            ]
        });
        let f = read(&t).unwrap();
        assert_eq!(
            f.userspace_mark.as_deref(),
            Some("port 0x80: userspace 0x60")
        );
        assert_eq!(f.metrics["prealloc"], 42);
        assert_eq!(kind("prealloc"), MetricKind::Time);
        assert!(f.clean);
        assert_eq!(f.outcome, "guest_halt");
        assert_eq!(f.metrics["phase:kernel"], 100);
        assert_eq!(f.metrics["time_to_userspace"], 105);
        assert_eq!(f.metrics["exits:total"], 10);
        assert_eq!(f.metrics["exits:io_exits"], 7);
        assert_eq!(f.metrics["faults:pf_fixed"], 3);
        assert_eq!(f.metrics["kvm:insn_emulation"], 2);
        // A profiler attached before the VMM: time to userspace counts
        // from the VMM's start, the attach is a phase of its own.
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 1,
            "outcome": {"reason": "guest_halt", "clean": true, "detail": "halted"},
            "phases": [
                {"name": "profiler attach", "start_ns": 0, "end_ns": 30, "duration_ns": 30},
                {"name": "vmm setup", "start_ns": 30, "end_ns": 35, "duration_ns": 5},
                {"name": "kernel", "start_ns": 35, "end_ns": 135, "duration_ns": 100},
                {"name": "userspace", "start_ns": 135, "end_ns": 235, "duration_ns": 100}
            ]
        });
        let f = read(&t).unwrap();
        assert_eq!(f.metrics["time_to_userspace"], 105);
        assert_eq!(f.metrics["phase:profiler attach"], 30);
        assert!(f.metrics.keys().all(|k| !k.starts_with("mark:")));
        let bad = serde_json::json!({"schema": "bootscope.timeline", "version": 4});
        assert!(matches!(read(&bad), Err(BenchError::WrongVersion { .. })));
        let bad = serde_json::json!({"schema": "bootscope.timeline", "version": 2, "phases": 3});
        assert!(matches!(read(&bad), Err(BenchError::Malformed { .. })));
    }

    /// A disk boot: the userspace phase opens at systemd's start (its
    /// journal, on the guest's clock), the workload writes its marker
    /// later; the time to that marker is a metric of its own, from the
    /// VMM's start, the first of each name, the VMM's own steps left out.
    #[test]
    fn time_to_the_workloads_marker() {
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 3,
            "outcome": {"reason": "acpi_power_off", "clean": true, "detail": ""},
            "phases": [
                {"name": "vmm setup", "start_ns": 0, "end_ns": 10, "duration_ns": 10},
                {"name": "kernel", "start_ns": 10, "end_ns": 400, "duration_ns": 390},
                {"name": "userspace", "start_ns": 400, "end_ns": 2000, "duration_ns": 1600,
                 "from": "systemd: started"}
            ],
            "marks": [
                {"name": "vmm: first KVM_RUN", "source": "vmm", "t_ns": 10},
                {"name": "serial: run init", "source": "serial", "t_ns": 300},
                {"name": "systemd: started", "source": "guest_clock", "t_ns": 400},
                {"name": "port 0x80: userspace 0x60", "source": "debug_port", "t_ns": 1700, "value": 96},
                {"name": "port 0x80: userspace 0x60", "source": "debug_port", "t_ns": 1800, "value": 96}
            ]
        });
        let f = read(&t).unwrap();
        assert_eq!(f.userspace_mark.as_deref(), Some("systemd: started"));
        assert_eq!(f.metrics["time_to_userspace"], 400);
        let marker = mark_metric("port 0x80: userspace 0x60");
        assert_eq!(marker, "mark:port 0x80: userspace 0x60");
        assert_eq!(f.metrics[&marker], 1700);
        assert_eq!(f.metrics["mark:systemd: started"], 400);
        assert_eq!(f.metrics["mark:serial: run init"], 300);
        assert!(!f.metrics.contains_key("mark:vmm: first KVM_RUN"));
        assert_eq!(kind(&marker), MetricKind::Time);
        assert_eq!(display_name(&marker), "time to port 0x80: userspace 0x60");
    }

    #[test]
    fn profile_metrics() {
        use bootscope_model::profile::{DataSource, ExitReasonStat, Mark, MarkSource, PioStat};
        let mut p = Profile::new();
        p.exits.total = 12;
        let reason = |reason: &str, code, count| ExitReasonStat {
            reason: reason.into(),
            code,
            count,
            ..Default::default()
        };
        p.exits.by_reason = vec![reason("io", 123, 10), reason("npf", 1024, 2)];
        p.page_faults.guest_total = 4;
        p.page_faults.host_total = 400;
        let source = |name: &str, runs, run_ns| DataSource {
            name: name.into(),
            runs,
            run_ns,
            ..Default::default()
        };
        p.sources = vec![
            source("tracepoint:kvm:kvm_exit", Some(5), Some(700)),
            source("tracepoint:kvm:kvm_entry", Some(4), Some(300)),
            source("procfs:threads", None, None),
        ];
        let mark = |name: &str, source, t_ns| Mark {
            name: name.into(),
            source,
            t_ns,
            ..Default::default()
        };
        p.marks = vec![
            mark("port 0x80: userspace 0x60", MarkSource::DebugPort, 900),
            mark("port 0x80: userspace 0x60", MarkSource::DebugPort, 700),
            mark("serial: run init", MarkSource::Serial, 600),
        ];
        let pio = |port, direction: &str, size, count| PioStat {
            port,
            direction: direction.into(),
            size,
            count,
        };
        p.exits.pio = vec![
            pio(0x3f8, "write", 1, 30),
            pio(0x3f8, "write", 2, 5),
            pio(0x3f8, "read", 1, 7),
            pio(0x80, "write", 1, 3),
        ];
        let m = from_profile(&p);
        assert_eq!(m["pio:0x3f8 write"], 35);
        assert_eq!(m["pio:0x3f8 read"], 7);
        assert_eq!(m["pio:0x80 write"], 3);
        assert_eq!(m["bpf:runs"], 9);
        assert_eq!(m["bpf:run_ns"], 1000);
        assert_eq!(kind("bpf:run_ns"), MetricKind::Time);
        assert_eq!(m["exit-reason:io"], 10);
        assert_eq!(m["exit-reason:total"], 12);
        assert_eq!(m["faults:guest"], 4);
        assert_eq!(m["faults:host"], 400);
        assert_eq!(m["mark:port 0x80: userspace 0x60"], 700);
        assert_eq!(m["mark:serial: run init"], 600);
        assert_eq!(kind("mark:serial: run init"), MetricKind::Time);
    }
}
