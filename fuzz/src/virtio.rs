//! The virtio devices as a hostile guest drives them: a transport set up
//! through its registers with fuzzed features, queue sizes and ring
//! addresses (in guest memory or not), guest memory holding fuzzed
//! descriptor tables and rings (loops, indexes past the table, buffers
//! outside memory or of the wrong direction, impossible available
//! indexes), then notifications and register accesses in any order, for
//! a virtio-blk disk (writable or read-only), the rng and the console.
//!
//! Input layout: byte 0 picks the device (bits 0-1) and whether the disk
//! is read-only (bit 2); bytes 1-8 the driver features; bytes 9-10 the
//! queue size; byte 11 how the rings are placed; bytes 12-15 an operation
//! count; then that many 6-byte operations (kind, register or queue,
//! value); what remains is copied into guest memory, piece by piece, over
//! [`PIECES`]: queue 0's descriptor table and available ring, queue 1's,
//! a page for request headers, and the start of the buffer area.

use std::sync::{Arc, Mutex};

use bootscope_vmm::console::{ConsoleSink, MilestonePattern};
use bootscope_vmm::timeline::{Clock, Recorder};
use bootscope_vmm::virtio::block::Block;
use bootscope_vmm::virtio::console::Console;
use bootscope_vmm::virtio::rng::Rng;
use bootscope_vmm::virtio::testing::{self, avail_ring};
use bootscope_vmm::virtio::{DiskImage, DiskSpec, VirtioDevice};
use vm_memory::{Bytes, GuestAddress};

use crate::memfile::MemFile;

/// Where the input's memory bytes go (guest address, length), in order.
pub const PIECES: [(u64, usize); 6] = [
    (0x1000, 0x100),
    (0x2000, 0x40),
    (0x5000, 0x100),
    (0x6000, 0x40),
    (0x1800, 0x800),
    (0x2_0000, 0x1000),
];
/// Most operations run.
const MAX_OPS: usize = 256;
/// The disk's size: 16 sectors.
const DISK_SECTORS: u64 = 16;

fn u16_at(d: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([
        d.get(i).copied().unwrap_or(0),
        d.get(i + 1).copied().unwrap_or(0),
    ])
}

fn u32_at(d: &[u8], i: usize) -> u32 {
    u32::from(u16_at(d, i)) | u32::from(u16_at(d, i + 2)) << 16
}

fn u64_at(d: &[u8], i: usize) -> u64 {
    u64::from(u32_at(d, i)) | u64::from(u32_at(d, i + 4)) << 32
}

/// A console that keeps nothing.
fn sink() -> Arc<Mutex<ConsoleSink>> {
    let recorder = Arc::new(Recorder::new(Clock::start()));
    Arc::new(Mutex::new(ConsoleSink::new(
        Box::new(std::io::sink()),
        MilestonePattern::defaults(),
        recorder,
    )))
}

fn device(kind: u8, readonly: bool) -> Option<(Box<dyn VirtioDevice>, MemFile)> {
    let image = MemFile::new(&[0x5a; (DISK_SECTORS * 512) as usize]);
    let d: Box<dyn VirtioDevice> = match kind & 3 {
        0 | 3 => Box::new(Block::new(
            DiskImage::open(&DiskSpec {
                path: image.path().to_path_buf(),
                readonly,
            })
            .ok()?,
            Clock::start(),
        )),
        1 => Box::new(Rng::default()),
        _ => Box::new(Console::new(sink())),
    };
    Some((d, image))
}

/// The fuzz target.
pub fn queues_and_requests(data: &[u8]) {
    let kind = data.first().copied().unwrap_or(0);
    let readonly = kind & 4 != 0;
    let Some((dev, image)) = device(kind, readonly) else {
        return;
    };
    let before = std::fs::read(image.path()).unwrap_or_default();
    let queues = dev.queue_max_sizes().len();
    let mem = testing::memory();
    let mut t = testing::transport(dev, &mem);
    let features = u64_at(data, 1);
    let size = u16_at(data, 9);
    let placement = data.get(11).copied().unwrap_or(0);
    let ops = (u32_at(data, 12) as usize).min(MAX_OPS);
    let body = data.get(16..).unwrap_or(&[]);
    let (rest, mut memory) = body.split_at(body.len().min(ops * 6));
    for (addr, len) in PIECES {
        let (piece, more) = memory.split_at(memory.len().min(len));
        let _ = mem.write_slice(piece, GuestAddress(addr));
        memory = more;
    }
    if placement & 1 == 0 {
        testing::initialise(&mut t, features, queues, size);
    } else {
        // Rings anywhere, in guest memory or not.
        for (reg, v) in [
            (0x70, 0),
            (0x70, 1),
            (0x70, 3),
            (0x24, 0),
            (0x20, features as u32),
            (0x24, 1),
            (0x20, (features >> 32) as u32),
            (0x70, 0x0b),
        ] {
            testing::write_reg(&mut t, reg, v);
        }
        for q in 0..queues as u32 {
            let base = u64_at(data, 16 + 8 * q as usize);
            for (reg, v) in [
                (0x30, q),
                (0x38, u32::from(size)),
                (0x80, base as u32),
                (0x84, (base >> 32) as u32),
                (0x90, base.wrapping_add(0x1000) as u32),
                (0xa0, base.wrapping_add(0x2000) as u32),
                (0x44, 1),
            ] {
                testing::write_reg(&mut t, reg, v);
            }
        }
        testing::write_reg(&mut t, 0x70, 0x0f);
    }
    for op in rest.chunks_exact(6).take(ops) {
        let v = u32_at(op, 2);
        match op[0] % 4 {
            0 | 1 => t.process_queue(usize::from(op[1]) % (queues + 1)),
            2 => testing::write_reg(&mut t, u32::from(op[1]) * 4, v),
            _ => {
                let mut b = [0u8; 8];
                let width = 1usize << (op[1] % 4);
                t.read(u64::from(u16_at(op, 2)) % 0x1000, &mut b[..width]);
            }
        }
        // A guest that moves the available index on.
        if op[0] & 0x80 != 0 {
            let idx = u16_at(op, 4);
            let _ = mem.write_obj(idx, GuestAddress(avail_ring(0) + 2));
        }
    }
    let doc = t.report(&[]);
    if let Some(disk) = &doc.disk {
        // Every request counted once, and never a byte past the disk.
        assert!(disk.total.bytes_read <= disk.total.reads * DISK_SECTORS * 512);
        assert!(disk.total.bytes_written <= disk.total.writes * DISK_SECTORS * 512);
        assert!(disk.total.requests >= disk.total.reads + disk.total.writes);
        let after = std::fs::read(image.path()).unwrap_or_default();
        assert_eq!(after.len(), before.len(), "the image never grows");
        if readonly {
            assert_eq!(after, before, "a read-only image never changes");
            assert_eq!(disk.total.bytes_written, 0);
        }
    }
}
