//! Building and running a VM, as a recipe of stages (Firecracker's
//! builder): memory, irqchip, kernel load, boot data, devices, vCPUs, each
//! one method with its own error, then the run step that ends with a
//! [`Timeline`](crate::timeline::Timeline). `--stop-after` builds up
//! to a stage and reports the set-up alone.

mod builder;
mod emulation;
mod error;
mod images;
mod report;
mod restore;
mod restore_memory;
mod running;
mod snapshot;
mod vcpu;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use kvm_ioctls::VmFd;

use crate::console::MilestonePattern;
use crate::devices::MarkerCounts;
use crate::memory::{MemoryOptions, PreallocReport};
use crate::timeline::{vmm_marks, Recorder};
use crate::x86::mptable;

use builder::VmBuilder;
pub use emulation::{
    EmulationWatch, PVM_EMULATION_LIMIT, PVM_EMULATION_RATE, PVM_GRACE, PVM_WINDOW,
};
pub use error::{
    BootDataError, ConfigError, DeviceSetupError, IrqchipError, MemorySetupError, RunError,
    VcpuSetupError, VmError,
};
pub use restore::{check_identity, restore};
pub use snapshot::{restore_marks, run_with_snapshot};

/// Smallest guest we accept: the kernel, its page tables and an initrd need
/// room to breathe.
pub const MIN_MEMORY: u64 = 16 << 20;

/// The guest's memory when none is given (`run` without `--memory` or
/// `--numa`).
pub const DEFAULT_MEMORY: u64 = 256 << 20;

/// How long after "reboot: Power down" an ACPI guest may take to write the
/// sleep control register before the run ends as a halt.
pub const POWER_OFF_GRACE: Duration = Duration::from_secs(2);

/// Everything `bootscope run` configures.
pub struct VmConfig {
    pub kernel: PathBuf,
    pub initrd: Option<PathBuf>,
    pub cmdline: String,
    pub memory_bytes: u64,
    pub vcpus: u32,
    pub console: Box<dyn Write + Send>,
    pub patterns: Vec<MilestonePattern>,
    /// Stop the guest after this long (None: no limit).
    pub timeout: Option<Duration>,
    /// Run a non-PVM guest on a PVM host anyway (slowly, through the
    /// emulator).
    pub allow_emulation: bool,
    /// Map the initrd from its file (shared page cache) instead of copying.
    pub map_images: bool,
    /// bzImage kernels: decompress on the host (cached) or in the guest.
    pub decompress: crate::loader::DecompressOptions,
    /// NUMA regions, preallocation, huge pages (`total` is taken from
    /// `memory_bytes`).
    pub memory: MemoryOptions,
    /// Install the seccomp sandbox after set-up.
    pub sandbox: bool,
    /// Build only up to this stage and report the set-up alone.
    pub stop_after: Option<StopAfter>,
    /// Give the guest ACPI tables (hardware-reduced, no 8042, S5 power-off
    /// register); off leaves it the MP table only.
    pub acpi: bool,
    /// Set from another thread to stop the guest (e.g. the user quit the
    /// live view).
    pub stop: Option<Arc<AtomicBool>>,
    /// Read the kernel log from guest memory at shutdown and place its
    /// initcalls on the timeline (the command line must carry
    /// [`crate::kernel_log::CMDLINE_PARAMS`]).
    pub initcalls: bool,
    /// With `initcalls`: read them from the kernel's initcall tracepoints
    /// (the command line from [`crate::kernel_log::traced::cmdline_with_trace`]),
    /// with the symbols and types this loads from the booted image after
    /// the guest stopped. None: from `initcall_debug`'s log lines.
    pub initcall_kernel: Option<crate::kernel_log::GuestKernelLoader>,
    /// Read the guest kernel's loaded modules (names, text, symbols) from
    /// its memory at shutdown, with the symbols and types this loads from
    /// the booted image ([`RunReport::modules`]); the same loader as
    /// `initcall_kernel` loads the image once for both.
    pub modules: Option<crate::kernel_log::GuestKernelLoader>,
    /// Called once, on the VMM's thread, after the vCPU stage and just
    /// before the vCPU threads start (the first `KVM_RUN`); the run waits
    /// for it to return. A caller that must see every guest exit from the
    /// first one on, and is still getting ready, holds the run here. Not
    /// called when the build stops earlier (`stop_after`, an error).
    pub before_first_run: Option<Box<dyn FnOnce() + Send>>,
    /// The virtio devices (disks, rng, console), in their slot order.
    pub virtio: crate::virtio::VirtioConfig,
    /// The tool on the host that attaches to this process before the guest
    /// runs, whose marks the caller records: the timeline's phases split
    /// its time off the VMM's set-up.
    pub host_tool: Option<crate::timeline::HostTool>,
}

