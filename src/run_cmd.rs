//! `bootscope run`: boots a kernel under the VMM, with the profiler attached
//! to this process by default, and writes the timeline and the profile.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use bootscope_model::size::parse_size;
use bootscope_model::timeline::{TimelineGuest, TimelineMemory};
use bootscope_vmm::console::{merge_patterns, MilestonePattern};
use bootscope_vmm::timeline::{vmm_marks, Clock, Recorder, StopReason, Timeline};
use bootscope_vmm::virtio::VirtioConfig;
use bootscope_vmm::vm::{self, VmConfig, VmError};

use crate::common::{
    check_outputs_of, command_line, default_guest, usage, write_output, Failure, EXIT_FAILURE,
};
use crate::run_args::{InitcallMethod, RunArgs};

pub(crate) fn cmd_run(args: RunArgs, clock: Clock) -> Result<i32, Failure> {
    let (args, run_mode) = crate::snapshot_args::prepare(args)?;
    if crate::live_tui::no_terminal(args.tui) {
        return Err(usage(anyhow::anyhow!(bootscope_tui::NOT_A_TERMINAL)));
    }
    // From here on SIGINT and SIGTERM stop the guest and the run still
    // writes its timeline and profile (outcome `interrupted`).
    let interrupts = crate::signals::catch()?;
    let recorder = Arc::new(Recorder::new(clock));
    recorder.push(bootscope_vmm::timeline::TimelineMark {
        name: vmm_marks::PROCESS_START.into(),
        source: bootscope_vmm::timeline::MarkSource::Vmm,
        t_ns: 0,
        value: None,
        vcpu: None,
    });
    let (mut cfg, tui_console) = vm_config(&args, &interrupts)?;
    check_inputs(&args, &cfg)?;
    // A systemd guest's units record on the root disk, as it is before the
    // boot (docs/guest.md): after the boot it says whether the guest wrote
    // a new one.
    let units_probe = (cfg.virtio.disks.first()).filter(|d| !d.readonly).map(|d| {
        bootscope_vmm::units::RecordProbe::before_boot(&d.path)
            .with_workload_unit(args.workload_unit.clone())
    });
    let symbols = early_symbols(&args, &cfg)?;
    // The programs the set-up needs attach before the VMM starts (`profiler
    // attach`), the guest programs beside its set-up, waited for before its
    // first KVM_RUN (`profiler guest attach`; attach_self_profile).
    let guest_memory = run_mode.memory_bytes(&cfg);
    let collector = attach_self_profile(&args, &recorder, &mut cfg, guest_memory)?;
    let report = if args.tui {
        crate::live_tui::run_vm(
            cfg,
            &recorder,
            collector.clone(),
            &tui_console,
            args.refresh_ms,
            symbols.as_ref(),
            units_probe.as_ref(),
        )?
    } else {
        crate::snapshot_args::run_vm(cfg, recorder.clone(), run_mode)
    };
    let report = match report {
        Ok(r) => r,
        Err(VmError::Config(e)) => return Err(usage(e.into())),
        Err(e) => return Err(e.into()),
    };
    let ended = Ended {
        recorder: &recorder,
        interrupts: &interrupts,
        symbols: symbols.as_ref(),
        serial: &tui_console.serial,
        units_probe,
    };
    ended.finish(&args, report, collector)
}

