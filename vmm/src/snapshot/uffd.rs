//! Guest memory served from the snapshot's memory file by a `userfaultfd`
//! handler thread (`--memory-restore uffd`): each region is mapped anew
//! (private, anonymous, nothing in it) and registered for missing-page
//! faults; the handler answers each fault with the page from the file
//! (`UFFDIO_COPY`), or a page of zeros where the sparse file has a hole
//! (`UFFDIO_ZEROPAGE`), and records it (page, time, service time). The
//! `userfaultfd` crate (rust-vmm's choice, maintained) does the ioctls.
//!
//! A handler that fails records why and raises the run's stop flag: the
//! run loop then kicks every vCPU out of `KVM_RUN` (a vCPU waiting on a
//! fault is woken by the kick's signal) and the run ends as an error.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use userfaultfd::{Event, IoctlFlags, Uffd, UffdBuilder};
use vm_memory::GuestMemoryBackend;
use vmm_sys_util::eventfd::EventFd;

use super::memory::MemoryRegion;
use crate::timeline::Clock;

const PAGE: u64 = 4096;

/// A guest memory region as the host maps it, and where it is in the file.
#[derive(Clone, Copy, Debug)]
pub struct HostRegion {
    pub host: usize,
    pub bytes: u64,
    pub file_offset: u64,
}

impl HostRegion {
    /// The file offset of host address `a`, when it is in this region.
    pub fn file_offset_of(&self, a: usize) -> Option<u64> {
        (a >= self.host && ((a - self.host) as u64) < self.bytes)
            .then(|| self.file_offset + (a - self.host) as u64)
    }
}

/// The data extents of the sparse memory file (`SEEK_DATA`/`SEEK_HOLE`),
/// `[start, end)` in file order.
#[derive(Clone, Debug, Default)]
pub struct Extents(pub Vec<(u64, u64)>);

impl Extents {
    pub fn of(file: &File, bytes: u64) -> std::io::Result<Self> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes {
            let Some(data) = super::memory::seek(file, at, libc::SEEK_DATA)? else {
                break;
            };
            if data >= bytes {
                break;
            }
            let hole = super::memory::seek(file, data, libc::SEEK_HOLE)?
                .unwrap_or(bytes)
                .min(bytes);
            out.push((data, hole));
            at = hole;
        }
        Ok(Self(out))
    }

    /// True when `[off, off + len)` holds no data.
    pub fn is_hole(&self, off: u64, len: u64) -> bool {
        let i = self.0.partition_point(|&(_, end)| end <= off);
        self.0.get(i).is_none_or(|&(start, _)| start >= off + len)
    }
}

/// One fault the handler served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The faulting page's number in the memory file (4 KiB pages; with
    /// huge pages the first of the huge page's).
    pub page: u64,
    /// When it was read from the descriptor, on the run's clock.
    pub t_ns: u64,
    /// Read to woken, ns.
    pub service_ns: u64,
    /// Served as a hole.
    pub zero: bool,
    /// The page was there when the handler came to fill it (the
    /// background prefetch loaded it first): nothing filled, the guest
    /// only woken.
    pub raced: bool,
}

/// How the handler served one fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// The page's number in the memory file.
    pub page: u64,
    /// Served as a hole.
    pub zero: bool,
    /// Already there: filled by another thread first.
    pub raced: bool,
}

/// What the handler recorded, shared with the VMM.
#[derive(Debug, Default)]
pub struct FaultLog {
    pub faults: Mutex<Vec<Fault>>,
    pub failure: Mutex<Option<String>>,
}

/// Why `userfaultfd` cannot be used: bad input (exit 2), with what to do.
pub fn unavailable(e: &userfaultfd::Error) -> String {
    format!(
        "--memory-restore uffd: userfaultfd is not available to this process ({e}); \
         it needs root (or CAP_SYS_PTRACE), or `sysctl vm.unprivileged_userfaultfd=1`, \
         or read-write access to /dev/userfaultfd, and no seccomp filter denying it; \
         or restore with --memory-restore mmap"
    )
}

