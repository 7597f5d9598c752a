//! Building and running a VM: memory, kernel, vCPUs, devices, and the run
//! loop that ends with a [`TimelineDoc`].

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_pit_config, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

use crate::bootparams;
use crate::console::{ConsoleSink, MilestonePattern};
use crate::devices::{Devices, MarkerCounts};
use crate::exit::{handle_exit, ExitAction};
use crate::exit_slots::ExitSlots;
use crate::host::{self, KvmFlavour};
use crate::kvm_stats::{self, StatsFd};
use crate::layout;
use crate::loader::{self, EntryMode, KernelFormat, LoadError};
use crate::memory::{
    self, MemoryError, MemoryOptions, MemoryPlan, MethodChoice, PlanError, PreallocContexts,
    PreallocReport, Topology, TopologyError,
};
use crate::timeline::{
    derive_phases, vmm_marks, GuestInfo, Outcome, Recorder, StopReason, TimelineDoc,
    TIMELINE_SCHEMA_NAME, TIMELINE_SCHEMA_VERSION,
};
use crate::x86::{acpi, cpuid, mptable, regs};

/// Smallest guest we accept: the kernel, its page tables and an initrd need
/// room to breathe.
pub const MIN_MEMORY: u64 = 16 << 20;
/// On a PVM host, this many emulated instructions while the guest is still
/// booting means it is not a PVM guest and will not finish.
pub const PVM_EMULATION_LIMIT: u64 = 200_000;
/// How long a guest may run on a PVM host before the emulation check.
pub const PVM_GRACE: Duration = Duration::from_millis(300);

/// How long after "reboot: Power down" an ACPI guest may take to write the
/// sleep control register before the run ends as a halt.
pub const POWER_OFF_GRACE: Duration = Duration::from_secs(2);

/// Some(time waited) when an ACPI guest announced power-down and has not
/// powered off within [`POWER_OFF_GRACE`].
fn power_off_overdue(devices: &Devices) -> Option<Duration> {
    if !devices.acpi() {
        return None;
    }
    let ev = devices.console_events();
    if !ev.power_down.load(Ordering::SeqCst) {
        return None;
    }
    let at = (*ev.halted_at.lock().unwrap_or_else(|e| e.into_inner()))?;
    let waited = at.elapsed();
    (waited >= POWER_OFF_GRACE).then_some(waited)
}

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
    /// NUMA regions, preallocation, huge pages (`total` is taken from
    /// `memory_bytes`).
    pub memory: MemoryOptions,
    /// Install the seccomp sandbox after set-up.
    pub sandbox: bool,
    /// Run only the set-up phases.
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
}

/// `--stop-after`: the set-up phase after which to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopAfter {
    /// After guest memory is allocated (and preallocated).
    Memory,
    /// After the kernel and initrd are loaded.
    Load,
}

