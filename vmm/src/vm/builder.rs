//! The build stages of a VM, each one method with its own error: memory,
//! irqchip, kernel load, boot data, devices, vCPUs. [`super::run`] calls
//! them in that order; the run step is in `running.rs`.

use std::sync::{Arc, Mutex};

use kvm_bindings::{kvm_pit_config, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

use crate::bootparams;
use crate::console::ConsoleSink;
use crate::devices::{Devices, MarkerCounts};
use crate::host::{self, KvmFlavour};
use crate::kvm_stats::StatsFd;
use crate::layout;
use crate::loader::{self, EntryMode, LoadError, LoadedKernel};
use crate::memory::{
    self, GuestMemoryBacking, MemoryPlan, MethodChoice, PreallocContexts, PreallocReport, Topology,
};
use crate::timeline::Recorder;
use crate::virtio::{self, MmioTransport, MmioWindow, VirtioDevice, VirtioDevices, VirtioSlot};
use crate::x86::{acpi, cpuid, mptable, regs};

use super::error::{
    vcpu_ioctl, BootDataError, ConfigError, DeviceSetupError, IrqchipError, MemorySetupError,
    VcpuSetupError, VmError,
};
use super::images::BootImages;
use super::report::setup_only_timeline;
use super::{validate, RunReport, StopAfter, VmConfig};

/// Guest memory as the memory stage leaves it: mapped, bound, preallocated
/// when asked, and registered with KVM.
pub(super) struct GuestRam {
    /// Owns the mappings; it must outlive every vCPU that runs on them.
    pub(super) backing: GuestMemoryBacking,
    /// What preallocation did, when asked for.
    pub(super) prealloc: Option<PreallocReport>,
}

impl GuestRam {
    fn mem(&self) -> &GuestMemoryMmap {
        self.backing.guest_memory()
    }
}

/// The vCPUs the vCPU stage made, and their statistics files (none where
/// the kernel lacks binary statistics).
pub(super) struct Vcpus {
    pub(super) fds: Vec<VcpuFd>,
    pub(super) stats: Vec<StatsFd>,
}

/// A VM under construction: the input checked, KVM open, the VM created.
pub(super) struct VmBuilder {
    pub(super) cfg: VmConfig,
    pub(super) recorder: Arc<Recorder>,
    pub(super) flavour: KvmFlavour,
    pub(super) vm: VmFd,
    kvm: Kvm,
    plan: MemoryPlan,
    /// The kernel, read and probed (a bzImage's payload decompressing on
    /// its own thread meanwhile); None when only memory is set up.
    prepared: Option<loader::PreparedKernel>,
    /// The `--disk` images, opened, checked and locked; the devices stage
    /// takes them.
    disks: Vec<virtio::DiskImage>,
}

/// The guest NUMA nodes of `backing` (one per `--numa` region), for the
/// ACPI tables.
fn guest_numa(backing: &GuestMemoryBacking) -> Vec<acpi::NumaNode> {
    backing
        .regions()
        .iter()
        .map(|r| acpi::NumaNode {
            id: r.guest_node(),
            cpus: r.plan().guest_cpus.iter().collect(),
            ranges: r
                .pieces()
                .iter()
                .map(|p| (p.guest_addr().0, p.len() as u64))
                .collect(),
        })
        .collect()
}

impl VmBuilder {
    /// Opens KVM, checks the configuration (numbers, memory plan against the
    /// host, the kernel's format unless only memory is set up) and creates
    /// the VM. Every bad input is found here, before anything is allocated.
    pub(super) fn new(cfg: VmConfig, recorder: Arc<Recorder>) -> Result<Self, VmError> {
        let prepare = cfg.stop_after != Some(StopAfter::Memory);
        Self::with_kernel(cfg, recorder, prepare)
    }

    /// As [`Self::new`]; `prepare`: probe the kernel and start its
    /// decompression (a restore, whose memory holds the kernel, does not).
    pub(super) fn with_kernel(
        cfg: VmConfig,
        recorder: Arc<Recorder>,
        prepare: bool,
    ) -> Result<Self, VmError> {
        let flavour = host::kvm_flavour(&host::HostRoot::default());
        let kvm = Kvm::new().map_err(VmError::OpenKvm)?;
        validate(&cfg, kvm.get_max_vcpus() as u32)?;
        let mut opts = cfg.memory.clone();
        opts.total = Some(cfg.memory_bytes);
        let topology = Topology::host().map_err(ConfigError::from)?;
        let plan = MemoryPlan::new(&opts, &topology).map_err(ConfigError::from)?;
        plan.check_vcpus(cfg.vcpus).map_err(ConfigError::from)?;
        // Probe before allocating so a bad kernel fails fast; a bzImage's
        // payload decompresses on its own thread meanwhile.
        let prepared = if prepare {
            Some(loader::prepare_kernel(
                &cfg.kernel,
                &cfg.decompress,
                Some(recorder.clone()),
            )?)
        } else {
            None
        };
        let disks = virtio::DiskImage::open_all(&cfg.virtio.disks).map_err(ConfigError::from)?;
        let vm = kvm.create_vm().map_err(VmError::CreateVm)?;
        Ok(Self {
            cfg,
            recorder,
            flavour,
            vm,
            kvm,
            plan,
            prepared,
            disks,
        })
    }

    /// True when `--stop-after` asks to stop after `stage`.
    pub(super) fn stops_after(&self, stage: StopAfter) -> bool {
        self.cfg.stop_after == Some(stage)
    }

    /// The report of a build stopped after `stage`.
    pub(super) fn setup_only_report(
        &self,
        stage: StopAfter,
        ram: &GuestRam,
        images: Option<&BootImages>,
    ) -> RunReport {
        RunReport {
            timeline: setup_only_timeline(
                &self.cfg,
                &self.recorder,
                self.flavour,
                stage,
                images.map(|i| &i.kernel),
                ram.prealloc.as_ref(),
            ),
            marker_counts: MarkerCounts::default(),
            prealloc: ram.prealloc.clone(),
            console_error: None,
            modules: None,
        }
    }

    /// Memory stage: allocates guest memory, starts the preallocation
    /// thread contexts, installs the sandbox (after the contexts took their
    /// CPU affinity, which it forbids), preallocates through the contexts,
    /// and registers each mapping as a KVM memory slot.
    pub(super) fn memory(&self) -> Result<GuestRam, MemorySetupError> {
        let plan = &self.plan;
        let backing = memory::allocate(plan, &bootparams::ram_ranges(plan.total()))
            .map_err(MemorySetupError::Allocate)?;
        let contexts = if plan.prealloc() {
            Some(PreallocContexts::new(plan).map_err(MemorySetupError::ThreadContexts)?)
        } else {
            None
        };
        if self.cfg.sandbox {
            crate::sandbox::install()?;
            self.recorder.vmm("vmm: sandbox installed");
        }
        let prealloc = match contexts {
            Some(c) => Some(
                memory::preallocate_in(&c, &backing, plan, MethodChoice::Auto)
                    .map_err(MemorySetupError::Preallocate)?,
            ),
            None => None,
        };
        self.register_memory(backing.guest_memory())?;
        Ok(GuestRam { backing, prealloc })
    }

    /// One KVM memory slot per guest memory region.
    fn register_memory(&self, mem: &GuestMemoryMmap) -> Result<(), MemorySetupError> {
        for (slot, region) in mem.iter().enumerate() {
            let slot = slot as u32;
            let guest_addr = region.start_addr().0;
            let host_addr = mem
                .get_host_address(region.start_addr())
                .map_err(|source| MemorySetupError::HostAddress {
                    slot,
                    guest_addr,
                    source,
                })?;
            let region_desc = kvm_bindings::kvm_userspace_memory_region {
                slot,
                guest_phys_addr: guest_addr,
                memory_size: region.len(),
                userspace_addr: host_addr as u64,
                flags: 0,
            };
            // SAFETY: the region is a live mapping owned by the backing in
            // `GuestRam`, which outlives the VM's vCPUs (the run step drops
            // it after the vCPU threads are stopped).
            unsafe { self.vm.set_user_memory_region(region_desc) }
                .map_err(|source| MemorySetupError::RegisterSlot { slot, source })?;
        }
        Ok(())
    }

    /// Irqchip stage: the in-kernel PIC, I/O APIC and PIT (and before them
    /// the identity map and TSS addresses Intel's KVM needs).
    pub(super) fn irqchip(&self) -> Result<(), IrqchipError> {
        // Intel needs these two; other backends ignore or refuse them harmlessly.
        let _ = self
            .vm
            .set_identity_map_address(layout::KVM_IDENTITY_MAP_START);
        let _ = self.vm.set_tss_address(layout::KVM_TSS_START as usize);
        self.vm
            .create_irq_chip()
            .map_err(IrqchipError::CreateIrqchip)?;
        let pit = kvm_pit_config {
            flags: KVM_PIT_SPEAKER_DUMMY,
            ..Default::default()
        };
        self.vm.create_pit2(pit).map_err(IrqchipError::CreatePit)
    }

    /// Kernel load stage: the kernel, the initrd and the command line into
    /// guest memory. Its errors are bad input.
    pub(super) fn load_kernel(&mut self, ram: &GuestRam) -> Result<BootImages, LoadError> {
        let prepared = self.prepared.take();
        let cfg = &self.cfg;
        let mem = ram.mem();
        let kernel = match prepared {
            Some(p) => p.load(mem, cfg.memory_bytes)?,
            None => loader::load_kernel(mem, &cfg.kernel, cfg.memory_bytes, &cfg.decompress)?,
        };
        let initrd = match &cfg.initrd {
            Some(p) => Some(loader::load_initrd(
                mem,
                p,
                &kernel,
                cfg.memory_bytes,
                cfg.map_images,
            )?),
            None => None,
        };
        loader::load_cmdline(mem, &cfg.cmdline, kernel.cmdline_max)?;
        Ok(BootImages { kernel, initrd })
    }

    /// Boot data stage: the MP table, the ACPI tables (with the guest's
    /// NUMA nodes) unless `--no-acpi`, and the zero page or PVH start info
    /// that points the kernel at its initrd, command line and RSDP.
    pub(super) fn boot_data(
        &self,
        ram: &GuestRam,
        images: &BootImages,
    ) -> Result<(), BootDataError> {
        let cfg = &self.cfg;
        let mem = ram.mem();
        mptable::setup(mem, cfg.vcpus)?;
        let rsdp = if cfg.acpi {
            Some(
                acpi::setup(
                    mem,
                    cfg.vcpus,
                    &guest_numa(&ram.backing),
                    &cfg.virtio.windows(),
                )
                .map_err(BootDataError::Acpi)?,
            )
        } else {
            None
        };
        if cfg.acpi {
            crate::devices::vmgenid::write_new_id(mem)?;
        }
        let initrd = images.initrd.as_ref();
        match images.kernel.mode {
            EntryMode::Linux64 => {
                let params = bootparams::build_zero_page(
                    &images.kernel,
                    initrd,
                    cfg.cmdline.len(),
                    cfg.memory_bytes,
                    rsdp,
                );
                bootparams::write_zero_page(mem, &params).map_err(BootDataError::ZeroPage)
            }
            EntryMode::Pvh => bootparams::write_pvh_start_info(mem, initrd, cfg.memory_bytes, rsdp)
                .map_err(BootDataError::PvhStartInfo),
        }
    }

    /// Devices stage: the serial port's interrupt wired through an irqfd,
    /// the console sink (taking the configured console and patterns) and
    /// the devices the vCPU threads share.
    pub(super) fn devices(&mut self, ram: &GuestRam) -> Result<Arc<Devices>, DeviceSetupError> {
        let serial_irq =
            EventFd::new(libc::EFD_NONBLOCK).map_err(DeviceSetupError::SerialEventFd)?;
        self.vm
            .register_irqfd(&serial_irq, layout::SERIAL_IRQ)
            .map_err(DeviceSetupError::SerialIrqfd)?;
        let cfg = &mut self.cfg;
        let console = std::mem::replace(&mut cfg.console, Box::new(std::io::sink()));
        let patterns = std::mem::take(&mut cfg.patterns);
        let sink = ConsoleSink::new(console, patterns, self.recorder.clone());
        let devices = Arc::new(Devices::new(
            serial_irq,
            sink,
            self.recorder.clone(),
            cfg.acpi,
        ));
        if cfg.initcalls {
            // The console lines are the anchors that align the kernel
            // log's clock with the VMM's.
            devices
                .console_events()
                .keep_lines
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let transports = self.virtio_devices(ram.mem(), &devices)?;
        devices.set_virtio(VirtioDevices::new(transports));
        Ok(devices)
    }

    /// The virtio devices, slot by slot: each one's transport at its
    /// window, its interrupt wired through an irqfd and each queue's
    /// notification through an ioeventfd matched on the queue's index.
    fn virtio_devices(
        &mut self,
        mem: &GuestMemoryMmap,
        devices: &Devices,
    ) -> Result<Vec<Arc<Mutex<MmioTransport>>>, DeviceSetupError> {
        let mut disks: Vec<Option<virtio::DiskImage>> = std::mem::take(&mut self.disks)
            .into_iter()
            .map(Some)
            .collect();
        let mut out = Vec::new();
        for (i, slot) in self.cfg.virtio.slots().into_iter().enumerate() {
            let device: Box<dyn VirtioDevice> = match slot {
                VirtioSlot::Disk(d) => {
                    let Some(image) = disks.get_mut(d).and_then(Option::take) else {
                        continue;
                    };
                    Box::new(virtio::block::Block::new(image, self.recorder.clock()))
                }
                VirtioSlot::Rng => Box::new(virtio::rng::Rng::default()),
                VirtioSlot::Console => {
                    Box::new(virtio::console::Console::new(devices.console().0.clone()))
                }
            };
            let t = self.virtio_transport(slot.name(), device, MmioWindow::of_slot(i), mem)?;
            out.push(Arc::new(Mutex::new(t)));
        }
        Ok(out)
    }

    /// One virtio device's transport at `window`, with its irqfd and its
    /// queues' ioeventfds registered with KVM.
    fn virtio_transport(
        &self,
        name: String,
        device: Box<dyn VirtioDevice>,
        window: MmioWindow,
        mem: &GuestMemoryMmap,
    ) -> Result<MmioTransport, DeviceSetupError> {
        let evt_err = |source| DeviceSetupError::VirtioEventFd {
            device: name.clone(),
            source,
        };
        let kvm_err = |ioctl, source| DeviceSetupError::VirtioKvm {
            device: name.clone(),
            ioctl,
            source,
        };
        let irqfd = EventFd::new(libc::EFD_NONBLOCK).map_err(evt_err)?;
        self.vm
            .register_irqfd(&irqfd, window.irq)
            .map_err(|e| kvm_err("KVM_IRQFD", e))?;
        let interrupt = Arc::new(virtio::mmio::Interrupt::new(irqfd));
        let t = MmioTransport::new(
            name.clone(),
            device,
            mem.clone(),
            interrupt,
            window.base,
            window.irq,
        )
        .map_err(evt_err)?
        .with_recorder(self.recorder.clone());
        let notify =
            window.base + u64::from(virtio_bindings::virtio_mmio::VIRTIO_MMIO_QUEUE_NOTIFY);
        for (q, e) in t.queue_evts().iter().enumerate() {
            self.vm
                .register_ioevent(e, &kvm_ioctls::IoEventAddress::Mmio(notify), q as u32)
                .map_err(|e| kvm_err("KVM_IOEVENTFD", e))?;
        }
        Ok(t)
    }

    /// vCPU stage: every vCPU with its CPUID, boot MSRs, LAPIC and FPU; the
    /// boot CPU also with its GDT, IDT, page tables and registers to enter
    /// `kernel` (None: a restore, which loads every register after).
    pub(super) fn vcpus(
        &self,
        ram: &GuestRam,
        kernel: Option<&LoadedKernel>,
    ) -> Result<Vcpus, VcpuSetupError> {
        let supported_cpuid = self
            .kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(vcpu_ioctl("KVM_GET_SUPPORTED_CPUID"))?;
        let msr_list = self
            .kvm
            .get_msr_index_list()
            .map_err(vcpu_ioctl("KVM_GET_MSR_INDEX_LIST"))?;
        let msrs =
            regs::supported_boot_msrs(msr_list.as_slice()).map_err(VcpuSetupError::BootMsrs)?;
        let vcpus = self.cfg.vcpus;
        let tsc_deadline = self.kvm.check_extension(kvm_ioctls::Cap::TscDeadlineTimer);
        let mut out = Vcpus {
            fds: Vec::new(),
            stats: Vec::new(),
        };
        for index in 0..vcpus {
            let vcpu = self
                .vm
                .create_vcpu(u64::from(index))
                .map_err(vcpu_ioctl("KVM_CREATE_VCPU"))?;
            let mut cpuid = supported_cpuid.clone();
            cpuid::configure_vcpu_cpuid(cpuid.as_mut_slice(), index, vcpus);
            if tsc_deadline {
                cpuid::offer_tsc_deadline(cpuid.as_mut_slice());
            }
            // PVM guests are left as KVM describes them.
            if vcpus == 1 && self.flavour != KvmFlavour::Pvm {
                cpuid::withdraw_x2apic(cpuid.as_mut_slice());
            }
            vcpu.set_cpuid2(&cpuid)
                .map_err(vcpu_ioctl("KVM_SET_CPUID2"))?;
            vcpu.set_msrs(&msrs).map_err(vcpu_ioctl("KVM_SET_MSRS"))?;
            let mut lapic = vcpu.get_lapic().map_err(vcpu_ioctl("KVM_GET_LAPIC"))?;
            regs::configure_lint(&mut lapic);
            vcpu.set_lapic(&lapic)
                .map_err(vcpu_ioctl("KVM_SET_LAPIC"))?;
            vcpu.set_fpu(&regs::boot_fpu())
                .map_err(vcpu_ioctl("KVM_SET_FPU"))?;
            if let Some(kernel) = kernel.filter(|_| index == 0) {
                boot_cpu_registers(&vcpu, ram.mem(), kernel)?;
            }
            // Older kernels lack binary stats; the timeline then has none.
            if let Ok(s) = StatsFd::open(&vcpu) {
                out.stats.push(s);
            }
            out.fds.push(vcpu);
        }
        Ok(out)
    }
}

/// The boot CPU's descriptor tables and page tables in guest memory, and
/// its registers set to enter the kernel.
fn boot_cpu_registers(
    vcpu: &VcpuFd,
    mem: &GuestMemoryMmap,
    kernel: &LoadedKernel,
) -> Result<(), VcpuSetupError> {
    let sregs = vcpu.get_sregs().map_err(vcpu_ioctl("KVM_GET_SREGS"))?;
    let sregs = regs::setup_memory_and_sregs(mem, kernel.mode, sregs)
        .map_err(VcpuSetupError::BootTables)?;
    vcpu.set_sregs(&sregs)
        .map_err(vcpu_ioctl("KVM_SET_SREGS"))?;
    vcpu.set_regs(&regs::boot_regs(kernel.mode, kernel.entry.0))
        .map_err(vcpu_ioctl("KVM_SET_REGS"))
}
