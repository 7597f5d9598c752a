//! The per-slot counts the exit and fault programs kept (`time_slots`,
//! `run --initcalls`), read once at the end.

use std::collections::BTreeMap;

use aya::maps::{HashMap as BpfHashMap, MapData};

use super::maps::percpu_sum;
use super::state::State;
use crate::bpf;
use crate::profile::{ExitProfile, PageFaultProfile, TimeSlots};

impl State {
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
        let entries = self.entries::<bpf::BsSlotKey, bpf::BsSlotRun>("time_slots");
        let used = entries.len() as u64;
        let slot_of = |ts: u64| ts.saturating_sub(clock.base_mono_ns) / clock.width_ns;
        let mut counts: BTreeMap<(u32, u32, u32, u64), u64> = BTreeMap::new();
        for (k, run) in entries {
            for (i, &n) in run.n.iter().enumerate().filter(|(_, n)| **n > 0) {
                *counts
                    .entry((k.kind, k.code, k.isa, u64::from(k.slot) + i as u64))
                    .or_default() += u64::from(n);
            }
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
}