/// Configuration errors: bad input, reported with exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
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
    /// Kernel, initrd or command line problem.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A memory option (--numa, --prealloc-*, --hugepages) is wrong.
    #[error(transparent)]
    Memory(#[from] PlanError),
    /// The host's NUMA topology could not be read.
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

/// Failures of the VMM or KVM (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// The input was wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// /dev/kvm could not be used.
    #[error("cannot open /dev/kvm: {0} (is KVM available? run `bootscope doctor`)")]
    OpenKvm(#[source] kvm_ioctls::Error),
    /// A KVM ioctl failed.
    #[error("KVM {what} failed: {source}")]
    Kvm {
        what: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    /// Guest memory could not be allocated.
    #[error("cannot allocate {mib} MiB of guest memory: {detail}")]
    Memory { mib: u64, detail: String },
    /// Allocation, binding or preallocation failed.
    #[error(transparent)]
    GuestMemory(#[from] MemoryError),
    /// The sandbox could not be installed.
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    /// Writing boot structures failed.
    #[error("cannot set up guest boot data: {0}")]
    BootData(String),
    /// A host resource failed.
    #[error("{what}: {source}")]
    Host {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The stock kernel would run under PVM's emulator forever.
    #[error(
        "this host's KVM is PVM (kvm_pvm) and {kernel} is not a PVM guest: its instructions \
         are being emulated one by one ({emulated} so far) and it would never finish booting. \
         Run it under real KVM with `bootscope lab -- run ...`, or pass --allow-emulation to \
         run it anyway"
    )]
    PvmEmulation { kernel: String, emulated: u64 },
}

fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { what, source }
}

/// Emulated instructions per second above which, sustained over a window,
/// the guest is running through PVM's emulator rather than natively (a stock
/// kernel emulates ~200,000/s; a PVM guest only its port I/O).
pub const PVM_EMULATION_RATE: u64 = 50_000;
/// Window over which the emulation rate is measured.
pub const PVM_WINDOW: Duration = Duration::from_secs(1);

/// Decides, from KVM's `insn_emulation` statistic, whether a guest on a PVM
/// host is being emulated instruction by instruction. Fast path: the total
/// passing [`PVM_EMULATION_LIMIT`] early; slow path (a loaded machine
/// emulates more slowly): a sustained rate of [`PVM_EMULATION_RATE`] over any
/// [`PVM_WINDOW`].
#[derive(Debug)]
pub struct EmulationWatch {
    started: Instant,
    window_start: Instant,
    window_count: u64,
}

impl EmulationWatch {
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            window_start: started,
            window_count: 0,
        }
    }

    /// Feeds the current total; true when the guest is being emulated.
    pub fn guest_is_emulated(&mut self, now: Instant, emulated: u64) -> bool {
        if emulated >= PVM_EMULATION_LIMIT && now.duration_since(self.started) < PVM_WINDOW * 5 {
            return true;
        }
        let dt = now.duration_since(self.window_start);
        if dt >= PVM_WINDOW {
            let rate = emulated.saturating_sub(self.window_count) as f64 / dt.as_secs_f64();
            self.window_start = now;
            self.window_count = emulated;
            return rate >= PVM_EMULATION_RATE as f64;
        }
        false
    }
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
    Ok(())
}

/// The result of a run.
pub struct RunReport {
    pub timeline: TimelineDoc,
    pub marker_counts: MarkerCounts,
    /// What preallocation did, when asked for.
    pub prealloc: Option<PreallocReport>,
    /// The guest console could not be written out (a full disk): the
    /// error and how much was lost.
    pub console_error: Option<String>,
}

enum VcpuEvent {
    Stop(StopReason, String),
}

/// Signal used to kick vCPU threads out of KVM_RUN.
fn kick_signal() -> i32 {
    vmm_sys_util::signal::SIGRTMIN() + 2
}

