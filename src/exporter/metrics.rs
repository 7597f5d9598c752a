//! The exporter's metrics in the Prometheus text format (version 0.0.4):
//! one family per metric name, every family's samples together, each VM's
//! series labelled with its `pid`, `comm` and `vm` name.

use std::collections::{BTreeMap, HashMap};

use bootscope_model::prometheus::{series, Exposition};
use bootscope_profiler::Profile;

/// Which optional labels split the per-VM series further (more series:
/// opt-in).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtraLabels {
    /// Exits per vCPU and reason (`bootscope_vm_vcpu_exits_total`).
    pub vcpu: bool,
    /// Exits per boot phase and reason (`bootscope_vm_phase_exits_total`).
    pub phase: bool,
    /// Port I/O per port and direction (`bootscope_vm_port_io_total`).
    pub port: bool,
}

impl ExtraLabels {
    pub const NAMES: [&'static str; 3] = ["vcpu", "phase", "port"];

    /// A comma-separated list of [`Self::NAMES`]; Err names the unknown one.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut l = Self::default();
        for name in list.split(',').map(str::trim) {
            match name {
                "vcpu" => l.vcpu = true,
                "phase" => l.phase = true,
                "port" => l.port = true,
                other => {
                    return Err(format!(
                        "unknown label \"{other}\"; choose from {}",
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(l)
    }
}

/// A VM's counters as last exported: a later reading lower than an earlier
/// one (a count moved between two of its own series by the reader) is
/// exported as the earlier value, so a live VM's counters never go back.
#[derive(Default)]
pub struct Floors(HashMap<String, f64>);

impl Floors {
    /// `v`, or the highest value exported before for `key` if that is more.
    pub fn at_least(&mut self, key: String, v: f64) -> f64 {
        let e = self.0.entry(key).or_insert(v);
        if v > *e {
            *e = v;
        }
        *e
    }
}

/// Who a VM's series belong to.
pub struct VmLabels<'a> {
    pub pid: &'a str,
    pub comm: &'a str,
    pub vm: &'a str,
}

/// Writes one VM's series (from its latest profile) into `x`.
pub struct VmWriter<'a> {
    pub x: &'a mut Exposition,
    pub floors: &'a mut Floors,
    pub who: VmLabels<'a>,
}

/// A VM's labels followed by `extra`.
fn with_vm<'l>(who: &'l VmLabels<'_>, extra: &[(&'l str, &'l str)]) -> Vec<(&'l str, &'l str)> {
    let mut l = vec![("pid", who.pid), ("comm", who.comm), ("vm", who.vm)];
    l.extend_from_slice(extra);
    l
}

impl VmWriter<'_> {
    pub fn gauge(&mut self, family: &'static str, extra: &[(&str, &str)], v: f64) {
        let l = with_vm(&self.who, extra);
        self.x.sample(family, "", &l, v);
    }

    /// A counter (or a histogram's part, with `suffix`), kept from going
    /// back.
    pub fn counter(&mut self, family: &'static str, suffix: &str, extra: &[(&str, &str)], v: f64) {
        let l = with_vm(&self.who, extra);
        let v = self
            .floors
            .at_least(series(&format!("{family}{suffix}"), &l), v);
        self.x.sample(family, suffix, &l, v);
    }
}

/// Every family the exporter writes, with its type and help, in order.
pub const FAMILIES: [(&str, &str, &str); 23] = [
    ("bootscope_vm_up", "gauge", "1 while the VMM process runs, 0 for a VM that ended (kept for a while so its last counts are scraped)."),
    ("bootscope_vm_start_time_seconds", "gauge", "When the VMM process started, in seconds since the Unix epoch."),
    ("bootscope_vm_followed_since_seconds", "gauge", "When the exporter started following the VM (counters count from then), in seconds since the Unix epoch."),
    ("bootscope_vm_exits_total", "counter", "VM exits by reason, from the profiler's exit source."),
    ("bootscope_vm_exit_latency_seconds", "histogram", "Time from a VM exit to the next entry, by exit reason."),
    ("bootscope_vm_vcpu_exits_total", "counter", "VM exits by vCPU and reason (--label vcpu)."),
    ("bootscope_vm_phase_exits_total", "counter", "VM exits by boot phase and reason (--label phase)."),
    ("bootscope_vm_port_io_total", "counter", "Guest port I/O by port and direction (--label port)."),
    ("bootscope_vm_kvm_stats_exits_total", "counter", "VM exits by KVM's own statistics (KVM_GET_STATS_FD), for cross-checking."),
    ("bootscope_vm_page_faults_total", "counter", "Page faults: guest side (KVM MMU) and host side (the VMM's threads)."),
    ("bootscope_vm_numa_pages_total", "counter", "Pages the VMM's threads allocated, on the NUMA node of the allocating CPU (local) or another (remote)."),
    ("bootscope_vm_prealloc_threads", "gauge", "Preallocation threads that ran on a CPU of each NUMA node."),
    ("bootscope_vm_prealloc_cpu_seconds_total", "counter", "CPU time of the preallocation threads on each NUMA node."),
    ("bootscope_vm_prealloc_pages_total", "counter", "Pages the preallocation threads allocated, local or remote to the allocating CPU's node."),
    ("bootscope_vm_boot_phase_seconds", "gauge", "Duration of each boot phase seen since the exporter followed the VM."),
    ("bootscope_vm_thread_runqueue_wait_seconds_total", "counter", "Time each thread of the VMM was runnable but waited for a host CPU (--collect sched)."),
    ("bootscope_vm_thread_runqueue_waits_total", "counter", "Times each thread of the VMM waited in a run queue for a host CPU (--collect sched)."),
    ("bootscope_vm_runqueue_wait_seconds", "histogram", "Run-queue waits of the VMM's threads by thread role (vcpu, prealloc, main, other) (--collect sched)."),
    ("bootscope_vm_phase_runqueue_wait_seconds_total", "counter", "Run-queue wait of each thread by boot phase (--collect sched, --label phase)."),
    ("bootscope_exporter_lost_events_total", "counter", "Events the kernel could not hand over to the exporter (ring buffer full)."),
    ("bootscope_exporter_map_overflows_total", "counter", "Events not counted because an eBPF map was full."),
    ("bootscope_exporter_bpf_program_runs_total", "counter", "Runs of the exporter's eBPF programs, by collector (one set for every VM; they run on every process's events)."),
    ("bootscope_exporter_bpf_program_run_seconds_total", "counter", "Time the kernel spent running the exporter's eBPF programs, by collector."),
];

/// Declares every family of [`FAMILIES`].
pub fn declare_families(x: &mut Exposition) {
    for (name, kind, help) in FAMILIES {
        x.family(name, kind, help);
    }
}

/// Nanoseconds as seconds.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The exit counts and latency histograms of a profile.
fn write_exits(w: &mut VmWriter, p: &Profile, extra: ExtraLabels) {
    let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &p.exits.by_reason {
        *by_reason.entry(r.reason.as_str()).or_default() += r.count;
    }
    for (reason, n) in &by_reason {
        let l = [("reason", *reason), ("source", p.exits.source.as_str())];
        w.counter("bootscope_vm_exits_total", "", &l, *n as f64);
    }
    // Latency: buckets merged by upper bound, cumulative.
    let mut hists: BTreeMap<&str, (BTreeMap<u64, u64>, Option<u64>)> = BTreeMap::new();
    for r in p
        .exits
        .by_reason
        .iter()
        .filter(|r| !r.latency_hist.is_empty())
    {
        let h = hists
            .entry(r.reason.as_str())
            .or_insert((BTreeMap::new(), Some(0)));
        for b in &r.latency_hist {
            *h.0.entry(b.hi_ns).or_default() += b.count;
        }
        h.1 = h.1.zip(r.latency_total_ns).map(|(a, b)| a + b);
    }
    let family = "bootscope_vm_exit_latency_seconds";
    for (reason, (buckets, sum)) in &hists {
        let mut cumulative = 0;
        for (hi, n) in buckets {
            cumulative += n;
            let le = format!("{}", secs(*hi));
            w.counter(
                family,
                "_bucket",
                &[("reason", reason), ("le", &le)],
                cumulative as f64,
            );
        }
        w.counter(
            family,
            "_bucket",
            &[("reason", reason), ("le", "+Inf")],
            cumulative as f64,
        );
        if let Some(sum) = sum {
            w.counter(family, "_sum", &[("reason", reason)], secs(*sum));
        }
        w.counter(family, "_count", &[("reason", reason)], cumulative as f64);
    }
    if extra.vcpu {
        for v in &p.exits.by_vcpu {
            let vcpu = v.vcpu.to_string();
            for (reason, n) in &v.by_reason {
                let l = [("vcpu", vcpu.as_str()), ("reason", reason.as_str())];
                w.counter("bootscope_vm_vcpu_exits_total", "", &l, *n as f64);
            }
        }
    }
    if extra.phase {
        for ph in &p.exits.by_phase {
            for (reason, n) in &ph.by_reason {
                let l = [("phase", ph.phase.as_str()), ("reason", reason.as_str())];
                w.counter("bootscope_vm_phase_exits_total", "", &l, *n as f64);
            }
        }
    }
    if extra.port {
        let mut ports: BTreeMap<(u32, &str), u64> = BTreeMap::new();
        for s in &p.exits.pio {
            *ports.entry((s.port, s.direction.as_str())).or_default() += s.count;
        }
        for ((port, dir), n) in ports {
            let port = format!("{port:#x}");
            let l = [("port", port.as_str()), ("direction", dir)];
            w.counter("bootscope_vm_port_io_total", "", &l, n as f64);
        }
    }
    if let Some(n) = p.exits.kvm_stats_exits {
        w.counter("bootscope_vm_kvm_stats_exits_total", "", &[], n as f64);
    }
}

/// Preallocation threads: where they ran and where their pages landed.
fn write_prealloc(w: &mut VmWriter, p: &Profile) {
    let mut threads: BTreeMap<u32, u64> = BTreeMap::new();
    let mut cpu_ns: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut local, mut remote) = (0u64, 0u64);
    for t in p.threads.iter().filter(|t| t.role == "prealloc") {
        for node in &t.nodes {
            *threads.entry(*node).or_default() += 1;
        }
        for c in &t.cpus {
            *cpu_ns.entry(c.node).or_default() += c.run_ns;
        }
        local += t.pages_local;
        remote += t.pages_remote;
    }
    for (node, n) in &threads {
        let node = node.to_string();
        w.gauge(
            "bootscope_vm_prealloc_threads",
            &[("node", &node)],
            *n as f64,
        );
    }
    for (node, ns) in &cpu_ns {
        let node = node.to_string();
        let l = [("node", node.as_str())];
        w.counter("bootscope_vm_prealloc_cpu_seconds_total", "", &l, secs(*ns));
    }
    for (locality, n) in [("local", local), ("remote", remote)] {
        let l = [("locality", locality)];
        w.counter("bootscope_vm_prealloc_pages_total", "", &l, n as f64);
    }
}

