//! Guest memory in a snapshot: one sparse file, the memory regions one
//! after another in guest-physical order, a page of zeros a hole. Written
//! while every vCPU is parked; read back into a new VM's memory skipping
//! the holes (fresh guest memory is zero already).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use serde::{Deserialize, Serialize};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use xxhash_rust::xxh3::Xxh3;

/// Bytes moved per read or write.
const CHUNK: usize = 1 << 20;
const PAGE: usize = 4096;

/// One guest memory region: where it is in the guest and in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRegion {
    pub guest_addr: u64,
    pub bytes: u64,
    pub file_offset: u64,
}

/// What writing the memory file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryWritten {
    pub regions: Vec<MemoryRegion>,
    pub bytes: u64,
    /// Bytes written as data (the rest are holes).
    pub data_bytes: u64,
    /// xxh3-128 of the whole content, zeros included, as hex.
    pub digest: String,
}

/// The guest's memory regions, laid out one after another in the file.
pub fn layout(mem: &GuestMemoryMmap) -> Vec<MemoryRegion> {
    let mut offset = 0;
    mem.iter()
        .map(|r| {
            let region = MemoryRegion {
                guest_addr: r.start_addr().0,
                bytes: r.len(),
                file_offset: offset,
            };
            offset += r.len();
            region
        })
        .collect()
}

/// True when every byte is zero; a page at a time, without stopping early
/// inside one, so the compiler vectorizes it.
fn is_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(PAGE)
        .all(|p| p.iter().fold(0u8, |a, &b| a | b) == 0)
}

fn guest_error(e: vm_memory::GuestMemoryError) -> std::io::Error {
    std::io::Error::other(format!("guest memory: {e}"))
}

/// Writes guest memory into `file` (new and empty): only the pages that
/// are not zero; the file's length is the memory's size.
pub fn write(mem: &GuestMemoryMmap, file: &File) -> std::io::Result<MemoryWritten> {
    let regions = layout(mem);
    let mut hash = Xxh3::new();
    let mut buf = vec![0u8; CHUNK];
    let mut data_bytes = 0;
    for r in &regions {
        let mut done = 0u64;
        while done < r.bytes {
            let n = (r.bytes - done).min(CHUNK as u64) as usize;
            let chunk = &mut buf[..n];
            mem.read_slice(chunk, GuestAddress(r.guest_addr + done))
                .map_err(guest_error)?;
            hash.update(chunk);
            for (i, page) in chunk.chunks(PAGE).enumerate() {
                if !is_zero(page) {
                    let at = r.file_offset + done + (i * PAGE) as u64;
                    file.write_all_at(page, at)?;
                    data_bytes += page.len() as u64;
                }
            }
            done += n as u64;
        }
    }
    let bytes = regions.iter().map(|r| r.bytes).sum();
    file.set_len(bytes)?;
    Ok(MemoryWritten {
        regions,
        bytes,
        data_bytes,
        digest: format!("{:032x}", hash.digest128()),
    })
}

/// `lseek` with `SEEK_DATA` or `SEEK_HOLE`; None past the end.
pub(super) fn seek(file: &File, offset: u64, whence: libc::c_int) -> std::io::Result<Option<u64>> {
    // SAFETY: lseek on a descriptor this function borrows; no memory is
    // passed.
    let r = unsafe { libc::lseek(file.as_raw_fd(), offset as libc::off_t, whence) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(r as u64))
}

/// True when a page of guest memory `[addr, addr + bytes)` is resident
/// (`mincore`): pages never touched are zero and need no look.
fn any_resident(mem: &GuestMemoryMmap, addr: GuestAddress, bytes: usize) -> bool {
    let Ok(host) = mem.get_host_address(addr) else {
        return true;
    };
    let start = host as usize & !(PAGE - 1);
    let len = host as usize + bytes - start;
    let mut resident = vec![0u8; len.div_ceil(PAGE)];
    // SAFETY: `start..start + len` covers guest memory mapped by `mem`
    // (page aligned down); mincore only writes one byte per page into
    // `resident`, which is that long.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, len, resident.as_mut_ptr()) };
    r != 0 || resident.iter().any(|&b| b & 1 != 0)
}

/// Zeroes what is not zero in guest memory `[addr, addr + bytes)`: the
/// pages the VM's set-up wrote where the snapshot has a hole. Only
/// resident pages are read: the scan faults nothing in.
fn clear_range(
    mem: &GuestMemoryMmap,
    addr: u64,
    bytes: u64,
    buf: &mut [u8],
) -> std::io::Result<()> {
    let mut done = 0;
    while done < bytes {
        let n = (bytes - done).min(buf.len() as u64) as usize;
        let at = GuestAddress(addr + done);
        if !any_resident(mem, at, n) {
            done += n as u64;
            continue;
        }
        mem.read_slice(&mut buf[..n], at).map_err(guest_error)?;
        if !is_zero(&buf[..n]) {
            buf[..n].fill(0);
            mem.write_slice(&buf[..n], at).map_err(guest_error)?;
        }
        done += n as u64;
    }
    Ok(())
}

