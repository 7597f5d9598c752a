//! The kernel's `struct boot_params` (the "zero page") in guest RAM: the
//! VMM's copy and the kernel's own (page aligned in its image), each a
//! page with the setup header's `boot_flag` 0xAA55 and `HdrS` magic and a
//! filled e820 table. From it: the command line and the e820 map.

use bootscope_model::guest_read::{e820_name, BootParamsRead, E820Entry};
use bootscope_vmm::kernel_log::phys::PhysMemory;

const PAGE: u64 = 4096;
pub(super) const BOOT_FLAG: usize = 0x1fe;
pub(super) const HEADER: usize = 0x202;
pub(super) const E820_ENTRIES: usize = 0x1e8;
pub(super) const E820_TABLE: usize = 0x2d0;
const E820_MAX: usize = 128;
pub(super) const CMD_LINE_PTR: usize = 0x228;
const EXT_CMD_LINE_PTR: usize = 0x0c8;
const CMDLINE_SIZE: usize = 0x238;
/// The longest command line read.
const MAX_CMDLINE: usize = 4096;
const PIECE: u64 = 1 << 20;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The first `n` entries of the page's e820 table, as they are.
fn entries(page: &[u8], n: usize) -> Vec<E820Entry> {
    (0..n)
        .map(|i| {
            let at = E820_TABLE + i * 20;
            let kind = u32_at(page, at + 16);
            E820Entry {
                addr: u64_at(page, at),
                size: u64_at(page, at + 8),
                kind,
                name: e820_name(kind),
            }
        })
        .collect()
}

/// The boot parameters in one page, if it holds them (the setup header's
/// boot flag and magic, and a filled e820 table).
pub fn parse_page(page: &[u8]) -> Option<(Vec<E820Entry>, u64, usize)> {
    if page.len() < PAGE as usize
        || page[BOOT_FLAG..BOOT_FLAG + 2] != [0x55, 0xaa]
        || &page[HEADER..HEADER + 4] != b"HdrS"
    {
        return None;
    }
    parse_table(page)
}

/// The e820 table and command line of boot parameters known to be at
/// `page` (the kernel's own copy, by its symbol): a kernel entered at its
/// PVH entry (Cloud Hypervisor, Firecracker, QEMU's PVH boot) fills them
/// from the start info, without a setup header's boot flag or magic.
fn parse_table(page: &[u8]) -> Option<(Vec<E820Entry>, u64, usize)> {
    if page.len() < PAGE as usize {
        return None;
    }
    let n = page[E820_ENTRIES] as usize;
    if n == 0 || n > E820_MAX {
        return None;
    }
    let e820 = entries(page, n);
    // Empty entries are left out (a table sanitized in place can hold
    // them); a table without RAM is not a memory map.
    let e820: Vec<E820Entry> = e820.into_iter().filter(|e| e.size != 0).collect();
    if e820.iter().all(|e| e.kind != 1) {
        return None;
    }
    let cmdline =
        u64::from(u32_at(page, CMD_LINE_PTR)) | (u64::from(u32_at(page, EXT_CMD_LINE_PTR)) << 32);
    let size = (u32_at(page, CMDLINE_SIZE) as usize).clamp(256, MAX_CMDLINE);
    Some((e820, cmdline, size))
}

/// Looks for the boot parameters in `ranges` (guest-physical), page by
/// page; the first found with a command line wins.
pub fn find(mem: &dyn PhysMemory, ranges: &[(u64, u64)]) -> Option<BootParamsRead> {
    let mut buf = vec![0u8; PIECE as usize];
    let mut first: Option<BootParamsRead> = None;
    for &(start, len) in ranges {
        let mut at = start;
        while at < start + len {
            let take = (start + len - at).min(PIECE) as usize;
            if mem.read_phys(at, &mut buf[..take]) {
                for (i, page) in buf[..take].chunks_exact(PAGE as usize).enumerate() {
                    let Some((e820, ptr, size)) = parse_page(page) else {
                        continue;
                    };
                    let cmdline = (ptr != 0).then(|| read_cmdline(mem, ptr, size)).flatten();
                    let found = BootParamsRead {
                        gpa: at + i as u64 * PAGE,
                        cmdline,
                        e820,
                    };
                    if found.cmdline.is_some() {
                        return Some(found);
                    }
                    first.get_or_insert(found);
                }
            }
            at += PIECE;
        }
    }
    first
}

