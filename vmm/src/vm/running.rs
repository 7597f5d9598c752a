//! The run step: the vCPU threads started, the wait for the guest to end
//! (or the timeout, a stop request, PVM emulation), the threads stopped, and
//! the run's timeline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_ioctls::VcpuFd;

use crate::devices::Devices;
use crate::exit_slots::ExitSlots;
use crate::host::KvmFlavour;
use crate::kvm_stats::StatsFd;
use crate::timeline::{vmm_marks, StopReason};

use super::builder::{GuestRam, Vcpus, VmBuilder};
use super::emulation::{EmulationWatch, PVM_GRACE};
use super::error::RunError;
use super::images::BootImages;
use super::report::{run_timeline, sum_stats};
use super::snapshot::SnapshotStep;
use super::vcpu::{describe_vcpu, install_kick_handler, kick_until_done, spawn_vcpu, VcpuEvent};
use super::{RunReport, POWER_OFF_GRACE};

/// How long the run loop sleeps between its checks of what no vCPU thread
/// reports (a stop request, an overdue power-off, the timeout, which it
/// wakes for exactly). Each wake-up interrupts the guest when the host has
/// one CPU for both (a VM exit), so the loop wakes rarely: a stop request
/// waits at most this long.
const POLL: Duration = Duration::from_millis(250);
/// The same on a PVM host, where the loop also watches whether the guest
/// is being emulated, instruction by instruction.
const PVM_POLL: Duration = Duration::from_millis(50);

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

/// A loaded kernel's symbols and types, borrowed.
fn loaded(
    k: &Result<Box<dyn crate::kernel_log::GuestKernel>, String>,
) -> Result<&dyn crate::kernel_log::GuestKernel, String> {
    k.as_ref().map(|k| k.as_ref()).map_err(Clone::clone)
}

/// How the wait for the guest ended.
struct Ending {
    reason: StopReason,
    detail: String,
    /// Instructions emulated, when the run stopped because a PVM host was
    /// emulating the guest.
    pvm_emulated: Option<u64>,
}

impl Ending {
    fn new(reason: StopReason, detail: String) -> Self {
        Self {
            reason,
            detail,
            pvm_emulated: None,
        }
    }
}

