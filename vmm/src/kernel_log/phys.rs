//! Reading a stopped guest's memory: by guest-physical address, and by
//! kernel virtual address through the kernel's own page tables
//! (`init_top_pgt`, whose physical address follows from `phys_base`).

use std::cell::RefCell;
use std::collections::HashMap;

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Guest-physical memory, read only.
pub trait PhysMemory {
    /// Fills `buf` from guest-physical `gpa`; false when any byte is outside
    /// guest RAM.
    fn read_phys(&self, gpa: u64, buf: &mut [u8]) -> bool;
    /// The RAM ranges (start, length).
    fn ranges(&self) -> Vec<(u64, u64)>;
}

impl PhysMemory for GuestMemoryMmap {
    fn read_phys(&self, gpa: u64, buf: &mut [u8]) -> bool {
        self.read_slice(buf, GuestAddress(gpa)).is_ok()
    }

    fn ranges(&self) -> Vec<(u64, u64)> {
        self.iter().map(|r| (r.start_addr().0, r.len())).collect()
    }
}

/// Where the kernel image is mapped (`__START_KERNEL_map`): a kernel-image
/// virtual address is `phys + KERNEL_MAP - phys_base`.
pub const KERNEL_MAP: u64 = 0xffff_ffff_8000_0000;
const PAGE: u64 = 4096;
/// Physical address bits of a page-table entry (51:12).
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
const PRESENT: u64 = 1;
const HUGE: u64 = 1 << 7;

/// Kernel virtual memory of a stopped x86-64 guest, translated through
/// its page tables.
pub struct KernelVirt<'a> {
    mem: &'a dyn PhysMemory,
    root: u64,
    five_level: bool,
    /// Bits of an entry that are not address (AMD SME's C-bit).
    sme_mask: u64,
    cache: RefCell<HashMap<u64, Option<u64>>>,
}

impl<'a> KernelVirt<'a> {
    /// `init_top_pgt` is the kernel-image virtual address of the top-level
    /// page table; `phys_base` the kernel's physical load offset.
    pub fn new(
        mem: &'a dyn PhysMemory,
        init_top_pgt: u64,
        phys_base: i64,
        five_level: bool,
        sme_mask: u64,
    ) -> Self {
        Self {
            mem,
            root: image_to_phys(init_top_pgt, phys_base),
            five_level,
            sme_mask,
            cache: RefCell::new(HashMap::new()),
        }
    }

    fn entry(&self, table: u64, index: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.mem
            .read_phys(table + index * 8, &mut b)
            .then(|| u64::from_le_bytes(b))
    }

    /// The guest-physical address of `va`, or None when it is not mapped.
    pub fn translate(&self, va: u64) -> Option<u64> {
        let page = va & !(PAGE - 1);
        let cached = *self
            .cache
            .borrow_mut()
            .entry(page)
            .or_insert_with(|| self.walk(page));
        cached.map(|p| p | (va & (PAGE - 1)))
    }

    fn walk(&self, va: u64) -> Option<u64> {
        let shifts: &[u32] = if self.five_level {
            &[48, 39, 30, 21, 12]
        } else {
            &[39, 30, 21, 12]
        };
        let mut table = self.root;
        for &shift in shifts {
            let e = self.entry(table, (va >> shift) & 0x1ff)?;
            if e & PRESENT == 0 {
                return None;
            }
            let addr = e & ADDR_MASK & !self.sme_mask;
            if shift == 12 {
                return Some(addr);
            }
            if (shift == 21 || shift == 30) && e & HUGE != 0 {
                let span = (1u64 << shift) - 1;
                return Some((addr & !span) | (va & span));
            }
            table = addr;
        }
        None
    }

