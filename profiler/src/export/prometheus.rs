//! Prometheus text exposition format, version 0.0.4.
//!
//! Every metric family gets `# HELP` and `# TYPE` lines, even when it has no
//! sample (an empty profile). Label sets are unique within a family:
//! entries of the profile with the same name are added up.

use bootscope_model::prometheus::{seconds, Text};

use crate::profile::{HistBucket, Profile};

/// Adds up values by key, keeping the order of first appearance.
fn merge<T>(
    items: impl IntoIterator<Item = (String, T)>,
    add: impl Fn(&mut T, T),
) -> Vec<(String, T)> {
    let mut merged: Vec<(String, T)> = Vec::new();
    for (k, v) in items {
        match merged.iter_mut().find(|(m, _)| *m == k) {
            Some((_, acc)) => add(acc, v),
            None => merged.push((k, v)),
        }
    }
    merged
}

/// One reason's latency histogram, ready to print.
struct Latency {
    /// Bucket upper bounds (ns) and counts, ascending, not yet cumulative.
    buckets: Vec<(u64, u64)>,
    /// Sum of latencies, when the profile has it.
    sum_ns: Option<u64>,
}

fn add_buckets(into: &mut Vec<(u64, u64)>, buckets: &[HistBucket]) {
    for b in buckets {
        match into.iter_mut().find(|(hi, _)| *hi == b.hi_ns) {
            Some((_, c)) => *c += b.count,
            None => into.push((b.hi_ns, b.count)),
        }
    }
    into.sort_by_key(|(hi, _)| *hi);
}

/// Renders the profile's metrics.
pub fn to_prometheus(p: &Profile) -> String {
    let mut out = Text::default();
    exit_counts(&mut out, p);
    exit_latencies(&mut out, p);
    boot_counts(&mut out, p);
    guest_log_counts(&mut out, p);
    profiling_cost(&mut out, p);
    super::fault_tail::prometheus(&mut out, p);
    out.family(
        "bootscope_profile_duration_seconds",
        "gauge",
        "Time the profile covers.",
    );
    out.sample(
        "bootscope_profile_duration_seconds",
        &[],
        &seconds(p.duration_ns),
    );
    out.finish()
}

/// Exits by reason.
fn exit_counts(out: &mut Text, p: &Profile) {
    out.family(
        "bootscope_vm_exits_total",
        "counter",
        "VM exits by reason, from the profiler's exit source.",
    );
    let exits = merge(
        p.exits
            .by_reason
            .iter()
            .map(|r| (r.reason.clone(), r.count)),
        |a, b| *a += b,
    );
    for (reason, count) in &exits {
        out.sample(
            "bootscope_vm_exits_total",
            &[("reason", reason), ("source", &p.exits.source)],
            &count.to_string(),
        );
    }
}

/// Exit latency histograms by reason.
fn exit_latencies(out: &mut Text, p: &Profile) {
    out.family(
        "bootscope_vm_exit_latency_seconds",
        "histogram",
        "Time from a VM exit to the next entry, by exit reason.",
    );
    let latencies = merge(
        p.exits
            .by_reason
            .iter()
            .filter(|r| !r.latency_hist.is_empty())
            .map(|r| {
                let mut buckets = Vec::new();
                add_buckets(&mut buckets, &r.latency_hist);
                (
                    r.reason.clone(),
                    Latency {
                        buckets,
                        sum_ns: r.latency_total_ns,
                    },
                )
            }),
        |a, b| {
            let more: Vec<HistBucket> = b
                .buckets
                .iter()
                .map(|&(hi_ns, count)| HistBucket {
                    lo_ns: 0,
                    hi_ns,
                    count,
                })
                .collect();
            add_buckets(&mut a.buckets, &more);
            a.sum_ns = a.sum_ns.zip(b.sum_ns).map(|(x, y)| x + y);
        },
    );
    for (reason, lat) in &latencies {
        let mut cumulative = 0u64;
        for &(hi_ns, count) in &lat.buckets {
            cumulative += count;
            out.sample(
                "bootscope_vm_exit_latency_seconds_bucket",
                &[("reason", reason), ("le", &seconds(hi_ns))],
                &cumulative.to_string(),
            );
        }
        let count = cumulative.to_string();
        out.sample(
            "bootscope_vm_exit_latency_seconds_bucket",
            &[("reason", reason), ("le", "+Inf")],
            &count,
        );
        if let Some(sum) = lat.sum_ns {
            out.sample(
                "bootscope_vm_exit_latency_seconds_sum",
                &[("reason", reason)],
                &seconds(sum),
            );
        }
        out.sample(
            "bootscope_vm_exit_latency_seconds_count",
            &[("reason", reason)],
            &count,
        );
    }
}

