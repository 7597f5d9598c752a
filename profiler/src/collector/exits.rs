//! Exit reasons read from the exits collector's maps: kvm_exit's counts
//! and latencies, or kvm_userspace_exit's counts where kvm_exit does not
//! fire, by reason, vCPU and phase.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::names::vcpu_from_thread_name;
use super::state::State;
use crate::bpf::{self, Source};
use crate::profile::{ExitProfile, ExitReasonStat, PhaseExits, VcpuExits};
use crate::reasons::{ISA_SVM, ISA_VMX};
use bootscope_model::hist;

/// Exits counted per vCPU thread and per phase, while reading them.
#[derive(Default)]
struct ExitTally {
    /// By ISA and reason code: the reason's name and count.
    by_reason: BTreeMap<(u32, u32), (String, u64)>,
    by_vcpu: BTreeMap<(u32, u32), VcpuExits>,
    by_phase: BTreeMap<u32, BTreeMap<String, u64>>,
}

impl ExitTally {
    /// Counts `n` exits of `reason` (ISA and code) named `name`, of the
    /// vCPU thread keyed `thread` (`first` makes its entry), in `phase`.
    fn add(
        &mut self,
        reason: (u32, u32),
        name: String,
        thread: (u32, u32),
        first: impl FnOnce() -> VcpuExits,
        phase: u32,
        n: u64,
    ) {
        let r = self
            .by_reason
            .entry(reason)
            .or_insert_with(|| (name.clone(), 0));
        r.1 += n;
        let v = self.by_vcpu.entry(thread).or_insert_with(first);
        *v.by_reason.entry(name.clone()).or_default() += n;
        *self
            .by_phase
            .entry(phase)
            .or_default()
            .entry(name)
            .or_default() += n;
    }
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
            let first = || VcpuExits {
                vcpu: k.vcpu_id,
                tid: vcpu_tids.get(&(k.tgid, k.vcpu_id)).copied().unwrap_or(0),
                by_reason: BTreeMap::new(),
            };
            let thread = (k.tgid, k.vcpu_id);
            tally.add((k.isa, k.reason), name, thread, first, k.phase, n);
        }
        for ((isa, reason), (name, count)) in std::mem::take(&mut tally.by_reason) {
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
            let first = || VcpuExits {
                vcpu: vcpu_of_tid.get(&k.tid).copied().unwrap_or(0),
                tid: k.tid,
                by_reason: BTreeMap::new(),
            };
            tally.add((0, k.code), name, (k.tgid, k.tid), first, k.phase, *n);
        }
        for ((_, code), (name, count)) in std::mem::take(&mut tally.by_reason) {
            out.by_reason.push(ExitReasonStat {
                reason: name,
                code: u64::from(code),
                count,
                latency_total_ns: None,
                latency_hist: Vec::new(),
            });
        }
    }
}
