//! Helpers every part of the collector reads the loaded object's maps
//! with: a hash map's entries, a per-CPU counter's sum, the error a map
//! gives; the sched programs' table of threads to watch; and the running
//! kernel's release.

use aya::maps::{Array, HashMap as BpfHashMap, IterableMap, Map, MapData, PerCpuArray};
use aya::Pod;

use super::object::BpfObject;
use crate::bpf::BsSchedTask;
use crate::error::ProfilerError;

/// The map of threads the sched programs watch (tid -> `struct
/// bs_sched_task`).
pub(super) const SCHED_TASKS_MAP: &str = "sched_tasks";

/// Has the sched programs watch the threads (tid -> process) that exist
/// before they first run under the programs, in the object's `sched_tasks`
/// map (`map_mut(SCHED_TASKS_MAP)`). Errors are ignored: a thread not
/// seeded is added at its first switch out.
pub(super) fn seed_sched_tasks(
    map: Option<&mut Map>,
    threads: impl IntoIterator<Item = (u32, u32)>,
) {
    let Some(map) = map else {
        return;
    };
    let Ok(mut tasks) = BpfHashMap::<&mut MapData, u32, BsSchedTask>::try_from(map) else {
        return;
    };
    for (tid, tgid) in threads {
        let task = BsSchedTask {
            tgid,
            ..Default::default()
        };
        // BPF_NOEXIST: a thread the programs already saw keeps its state.
        let _ = tasks.insert(tid, task, 1);
    }
}

pub(super) fn kernel_release() -> String {
    crate::pseudo::read("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub(super) fn hash_entries<K: Pod, V: Pod>(bpf: &BpfObject, name: &str) -> Vec<(K, V)> {
    let Some(map) = bpf.map(name) else {
        return Vec::new();
    };
    // try_from checks the key and value sizes against K and V.
    let Ok(h) = BpfHashMap::<&MapData, K, V>::try_from(map) else {
        return Vec::new();
    };
    // One system call per 64 entries where the kernel can; two per
    // entry otherwise.
    match crate::batch::read::<K, V>(h.map()) {
        Ok(entries) => entries,
        Err(_) => h.iter().filter_map(Result::ok).collect(),
    }
}

/// An array map's entries (index, value), in index order.
pub(super) fn array_entries<V: Pod>(bpf: &BpfObject, name: &str) -> Vec<(u32, V)> {
    let Some(map) = bpf.map(name) else {
        return Vec::new();
    };
    // try_from checks the value size against V.
    let Ok(a) = Array::<&MapData, V>::try_from(map) else {
        return Vec::new();
    };
    match crate::batch::read_array::<V>(a.map(), a.len()) {
        Ok(entries) => entries,
        Err(_) => (0..a.len())
            .filter_map(|i| a.get(&i, 0).ok().map(|v| (i, v)))
            .collect(),
    }
}

pub(super) fn percpu_sum(bpf: &BpfObject, name: &str, index: u32) -> u64 {
    let Some(map) = bpf.map(name) else {
        return 0;
    };
    PerCpuArray::<&MapData, u64>::try_from(map)
        .ok()
        .and_then(|a| a.get(&index, 0).ok())
        .map(|v| v.iter().sum())
        .unwrap_or(0)
}

pub(super) fn map_error(name: &str, e: impl std::fmt::Display) -> ProfilerError {
    ProfilerError::Map {
        name: name.to_string(),
        detail: e.to_string(),
    }
}

/// A histogram of these values, as the programs fill one (for tests).
#[cfg(test)]
pub(super) fn hist_of(values: &[u64]) -> crate::bpf::BsHist {
    let mut h = crate::bpf::BsHist::default();
    for &v in values {
        h.slots[bootscope_model::hist::slot(v)] += 1;
        h.count += 1;
        h.total_ns += v;
    }
    h
}