/// KVM's own exit count, boot phases, page faults, NUMA locality, lost events.
fn boot_counts(out: &mut Text, p: &Profile) {
    out.family(
        "bootscope_kvm_stats_exits_total",
        "counter",
        "VM exits by KVM's own statistics (KVM_GET_STATS_FD), for cross-checking.",
    );
    if let Some(n) = p.exits.kvm_stats_exits {
        out.sample("bootscope_kvm_stats_exits_total", &[], &n.to_string());
    }

    out.family(
        "bootscope_vm_boot_phase_seconds",
        "gauge",
        "Duration of each boot phase.",
    );
    let phases = merge(
        p.phases
            .iter()
            .map(|ph| (ph.name.clone(), ph.end_ns.saturating_sub(ph.start_ns))),
        |a, b| *a += b,
    );
    for (phase, ns) in &phases {
        out.sample(
            "bootscope_vm_boot_phase_seconds",
            &[("phase", phase)],
            &seconds(*ns),
        );
    }

    out.family(
        "bootscope_page_faults_total",
        "counter",
        "Page faults: guest side (KVM MMU) and host side (the target's threads).",
    );
    for (side, n) in [
        ("guest", p.page_faults.guest_total),
        ("host", p.page_faults.host_total),
    ] {
        out.sample(
            "bootscope_page_faults_total",
            &[("side", side)],
            &n.to_string(),
        );
    }

    out.family("bootscope_numa_pages",
        "gauge",
        "Pages of the target on the NUMA node of the CPU that allocated them (local) or on another node (remote).",
    );
    for (locality, n) in [
        ("local", p.numa.pages_local),
        ("remote", p.numa.pages_remote),
    ] {
        out.sample(
            "bootscope_numa_pages",
            &[("locality", locality)],
            &n.to_string(),
        );
    }

    out.family(
        "bootscope_lost_events_total",
        "counter",
        "Events the kernel could not hand over (ring buffer full).",
    );
    out.sample(
        "bootscope_lost_events_total",
        &[],
        &p.lost_events.to_string(),
    );
}

/// The guest kernel's log read from its memory (`bootscope profile` of
/// another VMM), as counts: the records read, by the read that had them
/// (`userspace`, `shutdown`, `end`), and those the kernel's ring had
/// overwritten before it (the sequence number of the oldest kept). The
/// records' text is in the JSON and the CSV table `guest-log`.
fn guest_log_counts(out: &mut Text, p: &Profile) {
    let log = p.guest_read.as_ref().and_then(|g| g.kernel_log.as_ref());
    let families = [
        (
            "bootscope_guest_kernel_log_records",
            "Records of the guest kernel's log read from its memory, by the read that had them.",
            log.map(|l| l.records.len() as u64),
        ),
        (
            "bootscope_guest_kernel_log_overwritten_records",
            "Records of the guest kernel's log overwritten in its ring before the read.",
            log.map(|l| l.first_seq),
        ),
    ];
    for (name, help, n) in families {
        out.family(name, "gauge", help);
        if let (Some(l), Some(n)) = (log, n) {
            out.sample(name, &[("at", &l.at)], &n.to_string());
        }
    }
}

