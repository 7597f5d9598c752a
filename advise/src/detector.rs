//! What a rule looks for ([`Detector`]): one variant per kind of evidence,
//! each evaluated by [`crate::evaluate::evaluate`] and described in
//! docs/advise.md by [`crate::docs`].

use serde::Serialize;

/// What a rule looks for.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Detector {
    /// Port I/O exits before userspace made by these guest functions
    /// (exit sites); without sites, port I/O on `ports` (first..=last) at
    /// the mean latency of its reason.
    ExitsAt {
        functions: &'static [&'static str],
        ports: (u16, u16),
        /// Less than this (estimated) is no finding.
        min_ns: u64,
    },
    /// Exits of these reasons (count x latency).
    ExitReasons { reasons: &'static [&'static str] },
    /// Initcalls of these names that took at least `min_ns`.
    SlowInitcalls {
        names: &'static [&'static str],
        min_ns: u64,
    },
    /// Initcalls, of any name not named by another rule, that returned
    /// -ENODEV (no such device) after at least `min_ns`: probes for
    /// hardware the VM does not have.
    FailedProbes { min_ns: u64 },
    /// `populate_rootfs` unpacking a compressed initramfs.
    CompressedInitramfs,
    /// An initrd copied into guest memory, at least `min_bytes` large.
    CopiedInitrd { min_bytes: u64 },
    /// A bzImage whose decompressor ran in the guest.
    GuestDecompression,
    /// A compressed bzImage given to QEMU with `-kernel`, and at least
    /// `min_ns` from the VM's first exit to the kernel's first port I/O
    /// (the phases before `kernel`), the guest decompressing it there.
    CompressedVmmKernel { min_ns: u64 },
    /// Preallocation of guest memory by one thread, at least `min_ns`.
    SerialPrealloc { min_ns: u64 },
    /// The kernel command line lacks all of `absent` (a setting it could
    /// have); no time is attributed.
    CmdlineLacks { absent: &'static [&'static str] },
    /// The slowest units on the critical chain (at most
    /// [`crate::userspace::SLOWEST_ON_CHAIN`]), each at least `min_ns`;
    /// targets, devices, the root mount, journald and the wait units left
    /// out.
    SlowChainUnits { min_ns: u64 },
    /// Units of these names that ran (they wait for devices or the network).
    WaitUnits { names: &'static [&'static str] },
    /// Units a VM rarely needs that ran in this boot
    /// ([`crate::userspace::rarely_needed`]): one finding for all of them.
    RarelyNeededUnits,
    /// systemd's status lines on a serial console (`console=ttyS*`).
    StatusOnConsole,
    /// The initramfs stage, at least `min_ns`.
    InitramfsStage { min_ns: u64 },
    /// fsck of the root file system (`systemd-fsck-root.service`, or the
    /// initramfs's fsck).
    RootFsck,
    /// The workload waits on the critical chain for a default target
    /// that waited at least `min_ns` after `basic.target`
    /// ([`crate::userspace::workload_behind_target`]).
    WorkloadBehindTarget { min_ns: u64 },
}
