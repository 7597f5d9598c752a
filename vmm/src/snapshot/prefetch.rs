//! Loading a recorded working set (`--prefetch`): before the first
//! `KVM_RUN`, or with `uffd` and `--prefetch-background` from a thread
//! while the guest runs ([`Prefetch`]), the handler serving the guest's
//! faults meanwhile and moving the prefetch to where the guest faults. Also the rest of the memory file in the background after
//! resume (`--prefault-rest`), and finding the pages a lazily mapped guest
//! touched (`/proc/self/pagemap`).
//!
//! The pages go in file order, in contiguous runs of up to [`BATCH`]
//! bytes: with `uffd` one `UFFDIO_COPY` per run (one per huge page while
//! the guest runs on huge pages: [`live_copy`]), with `mmap` a
//! `readahead` of the file and one `MADV_POPULATE_WRITE` per run.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::uffd::{HostRegion, Server};
use super::working_set::{WorkingSet, PAGE};

/// Largest run loaded at once.
pub const BATCH: u64 = 8 << 20;

/// Largest copy made at once while the guest runs (the background
/// prefetch and prefault) on pages of `granule` bytes: one huge page on
/// huge pages, else a whole run (up to [`BATCH`]). The kernel holds the
/// process's mmap lock for reading through a whole `UFFDIO_COPY`, and a
/// thread that needs it for writing (a new thread's stack, any `mmap`)
/// waits for the copy to end, holding up every fault queued behind it; on
/// 2 MiB pages a run of [`BATCH`] bytes kept the vCPU thread from starting
/// for several copies' time (resume 0.49 x with one huge page a copy in
/// the lab, docs/benchmarks.md). On 4 KiB pages the copies are short
/// already, and 1 MiB pieces cost more late faults than they saved.
pub fn live_copy(granule: u64) -> u64 {
    if granule > PAGE {
        granule
    } else {
        BATCH
    }
}

/// Loads run `r` through `server` in copies of at most [`live_copy`]
/// bytes, waking the faults waiting on them, until done or `stop`. Returns the bytes loaded and whether the
/// whole run was.
fn load_live(
    server: &Server,
    r: Run,
    buf: &mut [u8],
    stop: &AtomicBool,
) -> Result<(u64, bool), String> {
    let step = live_copy(server.granule);
    let (mut loaded, mut at) = (0u64, 0u64);
    while at < r.bytes {
        if stop.load(Ordering::SeqCst) {
            return Ok((loaded, false));
        }
        let len = (r.bytes - at).min(step);
        loaded += server.load(
            r.host + at as usize,
            r.file_offset + at,
            &mut buf[..len as usize],
            true,
        )?;
        at += len;
    }
    Ok((loaded, true))
}

/// A run of pages: host address, file offset, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub host: usize,
    pub file_offset: u64,
    pub bytes: u64,
}

/// The runs covering `set`, in file order: pages rounded out to
/// `granule`, joined where contiguous, split at region edges and at
/// [`BATCH`].
pub fn runs(set: &WorkingSet, regions: &[HostRegion], granule: u64) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for [first, n] in set.ranges() {
        let start = (first * PAGE) / granule * granule;
        let end = ((first + n) * PAGE).div_ceil(granule) * granule;
        for r in regions {
            let (lo, hi) = (start.max(r.file_offset), end.min(r.file_offset + r.bytes));
            let mut at = lo;
            while at < hi {
                let host = r.host + (at - r.file_offset) as usize;
                match out.last_mut() {
                    Some(l)
                        if l.file_offset + l.bytes == at
                            && l.host + l.bytes as usize == host
                            && l.bytes < BATCH =>
                    {
                        let take = (hi - at).min(BATCH - l.bytes);
                        l.bytes += take;
                        at += take;
                    }
                    Some(l) if l.file_offset + l.bytes > at => {
                        // Rounded to a granule already loaded.
                        at = (l.file_offset + l.bytes).min(hi);
                    }
                    _ => {
                        let take = (hi - at).min(BATCH);
                        out.push(Run {
                            host,
                            file_offset: at,
                            bytes: take,
                        });
                        at += take;
                    }
                }
            }
        }
    }
    out
}

