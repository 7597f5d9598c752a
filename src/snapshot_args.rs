//! `run`'s snapshot flags (`--snapshot DIR --snapshot-at MARK
//! [--snapshot-continue]`, `--restore DIR [--memory-restore
//! copy|mmap|uffd] [--prefetch [--prefetch-background]] [--prefault-rest] [--no-record] [--verify]
//! [--force]`): what they make of the command line, and which
//! of the VMM's runs they start (docs/snapshot-schema.md).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bootscope_vmm::snapshot::{self, MemoryRestore, RestoreRequest, SnapshotAt, SnapshotRequest};
use bootscope_vmm::timeline::Recorder;
use bootscope_vmm::vm::{self, RunReport, VmConfig, VmError};

use crate::common::{usage, Failure, DEFAULT_CMDLINE};
use crate::run_args::RunArgs;

/// `--memory-restore`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MemoryRestoreArg {
    /// Read the memory file's data into fresh memory before resuming.
    #[default]
    Copy,
    /// Map the memory file privately: pages fault in as the guest touches
    /// them, shared between restores of one snapshot.
    Mmap,
    /// Register guest memory with userfaultfd: a handler thread serves
    /// each page the guest touches from the memory file.
    Uffd,
}

#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct SnapshotArgs {
    /// Take a snapshot of the running guest at --snapshot-at into DIR (a
    /// new name or an empty directory; written under a temporary name
    /// beside it and renamed into place), then end the run
    /// (docs/snapshot-schema.md).
    #[arg(long, value_name = "DIR", requires = "snapshot_at", conflicts_with_all = ["restore", "stop_after", "tui"])]
    pub(crate) snapshot: Option<PathBuf>,
    /// Where to take it: `userspace` (the first userspace mark), a port
    /// 0x80 value such as 0x61 (its first write), or SIGUSR1 (sent to
    /// bootscope).
    #[arg(long, value_name = "MARK", requires = "snapshot")]
    pub(crate) snapshot_at: Option<SnapshotAt>,
    /// Let the guest go on after the snapshot instead of ending the run.
    #[arg(long, requires = "snapshot")]
    pub(crate) snapshot_continue: bool,
    /// Restore the snapshot in DIR and run the guest on from where it
    /// stopped. The kernel, initrd, command line, memory size and vCPUs
    /// come from the snapshot; given, they must match it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["stop_after", "tui"])]
    pub(crate) restore: Option<PathBuf>,
    /// How --restore fills guest memory: copy (read the memory file's
    /// data before resuming), mmap (map it privately; pages fault in) or
    /// uffd (a userfaultfd handler serves each page from the file).
    #[arg(long, value_enum, default_value = "copy", requires = "restore")]
    pub(crate) memory_restore: MemoryRestoreArg,
    /// With --restore: check the whole memory file against its digest
    /// first, and guest memory once restored (reads all of it).
    #[arg(long, requires = "restore")]
    pub(crate) verify: bool,
    /// With --restore: restore although a disk changed since the snapshot.
    #[arg(long, requires = "restore")]
    pub(crate) force: bool,
    /// With --restore (mmap or uffd): load the working set an earlier
    /// restore recorded (DIR/working-set) in file order and large batches
    /// before the guest runs; the rest comes on demand.
    #[arg(long, requires = "restore")]
    pub(crate) prefetch: bool,
    /// With --prefetch and --memory-restore uffd: start the guest at once
    /// and load the working set from a thread while it runs, in the order
    /// the guest first touched it where the record has it (its faults
    /// served at once meanwhile, the load moved to the faulting part).
    #[arg(long, requires = "prefetch")]
    pub(crate) prefetch_background: bool,
    /// With --restore (mmap or uffd): load the rest of the memory file in
    /// the background after the guest resumed.
    #[arg(long, requires = "restore")]
    pub(crate) prefault_rest: bool,
    /// With --restore: do not record the pages the guest touches up to its
    /// next mark into DIR/working-set (a lazy restore records them).
    #[arg(long, requires = "restore", conflicts_with = "prefetch")]
    pub(crate) no_record: bool,
    /// With --restore: the mark that ends the window whose pages are the
    /// working set (a mark's name as the timeline gives it, e.g. `serial:
    /// ready` for --serial-pattern ready=...); default: the guest's first
    /// mark after it resumed.
    #[arg(long, value_name = "MARK", requires = "restore")]
    pub(crate) working_set_until: Option<String>,
}

/// Which of the VMM's runs `run` starts.
pub(crate) enum RunMode {
    Boot,
    Snapshot(SnapshotRequest),
    Restore(Box<RestoreRequest>, Overrides),
}

/// With `--restore`: what the command line left at its default, taken from
/// the snapshot.
#[derive(Default)]
pub(crate) struct Overrides {
    memory_bytes: Option<u64>,
    vcpus: Option<u32>,
    cmdline: Option<String>,
    acpi: Option<bool>,
    disks: Option<Vec<bootscope_vmm::virtio::DiskSpec>>,
}

