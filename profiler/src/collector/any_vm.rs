//! Following every VM of the host with one set of programs
//! ([`TargetSpec::AnyVm`](super::TargetSpec::AnyVm), `bootscope exporter`):
//! the programs of KVM's own events follow a process from its first one
//! (`follow_any_vm`), the caller may add processes it found itself
//! ([`Collector::follow`](super::Collector::follow)), and each process's
//! counts are read apart
//! ([`Collector::snapshot_each`](super::Collector::snapshot_each)) from
//! maps that hold them all, keyed by process. A process that ended is
//! forgotten ([`Collector::forget`](super::Collector::forget)) once its
//! final counts are read, so that the maps do not fill up with the dead
//! and a pid the kernel hands on starts from zero.
//!
//! This part keeps the VMs followed and which process belongs to which,
//! and reads and clears the maps by process; the state it is part of
//! puts it together with the tasks, the event log and the sampler.

use std::any::Any;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::mem::{offset_of, size_of};
use std::path::PathBuf;

use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::Pod;
use bootscope_model::proc::{argv_of, stat_field, threads_of};

use super::maps::{hash_entries, map_error, seed_sched_tasks, SCHED_TASKS_MAP};
use super::object::BpfObject;
use super::thread_info::read_comm;
use crate::bpf;
use crate::error::ProfilerError;
use crate::phases;
use crate::profile::{Profile, Target};

/// A process followed because it runs a guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowedVm {
    /// Its process id.
    pub tgid: u32,
    /// Its name (`/proc/PID/comm` when it was first seen, else the name of
    /// the thread that ran the guest).
    pub comm: String,
    /// Its command line, read when it was first followed (empty if it was
    /// gone by then).
    pub cmdline: Vec<String>,
    /// When the process started, in clock ticks since the host booted
    /// (`/proc/PID/stat` field 22), read when it was first followed.
    pub start_ticks: Option<u64>,
    /// When it was first followed (ns since the collector started).
    pub since_ns: u64,
    /// When it ended, if it did.
    pub ended_ns: Option<u64>,
}

/// Maps whose key starts with the process id (`__u32 tgid` first in every
/// one of these key structs; checked by a test against the Rust types).
const TGID_KEYED: [&str; 15] = [
    "exit_stats",
    "vcpu_tids",
    "uexit_counts",
    "pio_counts",
    "mmio_counts",
    "msr_counts",
    "cpuid_counts",
    "emulate_counts",
    "exit_sites",
    "npf_ranges",
    "fault_counts",
    "numa_pages",
    "marker_counts",
    "marker_last",
    "sched_waits",
];

fn u32_at<T: Pod>(t: &T, offset: usize) -> u32 {
    assert!(offset + 4 <= size_of::<T>(), "a u32 field inside the type");
    // SAFETY: T is plain old data of at least offset + 4 bytes (asserted);
    // the read is unaligned-safe.
    unsafe {
        (t as *const T)
            .cast::<u8>()
            .add(offset)
            .cast::<u32>()
            .read_unaligned()
    }
}

/// The process an entry of map `name` belongs to; None for maps shared by
/// every process (the time slots, per-CPU tables).
fn entry_tgid<K: Pod, V: Pod>(name: &str, k: &K, v: &V) -> Option<u32> {
    match name {
        "exit_start" => Some(u32_at(v, offset_of!(bpf::BsExitStart, tgid))),
        "run_time" => Some(u32_at(v, offset_of!(bpf::BsRunVal, tgid))),
        "sched_tasks" => Some(u32_at(v, offset_of!(bpf::BsSchedTask, tgid))),
        "threads" => Some(u32_at(v, 0)),
        n if TGID_KEYED.contains(&n) => Some(u32_at(k, 0)),
        _ => None,
    }
}

/// How long after a VM is first followed its KVM statistics are looked
/// for on every tick.
pub(super) const HOLD_WINDOW_NS: u64 = 10_000_000_000;

/// Every VM's mode: the VMs followed apart and the processes they started.
#[derive(Default)]
pub(super) struct AnyVm {
    /// The VMs followed apart ([`super::TargetSpec::AnyVm`]), by process.
    pub(super) vms: BTreeMap<u32, FollowedVm>,
    /// Processes started by a followed VM: the VM (their root).
    pub(super) roots: HashMap<u32, u32>,
    /// While profiles are built per VM: the maps read once, and whose
    /// profile is being built.
    pub(super) view: Option<View>,
}

impl AnyVm {
    /// The followed VM a process belongs to: itself, or the VM that started
    /// it.
    pub(super) fn root_of(&self, tgid: u32) -> u32 {
        self.roots.get(&tgid).copied().unwrap_or(tgid)
    }

    /// Files process `child`, started by `parent`, under `parent`'s VM
    /// (while any VM is followed apart).
    pub(super) fn note_child(&mut self, child: u32, parent: u32) {
        if !self.vms.is_empty() && parent != 0 {
            let root = self.root_of(parent);
            self.roots.insert(child, root);
        }
    }