/// What a load did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// 4 KiB pages loaded.
    pub pages: u64,
    pub batches: u64,
}

/// Loads the runs into registered guest memory (`uffd`). No vCPU runs
/// yet: nothing is woken.
pub fn load_uffd(server: &Server, runs: &[Run]) -> Result<Loaded, String> {
    let mut buf = vec![0u8; BATCH as usize];
    let mut done = Loaded::default();
    for r in runs {
        let n = server.load(r.host, r.file_offset, &mut buf[..r.bytes as usize], false)?;
        done.pages += n / PAGE;
        done.batches += 1;
    }
    Ok(done)
}

/// The index of the run of `runs` (in file order) holding file offset
/// `off`.
fn run_index(runs: &[Run], off: u64) -> Option<usize> {
    let i = runs.partition_point(|r| r.file_offset + r.bytes <= off);
    runs.get(i)
        .is_some_and(|r| r.file_offset <= off)
        .then_some(i)
}

/// The order to load `runs` in: first the runs holding `order`'s pages
/// (the guest's first-touch order), as they come, then the others in file
/// order.
fn load_order(runs: &[Run], order: &[u64]) -> Vec<usize> {
    let mut seen = vec![false; runs.len()];
    let mut seq = Vec::with_capacity(runs.len());
    for &page in order {
        if let Some(i) = run_index(runs, page * PAGE) {
            if !std::mem::replace(&mut seen[i], true) {
                seq.push(i);
            }
        }
    }
    seq.extend((0..runs.len()).filter(|&i| !seen[i]));
    seq
}

/// A working set loaded while the guest runs: its runs, the order they
/// load in (the guest's first-touch order where the record has it, else
/// file order), which are done, and where the guest last faulted in one
/// not done (the run loaded next, the load going on in its order after
/// it).
pub struct Prefetch {
    runs: Vec<Run>,
    /// Run indices in load order, and each run's place in it.
    seq: Vec<usize>,
    place: Vec<usize>,
    done: Vec<AtomicBool>,
    /// The run the handler asks for next; `usize::MAX`: none.
    jump: AtomicUsize,
    /// 4 KiB pages loaded so far.
    pub pages: AtomicU64,
    pub batches: AtomicU64,
    /// Times the handler moved the prefetch to the guest's fault.
    pub jumps: AtomicU64,
}

impl Prefetch {
    /// `runs` in file order; `order`: the record's first-touch order
    /// ([`WorkingSet::order`], empty: file order).
    pub fn new(runs: Vec<Run>, order: &[u64]) -> Self {
        let done = runs.iter().map(|_| AtomicBool::new(false)).collect();
        let seq = load_order(&runs, order);
        let mut place = vec![0; runs.len()];
        for (k, &i) in seq.iter().enumerate() {
            place[i] = k;
        }
        Self {
            runs,
            seq,
            place,
            done,
            jump: AtomicUsize::new(usize::MAX),
            pages: AtomicU64::default(),
            batches: AtomicU64::default(),
            jumps: AtomicU64::default(),
        }
    }

    /// The index of the run holding file offset `off`.
    fn run_of(&self, off: u64) -> Option<usize> {
        run_index(&self.runs, off)
    }