/// The VMM's configuration from `run`'s options (bad ones are usage
/// errors, found before anything runs), and where the guest's console
/// goes.
fn vm_config(
    args: &RunArgs,
    interrupts: &crate::signals::Interrupts,
) -> Result<(VmConfig, crate::live_tui::TuiConsole), Failure> {
    let (memory_bytes, memory_opts) = memory_options(args)?;
    let stop_after = stop_after(args)?;
    check_outputs_of(&run_outputs(args), &run_inputs(args)).map_err(usage)?;
    let mut patterns = Vec::new();
    for spec in &args.serial_patterns {
        patterns.push(MilestonePattern::parse(spec).map_err(|e| usage(e.into()))?);
    }
    let (kernel, initrd) = guest_images(args, stop_after)?;
    let tui_console = crate::live_tui::TuiConsole::new(args.tui, &args.serial).map_err(usage)?;
    let trace = args.initcalls && args.initcalls_method == InitcallMethod::Trace;
    let cmdline = guest_cmdline(args)?;
    let initcall_kernel = trace.then(|| crate::guest_symbols::kernel_loader(kernel.clone()));
    // Exit sites in modules are named from the module list read at the
    // end (the same loaded image as the initcalls').
    let modules = (args.exit_sites && !args.no_profile).then(|| {
        initcall_kernel
            .clone()
            .unwrap_or_else(|| crate::guest_symbols::kernel_loader(kernel.clone()))
    });
    let mut cfg = VmConfig::new(kernel, cmdline, open_console(&tui_console.serial)?);
    cfg.initrd = initrd;
    cfg.memory_bytes = memory_bytes;
    cfg.vcpus = args.vcpus.unwrap_or(1);
    cfg.patterns = merge_patterns(patterns, !args.no_default_patterns);
    cfg.timeout = args.timeout;
    cfg.allow_emulation = args.allow_emulation;
    cfg.map_images = args.map_initrd;
    cfg.decompress = bootscope_vmm::loader::DecompressOptions {
        in_guest: args.guest_decompress,
        cache_dir: kernel_cache_dir(),
    };
    cfg.memory = memory_opts;
    cfg.sandbox = args.sandbox;
    cfg.stop_after = stop_after;
    cfg.acpi = !args.no_acpi;
    cfg.stop = Some(interrupts.flag());
    cfg.initcalls = args.initcalls;
    cfg.initcall_kernel = initcall_kernel;
    cfg.modules = modules;
    cfg.virtio = VirtioConfig {
        disks: args.devices.disks.clone(),
        rng: args.devices.rng(!args.no_acpi),
        console: args.devices.virtio_console(),
    };
    cfg.host_tool = Some(profiler_tool());
    Ok((cfg, tui_console))
}

/// The guest kernel's symbols for `--exit-sites`, when they are needed
/// before the run: a symbol file given is checked before anything runs
/// (bad input), and the live view names sites as they come. Otherwise
/// (None) the booted kernel's own symbols are read after the run, from
/// the VMM's decompressed copy where it made one (docs/profiler.md).
fn early_symbols(
    args: &RunArgs,
    cfg: &VmConfig,
) -> Result<Option<bootscope_profiler::guest_symbols::SymbolTable>, Failure> {
    if !(args.exit_sites && (args.guest_symbols.is_some() || args.tui)) {
        return Ok(None);
    }
    // Reading an input: a signal ends the command at once.
    let _immediate = crate::signals::Immediate::new();
    crate::guest_symbols::load_symbols(args.guest_symbols.as_deref(), Some(cfg.kernel.clone()))
        .map_err(|e| usage(anyhow::anyhow!(e)))
}

/// The guest's command line: the one given with what the devices and
/// `--initcalls` add.
fn guest_cmdline(args: &RunArgs) -> Result<String, Failure> {
    let base_cmdline = args.devices.cmdline(&args.cmdline);
    Ok(match (args.initcalls, args.initcalls_method) {
        (false, _) => base_cmdline,
        (true, InitcallMethod::Trace) => {
            bootscope_vmm::kernel_log::traced::cmdline_with_trace(&base_cmdline)
                .map_err(|e| usage(e.into()))?
        }
        (true, InitcallMethod::Log) => {
            bootscope_vmm::kernel_log::cmdline_with_initcalls(&base_cmdline)
                .map_err(|e| usage(e.into()))?
        }
    })
}

/// Refuses, before the profiler attaches and as fast as without it, a
/// kernel that cannot be booted, an initrd that cannot be read and disks
/// that cannot be opened (opened, checked and locked for a moment; the
/// VMM takes them again).
fn check_inputs(args: &RunArgs, cfg: &VmConfig) -> Result<(), Failure> {
    if !args.no_profile && cfg.stop_after != Some(vm::StopAfter::Memory) {
        bootscope_vmm::loader::probe_kernel(&cfg.kernel)
            .map_err(|e| usage(vm::ConfigError::from(e).into()))?;
    }
    if let Some(initrd) = &cfg.initrd {
        bootscope_vmm::loader::check_initrd(initrd)
            .map_err(|e| usage(vm::ConfigError::from(e).into()))?;
    }
    bootscope_vmm::virtio::DiskImage::open_all(&cfg.virtio.disks).map_err(|e| usage(e.into()))?;
    Ok(())
}