    /// Notes that followed VM `tgid` ended at `t_ns` (the first end kept).
    pub(super) fn note_end(&mut self, tgid: u32, t_ns: u64) {
        if let Some(vm) = self.vms.get_mut(&tgid) {
            vm.ended_ns.get_or_insert(t_ns);
        }
    }

    /// Notes a VM followed from now on (seen by the programs, or added by
    /// the caller), named by its `comm` now, else by `thread_name`.
    pub(super) fn note_vm(&mut self, tgid: u32, thread_name: String, t_ns: u64) {
        self.vms.entry(tgid).or_insert_with(|| {
            let dir = PathBuf::from(format!("/proc/{tgid}"));
            let start_ticks = std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|s| stat_field(&s, 22)?.parse().ok());
            let cmdline = argv_of(&dir);
            FollowedVm {
                tgid,
                comm: read_comm(tgid, tgid).unwrap_or(thread_name),
                cmdline,
                start_ticks,
                since_ns: t_ns,
                ended_ns: None,
            }
        });
    }

    /// Live VMs followed less than [`HOLD_WINDOW_NS`] before `now_ns` of
    /// which `held` does not hold KVM's statistics yet.
    pub(super) fn vms_to_hold(&self, now_ns: u64, held: impl Fn(u32) -> bool) -> Vec<u32> {
        self.vms
            .values()
            .filter(|v| {
                v.ended_ns.is_none()
                    && now_ns.saturating_sub(v.since_ns) < HOLD_WINDOW_NS
                    && !held(v.tgid)
            })
            .map(|v| v.tgid)
            .collect()
    }

    /// The entries of hash map `name` in `bpf` (of the process being
    /// built, under a [`View`]).
    pub(super) fn entries<K: Pod + Send, V: Pod + Send>(
        &self,
        bpf: &BpfObject,
        name: &'static str,
    ) -> Vec<(K, V)> {
        let Some(view) = &self.view else {
            return hash_entries(bpf, name);
        };
        let mut cache = view.cache.borrow_mut();
        let all = cache
            .entry(name)
            .or_insert_with(|| Box::new(hash_entries::<K, V>(bpf, name)));
        let Some(all) = all.downcast_ref::<Vec<(K, V)>>() else {
            // One map is read with one pair of types everywhere.
            return hash_entries(bpf, name);
        };
        let Some(root) = view.root else {
            return all.clone();
        };
        all.iter()
            .filter(|(k, v)| entry_tgid(name, k, v).is_none_or(|t| self.root_of(t) == root))
            .copied()
            .collect()
    }

    /// Starts building the profile of VM `root` under the [`View`].
    pub(super) fn view_root(&mut self, root: u32) {
        if let Some(v) = self.view.as_mut() {
            v.root = Some(root);
        }
    }

    /// Cuts `p`, a profile built under the [`View`] of VM `root` at
    /// `now`, down to that VM: its target, marks, phases and threads (the
    /// samples are the whole set's and go).
    pub(super) fn keep_own(&self, p: &mut Profile, root: u32, now: u64) {
        let vm = self.vms.get(&root);
        p.target = Target {
            kind: "pid".into(),
            command: Vec::new(),
            pid: root,
            name: vm.map(|v| v.comm.clone()).unwrap_or_default(),
            exit_code: None,
            ended_ns: vm.and_then(|v| v.ended_ns),
            interrupted_by: None,
            vmm: None,
            faults: None,
        };
        p.marks
            .retain(|m| m.tgid.is_some_and(|t| self.root_of(t) == root));
        let end = vm.and_then(|v| v.ended_ns).unwrap_or(now).min(now);
        p.phases = phases::derive_spans(&p.marks, end);
        p.threads.retain(|t| self.root_of(t.tgid) == root);
        p.samples.clear();
    }

    /// `tgids` and the processes the VMs among them started.
    pub(super) fn with_children(&self, tgids: &[u32]) -> Vec<u32> {
        let mut all: Vec<u32> = tgids.to_vec();
        all.extend(
            self.roots
                .iter()
                .filter(|(_, root)| tgids.contains(root))
                .map(|(&child, _)| child),
        );
        all
    }

    /// Drops VMs `tgids` and the processes filed under them.
    pub(super) fn forget(&mut self, tgids: &[u32]) {
        for t in tgids {
            self.vms.remove(t);
        }
        self.roots
            .retain(|child, root| !tgids.contains(child) && !tgids.contains(root));
    }
}

/// Reading the maps once for many profiles: each map is read at its first
/// use and kept, and each profile takes the entries of its own process.
#[derive(Default)]
pub(super) struct View {
    /// Whose profile is being built (None: every process's).
    pub(super) root: Option<u32>,
    cache: RefCell<HashMap<&'static str, Box<dyn Any + Send>>>,
}

/// Has the programs follow process `tgid` from now on, as if its guest
/// had run. Err when the kernel's table of followed processes is full.
pub(super) fn follow_in_maps(bpf: &mut BpfObject, tgid: u32) -> Result<(), ProfilerError> {
    let map = bpf
        .map_mut("followed")
        .ok_or_else(|| map_error("followed", "absent"))?;
    let mut h = BpfHashMap::<&mut MapData, u32, u32>::try_from(map)
        .map_err(|e| map_error("followed", e))?;
    // BPF_NOEXIST: the programs may have added it meanwhile.
    if let Err(e) = h.insert(tgid, 0, 1) {
        if h.get(&tgid, 0).is_err() {
            return Err(map_error("followed", e));
        }
    }
    Ok(())
}

