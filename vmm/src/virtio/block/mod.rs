//! virtio-blk over a raw image (`--disk PATH[,readonly]`): read, write,
//! flush and `GET_ID`, served on the device thread; `VIRTIO_BLK_F_RO` for
//! a read-only disk (whose writes fail), `VIRTIO_BLK_F_FLUSH` so the
//! guest's cache flushes reach the image (fdatasync), `VIRTIO_BLK_F_SEG_MAX`
//! so a request can carry many pages. Every request is counted, timed
//! (log2 histogram) and kept with its start time for the split by boot
//! phase.

mod checks;
pub mod image;
pub mod request;

use std::io::{Seek, SeekFrom};

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK,
    VIRTIO_BLK_S_UNSUPP,
};
use virtio_queue::Queue;
use vm_memory::{Bytes, GuestMemoryMmap};

use super::chain::{drain_queue, BadRequests};
use super::report::{DiskDoc, IoCounts, Log2Hist, PhaseIo, VirtioDeviceDoc};
use super::{DeviceKind, QueueFault, VirtioDevice, FEATURE_VERSION_1};
use crate::timeline::{Clock, TimelinePhase};
pub use image::{DiskError, DiskImage, DiskSpec, SECTOR_SIZE};
use request::{Request, RequestError, RequestKind};

/// The request queue's size.
pub const QUEUE_SIZE: u16 = 256;
/// Most segments in a request: the queue less the header and the status.
pub const SEG_MAX: u32 = QUEUE_SIZE as u32 - 2;
/// Requests kept with their start time for the phase split, per disk.
pub const MAX_RECORDS: usize = 1 << 20;

/// One request as kept for the phase split.
#[derive(Clone, Copy, Debug)]
struct Record {
    t_ns: u64,
    io: IoCounts,
}

/// A virtio-blk device.
pub struct Block {
    disk: DiskImage,
    serial: String,
    clock: Clock,
    queue_sizes: [u16; 1],
    total: IoCounts,
    latency: Log2Hist,
    records: Vec<Record>,
    unrecorded: u64,
    bad: BadRequests,
}

impl Block {
    pub fn new(disk: DiskImage, clock: Clock) -> Self {
        let serial = disk.serial();
        Self {
            disk,
            serial,
            clock,
            queue_sizes: [QUEUE_SIZE],
            total: IoCounts::default(),
            latency: Log2Hist::default(),
            records: Vec::new(),
            unrecorded: 0,
            bad: BadRequests::default(),
        }
    }

    fn capacity_sectors(&self) -> u64 {
        self.disk.size / SECTOR_SIZE
    }

    /// Executes a parsed request; returns the status and the bytes written
    /// into the guest's buffers before the status byte.
    fn execute(&mut self, req: &Request, mem: &GuestMemoryMmap, io: &mut IoCounts) -> (u32, u32) {
        let res: std::io::Result<u32> = match req.kind {
            RequestKind::Read => {
                io.reads += 1;
                self.read(req, mem)
                    .inspect(|_| io.bytes_read += req.data_len)
            }
            RequestKind::Write if self.disk.readonly => {
                io.writes += 1;
                return (VIRTIO_BLK_S_IOERR, 0);
            }
            RequestKind::Write => {
                io.writes += 1;
                self.write(req, mem)
                    .inspect(|_| io.bytes_written += req.data_len)
            }
            RequestKind::Flush => {
                io.flushes += 1;
                if self.disk.readonly {
                    Ok(0)
                } else {
                    self.disk.file.sync_data().map(|()| 0)
                }
            }
            RequestKind::GetId => {
                io.get_id += 1;
                let id = request::id_bytes(&self.serial);
                let mut left = &id[..];
                let mut written = 0u32;
                for s in &req.data {
                    let n = left.len().min(s.len as usize);
                    if mem.write_slice(&left[..n], s.addr).is_err() {
                        break;
                    }
                    left = &left[n..];
                    written += n as u32;
                }
                Ok(written)
            }
        };
        match res {
            Ok(n) => (VIRTIO_BLK_S_OK, n),
            Err(_) => (VIRTIO_BLK_S_IOERR, 0),
        }
    }

    fn read(&mut self, req: &Request, mem: &GuestMemoryMmap) -> std::io::Result<u32> {
        let file = &mut self.disk.file;
        file.seek(SeekFrom::Start(req.sector * SECTOR_SIZE))?;
        for s in &req.data {
            mem.read_exact_volatile_from(s.addr, file, s.len as usize)
                .map_err(std::io::Error::other)?;
        }
        Ok(req.data_len as u32)
    }

