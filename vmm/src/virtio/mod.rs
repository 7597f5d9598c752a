//! virtio devices over the virtio-mmio transport (virtio 1.x, register
//! layout version 2), described to the guest in the ACPI DSDT.
//!
//! - [`mmio`]: the transport, one register window per device: feature
//!   negotiation, the device status state machine, queue set-up, the
//!   interrupt status and config space;
//! - [`block`], [`rng`], [`console`]: the devices, each parsing a guest
//!   descriptor chain once into a typed request (typed errors);
//! - [`worker`]: the device thread, an epoll loop on every queue's
//!   notification eventfd (a `KVM_IOEVENTFD` on the `QueueNotify`
//!   register, matched per queue) that serves requests off the vCPU
//!   threads and interrupts the guest through a `KVM_IRQFD`;
//! - [`report`]: what each device did, for the timeline.
//!
//! The rings are rust-vmm's `virtio-queue`, the constants
//! `virtio-bindings`, and every guest access goes through `vm-memory`: a
//! guest that hands over an address outside its memory, a looping chain or
//! a buffer of the wrong direction gets an error status on that request,
//! and one that corrupts a ring gets its device marked as needing a reset
//! (`DEVICE_NEEDS_RESET`); the VMM goes on.

pub mod block;
pub mod console;
pub mod mmio;
pub mod report;
pub mod rng;
pub mod testing;
pub mod worker;

use std::sync::{Arc, Mutex, MutexGuard};

use virtio_queue::{DescriptorChain, Queue, QueueOwnedT, QueueT};
use vm_memory::GuestMemoryMmap;

use crate::layout;

pub use block::{DiskError, DiskImage, DiskSpec};
pub use mmio::MmioTransport;
pub use report::VirtioDeviceDoc;

/// `VIRTIO_F_VERSION_1`: every device is a modern one.
pub const FEATURE_VERSION_1: u64 = 1 << virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;

/// The virtio devices a run gives its guest.
#[derive(Debug, Default)]
pub struct VirtioOptions {
    /// The disks (`--disk`), opened, checked and locked.
    pub disks: Vec<DiskImage>,
    /// A virtio-rng device (`--rng`).
    pub rng: bool,
    /// A virtio console fed into the console sink (`--console virtio`).
    pub console: bool,
}

impl VirtioOptions {
    /// How many devices these options make.
    pub fn count(&self) -> usize {
        self.disks.len() + usize::from(self.rng) + usize::from(self.console)
    }
}

/// What kind of device a transport carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Block,
    Rng,
    Console,
}

impl DeviceKind {
    /// The virtio device id.
    pub fn id(self) -> u32 {
        use virtio_bindings::virtio_ids::{VIRTIO_ID_BLOCK, VIRTIO_ID_CONSOLE, VIRTIO_ID_RNG};
        match self {
            DeviceKind::Block => VIRTIO_ID_BLOCK,
            DeviceKind::Rng => VIRTIO_ID_RNG,
            DeviceKind::Console => VIRTIO_ID_CONSOLE,
        }
    }

    /// As the timeline names it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Block => "block",
            DeviceKind::Rng => "rng",
            DeviceKind::Console => "console",
        }
    }
}

/// A ring the guest corrupted: its device stops serving it until the
/// guest resets the device.
#[derive(Debug, thiserror::Error)]
pub enum QueueFault {
    /// The available ring could not be read or its index is impossible.
    #[error("available ring of queue {queue}: {source}")]
    Avail {
        queue: usize,
        #[source]
        source: virtio_queue::Error,
    },
    /// A used element could not be written (a head index out of range, a
    /// used ring outside guest memory).
    #[error("used ring of queue {queue}: {source}")]
    Used {
        queue: usize,
        #[source]
        source: virtio_queue::Error,
    },
}

/// A device behind a virtio-mmio transport. The transport owns the queues
/// and calls [`VirtioDevice::process_queue`] on the device thread when the
/// guest notifies one.
pub trait VirtioDevice: Send {
    fn kind(&self) -> DeviceKind;
    /// The features the device offers (with [`FEATURE_VERSION_1`]).
    fn features(&self) -> u64;
    /// The largest size of each queue.
    fn queue_max_sizes(&self) -> &[u16];
    /// Reads the device's config space at `offset`; bytes past its end
    /// read as zero.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Serves the available buffers of queue `index`; returns how many it
    /// put in the used ring.
    fn process_queue(
        &mut self,
        index: usize,
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<u32, QueueFault>;
    /// The device's own figures for the timeline (a disk's I/O split by
    /// `phases`).
    fn report(&self, doc: &mut VirtioDeviceDoc, phases: &[crate::timeline::TimelinePhase]);
}

/// Takes every available chain of `queue`, hands each to `serve` (which
/// returns the bytes it wrote into the chain's buffers) and puts it in the
/// used ring; loops until the ring is empty. Ring corruption is a
/// [`QueueFault`].
pub fn drain_queue<F>(
    index: usize,
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    mut serve: F,
) -> Result<u32, QueueFault>
where
    F: FnMut(DescriptorChain<&GuestMemoryMmap>) -> u32,
{
    let mut used = 0u32;
    loop {
        let chains: Vec<_> = queue
            .iter(mem)
            .map_err(|source| QueueFault::Avail {
                queue: index,
                source,
            })?
            .collect();
        if chains.is_empty() {
            return Ok(used);
        }
        for chain in chains {
            let head = chain.head_index();
            let len = serve(chain);
            queue
                .add_used(mem, head, len)
                .map_err(|source| QueueFault::Used {
                    queue: index,
                    source,
                })?;
            used = used.saturating_add(1);
        }
    }
}

/// Where device `slot` sits: its register window and its interrupt line.
pub fn slot_window(slot: usize) -> (u64, u32) {
    (
        layout::VIRTIO_MMIO_START + slot as u64 * layout::VIRTIO_MMIO_SIZE,
        layout::VIRTIO_IRQ_BASE + slot as u32,
    )
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
