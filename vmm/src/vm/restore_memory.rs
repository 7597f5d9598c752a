//! A restore's guest memory beyond the copy (`crate::snapshot`'s
//! `memory`): the `userfaultfd` handler (`uffd`), the working set recorded
//! up to the guest's next mark and prefetched on a later restore
//! (`--prefetch`), the background prefault (`--prefault-rest`), and the
//! timeline's `restore_memory` object that reports them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use bootscope_model::hist::Log2Hist;
use bootscope_model::mark::MarkSource;
use bootscope_model::restore_memory::{FaultsDoc, PrefetchDoc, RestoreMemoryDoc, WorkingSetDoc};
use vm_memory::GuestMemoryMmap;

use crate::snapshot::prefetch::{self, Loaded, Prefetch};
use crate::snapshot::uffd::{self, Fault, Handler, HandlerSetup, HostRegion, Server};
use crate::snapshot::working_set::{self, WorkingSet, WorkingSetError, PAGE};
use crate::snapshot::{MemoryRestore, RestoreRequest, SnapshotError};
use crate::timeline::{restore_marks, vmm_marks, Recorder, StopReason, Timeline};

/// Where the window from the first `KVM_RUN` ended, and (lazily mapped
/// memory) the pages present then.
#[derive(Default)]
struct Window {
    end: Mutex<Option<(String, u64)>>,
    present: Mutex<Option<Vec<u64>>>,
}

/// The record loaded by a thread while the guest runs (`uffd`).
struct LivePrefetch {
    prefetch: Arc<Prefetch>,
    stop: Arc<AtomicBool>,
    /// When it ended, on the run's clock (0: not yet).
    end_ns: Arc<AtomicU64>,
    start_ns: u64,
    thread: Option<JoinHandle<Result<(), String>>>,
}

struct Background {
    stop: Arc<AtomicBool>,
    pages: Arc<AtomicU64>,
    thread: JoinHandle<Result<(), String>>,
}

/// A restore's memory, from before it is filled to after the run.
pub(super) struct Session {
    mode: MemoryRestore,
    granule: u64,
    regions: Vec<HostRegion>,
    server: Option<Arc<Server>>,
    handler: Option<Handler>,
    /// The record `--prefetch` loads.
    record: Option<WorkingSet>,
    prefetched: Option<(Loaded, u64)>,
    live: Option<LivePrefetch>,
    /// Set when the record was loaded while the guest ran: the times a
    /// fault moved the load.
    jumps: Option<u64>,
    window: Arc<Window>,
    background: Option<Background>,
    warnings: Vec<String>,
}

fn refused(why: impl Into<String>) -> SnapshotError {
    SnapshotError::MemoryRefused(why.into())
}

/// The record `--prefetch` asks for (refused when unusable), or without
/// it a warning for a record that is there and unusable.
fn read_record(
    req: &RestoreRequest,
    warnings: &mut Vec<String>,
) -> Result<Option<WorkingSet>, SnapshotError> {
    match working_set::read(&req.snapshot) {
        Ok(set) if req.lazy.prefetch => Ok(Some(set)),
        Ok(_) => Ok(None),
        Err(e) if req.lazy.prefetch => Err(refused(format!("--prefetch: {e}"))),
        Err(WorkingSetError::Missing(_)) => Ok(None),
        Err(e) => {
            warnings.push(format!("working set ignored: {e}"));
            Ok(None)
        }
    }
}