/// Run-queue waits (`--collect sched`): each thread's total and count,
/// a histogram per thread role, and with `--label phase` each thread's
/// wait per boot phase.
fn write_runqueue_waits(w: &mut VmWriter, p: &Profile, extra: ExtraLabels) {
    let mut by_role: BTreeMap<&str, (BTreeMap<u64, u64>, u64)> = BTreeMap::new();
    for t in &p.threads {
        let Some(wait) = &t.runqueue_wait else {
            continue;
        };
        let tid = t.tid.to_string();
        let who = [
            ("tid", tid.as_str()),
            ("thread", t.name.as_str()),
            ("role", t.role.as_str()),
        ];
        let family = "bootscope_vm_thread_runqueue_wait_seconds_total";
        w.counter(family, "", &who, secs(wait.total_ns));
        let family = "bootscope_vm_thread_runqueue_waits_total";
        w.counter(family, "", &who, wait.count as f64);
        let role = by_role.entry(t.role.as_str()).or_default();
        for b in &wait.hist {
            *role.0.entry(b.hi_ns).or_default() += b.count;
        }
        role.1 += wait.total_ns;
        if extra.phase {
            for ph in &wait.by_phase {
                let l = [who[0], who[1], ("phase", ph.phase.as_str())];
                let family = "bootscope_vm_phase_runqueue_wait_seconds_total";
                w.counter(family, "", &l, secs(ph.total_ns));
            }
        }
    }
    let family = "bootscope_vm_runqueue_wait_seconds";
    for (role, (buckets, sum)) in &by_role {
        let mut cumulative = 0;
        for (hi, n) in buckets {
            cumulative += n;
            let le = format!("{}", secs(*hi));
            let l = [("role", *role), ("le", le.as_str())];
            w.counter(family, "_bucket", &l, cumulative as f64);
        }
        let l = [("role", *role), ("le", "+Inf")];
        w.counter(family, "_bucket", &l, cumulative as f64);
        w.counter(family, "_sum", &[("role", role)], secs(*sum));
        w.counter(family, "_count", &[("role", role)], cumulative as f64);
    }
}