/// The boot parameters in the page at `gpa` (the kernel's own copy, found
/// by its symbol); Err says what the page lacks.
pub fn read_at(mem: &dyn PhysMemory, gpa: u64) -> Result<BootParamsRead, String> {
    let mut page = vec![0u8; PAGE as usize];
    if !mem.read_phys(gpa, &mut page) {
        return Err(format!("its page at {gpa:#x} could not be read"));
    }
    let (e820, ptr, size) = parse_table(&page).ok_or_else(|| {
        let n = page[E820_ENTRIES] as usize;
        let kinds: Vec<String> = entries(&page, n.min(E820_MAX))
            .iter()
            .map(|e| format!("{:#x}+{:#x}:{}", e.addr, e.size, e.kind))
            .collect();
        format!(
            "its page at {gpa:#x} has boot flag {:#06x}, header {:?}, {n} e820 entries \
             (none RAM with a size: {})",
            u16::from_le_bytes([page[BOOT_FLAG], page[BOOT_FLAG + 1]]),
            String::from_utf8_lossy(&page[HEADER..HEADER + 4]),
            kinds.join(" ")
        )
    })?;
    Ok(BootParamsRead {
        gpa,
        cmdline: (ptr != 0).then(|| read_cmdline(mem, ptr, size)).flatten(),
        e820,
    })
}

/// The NUL-terminated command line at `gpa`, at most `size` bytes.
fn read_cmdline(mem: &dyn PhysMemory, gpa: u64, size: usize) -> Option<String> {
    let mut b = vec![0u8; size];
    // Near the end of RAM, a shorter read.
    let got = [size, 256]
        .into_iter()
        .find(|&n| mem.read_phys(gpa, &mut b[..n]))?;
    let end = b[..got].iter().position(|&c| c == 0)?;
    Some(bootscope_model::text::printable(&String::from_utf8_lossy(&b[..end])).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Flat(Vec<u8>);

    impl PhysMemory for Flat {
        fn read_phys(&self, gpa: u64, buf: &mut [u8]) -> bool {
            let Some(s) = self.0.get(gpa as usize..gpa as usize + buf.len()) else {
                return false;
            };
            buf.copy_from_slice(s);
            true
        }
        fn ranges(&self) -> Vec<(u64, u64)> {
            vec![(0, self.0.len() as u64)]
        }
    }

    #[test]
    fn the_zero_page_gives_the_e820_map_and_the_command_line() {
        let mut m = vec![0u8; 2 << 20];
        let zp = 0x7000;
        let p = &mut m[zp..zp + 4096];
        p[BOOT_FLAG..BOOT_FLAG + 2].copy_from_slice(&[0x55, 0xaa]);
        p[HEADER..HEADER + 4].copy_from_slice(b"HdrS");
        p[E820_ENTRIES] = 2;
        let entry = |p: &mut [u8], i: usize, addr: u64, size: u64, kind: u32| {
            let at = E820_TABLE + i * 20;
            p[at..at + 8].copy_from_slice(&addr.to_le_bytes());
            p[at + 8..at + 16].copy_from_slice(&size.to_le_bytes());
            p[at + 16..at + 20].copy_from_slice(&kind.to_le_bytes());
        };
        entry(p, 0, 0, 0x9fc00, 1);
        entry(p, 1, 0xf0000, 0x10000, 2);
        p[CMD_LINE_PTR..CMD_LINE_PTR + 4].copy_from_slice(&0x20000u32.to_le_bytes());
        m[0x20000..0x20000 + 14].copy_from_slice(b"console=ttyS0\0");
        // The kernel file's own header: no e820 entries, not taken.
        m[0x10000 + BOOT_FLAG..0x10000 + BOOT_FLAG + 2].copy_from_slice(&[0x55, 0xaa]);
        m[0x10000 + HEADER..0x10000 + HEADER + 4].copy_from_slice(b"HdrS");
        let mem = Flat(m);
        let b = find(&mem, &[(0, 2 << 20)]).unwrap();
        assert_eq!(b.gpa, 0x7000);
        assert_eq!(b.cmdline.as_deref(), Some("console=ttyS0"));
        assert_eq!(b.e820.len(), 2);
        assert_eq!(b.e820[1].name, "reserved");
        assert!(find(&mem, &[(0x100000, 1 << 20)]).is_none());
        // The kernel's own copy after a PVH entry: no setup header, found
        // by its symbol only.
        let mut m = mem.0;
        m[zp + BOOT_FLAG..zp + HEADER + 4].fill(0);
        let mem = Flat(m);
        assert!(find(&mem, &[(0, 2 << 20)]).is_none());
        let b = read_at(&mem, zp as u64).unwrap();
        assert_eq!(b.cmdline.as_deref(), Some("console=ttyS0"));
        assert_eq!(b.e820.len(), 2);
        let e = read_at(&mem, 0x10000).unwrap_err();
        assert!(e.contains("0 e820 entries"), "{e}");
        // An empty entry in the table is left out, not a reason to refuse
        // the table.
        let mut m = mem.0;
        m[zp + E820_ENTRIES] = 3;
        let mem = Flat(m);
        let b = read_at(&mem, zp as u64).unwrap();
        assert_eq!(b.e820.len(), 2);
    }
}