/// Opens a userfaultfd that sees the kernel's faults too (KVM's).
pub fn open() -> Result<Uffd, String> {
    UffdBuilder::new()
        .close_on_exec(true)
        .non_blocking(true)
        .user_mode_only(false)
        .require_ioctls(IoctlFlags::REGISTER | IoctlFlags::UNREGISTER)
        .create()
        .map_err(|e| unavailable(&e))
}

/// Maps `[host, host + bytes)` anew as private anonymous memory with
/// nothing in it (what the VM's set-up wrote there is gone); `huge`: on
/// huge pages of that size.
pub fn map_fresh(host: usize, bytes: u64, huge: Option<u64>) -> std::io::Result<()> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE;
    if let Some(size) = huge {
        flags |= libc::MAP_HUGETLB | ((size.trailing_zeros() as i32) << libc::MAP_HUGE_SHIFT);
        flags &= !libc::MAP_NORESERVE;
    }
    // SAFETY: `host..host + bytes` is one guest memory region this VMM
    // mapped and still owns, that no vCPU runs on yet; MAP_FIXED replaces
    // it with fresh memory of the same protection, so the range stays
    // valid for as long as the guest memory lives.
    let r = unsafe {
        libc::mmap(
            host as *mut libc::c_void,
            bytes as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Serves pages of the memory file into registered guest memory.
pub struct Server {
    pub uffd: Arc<Uffd>,
    pub regions: Vec<HostRegion>,
    pub file: File,
    pub extents: Extents,
    /// Bytes per fault served: 4 KiB, or the huge page size.
    pub granule: u64,
}

/// `UFFDIO_COPY`/`UFFDIO_ZEROPAGE` failed with this errno (EEXIST: the
/// page is there already).
fn errno_of(e: &userfaultfd::Error) -> Option<i32> {
    match e {
        userfaultfd::Error::CopyFailed(n) | userfaultfd::Error::ZeropageFailed(n) => {
            Some(*n as i32)
        }
        _ => None,
    }
}

impl Server {
    /// Maps and registers every region; the server is ready to serve.
    pub fn register(
        uffd: Uffd,
        regions: Vec<HostRegion>,
        file: File,
        bytes: u64,
        huge: Option<u64>,
    ) -> Result<Self, String> {
        let extents = Extents::of(&file, bytes).map_err(|e| format!("memory file: {e}"))?;
        for r in &regions {
            map_fresh(r.host, r.bytes, huge).map_err(|e| match huge {
                Some(h) => format!(
                    "cannot map {} MiB of guest memory on {} KiB huge pages ({e}); \
                     reserve them (echo N > /proc/sys/vm/nr_hugepages) or restore without --hugepages",
                    r.bytes >> 20,
                    h >> 10
                ),
                None => format!("cannot map guest memory anew: {e}"),
            })?;
            let ioctls = uffd
                .register(r.host as *mut libc::c_void, r.bytes as usize)
                .map_err(|e| format!("cannot register guest memory with userfaultfd: {e}"))?;
            if !ioctls.contains(IoctlFlags::COPY) {
                return Err("userfaultfd offers no UFFDIO_COPY on guest memory".into());
            }
        }
        Ok(Self {
            uffd: Arc::new(uffd),
            regions,
            file,
            extents,
            granule: huge.unwrap_or(PAGE),
        })
    }

    /// The region and file offset of host address `a`.
    pub fn locate(&self, a: usize) -> Option<(HostRegion, u64)> {
        self.regions
            .iter()
            .find_map(|r| r.file_offset_of(a).map(|o| (*r, o)))
    }

    /// Loads `[off, off + len)` of the file at host address `at` (granule
    /// aligned) with one `UFFDIO_COPY`, going on past the granules that
    /// are there already (the guest's own faults, served first). `wake`:
    /// wake the threads waiting on it. Returns the bytes loaded.
    pub fn load(&self, at: usize, off: u64, buf: &mut [u8], wake: bool) -> Result<u64, String> {
        let len = buf.len();
        self.file
            .read_exact_at(buf, off)
            .map_err(|e| format!("cannot read the memory file at {off:#x}: {e}"))?;
        let g = self.granule as usize;
        let (mut done, mut copied, mut stalls) = (0usize, 0u64, 0u32);
        while done < len {
            let a = at + done;
            // SAFETY: `a..at + len` lies in a registered guest memory
            // region (the caller located it), `buf[done..]` is that many
            // readable bytes; the kernel copies them into pages it
            // allocates there.
            let r = unsafe {
                self.uffd
                    .copy(buf[done..].as_ptr().cast(), a as *mut _, len - done, wake)
            };
            match r {
                Ok(n) => {
                    copied += n as u64;
                    done = len;
                }
                // Copied up to a granule that is there already (or the
                // address space changed under it: tried again).
                Err(userfaultfd::Error::PartiallyCopied(n)) => {
                    copied += n as u64;
                    done += n;
                    stalls = if n == 0 { stalls + 1 } else { 0 };
                    if stalls > 100 {
                        return Err(format!("UFFDIO_COPY at {a:#x}: no progress"));
                    }
                }
                Err(e) if errno_of(&e) == Some(libc::EEXIST) => {
                    self.wake(a, g);
                    done += g;
                }
                Err(e) => return Err(format!("UFFDIO_COPY at {a:#x}: {e}")),
            }
        }
        Ok(copied)
    }

    fn wake(&self, a: usize, len: usize) {
        let _ = self.uffd.wake(a as *mut _, len);
    }

    /// The granule-aligned host address and file offset of a fault at
    /// `addr`.
    pub fn fault_offset(&self, addr: usize) -> Result<(usize, u64), String> {
        let at = addr & !(self.granule as usize - 1);
        match self.locate(at) {
            Some((_, off)) => Ok((at, off)),
            None => Err(format!("a fault at {addr:#x}, outside guest memory")),
        }
    }

    /// Serves the fault at host address `addr`: its page number in the
    /// file, whether it was a hole, and whether the page was there
    /// already.
    pub fn serve(&self, addr: usize, buf: &mut [u8]) -> Result<Served, String> {
        let g = self.granule as usize;
        let (at, off) = self.fault_offset(addr)?;
        let page = off / PAGE;
        if g as u64 == PAGE && self.extents.is_hole(off, PAGE) {
            // SAFETY: one page inside a registered guest memory region.
            let raced = match unsafe { self.uffd.zeropage(at as *mut _, g, true) } {
                Ok(_) => false,
                Err(e) if errno_of(&e) == Some(libc::EEXIST) => {
                    self.wake(at, g);
                    true
                }
                Err(e) => return Err(format!("UFFDIO_ZEROPAGE at {at:#x}: {e}")),
            };
            return Ok(Served {
                page,
                zero: true,
                raced,
            });
        }
        let copied = self.load(at, off, &mut buf[..g], true)?;
        Ok(Served {
            page,
            zero: false,
            raced: copied == 0,
        })
    }
}

/// The handler thread and what stops it.
pub struct Handler {
    stop: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
    pub log: Arc<FaultLog>,
}

/// What the handler thread needs besides the server.
pub struct HandlerSetup {
    pub clock: Clock,
    /// Raised when the handler fails: the run loop stops the guest.
    pub run_stop: Arc<AtomicBool>,
    /// For tests: fail after serving this many faults.
    pub fail_after: Option<u64>,
    /// The working set loaded while the guest runs: moved to each fault.
    pub prefetch: Option<Arc<super::prefetch::Prefetch>>,
}

impl Handler {
    pub fn start(server: Arc<Server>, setup: HandlerSetup) -> std::io::Result<Self> {
        let stop = Arc::new(EventFd::new(libc::EFD_NONBLOCK)?);
        let log = Arc::new(FaultLog::default());
        let (s, l) = (stop.clone(), log.clone());
        let thread = std::thread::Builder::new()
            .name("uffd".into())
            .spawn(move || {
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    handle(&server, &s, &l, &setup)
                }));
                let why = match served {
                    Ok(Ok(())) => return,
                    Ok(Err(why)) => why,
                    Err(_) => "the handler thread panicked".to_string(),
                };
                *l.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                setup.run_stop.store(true, Ordering::SeqCst);
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
            log,
        })
    }

    /// Stops the thread (it serves no more faults) and waits for it.
    pub fn stop(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    pub fn failure(&self) -> Option<String> {
        self.log
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The handler's loop: waits for faults or the stop, serves each fault.
fn handle(
    server: &Server,
    stop: &EventFd,
    log: &FaultLog,
    setup: &HandlerSetup,
) -> Result<(), String> {
    let mut buf = vec![0u8; server.granule as usize];
    let mut served = 0u64;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: server.uffd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is two valid pollfd structures.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("poll on the userfaultfd: {e}"));
        }
        if fds[1].revents != 0 {
            return Ok(());
        }
        if fds[0].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Err("the userfaultfd reported an error".into());
        }
        while let Some(event) = server
            .uffd
            .read_event()
            .map_err(|e| format!("reading the userfaultfd: {e}"))?
        {
            let Event::Pagefault { addr, .. } = event else {
                continue;
            };
            if setup.fail_after.is_some_and(|n| served >= n) {
                return Err(format!("failing on purpose after {served} faults (a test)"));
            }
            let t_ns = setup.clock.now_ns();
            if let Some(p) = &setup.prefetch {
                // Moved before the guest is woken: once its access
                // returns, the load goes on from there.
                p.fault_at(server.fault_offset(addr as usize)?.1);
            }
            let s = server.serve(addr as usize, &mut buf)?;
            let service_ns = setup.clock.now_ns().saturating_sub(t_ns);
            log.faults
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Fault {
                    page: s.page,
                    t_ns,
                    service_ns,
                    zero: s.zero,
                    raced: s.raced,
                });
            served += 1;
        }
    }
}

