//! The kernel's VMCOREINFO text: the addresses and struct layouts a crash
//! tool needs to read the kernel log out of a memory image (`SYMBOL(prb)=`,
//! `OFFSET(printk_info.ts_nsec)=`, `NUMBER(phys_base)=`, ...). The kernel
//! builds it at boot (`CONFIG_CRASH_CORE`) in a page of its own memory, so
//! the VMM finds it by scanning guest RAM once the guest has stopped, once
//! for every reader of that guest ([`StoppedGuest`]).

use std::cell::OnceCell;
use std::collections::BTreeMap;

use super::phys::PhysMemory;
use super::KernelLogError;

/// The key that marks a VMCOREINFO text with the printk ring buffer in it.
const NEEDLE: &[u8] = b"SYMBOL(prb)=";
/// The first key of every VMCOREINFO text.
const FIRST_KEY: &[u8] = b"OSRELEASE=";
/// VMCOREINFO is at most one page.
const MAX_LEN: usize = 4096;
/// Guest memory is scanned in pieces of this size.
const SCAN_CHUNK: usize = 1 << 20;

/// The parsed `KEY=VALUE` lines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmcoreInfo {
    entries: BTreeMap<String, String>,
}

impl VmcoreInfo {
    /// Parses the text (lines `KEY=VALUE`; anything else is ignored).
    pub fn parse(text: &str) -> Self {
        let entries = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect();
        Self { entries }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    fn required(&self, key: &str) -> Result<&str, KernelLogError> {
        self.get(key).ok_or_else(|| KernelLogError::MissingKey {
            key: key.to_string(),
        })
    }

    fn bad(key: &str, value: &str) -> KernelLogError {
        KernelLogError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
        }
    }

    /// `SYMBOL(name)=` (hexadecimal kernel virtual address).
    pub fn symbol(&self, name: &str) -> Result<u64, KernelLogError> {
        let key = format!("SYMBOL({name})");
        let v = self.required(&key)?;
        u64::from_str_radix(v, 16).map_err(|_| Self::bad(&key, v))
    }

    /// `OFFSET(struct.field)=` (decimal).
    pub fn offset(&self, field: &str) -> Result<u64, KernelLogError> {
        self.decimal(&format!("OFFSET({field})"))
    }

    /// `SIZE(struct)=` (decimal).
    pub fn size(&self, name: &str) -> Result<u64, KernelLogError> {
        self.decimal(&format!("SIZE({name})"))
    }

    /// `NUMBER(name)=` (decimal, printed signed by the kernel).
    pub fn number(&self, name: &str) -> Result<i64, KernelLogError> {
        let key = format!("NUMBER({name})");
        let v = self.required(&key)?;
        v.parse().map_err(|_| Self::bad(&key, v))
    }

    fn decimal(&self, key: &str) -> Result<u64, KernelLogError> {
        let v = self.required(key)?;
        v.parse().map_err(|_| Self::bad(key, v))
    }

    /// `OSRELEASE=`, the kernel's release string.
    pub fn os_release(&self) -> Option<&str> {
        self.get("OSRELEASE")
    }
}

/// A stopped guest's memory, and its VMCOREINFO once a reader asked for
/// it: the kernel log's and the modules' readers of one guest scan its RAM
/// once between them.
pub struct StoppedGuest<'a> {
    mem: &'a dyn PhysMemory,
    info: OnceCell<Result<VmcoreInfo, KernelLogError>>,
}

impl<'a> StoppedGuest<'a> {
    /// The guest whose memory is `mem`; nothing is read yet.
    pub fn new(mem: &'a dyn PhysMemory) -> Self {
        Self {
            mem,
            info: OnceCell::new(),
        }
    }

