//! The virtio-mmio transport, register layout version 2 (virtio 1.x,
//! section 4.2.2): one 4 KiB window per device, registers up to 0x100,
//! the device's config space after.
//!
//! The device status follows the driver's initialisation sequence
//! (ACKNOWLEDGE, DRIVER, FEATURES_OK, DRIVER_OK); a driver that asks for
//! features the device does not offer, or for a legacy device, never gets
//! FEATURES_OK; queue registers are writable only between FEATURES_OK and
//! DRIVER_OK; writing 0 resets the device. A ring the guest corrupted
//! sets DEVICE_NEEDS_RESET and a config-change interrupt, and the device
//! serves nothing until the guest resets it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_ACKNOWLEDGE, VIRTIO_CONFIG_S_DRIVER, VIRTIO_CONFIG_S_DRIVER_OK,
    VIRTIO_CONFIG_S_FAILED, VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_CONFIG_S_NEEDS_RESET,
};
use virtio_bindings::virtio_mmio::*;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::eventfd::EventFd;

use super::report::VirtioDeviceDoc;
use super::{VirtioDevice, FEATURE_VERSION_1};
use crate::timeline::Recorder;

/// "virt", little endian.
pub const MAGIC: u32 = 0x7472_6976;
/// The modern (non-legacy) register layout.
pub const VERSION: u32 = 2;
/// The vendor id the guest sees ("BTSC" would not fit the convention of
/// a PCI vendor id; 0 is what QEMU's and Firecracker's devices leave out).
pub const VENDOR_ID: u32 = 0;

/// The interrupt line of a device: the status bits the guest reads at
/// `InterruptStatus`, and the irqfd KVM turns into an edge on the I/O
/// APIC.
pub struct Interrupt {
    status: AtomicU32,
    irqfd: EventFd,
    raised: AtomicU64,
}

impl Interrupt {
    pub fn new(irqfd: EventFd) -> Self {
        Self {
            status: AtomicU32::new(0),
            irqfd,
            raised: AtomicU64::new(0),
        }
    }

    /// Sets `bits` in the interrupt status and interrupts the guest.
    pub fn raise(&self, bits: u32) {
        self.status.fetch_or(bits, Ordering::SeqCst);
        self.raised.fetch_add(1, Ordering::Relaxed);
        // A full eventfd counter still has the interrupt pending.
        let _ = self.irqfd.write(1);
    }

    pub fn status(&self) -> u32 {
        self.status.load(Ordering::SeqCst)
    }

    fn ack(&self, bits: u32) {
        self.status.fetch_and(!bits, Ordering::SeqCst);
    }

    fn clear(&self) {
        self.status.store(0, Ordering::SeqCst);
    }

    /// The eventfd registered with KVM as this device's irqfd.
    pub fn irqfd(&self) -> &EventFd {
        &self.irqfd
    }
}

/// One device's register window.
pub struct MmioTransport {
    name: String,
    device: Box<dyn VirtioDevice>,
    mem: GuestMemoryMmap,
    queues: Vec<Queue>,
    /// One eventfd per queue: KVM signals it on a `QueueNotify` write of
    /// the queue's index (ioeventfd); the device thread waits on them.
    queue_evts: Vec<EventFd>,
    interrupt: Arc<Interrupt>,
    recorder: Option<Arc<Recorder>>,
    mmio_start: u64,
    irq: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    queue_sel: u32,
    status: u32,
    config_generation: u32,
    /// Why the device needs a reset, while it does.
    broken: Option<String>,
    doc: VirtioDeviceDoc,
}

