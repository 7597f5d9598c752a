//! Reading each collector's maps into the profile: exits, faults, threads
//! and NUMA, and what every source delivered.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aya::maps::{HashMap as BpfHashMap, MapData};

use super::log::MAX_MARKS;
use super::maps::percpu_sum;
use super::names::{thread_role, vcpu_from_thread_name};
use super::plan::{self, ProgramState};
use super::sched;
use super::state::State;
use super::thread_info::read_comm;
use crate::bpf::{self, CollectorKind, Source};
use crate::phases;
use crate::profile::*;
use crate::reasons::{ISA_SVM, ISA_VMX};
use crate::topology::page_size;
use bootscope_model::hist;

/// Exits counted per vCPU thread and per phase, while reading them.
#[derive(Default)]
struct ExitTally {
    by_vcpu: BTreeMap<(u32, u32), VcpuExits>,
    by_phase: BTreeMap<u32, BTreeMap<String, u64>>,
}

impl State {
    /// kvm_exit's counts and latency histograms, each exit still open
    /// (no kvm_entry has counted it yet: a vCPU in userspace, or the VM
    /// gone) added to its key's count without a latency.
    pub(super) fn exit_stats(&self) -> BTreeMap<bpf::BsExitKey, bpf::BsHist> {
        let mut out: BTreeMap<bpf::BsExitKey, bpf::BsHist> = self
            .entries::<bpf::BsExitKey, bpf::BsHist>("exit_stats")
            .into_iter()
            .collect();
        // With sites on, an exit is counted at its site (at its reason only
        // when the site map was full): a reason is the sum of both.
        if self.setup.exit_sites {
            for (k, h) in self.entries::<bpf::BsSiteKey, bpf::BsHist>("exit_sites") {
                out.entry(super::sites::reason_key(&k)).or_default().add(&h);
            }
        }
        let open = self.entries::<u32, bpf::BsExitStart>("exit_start");
        for (_, e) in open.into_iter().filter(|(_, e)| e.ts_ns != 0) {
            let key = bpf::BsExitKey {
                tgid: e.tgid,
                vcpu_id: e.vcpu_id,
                reason: e.reason,
                isa: e.isa,
                phase: e.phase,
            };
            out.entry(key).or_default().count += 1;
        }
        out
    }

    /// `exits` without the per-port detail (what samples need).
    /// `with_detail`: the latency histograms and each vCPU's thread too
    /// (a sample needs only the counts).
    ///
    /// The programs that run on every exit, fault, switch or allocation
    /// keep no event counter (to stay cheap): this and the other readers of
    /// their maps add what they counted to `events` (indexed by `Source`)
    /// as they go, so that a profile reads each map once. An event a full
    /// map could not count is in `map_overflows` instead.
    pub(super) fn exit_reasons(
        &self,
        with_detail: bool,
        events: &mut [u64; bpf::SOURCE_COUNT],
    ) -> ExitProfile {
        let mut out = ExitProfile::default();
        let exit_entries = self.exit_stats();
        let mut tally = ExitTally::default();
        if !exit_entries.is_empty() {
            self.kvm_exit_reasons(&exit_entries, with_detail, events, &mut out, &mut tally);
        } else if self.attached(Source::KvmUserspaceExit) {
            self.userspace_exit_reasons(events, &mut out, &mut tally);
        } else {
            out.isa = "unknown".into();
        }
        out.by_reason
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
        out.by_vcpu = tally.by_vcpu.into_values().collect();
        out.by_phase = tally
            .by_phase
            .into_iter()
            .map(|(p, by_reason)| PhaseExits {
                phase: self.log.phase_names.name(p),
                by_reason,
            })
            .collect();
        out
    }

