//! The errors of building and running a VM: [`ConfigError`] for bad input
//! (exit status 2), one error per build stage for failures of the VMM or
//! KVM, and [`VmError`] gathering them.

use crate::loader::LoadError;
use crate::memory::{MemoryError, PlanError, TopologyError};
use crate::sandbox::SandboxError;
use crate::x86::mptable::MpTableError;

/// Configuration errors: bad input, reported with exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A snapshot that cannot be restored or written as given.
    #[error(transparent)]
    Snapshot(crate::snapshot::SnapshotError),
    /// `--vcpus 0`.
    #[error("--vcpus must be at least 1")]
    ZeroVcpus,
    /// More vCPUs than KVM or the MP table allow.
    #[error("--vcpus {requested} is more than this host allows (at most {max}: {why})")]
    TooManyVcpus {
        requested: u32,
        max: u32,
        why: String,
    },
    /// Less memory than any kernel needs.
    #[error("--memory {given_mib} MiB is too small; give at least {min_mib} MiB")]
    MemoryTooSmall { given_mib: u64, min_mib: u64 },
    /// Memory not a multiple of the page size.
    #[error("--memory must be a multiple of 4 KiB (got {0} bytes)")]
    MemoryUnaligned(u64),
    /// Kernel, initrd or command line problem (probing the kernel before
    /// the build, or the kernel load stage).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A memory option (--numa, --prealloc-*, --hugepages) is wrong.
    #[error(transparent)]
    Memory(#[from] PlanError),
    /// The host's NUMA topology could not be read.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A `--disk` image cannot be used.
    #[error(transparent)]
    Disk(#[from] crate::virtio::DiskError),
    /// virtio devices are described to the guest in its ACPI tables.
    #[error("{0} need ACPI (they are described in its DSDT): drop --no-acpi, or leave them out (--no-rng)")]
    VirtioWithoutAcpi(String),
    /// More virtio devices than interrupt lines.
    #[error("{given} virtio devices asked for; at most {max} fit (one I/O APIC line each)")]
    TooManyVirtioDevices { given: usize, max: usize },
}

/// The memory stage failed: allocating guest memory, starting the
/// preallocation thread contexts, installing the sandbox, preallocating, or
/// registering the memory with KVM.
#[derive(Debug, thiserror::Error)]
pub enum MemorySetupError {
    /// Guest memory could not be mapped or bound to its host nodes.
    #[error(transparent)]
    Allocate(MemoryError),
    /// The preallocation thread contexts could not be started or pinned.
    #[error(transparent)]
    ThreadContexts(MemoryError),
    /// The sandbox could not be installed.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// Preallocating (faulting in) guest memory failed.
    #[error(transparent)]
    Preallocate(MemoryError),
    /// A guest memory region has no host mapping to give KVM.
    #[error(
        "guest memory region {slot} (at guest address {guest_addr:#x}) has no host mapping to \
         register with KVM: {source}; this is a bootscope bug, please report it"
    )]
    HostAddress {
        slot: u32,
        guest_addr: u64,
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    /// KVM refused a memory slot.
    #[error("KVM KVM_SET_USER_MEMORY_REGION failed: {source}")]
    RegisterSlot {
        slot: u32,
        #[source]
        source: kvm_ioctls::Error,
    },
}

