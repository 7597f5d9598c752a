//! Snapshots of a running guest and their restore (docs/snapshot-schema.md).
//!
//! At the point `--snapshot-at` names, every vCPU thread parks out of
//! `KVM_RUN` with its last exit completed and its state saved on its own
//! thread ([`point`]); the VMM then saves the VM's in-kernel devices
//! ([`vm_state`]), the emulated devices (`persist.rs` beside each), the
//! guest memory as a sparse file ([`memory`]) and the state file with what
//! the snapshot depends on ([`state`]), all in a temporary directory
//! renamed into place ([`files`]). A restore reads and checks it all
//! before it builds the VM (`crate::vm::restore`).

pub mod files;
pub mod images;
pub mod memory;
pub mod point;
pub mod prefetch;
pub mod staging;
pub mod state;
pub mod uffd;
pub mod vcpu;
pub mod vm_state;
pub mod working_set;

use std::path::PathBuf;

pub use files::{open, OpenSnapshot};
pub use point::{SnapshotAt, SnapshotPoint};
pub use state::{CpuidLeaf, Identity, MachineState, Manifest};

/// What `--snapshot` asks for.
#[derive(Clone, Debug)]
pub struct SnapshotRequest {
    pub dir: PathBuf,
    pub at: SnapshotAt,
    /// Go on running after the snapshot (`--snapshot-continue`).
    pub keep_running: bool,
    /// With [`SnapshotAt::Signal`]: the flag a signal handler sets.
    pub signal: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// How a restore fills guest memory (`--memory-restore`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryRestore {
    /// Read the memory file's data into fresh memory before resuming.
    #[default]
    Copy,
    /// Map the memory file privately over guest memory: the guest faults
    /// its pages in from the page cache as it touches them, and restores
    /// of one snapshot share the pages none of them wrote.
    Mmap,
    /// Register guest memory with `userfaultfd` and serve each page the
    /// guest touches from the file, on a handler thread.
    Uffd,
}

impl MemoryRestore {
    pub fn name(self) -> &'static str {
        match self {
            Self::Copy => "copy",
            Self::Mmap => "mmap",
            Self::Uffd => "uffd",
        }
    }
}

/// The lazy restores' extras (`mmap`, `uffd`): the working set recorded
/// and prefetched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LazyOptions {
    /// Load the recorded working set (`DIR/working-set`) (`--prefetch`):
    /// before the first `KVM_RUN`, or with `uffd` and not
    /// [`Self::prefetch_first`] from a thread while the guest runs; a
    /// record that cannot be used is refused.
    pub prefetch: bool,
    /// With `uffd`, load the record before the first `KVM_RUN` (`run
    /// --prefetch`); false: from a thread while the guest runs (`run
    /// --prefetch --prefetch-background`).
    pub prefetch_first: bool,
    /// Load the rest of the memory file in the background after resume
    /// (`--prefault-rest`).
    pub prefault_rest: bool,
    /// Record the pages the guest touched up to its next mark into
    /// `DIR/working-set` (a restore without `--prefetch`, unless
    /// `--no-record`).
    pub record: bool,
    /// The mark that ends the window the working set is taken over (a
    /// mark's name, e.g. `serial: ready`); None: the guest's first mark
    /// after the first `KVM_RUN`.
    pub until: Option<String>,
    /// For tests: the userfaultfd handler fails after this many faults.
    pub fail_handler_after: Option<u64>,
}

/// What `--restore` asks for.
pub struct RestoreRequest {
    pub snapshot: OpenSnapshot,
    pub memory: MemoryRestore,
    /// Restore although a disk changed since the snapshot.
    pub force: bool,
    /// Check guest memory against the snapshot's digest once it is
    /// restored (reads all of it; with `--verify`).
    pub verify: bool,
    /// Working set recording and prefetch.
    pub lazy: LazyOptions,
}

