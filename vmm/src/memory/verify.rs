//! Checking placement after the fact: which node sampled pages landed on
//! (move_pages(2)), what policy covers an address (get_mempolicy(2)), and
//! where a thread may run and last ran (sched_getaffinity(2) and field 39 of
//! `/proc/PID/task/TID/stat`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::cpulist::{CpuSet, NodeSet};
use super::spec::Policy;
use super::sys;
use super::MemoryError;

/// Base page size used for sampling addresses (the kernel reports the node
/// of whatever page, small or huge, contains the address).
const SAMPLE_STEP: usize = 4096;

/// The host node of `samples` pages spread evenly over `[addr, addr + len)`
/// (first page included): `Some(node)` for a present page, None for one not
/// faulted in yet. Only queries: nothing is moved or touched.
pub fn page_nodes(
    addr: *const u8,
    len: usize,
    samples: usize,
) -> Result<Vec<Option<u32>>, MemoryError> {
    let pages = len / SAMPLE_STEP;
    let samples = samples.min(pages);
    if samples == 0 {
        return Ok(Vec::new());
    }
    let addrs: Vec<*const u8> = (0..samples)
        .map(|i| addr.wrapping_add(i * pages / samples * SAMPLE_STEP))
        .collect();
    let status = sys::page_nodes(&addrs).map_err(|source| MemoryError::Syscall {
        call: "move_pages",
        source,
    })?;
    Ok(status.into_iter().map(Result::ok).collect())
}

/// Where sampled pages of a range live.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PagePlacement {
    /// Pages sampled.
    pub sampled: u64,
    /// Sampled pages per host node.
    pub per_node: BTreeMap<u32, u64>,
    /// Sampled pages not present (never touched, or swapped out).
    pub absent: u64,
}

impl PagePlacement {
    /// Adds the samples of one `page_nodes` call.
    pub fn add(&mut self, nodes: &[Option<u32>]) {
        for n in nodes {
            self.sampled += 1;
            match n {
                Some(n) => *self.per_node.entry(*n).or_default() += 1,
                None => self.absent += 1,
            }
        }
    }

    /// Whether every sampled page is present and on one of `nodes`.
    pub fn all_on(&self, nodes: &NodeSet) -> bool {
        self.absent == 0 && self.per_node.keys().all(|n| nodes.contains(*n))
    }
}

/// The NUMA policy covering `addr` and its nodes; policy None is the
/// default (allocate on the local node).
pub fn mempolicy_at(addr: *const u8) -> Result<(Option<Policy>, NodeSet), MemoryError> {
    sys::mempolicy_at(addr).map_err(|source| MemoryError::Syscall {
        call: "get_mempolicy",
        source,
    })
}

/// Where a thread may run and where it last ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadPlacement {
    /// Kernel thread id.
    pub tid: i32,
    /// Thread name (`comm`).
    pub name: String,
    /// CPUs it may run on.
    pub allowed_cpus: CpuSet,
    /// CPU it last ran on.
    pub last_cpu: Option<u32>,
}

/// The `processor` field (39) of a `/proc/.../stat` line: the CPU the task
/// last ran on. The command name (field 2) may hold spaces and parentheses,
/// so fields are counted after its last `)`.
pub fn stat_last_cpu(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state).
    rest.split_whitespace().nth(39 - 3)?.parse().ok()
}

/// Thread `tid` of process `pid`: its name, allowed CPUs and last CPU.
pub fn thread_placement(pid: i32, tid: i32) -> Result<ThreadPlacement, MemoryError> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let read = |file: &str| {
        std::fs::read_to_string(format!("{dir}/{file}")).map_err(|source| MemoryError::Syscall {
            call: "reading /proc/PID/task/TID",
            source,
        })
    };
    let stat = read("stat")?;
    let name = read("comm")?.trim_end().to_string();
    let allowed_cpus = sys::thread_affinity(tid).map_err(|source| MemoryError::Syscall {
        call: "sched_getaffinity",
        source,
    })?;
    Ok(ThreadPlacement {
        tid,
        name,
        allowed_cpus,
        last_cpu: stat_last_cpu(&stat),
    })
}

/// The CPU the calling thread last ran on, from its own stat file (falling
/// back to sched_getcpu(3)).
pub fn own_last_cpu() -> Option<u32> {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| stat_last_cpu(&s))
        .or_else(sys::current_cpu)
}

#[cfg(test)]
mod tests {
    use vm_memory::MmapRegion;

    use super::*;

    #[test]
    fn stat_field_39() {
        let stat = "1234 (prealloc (n0) 1) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 \
                    100 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 7 0 0 0 0 0";
        assert_eq!(stat_last_cpu(stat), Some(7));
        assert_eq!(stat_last_cpu("1 (x) S 1 2"), None);
        assert_eq!(stat_last_cpu("garbage"), None);
        let me = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let cpu = stat_last_cpu(&me).unwrap();
        assert!(sys::thread_affinity(0).unwrap().contains(cpu));
    }

    #[test]
    fn placement_of_this_thread() {
        let p = thread_placement(std::process::id() as i32, sys::gettid()).unwrap();
        assert_eq!(p.allowed_cpus, sys::thread_affinity(0).unwrap());
        assert!(p.last_cpu.is_some());
        assert!(!p.name.is_empty());
        assert!(own_last_cpu().is_some());
    }

    #[test]
    fn pages_land_on_node_0() {
        let len = 4 << 20;
        let m = MmapRegion::<()>::new(len).unwrap();
        // Untouched: no page present.
        let before = page_nodes(m.as_ptr(), len, 16).unwrap();
        assert_eq!(before.len(), 16);
        assert!(before.iter().all(Option::is_none), "{before:?}");
        // Touch every other sampled page.
        let step = len / 16;
        for i in (0..16).step_by(2) {
            // SAFETY: i * step < len, inside the live mapping `m`.
            unsafe { m.as_ptr().add(i * step).write_volatile(1) };
        }
        let after = page_nodes(m.as_ptr(), len, 16).unwrap();
        let mut placement = PagePlacement::default();
        placement.add(&after);
        assert_eq!(placement.sampled, 16);
        assert_eq!(placement.absent, 8);
        // On a one-node host (the development machines) that is node 0.
        let topo = super::super::topology::Topology::host().unwrap();
        if topo.nodes.len() == 1 {
            assert_eq!(placement.per_node.get(&0), Some(&8), "{after:?}");
        } else {
            assert_eq!(placement.per_node.values().sum::<u64>(), 8, "{after:?}");
            assert!(placement
                .per_node
                .keys()
                .all(|n| topo.nodes.contains_key(n)));
        }
        assert!(!placement.all_on(&"0".parse().unwrap()));
        assert!(page_nodes(m.as_ptr(), 100, 4).unwrap().is_empty());
    }

    #[test]
    fn default_policy_reads_as_none() {
        let m = MmapRegion::<()>::new(1 << 20).unwrap();
        let (policy, _) = mempolicy_at(m.as_ptr()).unwrap();
        assert_eq!(policy, None);
    }
}
