//! Threads and NUMA read from the threads, sched and NUMA collectors'
//! maps: each thread's run time by CPU and node, run-queue waits, and the
//! pages it allocated by node.

use std::collections::{BTreeMap, BTreeSet};

use super::names::thread_role;
use super::state::State;
use super::thread_info::read_comm;
use crate::bpf::{self, Source};
use crate::profile::{CpuResidency, NodeLocality, NodePages, NumaProfile, ThreadProfile};
use crate::topology::page_size;

impl State {
    pub(super) fn threads_and_numa(
        &self,
        now: u64,
        events: &mut [u64; bpf::SOURCE_COUNT],
    ) -> (Vec<ThreadProfile>, NumaProfile) {
        let page = page_size();
        let mut numa = NumaProfile {
            source: if self.attached(Source::MmPageAlloc) {
                "tracepoint:kmem:mm_page_alloc".into()
            } else {
                String::new()
            },
            page_size: page,
            pfn_map_source: self.setup.topology.pfn_source.clone(),
            ..Default::default()
        };
        let mut threads: BTreeMap<u32, ThreadProfile> = BTreeMap::new();
        let entry = |threads: &mut BTreeMap<u32, ThreadProfile>, tid: u32, tgid: u32| {
            self.thread_entry(threads, tid, tgid, now);
        };
        for (&tid, info) in &self.tasks.threads {
            entry(&mut threads, tid, info.tgid);
        }
        let mut cpus: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for (k, v) in self.entries::<bpf::BsRunKey, bpf::BsRunVal>("run_time") {
            events[Source::SchedSwitch as usize] += v.slices;
            entry(&mut threads, k.tid, v.tgid);
            *cpus.entry(k.tid).or_default().entry(k.cpu).or_default() += v.run_ns;
        }
        let mut waits = self.runqueue_waits(events);
        for (&tid, (tgid, _)) in &waits {
            entry(&mut threads, tid, *tgid);
        }
        let nodes_of = self.numa_pages(now, events, &mut threads, &mut numa);
        numa.bytes_allocated = numa.pages_allocated * page;
        for (tid, t) in threads.iter_mut() {
            t.bytes_allocated = t.pages_allocated * page;
            t.runqueue_wait = waits.remove(tid).map(|(_, w)| w);
            if let Some(c) = cpus.get(tid) {
                t.cpus = c
                    .iter()
                    .map(|(&cpu, &run_ns)| CpuResidency {
                        cpu,
                        node: self
                            .setup
                            .topology
                            .cpu_node(cpu)
                            .unwrap_or(bpf::NODE_UNKNOWN),
                        run_ns,
                    })
                    .collect();
                t.run_ns = c.values().sum();
                let nodes: BTreeSet<u32> = t.cpus.iter().map(|c| c.node).collect();
                t.nodes = nodes.into_iter().collect();
            }
            if let Some(n) = nodes_of.get(tid) {
                t.pages_by_node = n
                    .iter()
                    .map(|(&node, &pages)| NodePages { node, pages })
                    .collect();
            }
        }
        (threads.into_values().collect(), numa)
    }

    /// A thread's profile in `threads`, made from what is known of it the
    /// first time.
    fn thread_entry<'a>(
        &self,
        threads: &'a mut BTreeMap<u32, ThreadProfile>,
        tid: u32,
        tgid: u32,
        now: u64,
    ) -> &'a mut ThreadProfile {
        threads.entry(tid).or_insert_with(|| {
            let info = self.tasks.threads.get(&tid);
            let name = info
                .map(|i| i.name.clone())
                .filter(|n| !n.is_empty())
                .or_else(|| read_comm(tgid, tid))
                .unwrap_or_default();
            let tgid = info.map(|i| i.tgid).filter(|&g| g != 0).unwrap_or(tgid);
            ThreadProfile {
                tid,
                role: thread_role(&name, tid, tgid).into(),
                name,
                start_ns: info.map(|i| i.start_ns).unwrap_or(0),
                end_ns: info.and_then(|i| i.end_ns).unwrap_or(now),
                tgid,
                exit_code: info.and_then(|i| i.exit_code),
                ..Default::default()
            }
        })
    }

    /// The pages each thread allocated, on its CPU's node or another, into
    /// `threads` and `numa`; returns each thread's pages by node.
    fn numa_pages(
        &self,
        now: u64,
        events: &mut [u64; bpf::SOURCE_COUNT],
        threads: &mut BTreeMap<u32, ThreadProfile>,
        numa: &mut NumaProfile,
    ) -> BTreeMap<u32, BTreeMap<u32, u64>> {
        let mut by_node: BTreeMap<u32, NodeLocality> = BTreeMap::new();
        let mut nodes_of: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for (k, v) in self.entries::<bpf::BsNumaKey, bpf::BsNumaVal>("numa_pages") {
            events[Source::MmPageAlloc as usize] += v.allocs;
            let t = self.thread_entry(threads, k.tid, k.tgid, now);
            t.pages_allocated += v.pages;
            numa.pages_allocated += v.pages;
            let known = k.page_node != bpf::NODE_UNKNOWN && k.cpu_node != bpf::NODE_UNKNOWN;
            if !known {
                numa.pages_unknown_node += v.pages;
            } else if k.page_node == k.cpu_node {
                t.pages_local += v.pages;
                numa.pages_local += v.pages;
            } else {
                t.pages_remote += v.pages;
                numa.pages_remote += v.pages;
            }
            if k.page_node != bpf::NODE_UNKNOWN {
                *nodes_of
                    .entry(k.tid)
                    .or_default()
                    .entry(k.page_node)
                    .or_default() += v.pages;
                let n = by_node.entry(k.page_node).or_insert_with(|| NodeLocality {
                    node: k.page_node,
                    ..Default::default()
                });
                if known && k.page_node == k.cpu_node {
                    n.pages_local += v.pages;
                } else if known {
                    n.pages_remote += v.pages;
                }
            }
        }
        numa.by_node = by_node.into_values().collect();
        nodes_of
    }
}