/// `--memory`, `--numa`, the preallocation and huge page options, as the
/// VMM's memory options and the guest's memory size.
fn memory_options(args: &RunArgs) -> Result<(u64, bootscope_vmm::memory::MemoryOptions), Failure> {
    let mut numa = Vec::new();
    for spec in &args.numa {
        numa.push(
            spec.parse::<bootscope_vmm::memory::NumaSpec>()
                .map_err(|e| usage(anyhow::Error::new(e).context(format!("--numa {spec}"))))?,
        );
    }
    let memory_bytes = match &args.memory {
        Some(m) => parse_size(m).context("--memory").map_err(usage)?,
        None if !numa.is_empty() => numa.iter().map(|n| n.memory).sum(),
        None => vm::DEFAULT_MEMORY,
    };
    let prealloc_cpus = match &args.prealloc_cpus {
        Some(l) => Some(
            l.parse::<bootscope_vmm::memory::CpuSet>()
                .map_err(|e| usage(anyhow::Error::new(e).context("--prealloc-cpus")))?,
        ),
        None => None,
    };
    let hugepages = match &args.hugepages {
        Some(h) => Some(
            h.parse::<bootscope_vmm::memory::HugePageSize>()
                .map_err(|e| usage(anyhow::Error::new(e).context("--hugepages")))?,
        ),
        None => None,
    };
    let opts = bootscope_vmm::memory::MemoryOptions {
        total: None,
        numa,
        prealloc: args.prealloc,
        prealloc_threads: args.prealloc_threads,
        prealloc_cpus,
        hugepages,
        thp: match (args.thp, args.no_thp) {
            (true, _) => bootscope_vmm::memory::ThpChoice::Required,
            (_, true) => bootscope_vmm::memory::ThpChoice::Off,
            _ => bootscope_vmm::memory::ThpChoice::Auto,
        },
    };
    Ok((memory_bytes, opts))
}

fn stop_after(args: &RunArgs) -> Result<Option<vm::StopAfter>, Failure> {
    match args.stop_after.as_deref() {
        None => Ok(None),
        Some("memory") => Ok(Some(vm::StopAfter::Memory)),
        Some("load") => Ok(Some(vm::StopAfter::Load)),
        Some(other) => Err(usage(anyhow::anyhow!(
            "--stop-after {other:?}: give memory or load"
        ))),
    }
}

/// The files `run` writes, with the flag that names each.
fn run_outputs(args: &RunArgs) -> Vec<(&'static str, &Path)> {
    let mut outputs: Vec<(&str, &Path)> = Vec::new();
    if let Some(t) = &args.timeline {
        outputs.push(("--timeline", t));
    }
    if let (Some(o), false) = (&args.output, args.no_profile) {
        outputs.push(("--output", o));
    }
    if !matches!(args.serial.as_str(), "stdout" | "-" | "null") {
        outputs.push(("--serial", Path::new(&args.serial)));
    }
    outputs
}

/// The files `run` reads (and a disk it writes), none of which an output
/// may replace.
fn run_inputs(args: &RunArgs) -> Vec<(&'static str, &Path)> {
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    inputs.extend(args.kernel.as_deref().map(|k| ("--kernel", k)));
    inputs.extend(args.initrd.as_deref().map(|i| ("--initrd", i)));
    inputs.extend(
        args.guest_symbols
            .as_deref()
            .map(|s| ("--guest-symbols", s)),
    );
    inputs.extend(args.devices.disks.iter().map(|d| ("--disk", &*d.path)));
    inputs
}

