//! virtio devices over the virtio-mmio transport (virtio 1.x, register
//! layout version 2), described to the guest in the ACPI DSDT. This module
//! holds the device contract ([`VirtioDevice`]); the rest is beside it:
//!
//! - [`config`]: which devices a run gives its guest, and their slots;
//! - [`bus`]: each slot's register window and interrupt line, and every
//!   device of a VM by window;
//! - [`mmio`]: the transport, one register window per device: feature
//!   negotiation, the device status state machine, queue set-up, the
//!   interrupt status and config space;
//! - [`chain`]: descriptor chains taken off a queue and checked, one error
//!   type and one tally of refused requests for every device;
//! - [`block`], [`rng`], [`console`]: the devices, each parsing a guest
//!   descriptor chain once into a typed request (typed errors);
//! - [`worker`]: the device thread, an epoll loop on every queue's
//!   notification eventfd (a `KVM_IOEVENTFD` on the `QueueNotify`
//!   register, matched per queue) that serves requests off the vCPU
//!   threads and interrupts the guest through a `KVM_IRQFD`;
//! - [`report`]: what each device did, for the timeline;
//! - `testing` (feature `testing`, and the crate's own tests): a guest's
//!   side of a virtqueue.
//!
//! The rings are rust-vmm's `virtio-queue`, the constants
//! `virtio-bindings`, and every guest access goes through `vm-memory`: a
//! guest that hands over an address outside its memory, a looping chain or
//! a buffer of the wrong direction gets an error status on that request,
//! and one that corrupts a ring gets its device marked as needing a reset
//! (`DEVICE_NEEDS_RESET`); the VMM goes on.

pub mod block;
pub mod bus;
pub mod chain;
pub mod config;
pub mod console;
pub mod mmio;
pub mod report;
pub mod rng;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod worker;

use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;

pub use block::{DiskError, DiskImage, DiskSpec};
pub use bus::{MmioWindow, VirtioDevices};
pub use config::{VirtioConfig, VirtioSlot};
pub use mmio::MmioTransport;
pub use report::VirtioDeviceDoc;

/// `VIRTIO_F_VERSION_1`: every device is a modern one.
pub const FEATURE_VERSION_1: u64 = 1 << virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;

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