    /// Reads `buf.len()` bytes at kernel virtual `va`, page by page.
    pub fn read(&self, va: u64, buf: &mut [u8]) -> bool {
        let mut done = 0usize;
        while done < buf.len() {
            let at = va.wrapping_add(done as u64);
            let in_page = (PAGE - (at & (PAGE - 1))) as usize;
            let n = in_page.min(buf.len() - done);
            match self.translate(at) {
                Some(pa) if self.mem.read_phys(pa, &mut buf[done..done + n]) => done += n,
                _ => return false,
            }
        }
        true
    }

    pub fn u64_at(&self, va: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(va, &mut b).then(|| u64::from_le_bytes(b))
    }

    pub fn u32_at(&self, va: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(va, &mut b).then(|| u32::from_le_bytes(b))
    }
}

/// Guest-physical address of a kernel-image virtual address.
pub fn image_to_phys(va: u64, phys_base: i64) -> u64 {
    va.wrapping_sub(KERNEL_MAP).wrapping_add(phys_base as u64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Guest RAM as one vector from physical address 0.
    pub(crate) struct FlatMemory(pub Vec<u8>);

    impl FlatMemory {
        pub fn new(len: usize) -> Self {
            Self(vec![0; len])
        }
        pub fn write(&mut self, at: u64, bytes: &[u8]) {
            self.0[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
        }
        pub fn write_u64(&mut self, at: u64, v: u64) {
            self.write(at, &v.to_le_bytes());
        }
    }

    impl PhysMemory for FlatMemory {
        fn read_phys(&self, gpa: u64, buf: &mut [u8]) -> bool {
            let Some(src) = self.0.get(gpa as usize..gpa as usize + buf.len()) else {
                return false;
            };
            buf.copy_from_slice(src);
            true
        }
        fn ranges(&self) -> Vec<(u64, u64)> {
            vec![(0, self.0.len() as u64)]
        }
    }

    /// Page tables at 0x1000.. mapping `va` (4 KiB) to `pa`, and a 2 MiB
    /// page at `va2m` to `pa2m`: the top table at 0x1000.
    pub(crate) fn map(mem: &mut FlatMemory, next_table: &mut u64, root: u64, va: u64, pa: u64) {
        let mut table = root;
        for shift in [39u32, 30, 21] {
            let slot = table + ((va >> shift) & 0x1ff) * 8;
            let mut b = [0u8; 8];
            mem.read_phys(slot, &mut b);
            let e = u64::from_le_bytes(b);
            table = if e & PRESENT != 0 {
                e & ADDR_MASK
            } else {
                let t = *next_table;
                *next_table += PAGE;
                mem.write_u64(slot, t | 3);
                t
            };
        }
        mem.write_u64(table + ((va >> 12) & 0x1ff) * 8, pa | 3);
    }

    #[test]
    fn walks_four_levels_and_huge_pages() {
        let mut mem = FlatMemory::new(1 << 22);
        let root = 0x1000;
        let mut next = 0x2000;
        let va = 0xffff_8880_0012_3000u64;
        map(&mut mem, &mut next, root, va, 0x30_0000);
        mem.write(0x30_0010, b"hello");
        // A 2 MiB page in the PD of another address.
        let va2 = 0xffff_ffff_8100_0000u64;
        let mut t = root;
        for shift in [39u32, 30] {
            let slot = t + ((va2 >> shift) & 0x1ff) * 8;
            let nt = next;
            next += PAGE;
            mem.write_u64(slot, nt | 3);
            t = nt;
        }
        mem.write_u64(t + ((va2 >> 21) & 0x1ff) * 8, 0x20_0000 | 3 | HUGE);
        // init_top_pgt at root: its image address with phys_base 0.
        let kv = KernelVirt::new(&mem, KERNEL_MAP + root, 0, false, 0);
        let mut b = [0u8; 5];
        assert!(kv.read(va + 0x10, &mut b));
        assert_eq!(&b, b"hello");
        assert_eq!(kv.translate(va2 + 0x1234), Some(0x20_1234));
        assert_eq!(kv.translate(0xffff_c900_0000_0000), None);
        assert!(!kv.read(va + 0xff0, &mut [0u8; 32]), "next page unmapped");
    }
}