/// The kernel and initrd to boot: the named ones, or the default guest.
fn guest_images(
    args: &RunArgs,
    stop_after: Option<vm::StopAfter>,
) -> Result<(PathBuf, Option<PathBuf>), Failure> {
    Ok(match args.kernel.clone() {
        Some(k) => (k, args.initrd.clone()),
        // Memory set-up alone needs no kernel.
        None if stop_after == Some(vm::StopAfter::Memory) => (PathBuf::new(), None),
        None => {
            let (k, i) = default_guest().map_err(usage)?;
            eprintln!(
                "bootscope: default guest: kernel {} initrd {}",
                k.display(),
                i.display()
            );
            (k, Some(args.initrd.clone().unwrap_or(i)))
        }
    })
}

/// The kernel cache's directory; None (said why) when it cannot be
/// trusted or has no place: the kernel is then decompressed and not kept.
fn kernel_cache_dir() -> Option<PathBuf> {
    match bootscope_vmm::kernel::cache::user_cache_dir() {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("bootscope: warning: the kernel cache is not used: {e}");
            None
        }
    }
}

/// Where the guest's console goes (`--serial`): standard output, nowhere,
/// or a file.
fn open_console(serial: &str) -> Result<Box<dyn Write + Send>, Failure> {
    Ok(match serial {
        "stdout" | "-" => Box::new(crate::stdout::Stream::default()),
        "null" => Box::new(std::io::sink()),
        path => Box::new(
            bootscope_model::output::open_stream(Path::new(path))
                .map_err(|e| usage(anyhow::anyhow!("--serial: {e}")))?,
        ),
    })
}

/// What a run that has ended needs to write its documents.
struct Ended<'a> {
    recorder: &'a Arc<Recorder>,
    interrupts: &'a crate::signals::Interrupts,
    symbols: Option<&'a bootscope_profiler::guest_symbols::SymbolTable>,
    /// `--serial` as the console was opened.
    serial: &'a str,
    /// The root disk's units record before the boot.
    units_probe: Option<bootscope_vmm::units::RecordProbe>,
}

impl Ended<'_> {
    /// Completes the timeline (marks, phases, an interrupting signal),
    /// writes the profile and the timeline, and gives the exit status.
    fn finish(
        &self,
        args: &RunArgs,
        report: vm::RunReport,
        collector: Option<Arc<bootscope_profiler::Collector>>,
    ) -> Result<i32, Failure> {
        let console_error = report.console_error;
        let modules = report.modules;
        let mut doc = report.timeline;
        // A signal that stopped the guest (one that came after it ended
        // changes nothing).
        let interrupted = self.interrupts.received().filter(|_| {
            (doc.outcome.as_ref()).is_some_and(|o| o.reason == StopReason::Stopped.name())
        });
        if let Some(sig) = interrupted {
            let outcome = doc.outcome.get_or_insert_with(Default::default);
            outcome.reason = StopReason::Interrupted.name();
            outcome.detail = format!(
                "interrupted by {}: the guest was stopped before it ended",
                crate::signals::name(sig)
            );
        }
        // Once: under --tui it is recorded when the VM ends, not when the UI
        // is closed.
        self.recorder.vmm_once(vmm_marks::VMM_EXIT);
        doc.marks = self.recorder.snapshot();
        let tool = profiler_tool();
        doc.phases = bootscope_vmm::timeline::derive_phases(&doc.marks, Some(&tool));
        if let Some(probe) = self.units_probe.clone() {
            probe.after_boot(&mut doc, Some(&tool));
        }
        let profiled = collector.is_some();
        if let Some(c) = collector {
            let profile = finish_self_profile(args, c, &doc, self.symbols, modules.as_ref())?;
            if let (Some(initcalls), Some(profile)) = (doc.initcalls.as_mut(), profile) {
                bootscope_profiler::initcalls::attribute_profile(initcalls, &profile);
            }
        }
        let mut result = finish_run(args, &doc);
        if let Some(sig) = interrupted {
            result = result.and(Err(Failure {
                code: crate::signals::exit_status(sig),
                error: anyhow::anyhow!("{}", outcome_detail(&doc)),
            }));
        } else if let Some(e) = console_error {
            eprintln!(
                "bootscope: error: cannot write the guest console to --serial {}: {e}",
                self.serial
            );
            if matches!(result, Ok(0)) {
                result = Ok(EXIT_FAILURE);
            }
        }
        if profiled {
            release_bpf_in_background();
        }
        result
    }
}