/// Reads the file's bytes `range` straight into guest memory at `guest`
/// (no bounce buffer: one copy, from the page cache into the guest).
fn read_into(
    mem: &GuestMemoryMmap,
    file: &File,
    range: std::ops::Range<u64>,
    guest: u64,
) -> std::io::Result<()> {
    let mut src = file;
    src.seek(SeekFrom::Start(range.start))?;
    let mut pos = range.start;
    while pos < range.end {
        let n = (range.end - pos).min(CHUNK as u64) as usize;
        let at = GuestAddress(guest + (pos - range.start));
        let got = mem
            .read_volatile_from(at, &mut src, n)
            .map_err(guest_error)?;
        if got == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the memory file ends at {pos} bytes, inside its data"),
            ));
        }
        pos += got as u64;
    }
    Ok(())
}

/// Copies the memory file into guest memory laid out as `regions`: its
/// data read, its holes made zero where the set-up wrote something.
/// Returns the bytes copied.
pub fn copy_in(
    mem: &GuestMemoryMmap,
    file: &File,
    regions: &[MemoryRegion],
) -> std::io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut copied = 0;
    for r in regions {
        let end = r.file_offset + r.bytes;
        let guest = |off: u64| r.guest_addr + (off - r.file_offset);
        let mut at = r.file_offset;
        while at < end {
            let data = seek(file, at, libc::SEEK_DATA)?.unwrap_or(end).min(end);
            clear_range(mem, guest(at), data - at, &mut buf)?;
            if data == end {
                break;
            }
            let hole = seek(file, data, libc::SEEK_HOLE)?.unwrap_or(end).min(end);
            read_into(mem, file, data..hole, guest(data))?;
            copied += hole - data;
            at = hole;
        }
    }
    Ok(copied)
}

/// The digest [`write`] gives, of a memory file read whole.
pub fn file_digest(file: &File, bytes: u64) -> std::io::Result<String> {
    let mut hash = Xxh3::new();
    let mut buf = vec![0u8; CHUNK];
    let mut pos = 0;
    while pos < bytes {
        let n = (bytes - pos).min(CHUNK as u64) as usize;
        file.read_exact_at(&mut buf[..n], pos)?;
        hash.update(&buf[..n]);
        pos += n as u64;
    }
    Ok(format!("{:032x}", hash.digest128()))
}

/// The digest of guest memory as [`write`] computes it, without writing.
pub fn guest_digest(mem: &GuestMemoryMmap) -> std::io::Result<String> {
    let mut hash = Xxh3::new();
    let mut buf = vec![0u8; CHUNK];
    for r in layout(mem) {
        let mut done = 0u64;
        while done < r.bytes {
            let n = (r.bytes - done).min(CHUNK as u64) as usize;
            mem.read_slice(&mut buf[..n], GuestAddress(r.guest_addr + done))
                .map_err(guest_error)?;
            hash.update(&buf[..n]);
            done += n as u64;
        }
    }
    Ok(format!("{:032x}", hash.digest128()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(bytes: usize) -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), bytes / 2),
            (GuestAddress(1 << 32), bytes / 2),
        ])
        .unwrap()
    }

    #[test]
    fn zero_pages_are_holes_and_memory_comes_back_exactly() {
        let mem = guest(8 << 20);
        mem.write_slice(b"first", GuestAddress(0x1234)).unwrap();
        mem.write_slice(&[7u8; 5000], GuestAddress((1 << 32) + 4096 * 100))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("memory"))
            .unwrap();
        let w = write(&mem, &file).unwrap();
        assert_eq!(w.bytes, 8 << 20);
        // One page in the first region, two in the second.
        assert_eq!(w.data_bytes, 3 * 4096);
        assert_eq!(w.regions[1].file_offset, 4 << 20);
        assert_eq!(file_digest(&file, w.bytes).unwrap(), w.digest);
        assert_eq!(guest_digest(&mem).unwrap(), w.digest);
        let back = guest(8 << 20);
        back.write_slice(b"written by the set-up", GuestAddress(0x9000))
            .unwrap();
        let copied = copy_in(&back, &file, &w.regions).unwrap();
        assert!(copied >= 3 * 4096 && copied < w.bytes, "{copied}");
        assert_eq!(guest_digest(&back).unwrap(), w.digest);
    }
}