    /// The guest's memory.
    pub fn memory(&self) -> &'a dyn PhysMemory {
        self.mem
    }

    /// The guest's VMCOREINFO ([`find`] at the first call; what it found,
    /// or why not, at every later one).
    pub fn vmcoreinfo(&self) -> Result<&VmcoreInfo, KernelLogError> {
        self.info
            .get_or_init(|| find(self.mem))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Finds the VMCOREINFO text in guest memory: the first `SYMBOL(prb)=` whose
/// text starts with `OSRELEASE=` within a page before it.
pub fn find(mem: &dyn PhysMemory) -> Result<VmcoreInfo, KernelLogError> {
    let finder = regex::bytes::Regex::new(r"SYMBOL\(prb\)=[0-9a-f]+\n").expect("fixed pattern");
    let mut buf = vec![0u8; SCAN_CHUNK + MAX_LEN];
    for (start, len) in mem.ranges() {
        let mut at = start;
        while at < start + len {
            // Overlap by a page so a text across two pieces is seen whole.
            let take = ((start + len - at) as usize).min(buf.len());
            if !mem.read_phys(at, &mut buf[..take]) {
                break;
            }
            for m in finder.find_iter(&buf[..take]) {
                if let Some(text) = text_around(&buf[..take], m.start()) {
                    return Ok(VmcoreInfo::parse(&text));
                }
            }
            at += SCAN_CHUNK as u64;
        }
    }
    Err(KernelLogError::NoVmcoreInfo)
}

/// The whole text around a `SYMBOL(prb)=` found at `hit`: from the
/// `OSRELEASE=` before it to the terminating NUL.
fn text_around(buf: &[u8], hit: usize) -> Option<String> {
    debug_assert!(buf[hit..].starts_with(NEEDLE));
    let from = hit.saturating_sub(MAX_LEN);
    let begin = from
        + buf[from..hit]
            .windows(FIRST_KEY.len())
            .rposition(|w| w == FIRST_KEY)?;
    // A real text starts a line: at the buffer start or after a NUL/newline
    // is not guaranteed, but a NUL must end it within a page.
    let end_limit = (begin + MAX_LEN).min(buf.len());
    let end = begin + buf[begin..end_limit].iter().position(|&b| b == 0)?;
    std::str::from_utf8(&buf[begin..end])
        .ok()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::super::phys::tests::FlatMemory;
    use super::*;

    pub(crate) const SAMPLE: &str = "OSRELEASE=6.1.0-56-amd64\nPAGESIZE=4096\n\
SYMBOL(prb)=ffffffff9a8b2c40\nSIZE(printk_info)=88\nOFFSET(printk_info.ts_nsec)=8\n\
NUMBER(phys_base)=-2147483648\nKERNELOFFSET=19000000\n";

    #[test]
    fn parses_symbols_offsets_sizes_and_numbers() {
        let v = VmcoreInfo::parse(SAMPLE);
        assert_eq!(v.symbol("prb").unwrap(), 0xffff_ffff_9a8b_2c40);
        assert_eq!(v.size("printk_info").unwrap(), 88);
        assert_eq!(v.offset("printk_info.ts_nsec").unwrap(), 8);
        assert_eq!(v.number("phys_base").unwrap(), -2147483648);
        assert_eq!(v.os_release(), Some("6.1.0-56-amd64"));
        assert!(matches!(
            v.symbol("log_buf"),
            Err(KernelLogError::MissingKey { .. })
        ));
        let bad = VmcoreInfo::parse("SIZE(x)=12a\n");
        assert!(matches!(
            bad.size("x"),
            Err(KernelLogError::BadValue { .. })
        ));
    }

    #[test]
    fn finds_the_text_in_memory_across_a_chunk_boundary() {
        let mut mem = FlatMemory::new(3 << 20);
        // Straddle the first scan piece's end.
        let at = (SCAN_CHUNK - 40) as u64;
        mem.write(at, SAMPLE.as_bytes());
        let v = find(&mem).unwrap();
        assert_eq!(v.size("printk_info").unwrap(), 88);
    }

    /// Guest memory that counts the scans of it (each scan asks for its
    /// ranges once).
    struct CountedScans {
        mem: FlatMemory,
        scans: std::cell::Cell<u32>,
    }

    impl PhysMemory for CountedScans {
        fn read_phys(&self, gpa: u64, buf: &mut [u8]) -> bool {
            self.mem.read_phys(gpa, buf)
        }
        fn ranges(&self) -> Vec<(u64, u64)> {
            self.scans.set(self.scans.get() + 1);
            self.mem.ranges()
        }
    }

    #[test]
    fn a_stopped_guest_is_scanned_once_for_every_reader() {
        let mut mem = FlatMemory::new(2 << 20);
        mem.write(0x10_0000, SAMPLE.as_bytes());
        let counted = CountedScans {
            mem,
            scans: std::cell::Cell::new(0),
        };
        let guest = StoppedGuest::new(&counted);
        assert_eq!(
            counted.scans.get(),
            0,
            "nothing is read before a reader asks"
        );
        let first = guest.vmcoreinfo().unwrap().clone();
        assert_eq!(first.size("printk_info").unwrap(), 88);
        assert_eq!(guest.vmcoreinfo().unwrap(), &first);
        assert_eq!(counted.scans.get(), 1);
        // Memory without one: the same answer at every ask, from one scan.
        let empty = CountedScans {
            mem: FlatMemory::new(1 << 20),
            scans: std::cell::Cell::new(0),
        };
        let guest = StoppedGuest::new(&empty);
        for _ in 0..2 {
            assert!(matches!(
                guest.vmcoreinfo(),
                Err(KernelLogError::NoVmcoreInfo)
            ));
        }
        assert_eq!(empty.scans.get(), 1);
    }

    #[test]
    fn a_lone_format_string_is_not_vmcoreinfo() {
        let mut mem = FlatMemory::new(1 << 20);
        mem.write(4096, b"SYMBOL(prb)=ffff\n and no release before it\0");
        assert!(matches!(find(&mem), Err(KernelLogError::NoVmcoreInfo)));
    }
}