/// Reads the snapshot of `--restore` (every check that needs no VM: bad
/// input exits 2) and fills in the kernel and initrd it was made with when
/// the command line gives none; installs SIGUSR1 for `--snapshot-at
/// SIGUSR1`.
pub(crate) fn prepare(mut args: RunArgs) -> Result<(RunArgs, RunMode), Failure> {
    let s = &args.snapshot;
    if let Some(dir) = s.snapshot.clone() {
        let at = s.snapshot_at.unwrap_or(SnapshotAt::Userspace);
        let signal = if at == SnapshotAt::Signal {
            let flag = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(signal_hook::consts::SIGUSR1, flag.clone())
                .map_err(|e| Failure::from(anyhow::anyhow!("cannot handle SIGUSR1: {e}")))?;
            Some(flag)
        } else {
            None
        };
        let req = SnapshotRequest {
            dir,
            at,
            keep_running: s.snapshot_continue,
            signal,
        };
        return Ok((args, RunMode::Snapshot(req)));
    }
    let Some(dir) = s.restore.clone() else {
        return Ok((args, RunMode::Boot));
    };
    let snapshot = snapshot::open(&dir, s.verify).map_err(|e| usage(e.into()))?;
    let id = &snapshot.state.identity;
    if args.kernel.is_none() {
        args.kernel = Some(PathBuf::from(&id.kernel.path));
        if args.initrd.is_none() {
            args.initrd = id.initrd.as_ref().map(|i| PathBuf::from(&i.path));
        }
    }
    let memory = match s.memory_restore {
        MemoryRestoreArg::Copy => MemoryRestore::Copy,
        MemoryRestoreArg::Mmap => MemoryRestore::Mmap,
        MemoryRestoreArg::Uffd => MemoryRestore::Uffd,
    };
    let lazy = snapshot::LazyOptions {
        prefetch: s.prefetch,
        prefetch_first: !s.prefetch_background,
        prefault_rest: s.prefault_rest,
        record: !s.no_record,
        until: s.working_set_until.clone(),
        fail_handler_after: None,
    };
    check_memory_mode(memory, &args)?;
    if s.prefetch_background && memory != MemoryRestore::Uffd {
        return Err(usage(anyhow::anyhow!(
            "--prefetch-background needs --memory-restore uffd (only the userfaultfd handler \
             can serve the guest while a thread loads the working set); add \
             --memory-restore uffd, or leave --prefetch-background out to load the working \
             set before the guest runs"
        )));
    }
    let (force, verify) = (s.force, s.verify);
    let o = overrides(&args, id);
    let req = RestoreRequest {
        snapshot,
        memory,
        force,
        verify,
        lazy,
    };
    Ok((args, RunMode::Restore(Box::new(req), o)))
}

impl RunMode {
    /// The guest's memory in bytes once the run starts: `cfg`'s, or a
    /// restored snapshot's when the command line leaves it at its default.
    pub(crate) fn memory_bytes(&self, cfg: &VmConfig) -> u64 {
        match self {
            RunMode::Restore(_, o) => o.memory_bytes.unwrap_or(cfg.memory_bytes),
            _ => cfg.memory_bytes,
        }
    }
}

/// `--memory-restore mmap` maps the memory file over guest memory, which a
/// hugetlb mapping (`--hugepages`) cannot take: refused before anything
/// runs, naming the mode that works.
fn check_memory_mode(memory: MemoryRestore, args: &RunArgs) -> Result<(), Failure> {
    if memory == MemoryRestore::Mmap {
        if let Some(size) = &args.hugepages {
            return Err(usage(anyhow::anyhow!(
                "--memory-restore mmap cannot be used with --hugepages {size}: the snapshot's \
                 memory file cannot be mapped over huge pages; use --memory-restore copy with \
                 --hugepages, or leave --hugepages out"
            )));
        }
    }
    Ok(())
}

/// What the command line leaves at its default comes from the snapshot
/// (memory size, vCPUs, command line, ACPI, disks).
fn overrides(args: &RunArgs, id: &snapshot::Identity) -> Overrides {
    Overrides {
        memory_bytes: args.memory.is_none().then_some(id.memory_bytes),
        vcpus: args.vcpus.is_none().then_some(id.vcpus),
        cmdline: (args.cmdline == DEFAULT_CMDLINE).then(|| id.cmdline.clone()),
        acpi: (!args.no_acpi).then_some(id.acpi),
        disks: args.devices.disks.is_empty().then(|| {
            (id.disks.iter().zip(&id.disks_readonly))
                .map(|(d, &readonly)| bootscope_vmm::virtio::DiskSpec {
                    path: PathBuf::from(&d.path),
                    readonly,
                })
                .collect()
        }),
    }
}

fn apply(cfg: &mut VmConfig, o: Overrides) {
    cfg.memory_bytes = o.memory_bytes.unwrap_or(cfg.memory_bytes);
    cfg.vcpus = o.vcpus.unwrap_or(cfg.vcpus);
    cfg.cmdline = o.cmdline.unwrap_or(std::mem::take(&mut cfg.cmdline));
    cfg.acpi = o.acpi.unwrap_or(cfg.acpi);
    if let Some(d) = o.disks {
        cfg.virtio.disks = d;
    }
}

/// Starts the run the mode asks for.
pub(crate) fn run_vm(
    cfg: VmConfig,
    recorder: Arc<Recorder>,
    mode: RunMode,
) -> Result<RunReport, VmError> {
    match mode {
        RunMode::Boot => vm::run(cfg, recorder),
        RunMode::Snapshot(req) => vm::run_with_snapshot(cfg, recorder, req),
        RunMode::Restore(req, o) => {
            let mut cfg = cfg;
            apply(&mut cfg, o);
            vm::restore(cfg, recorder, *req)
        }
    }
}
