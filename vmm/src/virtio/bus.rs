//! The virtio-mmio bus: device `n`'s register window and interrupt line
//! ([`MmioWindow::of_slot`]), and every device of a VM by window
//! ([`VirtioDevices`]), which the vCPU threads' MMIO exits and the device
//! thread reach through [`lock`].

use std::sync::{Arc, Mutex, MutexGuard};

use super::mmio::MmioTransport;
use super::report::VirtioDeviceDoc;
use crate::layout;

/// Where a virtio-mmio device sits: its register window and its interrupt
/// line (as the DSDT describes it to the guest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioWindow {
    pub base: u64,
    pub size: u64,
    pub irq: u32,
}

impl MmioWindow {
    /// The window of the device in slot `slot`: 4 KiB windows from
    /// [`layout::VIRTIO_MMIO_START`], I/O APIC lines from
    /// [`layout::VIRTIO_IRQ_BASE`].
    pub fn of_slot(slot: usize) -> Self {
        Self {
            base: layout::VIRTIO_MMIO_START + slot as u64 * layout::VIRTIO_MMIO_SIZE,
            size: layout::VIRTIO_MMIO_SIZE,
            irq: layout::VIRTIO_IRQ_BASE + slot as u32,
        }
    }
}

/// Locks a device's transport; a panicked holder leaves it usable.
pub(crate) fn lock(m: &Mutex<MmioTransport>) -> MutexGuard<'_, MmioTransport> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every virtio device of a VM, by register window.
#[derive(Default)]
pub struct VirtioDevices {
    transports: Vec<Arc<Mutex<MmioTransport>>>,
}

impl VirtioDevices {
    pub fn new(transports: Vec<Arc<Mutex<MmioTransport>>>) -> Self {
        Self { transports }
    }

    pub fn transports(&self) -> &[Arc<Mutex<MmioTransport>>] {
        &self.transports
    }

    /// The device whose window holds `addr`, and the offset in it.
    fn at(&self, addr: u64) -> Option<(&Arc<Mutex<MmioTransport>>, u64)> {
        let off = addr.checked_sub(layout::VIRTIO_MMIO_START)?;
        let slot = usize::try_from(off / layout::VIRTIO_MMIO_SIZE).ok()?;
        self.transports
            .get(slot)
            .map(|t| (t, off % layout::VIRTIO_MMIO_SIZE))
    }

    /// A guest read in the virtio window; false when no device is there.
    pub fn mmio_read(&self, addr: u64, data: &mut [u8]) -> bool {
        match self.at(addr) {
            Some((t, off)) => {
                lock(t).read(off, data);
                true
            }
            None => false,
        }
    }

    /// A guest write in the virtio window; false when no device is there.
    pub fn mmio_write(&self, addr: u64, data: &[u8]) -> bool {
        match self.at(addr) {
            Some((t, off)) => {
                lock(t).write(off, data);
                true
            }
            None => false,
        }
    }

    /// What every device did, for the timeline.
    pub fn reports(&self, phases: &[crate::timeline::TimelinePhase]) -> Vec<VirtioDeviceDoc> {
        self.transports
            .iter()
            .map(|t| lock(t).report(phases))
            .collect()
    }
}
