//! The kernel's lockless printk ring buffer (`struct printk_ringbuffer`,
//! Linux 5.10 and later), read from a stopped guest with the struct layout
//! its VMCOREINFO states: descriptors say where each record's text is in the
//! data ring and whether it is complete; infos carry its sequence number and
//! `ts_nsec` timestamp (the guest's `local_clock()`).

use super::vmcoreinfo::VmcoreInfo;
use super::KernelLogError;

/// Kernel virtual memory, read only.
pub trait VirtMemory {
    fn read(&self, va: u64, buf: &mut [u8]) -> bool;
}

impl VirtMemory for super::phys::KernelVirt<'_> {
    fn read(&self, va: u64, buf: &mut [u8]) -> bool {
        super::phys::KernelVirt::read(self, va, buf)
    }
}

/// One kernel log record.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRecord {
    pub seq: u64,
    /// Guest `local_clock()` when the record was stored, in nanoseconds.
    pub ts_nsec: u64,
    /// `T<pid>` or `C<cpu>` (high bit set) that stored it.
    pub caller_id: u32,
    pub text: String,
}

/// What was read: the records in sequence order, and how many were lost
/// because the ring wrapped (the first sequence number kept).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogRead {
    pub records: Vec<LogRecord>,
    pub first_seq: u64,
    /// Bytes of the text data ring.
    pub data_ring_bytes: u64,
}

/// Descriptor states (the top two bits of `state_var`).
const DESC_COMMITTED: u64 = 1;
const DESC_FINALIZED: u64 = 2;
const DESC_ID_MASK: u64 = !(3u64 << 62);
/// Sanity limits: no real kernel has more descriptors or a larger ring.
const MAX_COUNT_BITS: u32 = 24;
const MAX_SIZE_BITS: u32 = 30;

/// Field offsets and sizes of the ring buffer structures.
#[derive(Clone, Debug)]
pub struct RingLayout {
    desc_ring: u64,
    text_data_ring: u64,
    count_bits: u64,
    descs: u64,
    infos: u64,
    head_id: u64,
    tail_id: u64,
    desc_size: u64,
    state_var: u64,
    text_blk_lpos: u64,
    lpos_begin: u64,
    lpos_next: u64,
    info_size: u64,
    info_seq: u64,
    info_ts_nsec: u64,
    info_text_len: u64,
    info_caller_id: u64,
    size_bits: u64,
    data: u64,
}

impl RingLayout {
    pub fn from_vmcoreinfo(v: &VmcoreInfo) -> Result<Self, KernelLogError> {
        Ok(Self {
            desc_ring: v.offset("printk_ringbuffer.desc_ring")?,
            text_data_ring: v.offset("printk_ringbuffer.text_data_ring")?,
            count_bits: v.offset("prb_desc_ring.count_bits")?,
            descs: v.offset("prb_desc_ring.descs")?,
            infos: v.offset("prb_desc_ring.infos")?,
            head_id: v.offset("prb_desc_ring.head_id")?,
            tail_id: v.offset("prb_desc_ring.tail_id")?,
            desc_size: v.size("prb_desc")?,
            state_var: v.offset("prb_desc.state_var")?,
            text_blk_lpos: v.offset("prb_desc.text_blk_lpos")?,
            lpos_begin: v.offset("prb_data_blk_lpos.begin")?,
            lpos_next: v.offset("prb_data_blk_lpos.next")?,
            info_size: v.size("printk_info")?,
            info_seq: v.offset("printk_info.seq")?,
            info_ts_nsec: v.offset("printk_info.ts_nsec")?,
            info_text_len: v.offset("printk_info.text_len")?,
            info_caller_id: v.offset("printk_info.caller_id")?,
            size_bits: v.offset("prb_data_ring.size_bits")?,
            data: v.offset("prb_data_ring.data")?,
        })
    }
}

/// The `u64` at kernel address `va`; `what` names it in the error.
pub(super) fn u64_at(
    mem: &dyn VirtMemory,
    va: u64,
    what: &'static str,
) -> Result<u64, KernelLogError> {
    let mut b = [0u8; 8];
    mem.read(va, &mut b)
        .then(|| u64::from_le_bytes(b))
        .ok_or(KernelLogError::Unmapped { what, address: va })
}

fn u32_at(mem: &dyn VirtMemory, va: u64, what: &'static str) -> Result<u32, KernelLogError> {
    let mut b = [0u8; 4];
    mem.read(va, &mut b)
        .then(|| u32::from_le_bytes(b))
        .ok_or(KernelLogError::Unmapped { what, address: va })
}

