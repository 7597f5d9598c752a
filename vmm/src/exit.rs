//! What to do with each `KVM_RUN` exit, kept apart from the ioctl so tests can
//! feed made-up exits.

use std::sync::atomic::Ordering;

use kvm_ioctls::VcpuExit;

use crate::devices::{Devices, PowerRequest};
use crate::timeline::StopReason;

/// The vCPU loop's next step.
#[derive(Debug, PartialEq, Eq)]
pub enum ExitAction {
    /// Re-enter the guest.
    Continue,
    /// Stop the VM.
    Stop(StopReason, String),
}

/// KVM_SYSTEM_EVENT types.
const SYSTEM_EVENT_SHUTDOWN: u32 = 1;
const SYSTEM_EVENT_RESET: u32 = 2;
const SYSTEM_EVENT_CRASH: u32 = 3;

/// Handles one exit of vCPU `vcpu`.
pub fn handle_exit(exit: VcpuExit<'_>, devices: &Devices, vcpu: u32) -> ExitAction {
    match exit {
        VcpuExit::IoIn(port, data) => {
            devices.pio_read(port, data);
            ExitAction::Continue
        }
        VcpuExit::IoOut(port, data) => port_write(devices, port, data, vcpu),
        VcpuExit::MmioRead(addr, data) => {
            devices.mmio_read(addr, data);
            ExitAction::Continue
        }
        VcpuExit::MmioWrite(addr, data) => {
            devices.mmio_write(addr, data, vcpu);
            ExitAction::Continue
        }
        VcpuExit::Shutdown => triple_fault(devices, vcpu),
        VcpuExit::SystemEvent(kind, _) => system_event(kind, vcpu),
        // With the in-kernel irqchip HLT stays in the kernel; a userspace
        // HLT exit means nothing can wake this vCPU.
        VcpuExit::Hlt => ExitAction::Stop(
            StopReason::GuestHalt,
            format!("vcpu{vcpu} halted with no way to wake"),
        ),
        VcpuExit::FailEntry(reason, cpu) => ExitAction::Stop(
            StopReason::Error,
            format!("KVM could not enter the guest on vcpu{vcpu} (hardware reason {reason:#x}, cpu {cpu})"),
        ),
        VcpuExit::InternalError => ExitAction::Stop(
            StopReason::Error,
            format!("KVM internal error on vcpu{vcpu} (often an instruction KVM cannot emulate)"),
        ),
        VcpuExit::Intr | VcpuExit::IrqWindowOpen => ExitAction::Continue,
        other => ExitAction::Stop(
            StopReason::Error,
            format!("unexpected exit on vcpu{vcpu}: {other:?}"),
        ),
    }
}

/// A port write: the device's, then the stop it may have asked for (a
/// power or reset register, or the console's halt line).
fn port_write(devices: &Devices, port: u16, data: &[u8], vcpu: u32) -> ExitAction {
    devices.pio_write(port, data, vcpu);
    if let Some(request) = devices.power_request() {
        let (reason, detail) = power_stop(request, vcpu);
        return ExitAction::Stop(reason, detail);
    }
    let ev = devices.console_events();
    // With ACPI, "Power down" is followed by the sleep register
    // write; the run loop gives that a moment (POWER_OFF_GRACE).
    let awaiting_acpi = devices.acpi() && ev.power_down.load(Ordering::SeqCst);
    if ev.halted.load(Ordering::SeqCst) && !awaiting_acpi {
        return ExitAction::Stop(
            StopReason::GuestHalt,
            "guest kernel halted (\"reboot: System halted\" on the console)".into(),
        );
    }
    ExitAction::Continue
}

/// The stop reason and detail of a power or reset request.
fn power_stop(request: PowerRequest, vcpu: u32) -> (StopReason, String) {
    match request {
        PowerRequest::Off => (
            StopReason::AcpiPowerOff,
            format!("guest powered off through ACPI (S5, vcpu{vcpu})"),
        ),
        PowerRequest::Reset => (
            StopReason::AcpiReset,
            format!("guest reset through the ACPI reset register (vcpu{vcpu})"),
        ),
        PowerRequest::I8042Reset => (
            StopReason::I8042Reset,
            format!("guest reset through the i8042 controller (vcpu{vcpu})"),
        ),
        PowerRequest::Cf9Reset => (
            StopReason::Cf9Reset,
            format!("guest reset through the reset control register, port 0xcf9 (vcpu{vcpu})"),
        ),
    }
}