/// What profiling cost: start-up, eBPF program run time, reading.
fn profiling_cost(out: &mut Text, p: &Profile) {
    // What profiling cost: start-up stages (unique: a stage ended twice
    // adds up), and with --bpf-stats the kernel's own count and time of
    // every program run (one source per program; kvm_pio has two, told
    // apart by the collector label).
    type StageValue = fn(&crate::profile::StartupStage) -> u64;
    let stage_families: [(&str, &str, StageValue); 2] = [
        (
            "bootscope_profiler_startup_seconds",
            "Wall time of each stage of the profiler's start-up, before the target was followed.",
            |x| x.ns,
        ),
        (
            "bootscope_profiler_startup_cpu_seconds",
            "CPU time of the thread that started the profiler, per start-up stage.",
            |x| x.cpu_ns,
        ),
    ];
    for (name, help, value) in stage_families.iter().filter(|_| !p.startup.is_empty()) {
        out.family(name, "gauge", help);
        for x in &p.startup {
            out.sample(name, &[("stage", &x.stage)], &seconds(value(x)));
        }
    }
    let timed: Vec<_> = p.timed_sources().collect();
    let program_families: [(&str, &str, bool); 2] = [
        (
            "bootscope_bpf_program_runs_total",
            "Runs of each eBPF program while profiling, for every process on the host (--bpf-stats).",
            false,
        ),
        (
            "bootscope_bpf_program_run_seconds_total",
            "Time the kernel spent running each eBPF program while profiling (--bpf-stats).",
            true,
        ),
    ];
    for (name, help, in_seconds) in program_families.iter().filter(|_| !timed.is_empty()) {
        out.family(name, "counter", help);
        for (s, runs, ns) in &timed {
            let value = if *in_seconds {
                seconds(*ns)
            } else {
                runs.to_string()
            };
            let labels = [
                ("source", s.name.as_str()),
                ("collector", s.collector.as_str()),
            ];
            out.sample(name, &labels, &value);
        }
    }

    // What the profiler's own reading cost while the target ran.
    if let Some(c) = &p.collector {
        let reading: [(&str, &str, &str, String); 3] = [
            (
                "bootscope_profiler_reading_cpu_seconds",
                "gauge",
                "CPU time of the profiler's reading while the target ran (samples, ring buffer, KVM statistics).",
                seconds(c.cpu_ns),
            ),
            (
                "bootscope_profiler_sample_cpu_seconds",
                "gauge",
                "CPU time of the profiler's samples of its counters (part of the reading).",
                seconds(c.sample_cpu_ns),
            ),
            (
                "bootscope_profiler_samples",
                "gauge",
                "Samples of the counters the profile holds.",
                c.samples.to_string(),
            ),
        ];
        for (name, kind, help, value) in &reading {
            out.family(name, kind, help);
            out.sample(name, &[], value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixture::{self, AWKWARD_REASON};
    use super::*;

    /// One sample line: name, labels, value.
    #[derive(Debug)]
    struct Line {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    fn is_name(s: &str, colon: bool) -> bool {
        let mut chars = s.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
    }

    /// Parses `name{label="value",...} value` strictly, undoing escapes.
    fn parse_line(line: &str) -> Result<Line, String> {
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| format!("no value: {line}"))?;
        let name = &line[..name_end];
        if !is_name(name, true) {
            return Err(format!("bad metric name {name:?}"));
        }
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(r) = rest.strip_prefix('{') {
            rest = r;
            loop {
                if let Some(r) = rest.strip_prefix('}') {
                    rest = r;
                    break;
                }
                let eq = rest.find('=').ok_or("label without =")?;
                let key = &rest[..eq];
                if !is_name(key, false) {
                    return Err(format!("bad label name {key:?}"));
                }
                rest = rest[eq + 1..]
                    .strip_prefix('"')
                    .ok_or("label value not quoted")?;
                let mut value = String::new();
                let mut chars = rest.char_indices();
                let end = loop {
                    match chars.next().ok_or("unterminated label value")? {
                        (i, '"') => break i,
                        (_, '\\') => match chars.next().ok_or("dangling backslash")?.1 {
                            '\\' => value.push('\\'),
                            '"' => value.push('"'),
                            'n' => value.push('\n'),
                            c => return Err(format!("bad escape \\{c}")),
                        },
                        (_, '\n') => return Err("raw line feed in label".into()),
                        (_, c) => value.push(c),
                    }
                };
                if labels.insert(key.to_string(), value).is_some() {
                    return Err(format!("label {key} twice"));
                }
                rest = &rest[end + 1..];
                rest = rest.strip_prefix(',').unwrap_or(rest);
            }
        }
        let value = rest.strip_prefix(' ').ok_or("no space before value")?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse::<f64>().map_err(|e| format!("value {v:?}: {e}"))?,
        };
        Ok(Line {
            name: name.to_string(),
            labels,
            value,
        })
    }

    /// Checks the whole exposition: comments, types declared once and before
    /// their samples, unique series, histogram invariants. Returns samples.
    fn parse(text: &str) -> Vec<Line> {
        assert!(text.ends_with('\n'));
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut helps = BTreeMap::new();
        let mut lines = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(c) = line.strip_prefix("# ") {
                let mut parts = c.splitn(3, ' ');
                let (what, name, rest) = (
                    parts.next().unwrap(),
                    parts.next().unwrap().to_string(),
                    parts.next().unwrap_or(""),
                );
                match what {
                    "TYPE" => {
                        assert!(["counter", "gauge", "histogram"].contains(&rest), "{line}");
                        assert!(types.insert(name, rest.to_string()).is_none(), "{line}");
                    }
                    "HELP" => assert!(helps.insert(name, rest.to_string()).is_none()),
                    _ => panic!("unknown comment {line}"),
                }
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let l = parse_line(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    l.name
                        .strip_suffix(s)
                        .filter(|f| types.get(*f).map(String::as_str) == Some("histogram"))
                })
                .unwrap_or(&l.name);
            assert!(types.contains_key(family), "no TYPE before {line}");
            assert!(helps.contains_key(family), "no HELP before {line}");
            assert!(
                seen.insert((l.name.clone(), format!("{:?}", l.labels))),
                "duplicate series {line}"
            );
            if types[family] == "counter" {
                assert!(l.name.ends_with("_total"), "{line}");
            }
            lines.push(l);
        }
        lines
    }

    fn value(lines: &[Line], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        lines
            .iter()
            .find(|l| {
                l.name == name
                    && l.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| l.labels.get(*k).map(String::as_str) == Some(v))
            })
            .map(|l| l.value)
    }

    /// Checks each reason's buckets: `le` ascending, counts cumulative,
    /// ending with `+Inf` equal to `_count`.
    fn check_histograms(lines: &[Line]) {
        let mut by_reason: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
        for l in lines
            .iter()
            .filter(|l| l.name == "bootscope_vm_exit_latency_seconds_bucket")
        {
            let le = match l.labels["le"].as_str() {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap(),
            };
            by_reason
                .entry(l.labels["reason"].as_str())
                .or_default()
                .push((le, l.value));
        }
        for (reason, b) in by_reason {
            assert!(
                b.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{reason}: {b:?}"
            );
            let (le, last) = *b.last().unwrap();
            assert_eq!(le, f64::INFINITY, "{reason}");
            assert_eq!(
                Some(last),
                value(
                    lines,
                    "bootscope_vm_exit_latency_seconds_count",
                    &[("reason", reason)]
                ),
                "{reason}"
            );
        }
    }

    #[test]
    fn fixture_metrics() {
        let text = to_prometheus(&fixture::profile());
        let lines = parse(&text);
        let src = "tracepoint:kvm:kvm_exit";
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_exits_total",
                &[("reason", "io"), ("source", src)]
            ),
            Some(600.0)
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_exits_total",
                &[("reason", AWKWARD_REASON), ("source", src)]
            ),
            Some(25.0)
        );
        assert!(text.contains(
            r#"bootscope_vm_exits_total{reason="pio_write \"0x3f8\", \\ line\nend",source="tracepoint:kvm:kvm_exit"} 25"#
        ));
        assert!(text.contains(
            "bootscope_vm_exit_latency_seconds_bucket{reason=\"io\",le=\"0.000002048\"} 100\n\
             bootscope_vm_exit_latency_seconds_bucket{reason=\"io\",le=\"0.000004096\"} 550\n\
             bootscope_vm_exit_latency_seconds_bucket{reason=\"io\",le=\"0.000008192\"} 600\n\
             bootscope_vm_exit_latency_seconds_bucket{reason=\"io\",le=\"+Inf\"} 600\n\
             bootscope_vm_exit_latency_seconds_sum{reason=\"io\"} 0.0012\n\
             bootscope_vm_exit_latency_seconds_count{reason=\"io\"} 600\n"
        ));
        check_histograms(&lines);
        // hlt has no histogram.
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_exit_latency_seconds_count",
                &[("reason", "hlt")]
            ),
            None
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_boot_phase_seconds",
                &[("phase", "kernel")]
            ),
            Some(0.72)
        );
        assert_eq!(
            value(&lines, "bootscope_page_faults_total", &[("side", "host")]),
            Some(5000.0)
        );
        assert_eq!(
            value(&lines, "bootscope_page_faults_total", &[("side", "guest")]),
            Some(300.0)
        );
        assert_eq!(
            value(&lines, "bootscope_numa_pages", &[("locality", "remote")]),
            Some(31078.0)
        );
        assert_eq!(value(&lines, "bootscope_lost_events_total", &[]), Some(3.0));
        assert_eq!(
            value(&lines, "bootscope_kvm_stats_exits_total", &[]),
            Some(1003.0)
        );
        assert_eq!(
            value(&lines, "bootscope_profile_duration_seconds", &[]),
            Some(0.9)
        );
        promtool_check(&text);
    }

    #[test]
    fn what_profiling_cost_is_exported() {
        use crate::profile::{DataSource, StartupStage};
        let mut p = fixture::profile();
        let stage = |stage: &str, ns, cpu_ns| StartupStage {
            stage: stage.into(),
            ns,
            cpu_ns,
        };
        p.startup = vec![
            stage("maps", 4_000_000, 3_500_000),
            stage("verify", 3_000_000, 3_000_000),
        ];
        let pio = |collector: &str, runs, run_ns| DataSource {
            name: "tracepoint:kvm:kvm_pio".into(),
            status: "attached".into(),
            collector: collector.into(),
            runs: Some(runs),
            run_ns: Some(run_ns),
            ..Default::default()
        };
        p.sources.push(pio("exits", 1_002, 2_500_000));
        p.sources.push(pio("phases", 1_002, 1_500_000));
        p.collector = Some(crate::profile::CollectorCost {
            samples: 9,
            sample_cpu_ns: 9_000_000,
            cpu_ns: 14_000_000,
        });
        let text = to_prometheus(&p);
        let lines = parse(&text);
        assert_eq!(
            value(&lines, "bootscope_profiler_reading_cpu_seconds", &[]),
            Some(0.014)
        );
        assert_eq!(
            value(&lines, "bootscope_profiler_sample_cpu_seconds", &[]),
            Some(0.009)
        );
        assert_eq!(value(&lines, "bootscope_profiler_samples", &[]), Some(9.0));
        assert_eq!(
            value(
                &lines,
                "bootscope_profiler_startup_seconds",
                &[("stage", "maps")]
            ),
            Some(0.004)
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_profiler_startup_cpu_seconds",
                &[("stage", "maps")]
            ),
            Some(0.0035)
        );
        let labels = |c| [("source", "tracepoint:kvm:kvm_pio"), ("collector", c)];
        assert_eq!(
            value(
                &lines,
                "bootscope_bpf_program_runs_total",
                &labels("phases")
            ),
            Some(1002.0)
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_bpf_program_run_seconds_total",
                &labels("exits")
            ),
            Some(0.0025)
        );
        // The fixture's kvm_exit source was not timed: no line for it.
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.name == "bootscope_bpf_program_runs_total")
                .count(),
            2
        );
        promtool_check(&text);
        // Without --bpf-stats or start-up stages, no such families.
        let text = to_prometheus(&fixture::profile());
        assert!(!text.contains("bootscope_bpf_program"));
        assert!(!text.contains("bootscope_profiler_startup"));
        assert!(!text.contains("bootscope_profiler_reading"));
    }

    #[test]
    fn guest_log_as_counts() {
        let text = to_prometheus(&fixture::with_guest_log(false));
        let lines = parse(&text);
        let at = [("at", "shutdown")];
        assert_eq!(
            value(&lines, "bootscope_guest_kernel_log_records", &at),
            Some(4.0)
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_guest_kernel_log_overwritten_records",
                &at
            ),
            Some(12.0)
        );
        // The guest's text stays out of the metrics.
        assert!(!text.contains("evil"));
        promtool_check(&text);
        // No guest read: the families, without samples.
        let text = to_prometheus(&fixture::profile());
        assert!(text.contains("# TYPE bootscope_guest_kernel_log_records gauge\n"));
        assert!(!parse(&text)
            .iter()
            .any(|l| l.name.starts_with("bootscope_guest_kernel_log")));
    }

    #[test]
    fn empty_profile_is_valid() {
        let text = to_prometheus(&Profile::new());
        let lines = parse(&text);
        assert!(lines
            .iter()
            .all(|l| !l.name.starts_with("bootscope_vm_exit")));
        assert_eq!(value(&lines, "bootscope_lost_events_total", &[]), Some(0.0));
        assert!(text.contains("# TYPE bootscope_vm_exit_latency_seconds histogram\n"));
        promtool_check(&text);
    }

    #[test]
    fn duplicate_names_are_added_up() {
        let mut p = fixture::profile();
        let io = p.exits.by_reason[0].clone();
        p.exits.by_reason.push(io);
        let ph = p.phases[0].clone();
        p.phases.push(ph);
        let text = to_prometheus(&p);
        let lines = parse(&text);
        let src = "tracepoint:kvm:kvm_exit";
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_exits_total",
                &[("reason", "io"), ("source", src)]
            ),
            Some(1200.0)
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_exit_latency_seconds_count",
                &[("reason", "io")]
            ),
            Some(1200.0)
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_exit_latency_seconds_sum",
                &[("reason", "io")]
            ),
            Some(0.0024)
        );
        assert_eq!(
            value(
                &lines,
                "bootscope_vm_boot_phase_seconds",
                &[("phase", "vmm setup")]
            ),
            Some(0.14)
        );
        check_histograms(&lines);
    }

    #[test]
    fn escapes_and_seconds() {
        assert_eq!(
            bootscope_model::prometheus::escape_label("a\\b\"c\nd"),
            "a\\\\b\\\"c\\nd"
        );
        assert_eq!(seconds(0), "0");
        assert_eq!(seconds(2_000_000_000), "2");
        assert_eq!(seconds(1024), "0.000001024");
        assert_eq!(seconds(1_500_000_000), "1.5");
        assert!(parse_line("a{b=\"x\ny\"} 1").is_err());
        assert!(parse_line("a{b=\"x} 1").is_err());
        assert!(parse_line("1a 1").is_err());
        assert!(parse_line("a 1").is_ok());
    }

    /// `promtool check metrics`, when promtool is on PATH or named by
    /// `BOOTSCOPE_PROMTOOL` (Debian's `prometheus` package ships it).
    fn promtool_check(text: &str) {
        let tool = std::env::var("BOOTSCOPE_PROMTOOL").unwrap_or_else(|_| "promtool".into());
        if let Err(e) = bootscope_testkit::promtool_check(&tool, text) {
            eprintln!("SKIP promtool check: cannot run {tool} ({e})");
        }
    }
}