/// Tells the programs the threads process `tgid` has now (for the sched
/// programs too); returns them.
pub(super) fn watch_threads(bpf: &mut BpfObject, tgid: u32) -> Vec<u32> {
    let tids = threads_of(tgid);
    if let Some(map) = bpf.map_mut("threads") {
        if let Ok(mut known) = BpfHashMap::<&mut MapData, u32, u32>::try_from(map) {
            for &tid in &tids {
                let _ = known.insert(tid, tgid, 0);
            }
        }
    }
    let watched = tids.iter().map(|&tid| (tid, tgid));
    seed_sched_tasks(bpf.map_mut(SCHED_TASKS_MAP), watched);
    tids
}

/// Drops every entry of processes `tgids` from the maps of `bpf`.
pub(super) fn forget_in_maps(bpf: &mut BpfObject, tgids: &[u32]) {
    fn remove_where<K: Pod, V: Pod>(bpf: &mut BpfObject, name: &'static str, tgids: &[u32]) {
        let Some(map) = bpf.map_mut(name) else {
            return;
        };
        let Ok(mut h) = BpfHashMap::<&mut MapData, K, V>::try_from(map) else {
            return;
        };
        let gone: Vec<K> = h
            .iter()
            .filter_map(Result::ok)
            .filter(|(k, v)| entry_tgid(name, k, v).is_some_and(|t| tgids.contains(&t)))
            .map(|(k, _)| k)
            .collect();
        for k in gone {
            let _ = h.remove(&k);
        }
    }
    let b = bpf;
    remove_where::<bpf::BsExitKey, bpf::BsHist>(b, "exit_stats", tgids);
    remove_where::<u32, bpf::BsExitStart>(b, "exit_start", tgids);
    remove_where::<bpf::BsVcpuKey, u32>(b, "vcpu_tids", tgids);
    remove_where::<bpf::BsUexitKey, u64>(b, "uexit_counts", tgids);
    remove_where::<bpf::BsPioKey, u64>(b, "pio_counts", tgids);
    remove_where::<bpf::BsMmioKey, u64>(b, "mmio_counts", tgids);
    remove_where::<bpf::BsMsrKey, u64>(b, "msr_counts", tgids);
    remove_where::<bpf::BsCpuidKey, u64>(b, "cpuid_counts", tgids);
    remove_where::<bpf::BsEmulateKey, u64>(b, "emulate_counts", tgids);
    remove_where::<bpf::BsSiteKey, bpf::BsHist>(b, "exit_sites", tgids);
    remove_where::<bpf::BsNpfKey, bpf::BsSiteVal>(b, "npf_ranges", tgids);
    remove_where::<bpf::BsFaultKey, u64>(b, "fault_counts", tgids);
    remove_where::<bpf::BsNumaKey, bpf::BsNumaVal>(b, "numa_pages", tgids);
    remove_where::<bpf::BsMarkerKey, u64>(b, "marker_counts", tgids);
    remove_where::<bpf::BsMarkerLastKey, u64>(b, "marker_last", tgids);
    remove_where::<bpf::BsRunKey, bpf::BsRunVal>(b, "run_time", tgids);
    remove_where::<u32, u32>(b, "threads", tgids);
    remove_where::<bpf::BsSchedKey, bpf::BsHist>(b, "sched_waits", tgids);
    remove_where::<u32, bpf::BsSchedTask>(b, "sched_tasks", tgids);
    if let Some(map) = b.map_mut("followed") {
        if let Ok(mut h) = BpfHashMap::<&mut MapData, u32, u32>::try_from(map) {
            for t in tgids {
                let _ = h.remove(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split and the forgetting read the process id from the first four
    /// bytes of these maps' keys.
    #[test]
    fn keys_start_with_the_process_id() {
        assert_eq!(offset_of!(bpf::BsExitKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsVcpuKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsUexitKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsPioKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsMmioKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsMsrKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsCpuidKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsEmulateKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsSiteKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsNpfKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsFaultKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsNumaKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsMarkerKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsMarkerLastKey, tgid), 0);
        assert_eq!(offset_of!(bpf::BsSchedKey, tgid), 0);
    }

    #[test]
    fn entries_are_told_apart_by_process() {
        let k = bpf::BsPioKey {
            tgid: 77,
            ..Default::default()
        };
        assert_eq!(entry_tgid("pio_counts", &k, &5u64), Some(77));
        assert_eq!(entry_tgid("threads", &12u32, &77u32), Some(77));
        let start = bpf::BsExitStart {
            tgid: 78,
            ..Default::default()
        };
        assert_eq!(entry_tgid("exit_start", &12u32, &start), Some(78));
        assert_eq!(entry_tgid("time_slots", &k, &5u64), None);
    }
}
