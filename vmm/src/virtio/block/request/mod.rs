//! A virtio-blk request, parsed once from its descriptor chain (virtio
//! 1.x, 5.2.6): a 16-byte device-readable header (type, reserved,
//! sector), the data buffers (device-writable for a read, readable for a
//! write), and a device-writable status byte last. Every address is
//! checked against guest memory here; the request that comes out is safe
//! to execute.

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_ID_BYTES, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
};
use virtio_queue::{desc::split::Descriptor, DescriptorChain};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, GuestMemoryMmap, Permissions};

use super::image::SECTOR_SIZE;

/// Size of the request header.
pub const HEADER_LEN: u32 = 16;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    Read,
    Write,
    Flush,
    GetId,
}

/// One guest buffer, inside guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub addr: GuestAddress,
    pub len: u32,
}

/// A well-formed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: RequestKind,
    /// First sector (reads and writes).
    pub sector: u64,
    /// The data buffers, in order.
    pub data: Vec<Segment>,
    /// Bytes in `data`.
    pub data_len: u64,
    /// Where the status byte goes.
    pub status: GuestAddress,
}

/// Why a chain is not a request the device executes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("empty descriptor chain")]
    Empty,
    #[error("descriptor chain cut short (a loop, a next index past the table, or a descriptor outside guest memory)")]
    Broken,
    #[error("header is device-writable")]
    HeaderWritable,
    #[error("header is {0} bytes, not {HEADER_LEN}")]
    HeaderLength(u32),
    #[error("header at {0:#x} is outside guest memory")]
    HeaderOutside(u64),
    #[error("no status descriptor")]
    NoStatus,
    #[error("status descriptor is device-readable")]
    StatusReadOnly,
    #[error("status descriptor has no room")]
    StatusEmpty,
    #[error("status byte at {0:#x} is outside guest memory")]
    StatusOutside(u64),
    #[error("request type {0} is not supported")]
    Unsupported(u32),
    #[error("{kind:?} data buffer is device-{found} (wrong direction)")]
    Direction {
        kind: RequestKind,
        found: &'static str,
    },
    #[error("data buffer {addr:#x}+{len} is outside guest memory")]
    DataOutside { addr: u64, len: u32 },
    #[error("{0:?} request without data")]
    NoData(RequestKind),
    #[error("data length {0} is not a whole number of sectors")]
    Unaligned(u64),
    #[error("sectors {sector}+{sectors} run past the disk's end ({capacity} sectors)")]
    PastEnd {
        sector: u64,
        sectors: u64,
        capacity: u64,
    },
}

/// A chain's parse: the status byte's address when the chain has a usable
/// one (an error is reported there), and the request or why not.
#[derive(Debug)]
pub struct Parsed {
    pub status: Option<GuestAddress>,
    pub request: Result<Request, RequestError>,
}

/// Collects the chain's descriptors; a chain the iterator had to cut
/// (its last descriptor still says "next") is broken.
fn descriptors(chain: DescriptorChain<&GuestMemoryMmap>) -> Result<Vec<Descriptor>, RequestError> {
    let descs: Vec<Descriptor> = chain.collect();
    match descs.last() {
        None => Err(RequestError::Empty),
        Some(d) if d.has_next() => Err(RequestError::Broken),
        Some(_) => Ok(descs),
    }
}

fn inside(mem: &GuestMemoryMmap, addr: GuestAddress, len: u32, write: bool) -> bool {
    let access = if write {
        Permissions::Write
    } else {
        Permissions::Read
    };
    len == 0 || GuestMemory::check_range(mem, addr, len as usize, access)
}

/// Parses a chain into a request for a disk of `capacity_sectors`.
pub fn parse(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
    capacity_sectors: u64,
) -> Parsed {
    let descs = match descriptors(chain) {
        Ok(d) => d,
        Err(e) => {
            return Parsed {
                status: None,
                request: Err(e),
            }
        }
    };
    let status = status_of(&descs, mem);
    let request = match status {
        Ok(s) => parse_body(&descs, mem, capacity_sectors, s),
        Err(ref e) => Err(e.clone()),
    };
    Parsed {
        status: status.ok(),
        request,
    }
}

