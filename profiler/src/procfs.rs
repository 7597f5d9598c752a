//! A profile of this process without eBPF, for a live view where the
//! collectors cannot run (not root, `--no-profile`): the marks its VMM
//! recorded, `/proc/self` (threads, where they ran, host page faults) and
//! KVM's exit count from its binary statistics.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::collector::thread_role;
use crate::kvm_stats::KvmStatsReader;
use crate::profile::{CpuResidency, DataSource, Mark, Profile, Sample, Target, ThreadProfile};
use crate::topology::Topology;

/// A profile of this process without eBPF: the VMM's marks, `/proc/self`
/// and KVM's exit count.
pub struct ProcfsProfile {
    command: Vec<String>,
    pid: u32,
    topology: Topology,
    kvm: KvmStatsReader,
    threads: BTreeMap<u32, ThreadProfile>,
    samples: Vec<Sample>,
    ticks_per_sec: u64,
    last_rescan: Option<Instant>,
}

/// Samples kept by the procfs profile (the TUI shows the last ones).
const MAX_SAMPLES: usize = 1200;

/// Fields of a /proc stat line after the command name: index k holds field
/// k + 3 of proc(5).
fn stat_fields(path: &str) -> Option<Vec<u64>> {
    let s = std::fs::read_to_string(path).ok()?;
    let rest = s.rsplit_once(')')?.1;
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

const STAT_MINFLT: usize = 7;
const STAT_MAJFLT: usize = 9;
const STAT_UTIME: usize = 11;
const STAT_STIME: usize = 12;
const STAT_PROCESSOR: usize = 36;

impl ProcfsProfile {
    /// `command`: this process's command line, for the profile's target.
    pub fn new(command: Vec<String>) -> Self {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            command,
            pid: std::process::id(),
            topology: Topology::read(Path::new("/")),
            kvm: KvmStatsReader::new(),
            threads: BTreeMap::new(),
            samples: Vec::new(),
            ticks_per_sec: if ticks > 0 { ticks as u64 } else { 100 },
            last_rescan: None,
        }
    }

    /// Reads every live thread's name, run time and CPU from /proc into
    /// `threads` (run time since the last look filed under its CPU now).
    fn read_threads(&mut self, now: u64) {
        let pid = self.pid;
        let tick_ns = 1_000_000_000 / self.ticks_per_sec;
        for tid in bootscope_model::proc::threads_of(pid) {
            let base = format!("/proc/{pid}/task/{tid}");
            let Some(stat) = stat_fields(&format!("{base}/stat")) else {
                continue;
            };
            let name = std::fs::read_to_string(format!("{base}/comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            let field = |i: usize| stat.get(i).copied().unwrap_or(0);
            let run_ns = (field(STAT_UTIME) + field(STAT_STIME)) * tick_ns;
            let cpu = field(STAT_PROCESSOR) as u32;
            let t = self.threads.entry(tid).or_insert_with(|| ThreadProfile {
                tid,
                tgid: pid,
                start_ns: now,
                ..Default::default()
            });
            t.role = thread_role(&name, tid, pid).into();
            t.name = name;
            t.end_ns = now;
            // Run time since the last look is filed under the CPU the
            // thread is on now: a sampled view of where it ran.
            let delta = run_ns.saturating_sub(t.run_ns);
            t.run_ns = run_ns;
            let node = self.topology.cpu_node(cpu).unwrap_or(0);
            match t.cpus.iter_mut().find(|c| c.cpu == cpu) {
                Some(c) => c.run_ns += delta,
                None => t.cpus.push(CpuResidency {
                    cpu,
                    node,
                    run_ns: delta,
                }),
            }
            t.cpus.sort_by_key(|c| c.cpu);
            let mut nodes: Vec<u32> = t.cpus.iter().map(|c| c.node).collect();
            nodes.sort_unstable();
            nodes.dedup();
            t.nodes = nodes;
        }
    }

    /// The profile as of `now` (ns on the VMM's clock), with the VMM's
    /// `marks` so far; `why`: why eBPF is not profiling.
    pub fn build(&mut self, now: u64, marks: Vec<Mark>, why: &str) -> Profile {
        let pid = self.pid;
        let mut p = Profile::new();
        p.duration_ns = now;
        p.target = Target {
            kind: "self".into(),
            command: self.command.clone(),
            pid,
            name: std::fs::read_to_string("/proc/self/comm")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            ..Default::default()
        };
        p.host.cpus = self.topology.cpu_nodes.len() as u32;
        p.host.numa_nodes = self.topology.nodes.clone();
        // Marks and phases, on the VMM's clock.
        p.marks = marks;
        p.phases = crate::phases::derive_spans(&p.marks, now);
        // Threads: alive ones from /proc; ended ones keep their last state.
        self.read_threads(now);
        p.threads = self.threads.values().cloned().collect();
        // Host page faults of the whole process.
        if let Some(stat) = stat_fields(&format!("/proc/{pid}/stat")) {
            let field = |i: usize| stat.get(i).copied().unwrap_or(0);
            p.page_faults.host_total = field(STAT_MINFLT) + field(STAT_MAJFLT);
        }
        // KVM's own exit count (no reasons without eBPF).
        let rescan = self
            .last_rescan
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(500));
        if rescan {
            self.last_rescan = Some(Instant::now());
        }
        self.kvm.poll(&[pid], rescan);
        let (kvm_status, kvm_detail) = self.kvm.describe();
        if let Some(n) = self.kvm.total() {
            p.exits.total = n;
            p.exits.kvm_stats_exits = Some(n);
            p.exits.source = format!("kvm_stats:{}", self.kvm.method());
            p.exits.isa = "unknown".into();
        }
        self.samples.push(Sample {
            t_ns: now,
            exits_total: p.exits.total,
            exits_by_reason: Default::default(),
            guest_faults: 0,
            host_faults: p.page_faults.host_total,
        });
        if self.samples.len() > MAX_SAMPLES {
            self.samples.drain(..self.samples.len() - MAX_SAMPLES);
        }
        p.samples = self.samples.clone();
        let source = |name: &str, status: &str, detail: String, collector: &str| DataSource {
            name: name.into(),
            status: status.into(),
            detail,
            events: 0,
            collector: collector.into(),
            ..Default::default()
        };
        p.sources = vec![
            source("ebpf", "failed", why.to_string(), "all"),
            source(
                "vmm",
                "attached",
                "marks recorded by bootscope's VMM".into(),
                "phases",
            ),
            source(
                "procfs",
                "fallback",
                "threads, their CPUs (sampled) and host page faults from /proc/self".into(),
                "threads",
            ),
            source(
                &format!("kvm_stats:{}", self.kvm.method()),
                kvm_status,
                kvm_detail,
                "exits",
            ),
        ];
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procfs_profile_of_this_process() {
        let mark = |name: &str, t_ns| Mark {
            name: name.into(),
            source: bootscope_model::mark::MarkSource::Vmm,
            t_ns,
            value: None,
            tgid: Some(std::process::id()),
            guest_rip: None,
        };
        let marks = vec![mark("vmm: process start", 0), mark("vmm: first KVM_RUN", 5)];
        let mut p = ProcfsProfile::new(vec!["test".into()]);
        let a = p.build(10, marks.clone(), "test");
        let b = p.build(20, marks, "test");
        assert_eq!(a.target.pid, std::process::id());
        assert_eq!(a.target.command, ["test"]);
        assert!(!b.threads.is_empty());
        assert!(b.threads.iter().any(|t| t.role == "main"));
        assert_eq!(b.phases.len(), 2, "vmm setup, guest boot: {:?}", b.phases);
        assert_eq!(b.samples.len(), 2);
        assert!(b.page_faults.host_total > 0);
        assert!(b.sources.iter().any(|s| s.status == "fallback"));
    }
}