impl MmioTransport {
    /// A transport for `device`, named `name` (`virtio-blk0`), at
    /// `mmio_start` with interrupt line `irq`.
    pub fn new(
        name: String,
        device: Box<dyn VirtioDevice>,
        mem: GuestMemoryMmap,
        interrupt: Arc<Interrupt>,
        mmio_start: u64,
        irq: u32,
    ) -> std::io::Result<Self> {
        let mut queues = Vec::new();
        let mut queue_evts = Vec::new();
        for &max in device.queue_max_sizes() {
            queues.push(Queue::new(max).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?);
            queue_evts.push(EventFd::new(libc::EFD_NONBLOCK)?);
        }
        let doc = VirtioDeviceDoc {
            name: name.clone(),
            kind: device.kind().as_str().to_string(),
            mmio_start,
            mmio_end: mmio_start + crate::layout::VIRTIO_MMIO_SIZE,
            irq,
            ..Default::default()
        };
        Ok(Self {
            name,
            device,
            mem,
            queues,
            queue_evts,
            interrupt,
            recorder: None,
            mmio_start,
            irq,
            device_features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
            queue_sel: 0,
            status: 0,
            config_generation: 0,
            broken: None,
            doc,
        })
    }

    /// Marks (driver ready, device broken) go to `recorder`.
    pub fn with_recorder(mut self, recorder: Arc<Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn mmio_start(&self) -> u64 {
        self.mmio_start
    }

    pub fn irq(&self) -> u32 {
        self.irq
    }

    pub fn queue_evts(&self) -> &[EventFd] {
        &self.queue_evts
    }

    pub fn interrupt(&self) -> &Arc<Interrupt> {
        &self.interrupt
    }

    /// The device status register.
    pub fn status(&self) -> u32 {
        self.status
    }

    /// Why the device needs a reset, while it does.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    fn has(&self, bits: u32) -> bool {
        self.status & bits == bits
    }

    /// Whether the device serves its queues: the driver is ready and the
    /// device is not waiting for a reset.
    pub fn live(&self) -> bool {
        self.has(VIRTIO_CONFIG_S_DRIVER_OK)
            && self.status & (VIRTIO_CONFIG_S_NEEDS_RESET | VIRTIO_CONFIG_S_FAILED) == 0
    }

    /// Queue registers may change between FEATURES_OK and DRIVER_OK.
    fn queue_config_open(&self) -> bool {
        self.has(VIRTIO_CONFIG_S_FEATURES_OK)
            && self.status & (VIRTIO_CONFIG_S_DRIVER_OK | VIRTIO_CONFIG_S_FAILED) == 0
    }

    fn selected_queue(&mut self) -> Option<&mut Queue> {
        self.queues.get_mut(self.queue_sel as usize)
    }

    fn mark(&self, what: &str) {
        if let Some(r) = &self.recorder {
            r.vmm(&format!("vmm: {} {what}", self.name));
        }
    }

    /// A guest read at `offset` in the window. Registers are 32-bit: a
    /// read of another width there reads zeros.
    pub fn read(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if offset >= u64::from(VIRTIO_MMIO_CONFIG) {
            self.device
                .read_config(offset - u64::from(VIRTIO_MMIO_CONFIG), data);
            return;
        }
        if data.len() != 4 {
            return;
        }
        let v = match offset as u32 {
            VIRTIO_MMIO_MAGIC_VALUE => MAGIC,
            VIRTIO_MMIO_VERSION => VERSION,
            VIRTIO_MMIO_DEVICE_ID => self.device.kind().id(),
            VIRTIO_MMIO_VENDOR_ID => VENDOR_ID,
            VIRTIO_MMIO_DEVICE_FEATURES => match self.device_features_sel {
                0 => self.device.features() as u32,
                1 => (self.device.features() >> 32) as u32,
                _ => 0,
            },
            VIRTIO_MMIO_QUEUE_NUM_MAX => self
                .queues
                .get(self.queue_sel as usize)
                .map_or(0, |q| u32::from(q.max_size())),
            VIRTIO_MMIO_QUEUE_READY => self
                .queues
                .get(self.queue_sel as usize)
                .map_or(0, |q| u32::from(q.ready())),
            VIRTIO_MMIO_INTERRUPT_STATUS => self.interrupt.status(),
            VIRTIO_MMIO_STATUS => self.status,
            VIRTIO_MMIO_CONFIG_GENERATION => self.config_generation,
            _ => 0,
        };
        data.copy_from_slice(&v.to_le_bytes());
    }

