//! The traced VM's memory slots (guest-physical to the VMM's virtual
//! addresses): as the VMM set them (`KVM_SET_USER_MEMORY_REGION(2)`, seen
//! by eBPF), or inferred from `/proc/PID/maps` by finding the mapping that
//! holds the guest kernel's VMCOREINFO and checking that the kernel's own
//! page tables translate consistently through it.

use bootscope_model::guest_read::{GuestMemoryMap, MemorySlot};
use bootscope_profiler::BsMemslot;
use bootscope_vmm::kernel_log::phys::{image_to_phys, KernelVirt, PhysMemory};
use bootscope_vmm::kernel_log::vmcoreinfo::VmcoreInfo;

use super::process::ProcessMemory;

/// `KVM_MEM_READONLY`.
const KVM_MEM_READONLY: u32 = 2;
/// The smallest mapping taken for guest RAM when inferring.
const MIN_RAM: u64 = 16 << 20;
/// The most one inference reads in all.
const INFER_BUDGET: u64 = 4 << 30;
/// The key that marks a VMCOREINFO text with the printk ring in it, and
/// the first key of every VMCOREINFO text.
const NEEDLE: &[u8] = b"SYMBOL(prb)=";
const FIRST_KEY: &[u8] = b"OSRELEASE=";
const PIECE: usize = 1 << 20;
const PAGE: usize = 4096;

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub path: String,
}

/// Parses `/proc/PID/maps` text.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let path = f.nth(3).map(str::to_string).unwrap_or_default();
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms: perms.to_string(),
                path,
            })
        })
        .collect()
}

/// `/proc/PID/maps`, parsed (empty when unreadable).
pub fn read_maps(pid: u32) -> Vec<Mapping> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|t| parse_maps(&t))
        .unwrap_or_default()
}

/// What backs guest memory at `hva`: `ram`, or `device` for a device's
/// mapping (a file under /dev other than hugepages and shared memory).
fn kind_and_backing(maps: &[Mapping], hva: u64, flags: u32) -> (String, String) {
    let backing = maps
        .iter()
        .find(|m| m.start <= hva && hva < m.end)
        .map_or_else(String::new, |m| {
            if m.path.is_empty() {
                "[anon]".to_string()
            } else {
                m.path.clone()
            }
        });
    let device = backing.starts_with("/dev/")
        && !backing.starts_with("/dev/hugepages")
        && !backing.starts_with("/dev/shm");
    let kind = if flags & KVM_MEM_READONLY != 0 {
        "rom"
    } else if device {
        "device"
    } else {
        "ram"
    };
    (kind.to_string(), backing)
}

/// The slots the VMM set (a size of 0 deletes a slot).
pub fn from_ioctls(captured: &[BsMemslot], maps: &[Mapping]) -> GuestMemoryMap {
    let slots: Vec<MemorySlot> = captured
        .iter()
        .filter(|s| s.size > 0)
        .map(|s| {
            let (kind, backing) = kind_and_backing(maps, s.uaddr, s.flags);
            MemorySlot {
                slot: s.slot,
                flags: s.flags,
                gpa: s.gpa,
                size: s.size,
                hva: s.uaddr,
                kind,
                backing,
            }
        })
        .collect();
    let calls: u64 = captured.iter().map(|s| s.calls).sum();
    GuestMemoryMap {
        source: "ioctl".into(),
        detail: format!(
            "{calls} KVM_SET_USER_MEMORY_REGION(2) call(s) seen, {} slot(s) in use",
            slots.len()
        ),
        slots,
    }
}

/// Where VMCOREINFO was found: its text and its offset in what was read.
pub struct Found {
    pub info: VmcoreInfo,
    pub offset: u64,
}

