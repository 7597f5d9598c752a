//! vCPU threads: one named thread per vCPU running `KVM_RUN`, the signal
//! that kicks it out of the kernel to stop, and where it was when it
//! stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvm_ioctls::VcpuFd;

use crate::devices::Devices;
use crate::exit::{handle_exit, ExitAction};
use crate::exit_slots::ExitSlots;
use crate::timeline::{vmm_marks, Recorder, StopReason};

/// What a vCPU thread tells the run loop.
pub(super) enum VcpuEvent {
    /// The guest ended (or `KVM_RUN` failed) on this vCPU.
    Stop(StopReason, String),
}

/// Signal used to kick vCPU threads out of KVM_RUN.
pub(super) fn kick_signal() -> i32 {
    vmm_sys_util::signal::SIGRTMIN() + 2
}

extern "C" fn noop_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// Installs the handler of the kick signal: a handler that does nothing, so
/// the signal only interrupts `KVM_RUN` (EINTR) instead of ending the
/// process.
pub(super) fn install_kick_handler() -> std::io::Result<()> {
    vmm_sys_util::signal::register_signal_handler(kick_signal(), noop_handler)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
}

/// Kicks the thread out of `KVM_RUN` until it ends, for up to 5 s.
pub(super) fn kick_until_done<T>(t: &JoinHandle<T>) {
    use std::os::unix::thread::JoinHandleExt;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !t.is_finished() && Instant::now() < deadline {
        // SAFETY: the pthread handle belongs to a thread we spawned and have
        // not joined yet, so it is valid.
        unsafe { libc::pthread_kill(t.as_pthread_t(), kick_signal()) };
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Starts thread `vcpu<index>`, which runs the vCPU until the guest ends on
/// it or `stop` is set, and hands the vCPU back when it ends.
pub(super) fn spawn_vcpu(
    index: u32,
    mut vcpu: VcpuFd,
    devices: Arc<Devices>,
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<VcpuEvent>,
    exit_slots: Option<Arc<Mutex<ExitSlots>>>,
) -> std::io::Result<JoinHandle<VcpuFd>> {
    std::thread::Builder::new()
        .name(bootscope_model::threads::vcpu_thread_name(index))
        .spawn(move || {
            if index == 0 {
                recorder.vmm_once(vmm_marks::FIRST_KVM_RUN);
            }
            let clock = recorder.clock();
            let mut slots = exit_slots.as_ref().map(|_| ExitSlots::default());
            let point = devices.snapshot_point().cloned();
            if let Some(p) = &point {
                p.register(index);
            }
            while !stop.load(Ordering::SeqCst) {
                if point
                    .as_ref()
                    .is_some_and(|p| p.park_if_requested(&mut vcpu, index))
                {
                    break;
                }
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
            if let Some(p) = &point {
                p.deregister(index);
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
pub(super) fn describe_vcpu(index: u32, vcpu: &VcpuFd) -> String {
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