/// Writes every series of one VM from its latest profile; `up` says
/// whether it still runs, `followed_since_s` when following began.
pub fn write_vm(
    w: &mut VmWriter,
    p: &Profile,
    up: bool,
    start_s: f64,
    followed_since_s: f64,
    extra: ExtraLabels,
) {
    w.gauge("bootscope_vm_up", &[], if up { 1.0 } else { 0.0 });
    w.gauge("bootscope_vm_start_time_seconds", &[], start_s);
    w.gauge("bootscope_vm_followed_since_seconds", &[], followed_since_s);
    write_exits(w, p, extra);
    for (side, n) in [
        ("guest", p.page_faults.guest_total),
        ("host", p.page_faults.host_total),
    ] {
        w.counter(
            "bootscope_vm_page_faults_total",
            "",
            &[("side", side)],
            n as f64,
        );
    }
    for (locality, n) in [
        ("local", p.numa.pages_local),
        ("remote", p.numa.pages_remote),
    ] {
        let l = [("locality", locality)];
        w.counter("bootscope_vm_numa_pages_total", "", &l, n as f64);
    }
    write_prealloc(w, p);
    write_runqueue_waits(w, p, extra);
    let mut phases: BTreeMap<&str, u64> = BTreeMap::new();
    for ph in &p.phases {
        *phases.entry(ph.name.as_str()).or_default() += ph.end_ns.saturating_sub(ph.start_ns);
    }
    for (phase, ns) in phases {
        w.gauge(
            "bootscope_vm_boot_phase_seconds",
            &[("phase", phase)],
            secs(ns),
        );
    }
}

