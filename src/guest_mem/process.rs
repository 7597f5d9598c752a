//! Guest-physical memory of another process (the traced VMM), read only:
//! `pread` of `/proc/PID/mem` opened read-only, through the VM's memory
//! slots. Every read is bounded (one call at most [`MAX_READ`] bytes, a
//! pass at most a budget in all) and soft-failing: a refused read, an
//! address outside the slots or a spent budget is a `false`, never a
//! panic. Nothing is ever written.

use std::cell::Cell;
use std::fs::File;
use std::os::unix::fs::FileExt;

use bootscope_model::guest_read::MemorySlot;
use bootscope_vmm::kernel_log::phys::PhysMemory;

/// The most one call reads (the VMCOREINFO scan reads 1 MiB pieces and a
/// page more).
pub const MAX_READ: usize = (1 << 20) + 8192;

/// The VMM's memory as its guest sees it.
pub struct ProcessMemory {
    file: File,
    /// `/proc/PID/pagemap`, for which pages the VMM has touched.
    pagemap: Option<File>,
    slots: Vec<MemorySlot>,
    /// Where a scan for the kernel's data looks (all RAM slots if None).
    scan: Option<Vec<(u64, u64)>>,
    budget: Cell<u64>,
    read: Cell<u64>,
    failed: Cell<u64>,
}

impl ProcessMemory {
    /// Opens `pid`'s memory read-only; `budget` bytes may be read in all.
    pub fn open(pid: u32, slots: Vec<MemorySlot>, budget: u64) -> std::io::Result<Self> {
        let file = File::open(format!("/proc/{pid}/mem"))?;
        let pagemap = File::open(format!("/proc/{pid}/pagemap")).ok();
        Ok(Self {
            file,
            pagemap,
            slots,
            scan: None,
            budget: Cell::new(budget),
            read: Cell::new(0),
            failed: Cell::new(0),
        })
    }

    /// Scans for the kernel's data only in `ranges` (guest-physical).
    pub fn scan_only(&mut self, ranges: Vec<(u64, u64)>) {
        self.scan = Some(ranges);
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.get()
    }

    /// Reads refused or outside the slots so far.
    pub fn failed_reads(&self) -> u64 {
        self.failed.get()
    }

    /// False when no page of guest-physical `[gpa, gpa + len)` was ever
    /// touched (present or swapped in the VMM, by `/proc/PID/pagemap`):
    /// it reads as zeros, and a scan need not read it. True when unsure.
    pub fn touched(&self, gpa: u64, len: u64) -> bool {
        let Some(pm) = &self.pagemap else { return true };
        let Some(s) = self.slots.iter().find(|s| s.hva_of(gpa, 1).is_some()) else {
            return true;
        };
        let hva = s.hva + (gpa - s.gpa);
        let len = len.min(s.gpa + s.size - gpa);
        let pages = len.div_ceil(4096) as usize;
        let mut b = vec![0u8; pages * 8];
        if pm.read_exact_at(&mut b, hva / 4096 * 8).is_err() {
            return true;
        }
        b.chunks_exact(8).any(|e| {
            let v = u64::from_le_bytes(e.try_into().expect("8 bytes"));
            v & (3 << 62) != 0
        })
    }

    /// Which 4 KiB pages from guest-physical `gpa` (page aligned) the VMM
    /// has touched, for `pages` pages inside one slot; None when unknown.
    fn present(&self, gpa: u64, pages: usize) -> Option<Vec<bool>> {
        let pm = self.pagemap.as_ref()?;
        let s = self
            .slots
            .iter()
            .find(|s| s.hva_of(gpa, pages as u64 * 4096).is_some())?;
        let hva = s.hva + (gpa - s.gpa);
        let mut b = vec![0u8; pages * 8];
        pm.read_exact_at(&mut b, hva / 4096 * 8).ok()?;
        Some(
            b.chunks_exact(8)
                .map(|e| u64::from_le_bytes(e.try_into().expect("8 bytes")) & (3 << 62) != 0)
                .collect(),
        )
    }

    /// For scans: fills `buf` from guest-physical `gpa`, reading only the
    /// pages the VMM has touched (the others are zeros: reading them
    /// would only map the zero page, and with transparent huge pages a
    /// huge one that makes the next pages look touched); false when none
    /// of them was.
    pub fn read_touched(&self, gpa: u64, buf: &mut [u8]) -> bool {
        let aligned = gpa % 4096 == 0 && buf.len() % 4096 == 0;
        let Some(present) = aligned
            .then(|| self.present(gpa, buf.len() / 4096))
            .flatten()
        else {
            return self.read_phys(gpa, buf);
        };
        if !present.iter().any(|&p| p) {
            return false;
        }
        let mut i = 0;
        while i < present.len() {
            let run = present[i..]
                .iter()
                .take_while(|&&p| p == present[i])
                .count();
            let part = &mut buf[i * 4096..(i + run) * 4096];
            if present[i] {
                if !self.read_phys(gpa + i as u64 * 4096, part) {
                    return false;
                }
            } else {
                part.fill(0);
            }
            i += run;
        }
        true
    }