impl VmConfig {
    /// A configuration that boots `kernel` with `cmdline`, its console
    /// going to `console`, and everything else at its default: no initrd,
    /// [`DEFAULT_MEMORY`], one vCPU, the default milestone patterns, no
    /// time limit, ACPI tables, no virtio device, the initrd copied, the
    /// kernel decompressed on the host without a cache, no sandbox, no
    /// initcalls, no host tool. The caller sets what it changes.
    pub fn new(kernel: PathBuf, cmdline: String, console: Box<dyn Write + Send>) -> Self {
        Self {
            kernel,
            initrd: None,
            cmdline,
            memory_bytes: DEFAULT_MEMORY,
            vcpus: 1,
            console,
            patterns: MilestonePattern::defaults(),
            timeout: None,
            allow_emulation: false,
            map_images: false,
            decompress: Default::default(),
            memory: Default::default(),
            sandbox: false,
            stop_after: None,
            acpi: true,
            stop: None,
            initcalls: false,
            initcall_kernel: None,
            modules: None,
            before_first_run: None,
            virtio: Default::default(),
            host_tool: None,
        }
    }
}

/// `--stop-after`: the build stage after which to stop and report the
/// set-up alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopAfter {
    /// After the memory stage: guest memory allocated, preallocated when
    /// asked, and registered with KVM. Needs no kernel.
    Memory,
    /// After the boot data stage: the irqchip created, the kernel, initrd
    /// and command line loaded, and the boot tables written.
    Load,
}

/// Checks the numbers before touching KVM.
pub fn validate(cfg: &VmConfig, max_vcpus: u32) -> Result<(), ConfigError> {
    if cfg.vcpus == 0 {
        return Err(ConfigError::ZeroVcpus);
    }
    let max = max_vcpus.min(mptable::MAX_VCPUS);
    if cfg.vcpus > max {
        let why = if max_vcpus < mptable::MAX_VCPUS {
            "KVM_CAP_MAX_VCPUS".to_string()
        } else {
            "the MP table's space".to_string()
        };
        return Err(ConfigError::TooManyVcpus {
            requested: cfg.vcpus,
            max,
            why,
        });
    }
    if cfg.memory_bytes < MIN_MEMORY {
        return Err(ConfigError::MemoryTooSmall {
            given_mib: cfg.memory_bytes >> 20,
            min_mib: MIN_MEMORY >> 20,
        });
    }
    if cfg.memory_bytes % 4096 != 0 {
        return Err(ConfigError::MemoryUnaligned(cfg.memory_bytes));
    }
    let devices = cfg.virtio.count();
    if devices > crate::layout::VIRTIO_MAX_DEVICES {
        return Err(ConfigError::TooManyVirtioDevices {
            given: devices,
            max: crate::layout::VIRTIO_MAX_DEVICES,
        });
    }
    if devices > 0 && !cfg.acpi {
        return Err(ConfigError::VirtioWithoutAcpi(cfg.virtio.options()));
    }
    Ok(())
}

/// The result of a run.
pub struct RunReport {
    pub timeline: crate::timeline::Timeline,
    pub marker_counts: MarkerCounts,
    /// What preallocation did, when asked for.
    pub prealloc: Option<PreallocReport>,
    /// The guest console could not be written out (a full disk): the
    /// error and how much was lost.
    pub console_error: Option<String>,
    /// The guest kernel's loaded modules, when [`VmConfig::modules`] asked
    /// for them and the guest ran.
    pub modules: Option<bootscope_model::modules::GuestModules>,
}

/// Builds the VM stage by stage and runs the guest to the end (or builds up
/// to the stage `--stop-after` names). Bad input is [`VmError::Config`],
/// found before any stage runs except for the kernel load stage's.
pub fn run(cfg: VmConfig, recorder: Arc<Recorder>) -> Result<RunReport, VmError> {
    let mut vm = VmBuilder::new(cfg, recorder)?;
    let ram = vm.memory()?;
    vm.recorder.vmm(vmm_marks::MEMORY_READY);
    if vm.stops_after(StopAfter::Memory) {
        return Ok(vm.setup_only_report(StopAfter::Memory, &ram, None));
    }
    vm.irqchip()?;
    let images = vm.load_kernel(&ram)?;
    vm.boot_data(&ram, &images)?;
    vm.recorder.vmm(vmm_marks::KERNEL_LOADED);
    if vm.stops_after(StopAfter::Load) {
        return Ok(vm.setup_only_report(StopAfter::Load, &ram, Some(&images)));
    }
    let devices = vm.devices(&ram)?;
    let vcpus = vm.vcpus(&ram, Some(&images.kernel))?;
    vm.recorder.vmm(vmm_marks::VCPUS_CREATED);
    if let Some(hook) = vm.cfg.before_first_run.take() {
        hook();
    }
    Ok(vm.run(ram, images, devices, vcpus)?)
}

/// Keeps the VM file descriptor type reachable for callers that need it.
pub type Vm = VmFd;
