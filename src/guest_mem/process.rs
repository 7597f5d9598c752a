//! Guest-physical memory of another process (the traced VMM), read only:
//! `pread` of `/proc/PID/mem` opened read-only, through the VM's memory
//! slots. Every read is bounded (one call at most [`MAX_READ`] bytes, a
//! pass at most a budget in all) and soft-failing: a refused read, an
//! address outside the slots or a spent budget is a `false`, never a
//! panic. Nothing is ever written.
//!
//! A [`ProcessMemory::copy_touched`] copy holds the pages the VMM had
//! touched, taken while it is held, and reads like the VMM itself after
//! it was continued (or has exited).

use std::cell::Cell;
use std::fs::File;
use std::os::unix::fs::FileExt;

use bootscope_model::guest_read::MemorySlot;
use bootscope_vmm::kernel_log::phys::PhysMemory;

/// The most one call reads (the VMCOREINFO scan reads 1 MiB pieces and a
/// page more).
pub const MAX_READ: usize = (1 << 20) + 8192;

const PAGE: u64 = 4096;

/// Where the bytes come from.
enum Source {
    /// The VMM's memory itself, and `/proc/PID/pagemap` for which pages
    /// it has touched.
    Live { file: File, pagemap: Option<File> },
    /// A copy of the touched pages of its RAM slots.
    Copy(PageCopy),
}

/// Runs of guest-physical pages copied (start, bytes), in address order;
/// a RAM page outside them was untouched (zeros) or not copied.
struct PageCopy {
    runs: Vec<(u64, Vec<u8>)>,
    /// Touched pages left uncopied (start, bytes): reading them fails.
    left: Vec<(u64, u64)>,
}

impl PageCopy {
    /// The run holding `gpa`, and the offset in it.
    fn find(&self, gpa: u64) -> Option<(&[u8], usize)> {
        let i = self
            .runs
            .partition_point(|(s, _)| *s <= gpa)
            .checked_sub(1)?;
        let (start, bytes) = &self.runs[i];
        let off = (gpa - start) as usize;
        (off < bytes.len()).then_some((bytes.as_slice(), off))
    }

    /// Fills `buf` from `gpa`: copied bytes, zeros where nothing was;
    /// false when it overlaps pages left uncopied.
    fn fill(&self, gpa: u64, buf: &mut [u8]) -> bool {
        let end = gpa.saturating_add(buf.len() as u64);
        if self.left.iter().any(|&(s, n)| s < end && gpa < s + n) {
            return false;
        }
        let mut done = 0usize;
        while done < buf.len() {
            let at = gpa + done as u64;
            let page_left = (PAGE - at % PAGE) as usize;
            let n = match self.find(at) {
                Some((run, off)) => {
                    let n = (run.len() - off).min(buf.len() - done);
                    buf[done..done + n].copy_from_slice(&run[off..off + n]);
                    n
                }
                None => {
                    let n = page_left.min(buf.len() - done);
                    buf[done..done + n].fill(0);
                    n
                }
            };
            done += n;
        }
        true
    }

    /// True when the page at `gpa` was touched (copied or left).
    fn touched(&self, gpa: u64) -> bool {
        self.find(gpa).is_some() || self.left.iter().any(|&(s, n)| s <= gpa && gpa < s + n)
    }
}

/// What [`ProcessMemory::copy_touched`] copied.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Bytes copied.
    pub bytes: u64,
    /// Touched pages left uncopied (the budget was spent, or a read was
    /// refused).
    pub pages_left: u64,
}

