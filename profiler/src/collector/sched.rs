//! The sched collector's part (`--collect sched`, bpf/sched.bpf.c): how
//! long each thread of the target waited for a host CPU, by boot phase and
//! as a log2 histogram. The kernel keeps one histogram per {process,
//! thread, phase} in `sched_waits`; this part seeds the threads the
//! programs are to watch and turns those histograms into
//! [`RunqueueWait`]s.
//!
//! A thread's wait is counted when the switch that runs it ends it; a new
//! thread's first wait when it is first switched out (its process is known
//! only then). What is read while a thread runs misses at most that one
//! wait. A run that no seen wait led to (its queueing not seen: a program
//! run the kernel skipped, a thread seeded while it waited) is counted
//! apart and said in the switch program's source detail: the kernel's
//! account has that wait, the profile does not.

use std::collections::BTreeMap;

use super::maps::{hash_entries, percpu_sum, SCHED_TASKS_MAP};
use super::object::BpfObject;
use super::tasks::Tasks;
use super::thread_info::{read_comm, ThreadInfo};
use crate::bpf::{self, BsHist, BsSchedKey, BsSchedTask, Source};
use crate::phases::PhaseNames;
use crate::profile::{PhaseWait, RunqueueWait};
use bootscope_model::hist;

/// The map of waits (`struct bs_sched_key` -> `struct bs_hist`).
pub(super) const WAITS_MAP: &str = "sched_waits";

/// The per-CPU count of runs of watched threads whose wait was not seen
/// to begin (bpf/sched.bpf.c `sched_unseen`).
const UNSEEN_MAP: &str = "sched_unseen";

/// The switch program's source detail (`detail`, what it feeds), and how
/// many waits the kernel's account has that the profile lacks (runs of
/// watched threads that no seen wait led to).
pub(super) fn switch_detail(bpf: &BpfObject, detail: &str) -> String {
    let unseen = percpu_sum(bpf, UNSEEN_MAP, 0);
    format!(
        "{detail}; {unseen} runs of watched threads came after a wait not seen to begin, \
         not in runqueue_wait (schedstat counts them)"
    )
}

/// Adds one {thread, phase} histogram to a thread's waits.
fn add(wait: &mut RunqueueWait, phase: String, h: &BsHist) {
    wait.total_ns = wait.total_ns.saturating_add(h.total_ns);
    wait.count = wait.count.saturating_add(h.count);
    let mut slots: Vec<u64> = wait_slots(&wait.hist);
    hist::add_slots(&mut slots, &h.slots);
    wait.hist = hist::buckets(&slots);
    wait.by_phase.push(PhaseWait {
        phase,
        total_ns: h.total_ns,
        count: h.count,
        hist: hist::buckets(&h.slots),
    });
}

/// The slot array back from non-empty buckets.
fn wait_slots(buckets: &[crate::profile::HistBucket]) -> Vec<u64> {
    let mut slots = vec![0; bpf::HIST_SLOTS];
    for b in buckets {
        slots[hist::slot(b.lo_ns)] += b.count;
    }
    slots
}

/// Each thread's waits (with its process), from the entries of
/// `sched_waits`; phases named by `phase_name`, in the order of their
/// index (the order the process entered them).
pub fn thread_waits(
    entries: &[(BsSchedKey, BsHist)],
    phase_name: impl Fn(u32) -> String,
) -> BTreeMap<u32, (u32, RunqueueWait)> {
    let mut sorted: Vec<&(BsSchedKey, BsHist)> = entries.iter().collect();
    sorted.sort_by_key(|(k, _)| (k.tid, k.phase, k.tgid));
    let mut out: BTreeMap<u32, (u32, RunqueueWait)> = BTreeMap::new();
    for (k, h) in sorted {
        let (_, wait) = out
            .entry(k.tid)
            .or_insert_with(|| (k.tgid, Default::default()));
        add(wait, phase_name(k.phase), h);
    }
    out
}

