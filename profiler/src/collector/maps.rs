//! Helpers every part of the collector reads the loaded object's maps
//! with: a hash map's entries, a per-CPU counter's sum, the error a map
//! gives; and the running kernel's release.

use aya::maps::{HashMap as BpfHashMap, IterableMap, MapData, PerCpuArray};
use aya::Pod;

use super::object::BpfObject;
use crate::error::ProfilerError;

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