impl Session {
    /// Checks what is asked against the mode, reads the record, and with
    /// `uffd` maps guest memory anew, registers it and starts the handler
    /// (so that anything reading guest memory from here on, `--verify`
    /// included, is served). `run_stop` stops the run if the handler dies.
    pub(super) fn start(
        mem: &GuestMemoryMmap,
        req: &RestoreRequest,
        recorder: &Recorder,
        run_stop: Arc<AtomicBool>,
        huge: Option<u64>,
    ) -> Result<Self, SnapshotError> {
        let lazy = &req.lazy;
        let mode = req.memory;
        if mode == MemoryRestore::Copy && (lazy.prefetch || lazy.prefault_rest) {
            return Err(refused("--prefetch and --prefault-rest need --memory-restore uffd or mmap (copy loads all of memory first)"));
        }
        if mode == MemoryRestore::Mmap && huge.is_some() {
            return Err(refused("--memory-restore mmap cannot put guest memory on huge pages (a file mapping is not hugetlb); restore with --memory-restore uffd or copy, or without --hugepages"));
        }
        let huge = huge.filter(|_| mode == MemoryRestore::Uffd);
        if huge.is_some_and(|h| h > 2 << 20) {
            return Err(refused("--memory-restore uffd serves 2 MiB huge pages at most; restore with --hugepages 2M"));
        }
        let mut warnings = Vec::new();
        let record = read_record(req, &mut warnings)?;
        let regions = uffd::host_regions(mem, &req.snapshot.state.identity.regions)
            .map_err(SnapshotError::Memory)?;
        let mut session = Self {
            mode,
            granule: huge.unwrap_or(PAGE),
            regions,
            server: None,
            handler: None,
            record,
            prefetched: None,
            live: None,
            jumps: None,
            window: Arc::default(),
            background: None,
            warnings,
        };
        if mode == MemoryRestore::Uffd {
            let fd = uffd::open().map_err(refused)?;
            if huge.is_some() {
                uffd::release_hugetlb_files(mem).map_err(|e| {
                    SnapshotError::Memory(format!(
                        "cannot give back the set-up's huge pages before mapping guest memory anew: {e}"
                    ))
                })?;
            }
            let file = req
                .snapshot
                .memory
                .try_clone()
                .map_err(|e| SnapshotError::Memory(e.to_string()))?;
            let server = Server::register(
                fd,
                session.regions.clone(),
                file,
                req.snapshot.manifest.memory_bytes,
                huge,
            )
            .map_err(|e| {
                if huge.is_some() {
                    refused(e)
                } else {
                    SnapshotError::Memory(e)
                }
            })?;
            let server = Arc::new(server);
            let live = match &session.record {
                Some(set) if !lazy.prefetch_first => {
                    let runs = prefetch::runs(set, &session.regions, session.granule);
                    Some(Arc::new(Prefetch::new(runs, &set.order)))
                }
                _ => None,
            };
            session.live = live.clone().map(|prefetch| LivePrefetch {
                prefetch,
                stop: Arc::default(),
                end_ns: Arc::default(),
                start_ns: 0,
                thread: None,
            });
            let setup = HandlerSetup {
                clock: recorder.clock(),
                run_stop,
                fail_after: lazy.fail_handler_after,
                prefetch: live,
            };
            let handler = Handler::start(server.clone(), setup).map_err(|e| {
                SnapshotError::Memory(format!("cannot start the userfaultfd handler: {e}"))
            })?;
            session.server = Some(server);
            session.handler = Some(handler);
        }
        Ok(session)
    }

    /// After the memory is copied, mapped or registered: marks it, loads
    /// the record (`--prefetch`) and arms the window's end.
    pub(super) fn loaded(
        &mut self,
        req: &RestoreRequest,
        recorder: &Arc<Recorder>,
    ) -> Result<(), SnapshotError> {
        recorder.vmm(match self.mode {
            MemoryRestore::Copy => restore_marks::MEMORY_COPIED,
            MemoryRestore::Mmap => restore_marks::MEMORY_MAPPED,
            MemoryRestore::Uffd => restore_marks::MEMORY_REGISTERED,
        });
        if self.live.is_some() {
            self.start_live(recorder)?;
        } else if let Some(set) = &self.record {
            let started = Instant::now();
            let runs = prefetch::runs(set, &self.regions, self.granule);
            let loaded = match &self.server {
                Some(s) => prefetch::load_uffd(s, &runs),
                None => prefetch::load_mmap(&req.snapshot.memory, &runs),
            }
            .map_err(SnapshotError::Memory)?;
            self.prefetched = Some((loaded, started.elapsed().as_nanos() as u64));
            recorder.vmm(restore_marks::PREFETCHED);
        }
        let window = self.window.clone();
        let regions = self.regions.clone();
        let lazily_mapped = self.mode == MemoryRestore::Mmap && !req.verify;
        let clock = recorder.clock();
        let until = req.lazy.until.clone();
        recorder.set_window_trigger(Box::new(move |m| {
            let ends = match &until {
                Some(u) => m.name == *u,
                None => m.source != MarkSource::Vmm,
            } || m.name == vmm_marks::GUEST_SHUTDOWN;
            let mut end = window.end.lock().unwrap_or_else(|e| e.into_inner());
            if !ends || end.is_some() {
                return;
            }
            *end = Some((m.name.clone(), m.t_ns.min(clock.now_ns())));
            if lazily_mapped {
                let present = prefetch::present_pages(&regions).ok();
                *window.present.lock().unwrap_or_else(|e| e.into_inner()) = present;
            }
        }));
        Ok(())
    }

