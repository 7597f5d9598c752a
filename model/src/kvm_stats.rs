//! KVM's binary statistics format (`KVM_GET_STATS_FD`, Linux 5.14+,
//! Documentation/virt/kvm/api.rst "KVM_GET_STATS_FD"): a header, an array
//! of descriptors (flags, size, data offset, name) and the data. The VMM
//! reads every statistic of its own vCPUs; the profiler finds the `exits`
//! statistic in a copy of another process's file. Both read the layout
//! here, through a reader at offsets, so neither needs the other's file
//! handling.

use std::collections::BTreeMap;
use std::fmt;

/// Size of the header: flags, name size, descriptor count, id offset,
/// descriptor offset, data offset (six `u32`s).
pub const HEADER_SIZE: usize = 24;
/// Fixed part of a descriptor before its name: flags (`u32`), exponent
/// (`i16`), size (`u16`), offset (`u32`), bucket size (`u32`).
const DESC_FIXED_SIZE: usize = 16;
/// `KVM_STATS_TYPE_CUMULATIVE`: values that add up across vCPUs.
const TYPE_CUMULATIVE: u32 = 0;
/// `KVM_STATS_TYPE_MASK`.
const TYPE_MASK: u32 = 0xf;
/// Bounds that a real stats file stays far below (a few hundred
/// statistics with names under 64 bytes): a file that claims more is not
/// read, so a corrupt header cannot make a huge allocation.
const MAX_DESCRIPTORS: usize = 4096;
const MAX_NAME_SIZE: usize = 4096;

/// One statistic's descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatDesc {
    pub name: String,
    pub flags: u32,
    /// Number of values (1 for a scalar, more for a histogram).
    pub size: u16,
    /// Where its first value is, from the start of the file.
    pub data_offset: u64,
}

impl StatDesc {
    /// Whether the statistic is worth reading as one number: cumulative
    /// statistics always, others only when they have a value.
    fn is_scalar_worth_reading(&self) -> bool {
        self.flags & TYPE_MASK == TYPE_CUMULATIVE || self.size != 0
    }
}

/// A stats file's layout that cannot be read.
#[derive(Debug)]
pub enum StatsError {
    Io(std::io::Error),
    /// The header claims more descriptors or a longer name than any KVM
    /// has.
    Implausible {
        descriptors: usize,
        name_size: usize,
    },
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Implausible {
                descriptors,
                name_size,
            } => write!(
                f,
                "KVM statistics header claims {descriptors} descriptors with {name_size}-byte names: not a KVM statistics file"
            ),
        }
    }
}

impl std::error::Error for StatsError {}

impl From<StatsError> for std::io::Error {
    fn from(e: StatsError) -> Self {
        match e {
            StatsError::Io(e) => e,
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// The descriptors of a stats file, given a reader at offsets.
pub fn descriptors(
    mut read_at: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
) -> Result<Vec<StatDesc>, StatsError> {
    let mut header = [0u8; HEADER_SIZE];
    read_at(0, &mut header).map_err(StatsError::Io)?;
    let name_size = u32_at(&header, 4) as usize;
    let count = u32_at(&header, 8) as usize;
    if count > MAX_DESCRIPTORS || name_size > MAX_NAME_SIZE {
        return Err(StatsError::Implausible {
            descriptors: count,
            name_size,
        });
    }
    let desc_offset = u64::from(u32_at(&header, 16));
    let data_offset = u64::from(u32_at(&header, 20));
    let desc_size = DESC_FIXED_SIZE + name_size;
    let mut raw = vec![0u8; desc_size * count];
    read_at(desc_offset, &mut raw).map_err(StatsError::Io)?;
    Ok(raw
        .chunks(desc_size)
        .map(|d| {
            let name = &d[DESC_FIXED_SIZE..];
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            StatDesc {
                name: String::from_utf8_lossy(&name[..end]).into_owned(),
                flags: u32_at(d, 0),
                size: u16::from_le_bytes([d[6], d[7]]),
                data_offset: data_offset + u64::from(u32_at(d, 8)),
            }
        })
        .collect())
}

/// Every scalar statistic (the first value of arrays) by name.
pub fn read_all(
    mut read_at: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
) -> Result<BTreeMap<String, u64>, StatsError> {
    let mut out = BTreeMap::new();
    for d in descriptors(&mut read_at)? {
        if !d.is_scalar_worth_reading() {
            continue;
        }
        let mut v = [0u8; 8];
        read_at(d.data_offset, &mut v).map_err(StatsError::Io)?;
        out.insert(d.name, u64::from_le_bytes(v));
    }
    Ok(out)
}

/// Where the named statistic's value is, if the file has it.
pub fn offset_of(
    read_at: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    name: &str,
) -> Result<Option<u64>, StatsError> {
    Ok(descriptors(read_at)?
        .into_iter()
        .find(|d| d.name == name)
        .map(|d| d.data_offset))
}

/// Adds `b` into `a` (summing vCPU statistics into per-VM totals).
pub fn accumulate(a: &mut BTreeMap<String, u64>, b: &BTreeMap<String, u64>) {
    for (k, v) in b {
        let e = a.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stats file as KVM lays it out: header, two descriptors with
    /// 8-byte names, then the data.
    fn synthetic() -> Vec<u8> {
        let mut blob = vec![0u8; HEADER_SIZE];
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
        blob
    }

    fn reader(blob: &[u8]) -> impl FnMut(u64, &mut [u8]) -> std::io::Result<()> + '_ {
        move |off, buf| {
            let off = off as usize;
            let src = blob
                .get(off..off + buf.len())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(src);
            Ok(())
        }
    }

    #[test]
    fn reads_every_statistic_and_sums_them() {
        let blob = synthetic();
        let stats = read_all(reader(&blob)).unwrap();
        assert_eq!(stats["exits"], 1234);
        assert_eq!(stats["io_exit"], 56);
        let mut total = stats.clone();
        accumulate(&mut total, &stats);
        assert_eq!(total["exits"], 2468);
    }

    #[test]
    fn finds_one_statistic() {
        let blob = synthetic();
        assert_eq!(offset_of(reader(&blob), "io_exit").unwrap(), Some(80));
        assert_eq!(offset_of(reader(&blob), "nope").unwrap(), None);
    }

    #[test]
    fn refuses_an_implausible_header_without_allocating() {
        let mut blob = synthetic();
        blob[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = descriptors(reader(&blob)).unwrap_err();
        assert!(matches!(err, StatsError::Implausible { .. }), "{err}");
    }

    #[test]
    fn a_short_file_is_an_error() {
        let blob = synthetic();
        assert!(read_all(reader(&blob[..60])).is_err());
    }
}
