//! Loading a recorded working set before the first `KVM_RUN`
//! (`--prefetch`), the rest of the memory file in the background after
//! resume (`--prefault-rest`), and finding the pages a lazily mapped guest
//! touched (`/proc/self/pagemap`).
//!
//! The pages go in file order, in contiguous runs of up to [`BATCH`]
//! bytes: with `uffd` one `UFFDIO_COPY` per run, with `mmap` a
//! `readahead` of the file and one `MADV_POPULATE_WRITE` per run.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::uffd::{HostRegion, Server};
use super::working_set::{WorkingSet, PAGE};

/// Largest run loaded at once.
pub const BATCH: u64 = 8 << 20;

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
    runs(&WorkingSet { pages }, regions, granule)
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
    let mut buf = vec![0u8; BATCH as usize];
    for r in runs {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let n = match server {
            Some(s) => s.load(r.host, r.file_offset, &mut buf[..r.bytes as usize], true)?,
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
}
