//! The phases of a restored run (`run --restore`): its set-up, the memory
//! and the state loaded, the vCPUs resumed, then the guest going on from
//! the snapshot to its end.

use super::{vmm_marks, MarkSource, TimelineMark, TimelinePhase};

/// The VMM's marks of a restore.
pub mod restore_marks {
    /// Memory, irqchip, devices and vCPUs built.
    pub const VMM_SETUP: &str = "restore: vmm setup done";
    pub const MEMORY_COPIED: &str = "restore: memory copied";
    pub const MEMORY_MAPPED: &str = "restore: memory mapped";
    /// Guest memory registered with `userfaultfd`, its handler running.
    pub const MEMORY_REGISTERED: &str = "restore: memory registered";
    /// The recorded working set loaded (`--prefetch`).
    pub const PREFETCHED: &str = "restore: working set prefetched";
    /// The recorded working set loaded by a thread while the guest ran
    /// (`--prefetch` with `uffd`); no phase ends on it.
    pub const PREFETCH_DONE: &str = "restore: background prefetch done";
    /// The guest told the host stopped it (`KVM_KVMCLOCK_CTRL`), so that its
    /// watchdogs take the clock's step for no stall.
    pub const GUEST_PAUSED: &str = "restore: guest told it was paused";
    /// The VM's, the devices' and the vCPUs' state loaded.
    pub const STATE_RESTORED: &str = "restore: state restored";
    /// A run that took a snapshot wrote it.
    pub const SNAPSHOT_WRITTEN: &str = "snapshot: written";
}

/// The phases of a restored run, None when the marks are not a restore's:
/// - `vmm setup`: VMM start to the VM built;
/// - `memory`: the memory file copied, mapped or registered, and the
///   recorded working set prefetched;
/// - `state restored`: the VM's, devices' and vCPUs' state loaded;
/// - `resume`: to the first `KVM_RUN`;
/// - `guest`: first `KVM_RUN` to guest shutdown (the guest's own marks
///   after the snapshot point fall in it);
/// - `vmm teardown`: guest shutdown to VMM exit.
pub fn phases(marks: &[TimelineMark]) -> Option<Vec<TimelinePhase>> {
    let named = |name: &str| {
        marks
            .iter()
            .find(|m| m.name == name && m.source == MarkSource::Vmm)
    };
    let restored = named(restore_marks::STATE_RESTORED)?;
    let memory = named(restore_marks::PREFETCHED)
        .or_else(|| named(restore_marks::MEMORY_COPIED))
        .or_else(|| named(restore_marks::MEMORY_MAPPED))
        .or_else(|| named(restore_marks::MEMORY_REGISTERED));
    let steps = [
        (
            "vmm setup",
            named(vmm_marks::PROCESS_START),
            named(restore_marks::VMM_SETUP),
        ),
        ("memory", named(restore_marks::VMM_SETUP), memory),
        ("state restored", memory, Some(restored)),
        ("resume", Some(restored), named(vmm_marks::FIRST_KVM_RUN)),
        (
            "guest",
            named(vmm_marks::FIRST_KVM_RUN),
            named(vmm_marks::GUEST_SHUTDOWN),
        ),
        (
            "vmm teardown",
            named(vmm_marks::GUEST_SHUTDOWN),
            named(vmm_marks::VMM_EXIT),
        ),
    ];
    Some(
        steps
            .into_iter()
            .filter_map(|(name, a, b)| {
                let (a, b) = (a?, b?);
                (b.t_ns >= a.t_ns).then(|| TimelinePhase {
                    name: name.to_string(),
                    start_ns: a.t_ns,
                    end_ns: b.t_ns,
                    duration_ns: b.t_ns - a.t_ns,
                    from: a.name.clone(),
                    to: b.name.clone(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(name: &str, t_ns: u64) -> TimelineMark {
        TimelineMark {
            name: name.into(),
            source: MarkSource::Vmm,
            t_ns,
            value: None,
            vcpu: None,
        }
    }

    #[test]
    fn a_restore_has_its_own_phases() {
        let marks = [
            mark(vmm_marks::PROCESS_START, 0),
            mark(restore_marks::VMM_SETUP, 10),
            mark(restore_marks::MEMORY_MAPPED, 12),
            mark(restore_marks::STATE_RESTORED, 13),
            mark(vmm_marks::FIRST_KVM_RUN, 15),
            mark(vmm_marks::GUEST_SHUTDOWN, 40),
            mark(vmm_marks::VMM_EXIT, 41),
        ];
        let p = phases(&marks).unwrap();
        let names: Vec<(&str, u64)> = p.iter().map(|p| (p.name.as_str(), p.duration_ns)).collect();
        assert_eq!(
            names,
            [
                ("vmm setup", 10),
                ("memory", 2),
                ("state restored", 1),
                ("resume", 2),
                ("guest", 25),
                ("vmm teardown", 1)
            ]
        );
        assert!(phases(&marks[..2]).is_none(), "a boot's marks");
    }

    #[test]
    fn a_prefetch_ends_the_memory_phase() {
        let marks = [
            mark(restore_marks::VMM_SETUP, 10),
            mark(restore_marks::MEMORY_REGISTERED, 11),
            mark(restore_marks::PREFETCHED, 14),
            mark(restore_marks::STATE_RESTORED, 15),
        ];
        let p = phases(&marks).unwrap();
        let memory = p.iter().find(|p| p.name == "memory").unwrap();
        assert_eq!(
            (memory.duration_ns, memory.to.as_str()),
            (4, restore_marks::PREFETCHED)
        );
        let registered = phases(&[marks[0].clone(), marks[1].clone(), marks[3].clone()]).unwrap();
        assert_eq!(registered[0].to, restore_marks::MEMORY_REGISTERED);
    }
}