    /// Reads `buf` at the VMM's virtual `hva`.
    pub fn read_virt(&self, hva: u64, buf: &mut [u8]) -> bool {
        let len = buf.len() as u64;
        if buf.len() > MAX_READ || self.budget.get() < len {
            self.failed.set(self.failed.get() + 1);
            return false;
        }
        self.budget.set(self.budget.get() - len);
        match self.file.read_exact_at(buf, hva) {
            Ok(()) => {
                self.read.set(self.read.get() + len);
                true
            }
            Err(_) => {
                self.failed.set(self.failed.get() + 1);
                false
            }
        }
    }
}

impl PhysMemory for ProcessMemory {
    fn read_phys(&self, gpa: u64, buf: &mut [u8]) -> bool {
        // A read may run from one slot into the next adjacent one.
        let mut done = 0usize;
        while done < buf.len() {
            let at = gpa.saturating_add(done as u64);
            let Some(s) = self.slots.iter().find(|s| s.hva_of(at, 1).is_some()) else {
                self.failed.set(self.failed.get() + 1);
                return false;
            };
            let left_in_slot = (s.gpa + s.size - at) as usize;
            let n = left_in_slot.min(buf.len() - done);
            let hva = s.hva + (at - s.gpa);
            if !self.read_virt(hva, &mut buf[done..done + n]) {
                return false;
            }
            done += n;
        }
        true
    }

    fn ranges(&self) -> Vec<(u64, u64)> {
        if let Some(r) = &self.scan {
            return r.clone();
        }
        self.slots
            .iter()
            .filter(|s| s.kind == "ram")
            .map(|s| (s.gpa, s.size))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's own memory, as a "guest" of two slots over one
    /// buffer split in two out of order.
    #[test]
    fn reads_go_through_the_slots_and_stop_at_their_ends_and_the_budget() {
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let base = data.as_ptr() as u64;
        let slot = |n: u32, gpa: u64, off: u64| MemorySlot {
            slot: n,
            gpa,
            size: 4096,
            hva: base + off,
            kind: "ram".into(),
            ..MemorySlot::default()
        };
        let slots = vec![slot(0, 0x1000, 0), slot(1, 0x2000, 4096)];
        let m = ProcessMemory::open(std::process::id(), slots, 10_000).unwrap();
        let mut b = [0u8; 16];
        assert!(m.read_phys(0x1ff8, &mut b), "across the two slots");
        assert_eq!(&b[..], &data[4088..4104]);
        // The 8 bytes in the slot are read, the rest is not.
        assert!(!m.read_phys(0x2ff8, &mut b), "past the last slot");
        assert!(!m.read_phys(0x0, &mut b), "below the first");
        assert_eq!(m.ranges(), vec![(0x1000, 4096), (0x2000, 4096)]);
        let mut big = vec![0u8; 8000];
        assert!(m.read_phys(0x1000, &mut big));
        assert_eq!(&big[..], &data[..8000]);
        // 16 + 8 + 8000 of 10,000 read: 1,976 left.
        assert!(!m.read_phys(0x1000, &mut vec![0u8; 3000]), "budget spent");
        assert!(m.read_phys(0x1000, &mut vec![0u8; 1000]));
        assert_eq!(m.bytes_read(), 16 + 8 + 8000 + 1000);
        assert_eq!(m.failed_reads(), 3);
        // Its pages are all touched; a fresh mapping's are not.
        assert!(m.touched(0x1000, 8192));
        // SAFETY: an anonymous private mapping of 1 MiB, unmapped below.
        let fresh = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                1 << 20,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(fresh, libc::MAP_FAILED);
        let s = vec![MemorySlot {
            size: 1 << 20,
            hva: fresh as u64,
            kind: "ram".into(),
            ..MemorySlot::default()
        }];
        let f = ProcessMemory::open(std::process::id(), s, 1 << 20).unwrap();
        assert!(!f.touched(0x8_0000, 4096), "a page never touched");
        // SAFETY: the page is in the mapping made above.
        unsafe { *(fresh as *mut u8).add(0x8_0000) = 1 };
        assert!(f.touched(0x7_f000, 8192), "a page written");
        let mut two = vec![0xffu8; 3 * 4096];
        assert!(f.read_touched(0x7_f000, &mut two));
        assert_eq!(two[4096], 1);
        assert!(two[..4096].iter().all(|&b| b == 0));
        assert!(!f.read_touched(0x1000, &mut two), "none touched");
        assert_eq!(f.bytes_read(), 4096, "only the touched page read");
        // SAFETY: the mapping made above, not used after.
        unsafe { libc::munmap(fresh, 1 << 20) };
        // An address the process has not mapped is a refused read.
        let s = vec![slot(0, 0, 0)];
        let mut none = ProcessMemory::open(std::process::id(), s, 1 << 20).unwrap();
        none.slots[0].hva = 8;
        assert!(!none.read_phys(0, &mut b));
    }
}