extern "C" fn noop_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// The guest NUMA nodes of `backing` (one per `--numa` region), for the
/// ACPI tables.
fn guest_numa(backing: &memory::GuestMemoryBacking) -> Vec<acpi::NumaNode> {
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

/// Boots the guest and runs it to the end.
pub fn run(mut cfg: VmConfig, recorder: Arc<Recorder>) -> Result<RunReport, VmError> {
    let flavour = host::kvm_flavour(&host::HostRoot::default());
    let kvm = Kvm::new().map_err(VmError::OpenKvm)?;
    let max_vcpus = kvm.get_max_vcpus() as u32;
    validate(&cfg, max_vcpus)?;
    let mut opts = cfg.memory.clone();
    opts.total = Some(cfg.memory_bytes);
    let topology = Topology::host().map_err(ConfigError::from)?;
    let plan = MemoryPlan::new(&opts, &topology).map_err(ConfigError::from)?;
    plan.check_vcpus(cfg.vcpus).map_err(ConfigError::from)?;
    // Probe before allocating so a bad kernel fails fast.
    if cfg.stop_after != Some(StopAfter::Memory) {
        loader::probe_kernel(&cfg.kernel).map_err(ConfigError::from)?;
    }

    let vm = kvm.create_vm().map_err(kvm_err("KVM_CREATE_VM"))?;
    let backing = memory::allocate(&plan, &bootparams::ram_ranges(plan.total()))?;
    // Thread contexts take their CPU affinity now, before the sandbox
    // forbids it; preallocation threads are created through them later.
    let contexts = if plan.prealloc() {
        Some(PreallocContexts::new(&plan)?)
    } else {
        None
    };
    if cfg.sandbox {
        crate::sandbox::install()?;
        recorder.vmm("vmm: sandbox installed");
    }
    let prealloc = match &contexts {
        Some(c) => Some(memory::preallocate_in(
            c,
            &backing,
            &plan,
            MethodChoice::Auto,
        )?),
        None => None,
    };
    drop(contexts);
    let mem = backing.guest_memory();
    for (slot, region) in mem.iter().enumerate() {
        let host_addr = mem
            .get_host_address(region.start_addr())
            .map_err(|e| VmError::Memory {
                mib: cfg.memory_bytes >> 20,
                detail: e.to_string(),
            })?;
        let region_desc = kvm_bindings::kvm_userspace_memory_region {
            slot: slot as u32,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host_addr as u64,
            flags: 0,
        };
        // SAFETY: the region is a live mapping owned by `backing`, which
        // outlives the VM (it is dropped after the vCPU threads are joined).
        unsafe { vm.set_user_memory_region(region_desc) }
            .map_err(kvm_err("KVM_SET_USER_MEMORY_REGION"))?;
    }
    recorder.vmm(vmm_marks::MEMORY_READY);
    let early_report = |reason_detail: &str, kernel_format: &str| RunReport {
        timeline: setup_only_timeline(
            &cfg,
            &recorder,
            flavour,
            reason_detail,
            kernel_format,
            &prealloc,
        ),
        marker_counts: MarkerCounts::default(),
        prealloc: prealloc.clone(),
        console_error: None,
    };
    if cfg.stop_after == Some(StopAfter::Memory) {
        return Ok(early_report(
            "stopped after memory set-up (--stop-after memory)",
            "none",
        ));
    }

    // Intel needs these two; other backends ignore or refuse them harmlessly.
    let _ = vm.set_identity_map_address(layout::KVM_IDENTITY_MAP_START);
    let _ = vm.set_tss_address(layout::KVM_TSS_START as usize);
    vm.create_irq_chip()
        .map_err(kvm_err("KVM_CREATE_IRQCHIP"))?;
    let pit = kvm_pit_config {
        flags: KVM_PIT_SPEAKER_DUMMY,
        ..Default::default()
    };
    vm.create_pit2(pit).map_err(kvm_err("KVM_CREATE_PIT2"))?;

    let kernel = loader::load_kernel(mem, &cfg.kernel, cfg.memory_bytes, cfg.map_images)
        .map_err(ConfigError::from)?;
    let initrd = match &cfg.initrd {
        Some(p) => Some(
            loader::load_initrd(mem, p, &kernel, cfg.memory_bytes, cfg.map_images)
                .map_err(ConfigError::from)?,
        ),
        None => None,
    };
    loader::load_cmdline(mem, &cfg.cmdline, kernel.cmdline_max).map_err(ConfigError::from)?;
    mptable::setup(mem, cfg.vcpus).map_err(|e| VmError::BootData(e.to_string()))?;
    let rsdp = if cfg.acpi {
        Some(
            acpi::setup(mem, cfg.vcpus, &guest_numa(&backing))
                .map_err(|e| VmError::BootData(e.to_string()))?,
        )
    } else {
        None
    };
    match kernel.mode {
        EntryMode::Linux64 => {
            let params = bootparams::build_zero_page(
                &kernel,
                initrd.as_ref(),
                cfg.cmdline.len(),
                cfg.memory_bytes,
                rsdp,
            );
            bootparams::write_zero_page(mem, &params)
                .map_err(|e| VmError::BootData(e.to_string()))?;
        }
        EntryMode::Pvh => {
            bootparams::write_pvh_start_info(mem, initrd.as_ref(), cfg.memory_bytes, rsdp)
                .map_err(|e| VmError::BootData(e.to_string()))?;
        }
    }
    recorder.vmm(vmm_marks::KERNEL_LOADED);
    if cfg.stop_after == Some(StopAfter::Load) {
        return Ok(early_report(
            "stopped after loading the kernel (--stop-after load)",
            format_name(&kernel),
        ));
    }

    // Devices.
    let serial_irq = EventFd::new(libc::EFD_NONBLOCK).map_err(|source| VmError::Host {
        what: "cannot create the serial interrupt eventfd",
        source,
    })?;
    vm.register_irqfd(&serial_irq, layout::SERIAL_IRQ)
        .map_err(kvm_err("KVM_IRQFD"))?;
    let console = std::mem::replace(&mut cfg.console, Box::new(std::io::sink()));
    let sink = ConsoleSink::new(console, std::mem::take(&mut cfg.patterns), recorder.clone());
    let devices = Arc::new(Devices::new(serial_irq, sink, recorder.clone(), cfg.acpi));
    if cfg.initcalls {
        devices
            .console_events()
            .keep_lines
            .store(true, Ordering::SeqCst);
    }

    // vCPUs.
    let supported_cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    let msr_list = kvm
        .get_msr_index_list()
        .map_err(kvm_err("KVM_GET_MSR_INDEX_LIST"))?;
    let msrs = regs::supported_boot_msrs(msr_list.as_slice())
        .map_err(|e| VmError::BootData(format!("MSR list: {e:?}")))?;
    let mut vcpus = Vec::new();
    let mut stats = Vec::new();
    for index in 0..cfg.vcpus {
        let vcpu = vm
            .create_vcpu(u64::from(index))
            .map_err(kvm_err("KVM_CREATE_VCPU"))?;
        let mut cpuid = supported_cpuid.clone();
        cpuid::configure_vcpu_cpuid(cpuid.as_mut_slice(), index, cfg.vcpus);
        vcpu.set_cpuid2(&cpuid).map_err(kvm_err("KVM_SET_CPUID2"))?;
        vcpu.set_msrs(&msrs).map_err(kvm_err("KVM_SET_MSRS"))?;
        let mut lapic = vcpu.get_lapic().map_err(kvm_err("KVM_GET_LAPIC"))?;
        regs::configure_lint(&mut lapic);
        vcpu.set_lapic(&lapic).map_err(kvm_err("KVM_SET_LAPIC"))?;
        vcpu.set_fpu(&regs::boot_fpu())
            .map_err(kvm_err("KVM_SET_FPU"))?;
        if index == 0 {
            let sregs = vcpu.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
            let sregs = regs::setup_memory_and_sregs(mem, kernel.mode, sregs)
                .map_err(|e| VmError::BootData(e.to_string()))?;
            vcpu.set_sregs(&sregs).map_err(kvm_err("KVM_SET_SREGS"))?;
            vcpu.set_regs(&regs::boot_regs(kernel.mode, kernel.entry.0))
                .map_err(kvm_err("KVM_SET_REGS"))?;
        }
        // Older kernels lack binary stats; the timeline then has none.
        if let Ok(s) = StatsFd::open(&vcpu) {
            stats.push(s);
        }
        vcpus.push(vcpu);
    }
    recorder.vmm(vmm_marks::VCPUS_CREATED);

    vmm_sys_util::signal::register_signal_handler(kick_signal(), noop_handler).map_err(|e| {
        VmError::Host {
            what: "cannot install the vCPU kick signal handler",
            source: std::io::Error::from_raw_os_error(e.errno()),
        }
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<VcpuEvent>();
    let mut threads: Vec<JoinHandle<VcpuFd>> = Vec::new();
    let exit_slots = cfg
        .initcalls
        .then(|| Arc::new(Mutex::new(ExitSlots::default())));
    for (index, vcpu) in vcpus.into_iter().enumerate() {
        let t = spawn_vcpu(
            index as u32,
            vcpu,
            devices.clone(),
            recorder.clone(),
            stop.clone(),
            tx.clone(),
            exit_slots.clone(),
        )
        .map_err(|source| VmError::Host {
            what: "cannot start a vCPU thread",
            source,
        })?;
        threads.push(t);
    }
    drop(tx);

    // Wait for the guest to end, the timeout, or PVM emulation.
    let started = Instant::now();
    let mut pvm_watch = EmulationWatch::new(started);
    let mut pvm_error = None;
    let (reason, detail) = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(VcpuEvent::Stop(r, d)) => break (r, d),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break (StopReason::Error, "all vCPU threads ended".to_string())
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(waited) = power_off_overdue(&devices) {
            break (
                StopReason::GuestHalt,
                format!(
                    "guest kernel said \"reboot: Power down\" but did not power off through ACPI within {:.1} s (halted)",
                    waited.as_secs_f64()
                ),
            );
        }
        if cfg.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
            break (
                StopReason::Stopped,
                "stopped on request (the user quit)".to_string(),
            );
        }
        if let Some(t) = cfg.timeout {
            if started.elapsed() >= t {
                break (
                    StopReason::Timeout,
                    format!(
                        "guest still running after --timeout {:.1} s",
                        t.as_secs_f64()
                    ),
                );
            }
        }
        if flavour == KvmFlavour::Pvm && !cfg.allow_emulation && started.elapsed() >= PVM_GRACE {
            let emulated = sum_stats(&stats)
                .get("insn_emulation")
                .copied()
                .unwrap_or(0);
            if pvm_watch.guest_is_emulated(Instant::now(), emulated) {
                pvm_error = Some(emulated);
                break (
                    StopReason::PvmEmulation,
                    format!("stopped: {emulated} instructions emulated (not a PVM guest)"),
                );
            }
        }
    };
    recorder.vmm(vmm_marks::GUEST_SHUTDOWN);
    stop.store(true, Ordering::SeqCst);
    for t in &threads {
        kick_until_done(t);
    }
    // A vCPU thread that does not stop (stuck outside KVM_RUN) is left
    // behind rather than joined: the run still ends and reports.
    // A timed-out run also says where each vCPU was (see describe_vcpu).
    let mut notes = Vec::new();
    for (index, t) in threads.into_iter().enumerate() {
        if !t.is_finished() {
            notes.push(format!("vcpu{index} did not stop within 5 s of the kick"));
            continue;
        }
        match t.join() {
            Ok(vcpu) if reason == StopReason::Timeout => {
                notes.push(describe_vcpu(index as u32, &vcpu))
            }
            Ok(_) => {}
            Err(_) => notes.push(format!("vcpu{index} thread panicked")),
        }
    }
    let detail = if notes.is_empty() {
        detail
    } else {
        format!("{detail}; {}", notes.join("; "))
    };
    devices.finish_console();
    let console_error = devices.console_events().write_failure();
    let kvm_stats = sum_stats(&stats);
    if let Some(emulated) = pvm_error {
        return Err(VmError::PvmEmulation {
            kernel: cfg.kernel.display().to_string(),
            emulated,
        });
    }

    let events = devices.console_events();
    let (reason, detail) = if events.panicked.load(Ordering::SeqCst) && reason != StopReason::Error
    {
        let line = events
            .panic_line
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        (
            StopReason::GuestPanic,
            format!("guest kernel panicked: {line}"),
        )
    } else {
        (reason, detail)
    };
    let marks = recorder.snapshot();
    let initcalls = cfg.initcalls.then(|| {
        let mut doc = crate::kernel_log::collect_after_run(mem, &devices.console_events(), &marks);
        if let Some(slots) = &exit_slots {
            doc.count_exits(&slots.lock().unwrap_or_else(|e| e.into_inner()));
        }
        doc
    });
    let timeline = TimelineDoc {
        schema: TIMELINE_SCHEMA_NAME.into(),
        version: TIMELINE_SCHEMA_VERSION,
        clock: "CLOCK_MONOTONIC nanoseconds since VMM start".into(),
        vmm: format!("bootscope {}", env!("CARGO_PKG_VERSION")),
        host_kvm: format!("{flavour:?}").to_lowercase(),
        guest: GuestInfo {
            kernel: cfg.kernel.display().to_string(),
            kernel_format: format_name(&kernel).into(),
            initrd: cfg.initrd.as_ref().map(|p| p.display().to_string()),
            initrd_mapped_from_file: initrd.is_some_and(|i| i.mapped_from_file),
            kernel_mapped_bytes: kernel.mapped_from_file,
            cmdline: cfg.cmdline.clone(),
            memory_bytes: cfg.memory_bytes,
            vcpus: cfg.vcpus,
        },
        outcome: Outcome {
            clean: reason.is_clean(),
            reason,
            detail,
        },
        phases: derive_phases(&marks),
        marks,
        kvm_stats,
        memory: prealloc.as_ref().and_then(|p| serde_json::to_value(p).ok()),
        initcalls,
    };
    drop(backing);
    Ok(RunReport {
        timeline,
        marker_counts: devices.marker_counts(),
        prealloc,
        console_error,
    })
}

fn format_name(kernel: &loader::LoadedKernel) -> &'static str {
    match kernel.format {
        KernelFormat::BzImage => "bzimage",
        KernelFormat::Elf if kernel.mode == EntryMode::Pvh => "elf-pvh",
        KernelFormat::Elf => "elf",
    }
}