/// A triple fault is how a CPU resets when nothing else will: Linux ends
/// `reboot=t` that way, after saying so on the console. Without that word
/// it is a crash (the guest faulted with no usable IDT).
fn triple_fault(devices: &Devices, vcpu: u32) -> ExitAction {
    if devices.console_events().restarting.load(Ordering::SeqCst) {
        ExitAction::Stop(
            StopReason::TripleFaultReboot,
            format!(
                "guest reset by a triple fault on vcpu{vcpu} after the kernel announced the restart (\"reboot: Restarting system\")"
            ),
        )
    } else {
        ExitAction::Stop(
            StopReason::TripleFault,
            format!(
                "guest crashed: triple fault on vcpu{vcpu} (KVM_EXIT_SHUTDOWN) with no reset or power-off request"
            ),
        )
    }
}

/// `KVM_EXIT_SYSTEM_EVENT`: a crash is a guest panic, the rest a system
/// event.
fn system_event(kind: u32, vcpu: u32) -> ExitAction {
    let what = match kind {
        SYSTEM_EVENT_SHUTDOWN => "shutdown",
        SYSTEM_EVENT_RESET => "reset",
        SYSTEM_EVENT_CRASH => "crash",
        _ => "unknown event",
    };
    let reason = if kind == SYSTEM_EVENT_CRASH {
        StopReason::GuestPanic
    } else {
        StopReason::SystemEvent
    };
    ExitAction::Stop(reason, format!("guest system event: {what} (vcpu{vcpu})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use bootscope_testkit::Capture;

    use vmm_sys_util::eventfd::EventFd;

    use crate::console::{ConsoleSink, MilestonePattern};
    use crate::timeline::{Clock, MarkSource, Recorder};

    fn devices() -> (Devices, Arc<Recorder>, Capture, EventFd) {
        devices_with(true)
    }

    fn devices_with(acpi: bool) -> (Devices, Arc<Recorder>, Capture, EventFd) {
        let rec = Arc::new(Recorder::new(Clock::start()));
        let cap = Capture::default();
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let sink = ConsoleSink::new(
            Box::new(cap.clone()),
            MilestonePattern::defaults(),
            rec.clone(),
        );
        (
            Devices::new(irq.try_clone().unwrap(), sink, rec.clone(), acpi),
            rec,
            cap,
            irq,
        )
    }

    #[test]
    fn serial_bytes_reach_console_and_milestones() {
        let (d, rec, cap, _irq) = devices();
        for b in b"Linux version 6.1.0 (x)\n" {
            assert_eq!(
                handle_exit(VcpuExit::IoOut(0x3f8, &[*b]), &d, 0),
                ExitAction::Continue
            );
        }
        assert_eq!(&cap.bytes()[..], b"Linux version 6.1.0 (x)\n");
        let marks = rec.snapshot();
        assert!(marks.iter().any(|m| m.name == "vmm: first serial byte"));
        assert!(marks
            .iter()
            .any(|m| m.name == "serial: kernel banner" && m.source == MarkSource::Serial));
    }

    #[test]
    fn serial_line_status_reads_ready() {
        let (d, _, _, _) = devices();
        let mut lsr = [0u8];
        handle_exit(VcpuExit::IoIn(0x3fd, &mut lsr), &d, 0);
        // THR empty and transmitter empty.
        assert_eq!(lsr[0] & 0x60, 0x60);
        let mut absent = [0u8; 2];
        handle_exit(VcpuExit::IoIn(0x1234, &mut absent), &d, 0);
        assert_eq!(absent, [0xff, 0xff]);
    }

    #[test]
    fn i8042_reset_stops() {
        let (d, _, _, _) = devices();
        assert_eq!(
            handle_exit(VcpuExit::IoOut(0x64, &[0xd1]), &d, 0),
            ExitAction::Continue
        );
        assert!(matches!(
            handle_exit(VcpuExit::IoOut(0x64, &[0xfe]), &d, 1),
            ExitAction::Stop(StopReason::I8042Reset, _)
        ));
    }

    #[test]
    fn acpi_power_off_and_reset_stop() {
        use crate::x86::acpi;
        let (d, _, _, _) = devices();
        // The kernel clears WAK_STS, then writes SLP_TYP|SLP_EN.
        assert_eq!(
            handle_exit(VcpuExit::IoOut(acpi::SLEEP_STATUS_PORT, &[0x80]), &d, 0),
            ExitAction::Continue
        );
        let mut status = [0xffu8];
        handle_exit(VcpuExit::IoIn(acpi::SLEEP_STATUS_PORT, &mut status), &d, 0);
        assert_eq!(status, [0]);
        // Another sleep type, or S5 without SLP_EN, does nothing.
        for v in [(3 << 2) | 0x20, 5 << 2] {
            assert_eq!(
                handle_exit(VcpuExit::IoOut(acpi::SLEEP_CONTROL_PORT, &[v]), &d, 0),
                ExitAction::Continue
            );
        }
        assert!(matches!(
            handle_exit(
                VcpuExit::IoOut(acpi::SLEEP_CONTROL_PORT, &[(5 << 2) | 0x20]),
                &d,
                1
            ),
            ExitAction::Stop(StopReason::AcpiPowerOff, _)
        ));
        let (d, _, _, _) = devices();
        assert_eq!(
            handle_exit(VcpuExit::IoOut(acpi::RESET_PORT, &[0x55]), &d, 0),
            ExitAction::Continue
        );
        assert!(matches!(
            handle_exit(
                VcpuExit::IoOut(acpi::RESET_PORT, &[acpi::RESET_VALUE]),
                &d,
                0
            ),
            ExitAction::Stop(StopReason::AcpiReset, _)
        ));
    }

    #[test]
    fn reset_control_register_resets_on_rst_cpu_only() {
        let (d, _, _, _) = devices();
        let port = crate::layout::RESET_CONTROL_PORT;
        // Linux's reboot=pci: read, write SYS_RST, read it back, then
        // SYS_RST | RST_CPU | FULL_RST.
        let mut v = [0xffu8];
        handle_exit(VcpuExit::IoIn(port, &mut v), &d, 0);
        assert_eq!(v, [0]);
        assert_eq!(
            handle_exit(VcpuExit::IoOut(port, &[0x0a]), &d, 0),
            ExitAction::Continue
        );
        handle_exit(VcpuExit::IoIn(port, &mut v), &d, 0);
        assert_eq!(v, [0x02], "only SYS_RST is kept");
        // Wider accesses are not the byte register.
        assert_eq!(
            handle_exit(VcpuExit::IoOut(port, &[0x0e, 0x0e]), &d, 0),
            ExitAction::Continue
        );
        let mut wide = [0u8; 2];
        handle_exit(VcpuExit::IoIn(port, &mut wide), &d, 0);
        assert_eq!(wide, [0xff, 0xff]);
        let stop = handle_exit(VcpuExit::IoOut(port, &[0x0e]), &d, 1);
        let ExitAction::Stop(StopReason::Cf9Reset, detail) = stop else {
            panic!("{stop:?}");
        };
        assert!(
            detail.contains("0xcf9") && detail.contains("vcpu1"),
            "{detail}"
        );
        assert!(StopReason::Cf9Reset.is_clean());
    }

    /// A triple fault with no reset or power-off request is a crash; after
    /// the kernel said it restarts (Linux's reboot=t) it is that reset.
    #[test]
    fn triple_fault_is_a_crash_unless_a_restart_was_announced() {
        let (d, _, _, _) = devices();
        // Console lines that are not the announcement change nothing.
        for b in b"[ 1.0] reboot: Restarting\n[ 1.1] system reboot\n" {
            handle_exit(VcpuExit::IoOut(0x3f8, &[*b]), &d, 0);
        }
        let stop = handle_exit(VcpuExit::Shutdown, &d, 2);
        let ExitAction::Stop(reason, detail) = stop else {
            panic!("{stop:?}");
        };
        assert_eq!(reason, StopReason::TripleFault);
        assert!(!reason.is_clean());
        assert!(
            detail.contains("crashed") && detail.contains("vcpu2"),
            "{detail}"
        );

        let (d, _, _, _) = devices();
        for b in b"[ 3.0] reboot: Restarting system\n" {
            assert_eq!(
                handle_exit(VcpuExit::IoOut(0x3f8, &[*b]), &d, 0),
                ExitAction::Continue
            );
        }
        let stop = handle_exit(VcpuExit::Shutdown, &d, 0);
        let ExitAction::Stop(reason, detail) = stop else {
            panic!("{stop:?}");
        };
        assert_eq!(reason, StopReason::TripleFaultReboot);
        assert!(reason.is_clean());
        assert!(detail.contains("Restarting system"), "{detail}");
    }

    #[test]
    fn triple_fault_and_system_events() {
        let (d, _, _, _) = devices();
        assert!(matches!(
            handle_exit(VcpuExit::Shutdown, &d, 0),
            ExitAction::Stop(StopReason::TripleFault, _)
        ));
        assert!(matches!(
            handle_exit(VcpuExit::SystemEvent(2, &[]), &d, 0),
            ExitAction::Stop(StopReason::SystemEvent, _)
        ));
        assert!(matches!(
            handle_exit(VcpuExit::SystemEvent(3, &[]), &d, 0),
            ExitAction::Stop(StopReason::GuestPanic, _)
        ));
        assert!(matches!(
            handle_exit(VcpuExit::InternalError, &d, 0),
            ExitAction::Stop(StopReason::Error, _)
        ));
        assert!(matches!(
            handle_exit(VcpuExit::FailEntry(7, 0), &d, 0),
            ExitAction::Stop(StopReason::Error, _)
        ));
    }

    #[test]
    fn marker_ports_count_every_write_and_mark_first() {
        let (d, rec, _, _) = devices();
        for _ in 0..5 {
            handle_exit(VcpuExit::IoOut(0x80, &[0x40]), &d, 0);
        }
        handle_exit(VcpuExit::IoOut(0x80, &[0x60]), &d, 1);
        handle_exit(VcpuExit::IoOut(0xf4, &[6]), &d, 0);
        handle_exit(VcpuExit::MmioWrite(0xd000_0000, &[123, 0, 0, 0]), &d, 0);
        handle_exit(VcpuExit::MmioWrite(0xd000_0000, &[5, 0, 0, 0]), &d, 0);
        let c = d.marker_counts();
        assert_eq!(c.debug_port["0x40"], 5);
        assert_eq!(c.debug_port_total(), 6);
        assert_eq!(c.boot_time_port["6"], 1);
        assert_eq!(c.boot_timer, 1);
        let marks = rec.snapshot();
        assert_eq!(
            marks
                .iter()
                .filter(|m| m.source == MarkSource::DebugPort)
                .count(),
            2
        );
        let user = marks.iter().find(|m| m.value == Some(0x60)).unwrap();
        assert_eq!(user.vcpu, Some(1));
        assert!(marks.iter().any(|m| m.source == MarkSource::BootTimer));
        assert!(marks
            .iter()
            .any(|m| m.name == "port 0xf4: linux_start_kernel (6)"));
    }

    #[test]
    fn console_halt_and_panic() {
        let (d, _, _, _) = devices();
        for b in b"[ 1.0] Kernel panic - not syncing: Attempted to kill init!\n" {
            handle_exit(VcpuExit::IoOut(0x3f8, &[*b]), &d, 0);
        }
        assert!(d.console_events().panicked.load(Ordering::SeqCst));
        let mut last = ExitAction::Continue;
        for b in b"[ 2.0] reboot: System halted\n" {
            last = handle_exit(VcpuExit::IoOut(0x3f8, &[*b]), &d, 0);
        }
        assert!(matches!(last, ExitAction::Stop(StopReason::GuestHalt, _)));
    }

    #[test]
    fn power_down_waits_for_acpi_only_when_the_guest_has_it() {
        use crate::x86::acpi;
        let line = b"[ 2.0] reboot: Power down\n";
        // Without ACPI the line is the end.
        let (d, _, _, _) = devices_with(false);
        let mut last = ExitAction::Continue;
        for b in line {
            last = handle_exit(VcpuExit::IoOut(0x3f8, &[*b]), &d, 0);
        }
        assert!(matches!(last, ExitAction::Stop(StopReason::GuestHalt, _)));
        // With ACPI the sleep register write that follows ends the run.
        let (d, _, _, _) = devices_with(true);
        for b in line {
            assert_eq!(
                handle_exit(VcpuExit::IoOut(0x3f8, &[*b]), &d, 0),
                ExitAction::Continue
            );
        }
        assert!(d.console_events().power_down.load(Ordering::SeqCst));
        assert!(matches!(
            handle_exit(VcpuExit::IoOut(acpi::SLEEP_CONTROL_PORT, &[0x34]), &d, 0),
            ExitAction::Stop(StopReason::AcpiPowerOff, _)
        ));
    }
}