    /// [`State::exit_reasons`] from kvm:kvm_exit's counts and latencies.
    fn kvm_exit_reasons(
        &self,
        exit_entries: &BTreeMap<bpf::BsExitKey, bpf::BsHist>,
        with_detail: bool,
        events: &mut [u64; bpf::SOURCE_COUNT],
        out: &mut ExitProfile,
        tally: &mut ExitTally,
    ) {
        let ExitTally { by_vcpu, by_phase } = tally;
        let mut by_reason: BTreeMap<(u32, u32), (String, u64)> = BTreeMap::new();
        out.source = "tracepoint:kvm:kvm_exit".into();
        let isas: BTreeSet<u32> = exit_entries.keys().map(|k| k.isa).collect();
        out.isa = match isas.iter().copied().collect::<Vec<_>>()[..] {
            [ISA_VMX] => "vmx",
            [ISA_SVM] => "svm",
            [] => "unknown",
            [_] => "unknown",
            _ => "mixed",
        }
        .into();
        let vcpu_tids: HashMap<(u32, u32), u32> = if with_detail {
            self.entries::<bpf::BsVcpuKey, u32>("vcpu_tids")
                .into_iter()
                .map(|(k, v)| ((k.tgid, k.vcpu_id), v))
                .collect()
        } else {
            HashMap::new()
        };
        // Latency by reason: slots and total.
        let mut lat: HashMap<(u32, u32), (Vec<u64>, u64)> = HashMap::new();
        for (k, h) in exit_entries {
            let n = h.count;
            let name = self.setup.reasons.exit_name(k.isa, k.reason);
            out.total += n;
            events[Source::KvmExit as usize] += n;
            let timed: u64 = h.slots.iter().sum();
            events[Source::KvmEntry as usize] += timed;
            if with_detail && timed > 0 {
                let e = lat
                    .entry((k.isa, k.reason))
                    .or_insert_with(|| (vec![0; hist::HIST_SLOTS], 0));
                hist::add_slots(&mut e.0, &h.slots);
                e.1 += h.total_ns;
            }
            let r = by_reason
                .entry((k.isa, k.reason))
                .or_insert_with(|| (name.clone(), 0));
            r.1 += n;
            let v = by_vcpu
                .entry((k.tgid, k.vcpu_id))
                .or_insert_with(|| VcpuExits {
                    vcpu: k.vcpu_id,
                    tid: vcpu_tids.get(&(k.tgid, k.vcpu_id)).copied().unwrap_or(0),
                    by_reason: BTreeMap::new(),
                });
            *v.by_reason.entry(name.clone()).or_default() += n;
            *by_phase
                .entry(k.phase)
                .or_default()
                .entry(name)
                .or_default() += n;
        }
        for ((isa, reason), (name, count)) in by_reason {
            let (hist_slots, total) = lat.remove(&(isa, reason)).unwrap_or_default();
            out.by_reason.push(ExitReasonStat {
                reason: name,
                code: u64::from(reason),
                count,
                latency_total_ns: (!hist_slots.is_empty()).then_some(total),
                latency_hist: hist::buckets(&hist_slots),
            });
        }
    }

    /// [`State::exit_reasons`] from kvm:kvm_userspace_exit's counts (the
    /// fallback where kvm_exit does not fire).
    fn userspace_exit_reasons(
        &self,
        events: &mut [u64; bpf::SOURCE_COUNT],
        out: &mut ExitProfile,
        tally: &mut ExitTally,
    ) {
        let ExitTally { by_vcpu, by_phase } = tally;
        let mut by_reason: BTreeMap<(u32, u32), (String, u64)> = BTreeMap::new();
        out.source = "tracepoint:kvm:kvm_userspace_exit".into();
        out.isa = "userspace".into();
        let mut vcpu_of_tid: HashMap<u32, u32> = HashMap::new();
        let entries: Vec<(bpf::BsUexitKey, u64)> = self.entries("uexit_counts");
        // Threads without a vCPU number in their name get one by order.
        let mut tids: Vec<u32> = entries.iter().map(|(k, _)| k.tid).collect();
        tids.sort();
        tids.dedup();
        let mut next = 0;
        for tid in tids {
            let v = vcpu_from_thread_name(&self.thread_name(tid)).unwrap_or_else(|| {
                next += 1;
                10_000 + next - 1
            });
            vcpu_of_tid.insert(tid, v);
        }
        for (k, n) in &entries {
            let name = self.setup.reasons.userspace_name(k.code);
            out.total += n;
            events[Source::KvmUserspaceExit as usize] += n;
            let r = by_reason
                .entry((0, k.code))
                .or_insert_with(|| (name.clone(), 0));
            r.1 += n;
            let vcpu = vcpu_of_tid.get(&k.tid).copied().unwrap_or(0);
            let v = by_vcpu.entry((k.tgid, k.tid)).or_insert_with(|| VcpuExits {
                vcpu,
                tid: k.tid,
                by_reason: BTreeMap::new(),
            });
            *v.by_reason.entry(name.clone()).or_default() += n;
            *by_phase
                .entry(k.phase)
                .or_default()
                .entry(name)
                .or_default() += n;
        }
        for ((_, code), (name, count)) in by_reason {
            out.by_reason.push(ExitReasonStat {
                reason: name,
                code: u64::from(code),
                count,
                latency_total_ns: None,
                latency_hist: Vec::new(),
            });
        }
    }