/// Detaching the profiler's tracepoint programs costs the kernel one RCU
/// grace period each (over a second in all on small VMs), and a process's exit
/// waits for it. A child that inherits the descriptors and outlives this
/// process by a moment takes that wait off the command's critical path.
fn release_bpf_in_background() {
    // SAFETY: fork in a multi-threaded process: the child only calls
    // async-signal-safe functions (nanosleep, _exit) before it ends.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ts = libc::timespec {
            tv_sec: 2,
            tv_nsec: 0,
        };
        // SAFETY: close, nanosleep and _exit are async-signal-safe; the child
        // touches no other state and never returns. It lets go of the
        // standard streams at once so nobody waits on its pipes.
        unsafe {
            libc::close(0);
            libc::close(1);
            libc::close(2);
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
}

/// Width of the profiler's time slots under `run --initcalls`: the
/// resolution of each initcall's exits and faults (the VMM's own port
/// and MMIO exit slots have the same).
const INITCALL_SLOT: Duration = Duration::from_nanos(bootscope_vmm::exit_slots::SLOT_NS);

/// Starts attaching the profiler's guest programs beside the VMM's set-up,
/// and gives the hook the VMM calls before its first KVM_RUN: it waits for
/// them, so that no exit goes uncounted. The timeline gets the wait
/// (`profiler guest attach`, from the gate to the first KVM_RUN) and the
/// moment the attach ended.
fn guest_programs_gate(
    collector: &Arc<bootscope_profiler::Collector>,
    recorder: &Arc<Recorder>,
) -> Box<dyn FnOnce() + Send> {
    collector.attach_guest_programs();
    // Weak: the VMM's configuration must not keep the collector alive.
    let weak = Arc::downgrade(collector);
    let recorder = recorder.clone();
    Box::new(move || {
        let Some(c) = weak.upgrade() else { return };
        let tool = profiler_tool();
        recorder.vmm(&tool.guest_wait_mark());
        if let Some(at) = c.wait_guest_programs() {
            let clock = recorder.clock();
            recorder.push(bootscope_vmm::timeline::TimelineMark {
                name: tool.guest_attached_mark(),
                source: bootscope_vmm::timeline::MarkSource::Vmm,
                t_ns: at.saturating_duration_since(clock.instant_at(0)).as_nanos() as u64,
                value: None,
                vcpu: None,
            });
        }
    })
}

/// The eBPF profiler as the VMM's host tool: the marks `run` records when
/// it attaches (`vmm: profiler attached`, ...) and the phases the timeline
/// splits off by them (`profiler attach`, `profiler guest attach`).
fn profiler_tool() -> bootscope_vmm::timeline::HostTool {
    bootscope_vmm::timeline::HostTool::new("profiler")
}