/// The last descriptor: a device-writable byte in guest memory.
fn status_of(descs: &[Descriptor], mem: &GuestMemoryMmap) -> Result<GuestAddress, RequestError> {
    if descs.len() < 2 {
        return Err(RequestError::NoStatus);
    }
    let last = descs[descs.len() - 1];
    if !last.is_write_only() {
        return Err(RequestError::StatusReadOnly);
    }
    if last.len() == 0 {
        return Err(RequestError::StatusEmpty);
    }
    // The status is the descriptor's last byte when it is longer.
    let addr = last
        .addr()
        .checked_add(u64::from(last.len() - 1))
        .ok_or(RequestError::StatusOutside(last.addr().0))?;
    if !inside(mem, addr, 1, true) {
        return Err(RequestError::StatusOutside(addr.0));
    }
    Ok(addr)
}

fn parse_body(
    descs: &[Descriptor],
    mem: &GuestMemoryMmap,
    capacity_sectors: u64,
    status: GuestAddress,
) -> Result<Request, RequestError> {
    let head = descs[0];
    if head.is_write_only() {
        return Err(RequestError::HeaderWritable);
    }
    if head.len() < HEADER_LEN {
        return Err(RequestError::HeaderLength(head.len()));
    }
    let type_: u32 = mem
        .read_obj(head.addr())
        .map_err(|_| RequestError::HeaderOutside(head.addr().0))?;
    let sector: u64 = head
        .addr()
        .checked_add(8)
        .and_then(|a| mem.read_obj(a).ok())
        .ok_or(RequestError::HeaderOutside(head.addr().0))?;
    let kind = match type_ {
        VIRTIO_BLK_T_IN => RequestKind::Read,
        VIRTIO_BLK_T_OUT => RequestKind::Write,
        VIRTIO_BLK_T_FLUSH => RequestKind::Flush,
        VIRTIO_BLK_T_GET_ID => RequestKind::GetId,
        other => return Err(RequestError::Unsupported(other)),
    };
    // A header longer than 16 bytes carries nothing the device reads; the
    // status byte's descriptor may hold data before it (ANY_LAYOUT is not
    // offered, so it does not).
    let body = &descs[1..descs.len() - 1];
    let mut data = Vec::with_capacity(body.len());
    let mut data_len = 0u64;
    let device_writes = matches!(kind, RequestKind::Read | RequestKind::GetId);
    for d in body {
        if d.is_write_only() != device_writes {
            return Err(RequestError::Direction {
                kind,
                found: if d.is_write_only() {
                    "writable"
                } else {
                    "readable"
                },
            });
        }
        if !inside(mem, d.addr(), d.len(), device_writes) {
            return Err(RequestError::DataOutside {
                addr: d.addr().0,
                len: d.len(),
            });
        }
        data_len += u64::from(d.len());
        data.push(Segment {
            addr: d.addr(),
            len: d.len(),
        });
    }
    match kind {
        RequestKind::Read | RequestKind::Write => {
            if data_len == 0 {
                return Err(RequestError::NoData(kind));
            }
            if data_len % SECTOR_SIZE != 0 {
                return Err(RequestError::Unaligned(data_len));
            }
            let sectors = data_len / SECTOR_SIZE;
            if sector
                .checked_add(sectors)
                .is_none_or(|end| end > capacity_sectors)
            {
                return Err(RequestError::PastEnd {
                    sector,
                    sectors,
                    capacity: capacity_sectors,
                });
            }
        }
        RequestKind::GetId if data_len == 0 => return Err(RequestError::NoData(kind)),
        // A flush has no data; one that brings some is served all the same.
        RequestKind::GetId | RequestKind::Flush => {}
    }
    Ok(Request {
        kind,
        sector,
        data,
        data_len,
        status,
    })
}

/// The bytes of a `GET_ID` answer: the serial, NUL-padded to 20 bytes.
pub fn id_bytes(serial: &str) -> [u8; VIRTIO_BLK_ID_BYTES as usize] {
    let mut id = [0u8; VIRTIO_BLK_ID_BYTES as usize];
    let b = serial.as_bytes();
    let n = b.len().min(id.len());
    id[..n].copy_from_slice(&b[..n]);
    id
}

#[cfg(test)]
mod tests;