/// The VMM's memory as its guest sees it.
pub struct ProcessMemory {
    source: Source,
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
            source: Source::Live { file, pagemap },
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
        let pm = match &self.source {
            Source::Live {
                pagemap: Some(pm), ..
            } => pm,
            Source::Live { pagemap: None, .. } => return true,
            Source::Copy(c) => {
                let (first, last) = (gpa / PAGE, gpa.saturating_add(len.max(1) - 1) / PAGE);
                return (first..=last).any(|p| c.touched(p * PAGE));
            }
        };
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
        let pm = match &self.source {
            Source::Live { pagemap, .. } => pagemap.as_ref()?,
            Source::Copy(c) => {
                let page = |i: usize| gpa + i as u64 * PAGE;
                return Some((0..pages).map(|i| c.touched(page(i))).collect());
            }
        };
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
        for (i, run, touched) in runs(&present) {
            let part = &mut buf[i * 4096..(i + run) * 4096];
            if !touched {
                part.fill(0);
            } else if !self.read_phys(gpa + i as u64 * 4096, part) {
                return false;
            }
        }
        true
    }

    /// Takes `len` bytes of the budget; false (a failed read) when spent.
    fn spend(&self, len: usize) -> bool {
        let len = len as u64;
        if len > MAX_READ as u64 || self.budget.get() < len {
            self.failed.set(self.failed.get() + 1);
            return false;
        }
        self.budget.set(self.budget.get() - len);
        true
    }

    /// Reads `buf` at the VMM's virtual `hva` (false for a copy).
    pub fn read_virt(&self, hva: u64, buf: &mut [u8]) -> bool {
        let Source::Live { file, .. } = &self.source else {
            self.failed.set(self.failed.get() + 1);
            return false;
        };
        if !self.spend(buf.len()) {
            return false;
        }
        match file.read_exact_at(buf, hva) {
            Ok(()) => {
                self.read.set(self.read.get() + buf.len() as u64);
                true
            }
            Err(_) => {
                self.failed.set(self.failed.get() + 1);
                false
            }
        }
    }

    /// Reads `buf` at `gpa` in `slot` (the whole of it inside the slot).
    fn read_in_slot(&self, slot: &MemorySlot, gpa: u64, buf: &mut [u8]) -> bool {
        match &self.source {
            Source::Live { .. } => self.read_virt(slot.hva + (gpa - slot.gpa), buf),
            Source::Copy(_) if slot.kind != "ram" => {
                self.failed.set(self.failed.get() + 1);
                false
            }
            Source::Copy(c) => {
                if !self.spend(buf.len()) {
                    return false;
                }
                if !c.fill(gpa, buf) {
                    self.failed.set(self.failed.get() + 1);
                    return false;
                }
                self.read.set(self.read.get() + buf.len() as u64);
                true
            }
        }
    }

    /// Copies `pages` touched pages from `gpa` into `runs`, within what is
    /// left of `budget`.
    fn copy_run(
        &self,
        gpa: u64,
        pages: u64,
        budget: u64,
        copy: &mut PageCopy,
        copied: &mut Copied,
    ) {
        let take = pages.min(budget.saturating_sub(copied.bytes) / PAGE);
        let mut bytes = vec![0u8; (take * PAGE) as usize];
        if take == 0 || !self.read_phys(gpa, &mut bytes) {
            copied.pages_left += pages;
            copy.left.push((gpa, pages * PAGE));
            return;
        }
        copied.bytes += take * PAGE;
        copied.pages_left += pages - take;
        if take < pages {
            copy.left.push((gpa + take * PAGE, (pages - take) * PAGE));
        }
        let runs = &mut copy.runs;
        match runs.last_mut() {
            Some((s, b)) if *s + b.len() as u64 == gpa => b.extend_from_slice(&bytes),
            _ => runs.push((gpa, bytes)),
        }
    }

    /// A copy of the pages of `ranges` (guest-physical RAM, in the order
    /// given) that the VMM has touched, at most `budget` bytes; it reads
    /// with a budget of `read_budget`. Untouched pages read as zeros in the
    /// copy, as in the VMM.
    pub fn copy_touched(
        &self,
        ranges: &[(u64, u64)],
        budget: u64,
        read_budget: u64,
    ) -> (Self, Copied) {
        let mut copy = PageCopy {
            runs: Vec::new(),
            left: Vec::new(),
        };
        let mut copied = Copied::default();
        for &(start, len) in ranges {
            let mut at = start & !(PAGE - 1);
            let end = start.saturating_add(len);
            while at < end {
                let n = (1u64 << 20).min(end - at).div_ceil(PAGE) * PAGE;
                let present = self
                    .present(at, (n / PAGE) as usize)
                    .unwrap_or_else(|| vec![true; (n / PAGE) as usize]);
                for (i, run, _) in runs(&present).filter(|&(_, _, touched)| touched) {
                    let gpa = at + i as u64 * PAGE;
                    self.copy_run(gpa, run as u64, budget, &mut copy, &mut copied);
                }
                at += n;
            }
        }
        copy.runs.sort_unstable_by_key(|(s, _)| *s);
        copy.runs.dedup_by_key(|(s, _)| *s);
        let copy = Self {
            source: Source::Copy(copy),
            slots: self.slots.clone(),
            scan: self.scan.clone(),
            budget: Cell::new(read_budget),
            read: Cell::new(0),
            failed: Cell::new(0),
        };
        (copy, copied)
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
            if !self.read_in_slot(s, at, &mut buf[done..done + n]) {
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

/// The runs of equal flags in `flags`: `(first index, length, flag)`, in
/// order.
fn runs(flags: &[bool]) -> impl Iterator<Item = (usize, usize, bool)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let &flag = flags.get(i)?;
        let run = flags[i..].iter().take_while(|&&f| f == flag).count();
        i += run;
        Some((i - run, run, flag))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_equal_flags_cover_the_slice_in_order() {
        let flags = [true, true, false, true, false, false, false];
        let got: Vec<_> = runs(&flags).collect();
        assert_eq!(
            got,
            [(0, 2, true), (2, 1, false), (3, 1, true), (4, 3, false)]
        );
        assert_eq!(runs(&[]).count(), 0);
        assert_eq!(runs(&[false]).collect::<Vec<_>>(), [(0, 1, false)]);
    }

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
        // A copy keeps what the pages held when it was taken.
        let ram = [(0u64, 1u64 << 20)];
        let (copy, copied) = f.copy_touched(&ram, 1 << 20, 1 << 20);
        assert_eq!(
            copied,
            Copied {
                bytes: 4096,
                pages_left: 0
            }
        );
        // SAFETY: as above.
        unsafe { *(fresh as *mut u8).add(0x8_0000) = 2 };
        let mut b3 = [0xffu8; 3];
        assert!(copy.read_phys(0x7_ffff, &mut b3));
        assert_eq!(b3, [0, 1, 0], "copied byte, zeros around it");
        assert!(copy.touched(0x8_0000, 1) && !copy.touched(0x7_f000, 4096));
        assert!(!copy.read_virt(fresh as u64, &mut b3), "a copy has no VMM");
        // SAFETY: as above: two more pages touched, one apart.
        unsafe {
            *(fresh as *mut u8).add(0x2_0000) = 3;
            *(fresh as *mut u8).add(0x9_0000) = 4;
        }
        let (part, copied) = f.copy_touched(&ram, 2 * 4096, 1 << 20);
        assert_eq!(
            copied,
            Copied {
                bytes: 8192,
                pages_left: 1
            },
            "budget"
        );
        assert!(part.touched(0x2_0000, 1) && part.touched(0x9_0000, 1));
        assert!(part.read_phys(0x2_0000, &mut b3) && b3[0] == 3);
        assert!(!part.read_phys(0x9_0000, &mut b3), "a page left uncopied");
        // SAFETY: the mapping made above, not used after.
        unsafe { libc::munmap(fresh, 1 << 20) };
        // An address the process has not mapped is a refused read.
        let s = vec![slot(0, 0, 0)];
        let mut none = ProcessMemory::open(std::process::id(), s, 1 << 20).unwrap();
        none.slots[0].hva = 8;
        assert!(!none.read_phys(0, &mut b));
    }
}