/// Starts the eBPF collector on this process with the programs the VMM's
/// set-up needs attached (its guest programs are deferred:
/// [`guest_programs_gate`]), then forwards every VMM mark to it (the ones
/// recorded so far with their own times), and gives `cfg` the hook that
/// waits for the guest programs. Called before the VMM starts, so every
/// preallocation thread, its CPUs, node and pages are seen. None: not
/// profiling (`--no-profile`, or the profiler cannot start and nothing
/// asked for a profile).
fn attach_self_profile(
    args: &RunArgs,
    recorder: &Arc<Recorder>,
    cfg: &mut VmConfig,
    guest_memory: u64,
) -> Result<Option<Arc<bootscope_profiler::Collector>>, Failure> {
    if args.no_profile {
        return Ok(None);
    }
    let mut config =
        bootscope_profiler::CollectorConfig::new(bootscope_profiler::TargetSpec::CurrentProcess);
    // One clock for the profile and the timeline: the VMM's process start.
    config.origin = Some(recorder.clock().instant_at(0));
    // vCPUs, preallocation threads and their contexts per region, and
    // bootscope's own few (main, console, profiler, TUI).
    let regions = args.numa.len().max(1) as u32;
    let prealloc = u32::try_from(args.prealloc_threads).unwrap_or(u32::MAX);
    config.bpf_stats = args.bpf_stats;
    config.exit_sites = args.exit_sites;
    if args.initcalls {
        // Every exit and fault counted per slot in the kernel: each
        // initcall gets its own counts once the guest has stopped.
        config.time_slots = Some(INITCALL_SLOT);
    }
    if let Some(set) = args.collect {
        config.collectors = set;
    } else {
        // The page-fault tail of a restore: on by default for restores.
        config.collectors.tail = args.snapshot.restore.is_some();
    }
    // Attached beside the VMM's set-up, or not at all when the run stops
    // before its first KVM_RUN (guest_programs_gate).
    config.defer_guest_programs = true;
    config.guest_memory_bytes = Some(guest_memory);
    config.expected_threads = Some(
        args.vcpus
            .unwrap_or(1)
            .saturating_add(prealloc.saturating_add(1).saturating_mul(regions))
            .saturating_add(16),
    );
    // Why a profiler that cannot start is an error; else go on without it.
    let required_by = if args.profile {
        Some("--profile asks for a profile but the profiler cannot start")
    } else if args.output.is_some() {
        Some("--output asks for a profile but the profiler cannot start")
    } else {
        None
    };
    let collector = match (bootscope_profiler::Collector::start(config), required_by) {
        (Ok(c), _) => Arc::new(c),
        (Err(e), Some(why)) => return Err(anyhow::Error::new(e).context(why).into()),
        (Err(e), None) => {
            eprintln!("bootscope: not profiling this run: {e} (--no-profile silences this)");
            return Ok(None);
        }
    };
    let weak = Arc::downgrade(&collector);
    let clock = recorder.clock();
    let forward = move |c: &bootscope_profiler::Collector,
                        m: &bootscope_vmm::timeline::TimelineMark| {
        c.add_mark_at(&m.name, m.source, m.value, clock.instant_at(m.t_ns));
        // Their statistics files exist now: the cross-check's source.
        if m.name == bootscope_vmm::timeline::vmm_marks::VCPUS_CREATED {
            c.vcpus_created();
        }
    };
    // Marks recorded before the collector was ready (process start).
    for m in recorder.snapshot() {
        forward(&collector, &m);
    }
    recorder.set_listener(Box::new(move |m| {
        if let Some(c) = weak.upgrade() {
            forward(&c, m);
        }
    }));
    recorder.vmm(&profiler_tool().attached_mark());
    if cfg.stop_after.is_none() {
        cfg.before_first_run = Some(guest_programs_gate(&collector, recorder));
    }
    Ok(Some(collector))
}

fn finish_self_profile(
    args: &RunArgs,
    collector: Arc<bootscope_profiler::Collector>,
    doc: &Timeline,
    symbols: Option<&bootscope_profiler::guest_symbols::SymbolTable>,
    modules: Option<&bootscope_model::modules::GuestModules>,
) -> Result<Option<bootscope_profiler::Profile>, Failure> {
    let Ok(mut collector) = Arc::try_unwrap(collector) else {
        eprintln!("bootscope: the profile could not be finished (collector still in use)");
        return Ok(None);
    };
    // Stopping the collector detaches every tracepoint program, which the
    // kernel does one RCU grace period at a time (~100 ms each here); the
    // process is about to exit, so take the final profile and let the exit
    // release them instead.
    let mut profile = collector.final_profile();
    std::mem::forget(collector);
    profile.target.kind = "self".into();
    profile.target.command = command_line();
    bootscope_profiler::restore_cmd::note_restore(&mut profile);
    profile.target.exit_code = Some(if clean(doc) { 0 } else { 1 });
    let no_guest = TimelineGuest::default();
    let guest = doc.guest.as_ref().unwrap_or(&no_guest);
    let booted;
    let symbols = match symbols {
        None if args.exit_sites => {
            booted = crate::guest_symbols::booted_kernel_symbols(guest);
            booted.as_ref()
        }
        given => given,
    };
    crate::guest_symbols::annotate(&mut profile, symbols, modules);
    crate::guest_symbols::label_npf_ranges(&mut profile, &guest.regions);
    if let Some(path) = &args.output {
        write_output(path, &serde_json::to_vec_pretty(&profile)?)?;
    }
    if !args.no_summary {
        let shown = args
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from("(not saved: use --output)"));
        eprint!("{}", crate::profile_summary::summary(&profile, &shown));
    }
    Ok(Some(profile))
}