/// Gives back the huge pages of `mem`'s hugetlb files (the set-up's
/// memfds, mapped shared): a file holds the huge pages of its size
/// reserved for as long as it lives, and [`map_fresh`] puts new private
/// huge pages over its mappings, so without this a `uffd` restore on huge
/// pages would need the pool to hold guest memory twice. Each file is
/// truncated to nothing, which frees its pages and every reservation
/// (punching a hole frees only the pages that were there, not the
/// reservations of the others, on Linux 6.1); its mappings are replaced
/// right after, before anything touches guest memory, and nothing reads
/// the files again. Anonymous regions have no file.
pub fn release_hugetlb_files(mem: &vm_memory::GuestMemoryMmap) -> std::io::Result<()> {
    use vm_memory::GuestMemoryRegion;
    for region in mem.iter() {
        if let Some(fo) = region.file_offset() {
            fo.file().set_len(0)?;
        }
    }
    Ok(())
}

/// Host regions of `mem` laid out as `regions` in the file.
pub fn host_regions(
    mem: &vm_memory::GuestMemoryMmap,
    regions: &[MemoryRegion],
) -> Result<Vec<HostRegion>, String> {
    regions
        .iter()
        .map(|r| {
            let host = mem
                .get_host_address(vm_memory::GuestAddress(r.guest_addr))
                .map_err(|e| format!("guest memory at {:#x}: {e}", r.guest_addr))?;
            Ok(HostRegion {
                host: host as usize,
                bytes: r.bytes,
                file_offset: r.file_offset,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_told_from_data() {
        let e = Extents(vec![(4096, 12288), (20480, 24576)]);
        assert!(e.is_hole(0, 4096));
        assert!(!e.is_hole(4096, 4096));
        assert!(!e.is_hole(8192, 4096));
        assert!(e.is_hole(12288, 8192));
        assert!(!e.is_hole(16384, 8192));
        assert!(e.is_hole(24576, 4096));
        let r = HostRegion {
            host: 0x10000,
            bytes: 0x2000,
            file_offset: 0x5000,
        };
        assert_eq!(r.file_offset_of(0x11000), Some(0x6000));
        assert_eq!(r.file_offset_of(0x12000), None);
        assert_eq!(r.file_offset_of(0xf000), None);
    }
}