/// Reads every complete record of the ring buffer at `prb` (the address of
/// the `struct printk_ringbuffer`).
pub fn read_records(
    mem: &dyn VirtMemory,
    layout: &RingLayout,
    prb: u64,
) -> Result<LogRead, KernelLogError> {
    let dr = prb + layout.desc_ring;
    let count_bits = u32_at(mem, dr + layout.count_bits, "prb_desc_ring.count_bits")?;
    let descs = u64_at(mem, dr + layout.descs, "prb_desc_ring.descs")?;
    let infos = u64_at(mem, dr + layout.infos, "prb_desc_ring.infos")?;
    let head_id = u64_at(mem, dr + layout.head_id, "prb_desc_ring.head_id")?;
    let tail_id = u64_at(mem, dr + layout.tail_id, "prb_desc_ring.tail_id")?;
    let tr = prb + layout.text_data_ring;
    let size_bits = u32_at(mem, tr + layout.size_bits, "prb_data_ring.size_bits")?;
    let data_va = u64_at(mem, tr + layout.data, "prb_data_ring.data")?;
    if count_bits > MAX_COUNT_BITS || !(3..=MAX_SIZE_BITS).contains(&size_bits) {
        return Err(KernelLogError::Corrupt(format!(
            "descriptor count bits {count_bits}, data size bits {size_bits}"
        )));
    }
    let count = 1u64 << count_bits;
    let mut data = vec![0u8; 1usize << size_bits];
    if !mem.read(data_va, &mut data) {
        return Err(KernelLogError::Unmapped {
            what: "the text data ring",
            address: data_va,
        });
    }
    let mut out = LogRead {
        data_ring_bytes: data.len() as u64,
        ..LogRead::default()
    };
    let mut id = tail_id;
    for _ in 0..=count {
        let index = id & (count - 1);
        let desc = descs + index * layout.desc_size;
        let sv = u64_at(mem, desc + layout.state_var, "a descriptor")?;
        let state = sv >> 62;
        if sv & DESC_ID_MASK == id & DESC_ID_MASK
            && (state == DESC_COMMITTED || state == DESC_FINALIZED)
        {
            let lpos = desc + layout.text_blk_lpos;
            let begin = u64_at(mem, lpos + layout.lpos_begin, "a descriptor")?;
            let next = u64_at(mem, lpos + layout.lpos_next, "a descriptor")?;
            let info = infos + index * layout.info_size;
            let seq = u64_at(mem, info + layout.info_seq, "a record info")?;
            let ts_nsec = u64_at(mem, info + layout.info_ts_nsec, "a record info")?;
            let mut len = [0u8; 2];
            if !mem.read(info + layout.info_text_len, &mut len) {
                return Err(KernelLogError::Unmapped {
                    what: "a record info",
                    address: info,
                });
            }
            let caller_id = u32_at(mem, info + layout.info_caller_id, "a record info")?;
            let text = block_text(&data, size_bits, begin, next, u16::from_le_bytes(len));
            out.records.push(LogRecord {
                seq,
                ts_nsec,
                caller_id,
                text,
            });
        }
        if id == head_id {
            break;
        }
        id = id.wrapping_add(1);
    }
    out.records.sort_by_key(|r| r.seq);
    out.first_seq = out.records.first().map_or(0, |r| r.seq);
    Ok(out)
}