fn finish_run(args: &RunArgs, doc: &Timeline) -> Result<i32, Failure> {
    if let Some(path) = &args.timeline {
        let json = serde_json::to_vec_pretty(doc)?;
        write_output(path, &json)?;
    }
    let no_guest = TimelineGuest::default();
    let guest = doc.guest.as_ref().unwrap_or(&no_guest);
    if !args.no_summary {
        eprintln!();
        if guest.kernel.is_empty() {
            eprintln!(
                "bootscope: set-up timeline ({} MiB guest)",
                guest.memory_bytes.unwrap_or(0) >> 20
            );
        } else {
            eprintln!(
                "bootscope: boot timeline of {} ({})",
                guest.kernel, guest.kernel_format
            );
        }
        // Mark, phase and unit names and the systemd version come from the
        // guest: the text rule for a terminal.
        let shown = |t: String| bootscope_model::text::printable_keeping(&t, &['\n']).into_owned();
        eprint!("{}", shown(bootscope_vmm::timeline::summary_table(doc)));
        if let Some(mem) = &doc.memory {
            print_prealloc_summary(mem);
        }
        if let Some(exits) = doc.kvm_stats.as_ref().and_then(|s| s.get("exits")) {
            eprintln!("KVM exits (KVM's own statistics): {exits}");
        }
        if let Some(initcalls) = &doc.initcalls {
            eprint!(
                "{}",
                shown(bootscope_vmm::kernel_log::summary(initcalls, 10))
            );
        }
        if let Some(units) = &doc.units {
            let first_run = doc
                .marks
                .iter()
                .find(|m| m.name == vmm_marks::FIRST_KVM_RUN)
                .map_or(0, |m| m.t_ns);
            eprint!("{}", shown(bootscope_vmm::units::summary(units, first_run)));
        }
        // The detail may quote the guest's console (a panic line): its
        // control characters are shown escaped, not sent to the terminal.
        eprintln!(
            "outcome: {}",
            bootscope_model::text::printable(outcome_detail(doc))
        );
    }
    if clean(doc) {
        Ok(0)
    } else if (doc.outcome.as_ref()).is_some_and(|o| o.reason == StopReason::Interrupted.name()) {
        // The caller gives the status of the signal.
        Ok(EXIT_FAILURE)
    } else {
        Err(Failure {
            code: EXIT_FAILURE,
            error: anyhow::anyhow!(
                "the guest did not shut down cleanly: {}",
                bootscope_model::text::printable(outcome_detail(doc))
            ),
        })
    }
}

/// Whether the run's outcome was clean.
fn clean(doc: &Timeline) -> bool {
    doc.outcome.as_ref().and_then(|o| o.clean).unwrap_or(false)
}

/// The outcome's detail ("" when there is none).
fn outcome_detail(doc: &Timeline) -> &str {
    doc.outcome.as_ref().map_or("", |o| o.detail.as_str())
}

/// One line per region and thread: where preallocation ran and how fast.
fn print_prealloc_summary(mem: &TimelineMemory) {
    // Absent numbers print as JSON's null, as the document has them.
    let or_null = |v: Option<u32>| v.map_or_else(|| "null".to_string(), |v| v.to_string());
    for r in &mem.regions {
        let ns = r.elapsed_ns.max(1);
        eprintln!(
            "preallocation: guest node {}: {} MiB in {:.1} ms ({:.2} GiB/s, {})",
            r.guest_node,
            r.bytes >> 20,
            ns as f64 / 1e6,
            r.bytes as f64 / (1u64 << 30) as f64 / (ns as f64 / 1e9),
            r.method
        );
        for t in &r.threads {
            eprintln!(
                "  {:<16} tid {} cpus {:<8} last cpu {} node {} pages {}",
                t.name,
                t.tid,
                t.allowed_cpus,
                or_null(t.last_cpu),
                or_null(t.node),
                t.pages_touched
            );
        }
    }
}
