//! KVM's own statistics through the binary stats interface
//! (`KVM_GET_STATS_FD`, Linux 5.14+): the independent source bootscope's
//! counts are checked against.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// `_IO(KVMIO, 0xce)`.
const KVM_GET_STATS_FD: libc::c_ulong = 0xaece;
const HEADER_SIZE: usize = 24;
const DESC_FIXED_SIZE: usize = 16;
/// Stat types (KVM_STATS_TYPE_*) whose values add up across vCPUs.
const TYPE_CUMULATIVE: u32 = 0;
const TYPE_MASK: u32 = 0xf;

/// An open stats file of a VM or vCPU.
#[derive(Debug)]
pub struct StatsFd {
    file: File,
}

impl StatsFd {
    /// Opens the stats of a KVM VM or vCPU file descriptor.
    pub fn open(fd: &impl AsRawFd) -> std::io::Result<Self> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or
        // -1; the fd we pass is valid for the duration of the call.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), KVM_GET_STATS_FD as _, 0) };
        if ret < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: ret is a fresh descriptor owned by nobody else.
        let file = unsafe { File::from_raw_fd(ret) };
        Ok(Self { file })
    }

    /// Reads every scalar statistic (first element of arrays) by name.
    pub fn read(&self) -> std::io::Result<BTreeMap<String, u64>> {
        let mut header = [0u8; HEADER_SIZE];
        self.file.read_exact_at(&mut header, 0)?;
        parse_stats(&header, |off, buf| self.file.read_exact_at(buf, off))
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap_or_default())
}

/// Parses the stats layout given its header and a reader at offsets.
pub fn parse_stats(
    header: &[u8],
    mut read_at: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
) -> std::io::Result<BTreeMap<String, u64>> {
    let name_size = u32_at(header, 4) as usize;
    let num_desc = u32_at(header, 8) as usize;
    let desc_offset = u32_at(header, 16) as u64;
    let data_offset = u32_at(header, 20) as u64;
    let desc_size = DESC_FIXED_SIZE + name_size;
    let mut descs = vec![0u8; desc_size * num_desc];
    read_at(desc_offset, &mut descs)?;
    let mut out = BTreeMap::new();
    for d in descs.chunks(desc_size) {
        let flags = u32_at(d, 0);
        let size = u32::from(u16::from_le_bytes([d[6], d[7]]));
        let offset = u32_at(d, 8) as u64;
        if flags & TYPE_MASK != TYPE_CUMULATIVE && size == 0 {
            continue;
        }
        let name_bytes = &d[DESC_FIXED_SIZE..];
        let end = name_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(name_bytes.len());
        let name = String::from_utf8_lossy(&name_bytes[..end]).into_owned();
        let mut v = [0u8; 8];
        read_at(data_offset + offset, &mut v)?;
        out.insert(name, u64::from_le_bytes(v));
    }
    Ok(out)
}

/// Adds `b` into `a` (summing vCPU stats into per-VM totals).
pub fn accumulate(a: &mut BTreeMap<String, u64>, b: &BTreeMap<String, u64>) {
    for (k, v) in b {
        *a.entry(k.clone()).or_insert(0) += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_synthetic_layout() {
        // header: flags, name_size=8, num_desc=2, id_offset, desc_offset=24, data_offset=72
        let mut blob = vec![0u8; 24];
        blob[4..8].copy_from_slice(&8u32.to_le_bytes());
        blob[8..12].copy_from_slice(&2u32.to_le_bytes());
        blob[16..20].copy_from_slice(&24u32.to_le_bytes());
        blob[20..24].copy_from_slice(&72u32.to_le_bytes());
        for (i, name) in [b"exits\0\0\0", b"io_exit\0"].iter().enumerate() {
            let mut d = vec![0u8; 24];
            d[6..8].copy_from_slice(&1u16.to_le_bytes());
            d[8..12].copy_from_slice(&((i * 8) as u32).to_le_bytes());
            d[16..24].copy_from_slice(*name);
            blob.extend_from_slice(&d);
        }
        blob.extend_from_slice(&1234u64.to_le_bytes());
        blob.extend_from_slice(&56u64.to_le_bytes());
        let header = blob[..24].to_vec();
        let stats = parse_stats(&header, |off, buf| {
            let off = off as usize;
            buf.copy_from_slice(&blob[off..off + buf.len()]);
            Ok(())
        })
        .unwrap();
        assert_eq!(stats["exits"], 1234);
        assert_eq!(stats["io_exit"], 56);
        let mut total = stats.clone();
        accumulate(&mut total, &stats);
        assert_eq!(total["exits"], 2468);
    }
}