    /// Starts the thread that loads the record while the guest runs; it
    /// marks its end (`restore: background prefetch done`).
    fn start_live(&mut self, recorder: &Arc<Recorder>) -> Result<(), SnapshotError> {
        let (Some(live), Some(server)) = (self.live.as_mut(), self.server.clone()) else {
            return Ok(());
        };
        live.start_ns = recorder.clock().now_ns();
        let (p, stop, end) = (
            live.prefetch.clone(),
            live.stop.clone(),
            live.end_ns.clone(),
        );
        let rec = recorder.clone();
        let thread = std::thread::Builder::new()
            .name("prefetch".into())
            .spawn(move || {
                let r = p.load(&server, &stop);
                if r.is_ok() && !stop.load(Ordering::SeqCst) {
                    end.store(rec.clock().now_ns().max(1), Ordering::SeqCst);
                    rec.vmm(restore_marks::PREFETCH_DONE);
                }
                r
            })
            .map_err(|e| SnapshotError::Memory(format!("cannot start the prefetch thread: {e}")))?;
        live.thread = Some(thread);
        Ok(())
    }

    /// Stops the background prefetch, if one runs: what it loaded and how
    /// long it took (to the run's end when it did not finish; a reason it
    /// stopped early among the warnings).
    fn stop_live(&mut self, run_end_ns: u64) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        live.stop.store(true, Ordering::SeqCst);
        let why = match live.thread.take().map(|t| t.join()) {
            Some(Ok(Ok(()))) | None => None,
            Some(Ok(Err(e))) => Some(e),
            Some(Err(_)) => Some("the prefetch thread panicked".to_string()),
        };
        if let Some(e) = why {
            self.warnings
                .push(format!("background prefetch stopped: {e}"));
        }
        let end = match live.end_ns.load(Ordering::SeqCst) {
            0 => {
                self.warnings
                    .push("background prefetch unfinished when the run ended".into());
                run_end_ns
            }
            t => t,
        };
        let p = &live.prefetch;
        let loaded = Loaded {
            pages: p.pages.load(Ordering::Relaxed),
            batches: p.batches.load(Ordering::Relaxed),
        };
        self.prefetched = Some((loaded, end.saturating_sub(live.start_ns)));
        self.jumps = Some(p.jumps.load(Ordering::Relaxed));
    }

    /// Just before the first `KVM_RUN`: starts the background prefault
    /// (`--prefault-rest`).
    pub(super) fn resume(&mut self, req: &RestoreRequest) {
        if !req.lazy.prefault_rest || self.mode == MemoryRestore::Copy {
            return;
        }
        let extents = match &self.server {
            Some(s) => s.extents.clone(),
            None => {
                match uffd::Extents::of(&req.snapshot.memory, req.snapshot.manifest.memory_bytes) {
                    Ok(e) => e,
                    Err(e) => {
                        self.warnings.push(format!("no background prefault: {e}"));
                        return;
                    }
                }
            }
        };
        let empty = WorkingSet::default();
        let runs = prefetch::rest(
            &extents,
            self.record.as_ref().unwrap_or(&empty),
            &self.regions,
            self.granule,
        );
        let (stop, pages) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, p, server) = (stop.clone(), pages.clone(), self.server.clone());
        let spawned = std::thread::Builder::new()
            .name("prefault".into())
            .spawn(move || prefetch::background(server.as_deref(), &runs, &s, &p));
        match spawned {
            Ok(thread) => {
                self.background = Some(Background {
                    stop,
                    pages,
                    thread,
                })
            }
            Err(e) => self.warnings.push(format!("no background prefault: {e}")),
        }
    }

    /// After the run: stops the threads, fills the timeline's
    /// `restore_memory`, records the working set, and makes a failed
    /// handler the run's outcome.
    pub(super) fn finish(mut self, timeline: &mut Timeline, req: &RestoreRequest) {
        let background = self.stop_background();
        let run_end = timeline.marks.iter().map(|m| m.t_ns).max().unwrap_or(0);
        self.stop_live(run_end);
        let (faults, failure) = self.stop_handler();
        let (start, end_name, end) = self.window_bounds(timeline);
        let in_window = |t: u64| t >= start && t < end;
        let window_faults: Vec<Fault> = faults
            .iter()
            .flatten()
            .copied()
            .filter(|f| in_window(f.t_ns))
            .collect();
        let per_fault = self.granule / PAGE;
        let touched = match (
            &faults,
            self.window
                .present
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        ) {
            // The handler's faults come in the order it served them: the
            // guest's first-touch order.
            (Some(_), _) => Some((
                WorkingSet::from_pages(
                    window_faults
                        .iter()
                        .flat_map(|f| f.page..f.page + per_fault)
                        .collect(),
                )
                .with_order(window_faults.iter().map(|f| f.page)),
                "faults",
            )),
            (None, Some(p)) => Some((WorkingSet::from_pages(p), "pagemap")),
            _ => None,
        };
        let mut doc = RestoreMemoryDoc {
            mode: self.mode.name().into(),
            page_bytes: self.granule,
            window_end: end_name,
            window_ns: end.saturating_sub(start),
            background_pages: background,
            error: failure.clone(),
            ..Default::default()
        };
        doc.faults = faults
            .as_ref()
            .map(|all| faults_doc(&window_faults, all.len() as u64));
        doc.prefetch = self.prefetch_doc(touched.as_ref().map(|t| &t.0), &window_faults);
        let recorded = self.record_set(
            req,
            touched.as_ref(),
            failure.is_some(),
            background.is_some(),
        );
        doc.working_set = touched.map(|(set, source)| WorkingSetDoc {
            pages: set.len(),
            bytes: set.len() * PAGE,
            recorded,
            source: source.into(),
        });
        doc.warnings = std::mem::take(&mut self.warnings);
        if let Some(why) = failure {
            timeline.outcome = Some(bootscope_model::timeline::TimelineOutcome {
                reason: StopReason::Error.name(),
                clean: Some(false),
                detail: format!("the userfaultfd handler failed: {why}; the VMM stopped the guest"),
            });
        }
        timeline.restore_memory = Some(doc);
    }

    /// Stops the background prefault thread, if one runs: the pages it
    /// loaded (a reason it stopped early among the warnings).
    fn stop_background(&mut self) -> Option<u64> {
        let b = self.background.take()?;
        b.stop.store(true, Ordering::SeqCst);
        let why = match b.thread.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some("the prefault thread panicked".to_string()),
        };
        if let Some(e) = why {
            self.warnings
                .push(format!("background prefault stopped: {e}"));
        }
        Some(b.pages.load(Ordering::Relaxed))
    }

    /// Stops the userfaultfd handler, if one runs: the faults it served
    /// and why it failed, if it did.
    fn stop_handler(&mut self) -> (Option<Vec<Fault>>, Option<String>) {
        match self.handler.take() {
            Some(mut h) => {
                h.stop();
                let f =
                    std::mem::take(&mut *h.log.faults.lock().unwrap_or_else(|e| e.into_inner()));
                (Some(f), h.failure())
            }
            None => (None, None),
        }
    }

    /// The window whose faults make the working set: from the first
    /// `KVM_RUN` to the mark that ended it (the one asked for, else the
    /// guest's next; else its shutdown; else empty): its start, the end
    /// mark's name, its end.
    fn window_bounds(&self, timeline: &Timeline) -> (u64, String, u64) {
        let start = mark_t(timeline, vmm_marks::FIRST_KVM_RUN).unwrap_or(0);
        let (end_name, end) = self
            .window
            .end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .or_else(|| {
                mark_t(timeline, vmm_marks::GUEST_SHUTDOWN)
                    .map(|t| (vmm_marks::GUEST_SHUTDOWN.to_string(), t))
            })
            .unwrap_or_else(|| ("none".into(), start));
        (start, end_name, end)
    }

    /// The prefetch's figures: misses are faults in the window (`uffd`) or
    /// pages present outside the record (`mmap`).
    fn prefetch_doc(
        &self,
        touched: Option<&WorkingSet>,
        window_faults: &[Fault],
    ) -> Option<PrefetchDoc> {
        let (loaded, ns) = self.prefetched?;
        let record = self.record.as_ref()?;
        let split = split_faults(window_faults, record, self.granule);
        let (late, raced) = (split.late, split.raced);
        let misses = match (&self.server, touched) {
            (Some(_), _) => split.misses,
            (None, Some(t)) => t.pages.iter().filter(|p| !record.contains(**p)).count() as u64,
            (None, None) => 0,
        };
        Some(PrefetchDoc {
            pages: loaded.pages,
            bytes: loaded.pages * PAGE,
            batches: loaded.batches,
            ns,
            background: self.jumps.is_some(),
            late,
            raced,
            jumps: self.jumps.unwrap_or(0),
            touch_order: self.jumps.is_some() && !record.order.is_empty(),
            hits: None,
            misses,
            waste: None,
        })
    }

    /// Writes `DIR/working-set` when this restore records one: lazily
    /// (no prefetch, no background prefault, no `--verify` in `mmap`), the
    /// handler alive, the set not empty. Returns its path.
    fn record_set(
        &mut self,
        req: &RestoreRequest,
        touched: Option<&(WorkingSet, &str)>,
        failed: bool,
        background: bool,
    ) -> Option<String> {
        let (set, _) = touched?;
        if !req.lazy.record || req.lazy.prefetch || failed || background || set.is_empty() {
            return None;
        }
        match working_set::write(&req.snapshot, set) {
            Ok(p) => Some(p.display().to_string()),
            Err(e) => {
                self.warnings.push(format!("working set not recorded: {e}"));
                None
            }
        }
    }
}

