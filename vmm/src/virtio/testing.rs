//! A guest's side of a split virtqueue, for tests and the fuzz target:
//! descriptors, the available ring and the used ring laid out in a small
//! guest memory, and the transport driven through its registers as a
//! driver would.

use std::sync::Arc;

use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_ACKNOWLEDGE, VIRTIO_CONFIG_S_DRIVER, VIRTIO_CONFIG_S_DRIVER_OK,
    VIRTIO_CONFIG_S_FEATURES_OK,
};
use virtio_bindings::virtio_mmio::*;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

use super::mmio::{Interrupt, MmioTransport};
use super::VirtioDevice;

/// Guest memory of the test rings: 1 MiB from 0.
pub const MEM_SIZE: usize = 1 << 20;
/// Where queue `q`'s descriptor table, available and used rings go.
pub fn desc_table(q: usize) -> u64 {
    0x1000 + q as u64 * 0x4000
}
pub fn avail_ring(q: usize) -> u64 {
    desc_table(q) + 0x1000
}
pub fn used_ring(q: usize) -> u64 {
    desc_table(q) + 0x2000
}
/// Where test buffers may go (after the rings of four queues).
pub const BUFFERS: u64 = 0x2_0000;

/// A small guest memory.
pub fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).expect("test memory")
}

/// Descriptor flags.
pub const NEXT: u16 = VRING_DESC_F_NEXT as u16;
pub const WRITE: u16 = VRING_DESC_F_WRITE as u16;

/// Writes descriptor `i` of queue `q`.
pub fn write_desc(
    mem: &GuestMemoryMmap,
    q: usize,
    i: u16,
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
) {
    let at = GuestAddress(desc_table(q) + u64::from(i) * 16);
    mem.write_obj(addr, at).unwrap();
    mem.write_obj(len, GuestAddress(at.0 + 8)).unwrap();
    mem.write_obj(flags, GuestAddress(at.0 + 12)).unwrap();
    mem.write_obj(next, GuestAddress(at.0 + 14)).unwrap();
}

/// Makes `heads` available on queue `q` (after `already` earlier ones).
pub fn publish(mem: &GuestMemoryMmap, q: usize, size: u16, already: u16, heads: &[u16]) {
    let mut idx = already;
    for &h in heads {
        let slot = u64::from(idx % size);
        mem.write_obj(h, GuestAddress(avail_ring(q) + 4 + slot * 2))
            .unwrap();
        idx = idx.wrapping_add(1);
    }
    mem.write_obj(idx, GuestAddress(avail_ring(q) + 2)).unwrap();
}

/// The used ring's index of queue `q`.
pub fn used_idx(mem: &GuestMemoryMmap, q: usize) -> u16 {
    mem.read_obj(GuestAddress(used_ring(q) + 2)).unwrap()
}

/// Used element `n` of queue `q`: (id, len).
pub fn used_elem(mem: &GuestMemoryMmap, q: usize, size: u16, n: u16) -> (u32, u32) {
    let at = used_ring(q) + 4 + u64::from(n % size) * 8;
    (
        mem.read_obj(GuestAddress(at)).unwrap(),
        mem.read_obj(GuestAddress(at + 4)).unwrap(),
    )
}

/// A transport for `device` over `mem`, with an interrupt eventfd the
/// test can read.
pub fn transport(device: Box<dyn VirtioDevice>, mem: &GuestMemoryMmap) -> MmioTransport {
    let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    MmioTransport::new(
        "test".into(),
        device,
        mem.clone(),
        Arc::new(Interrupt::new(irq)),
        crate::layout::VIRTIO_MMIO_START,
        crate::layout::VIRTIO_IRQ_BASE,
    )
    .expect("transport")
}

pub fn write_reg(t: &mut MmioTransport, reg: u32, v: u32) {
    t.write(u64::from(reg), &v.to_le_bytes());
}

pub fn read_reg(t: &mut MmioTransport, reg: u32) -> u32 {
    let mut b = [0u8; 4];
    t.read(u64::from(reg), &mut b);
    u32::from_le_bytes(b)
}

/// Runs a driver's initialisation: status, the features given, each
/// queue at its test address with `size` entries, DRIVER_OK. Returns the
/// status register after.
pub fn initialise(t: &mut MmioTransport, features: u64, queues: usize, size: u16) -> u32 {
    write_reg(t, VIRTIO_MMIO_STATUS, 0);
    write_reg(t, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE);
    let s = VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER;
    write_reg(t, VIRTIO_MMIO_STATUS, s);
    for sel in 0..2u32 {
        write_reg(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, sel);
        write_reg(
            t,
            VIRTIO_MMIO_DRIVER_FEATURES,
            (features >> (32 * sel)) as u32,
        );
    }
    write_reg(t, VIRTIO_MMIO_STATUS, s | VIRTIO_CONFIG_S_FEATURES_OK);
    for q in 0..queues {
        write_reg(t, VIRTIO_MMIO_QUEUE_SEL, q as u32);
        write_reg(t, VIRTIO_MMIO_QUEUE_NUM, u32::from(size));
        write_reg(t, VIRTIO_MMIO_QUEUE_DESC_LOW, desc_table(q) as u32);
        write_reg(t, VIRTIO_MMIO_QUEUE_DESC_HIGH, 0);
        write_reg(t, VIRTIO_MMIO_QUEUE_AVAIL_LOW, avail_ring(q) as u32);
        write_reg(t, VIRTIO_MMIO_QUEUE_AVAIL_HIGH, 0);
        write_reg(t, VIRTIO_MMIO_QUEUE_USED_LOW, used_ring(q) as u32);
        write_reg(t, VIRTIO_MMIO_QUEUE_USED_HIGH, 0);
        write_reg(t, VIRTIO_MMIO_QUEUE_READY, 1);
    }
    let s = read_reg(t, VIRTIO_MMIO_STATUS);
    write_reg(t, VIRTIO_MMIO_STATUS, s | VIRTIO_CONFIG_S_DRIVER_OK);
    read_reg(t, VIRTIO_MMIO_STATUS)
}
