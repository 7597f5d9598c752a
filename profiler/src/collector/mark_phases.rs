//! Phases switched where the port write happens: the phases collector's
//! `mark_phases` table, filled before attaching with what each kind of
//! port write opens (`phases::port_write_phase`), and the `phase_state`
//! it keeps per process (how far its boot got, when its phase last
//! changed at a port write). Userspace still switches phases at the VMM's
//! and the console's marks, and reads `phase_state` first so that a mark
//! read late does not undo a switch made at a port write since.

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use aya::Ebpf;

use super::maps::map_error;
use super::object::BpfObject;
use crate::bpf::{self, BsPhaseState};
use crate::error::ProfilerError;
use crate::phases::{port_write_phase, PhaseNames, PortWrite};

/// Every kind of port write the table has a slot for, with its slot.
fn slots() -> impl Iterator<Item = (u32, PortWrite)> {
    let debug = (0..3u8).flat_map(|who| {
        (0..=255u8).map(move |value| {
            (
                bpf::mark_slot_debug(u32::from(who), value),
                PortWrite::Debug { who, value },
            )
        })
    });
    let boot_time = (0..=255u8).map(|value| {
        (
            bpf::mark_slot_boot_time(value),
            PortWrite::BootTime { value },
        )
    });
    debug.chain(boot_time).chain(std::iter::once((
        bpf::MARK_SLOT_KERNEL_FIRST,
        PortWrite::KernelFirst,
    )))
}

/// A table slot's value: the phase index + 1 and its boot rank.
fn slot_value(phase: u32, rank: Option<u8>) -> u32 {
    (phase + 1) | (u32::from(rank.map_or(0, |r| r + 1)) << bpf::MARK_RANK_SHIFT)
}

/// The boot rank of a `phase_state` entry's `reached` (0: none).
fn rank_of(reached: u32) -> Option<u8> {
    reached.checked_sub(1).map(|r| r as u8)
}

/// Fills `mark_phases` (when the object has it), interning the phases in
/// `names`: the indices the kernel files under are the profile's.
pub(super) fn fill(ebpf: &mut Ebpf, names: &mut PhaseNames) -> Result<(), ProfilerError> {
    let Some(map) = ebpf.map_mut("mark_phases") else {
        return Ok(());
    };
    let mut table =
        Array::<&mut MapData, u32>::try_from(map).map_err(|e| map_error("mark_phases", e))?;
    for (slot, write) in slots() {
        if let Some((phase, rank)) = port_write_phase(write, names) {
            table
                .set(slot, slot_value(phase, rank), 0)
                .map_err(|e| map_error("mark_phases", e))?;
        }
    }
    Ok(())
}

/// The kernel's `phase_state` of process `tgid`.
fn state_of(bpf: &BpfObject, tgid: u32) -> Option<BsPhaseState> {
    let map = bpf.map("phase_state")?;
    let m = BpfHashMap::<&MapData, u32, BsPhaseState>::try_from(map).ok()?;
    m.get(&tgid, 0).ok()
}

/// Whether the kernel switched process `tgid`'s phase at a port write
/// after `mono_ns` (CLOCK_MONOTONIC, as `bpf_ktime_get_ns`).
pub(super) fn switched_after(bpf: &BpfObject, tgid: u32, mono_ns: u64) -> bool {
    state_of(bpf, tgid).is_some_and(|s| s.switched_ns > mono_ns)
}

/// Tells the kernel that process `tgid`'s boot reached `rank` by a mark
/// of userspace's (a console line, the VMM), so that a port write of an
/// earlier boot phase opens nothing there either.
pub(super) fn note_rank(bpf: &mut BpfObject, tgid: u32, rank: u8) {
    let old = state_of(bpf, tgid).unwrap_or_default();
    if rank_of(old.reached).is_some_and(|r| r >= rank) {
        return;
    }
    let Some(map) = bpf.map_mut("phase_state") else {
        return;
    };
    if let Ok(mut m) = BpfHashMap::<&mut MapData, u32, BsPhaseState>::try_from(map) {
        let new = BsPhaseState {
            reached: u32::from(rank) + 1,
            ..old
        };
        let _ = m.insert(tgid, new, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_is_in_the_table_once() {
        let all: Vec<u32> = slots().map(|(s, _)| s).collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len());
        assert!(all.iter().all(|&s| s < bpf::MARK_SLOTS));
    }

    #[test]
    fn slots_hold_the_phases_marks_open() {
        let mut names = PhaseNames::default();
        let at = |w, names: &mut PhaseNames| port_write_phase(w, names);
        let (kernel, rank) = at(
            PortWrite::Debug {
                who: 0,
                value: 0x41,
            },
            &mut names,
        )
        .unwrap();
        assert_eq!(names.name(kernel), "kernel");
        assert_eq!(rank, Some(2));
        // The kernel's io_delay 0x00 from kernel text is no marker but
        // shows the kernel; from below the kernel half, the boot code.
        let (p, _) = at(PortWrite::Debug { who: 2, value: 0 }, &mut names).unwrap();
        assert_eq!(p, kernel);
        let (p, _) = at(PortWrite::Debug { who: 1, value: 0 }, &mut names).unwrap();
        assert_eq!(names.name(p), "bootloader");
        let (p, rank) = at(
            PortWrite::Debug {
                who: 0,
                value: 0x90,
            },
            &mut names,
        )
        .unwrap();
        assert_eq!((names.name(p).as_str(), rank), ("custom 0x90", None));
        let (p, _) = at(PortWrite::BootTime { value: 7 }, &mut names).unwrap();
        assert_eq!(names.name(p), "userspace");
        assert_eq!(at(PortWrite::BootTime { value: 2 }, &mut names), None);
        let (p, _) = at(PortWrite::KernelFirst, &mut names).unwrap();
        assert_eq!(p, kernel);
        assert_eq!(slot_value(3, Some(2)), 4 | (3 << 16));
        assert_eq!(slot_value(3, None), 4);
        assert_eq!(rank_of(3), Some(2));
        assert_eq!(rank_of(0), None);
    }
}