    /// The guest faulted at file offset `off` (the handler serves that
    /// page itself): when a run not loaded yet holds it, the prefetch
    /// goes on from that run. True when it does.
    pub fn fault_at(&self, off: u64) -> bool {
        match self.run_of(off) {
            Some(i) if !self.done[i].load(Ordering::Relaxed) => {
                self.jump.store(i, Ordering::Relaxed);
                self.jumps.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// The next run to load from place `cursor` of the load order: the
    /// one the handler asked for, else the next not done in load order,
    /// wrapping around once.
    fn next(&self, cursor: usize) -> Option<usize> {
        let j = self.jump.swap(usize::MAX, Ordering::Relaxed);
        if j < self.runs.len() && !self.done[j].load(Ordering::Relaxed) {
            return Some(j);
        }
        let n = self.runs.len();
        (0..n)
            .map(|k| self.seq[(cursor + k) % n])
            .find(|&i| !self.done[i].load(Ordering::Relaxed))
    }

    /// Loads every run through `server` (waking the faults waiting on
    /// them), until done or `stop`.
    pub fn load(&self, server: &Server, stop: &AtomicBool) -> Result<(), String> {
        let mut buf = vec![0u8; live_copy(server.granule) as usize];
        let mut cursor = 0;
        while let Some(i) = self.next(cursor) {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let (n, whole) = load_live(server, self.runs[i], &mut buf, stop)?;
            self.pages.fetch_add(n / PAGE, Ordering::Relaxed);
            if !whole {
                break;
            }
            self.done[i].store(true, Ordering::Relaxed);
            self.batches.fetch_add(1, Ordering::Relaxed);
            cursor = self.place[i] + 1;
        }
        Ok(())
    }
}

fn madvise(host: usize, bytes: u64, advice: libc::c_int) -> std::io::Result<()> {
    // SAFETY: `host..host + bytes` is guest memory this VMM mapped and
    // still owns; populating pages changes no byte of it.
    let r = unsafe { libc::madvise(host as *mut libc::c_void, bytes as usize, advice) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Loads the runs into guest memory mapped from the file (`mmap`): the
/// file's pages read ahead into the page cache, then each run populated
/// for writing.
pub fn load_mmap(file: &File, runs: &[Run]) -> Result<Loaded, String> {
    let mut done = Loaded::default();
    for r in runs {
        // SAFETY: readahead on a descriptor this function borrows.
        unsafe {
            libc::readahead(
                file.as_raw_fd(),
                r.file_offset as libc::off64_t,
                r.bytes as usize,
            )
        };
    }
    for r in runs {
        madvise(r.host, r.bytes, libc::MADV_POPULATE_WRITE)
            .map_err(|e| format!("MADV_POPULATE_WRITE of guest memory: {e}"))?;
        done.pages += r.bytes / PAGE;
        done.batches += 1;
    }
    Ok(done)
}

/// The runs of the file's data (`extents`) not in `set`: what a
/// background prefault loads.
pub fn rest(
    extents: &super::uffd::Extents,
    set: &WorkingSet,
    regions: &[HostRegion],
    granule: u64,
) -> Vec<Run> {
    let mut pages = Vec::new();
    for &(start, end) in &extents.0 {
        pages.extend((start / PAGE..end.div_ceil(PAGE)).filter(|p| !set.contains(*p)));
    }
    runs(&WorkingSet::from_pages(pages), regions, granule)
}

/// Loads `runs` in the background until done or `stop`; counts pages
/// into `pages`. `uffd`: through the server (pages there already are
/// skipped); else by `MADV_POPULATE_READ` (the file's pages shared, not
/// copied).
pub fn background(
    server: Option<&Server>,
    runs: &[Run],
    stop: &AtomicBool,
    pages: &AtomicU64,
) -> Result<(), String> {
    let mut buf = vec![0u8; server.map_or(0, |s| live_copy(s.granule) as usize)];
    for r in runs {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let n = match server {
            Some(s) => load_live(s, *r, &mut buf, stop)?.0,
            None => {
                madvise(r.host, r.bytes, libc::MADV_POPULATE_READ)
                    .map_err(|e| format!("MADV_POPULATE_READ of guest memory: {e}"))?;
                r.bytes
            }
        };
        pages.fetch_add(n / PAGE, Ordering::Relaxed);
    }
    Ok(())
}

/// The file pages of `regions` present in this process's page tables
/// (`/proc/self/pagemap`, bit 63): with guest memory mapped lazily from
/// the file, the pages touched since it was mapped.
pub fn present_pages(regions: &[HostRegion]) -> std::io::Result<Vec<u64>> {
    let f = File::open("/proc/self/pagemap")?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8 * 4096];
    for r in regions {
        let pages = r.bytes / PAGE;
        let mut done = 0u64;
        while done < pages {
            let n = (pages - done).min(4096);
            let chunk = &mut buf[..(n * 8) as usize];
            let vpn = (r.host as u64 / PAGE) + done;
            f.read_exact_at(chunk, vpn * 8)?;
            for (i, e) in chunk.chunks_exact(8).enumerate() {
                let entry = u64::from_le_bytes(e.try_into().expect("8 bytes"));
                if entry >> 63 & 1 == 1 {
                    out.push(r.file_offset / PAGE + done + i as u64);
                }
            }
            done += n;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_follow_the_file_and_split_at_regions_and_batches() {
        let regions = [
            HostRegion {
                host: 0x1000_0000,
                bytes: 16 << 20,
                file_offset: 0,
            },
            HostRegion {
                host: 0x9000_0000,
                bytes: 16 << 20,
                file_offset: 16 << 20,
            },
        ];
        let last = (16 << 20) / PAGE - 1;
        let set = WorkingSet::from_pages(vec![1, 2, 3, 7, last, last + 1]);
        let r = runs(&set, &regions, PAGE);
        assert_eq!(
            r,
            [
                Run {
                    host: 0x1000_1000,
                    file_offset: 0x1000,
                    bytes: 3 * PAGE
                },
                Run {
                    host: 0x1000_7000,
                    file_offset: 0x7000,
                    bytes: PAGE
                },
                Run {
                    host: 0x1000_0000 + (last * PAGE) as usize,
                    file_offset: last * PAGE,
                    bytes: PAGE
                },
                Run {
                    host: 0x9000_0000,
                    file_offset: 16 << 20,
                    bytes: PAGE
                },
            ]
        );
        // Every page of the first region: two batches.
        let all = WorkingSet::from_pages((0..=last).collect());
        let r = runs(&all, &regions, PAGE);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|r| r.bytes == BATCH));
        // On 2 MiB pages the pages round out to one huge page.
        let r = runs(&set, &regions, 2 << 20);
        assert_eq!(r[0].bytes, 2 << 20);
        assert_eq!(r.len(), 3, "{r:?}");
    }

    /// Test memory: every fifth page a hole, the others distinct.
    fn test_content(bytes: u64) -> Vec<u8> {
        let mut content = vec![0u8; bytes as usize];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (i, page) in content.chunks_mut(PAGE as usize).enumerate() {
            if i % 5 != 4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                page[..8].copy_from_slice(&x.to_le_bytes());
                page[PAGE as usize - 8..].copy_from_slice(&(i as u64).to_le_bytes());
            }
        }
        content
    }

    fn run(at: u64) -> Run {
        Run {
            host: 0x1000_0000 + at as usize,
            file_offset: at,
            bytes: PAGE,
        }
    }

    /// A fault in a run not loaded yet moves the load there; it goes on in
    /// file order after it, wrapping round to the runs it skipped; a
    /// fault in a loaded run or outside the record moves nothing.
    #[test]
    fn a_fault_moves_the_load_to_its_run_then_on_in_file_order() {
        let p = Prefetch::new((0..5).map(|i| run(i * 4 * PAGE)).collect(), &[]);
        assert_eq!(p.next(0), Some(0));
        p.done[0].store(true, Ordering::Relaxed);
        assert!(p.fault_at(3 * 4 * PAGE + 100));
        assert_eq!(p.jumps.load(Ordering::Relaxed), 1);
        assert_eq!(p.next(1), Some(3), "the fault's run first");
        p.done[3].store(true, Ordering::Relaxed);
        assert_eq!(p.next(4), Some(4), "then on after it");
        p.done[4].store(true, Ordering::Relaxed);
        assert_eq!(p.next(5), Some(1), "then the runs skipped");
        // Loaded already, between runs, past the record: no move.
        assert!(!p.fault_at(0));
        assert!(!p.fault_at(PAGE));
        assert!(!p.fault_at(100 * PAGE));
        assert_eq!(p.jumps.load(Ordering::Relaxed), 1);
        p.done[1].store(true, Ordering::Relaxed);
        p.done[2].store(true, Ordering::Relaxed);
        assert_eq!(p.next(2), None);
    }

    /// With a first-touch order the load starts with the runs the guest
    /// touched first, in that order, then the rest in file order; a fault
    /// moves it, and it goes on in its order after the fault's run.
    #[test]
    fn a_first_touch_order_leads_the_load_and_a_fault_moves_it_in_that_order() {
        let runs: Vec<Run> = (0..5).map(|i| run(i * 4 * PAGE)).collect();
        // Touched: run 3 (page 12), page 2 (in no run), run 1 (page 4),
        // run 3 again.
        let order = [12, 2, 4, 12];
        assert_eq!(load_order(&runs, &order), [3, 1, 0, 2, 4]);
        let p = Prefetch::new(runs, &order);
        assert_eq!(p.next(0), Some(3));
        p.done[3].store(true, Ordering::Relaxed);
        assert_eq!(p.next(p.place[3] + 1), Some(1));
        // A fault in run 2 moves the load there, then on after it: run 4.
        assert!(p.fault_at(2 * 4 * PAGE));
        assert_eq!(p.next(p.place[1] + 1), Some(2));
        p.done[2].store(true, Ordering::Relaxed);
        assert_eq!(p.next(p.place[2] + 1), Some(4));
        p.done[4].store(true, Ordering::Relaxed);
        // Wrapping round to what was skipped, in load order.
        assert_eq!(p.next(0), Some(1));
    }

    /// What [`served_memory`] sets up.
    type Served = (
        std::sync::Arc<Server>,
        super::super::uffd::Handler,
        std::sync::Arc<Prefetch>,
        usize,
    );

    /// Guest memory holding `content` served by a handler that moves the
    /// load of `record` to each fault: the server, the handler, the load,
    /// the mapping.
    fn served_memory(content: &[u8], dir: &std::path::Path, record: &WorkingSet) -> Option<Served> {
        use std::sync::Arc;

        use super::super::uffd::{self, Handler, HandlerSetup};
        use crate::timeline::Clock;

        let Ok(fd) = uffd::open() else {
            eprintln!("SKIP: userfaultfd is not available to this process");
            return None;
        };
        let bytes = content.len();
        let path = dir.join("memory");
        std::fs::write(&path, content).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: a fresh anonymous mapping this test owns.
        let host = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(host, libc::MAP_FAILED);
        let regions = vec![HostRegion {
            host: host as usize,
            bytes: bytes as u64,
            file_offset: 0,
        }];
        let server =
            Arc::new(Server::register(fd, regions.clone(), file, bytes as u64, None).unwrap());
        let live = Arc::new(Prefetch::new(runs(record, &regions, PAGE), &record.order));
        let handler = Handler::start(
            server.clone(),
            HandlerSetup {
                clock: Clock::start(),
                run_stop: Arc::default(),
                fail_after: None,
                prefetch: Some(live.clone()),
            },
        )
        .unwrap();
        Some((server, handler, live, host as usize))
    }

    /// A live load checks its stop before each copy: stopped, the run
    /// is not marked done and nothing is counted; let go, the run lands
    /// where the file has it. On huge pages a copy is one huge page.
    #[test]
    fn a_live_load_stopped_leaves_its_run_not_done() {
        assert_eq!(live_copy(2 << 20), 2 << 20);
        assert_eq!(live_copy(PAGE), BATCH);
        let bytes: u64 = 3 * (1 << 20) + 2 * PAGE;
        let dir = tempfile::tempdir().unwrap();
        let content = test_content(bytes);
        let record = WorkingSet::from_pages((0..bytes / PAGE).collect());
        let Some((server, mut handler, live, mem)) = served_memory(&content, dir.path(), &record)
        else {
            return;
        };
        assert_eq!(live.runs.len(), 1, "one run of {bytes} bytes");
        let stop = AtomicBool::new(true);
        live.load(&server, &stop).unwrap();
        assert_eq!(live.pages.load(Ordering::Relaxed), 0);
        assert!(!live.done[0].load(Ordering::Relaxed));
        let (n, whole) =
            load_live(&server, live.runs[0], &mut vec![0; BATCH as usize], &stop).unwrap();
        assert_eq!((n, whole), (0, false));
        stop.store(false, Ordering::SeqCst);
        live.load(&server, &stop).unwrap();
        assert!(live.done[0].load(Ordering::Relaxed));
        assert_eq!(live.pages.load(Ordering::Relaxed), bytes / PAGE);
        assert_eq!(live.batches.load(Ordering::Relaxed), 1);
        // SAFETY: the whole mapping, loaded above.
        let got = unsafe { std::slice::from_raw_parts(mem as *const u8, bytes as usize) };
        assert!(
            got == &content[..],
            "the loaded memory differs from the file"
        );
        handler.stop();
        assert!(handler.failure().is_none(), "{:?}", handler.failure());
        assert!(handler.log.faults.lock().unwrap().is_empty(), "no fault");
        // SAFETY: the mapping above, no longer used.
        unsafe { libc::munmap(mem as *mut libc::c_void, bytes as usize) };
    }

    /// The record loaded by a thread while another thread touches guest
    /// memory out of order, its faults served by the handler and racing
    /// the load. A fault before the load starts moves it to the fault's
    /// run. Whatever the interleaving: every page ends up the file's, and
    /// every recorded page was filled exactly once, by the load or by the
    /// handler (a fault that met the load filled nothing).
    #[test]
    fn a_background_load_racing_the_faults_leaves_every_page_exact() {
        let bytes: u64 = 32 << 20;
        let n = bytes / PAGE;
        let dir = tempfile::tempdir().unwrap();
        let content = test_content(bytes);
        // The record: the first 24 MiB, every page (three runs).
        let record = WorkingSet::from_pages((0..n * 3 / 4).collect());
        let Some((server, mut handler, live, mem)) = served_memory(&content, dir.path(), &record)
        else {
            return;
        };
        let read = |page: u64| {
            // SAFETY: a page of the mapping above, served by the handler.
            unsafe { std::ptr::read_volatile((mem + (page * PAGE) as usize + 8) as *const u8) }
        };
        // Before the load: a fault in the last run, moved to before the
        // access returns.
        let first = n * 3 / 4 - 10;
        read(first);
        assert_eq!(live.jumps.load(Ordering::Relaxed), 1);
        assert_eq!(live.jump.load(Ordering::Relaxed), 2);
        let stop = AtomicBool::new(false);
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            // The guest: from the middle backwards, then the tail.
            let g = s.spawn(|| {
                start.wait();
                (0..n / 2).rev().chain(n * 3 / 4..n).for_each(|p| {
                    read(p);
                });
            });
            start.wait();
            live.load(&server, &stop).unwrap();
            g.join().unwrap();
        });
        // SAFETY: the whole mapping, every page filled by now.
        let got = unsafe { std::slice::from_raw_parts(mem as *const u8, bytes as usize) };
        for (i, (a, b)) in got
            .chunks(PAGE as usize)
            .zip(content.chunks(PAGE as usize))
            .enumerate()
        {
            assert!(a == b, "page {i} differs from the file");
        }
        handler.stop();
        assert!(handler.failure().is_none(), "{:?}", handler.failure());
        assert!(live.done.iter().all(|d| d.load(Ordering::Relaxed)));
        let faults = handler.log.faults.lock().unwrap();
        let filled: Vec<u64> = faults.iter().filter(|f| !f.raced).map(|f| f.page).collect();
        let distinct = WorkingSet::from_pages(filled.clone());
        assert_eq!(distinct.len(), filled.len() as u64, "a page filled twice");
        let by_handler = filled.iter().filter(|p| record.contains(**p)).count() as u64;
        let loaded = live.pages.load(Ordering::Relaxed);
        assert_eq!(loaded + by_handler, record.len(), "{loaded} + {by_handler}");
        assert!(by_handler >= 1, "the fault before the load");
        // Outside the record only the handler fills: the tail, once each.
        assert_eq!(filled.len() as u64 - by_handler, n / 4);
        assert!(faults.iter().all(|f| !f.raced || record.contains(f.page)));
        drop(faults);
        // SAFETY: the mapping above, no longer used.
        unsafe { libc::munmap(mem as *mut libc::c_void, bytes as usize) };
    }
}
