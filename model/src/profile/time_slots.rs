//! The profile's exits and page faults by the time slot they happened
//! in ([`TimeSlots`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Every exit and page fault of the target counted by the time slot it
/// happened in (an exit by the time of its `kvm_exit`), in the kernel: any
/// interval gets its own exact counts, to the slot's width.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSlots {
    /// Width of a slot.
    pub slot_ns: u64,
    /// `t_ns` where slot 0 starts (0 for a VMM profiling itself: its
    /// slots are then on its timeline's clock); slot `i` covers
    /// `start_ns + i * slot_ns` up to the next.
    pub start_ns: i64,
    /// Entries the in-kernel map had room for (one per slot and reason or
    /// fault kind) and entries used.
    pub capacity: u64,
    pub entries: u64,
    /// Events not counted per slot because the map was full (they are in
    /// the totals all the same): exits and faults.
    pub overflow_exits: u64,
    pub overflow_faults: u64,
    /// The first slot an event could not be counted in: every slot before
    /// it is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_from_slot: Option<u64>,
    /// Where the exits come from: `tracepoint:kvm:kvm_exit` (VMX/SVM, by
    /// the reasons of `exits.by_reason`) or `tracepoint:kvm:kvm_userspace_exit`
    /// (the PVM fallback); empty when no exit was counted.
    #[serde(default)]
    pub exits_source: String,
    /// Exits by reason: `[slot, count]` pairs in slot order, slots without
    /// exits of that reason left out. A reason's counts add up to its
    /// `exits.by_reason` count (less `overflow_exits`).
    pub exits: BTreeMap<String, Vec<[u64; 2]>>,
    /// Guest page faults (the kind `page_faults.guest_total` counts) and
    /// host page faults (user and kernel), as `[slot, count]` pairs.
    pub guest_faults: Vec<[u64; 2]>,
    pub host_faults: Vec<[u64; 2]>,
}

impl TimeSlots {
    /// What was counted in `start_ns..end_ns` (profile time): whole slots,
    /// and a slot the interval covers in part in proportion (each reason
    /// rounded on its own).
    pub fn between(&self, start_ns: u64, end_ns: u64) -> SlotTotals {
        let share =
            |series: &[[u64; 2]]| slot_share(series, self.slot_ns, self.start_ns, start_ns, end_ns);
        let exits_by_reason: BTreeMap<String, u64> = self
            .exits
            .iter()
            .map(|(r, s)| (r.clone(), share(s)))
            .filter(|(_, n)| *n > 0)
            .collect();
        SlotTotals {
            exits: exits_by_reason.values().sum(),
            exits_by_reason,
            guest_faults: share(&self.guest_faults),
            host_faults: share(&self.host_faults),
        }
    }
}

/// Counts of an interval ([`TimeSlots::between`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotTotals {
    pub exits: u64,
    pub exits_by_reason: BTreeMap<String, u64>,
    pub guest_faults: u64,
    pub host_faults: u64,
}

/// The count of `series` (`[slot, count]`, by slot) in `start..end`, partial
/// slots pro rata, rounded.
fn slot_share(series: &[[u64; 2]], width: u64, origin: i64, start: u64, end: u64) -> u64 {
    if end <= start || width == 0 {
        return 0;
    }
    let (start, end) = (i128::from(start), i128::from(end));
    let (width, origin) = (i128::from(width), i128::from(origin));
    let slot_of = |t: i128| ((t - origin).max(0) / width) as u64;
    let first = slot_of(start);
    let last = slot_of(end - 1);
    let from = series.partition_point(|[s, _]| *s < first);
    let mut total = 0.0f64;
    for &[slot, count] in series[from..].iter().take_while(|[s, _]| *s <= last) {
        let lo = origin + i128::from(slot) * width;
        let hi = lo + width;
        let covered = (hi.min(end) - lo.max(start)).max(0);
        total += count as f64 * covered as f64 / width as f64;
    }
    total.round() as u64
}
