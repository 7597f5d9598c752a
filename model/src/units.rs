//! A systemd guest's units on the VMM's clock: the timeline's `units`
//! object (docs/timeline-schema.md). The VMM writes it after reading the
//! record the guest's workload left on its disk; the summary, `plot`, the
//! Chrome trace and the TUI read it. One type for writer and readers.

use serde::{Deserialize, Serialize};

/// The timeline's `units` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnitsDoc {
    /// Where the record was read: the file and the disk image.
    pub source: String,
    /// systemd's version in the guest.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub systemd_version: String,
    /// Why no unit is on the timeline (the other fields are then empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How the guest's `CLOCK_MONOTONIC` maps onto the timeline's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<UnitsClock>,
    /// systemd's own start-up figures, and the timeline's beside them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup: Option<Startup>,
    /// Every unit that was activated during the boot, by start time.
    pub units: Vec<Unit>,
    /// The unit the critical chain leads to.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chain_target: String,
    /// The critical chain to `chain_target`, as `systemd-analyze
    /// critical-chain` computes it: the target first, then each unit it
    /// waited for last.
    pub critical_chain: Vec<ChainLink>,
    /// The initramfs stage: `Run /init` to the real root's init, and what
    /// it did (absent without an initramfs, or where its ends are unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initramfs: Option<crate::timeline_initramfs::InitramfsStage>,
}

/// Guest clock to timeline clock: timeline ns = guest ns + `offset_ns`,
/// within `error_ns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnitsClock {
    pub offset_ns: i64,
    pub error_ns: u64,
    /// The timeline time of the workload's port 0x80 write.
    pub marker_t_ns: u64,
    /// The guest's `CLOCK_MONOTONIC` read right before and after it.
    pub marker_guest_ns: [u64; 2],
}

/// systemd's `Startup finished in K (kernel) + U (userspace)` and the
/// same spans measured on the timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Startup {
    /// systemd's line, as `systemd-analyze time` printed it.
    pub line: String,
    /// systemd's kernel figure: its own start, on the guest clock (with a
    /// non-systemd initrd this includes the initrd).
    pub kernel_ns: u64,
    /// systemd's userspace figure: its start to start-up finished.
    pub userspace_ns: u64,
    /// Timeline time systemd started (PID 1).
    pub systemd_start_ns: u64,
    /// Timeline time start-up finished.
    pub finish_ns: u64,
    /// The first `KVM_RUN` to systemd's start, on the timeline.
    pub timeline_kernel_ns: u64,
    /// systemd's start to start-up finished, on the timeline.
    pub timeline_userspace_ns: u64,
    /// `timeline_userspace_ns / userspace_ns`: how well the aligned record
    /// holds together (its manager's timestamps, systemd's own line, the
    /// marker's clock reads).
    pub userspace_ratio: f64,
    /// `(timeline_kernel_ns + timeline_userspace_ns) / (kernel_ns +
    /// userspace_ns)`: above 1 by the time the kernel ran before its clock
    /// started.
    pub total_ratio: f64,
    /// How long the kernel ran, from the first `KVM_RUN`, before its
    /// `CLOCK_MONOTONIC` started (systemd's `(kernel)` figure leaves this
    /// out): `clock.offset_ns` minus the first `KVM_RUN`, within
    /// `clock.error_ns`.
    pub kernel_before_clock_ns: i64,
}

/// One unit's activation on the timeline's clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Unit {
    /// The unit's name (`systemd-udevd.service`).
    pub name: String,
    /// It left `inactive` (began activating).
    pub start_ns: u64,
    /// It became `active` (None: it never did, e.g. it failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_ns: Option<u64>,
    /// `active_ns - start_ns`, or to the deactivation for units that
    /// ended without becoming active (systemd-analyze blame's figure).
    pub duration_ns: u64,
    /// Its state when the record was taken (`active`, `inactive`, `failed`).
    pub state: String,
    /// The guest's own `InactiveExitTimestampMonotonic` (µs), unaligned.
    pub guest_start_us: u64,
    /// The guest's own `ActiveEnterTimestampMonotonic` (µs, 0 if never).
    pub guest_active_us: u64,
}

/// One link of the critical chain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChainLink {
    pub name: String,
    /// When it became active, on the timeline (`@` in systemd-analyze).
    pub active_ns: u64,
    /// How long it took to activate (`+` in systemd-analyze), when it
    /// had to.
    pub duration_ns: u64,
}

impl UnitsDoc {
    /// The unit named `name`.
    pub fn unit(&self, name: &str) -> Option<&Unit> {
        self.units.iter().find(|u| u.name == name)
    }
}