/// The families of the one set of eBPF programs that follows every VM:
/// events it lost, and what its programs cost (with `--bpf-stats`), from
/// the profile of every VM together.
pub fn write_collector(x: &mut Exposition, all: &Profile) {
    x.sample(
        "bootscope_exporter_lost_events_total",
        "",
        &[],
        all.lost_events as f64,
    );
    x.sample(
        "bootscope_exporter_map_overflows_total",
        "",
        &[],
        all.map_overflows as f64,
    );
    let mut cost: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (s, runs, ns) in all.timed_sources() {
        let c = cost.entry(s.collector.as_str()).or_default();
        c.0 += runs;
        c.1 += ns;
    }
    for (collector, (runs, ns)) in cost {
        let l = [("collector", collector)];
        x.sample(
            "bootscope_exporter_bpf_program_runs_total",
            "",
            &l,
            runs as f64,
        );
        x.sample(
            "bootscope_exporter_bpf_program_run_seconds_total",
            "",
            &l,
            secs(ns),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_stay_together_and_counters_never_go_back() {
        let mut floors = Floors::default();
        let mut render = |count: u64| {
            let mut x = Exposition::default();
            declare_families(&mut x);
            for pid in ["1", "2"] {
                let mut w = VmWriter {
                    x: &mut x,
                    floors: &mut floors,
                    who: VmLabels {
                        pid,
                        comm: "qemu",
                        vm: "a\"b",
                    },
                };
                w.gauge("bootscope_vm_up", &[], 1.0);
                w.counter(
                    "bootscope_vm_exits_total",
                    "",
                    &[("reason", "io")],
                    count as f64,
                );
            }
            x.render()
        };
        let first = render(10);
        let exits: Vec<&str> = first
            .lines()
            .filter(|l| l.starts_with("bootscope_vm_exits_total"))
            .collect();
        assert_eq!(
            exits,
            [
                r#"bootscope_vm_exits_total{pid="1",comm="qemu",vm="a\"b",reason="io"} 10"#,
                r#"bootscope_vm_exits_total{pid="2",comm="qemu",vm="a\"b",reason="io"} 10"#,
            ]
        );
        // The two VMs' up lines come before the exits family, together.
        let up = first.find("bootscope_vm_up{pid=\"2\"").unwrap();
        assert!(up < first.find("# TYPE bootscope_vm_exits_total").unwrap());
        assert!(render(7).contains(r#"reason="io"} 10"#));
        assert!(render(12).contains(r#"reason="io"} 12"#));
    }

    /// Every bootscope metric the Grafana dashboard queries is one the
    /// exporter writes.
    #[test]
    fn the_dashboard_queries_exported_metrics() {
        let dash = include_str!("../../docs/grafana-bootscope.json");
        let mut names: Vec<&str> = dash
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("bootscope_") || w.starts_with("process_"))
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(names.len() >= 8, "{names:?}");
        for n in names {
            let family = n.strip_suffix("_bucket").unwrap_or(n);
            let known = FAMILIES.iter().any(|(name, _, _)| *name == family)
                || ["bootscope_exporter_vms", "process_cpu_seconds_total"].contains(&family);
            assert!(
                known,
                "the dashboard queries {n}, which the exporter does not write"
            );
        }
    }

    #[test]
    fn runqueue_waits_per_thread_role_and_phase() {
        use bootscope_profiler::profile::{HistBucket, PhaseWait, RunqueueWait, ThreadProfile};
        let thread = |tid: u32, name: &str, role: &str, hist: Vec<HistBucket>| ThreadProfile {
            tid,
            name: name.into(),
            role: role.into(),
            runqueue_wait: Some(RunqueueWait {
                total_ns: 3_000_000,
                count: hist.iter().map(|b| b.count).sum(),
                hist,
                by_phase: vec![PhaseWait {
                    phase: "kernel".into(),
                    total_ns: 3_000_000,
                    count: 2,
                    hist: Vec::new(),
                }],
            }),
            ..Default::default()
        };
        let b = |lo_ns: u64, count: u64| HistBucket {
            lo_ns,
            hi_ns: lo_ns * 2,
            count,
        };
        let mut p = Profile::new();
        p.threads = vec![
            thread(11, "vcpu0", "vcpu", vec![b(1 << 20, 1), b(1 << 21, 1)]),
            thread(12, "vcpu1", "vcpu", vec![b(1 << 20, 2)]),
            ThreadProfile {
                tid: 10,
                name: "main".into(),
                ..Default::default()
            },
        ];
        let mut x = Exposition::default();
        declare_families(&mut x);
        let mut floors = Floors::default();
        let mut w = VmWriter {
            x: &mut x,
            floors: &mut floors,
            who: VmLabels {
                pid: "10",
                comm: "bootscope",
                vm: "bootscope-10",
            },
        };
        let extra = ExtraLabels {
            phase: true,
            ..Default::default()
        };
        write_runqueue_waits(&mut w, &p, extra);
        let out = x.render();
        let vm = r#"pid="10",comm="bootscope",vm="bootscope-10""#;
        for line in [
            format!(
                r#"bootscope_vm_thread_runqueue_wait_seconds_total{{{vm},tid="11",thread="vcpu0",role="vcpu"}} 0.003"#
            ),
            format!(
                r#"bootscope_vm_thread_runqueue_waits_total{{{vm},tid="12",thread="vcpu1",role="vcpu"}} 2"#
            ),
            format!(
                r#"bootscope_vm_runqueue_wait_seconds_bucket{{{vm},role="vcpu",le="0.002097152"}} 3"#
            ),
            format!(r#"bootscope_vm_runqueue_wait_seconds_bucket{{{vm},role="vcpu",le="+Inf"}} 4"#),
            format!(r#"bootscope_vm_runqueue_wait_seconds_sum{{{vm},role="vcpu"}} 0.006"#),
            format!(
                r#"bootscope_vm_phase_runqueue_wait_seconds_total{{{vm},tid="11",thread="vcpu0",phase="kernel"}} 0.003"#
            ),
        ] {
            assert!(out.lines().any(|l| l == line), "no {line} in\n{out}");
        }
        // A thread without waits (collector off) has no series.
        assert!(!out.contains(r#"tid="10""#), "{out}");
    }

    #[test]
    fn label_lists() {
        let l = ExtraLabels::parse("vcpu, port").unwrap();
        assert!(l.vcpu && l.port && !l.phase);
        assert!(ExtraLabels::parse("cpu").unwrap_err().contains("\"cpu\""));
    }
}
