//! The legacy devices' state in a snapshot (Firecracker's `persist.rs`
//! beside each device): the serial port's registers and FIFO, the CMOS
//! RTC, the reset control register, the PCI address register and the
//! marker counts. The i8042 keeps nothing a running Linux guest depends on
//! (it is only a reset line here); a guest that asked to power off or
//! reset is not snapshotted.

use serde::{Deserialize, Serialize};
use vm_superio::serial::{NoEvents, SerialState};
use vm_superio::Serial;

use super::{lock, Devices, EventFdTrigger, MarkerCounts};
use crate::rtc::persist::RtcState;

/// The 16550's registers and receive FIFO (vm-superio's `SerialState`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerialRegisters {
    pub baud_divisor_low: u8,
    pub baud_divisor_high: u8,
    pub interrupt_enable: u8,
    pub interrupt_identification: u8,
    pub line_control: u8,
    pub line_status: u8,
    pub modem_control: u8,
    pub modem_status: u8,
    pub scratch: u8,
    pub in_buffer: Vec<u8>,
}

impl From<SerialState> for SerialRegisters {
    fn from(s: SerialState) -> Self {
        Self {
            baud_divisor_low: s.baud_divisor_low,
            baud_divisor_high: s.baud_divisor_high,
            interrupt_enable: s.interrupt_enable,
            interrupt_identification: s.interrupt_identification,
            line_control: s.line_control,
            line_status: s.line_status,
            modem_control: s.modem_control,
            modem_status: s.modem_status,
            scratch: s.scratch,
            in_buffer: s.in_buffer,
        }
    }
}

impl From<&SerialRegisters> for SerialState {
    fn from(s: &SerialRegisters) -> Self {
        SerialState {
            baud_divisor_low: s.baud_divisor_low,
            baud_divisor_high: s.baud_divisor_high,
            interrupt_enable: s.interrupt_enable,
            interrupt_identification: s.interrupt_identification,
            line_control: s.line_control,
            line_status: s.line_status,
            modem_control: s.modem_control,
            modem_status: s.modem_status,
            scratch: s.scratch,
            in_buffer: s.in_buffer.clone(),
        }
    }
}

/// The legacy devices' state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicesState {
    pub serial: SerialRegisters,
    pub rtc: RtcState,
    pub reset_control: u8,
    pub pci_address: u32,
    pub marker_counts: MarkerCounts,
    pub acpi: bool,
    /// Each virtio-mmio transport, in slot order.
    pub virtio: Vec<crate::virtio::mmio::TransportState>,
}

/// Why the devices' state cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DevicesRestoreError {
    #[error("the serial port's saved state is invalid: {0}")]
    Serial(String),
    #[error("the CMOS RTC's saved RAM is not 128 bytes")]
    Rtc,
    #[error("cannot clone the serial port's interrupt eventfd: {0}")]
    EventFd(#[source] std::io::Error),
    #[error("the snapshot has {saved} virtio devices, this VM {here}")]
    VirtioCount { saved: usize, here: usize },
    #[error(transparent)]
    Virtio(#[from] crate::virtio::mmio::TransportRestoreError),
}

/// The virtio transports, locked one at a time.
fn transports(
    devices: &Devices,
) -> &[std::sync::Arc<std::sync::Mutex<crate::virtio::MmioTransport>>] {
    devices.virtio().map_or(&[], |v| v.transports())
}

impl Devices {
    /// Serves every request the guest made available on a virtio queue
    /// (the vCPUs are parked): none is in flight in a snapshot.
    pub fn drain_virtio(&self) {
        for t in transports(self) {
            lock(t).drain();
        }
    }

    /// The devices' state; the vCPUs are parked and the virtio queues
    /// drained ([`Devices::drain_virtio`]).
    pub fn save_state(&self) -> DevicesState {
        DevicesState {
            serial: lock(&self.serial).state().into(),
            rtc: lock(&self.rtc).save_state(),
            reset_control: self.reset_control.load(std::sync::atomic::Ordering::SeqCst),
            pci_address: lock(&self.pci).save_state(),
            marker_counts: self.marker_counts(),
            acpi: self.acpi,
            virtio: transports(self)
                .iter()
                .map(|t| lock(t).save_state())
                .collect(),
        }
    }

    /// Loads `state` into devices made for the same VM, before any vCPU
    /// runs.
    pub fn restore_state(&self, state: &DevicesState) -> Result<(), DevicesRestoreError> {
        {
            let mut serial = lock(&self.serial);
            let trigger = EventFdTrigger(
                serial
                    .interrupt_evt()
                    .0
                    .try_clone()
                    .map_err(DevicesRestoreError::EventFd)?,
            );
            let out = serial.writer().clone();
            *serial = Serial::from_state(&(&state.serial).into(), trigger, NoEvents, out)
                .map_err(|e| DevicesRestoreError::Serial(format!("{e:?}")))?;
        }
        if !lock(&self.rtc).restore_state(&state.rtc) {
            return Err(DevicesRestoreError::Rtc);
        }
        self.reset_control
            .store(state.reset_control, std::sync::atomic::Ordering::SeqCst);
        lock(&self.pci).restore_state(state.pci_address);
        *lock(&self.counts) = state.marker_counts.clone();
        let here = transports(self);
        if here.len() != state.virtio.len() {
            return Err(DevicesRestoreError::VirtioCount {
                saved: state.virtio.len(),
                here: here.len(),
            });
        }
        for (t, s) in here.iter().zip(&state.virtio) {
            lock(t).restore_state(s)?;
        }
        Ok(())
    }
}

impl Devices {
    /// Installs the snapshot point the vCPU threads meet at (once).
    pub fn set_snapshot_point(&self, point: std::sync::Arc<crate::snapshot::SnapshotPoint>) {
        let _ = self.snapshot_point.set(point);
    }

    /// The snapshot point, when `--snapshot-at` asked for one.
    pub fn snapshot_point(&self) -> Option<&std::sync::Arc<crate::snapshot::SnapshotPoint>> {
        self.snapshot_point.get()
    }
}