    pub(super) fn attached(&self, s: Source) -> bool {
        plan::attached(&self.setup.programs, s)
    }

    pub(super) fn exits(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> ExitProfile {
        let mut out = self.exit_reasons(true, events);
        // Where kvm_exit gave the reasons, the fallback's map was not read
        // for them (both attached only when the backend is unknown).
        if out.source == "tracepoint:kvm:kvm_exit" && self.attached(Source::KvmUserspaceExit) {
            events[Source::KvmUserspaceExit as usize] = self
                .entries::<bpf::BsUexitKey, u64>("uexit_counts")
                .iter()
                .map(|(_, n)| n)
                .sum();
        }
        out.kvm_stats_exits = self.sampler.kvm_stats.total();
        out.sites = self.exit_sites();
        let mut pio: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsPioKey, u64>("pio_counts") {
            events[Source::KvmPio as usize] += n;
            *pio.entry((k.port, k.rw, k.size)).or_default() += n;
        }
        out.pio = pio
            .into_iter()
            .map(|((port, rw, size), count)| PioStat {
                port,
                direction: if rw != 0 { "write" } else { "read" }.into(),
                size,
                count,
            })
            .collect();
        out.pio
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.port.cmp(&b.port)));
        let mut markers: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsMarkerKey, u64>("marker_counts") {
            *markers.entry((k.port, k.value)).or_default() += n;
        }
        out.marker_writes = markers
            .into_iter()
            .map(|((port, value), count)| MarkerWrites { port, value, count })
            .collect();
        let mut mmio: BTreeMap<(u64, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsMmioKey, u64>("mmio_counts") {
            events[Source::KvmMmio as usize] += n;
            *mmio.entry((k.gpa, k.kind)).or_default() += n;
        }
        out.mmio = mmio
            .into_iter()
            .map(|((gpa, kind), count)| MmioStat {
                label: None,
                gpa,
                kind: match kind {
                    0 => "unsatisfied-read",
                    1 => "read",
                    2 => "write",
                    _ => "unknown",
                }
                .into(),
                count,
            })
            .collect();
        out.mmio
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.gpa.cmp(&b.gpa)));
        let mut msr: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsMsrKey, u64>("msr_counts") {
            events[Source::KvmMsr as usize] += n;
            let e = msr.entry((k.msr, k.write)).or_default();
            e.0 += n;
            if k.exception != 0 {
                e.1 += n;
            }
        }
        out.msr = msr
            .into_iter()
            .map(|((msr, write), (count, faults))| MsrStat {
                msr,
                direction: if write != 0 { "write" } else { "read" }.into(),
                count,
                faults,
            })
            .collect();
        out.msr
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.msr.cmp(&b.msr)));
        let mut cpuid: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsCpuidKey, u64>("cpuid_counts") {
            events[Source::KvmCpuid as usize] += n;
            *cpuid.entry((k.function, k.index)).or_default() += n;
        }
        out.cpuid = cpuid
            .into_iter()
            .map(|((function, index), count)| CpuidStat {
                function,
                index,
                count,
            })
            .collect();
        for (k, n) in self.entries::<bpf::BsEmulateKey, u64>("emulate_counts") {
            events[Source::KvmEmulateInsn as usize] += n;
            out.emulated_instructions += n;
            if k.failed != 0 {
                out.emulation_failures += n;
            }
        }
        out
    }

    pub(super) fn faults(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> PageFaultProfile {
        let mut out = PageFaultProfile::default();
        let entries = self.entries::<bpf::BsFaultKey, u64>("fault_counts");
        let has = |kind| entries.iter().any(|(k, n)| k.kind == kind && *n > 0);
        let guest_kind = if has(bpf::fault_kind::GUEST) {
            out.guest_source = "tracepoint:kvm:kvm_page_fault".into();
            Some(bpf::fault_kind::GUEST)
        } else if has(bpf::fault_kind::GUEST_MAP) {
            out.guest_source = "tracepoint:kvmmmu:kvm_mmu_spte_requested".into();
            Some(bpf::fault_kind::GUEST_MAP)
        } else {
            None
        };
        let mut by_thread: BTreeMap<u32, ThreadFaults> = BTreeMap::new();
        let mut by_phase: BTreeMap<u32, PhaseFaults> = BTreeMap::new();
        for (k, n) in entries {
            let source = match k.kind {
                bpf::fault_kind::GUEST => Some(Source::KvmPageFault),
                bpf::fault_kind::GUEST_MAP => Some(Source::KvmmmuSpteRequested),
                bpf::fault_kind::GUEST_MMIO => Some(Source::KvmmmuMmioPageFault),
                bpf::fault_kind::HOST_USER => Some(Source::PageFaultUser),
                bpf::fault_kind::HOST_KERNEL => Some(Source::PageFaultKernel),
                _ => None,
            };
            if let Some(source) = source {
                events[source as usize] += n;
            }
            let (guest, host) = match k.kind {
                bpf::fault_kind::HOST_USER => {
                    out.host_user += n;
                    (0, n)
                }
                bpf::fault_kind::HOST_KERNEL => {
                    out.host_kernel += n;
                    (0, n)
                }
                bpf::fault_kind::GUEST_MMIO => {
                    out.guest_mmio += n;
                    (0, 0)
                }
                kind if Some(kind) == guest_kind => (n, 0),
                _ => (0, 0),
            };
            if guest == 0 && host == 0 {
                continue;
            }
            out.guest_total += guest;
            out.host_total += host;
            let t = by_thread.entry(k.tid).or_insert_with(|| ThreadFaults {
                tid: k.tid,
                name: self.thread_name(k.tid),
                ..Default::default()
            });
            t.guest += guest;
            t.host += host;
            let p = by_phase.entry(k.phase).or_insert_with(|| PhaseFaults {
                phase: self.log.phase_names.name(k.phase),
                ..Default::default()
            });
            p.guest += guest;
            p.host += host;
        }
        out.by_thread = by_thread.into_values().collect();
        out.by_phase = by_phase.into_values().collect();
        out
    }

    /// The per-slot counts (`time_slots`), when on: every entry of the
    /// slot map, each exit still open added to its slot as the totals add
    /// it to its reason, exits named as in `exits.by_reason` and guest
    /// faults of the kind `page_faults.guest_total` counts.
    pub(super) fn read_time_slots(
        &self,
        exits: &ExitProfile,
        faults: &PageFaultProfile,
    ) -> Option<TimeSlots> {
        let clock = self.clock.time_slots?;
        let entries = self.entries::<bpf::BsSlotKey, u64>("time_slots");
        let used = entries.len() as u64;
        let slot_of = |ts: u64| ts.saturating_sub(clock.base_mono_ns) / clock.width_ns;
        let mut counts: BTreeMap<(u32, u32, u32, u64), u64> = BTreeMap::new();
        for (k, n) in entries {
            *counts
                .entry((k.kind, k.code, k.isa, u64::from(k.slot)))
                .or_default() += n;
        }
        for (_, e) in self.entries::<u32, bpf::BsExitStart>("exit_start") {
            if e.ts_ns != 0 {
                let key = (bpf::slot_kind::EXIT, e.reason, e.isa, slot_of(e.ts_ns));
                *counts.entry(key).or_default() += 1;
            }
        }
        // The exits' source is the one exits.by_reason came from.
        let exit_kind = match exits.source.as_str() {
            "tracepoint:kvm:kvm_exit" => Some(bpf::slot_kind::EXIT),
            "tracepoint:kvm:kvm_userspace_exit" => Some(bpf::slot_kind::UEXIT),
            _ => None,
        };
        let guest_kind = match faults.guest_source.as_str() {
            "tracepoint:kvm:kvm_page_fault" => Some(bpf::fault_kind::GUEST),
            "tracepoint:kvmmmu:kvm_mmu_spte_requested" => Some(bpf::fault_kind::GUEST_MAP),
            _ => None,
        };
        let mut by_reason: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
        let mut guest: BTreeMap<u64, u64> = BTreeMap::new();
        let mut host: BTreeMap<u64, u64> = BTreeMap::new();
        for ((kind, code, isa, slot), n) in counts {
            if Some(kind) == exit_kind {
                let name = if kind == bpf::slot_kind::EXIT {
                    self.setup.reasons.exit_name(isa, code)
                } else {
                    self.setup.reasons.userspace_name(code)
                };
                *by_reason.entry(name).or_default().entry(slot).or_default() += n;
            } else if kind == bpf::slot_kind::FAULT {
                let series = match code {
                    bpf::fault_kind::HOST_USER | bpf::fault_kind::HOST_KERNEL => &mut host,
                    c if Some(c) == guest_kind => &mut guest,
                    _ => continue,
                };
                *series.entry(slot).or_default() += n;
            }
        }
        let pairs = |m: BTreeMap<u64, u64>| m.into_iter().map(|(s, n)| [s, n]).collect();
        let full_from_slot = self
            .bpf
            .map("time_slot_full_at")
            .and_then(|m| BpfHashMap::<&MapData, u32, u64>::try_from(m).ok())
            .and_then(|h| h.get(&0, 0).ok());
        let overflow_exits = match exit_kind {
            Some(kind) => percpu_sum(&self.bpf, "time_slot_overflows", kind),
            None => 0,
        };
        Some(TimeSlots {
            slot_ns: clock.width_ns,
            start_ns: clock.base_mono_ns as i64 - self.clock.start_mono_ns as i64,
            capacity: u64::from(clock.capacity),
            entries: used,
            overflow_exits,
            overflow_faults: percpu_sum(&self.bpf, "time_slot_overflows", bpf::slot_kind::FAULT),
            full_from_slot,
            exits_source: if exit_kind.is_some() {
                exits.source.clone()
            } else {
                String::new()
            },
            exits: by_reason.into_iter().map(|(r, m)| (r, pairs(m))).collect(),
            guest_faults: pairs(guest),
            host_faults: pairs(host),
        })
    }

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

    pub(super) fn sources(
        &self,
        counts: &[u64; bpf::SOURCE_COUNT],
        exits: &ExitProfile,
        faults: &PageFaultProfile,
    ) -> Vec<DataSource> {
        let mut out = Vec::new();
        for p in &self.setup.programs {
            let events = counts[p.spec.source as usize];
            let mut status = p.status.as_str().to_string();
            let mut detail = if p.detail.is_empty() {
                format!("feeds {}", p.spec.feeds)
            } else {
                p.detail.clone()
            };
            let collector = collector_name(p.spec.collector);
            if p.is_attached() {
                match p.spec.source {
                    Source::KvmExit if events == 0 => {
                        detail = format!(
                            "attached, but fired 0 times for the target{}; exit reasons come from {}",
                            if self.setup.host.kvm == "pvm" {
                                " (PVM host: kvm_exit is only raised by the VMX/SVM code)"
                            } else {
                                ""
                            },
                            if exits.source.is_empty() { "no source" } else { &exits.source }
                        );
                    }
                    Source::KvmUserspaceExit
                        if exits.source == "tracepoint:kvm:kvm_userspace_exit" =>
                    {
                        status = "fallback".into();
                        detail = "exits.by_reason counts exits to the VMM by KVM_EXIT_* reason: kvm:kvm_exit did not fire".into();
                    }
                    Source::SchedWaitSwitch => detail = sched::switch_detail(&self.bpf, &detail),
                    Source::KvmmmuSpteRequested
                        if faults.guest_source == "tracepoint:kvmmmu:kvm_mmu_spte_requested" =>
                    {
                        status = "fallback".into();
                        detail = "page_faults.guest_total counts KVM MMU mappings: kvm:kvm_page_fault did not fire".into();
                    }
                    _ => {}
                }
            }
            let (runs, run_ns) = match self.program_run_stats(p) {
                Some((runs, ns)) => (Some(runs), Some(ns)),
                None => (None, None),
            };
            out.push(DataSource {
                name: p.spec.source_name(),
                status,
                detail,
                events,
                collector: collector.into(),
                runs,
                run_ns,
            });
        }
        out.push(DataSource {
            name: "ringbuf:events".into(),
            status: "attached".into(),
            detail: format!(
                "{} KiB ring buffer for marks and thread lifetimes; lost records are in lost_events{}",
                self.setup.ring_bytes / 1024,
                if self.log.marks_dropped > 0 {
                    format!(
                        "; {} port marks beyond the first {MAX_MARKS} not kept",
                        self.log.marks_dropped
                    )
                } else {
                    String::new()
                }
            ),
            events: self.log.ring_events,
            collector: "all".into(),
            ..Default::default()
        });
        let (status, detail) = self.sampler.kvm_stats.describe();
        out.push(DataSource {
            name: format!("kvm_stats:{}", self.sampler.kvm_stats.method()),
            status: status.into(),
            detail,
            events: self.sampler.kvm_stats.total().unwrap_or(0),
            collector: "exits".into(),
            ..Default::default()
        });
        out.extend(self.setup.extra_sources.iter().cloned());
        if self.log.vmm_marks > 0 {
            out.push(DataSource {
                name: "vmm".into(),
                status: "attached".into(),
                detail: "marks added in-process by bootscope's VMM".into(),
                events: self.log.vmm_marks,
                collector: "phases".into(),
                ..Default::default()
            });
        }
        out
    }

    /// Runs and run time of an attached program, when the kernel keeps
    /// them (`--bpf-stats`).
    pub(super) fn program_run_stats(&self, p: &ProgramState) -> Option<(u64, u64)> {
        self.setup.bpf_stats.as_ref()?;
        if !p.is_attached() {
            return None;
        }
        let info = self.bpf.program(p.spec.program)?.info().ok()?;
        Some((
            info.run_count(),
            u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
        ))
    }

    pub(super) fn build(&self, now: u64) -> Profile {
        let mut counts = self.source_counts();
        let exits = self.exits(&mut counts);
        let page_faults = self.faults(&mut counts);
        let (threads, numa) = self.threads_and_numa(now, &mut counts);
        let marks = self.log.sorted_marks();
        let phases = phases::derive_spans(&marks, now);
        let fault_tail = self.fault_tail(&marks, &mut counts);
        Profile {
            sources: self.sources(&counts, &exits, &page_faults),
            target: self.tasks.target.clone(),
            host: self.setup.host.clone(),
            duration_ns: now,
            exits,
            page_faults,
            threads,
            numa,
            marks,
            phases,
            samples: self.sampler.samples.clone(),
            lost_events: percpu_sum(&self.bpf, "lost_events", 0),
            map_overflows: percpu_sum(&self.bpf, "map_overflows", 0),
            startup: self.setup.startup.clone(),
            collector: Some(CollectorCost {
                samples: self.sampler.samples.len() as u64,
                sample_cpu_ns: self.sampler.sample_cpu.as_nanos() as u64,
                cpu_ns: self.sampler.reader_cpu.as_nanos() as u64,
            }),
            fault_tail,
            ..Profile::new()
        }
    }
}

/// The collector (`--collect` name) a program feeds.
fn collector_name(kind: CollectorKind) -> &'static str {
    match kind {
        CollectorKind::Exits | CollectorKind::ExitLatency => "exits",
        CollectorKind::Faults => "faults",
        CollectorKind::Threads => "threads",
        CollectorKind::Numa => "numa",
        CollectorKind::Phases => "phases",
        CollectorKind::Sched => "sched",
        CollectorKind::Tail => "tail",
    }
}