    fn write(&mut self, req: &Request, mem: &GuestMemoryMmap) -> std::io::Result<u32> {
        let file = &mut self.disk.file;
        file.seek(SeekFrom::Start(req.sector * SECTOR_SIZE))?;
        for s in &req.data {
            mem.write_all_volatile_to(s.addr, file, s.len as usize)
                .map_err(std::io::Error::other)?;
        }
        Ok(0)
    }

    /// Serves one chain; returns the bytes written into it.
    fn serve(
        &mut self,
        chain: virtio_queue::DescriptorChain<&GuestMemoryMmap>,
        mem: &GuestMemoryMmap,
        t0: u64,
    ) -> u32 {
        let parsed = request::parse(chain, mem, self.capacity_sectors());
        let mut io = IoCounts {
            requests: 1,
            ..Default::default()
        };
        let (status, len) = match &parsed.request {
            Ok(req) => self.execute(req, mem, &mut io),
            Err(e) => {
                self.bad.note(e);
                let status = match e {
                    RequestError::Unsupported(_) => VIRTIO_BLK_S_UNSUPP,
                    _ => VIRTIO_BLK_S_IOERR,
                };
                (status, 0)
            }
        };
        if status != VIRTIO_BLK_S_OK {
            io.errors = 1;
        }
        let used = match parsed.status {
            Some(at) if mem.write_obj(status as u8, at).is_ok() => len + 1,
            _ => 0,
        };
        let done = self.clock.now_ns();
        self.latency.add(done.saturating_sub(t0));
        self.total += io;
        if self.records.len() < MAX_RECORDS {
            self.records.push(Record { t_ns: t0, io });
        } else {
            self.unrecorded += 1;
        }
        used
    }

    /// The recorded requests split by the phase they started in.
    fn by_phase(&self, phases: &[TimelinePhase]) -> Vec<PhaseIo> {
        let mut out: Vec<PhaseIo> = phases
            .iter()
            .map(|p| PhaseIo {
                phase: p.name.clone(),
                io: IoCounts::default(),
            })
            .collect();
        let mut outside = IoCounts::default();
        for r in &self.records {
            match phases
                .iter()
                .position(|p| p.start_ns <= r.t_ns && r.t_ns < p.end_ns)
            {
                Some(i) => out[i].io += r.io,
                None => outside += r.io,
            }
        }
        out.retain(|p| p.io.requests > 0);
        if outside.requests > 0 {
            out.push(PhaseIo {
                phase: "outside phases".into(),
                io: outside,
            });
        }
        out
    }
}

impl VirtioDevice for Block {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Block
    }

    fn features(&self) -> u64 {
        let mut f = FEATURE_VERSION_1 | (1 << VIRTIO_BLK_F_FLUSH) | (1 << VIRTIO_BLK_F_SEG_MAX);
        if self.disk.readonly {
            f |= 1 << VIRTIO_BLK_F_RO;
        }
        f
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    /// `struct virtio_blk_config`: capacity (sectors) at 0, size_max at
    /// 8 (not offered), seg_max at 12.
    fn read_config(&self, offset: u64, data: &mut [u8]) {
        let mut config = [0u8; 24];
        config[0..8].copy_from_slice(&self.capacity_sectors().to_le_bytes());
        config[12..16].copy_from_slice(&SEG_MAX.to_le_bytes());
        copy_config(&config, offset, data);
    }

    fn process_queue(
        &mut self,
        index: usize,
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<u32, QueueFault> {
        let t0 = self.clock.now_ns();
        drain_queue(index, queue, mem, |chain| self.serve(chain, mem, t0))
    }

    fn report(&self, doc: &mut VirtioDeviceDoc, phases: &[TimelinePhase]) {
        self.bad.report(doc);
        doc.disk = Some(DiskDoc {
            path: self.disk.path.display().to_string(),
            readonly: self.disk.readonly,
            capacity_bytes: self.disk.size,
            serial: self.serial.clone(),
            total: self.total,
            by_phase: self.by_phase(phases),
            latency: self.latency.buckets(),
            unrecorded: self.unrecorded,
        });
    }
}

/// Copies `config[offset..]` into `data`; what lies past its end reads as
/// zero.
pub fn copy_config(config: &[u8], offset: u64, data: &mut [u8]) {
    data.fill(0);
    let Ok(off) = usize::try_from(offset) else {
        return;
    };
    if off >= config.len() {
        return;
    }
    let n = data.len().min(config.len() - off);
    data[..n].copy_from_slice(&config[off..off + n]);
}

#[cfg(test)]
mod tests;
