//! A virtio-blk request, parsed once from its descriptor chain (virtio
//! 1.x, 5.2.6): a 16-byte device-readable header (type, reserved,
//! sector), the data buffers (device-writable for a read, readable for a
//! write), and a device-writable status byte last. Every address is
//! checked against guest memory here; the request that comes out is safe
//! to execute.

use virtio_bindings::virtio_blk::{
    virtio_blk_outhdr, VIRTIO_BLK_ID_BYTES, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID,
    VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
};
use virtio_queue::{desc::split::Descriptor, DescriptorChain};
use vm_memory::{Address, ByteValued, Bytes, GuestAddress, GuestMemoryMmap};

use super::image::SECTOR_SIZE;
use crate::virtio::chain::{self, Access, ChainError};

/// The request header (`struct virtio_blk_outhdr`: type, I/O priority,
/// first sector), as the guest lays it out.
#[derive(Clone, Copy, Debug, Default)]
#[repr(transparent)]
struct Header(virtio_blk_outhdr);

// SAFETY: `virtio_blk_outhdr` is `#[repr(C)]` with two `u32` and one `u64`
// field and no padding (16 bytes, checked by its bindings): every byte
// pattern is a valid value, and `Header` is a transparent wrapper of it.
unsafe impl ByteValued for Header {}

/// Size of the request header.
pub const HEADER_LEN: u32 = std::mem::size_of::<virtio_blk_outhdr>() as u32;

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

impl RequestKind {
    /// Its data buffers, as an error names them.
    fn data_buffer(self) -> &'static str {
        match self {
            RequestKind::Read => "read's data buffer",
            RequestKind::Write => "write's data buffer",
            RequestKind::Flush => "flush's data buffer",
            RequestKind::GetId => "GET_ID's data buffer",
        }
    }

    /// Which way its data buffers go.
    fn data_access(self) -> Access {
        match self {
            RequestKind::Read | RequestKind::GetId => Access::Writable,
            RequestKind::Write | RequestKind::Flush => Access::Readable,
        }
    }
}

/// Why a chain is not a request the device executes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A check every device makes (a broken chain, a buffer of the wrong
    /// direction or outside guest memory).
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error("header is {0} bytes, not {HEADER_LEN}")]
    HeaderLength(u32),
    #[error("no status descriptor")]
    NoStatus,
    #[error("status descriptor has no room")]
    StatusEmpty,
    #[error("request type {0} is not supported")]
    Unsupported(u32),
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

/// Parses a chain into a request for a disk of `capacity_sectors`.
pub fn parse(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
    capacity_sectors: u64,
) -> Parsed {
    let descs = match chain::descriptors(chain) {
        Ok(d) => d,
        Err(e) => {
            return Parsed {
                status: None,
                request: Err(e.into()),
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
    const WHAT: &str = "status byte";
    if descs.len() < 2 {
        return Err(RequestError::NoStatus);
    }
    let last = descs[descs.len() - 1];
    chain::check_direction(&last, Access::Writable, WHAT)?;
    if last.len() == 0 {
        return Err(RequestError::StatusEmpty);
    }
    // The status is the descriptor's last byte when it is longer.
    let addr = last
        .addr()
        .checked_add(u64::from(last.len() - 1))
        .ok_or(ChainError::Outside {
            what: WHAT,
            addr: last.addr().0,
            len: last.len(),
        })?;
    chain::check_inside(mem, addr, 1, Access::Writable, WHAT)?;
    Ok(addr)
}

fn parse_body(
    descs: &[Descriptor],
    mem: &GuestMemoryMmap,
    capacity_sectors: u64,
    status: GuestAddress,
) -> Result<Request, RequestError> {
    let (kind, sector) = header(&descs[0], mem)?;
    // A header longer than 16 bytes carries nothing the device reads; the
    // status byte's descriptor may hold data before it (ANY_LAYOUT is not
    // offered, so it does not).
    let body = &descs[1..descs.len() - 1];
    let mut data = Vec::with_capacity(body.len());
    let mut data_len = 0u64;
    for d in body {
        chain::check(mem, d, kind.data_access(), kind.data_buffer())?;
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

/// The request's kind and first sector, from the header in the chain's
/// first descriptor.
fn header(head: &Descriptor, mem: &GuestMemoryMmap) -> Result<(RequestKind, u64), RequestError> {
    const WHAT: &str = "header";
    chain::check_direction(head, Access::Readable, WHAT)?;
    if head.len() < HEADER_LEN {
        return Err(RequestError::HeaderLength(head.len()));
    }
    let Header(h) = mem.read_obj(head.addr()).map_err(|_| ChainError::Outside {
        what: WHAT,
        addr: head.addr().0,
        len: HEADER_LEN,
    })?;
    let kind = match h.type_ {
        VIRTIO_BLK_T_IN => RequestKind::Read,
        VIRTIO_BLK_T_OUT => RequestKind::Write,
        VIRTIO_BLK_T_FLUSH => RequestKind::Flush,
        VIRTIO_BLK_T_GET_ID => RequestKind::GetId,
        other => return Err(RequestError::Unsupported(other)),
    };
    Ok((kind, h.sector))
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
