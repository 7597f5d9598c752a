//! The legacy devices a Linux guest needs to boot and to say it is done:
//! COM1 (vm-superio 16550), the i8042 reset line (vm-superio), the CMOS
//! RTC, the ACPI sleep and reset registers, the chipset's reset control
//! register (byte port 0xcf9), PCI configuration mechanism #1 with a lone
//! host bridge (the other accesses at 0xcf8..0xcff), and the boot-marker
//! sinks (debug port 0x80, port 0xf4, the boot-timer MMIO word); the
//! virtio-mmio windows are handed to [`crate::virtio`].

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use vm_superio::{I8042Device, Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::console::{ConsoleSink, SharedConsole};
use crate::layout;
use crate::pci::{self, PciConfig};
use crate::rtc::{self, CmosRtc};
use crate::timeline::{boot_time_port_mark_name, debug_port_mark_name, MarkSource, Recorder};
use crate::x86::acpi;

mod persist;
pub mod vmgenid;
pub use persist::{DevicesRestoreError, DevicesState, SerialRegisters};

/// Interrupt trigger backed by an eventfd that KVM turns into an IRQ
/// (irqfd).
pub struct EventFdTrigger(pub EventFd);

impl Trigger for EventFdTrigger {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        self.0.write(1)
    }
}

/// What the guest asked for through a reset or power-off register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerRequest {
    /// S5 written to the ACPI sleep control register (`poweroff`).
    Off,
    /// The reset value written to the ACPI reset register (`reboot=a`).
    Reset,
    /// The i8042 reset line pulsed (`reboot=k`).
    I8042Reset,
    /// `RST_CPU` written to the reset control register, port 0xcf9
    /// (`reboot=pci`).
    Cf9Reset,
}

/// The guest's last stop request, shared by the devices that can make one.
type PowerState = Arc<Mutex<Option<PowerRequest>>>;

/// The i8042 reset line: firing it records a reset request.
#[derive(Clone)]
pub struct ResetTrigger(PowerState);

impl Trigger for ResetTrigger {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        *lock(&self.0) = Some(PowerRequest::I8042Reset);
        Ok(())
    }
}

/// Counts of guest writes to the marker ports, by value.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MarkerCounts {
    /// Writes to port 0x80 by value ("0x40" -> count).
    pub debug_port: BTreeMap<String, u64>,
    /// Writes to port 0xf4 by value.
    pub boot_time_port: BTreeMap<String, u64>,
    /// Boot-timer writes of the magic value.
    pub boot_timer: u64,
}

impl MarkerCounts {
    pub fn debug_port_total(&self) -> u64 {
        self.debug_port.values().sum()
    }
}