/// The irqchip stage failed: creating the in-kernel interrupt controllers
/// and timer.
#[derive(Debug, thiserror::Error)]
pub enum IrqchipError {
    /// KVM could not create the PIC and I/O APIC.
    #[error("KVM KVM_CREATE_IRQCHIP failed: {0}")]
    CreateIrqchip(#[source] kvm_ioctls::Error),
    /// KVM could not create the PIT.
    #[error("KVM KVM_CREATE_PIT2 failed: {0}")]
    CreatePit(#[source] kvm_ioctls::Error),
}

/// The boot data stage failed: writing the MP table, the ACPI tables, or
/// the zero page / PVH start info into guest memory. Their addresses are
/// fixed in low memory, which every accepted guest has, so a failure here
/// is a bootscope bug.
#[derive(Debug, thiserror::Error)]
pub enum BootDataError {
    /// The MP table could not be built or written.
    #[error(transparent)]
    MpTable(#[from] MpTableError),
    /// The ACPI tables could not be written.
    #[error("cannot write the ACPI tables to guest memory: {0}; --no-acpi boots without them")]
    Acpi(#[source] vm_memory::GuestMemoryError),
    /// The Linux boot protocol's zero page could not be written.
    #[error("cannot write the zero page (boot parameters) to guest memory: {0}")]
    ZeroPage(#[source] vm_memory::GuestMemoryError),
    /// The PVH start info or its memory map could not be written.
    #[error("cannot write the PVH start info to guest memory: {0}")]
    PvhStartInfo(#[source] vm_memory::GuestMemoryError),
    /// The VM generation ID could not be written.
    #[error(transparent)]
    VmGenId(#[from] crate::devices::vmgenid::VmGenIdError),
}

/// The devices stage failed: wiring the serial port's interrupt.
#[derive(Debug, thiserror::Error)]
pub enum DeviceSetupError {
    /// No eventfd for the serial interrupt.
    #[error("cannot create the serial interrupt eventfd: {0}")]
    SerialEventFd(#[source] std::io::Error),
    /// KVM could not attach the eventfd to the serial IRQ.
    #[error("KVM KVM_IRQFD failed: {0}")]
    SerialIrqfd(#[source] kvm_ioctls::Error),
    /// A virtio device's eventfds could not be created.
    #[error("cannot create the eventfds of {device}: {source}")]
    VirtioEventFd {
        device: String,
        #[source]
        source: std::io::Error,
    },
    /// KVM refused a virtio device's irqfd or ioeventfd.
    #[error("KVM {ioctl} for {device} failed: {source}")]
    VirtioKvm {
        device: String,
        ioctl: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
}

/// The vCPU stage failed: creating and configuring the vCPUs.
#[derive(Debug, thiserror::Error)]
pub enum VcpuSetupError {
    /// A KVM ioctl of vCPU set-up failed.
    #[error("KVM {ioctl} failed: {source}")]
    Kvm {
        ioctl: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    /// The boot MSRs this KVM supports do not fit KVM's MSR list.
    #[error(
        "cannot build the list of boot MSRs to set: {0}; this is a bootscope bug, please report it"
    )]
    BootMsrs(#[source] vmm_sys_util::fam::Error),
    /// The boot CPU's GDT, IDT or page tables could not be written.
    #[error("cannot write the boot CPU's GDT, IDT and page tables to guest memory: {0}")]
    BootTables(#[source] vm_memory::GuestMemoryError),
}

/// Shorthand for a failed KVM ioctl of the vCPU stage.
pub(super) fn vcpu_ioctl(ioctl: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VcpuSetupError {
    move |source| VcpuSetupError::Kvm { ioctl, source }
}

/// The run step failed: starting the vCPU threads, or a guest that a PVM
/// host can only emulate.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The signal that stops vCPU threads could not be set up.
    #[error("cannot install the vCPU kick signal handler: {0}")]
    KickHandler(#[source] std::io::Error),
    /// A vCPU thread could not be created.
    #[error("cannot start a vCPU thread: {source}")]
    SpawnVcpu {
        index: u32,
        #[source]
        source: std::io::Error,
    },
    /// The virtio device thread could not be started.
    #[error("cannot start the virtio device thread: {0}")]
    VirtioWorker(#[source] std::io::Error),
    /// The stock kernel would run under PVM's emulator forever.
    #[error(
        "this host's KVM is PVM (kvm_pvm) and {kernel} is not a PVM guest: its instructions \
         are being emulated one by one ({emulated} so far) and it would never finish booting. \
         Run it under real KVM with `bootscope lab -- run ...`, or pass --allow-emulation to \
         run it anyway"
    )]
    PvmEmulation { kernel: String, emulated: u64 },
}

/// Why a VM could not be built or run: bad input ([`VmError::Config`],
/// exit status 2) or a failure of the VMM or KVM at one stage (exit
/// status 1).
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// The input was wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// /dev/kvm could not be used.
    #[error("cannot open /dev/kvm: {0} (is KVM available? run `bootscope doctor`)")]
    OpenKvm(#[source] kvm_ioctls::Error),
    /// KVM could not create the VM.
    #[error("KVM KVM_CREATE_VM failed: {0}")]
    CreateVm(#[source] kvm_ioctls::Error),
    /// The memory stage failed.
    #[error(transparent)]
    Memory(#[from] MemorySetupError),
    /// The irqchip stage failed.
    #[error(transparent)]
    Irqchip(#[from] IrqchipError),
    /// The boot data stage failed.
    #[error(transparent)]
    BootData(#[from] BootDataError),
    /// The devices stage failed.
    #[error(transparent)]
    Devices(#[from] DeviceSetupError),
    /// The vCPU stage failed.
    #[error(transparent)]
    Vcpus(#[from] VcpuSetupError),
    /// The run step failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A snapshot could not be taken or restored (bad input is
    /// [`VmError::Config`]).
    #[error(transparent)]
    Snapshot(crate::snapshot::SnapshotError),
}

/// A snapshot's bad input is a configuration error.
impl From<crate::snapshot::SnapshotError> for VmError {
    fn from(e: crate::snapshot::SnapshotError) -> Self {
        if e.is_bad_input() {
            VmError::Config(ConfigError::Snapshot(e))
        } else {
            VmError::Snapshot(e)
        }
    }
}

/// The kernel load stage's errors are bad input: the kernel, initrd or
/// command line given.
impl From<LoadError> for VmError {
    fn from(e: LoadError) -> Self {
        VmError::Config(ConfigError::Load(e))
    }
}