/// Why a snapshot could not be taken or restored. Bad input (the
/// directory, its files, what it depends on) is told apart by
/// [`SnapshotError::is_bad_input`].
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{}: not a bootscope snapshot: {why}; give the directory `run --snapshot` wrote", dir.display())]
    NotASnapshot { dir: PathBuf, why: String },
    #[error("{}: {why}; the snapshot is damaged or was changed: take it again", path.display())]
    Corrupt { path: PathBuf, why: String },
    #[error("the snapshot's version {found} is not the one this bootscope reads ({}); restore it with the bootscope that wrote it", state::VERSION)]
    Version { found: u64 },
    #[error("{} is not trusted: {why}; snapshots must be this user's and writable by no one else (chmod go-w, or take the snapshot again)", path.display())]
    Untrusted { path: PathBuf, why: String },
    #[error(
        "the snapshot was made for {what} {snapshot}, but {given} is given; give the same or none"
    )]
    Mismatch {
        what: &'static str,
        snapshot: String,
        given: String,
    },
    #[error("{what} {} changed since the snapshot (or is missing); restore with the same file, or give --force for a disk", path.display())]
    Changed { what: &'static str, path: PathBuf },
    #[error("this host's CPU lacks features the snapshot's guest saw (CPUID {function:#x}.{index} {reg}: {missing:#010x} missing); restore on a host like the one that took it")]
    CpuFeatures {
        function: u32,
        index: u32,
        reg: &'static str,
        missing: u32,
    },
    #[error("--snapshot {}: it exists and is not an empty directory; give a new name", .0.display())]
    TargetNotEmpty(PathBuf),
    #[error("--snapshot: {} has {} MiB free, the guest's memory needs up to {} MiB; free some room or snapshot elsewhere", dir.display(), free >> 20, need >> 20)]
    NoRoom { dir: PathBuf, free: u64, need: u64 },
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("snapshot: {0}")]
    Vcpu(#[from] vcpu::VcpuStateError),
    #[error("snapshot: {0}")]
    Vm(#[from] vm_state::VmStateError),
    #[error("restore: {0}")]
    Devices(#[from] crate::devices::DevicesRestoreError),
    #[error("snapshot: {0}")]
    Stopping(String),
    /// Memory a restore cannot set up as asked: `userfaultfd` unavailable,
    /// no huge pages, a working set `--prefetch` cannot use.
    #[error("{0}")]
    MemoryRefused(String),
    #[error("restore: guest memory: {0}")]
    Memory(String),
}

impl SnapshotError {
    /// True when the user's input is at fault (exit status 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::NotASnapshot { .. }
                | Self::Corrupt { .. }
                | Self::Version { .. }
                | Self::Untrusted { .. }
                | Self::Mismatch { .. }
                | Self::Changed { .. }
                | Self::CpuFeatures { .. }
                | Self::TargetNotEmpty(_)
                | Self::NoRoom { .. }
                | Self::MemoryRefused(_)
        )
    }
}

/// The CPUID leaves whose feature bits a guest may depend on.
const FEATURE_LEAVES: [(u32, u32); 4] = [(1, 0), (7, 0), (0xd, 1), (0x8000_0001, 0)];

/// Refuses a host whose CPUID (as this VMM would give a guest, `host`)
/// lacks a feature bit the snapshot's guest saw (`saved`).
pub fn check_cpu(saved: &[CpuidLeaf], host: &[CpuidLeaf]) -> Result<(), SnapshotError> {
    for (function, index) in FEATURE_LEAVES {
        let find = |v: &[CpuidLeaf]| {
            v.iter()
                .find(|l| l.function == function && l.index == index)
                .copied()
        };
        let Some(s) = find(saved) else { continue };
        let h = find(host).unwrap_or(CpuidLeaf {
            function,
            index,
            flags: 0,
            eax: 0,
            ebx: 0,
            ecx: 0,
            edx: 0,
        });
        for (reg, a, b) in [
            ("ebx", s.ebx, h.ebx),
            ("ecx", s.ecx, h.ecx),
            ("edx", s.edx, h.edx),
        ] {
            // Leaf 1's EBX is the APIC id and counts, not features.
            if function == 1 && reg == "ebx" {
                continue;
            }
            let missing = a & !b;
            if missing != 0 {
                return Err(SnapshotError::CpuFeatures {
                    function,
                    index,
                    reg,
                    missing,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(function: u32, ecx: u32) -> CpuidLeaf {
        CpuidLeaf {
            function,
            index: 0,
            flags: 0,
            eax: 0,
            ebx: 0,
            ecx,
            edx: 0,
        }
    }

    #[test]
    fn a_host_missing_a_feature_is_refused() {
        let saved = [leaf(1, 0b1011)];
        assert!(check_cpu(&saved, &[leaf(1, 0b1111)]).is_ok());
        let e = check_cpu(&saved, &[leaf(1, 0b0011)]).unwrap_err();
        assert!(e.is_bad_input());
        assert!(e.to_string().contains("0x00000008"), "{e}");
    }
}