/// The timeline of a run that stopped after set-up.
fn setup_only_timeline(
    cfg: &VmConfig,
    recorder: &Recorder,
    flavour: KvmFlavour,
    detail: &str,
    kernel_format: &str,
    prealloc: &Option<PreallocReport>,
) -> TimelineDoc {
    let marks = recorder.snapshot();
    TimelineDoc {
        schema: TIMELINE_SCHEMA_NAME.into(),
        version: TIMELINE_SCHEMA_VERSION,
        clock: "CLOCK_MONOTONIC nanoseconds since VMM start".into(),
        vmm: format!("bootscope {}", env!("CARGO_PKG_VERSION")),
        host_kvm: format!("{flavour:?}").to_lowercase(),
        guest: GuestInfo {
            kernel: if kernel_format == "none" {
                String::new()
            } else {
                cfg.kernel.display().to_string()
            },
            kernel_format: kernel_format.into(),
            initrd: cfg.initrd.as_ref().map(|p| p.display().to_string()),
            initrd_mapped_from_file: false,
            kernel_mapped_bytes: 0,
            cmdline: cfg.cmdline.clone(),
            memory_bytes: cfg.memory_bytes,
            vcpus: cfg.vcpus,
        },
        outcome: Outcome {
            reason: StopReason::StoppedAfterSetup,
            clean: true,
            detail: detail.into(),
        },
        phases: derive_phases(&marks),
        marks,
        kvm_stats: BTreeMap::new(),
        memory: prealloc.as_ref().and_then(|p| serde_json::to_value(p).ok()),
        initcalls: None,
    }
}