    /// A guest write at `offset` in the window. Writes of another width
    /// than 32 bits, to read-only registers, or out of sequence are
    /// ignored, as the specification lets a device do.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        if offset >= u64::from(VIRTIO_MMIO_CONFIG) {
            // No device here has a writable config field.
            return;
        }
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            return;
        };
        let v = u32::from_le_bytes(bytes);
        match offset as u32 {
            VIRTIO_MMIO_DEVICE_FEATURES_SEL => self.device_features_sel = v,
            VIRTIO_MMIO_DRIVER_FEATURES_SEL => self.driver_features_sel = v,
            VIRTIO_MMIO_DRIVER_FEATURES => self.write_driver_features(v),
            VIRTIO_MMIO_QUEUE_SEL => self.queue_sel = v,
            VIRTIO_MMIO_QUEUE_NUM => self.write_queue(|q| q.set_size(v as u16)),
            VIRTIO_MMIO_QUEUE_READY => self.write_queue(|q| q.set_ready(v == 1)),
            VIRTIO_MMIO_QUEUE_DESC_LOW => {
                self.write_queue(|q| q.set_desc_table_address(Some(v), None))
            }
            VIRTIO_MMIO_QUEUE_DESC_HIGH => {
                self.write_queue(|q| q.set_desc_table_address(None, Some(v)))
            }
            VIRTIO_MMIO_QUEUE_AVAIL_LOW => {
                self.write_queue(|q| q.set_avail_ring_address(Some(v), None))
            }
            VIRTIO_MMIO_QUEUE_AVAIL_HIGH => {
                self.write_queue(|q| q.set_avail_ring_address(None, Some(v)))
            }
            VIRTIO_MMIO_QUEUE_USED_LOW => {
                self.write_queue(|q| q.set_used_ring_address(Some(v), None))
            }
            VIRTIO_MMIO_QUEUE_USED_HIGH => {
                self.write_queue(|q| q.set_used_ring_address(None, Some(v)))
            }
            // Reached only where KVM took no ioeventfd: hand the
            // notification to the device thread the same way.
            VIRTIO_MMIO_QUEUE_NOTIFY => {
                if let Some(e) = self.queue_evts.get(v as usize) {
                    let _ = e.write(1);
                }
            }
            VIRTIO_MMIO_INTERRUPT_ACK => self.interrupt.ack(v),
            VIRTIO_MMIO_STATUS => self.write_status(v),
            _ => {}
        }
    }

    fn write_driver_features(&mut self, v: u32) {
        if !self.has(VIRTIO_CONFIG_S_DRIVER) || self.has(VIRTIO_CONFIG_S_FEATURES_OK) {
            return;
        }
        match self.driver_features_sel {
            0 => self.driver_features = (self.driver_features & !0xffff_ffff) | u64::from(v),
            1 => self.driver_features = (self.driver_features & 0xffff_ffff) | (u64::from(v) << 32),
            _ => {}
        }
    }

    fn write_queue(&mut self, f: impl FnOnce(&mut Queue)) {
        if !self.queue_config_open() {
            return;
        }
        if let Some(q) = self.selected_queue() {
            f(q);
        }
    }

    fn write_status(&mut self, v: u32) {
        if v == 0 {
            self.reset();
            return;
        }
        // Bits are only ever added, and NEEDS_RESET is the device's.
        let v = v & !VIRTIO_CONFIG_S_NEEDS_RESET;
        if v & self.status != self.status & !VIRTIO_CONFIG_S_NEEDS_RESET {
            return;
        }
        let added = v & !self.status;
        if added & VIRTIO_CONFIG_S_FEATURES_OK != 0 && !self.features_acceptable() {
            // The driver reads the status back and sees FEATURES_OK unset.
            let v = v & !VIRTIO_CONFIG_S_FEATURES_OK;
            self.status = v | (self.status & VIRTIO_CONFIG_S_NEEDS_RESET);
            return;
        }
        if added & VIRTIO_CONFIG_S_DRIVER_OK != 0 && !self.has(VIRTIO_CONFIG_S_FEATURES_OK) {
            return;
        }
        if added & (VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER) != 0
            && v & VIRTIO_CONFIG_S_ACKNOWLEDGE == 0
        {
            return;
        }
        self.status = v | (self.status & VIRTIO_CONFIG_S_NEEDS_RESET);
        if added & VIRTIO_CONFIG_S_FAILED != 0 {
            self.mark("driver gave up (FAILED)");
        }
        if added & VIRTIO_CONFIG_S_DRIVER_OK != 0 {
            self.activate();
        }
    }

    /// The driver accepts only features the device offers, and the modern
    /// interface.
    fn features_acceptable(&self) -> bool {
        self.driver_features & !self.device.features() == 0
            && self.driver_features & FEATURE_VERSION_1 != 0
    }

    /// DRIVER_OK: every queue the driver made ready must lie in guest
    /// memory.
    fn activate(&mut self) {
        let bad = self
            .queues
            .iter()
            .position(|q| q.ready() && !q.is_valid(&self.mem));
        self.doc.activations += 1;
        if self.doc.driver_ready_ns.is_none() {
            self.doc.driver_ready_ns = self.recorder.as_ref().map(|r| r.clock().now_ns());
        }
        match bad {
            Some(i) => self.set_broken(format!(
                "queue {i} set up outside guest memory or misaligned"
            )),
            None => {
                self.mark("driver ready");
                // Buffers made available before DRIVER_OK are served now.
                for e in &self.queue_evts {
                    let _ = e.write(1);
                }
            }
        }
    }

    fn reset(&mut self) {
        if self.status != 0 {
            self.doc.resets += 1;
        }
        self.status = 0;
        self.driver_features = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.queue_sel = 0;
        self.broken = None;
        for q in &mut self.queues {
            q.reset();
        }
        self.interrupt.clear();
    }

    /// Sets DEVICE_NEEDS_RESET and tells the driver through a
    /// configuration-change interrupt; the timeline gets a mark.
    pub fn set_broken(&mut self, reason: String) {
        self.status |= VIRTIO_CONFIG_S_NEEDS_RESET;
        self.mark(&format!("device broken: {reason}"));
        if self.doc.broken.len() < 16 {
            self.doc.broken.push(reason.clone());
        }
        self.broken = Some(reason);
        self.config_generation = self.config_generation.wrapping_add(1);
        self.interrupt.raise(VIRTIO_MMIO_INT_CONFIG);
    }

    /// Serves queue `index` (on the device thread, after a notification):
    /// nothing unless the device is live and the queue ready.
    pub fn process_queue(&mut self, index: usize) {
        self.doc.notifications += 1;
        if !self.live() {
            return;
        }
        let Some(queue) = self.queues.get_mut(index) else {
            return;
        };
        if !queue.ready() {
            return;
        }
        match self.device.process_queue(index, queue, &self.mem) {
            Ok(0) => {}
            Ok(_) => match queue.needs_notification(&self.mem) {
                Ok(true) => self.interrupt.raise(VIRTIO_MMIO_INT_VRING),
                Ok(false) => {}
                Err(e) => self.set_broken(format!("queue {index}: {e}")),
            },
            Err(e) => self.set_broken(e.to_string()),
        }
    }

    /// What the device did.
    pub fn report(&self, phases: &[crate::timeline::TimelinePhase]) -> VirtioDeviceDoc {
        let mut doc = self.doc.clone();
        doc.interrupts = self.interrupt.raised.load(Ordering::Relaxed);
        doc.status = self.status;
        self.device.report(&mut doc, phases);
        doc
    }
}

mod persist;
pub use persist::{TransportRestoreError, TransportState, VirtqueueState};

#[cfg(test)]
mod tests;