/// The window's faults against the record, in 4 KiB pages (a fault
/// covers `granule` bytes, all of them counted): filled by the handler
/// before the background load reached them (`late`), met the load
/// (`raced`), outside the record (`misses`). The load rounds the record
/// out to whole granules, so a fault is in the record when its granule
/// holds any recorded page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FaultSplit {
    late: u64,
    raced: u64,
    misses: u64,
}

fn split_faults(window_faults: &[Fault], record: &WorkingSet, granule: u64) -> FaultSplit {
    let per_fault = granule / PAGE;
    let mut split = FaultSplit::default();
    for f in window_faults {
        let slot = match (record.holds_any(f.page, per_fault), f.raced) {
            (true, false) => &mut split.late,
            (true, true) => &mut split.raced,
            (false, _) => &mut split.misses,
        };
        *slot += per_fault;
    }
    split
}

fn mark_t(timeline: &Timeline, name: &str) -> Option<u64> {
    timeline
        .marks
        .iter()
        .find(|m| m.name == name && m.source == MarkSource::Vmm)
        .map(|m| m.t_ns)
}

fn faults_doc(window: &[Fault], run_count: u64) -> FaultsDoc {
    let mut hist = Log2Hist::default();
    for f in window {
        hist.add(f.service_ns);
    }
    FaultsDoc {
        count: window.len() as u64,
        copied: window.iter().filter(|f| !f.zero).count() as u64,
        zero: window.iter().filter(|f| f.zero).count() as u64,
        run_count,
        wait_ns: window.iter().map(|f| f.service_ns).sum(),
        latency: hist.buckets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(page: u64, raced: bool) -> Fault {
        Fault {
            page,
            t_ns: 0,
            service_ns: 0,
            zero: false,
            raced,
        }
    }

    /// On 4 KiB pages a fault is one page: late or raced when the record
    /// holds it, else a miss.
    #[test]
    fn faults_on_4k_pages_split_by_the_record() {
        let record = WorkingSet::from_pages(vec![3, 4, 9]);
        let faults = [
            fault(3, false),
            fault(4, true),
            fault(5, false),
            fault(9, false),
        ];
        let split = split_faults(&faults, &record, PAGE);
        assert_eq!(
            split,
            FaultSplit {
                late: 2,
                raced: 1,
                misses: 1
            }
        );
    }

    /// On 2 MiB pages a fault names the huge page's first 4 KiB page; the
    /// load rounded the record out to whole huge pages, so a fault on a
    /// huge page holding any recorded page is late or raced, whichever of
    /// its pages the record holds; only a huge page with none is a miss.
    /// Each counts the huge page's 512 pages.
    #[test]
    fn faults_on_2m_pages_split_by_the_huge_pages_the_record_holds() {
        let huge = 2 << 20;
        let per = huge / PAGE;
        // Huge page 0: its first page; 1: a page in its middle; 2: its
        // last page; 3: none.
        let record = WorkingSet::from_pages(vec![0, per + 100, 3 * per - 1]);
        let faults = [
            fault(0, false),
            fault(per, false),
            fault(2 * per, true),
            fault(3 * per, false),
        ];
        let split = split_faults(&faults, &record, huge);
        assert_eq!(
            split,
            FaultSplit {
                late: 2 * per,
                raced: per,
                misses: per
            }
        );
    }
}