fn sum_stats(stats: &[StatsFd]) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    for s in stats {
        if let Ok(v) = s.read() {
            kvm_stats::accumulate(&mut total, &v);
        }
    }
    total
}

fn kick_until_done<T>(t: &JoinHandle<T>) {
    use std::os::unix::thread::JoinHandleExt;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !t.is_finished() && Instant::now() < deadline {
        // SAFETY: the pthread handle belongs to a thread we spawned and have
        // not joined yet, so it is valid.
        unsafe { libc::pthread_kill(t.as_pthread_t(), kick_signal()) };
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn spawn_vcpu(
    index: u32,
    mut vcpu: VcpuFd,
    devices: Arc<Devices>,
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<VcpuEvent>,
    exit_slots: Option<Arc<Mutex<ExitSlots>>>,
) -> std::io::Result<JoinHandle<VcpuFd>> {
    std::thread::Builder::new()
        .name(format!("vcpu{index}"))
        .spawn(move || {
            if index == 0 {
                recorder.vmm_once(vmm_marks::FIRST_KVM_RUN);
            }
            let clock = recorder.clock();
            let mut slots = exit_slots.as_ref().map(|_| ExitSlots::default());
            while !stop.load(Ordering::SeqCst) {
                match vcpu.run() {
                    Ok(exit) => {
                        if let Some(s) = slots.as_mut() {
                            s.count(clock.now_ns(), &exit);
                        }
                        match handle_exit(exit, &devices, index) {
                            ExitAction::Continue => {}
                            ExitAction::Stop(reason, detail) => {
                                let _ = tx.send(VcpuEvent::Stop(reason, detail));
                                break;
                            }
                        }
                    }
                    Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {}
                    Err(e) => {
                        let _ = tx.send(VcpuEvent::Stop(
                            StopReason::Error,
                            format!("KVM_RUN failed on vcpu{index}: {e}"),
                        ));
                        break;
                    }
                }
            }
            if let (Some(mine), Some(all)) = (slots, exit_slots) {
                all.lock().unwrap_or_else(|e| e.into_inner()).merge(&mine);
            }
            vcpu
        })
}

/// Where a stopped vCPU was, for a run that timed out: its run state, its
/// instruction pointer and privilege level, whether it took interrupts, and
/// any event KVM had yet to deliver. A guest stuck waiting for an interrupt
/// (halted, interrupts enabled) reads differently from one spinning with
/// them off.
fn describe_vcpu(index: u32, vcpu: &VcpuFd) -> String {
    let state = match vcpu.get_mp_state().map(|s| s.mp_state) {
        Ok(kvm_bindings::KVM_MP_STATE_RUNNABLE) => "running".to_string(),
        Ok(kvm_bindings::KVM_MP_STATE_HALTED) => "halted".to_string(),
        Ok(kvm_bindings::KVM_MP_STATE_UNINITIALIZED) => "never started (no INIT)".to_string(),
        Ok(kvm_bindings::KVM_MP_STATE_INIT_RECEIVED) => "waiting for SIPI".to_string(),
        Ok(other) => format!("run state {other}"),
        Err(e) => format!("run state unknown ({e})"),
    };
    let mut out = format!("vcpu{index} {state}");
    match (vcpu.get_regs(), vcpu.get_sregs()) {
        (Ok(r), Ok(s)) => {
            let interrupts = if r.rflags & (1 << 9) != 0 {
                "on"
            } else {
                "off"
            };
            out.push_str(&format!(
                " at rip {:#x} (ring {}, interrupts {interrupts})",
                r.rip,
                s.cs.selector & 3
            ));
        }
        (Err(e), _) | (_, Err(e)) => out.push_str(&format!(" (registers unreadable: {e})")),
    }
    if let Ok(ev) = vcpu.get_vcpu_events() {
        if ev.interrupt.injected != 0 {
            out.push_str(&format!(
                ", interrupt {:#x} being injected",
                ev.interrupt.nr
            ));
        }
        if ev.exception.injected != 0 || ev.exception.pending != 0 {
            out.push_str(&format!(", exception {} pending", ev.exception.nr));
        }
        if ev.nmi.pending != 0 || ev.nmi.injected != 0 {
            out.push_str(", NMI pending");
        }
    }
    out
}

/// Keeps the VM file descriptor type reachable for callers that need it.
pub type Vm = VmFd;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulation_watch_fast_path() {
        let t0 = Instant::now();
        let mut w = EmulationWatch::new(t0);
        assert!(!w.guest_is_emulated(t0 + Duration::from_millis(300), 1_000));
        assert!(w.guest_is_emulated(t0 + Duration::from_millis(400), PVM_EMULATION_LIMIT));
    }

    #[test]
    fn emulation_watch_sustained_rate_on_a_slow_machine() {
        let t0 = Instant::now();
        let mut w = EmulationWatch::new(t0);
        // 60,000/s: slow, but never idle: caught after a window.
        assert!(!w.guest_is_emulated(t0 + Duration::from_millis(500), 30_000));
        assert!(w.guest_is_emulated(t0 + Duration::from_millis(1000), 60_000));
    }

    #[test]
    fn emulation_watch_ignores_port_io_of_a_native_guest() {
        let t0 = Instant::now();
        let mut w = EmulationWatch::new(t0);
        let mut total = 0;
        for s in 1..=60 {
            total += 5_000; // a chatty console: 5,000 emulated I/O per second
            assert!(!w.guest_is_emulated(t0 + Duration::from_secs(s), total));
        }
    }
}