/// Finds the VMCOREINFO text in `len` bytes read by `read(offset, buf)`.
pub fn scan(len: u64, mut read: impl FnMut(u64, &mut [u8]) -> bool) -> Option<Found> {
    let mut buf = vec![0u8; PIECE + PAGE];
    let mut at = 0u64;
    while at < len {
        let take = ((len - at) as usize).min(buf.len());
        if !read(at, &mut buf[..take]) {
            at += PIECE as u64;
            continue;
        }
        let hay = &buf[..take];
        let mut from = 0;
        while let Some(i) = find(&hay[from..], NEEDLE) {
            let hit = from + i;
            if let Some((begin, text)) = text_around(hay, hit) {
                return Some(Found {
                    info: VmcoreInfo::parse(&text),
                    offset: at + begin as u64,
                });
            }
            from = hit + 1;
        }
        at += PIECE as u64;
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The text from the `OSRELEASE=` before `hit` to its NUL, and its start.
fn text_around(buf: &[u8], hit: usize) -> Option<(usize, String)> {
    let from = hit.saturating_sub(PAGE);
    let begin = from
        + buf[from..hit]
            .windows(FIRST_KEY.len())
            .rposition(|w| w == FIRST_KEY)?;
    let limit = (begin + PAGE).min(buf.len());
    let end = begin + buf[begin..limit].iter().position(|&b| b == 0)?;
    let text = std::str::from_utf8(&buf[begin..end]).ok()?;
    // A hex value after the key, as the kernel prints it.
    let after = &buf[hit + NEEDLE.len()..end.max(hit + NEEDLE.len())];
    after.first().filter(|b| b.is_ascii_hexdigit())?;
    Some((begin, text.to_string()))
}

/// True when the kernel's page tables, read through `mem`, map the kernel
/// image where VMCOREINFO says it is: `init_top_pgt` translates to its
/// own physical address.
pub fn consistent(mem: &dyn PhysMemory, info: &VmcoreInfo) -> bool {
    let (Ok(top), Ok(base)) = (info.symbol("init_top_pgt"), info.number("phys_base")) else {
        return false;
    };
    let l5 = info.number("pgtable_l5_enabled").unwrap_or(0) != 0;
    let sme = info.number("sme_mask").unwrap_or(0) as u64;
    let kv = KernelVirt::new(mem, top, base, l5, sme);
    kv.translate(top) == Some(image_to_phys(top, base))
}

/// Infers the map of process `pid`: the largest writable mappings are
/// searched for VMCOREINFO; the one holding it is taken as guest RAM from
/// guest-physical 0 when the kernel's page tables agree. Also gives the
/// guest-physical address of the text.
pub fn infer(pid: u32, maps: &[Mapping]) -> (GuestMemoryMap, Option<u64>) {
    let mut candidates: Vec<&Mapping> = maps
        .iter()
        .filter(|m| m.perms.starts_with("rw") && m.end - m.start >= MIN_RAM)
        .filter(|m| !m.path.starts_with('['))
        .collect();
    candidates.sort_by_key(|m| std::cmp::Reverse(m.end - m.start));
    let none = |detail: String| GuestMemoryMap {
        source: "none".into(),
        detail,
        slots: Vec::new(),
    };
    if candidates.is_empty() {
        return (
            none(format!(
                "process {pid} has no writable mapping of {} MiB or more that could be guest RAM",
                MIN_RAM >> 20
            )),
            None,
        );
    }
    let mut searched = 0;
    for m in &candidates {
        let size = m.end - m.start;
        let (kind, backing) = kind_and_backing(maps, m.start, 0);
        let slot = MemorySlot {
            slot: 0,
            flags: 0,
            gpa: 0,
            size,
            hva: m.start,
            kind,
            backing,
        };
        let Ok(mem) = ProcessMemory::open(pid, vec![slot.clone()], INFER_BUDGET) else {
            return (
                none(format!(
                    "cannot open /proc/{pid}/mem for reading (it needs the privilege to trace \
                     the process: root, or CAP_SYS_PTRACE)"
                )),
                None,
            );
        };
        searched += 1;
        let Some(found) = scan(size, |off, buf| mem.read_touched(off, buf)) else {
            continue;
        };
        if consistent(&mem, &found.info) {
            let map = GuestMemoryMap {
                source: "inferred".into(),
                detail: format!(
                    "inferred from /proc/{pid}/maps: the mapping at {:#x} ({} MiB) holds the \
                     kernel's VMCOREINFO and its page tables translate through it from \
                     guest-physical 0 (RAM above a 32-bit hole, if any, is not mapped)",
                    m.start,
                    size >> 20
                ),
                slots: vec![slot],
            };
            return (map, Some(found.offset));
        }
    }
    (
        none(format!(
            "not learned: none of the {searched} large writable mapping(s) of process {pid} \
             holds a guest kernel's VMCOREINFO whose page tables translate through it (the \
             kernel may lack CONFIG_CRASH_CORE or not have built it yet); profile the VMM from \
             its start to see its KVM_SET_USER_MEMORY_REGION calls"
        )),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_parsed_and_slots_labelled_by_what_backs_them() {
        let text = "7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n\
7f0040000000-7f0040200000 rw-s 00000000 00:05 12 /memfd:pc.ram (deleted)\n\
7f0050000000-7f0050001000 rw-s 00000000 00:05 13 /dev/vfio/7\n\
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[1].path, "/memfd:pc.ram");
        assert_eq!(maps[0].path, "");
        let s = |slot, flags, gpa, uaddr| BsMemslot {
            slot,
            flags,
            gpa,
            size: 0x1000,
            uaddr,
            ts_ns: 0,
            calls: 1,
        };
        let mut deleted = s(9, 0, 0, 0);
        deleted.size = 0;
        let map = from_ioctls(
            &[
                s(0, 0, 0, 0x7f00_0000_1000),
                s(1, 2, 0xfffc_0000, 0x7f00_4000_0000),
                s(2, 0, 0xe000_0000, 0x7f00_5000_0000),
                deleted,
            ],
            &maps,
        );
        let kinds: Vec<(&str, &str)> = map
            .slots
            .iter()
            .map(|s| (s.kind.as_str(), s.backing.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("ram", "[anon]"),
                ("rom", "/memfd:pc.ram"),
                ("device", "/dev/vfio/7")
            ]
        );
        assert_eq!(map.source, "ioctl");
        assert!(map.detail.starts_with("4 KVM_SET"), "{}", map.detail);
    }

    #[test]
    fn the_vmcoreinfo_text_is_found_across_pieces_and_a_bare_key_is_not() {
        let mut mem = vec![0u8; 3 << 20];
        let text = b"OSRELEASE=6.1.0\nSYMBOL(prb)=ffffffff82000000\nNUMBER(phys_base)=0\n\0";
        // A format string is not a text.
        mem[100..118].copy_from_slice(b"OSRELEASE=SYMBOL(p");
        mem[200..213].copy_from_slice(b"SYMBOL(prb)=%");
        let at = PIECE - 20;
        mem[at..at + text.len()].copy_from_slice(text);
        let f = scan(mem.len() as u64, |off, buf| {
            let o = off as usize;
            buf.copy_from_slice(&mem[o..o + buf.len()]);
            true
        })
        .unwrap();
        assert_eq!(f.offset, at as u64);
        assert_eq!(f.info.os_release(), Some("6.1.0"));
        assert!(scan(1 << 20, |_, _| false).is_none());
    }
}