/// The text of the data block `begin..next` (logical positions), cut to
/// `text_len`; empty for a data-less or invalid block.
fn block_text(data: &[u8], size_bits: u32, begin: u64, next: u64, text_len: u16) -> String {
    if begin & 1 != 0 && next & 1 != 0 {
        return String::new();
    }
    let size = data.len() as u64;
    let wraps = |lpos: u64| lpos >> size_bits;
    let (offset, len) = if wraps(begin) == wraps(next) && begin < next {
        (begin & (size - 1), next - begin)
    } else if wraps(begin.wrapping_add(size)) == wraps(next) {
        (0, next & (size - 1))
    } else {
        return String::new();
    };
    // Each block starts with its descriptor id.
    let start = offset as usize + 8;
    let end = (offset + len) as usize;
    if end > data.len() || start > end {
        return String::new();
    }
    let text = &data[start..end];
    let text = &text[..text.len().min(usize::from(text_len))];
    String::from_utf8_lossy(text).into_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Kernel virtual memory as one vector at a base address.
    pub(crate) struct FlatVirt {
        pub base: u64,
        pub bytes: Vec<u8>,
    }

    impl VirtMemory for FlatVirt {
        fn read(&self, va: u64, buf: &mut [u8]) -> bool {
            let Some(off) = va.checked_sub(self.base) else {
                return false;
            };
            let off = off as usize;
            match self.bytes.get(off..off + buf.len()) {
                Some(s) => {
                    buf.copy_from_slice(s);
                    true
                }
                None => false,
            }
        }
    }

    impl FlatVirt {
        /// Zeroed memory from 0 to `len`.
        pub(crate) fn zeroed(len: usize) -> Self {
            Self {
                base: 0,
                bytes: vec![0; len],
            }
        }

        pub(crate) fn put(&mut self, va: u64, bytes: &[u8]) {
            let off = (va - self.base) as usize;
            self.bytes[off..off + bytes.len()].copy_from_slice(bytes);
        }
    }

    /// Linux 6.1's layout, as its VMCOREINFO states it.
    pub(crate) const LAYOUT_6_1: &str = "OFFSET(printk_ringbuffer.desc_ring)=0
OFFSET(printk_ringbuffer.text_data_ring)=48
SIZE(prb_desc)=24
OFFSET(prb_desc.state_var)=0
OFFSET(prb_desc.text_blk_lpos)=8
OFFSET(prb_data_blk_lpos.begin)=0
OFFSET(prb_data_blk_lpos.next)=8
OFFSET(prb_desc_ring.count_bits)=0
OFFSET(prb_desc_ring.descs)=8
OFFSET(prb_desc_ring.infos)=16
OFFSET(prb_desc_ring.head_id)=24
OFFSET(prb_desc_ring.tail_id)=32
SIZE(printk_info)=88
OFFSET(printk_info.seq)=0
OFFSET(printk_info.ts_nsec)=8
OFFSET(printk_info.text_len)=16
OFFSET(printk_info.caller_id)=20
OFFSET(prb_data_ring.size_bits)=0
OFFSET(prb_data_ring.data)=8
";

    const BASE: u64 = 0xffff_8880_0100_0000;
    const DESCS: u64 = BASE + 0x1000;
    const INFOS: u64 = BASE + 0x2000;
    const DATA: u64 = BASE + 0x4000;
    const SIZE_BITS: u32 = 9;

    /// A ring of 8 descriptors and 512 text bytes holding `texts` stored in
    /// order, starting at descriptor id `first_id` and data position
    /// `first_lpos` (so blocks can wrap); `ts` gives each record's time.
    pub(crate) fn synthetic_ring(
        texts: &[&str],
        first_id: u64,
        first_lpos: u64,
        ts: impl Fn(usize) -> u64,
    ) -> FlatVirt {
        let mut m = FlatVirt {
            base: BASE,
            bytes: vec![0; 0x8000],
        };
        let size = 1u64 << SIZE_BITS;
        let mut lpos = first_lpos;
        for (i, t) in texts.iter().enumerate() {
            let id = first_id + i as u64;
            let index = id & 7;
            let need = (8 + t.len() as u64 + 7) & !7;
            let (begin, at) = if (lpos & (size - 1)) + need > size {
                // Wrapping block: its data starts at offset 0 of the next wrap.
                (lpos, lpos.next_multiple_of(size))
            } else {
                (lpos, lpos)
            };
            let next = at + need;
            m.put(DATA + (at & (size - 1)), &id.to_le_bytes());
            m.put(DATA + (at & (size - 1)) + 8, t.as_bytes());
            let desc = DESCS + index * 24;
            m.put(desc, &((DESC_FINALIZED << 62) | id).to_le_bytes());
            m.put(desc + 8, &begin.to_le_bytes());
            m.put(desc + 16, &next.to_le_bytes());
            let info = INFOS + index * 88;
            m.put(info, &(i as u64 + 100).to_le_bytes());
            m.put(info + 8, &ts(i).to_le_bytes());
            m.put(info + 16, &(t.len() as u16).to_le_bytes());
            m.put(info + 20, &1u32.to_le_bytes());
            lpos = next;
        }
        let prb = BASE;
        m.put(prb, &3u32.to_le_bytes());
        m.put(prb + 8, &DESCS.to_le_bytes());
        m.put(prb + 16, &INFOS.to_le_bytes());
        m.put(prb + 24, &(first_id + texts.len() as u64 - 1).to_le_bytes());
        m.put(prb + 32, &first_id.to_le_bytes());
        m.put(prb + 48, &SIZE_BITS.to_le_bytes());
        m.put(prb + 56, &DATA.to_le_bytes());
        m
    }

    pub(crate) fn read_synthetic(m: &FlatVirt) -> LogRead {
        let layout = RingLayout::from_vmcoreinfo(&VmcoreInfo::parse(LAYOUT_6_1)).unwrap();
        read_records(m, &layout, BASE).unwrap()
    }

    #[test]
    fn reads_records_in_order_including_a_wrapping_block() {
        let texts = ["first line", "second, a longer line of text", "third"];
        // Start near the end of the data ring so the second block wraps.
        let m = synthetic_ring(&texts, 5, 512 * 3 + 472, |i| 1000 * i as u64);
        let read = read_synthetic(&m);
        let got: Vec<_> = read.records.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(got, texts);
        assert_eq!(read.records[2].ts_nsec, 2000);
        assert_eq!(read.first_seq, 100);
        assert_eq!(read.data_ring_bytes, 512);
    }

    #[test]
    fn skips_descriptors_that_are_not_complete() {
        let mut m = synthetic_ring(&["a", "b", "c"], 0, 0, |_| 0);
        // Descriptor 1 still reserved (being written).
        m.put(DESCS + 24, &1u64.to_le_bytes());
        let read = read_synthetic(&m);
        let got: Vec<_> = read.records.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(got, ["a", "c"]);
    }

    #[test]
    fn a_ring_with_absurd_sizes_is_refused() {
        let mut m = synthetic_ring(&["a"], 0, 0, |_| 0);
        m.put(BASE, &60u32.to_le_bytes());
        let layout = RingLayout::from_vmcoreinfo(&VmcoreInfo::parse(LAYOUT_6_1)).unwrap();
        assert!(matches!(
            read_records(&m, &layout, BASE),
            Err(KernelLogError::Corrupt(_))
        ));
    }
}