/// Names the threads the sched programs watch that nothing else named
/// (in `tasks`, started at `now_ns`): without the threads collector,
/// threads born while profiled are known to these programs only. Read from
/// procfs while they live (at each sample), so that the profile still says
/// which is a vCPU.
pub(super) fn name_watched_threads(bpf: &BpfObject, tasks: &mut Tasks, now_ns: u64) {
    for (tid, task) in hash_entries::<u32, BsSchedTask>(bpf, SCHED_TASKS_MAP) {
        if tasks.threads.contains_key(&tid) {
            continue;
        }
        // A task not yet switched out has no process in its entry: one
        // of the followed processes has it.
        let mut owners = tasks
            .tgids
            .iter()
            .copied()
            .filter(|&p| task.tgid == 0 || p == task.tgid);
        let found = owners.find_map(|p| Some((p, read_comm(p, tid)?)));
        if let Some((tgid, name)) = found {
            let info = ThreadInfo {
                tgid,
                name,
                start_ns: now_ns,
                ..Default::default()
            };
            tasks.threads.insert(tid, info);
        }
    }
}

/// Each thread's run-queue waits from the entries of `sched_waits`, phases
/// named by `phase_names`; adds the waits to the switch program's events.
pub(super) fn runqueue_waits(
    entries: &[(BsSchedKey, BsHist)],
    phase_names: &PhaseNames,
    events: &mut [u64; bpf::SOURCE_COUNT],
) -> BTreeMap<u32, (u32, RunqueueWait)> {
    events[Source::SchedWaitSwitch as usize] += entries.iter().map(|(_, h)| h.count).sum::<u64>();
    thread_waits(entries, |p| phase_names.name(p))
}

#[cfg(test)]
mod tests {
    use super::super::maps::hist_of;
    use super::*;

    fn key(tgid: u32, tid: u32, phase: u32) -> BsSchedKey {
        BsSchedKey { tgid, tid, phase }
    }

    #[test]
    fn waits_add_up_per_thread_and_phase() {
        let names = ["before first mark", "kernel", "userspace"];
        let entries = vec![
            (key(10, 12, 2), hist_of(&[1_000, 3_000])),
            (key(10, 11, 1), hist_of(&[300_000_000])),
            (key(10, 11, 0), hist_of(&[1_500, 1_600, 5])),
            (key(10, 12, 1), hist_of(&[2_000])),
        ];
        let w = thread_waits(&entries, |p| names[p as usize].to_string());
        assert_eq!(w.len(), 2);
        let (tgid, vcpu0) = &w[&11];
        assert_eq!(*tgid, 10);
        assert_eq!(vcpu0.total_ns, 300_003_105);
        assert_eq!(vcpu0.count, 4);
        // Phases in the order the process entered them.
        let phases: Vec<&str> = vcpu0.by_phase.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(phases, ["before first mark", "kernel"]);
        assert_eq!(vcpu0.by_phase[1].total_ns, 300_000_000);
        // The thread's histogram is the sum of its phases'.
        let buckets: Vec<(u64, u64)> = vcpu0.hist.iter().map(|b| (b.lo_ns, b.count)).collect();
        assert_eq!(buckets, [(4, 1), (1024, 2), (1 << 28, 1)]);
        let total: u64 = vcpu0.hist.iter().map(|b| b.count).sum();
        assert_eq!(total, vcpu0.count);
        let (_, other) = &w[&12];
        assert_eq!((other.total_ns, other.count), (6_000, 3));
        assert_eq!(other.by_phase.len(), 2);
        // No entries, no threads.
        assert!(thread_waits(&[], |p| p.to_string()).is_empty());
    }

    #[test]
    fn waits_serialize_as_the_schema_says() {
        let entries = vec![(key(1, 2, 0), hist_of(&[0, 7]))];
        let w = thread_waits(&entries, |_| "kernel".into());
        let v = serde_json::to_value(&w[&2].1).unwrap();
        assert_eq!(v["total_ns"], 7);
        assert_eq!(v["count"], 2);
        assert_eq!(v["hist"][0]["lo_ns"], 0);
        assert_eq!(v["hist"][0]["hi_ns"], 2);
        assert_eq!(v["hist"][1]["lo_ns"], 4);
        assert_eq!(v["by_phase"][0]["phase"], "kernel");
        assert_eq!(v["by_phase"][0]["hist"].as_array().unwrap().len(), 2);
        let back: RunqueueWait = serde_json::from_value(v).unwrap();
        assert_eq!(back, w[&2].1);
    }
}