impl VmBuilder {
    /// Run step: starts one thread per vCPU, waits for the guest to end,
    /// stops the threads and returns the run's timeline. Guest memory is
    /// released only after the threads are stopped.
    pub(super) fn run(
        self,
        ram: GuestRam,
        images: BootImages,
        devices: Arc<Devices>,
        vcpus: Vcpus,
    ) -> Result<RunReport, RunError> {
        install_kick_handler().map_err(RunError::KickHandler)?;
        let worker = match devices.virtio().filter(|v| !v.transports().is_empty()) {
            Some(v) => Some(
                crate::virtio::worker::Worker::start(v.transports().to_vec())
                    .map_err(RunError::VirtioWorker)?,
            ),
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<VcpuEvent>();
        let mut threads: Vec<JoinHandle<VcpuFd>> = Vec::new();
        let exit_slots = self
            .cfg
            .initcalls
            .then(|| Arc::new(Mutex::new(ExitSlots::default())));
        for (index, vcpu) in vcpus.fds.into_iter().enumerate() {
            let index = index as u32;
            let t = spawn_vcpu(
                index,
                vcpu,
                devices.clone(),
                self.recorder.clone(),
                stop.clone(),
                tx.clone(),
                exit_slots.clone(),
            )
            .map_err(|source| RunError::SpawnVcpu { index, source })?;
            threads.push(t);
        }
        drop(tx);

        let ending = loop {
            let ending = self.wait_for_end(&rx, &devices, &vcpus.stats);
            match self.snapshot_if_asked(&ram, &images, &devices) {
                SnapshotStep::NotAsked => break ending,
                SnapshotStep::Resumed => {}
                SnapshotStep::Ended(detail) => {
                    break Ending::new(StopReason::SnapshotTaken, detail)
                }
                SnapshotStep::Failed(detail) => break Ending::new(StopReason::Error, detail),
            }
        };
        self.recorder.vmm(vmm_marks::GUEST_SHUTDOWN);
        stop.store(true, Ordering::SeqCst);
        let notes = stop_vcpus(threads, &ending.reason);
        if let Some(w) = worker {
            w.stop();
        }
        let detail = if notes.is_empty() {
            ending.detail
        } else {
            format!("{}; {}", ending.detail, notes.join("; "))
        };
        devices.finish_console();
        let console_error = devices.console_events().write_failure();
        let kvm_stats = sum_stats(&vcpus.stats);
        if let Some(emulated) = ending.pvm_emulated {
            return Err(RunError::PvmEmulation {
                kernel: self.cfg.kernel.display().to_string(),
                emulated,
            });
        }

        let outcome = guest_outcome(&devices, ending.reason, detail);
        let mut timeline = run_timeline(
            &self.cfg,
            &self.recorder,
            self.flavour,
            &images,
            outcome,
            kvm_stats,
            ram.prealloc.as_ref(),
        );
        if let Some(v) = devices.virtio() {
            timeline.devices = v.reports(&timeline.phases);
            if let Some(guest) = &mut timeline.guest {
                crate::virtio::report::add_regions(&mut guest.regions, &timeline.devices);
            }
        }
        let modules = self.read_guest_kernel(&ram, &devices, &mut timeline, exit_slots.as_ref());
        let GuestRam { backing, prealloc } = ram;
        drop(backing);
        Ok(RunReport {
            timeline,
            marker_counts: devices.marker_counts(),
            prealloc,
            console_error,
            modules,
        })
    }

    /// What the stopped guest's memory says of its kernel: with
    /// `--initcalls` its initcalls (into the timeline), with `modules` its
    /// loaded modules. Guest RAM is scanned for VMCOREINFO once for both,
    /// and the booted image's symbols and types are loaded once for both
    /// when both ask for the same loader.
    fn read_guest_kernel(
        &self,
        ram: &GuestRam,
        devices: &Devices,
        timeline: &mut crate::timeline::Timeline,
        exit_slots: Option<&Arc<Mutex<ExitSlots>>>,
    ) -> Option<bootscope_model::modules::GuestModules> {
        use crate::kernel_log::{GuestKernelLoader, StoppedGuest};
        let guest = StoppedGuest::new(ram.backing.guest_memory());
        // The image booted: the decompressed vmlinux when there is one.
        let image = (timeline.guest.as_ref())
            .and_then(|g| g.kernel_boot.as_ref())
            .and_then(|b| b.cache_file.as_ref())
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_file())
            .unwrap_or_else(|| self.cfg.kernel.clone());
        let load = |l: &GuestKernelLoader| {
            let started = Instant::now();
            let k = l(&image);
            (k, started.elapsed().as_nanos() as u64)
        };
        let initcall_kernel = self
            .cfg
            .initcall_kernel
            .as_ref()
            .filter(|_| self.cfg.initcalls);
        let traced = initcall_kernel.map(load);
        if self.cfg.initcalls {
            let mut doc = crate::kernel_log::collect_after_run(
                &guest,
                &devices.console_events(),
                &timeline.marks,
                traced.as_ref().map(|(k, ns)| (loaded(k), *ns)),
            );
            if let Some(slots) = exit_slots {
                crate::kernel_log::count_exits(
                    &mut doc,
                    &slots.lock().unwrap_or_else(|e| e.into_inner()),
                );
            }
            timeline.initcalls = Some(doc);
        }
        let loader = self.cfg.modules.as_ref()?;
        let shared = initcall_kernel.is_some_and(|l| Arc::ptr_eq(l, loader));
        let own = (!shared).then(|| load(loader));
        let kernel = match (&traced, &own) {
            (_, Some((k, _))) | (Some((k, _)), None) => loaded(k),
            (None, None) => return None,
        };
        Some(crate::kernel_log::modules::collect(&guest, kernel))
    }