/// All emulated devices, shared by the vCPU threads.
pub struct Devices {
    serial: Mutex<Serial<EventFdTrigger, vm_superio::serial::NoEvents, SharedConsole>>,
    /// The console sink the serial port (and a virtio console) write into.
    console: SharedConsole,
    /// The virtio-mmio devices (none until [`Devices::set_virtio`]).
    virtio: std::sync::OnceLock<crate::virtio::VirtioDevices>,
    i8042: Mutex<I8042Device<ResetTrigger>>,
    power: PowerState,
    rtc: Mutex<CmosRtc>,
    /// The reset control register's kept bit (`SYS_RST`), as PIIX keeps it.
    reset_control: AtomicU8,
    pci: Mutex<PciConfig>,
    acpi: bool,
    recorder: Arc<Recorder>,
    counts: Mutex<MarkerCounts>,
    /// Where the vCPUs meet for a snapshot (`--snapshot-at`), if asked.
    snapshot_point: std::sync::OnceLock<Arc<crate::snapshot::SnapshotPoint>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Device state stays usable after a panicking vCPU thread.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Devices {
    /// `acpi`: whether the guest was given ACPI tables (and so powers off
    /// through the sleep control register rather than by halting).
    pub fn new(
        serial_irq: EventFd,
        console: ConsoleSink,
        recorder: Arc<Recorder>,
        acpi: bool,
    ) -> Self {
        let power = PowerState::default();
        let console = SharedConsole::new(console);
        Self {
            serial: Mutex::new(Serial::new(EventFdTrigger(serial_irq), console.clone())),
            console,
            virtio: std::sync::OnceLock::new(),
            i8042: Mutex::new(I8042Device::new(ResetTrigger(power.clone()))),
            power,
            rtc: Mutex::new(CmosRtc::default()),
            reset_control: AtomicU8::new(0),
            pci: Mutex::new(PciConfig::default()),
            acpi,
            recorder,
            counts: Mutex::new(MarkerCounts::default()),
            snapshot_point: std::sync::OnceLock::new(),
        }
    }

    /// Whether the guest has ACPI tables.
    pub fn acpi(&self) -> bool {
        self.acpi
    }

    /// Whether the guest asked to power off or reset.
    pub fn power_request(&self) -> Option<PowerRequest> {
        *lock(&self.power)
    }

    pub fn marker_counts(&self) -> MarkerCounts {
        lock(&self.counts).clone()
    }

    /// Flushes the console and matches its last partial line.
    pub fn finish_console(&self) {
        self.console.lock().finish();
    }

    pub fn console_events(&self) -> Arc<crate::console::ConsoleEvents> {
        self.console.lock().events()
    }

    /// The console sink, for a virtio console to write into.
    pub fn console(&self) -> &SharedConsole {
        &self.console
    }

    /// Gives the devices their virtio-mmio devices (once).
    pub fn set_virtio(&self, virtio: crate::virtio::VirtioDevices) {
        let _ = self.virtio.set(virtio);
    }

    /// The virtio-mmio devices, if any.
    pub fn virtio(&self) -> Option<&crate::virtio::VirtioDevices> {
        self.virtio.get()
    }

    /// Port read. Absent ports read as all ones, as on real hardware.
    pub fn pio_read(&self, port: u16, data: &mut [u8]) {
        data.fill(0xff);
        match port {
            p if (layout::SERIAL_PORT_BASE..layout::SERIAL_PORT_BASE + 8).contains(&p)
                && data.len() == 1 =>
            {
                data[0] = lock(&self.serial).read((p - layout::SERIAL_PORT_BASE) as u8);
            }
            layout::I8042_DATA_PORT | layout::I8042_COMMAND_PORT if data.len() == 1 => {
                data[0] = lock(&self.i8042).read((port - layout::I8042_DATA_PORT) as u8);
            }
            rtc::INDEX_PORT | rtc::DATA_PORT if data.len() == 1 => {
                data[0] = lock(&self.rtc).read(port);
            }
            // A byte at 0xcf9 is the reset control register, as on PIIX;
            // the configuration mechanism has the other accesses.
            layout::RESET_CONTROL_PORT if data.len() == 1 => {
                data[0] = self.reset_control.load(Ordering::SeqCst);
            }
            p if pci::owns(p) => lock(&self.pci).read(p, data),
            // No wake events: status and control read as clear.
            acpi::SLEEP_CONTROL_PORT | acpi::SLEEP_STATUS_PORT | acpi::RESET_PORT => data.fill(0),
            _ => {}
        }
    }

    /// Port write.
    pub fn pio_write(&self, port: u16, data: &[u8], vcpu: u32) {
        let Some(&value) = data.first() else { return };
        match port {
            p if (layout::SERIAL_PORT_BASE..layout::SERIAL_PORT_BASE + 8).contains(&p) => {
                // An interrupt that cannot be delivered is not worth stopping
                // the guest for; the byte was still emitted.
                let _ = lock(&self.serial).write((p - layout::SERIAL_PORT_BASE) as u8, value);
            }
            layout::I8042_DATA_PORT | layout::I8042_COMMAND_PORT => {
                let _ = lock(&self.i8042).write((port - layout::I8042_DATA_PORT) as u8, value);
            }
            rtc::INDEX_PORT | rtc::DATA_PORT => lock(&self.rtc).write(port, value),
            // Only S5 is offered (the DSDT names no other state).
            acpi::SLEEP_CONTROL_PORT if acpi::sleep_request(value) == Some(acpi::S5_SLEEP_TYPE) => {
                *lock(&self.power) = Some(PowerRequest::Off);
            }
            acpi::RESET_PORT if value == acpi::RESET_VALUE => {
                *lock(&self.power) = Some(PowerRequest::Reset);
            }
            // A byte register, as on PIIX (a wider access at 0xcf9 is not
            // it): RST_CPU resets, and SYS_RST is all it keeps.
            layout::RESET_CONTROL_PORT if data.len() == 1 => {
                if value & layout::RESET_CONTROL_RST_CPU != 0 {
                    *lock(&self.power) = Some(PowerRequest::Cf9Reset);
                } else {
                    self.reset_control
                        .store(value & layout::RESET_CONTROL_SYS_RST, Ordering::SeqCst);
                }
            }
            p if pci::owns(p) => lock(&self.pci).write(p, data),
            layout::DEBUG_PORT => {
                let first = {
                    let mut c = lock(&self.counts);
                    let n = c.debug_port.entry(format!("0x{value:02x}")).or_insert(0);
                    *n += 1;
                    *n == 1
                };
                if first {
                    self.recorder.guest(
                        debug_port_mark_name(value),
                        MarkSource::DebugPort,
                        Some(u64::from(value)),
                        Some(vcpu),
                    );
                }
            }
            layout::BOOT_TIME_PORT => {
                let first = {
                    let mut c = lock(&self.counts);
                    let n = c.boot_time_port.entry(format!("{value}")).or_insert(0);
                    *n += 1;
                    *n == 1
                };
                if first {
                    self.recorder.guest(
                        boot_time_port_mark_name(value),
                        MarkSource::BootTimePort,
                        Some(u64::from(value)),
                        Some(vcpu),
                    );
                }
            }
            _ => {}
        }
    }

    /// MMIO read: the virtio devices' windows; elsewhere nothing is
    /// mapped and reads see all ones.
    pub fn mmio_read(&self, addr: u64, data: &mut [u8]) {
        if self.virtio().is_some_and(|v| v.mmio_read(addr, data)) {
            return;
        }
        data.fill(0xff);
    }

    /// MMIO write: the virtio devices and the boot timer listen.
    pub fn mmio_write(&self, addr: u64, data: &[u8], vcpu: u32) {
        if self.virtio().is_some_and(|v| v.mmio_write(addr, data)) {
            return;
        }
        if addr == layout::BOOT_TIMER_MMIO && data.first() == Some(&layout::BOOT_TIMER_MAGIC) {
            let first = {
                let mut c = lock(&self.counts);
                c.boot_timer += 1;
                c.boot_timer == 1
            };
            if first {
                self.recorder.guest(
                    "boot timer: guest boot done (123)".to_string(),
                    MarkSource::BootTimer,
                    Some(u64::from(layout::BOOT_TIMER_MAGIC)),
                    Some(vcpu),
                );
            }
        }
    }
}