    /// Waits for the guest to end, the timeout, a stop request, or (on a
    /// PVM host) a guest the host can only emulate.
    fn wait_for_end(
        &self,
        rx: &mpsc::Receiver<VcpuEvent>,
        devices: &Devices,
        stats: &[StatsFd],
    ) -> Ending {
        let cfg = &self.cfg;
        let started = Instant::now();
        let mut pvm_watch = EmulationWatch::new(started);
        let poll = if self.flavour == KvmFlavour::Pvm {
            PVM_POLL
        } else {
            POLL
        };
        loop {
            let wait = cfg
                .timeout
                .map_or(poll, |t| t.saturating_sub(started.elapsed()).min(poll));
            match rx.recv_timeout(wait) {
                Ok(VcpuEvent::Stop(r, d)) => return Ending::new(r, d),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Ending::new(StopReason::Error, "all vCPU threads ended".to_string())
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if devices.snapshot_point().is_some_and(|p| p.requested()) {
                return Ending::new(StopReason::Stopped, String::new());
            }
            if let Some(waited) = power_off_overdue(devices) {
                return Ending::new(
                    StopReason::GuestHalt,
                    format!(
                        "guest kernel said \"reboot: Power down\" but did not power off through ACPI within {:.1} s (halted)",
                        waited.as_secs_f64()
                    ),
                );
            }
            if cfg.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
                return Ending::new(
                    StopReason::Stopped,
                    "stopped on request (the user quit)".to_string(),
                );
            }
            if let Some(t) = cfg.timeout {
                if started.elapsed() >= t {
                    return Ending::new(
                        StopReason::Timeout,
                        format!(
                            "guest still running after --timeout {:.1} s",
                            t.as_secs_f64()
                        ),
                    );
                }
            }
            if self.flavour == KvmFlavour::Pvm
                && !cfg.allow_emulation
                && started.elapsed() >= PVM_GRACE
            {
                let emulated = sum_stats(stats).get("insn_emulation").copied().unwrap_or(0);
                if pvm_watch.guest_is_emulated(Instant::now(), emulated) {
                    return Ending {
                        reason: StopReason::PvmEmulation,
                        detail: format!(
                            "stopped: {emulated} instructions emulated (not a PVM guest)"
                        ),
                        pvm_emulated: Some(emulated),
                    };
                }
            }
        }
    }
}

/// Kicks every vCPU thread out of `KVM_RUN` and joins it; returns notes for
/// the outcome's detail. A vCPU thread that does not stop (stuck outside
/// KVM_RUN) is left behind rather than joined: the run still ends and
/// reports. A timed-out run also says where each vCPU was (see
/// `describe_vcpu`).
fn stop_vcpus(threads: Vec<JoinHandle<VcpuFd>>, reason: &StopReason) -> Vec<String> {
    for t in &threads {
        kick_until_done(t);
    }
    let mut notes = Vec::new();
    for (index, t) in threads.into_iter().enumerate() {
        if !t.is_finished() {
            notes.push(format!("vcpu{index} did not stop within 5 s of the kick"));
            continue;
        }
        match t.join() {
            Ok(vcpu) if *reason == StopReason::Timeout => {
                notes.push(describe_vcpu(index as u32, &vcpu))
            }
            Ok(_) => {}
            Err(_) => notes.push(format!("vcpu{index} thread panicked")),
        }
    }
    notes
}

/// The run's outcome: a guest kernel panic seen on the console overrides
/// how the run ended, unless the VMM itself failed.
fn guest_outcome(devices: &Devices, reason: StopReason, detail: String) -> (StopReason, String) {
    let events = devices.console_events();
    if events.panicked.load(Ordering::SeqCst) && reason != StopReason::Error {
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
    }
}
