//! Preallocation: faulting guest memory in before the guest runs, every
//! region at once, each by its own threads created through its thread
//! context so they run on the region's host CPUs.
//!
//! Every worker of every region is created first and waits at one start
//! gate; the gate opens once all of them are running. Creating a thread
//! maps its stack, and a new thread maps its signal stack as it starts;
//! both need the process's memory-map lock for writing, while a worker
//! inside `MADV_POPULATE_WRITE` (or faulting pages in) holds it for
//! reading. A worker still starting when another begins would wait for that
//! one to finish, and the workers would run one after the other. (QEMU's
//! `touch_all_pages` holds its threads until all are created, for the same
//! reason.)
//!
//! A thread populates its share with `MADV_POPULATE_WRITE` (Linux 5.14+),
//! which faults pages in writable without changing their contents. Kernels
//! without it answer EINVAL; the thread then writes once per page instead,
//! with an atomic read-modify-write that also leaves contents alone.

use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::backing::{BackedRegion, GuestMemoryBacking, Piece};
use super::context::ThreadContext;
use super::cpulist::CpuSet;
use super::plan::{MemoryPlan, PageBacking};
use super::sys;
use super::verify::{own_last_cpu, page_nodes, PagePlacement};
use super::MemoryError;

/// Pages sampled per region after preallocation to see where they landed.
pub const PLACEMENT_SAMPLES: usize = 64;

/// How a thread faulted its pages in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PopulateMethod {
    /// One `madvise(MADV_POPULATE_WRITE)` per range.
    MadvPopulateWrite,
    /// One write per page.
    Touch,
}

/// Which method to try.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MethodChoice {
    /// MADV_POPULATE_WRITE, falling back to touching where the kernel lacks
    /// it.
    #[default]
    Auto,
    /// Touch every page (for comparisons).
    Touch,
}

/// One preallocation thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadReport {
    /// Thread name (`prealloc-n<node>-<index>`).
    pub name: String,
    /// Kernel thread id.
    pub tid: i32,
    /// CPUs it was allowed to run on (inherited from its context).
    pub allowed_cpus: CpuSet,
    /// CPU it last ran on.
    pub last_cpu: Option<u32>,
    /// Host node of that CPU.
    pub node: Option<u32>,
    /// Pages (of the backing's page size) it faulted in.
    pub pages_touched: u64,
    /// Bytes it faulted in.
    pub bytes: u64,
    /// How.
    pub method: PopulateMethod,
    /// When it started, from the start of the whole preallocation.
    pub started_ns: u64,
    /// From its first to its last page.
    pub elapsed_ns: u64,
}

/// A region's thread context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContextReport {
    /// Thread name (`memctx-n<node>`).
    pub name: String,
    /// Kernel thread id.
    pub tid: i32,
    /// CPUs it and its threads may run on.
    pub allowed_cpus: CpuSet,
}

/// One region's preallocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegionReport {
    /// Guest node number.
    pub guest_node: u32,
    /// Bytes faulted in.
    pub bytes: u64,
    /// Page size of the backing.
    pub page_size: u64,
    /// `touch` if any of its threads had to fall back to touching.
    pub method: PopulateMethod,
    /// From the first thread's creation to the last thread's end.
    pub elapsed_ns: u64,
    /// Its thread context.
    pub context: ContextReport,
    /// Its threads.
    pub threads: Vec<ThreadReport>,
    /// Where sampled pages landed afterwards.
    pub placement: PagePlacement,
}

/// The whole preallocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PreallocReport {
    /// Regions in guest-physical order (empty without `--prealloc`).
    pub regions: Vec<RegionReport>,
    /// Wall time for all regions together.
    pub elapsed_ns: u64,
}

impl PreallocReport {
    /// Bytes faulted in.
    pub fn bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.bytes).sum()
    }
}

/// The thread contexts of a plan's regions, created up front: before a
/// sandbox forbids sched_setaffinity, preallocation can then run later.
#[derive(Debug)]
pub struct PreallocContexts {
    /// (index into the plan's regions, its context)
    contexts: Vec<(usize, ThreadContext)>,
}

impl PreallocContexts {
    /// One context per region that preallocates, restricted to the region's
    /// CPUs.
    pub fn new(plan: &MemoryPlan) -> Result<Self, MemoryError> {
        let mut contexts = Vec::new();
        for (i, r) in plan.regions().iter().enumerate() {
            if let Some(p) = &r.prealloc {
                contexts.push((i, ThreadContext::new(&r.context_name(), p.cpus.as_ref())?));
            }
        }
        Ok(Self { contexts })
    }

    /// The contexts, in region order.
    pub fn contexts(&self) -> impl Iterator<Item = &ThreadContext> {
        self.contexts.iter().map(|(_, c)| c)
    }
}

/// A slice of one piece. Holding the piece keeps the memory mapped while
/// the thread works.
struct Span {
    piece: Piece,
    offset: usize,
    len: usize,
}

type MadviseFn = fn(*mut u8, usize, libc::c_int) -> io::Result<()>;

/// Holds every worker until all of them are running (see the module's
/// comment): each checks in, and the gate opens once all have.
#[derive(Default)]
struct StartGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Workers that reached the gate.
    arrived: usize,
    /// None: closed; Some(true): open; Some(false): cancelled.
    open: Option<bool>,
}

impl StartGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets every worker go (`true`) or turns them all back (`false`) once
    /// `workers` of them have arrived; at once when cancelling.
    fn release(&self, workers: usize, go: bool) {
        let mut state = self.lock();
        while go && state.arrived < workers {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.open = Some(go);
        self.changed.notify_all();
    }

    /// A worker checks in and waits until the gate opens (true) or is
    /// cancelled (false).
    fn wait(&self) -> bool {
        let mut state = self.lock();
        state.arrived += 1;
        self.changed.notify_all();
        loop {
            if let Some(go) = state.open {
                return go;
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// What a thread returns.
struct WorkerOutcome {
    name: String,
    tid: i32,
    allowed_cpus: CpuSet,
    last_cpu: Option<u32>,
    pages: u64,
    bytes: u64,
    method: PopulateMethod,
    start: Instant,
    end: Instant,
}

/// Splits a region into `threads` runs of whole pages (fewer if the region
/// has fewer pages), each a list of spans over the region's pieces.
fn split(region: &BackedRegion, threads: usize, page_size: u64) -> Vec<Vec<Span>> {
    let pages = region.size() / page_size;
    let threads = (threads as u64).clamp(1, pages.max(1));
    let mut out = Vec::new();
    let mut pieces = region.pieces().iter();
    let mut piece = pieces.next();
    let mut piece_off: usize = 0;
    for t in 0..threads {
        let share = (pages * (t + 1) / threads - pages * t / threads) * page_size;
        let mut left = share as usize;
        let mut spans = Vec::new();
        while left > 0 {
            let Some(p) = piece else { break };
            let take = left.min(p.len() - piece_off);
            spans.push(Span {
                piece: p.clone(),
                offset: piece_off,
                len: take,
            });
            left -= take;
            piece_off += take;
            if piece_off == p.len() {
                piece = pieces.next();
                piece_off = 0;
            }
        }
        out.push(spans);
    }
    out
}

/// Writes once to every page of `[ptr, ptr + len)`, keeping its contents.
///
/// # Safety
///
/// The range must lie inside a live read-write mapping.
unsafe fn touch_pages(ptr: *mut u8, len: usize, page_size: usize) -> u64 {
    let mut pages = 0;
    let mut off = 0;
    while off < len {
        // SAFETY: off < len, so the byte is inside the caller's mapping.
        let p = unsafe { ptr.add(off) };
        // A locked `or` of zero is one write access (so one write fault, no
        // zero-page read fault first) that leaves the byte as it was, even
        // if another thread writes it. The compiler cannot turn it into a
        // plain load, as it may with an idempotent atomic.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `p` points into a live writable mapping.
        unsafe {
            std::arch::asm!("lock or byte ptr [{p}], 0", p = in(reg) p, options(nostack, preserves_flags))
        };
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: `p` points into a live writable mapping.
        unsafe {
            p.write_volatile(p.read_volatile())
        };
        pages += 1;
        off += page_size;
    }
    pages
}

/// Faults one span in; switches `method` to touching if the kernel lacks
/// MADV_POPULATE_WRITE.
fn populate(
    span: &Span,
    page_size: usize,
    method: &mut PopulateMethod,
    madvise: MadviseFn,
) -> io::Result<u64> {
    // The span lies inside the mapping (built by `split`).
    let ptr = span.piece.host_addr().wrapping_add(span.offset);
    if *method == PopulateMethod::MadvPopulateWrite {
        loop {
            match madvise(ptr, span.len, libc::MADV_POPULATE_WRITE) {
                Ok(()) => return Ok((span.len / page_size) as u64),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN)) => {
                    continue
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    *method = PopulateMethod::Touch;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
    }
    // SAFETY: `span` is inside its mapping, which `span.piece` keeps
    // alive and which is mapped read-write.
    Ok(unsafe { touch_pages(ptr, span.len, page_size) })
}

/// A preallocation thread's body. It has no way to change its affinity:
/// it runs where its thread context put it.
fn worker(
    gate: &StartGate,
    spans: Vec<Span>,
    page_size: usize,
    choice: MethodChoice,
    madvise: MadviseFn,
) -> io::Result<WorkerOutcome> {
    if !gate.wait() {
        return Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "preallocation cancelled before this thread started",
        ));
    }
    let start = Instant::now();
    let mut method = match choice {
        MethodChoice::Auto => PopulateMethod::MadvPopulateWrite,
        MethodChoice::Touch => PopulateMethod::Touch,
    };
    let mut pages = 0;
    let mut bytes = 0;
    for span in &spans {
        pages += populate(span, page_size, &mut method, madvise)?;
        bytes += span.len as u64;
    }
    let end = Instant::now();
    Ok(WorkerOutcome {
        name: std::thread::current()
            .name()
            .unwrap_or_default()
            .to_string(),
        tid: sys::gettid(),
        allowed_cpus: sys::thread_affinity(0).unwrap_or_default(),
        last_cpu: own_last_cpu(),
        pages,
        bytes,
        method,
        start,
        end,
    })
}

/// Preallocates every region of `backing` that `plan` asks to, all regions
/// concurrently, with the default method.
pub fn preallocate(
    backing: &GuestMemoryBacking,
    plan: &MemoryPlan,
) -> Result<PreallocReport, MemoryError> {
    preallocate_with(backing, plan, MethodChoice::Auto)
}

/// [`preallocate`] with a chosen method.
pub fn preallocate_with(
    backing: &GuestMemoryBacking,
    plan: &MemoryPlan,
    method: MethodChoice,
) -> Result<PreallocReport, MemoryError> {
    let contexts = PreallocContexts::new(plan)?;
    preallocate_in(&contexts, backing, plan, method)
}

/// [`preallocate`] through contexts created earlier.
pub fn preallocate_in(
    contexts: &PreallocContexts,
    backing: &GuestMemoryBacking,
    plan: &MemoryPlan,
    method: MethodChoice,
) -> Result<PreallocReport, MemoryError> {
    run(contexts, backing, plan, method, sys::madvise)
}

struct RegionRun<'a> {
    region: &'a BackedRegion,
    context: &'a ThreadContext,
    start: Instant,
    handles: Vec<(String, JoinHandle<io::Result<WorkerOutcome>>)>,
}

fn run(
    contexts: &PreallocContexts,
    backing: &GuestMemoryBacking,
    plan: &MemoryPlan,
    method: MethodChoice,
    madvise: MadviseFn,
) -> Result<PreallocReport, MemoryError> {
    let hint = match backing.backing() {
        PageBacking::HugeTlb(_) => {
            "; the huge page pool ran out (reserve more pages, see --hugepages)"
        }
        _ => "",
    };
    let t0 = Instant::now();
    let (runs, mut failure) = start_workers(contexts, backing, plan, method, madvise);
    // Join everything, even after a failure, so no thread outlives the call.
    let mut regions = Vec::new();
    for mut run in runs {
        let (threads, end) = join_workers(&mut run, plan, t0, hint, &mut failure);
        if failure.is_some() {
            continue;
        }
        let elapsed = end.duration_since(run.start);
        regions.push(region_report(&run, threads, backing.page_size(), elapsed)?);
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(PreallocReport {
        regions,
        elapsed_ns: t0.elapsed().as_nanos() as u64,
    })
}

/// Creates every region's worker threads through the region's context,
/// then lets them all start at once; stops creating at the first failure
/// (returned), and then lets the workers created so far end without work.
fn start_workers<'a>(
    contexts: &'a PreallocContexts,
    backing: &'a GuestMemoryBacking,
    plan: &MemoryPlan,
    method: MethodChoice,
    madvise: MadviseFn,
) -> (Vec<RegionRun<'a>>, Option<MemoryError>) {
    let page_size = backing.page_size();
    let gate = Arc::new(StartGate::default());
    let mut runs: Vec<RegionRun> = Vec::new();
    let mut failure = None;
    'start: for (index, context) in &contexts.contexts {
        let (Some(region), Some(rp)) = (backing.regions().get(*index), plan.regions().get(*index))
        else {
            continue;
        };
        let Some(prealloc) = &rp.prealloc else {
            continue;
        };
        let mut region_run = RegionRun {
            region,
            context,
            start: Instant::now(),
            handles: Vec::new(),
        };
        for (i, spans) in split(region, prealloc.threads, page_size)
            .into_iter()
            .enumerate()
        {
            let name = rp.worker_name(i);
            let gate = Arc::clone(&gate);
            match context.spawn(name.clone(), move || {
                worker(&gate, spans, page_size as usize, method, madvise)
            }) {
                Ok(h) => region_run.handles.push((name, h)),
                Err(e) => {
                    failure = Some(e);
                    runs.push(region_run);
                    break 'start;
                }
            }
        }
        runs.push(region_run);
    }
    let workers = runs.iter().map(|r| r.handles.len()).sum();
    gate.release(workers, failure.is_none());
    (runs, failure)
}

/// Joins a region's workers: their reports and when the last one ended.
/// The first failure of any goes to `failure`.
fn join_workers(
    run: &mut RegionRun,
    plan: &MemoryPlan,
    t0: Instant,
    hint: &'static str,
    failure: &mut Option<MemoryError>,
) -> (Vec<ThreadReport>, Instant) {
    let mut threads = Vec::new();
    let mut end = run.start;
    for (name, h) in run.handles.drain(..) {
        let outcome = match h.join() {
            Ok(Ok(o)) => o,
            Ok(Err(source)) => {
                failure.get_or_insert(MemoryError::Populate {
                    thread: name,
                    guest_node: run.region.guest_node(),
                    hint,
                    source,
                });
                continue;
            }
            Err(_) => {
                failure.get_or_insert(MemoryError::WorkerPanicked { name });
                continue;
            }
        };
        end = end.max(outcome.end);
        threads.push(ThreadReport {
            node: outcome.last_cpu.and_then(|c| plan.host_node_of_cpu(c)),
            name: outcome.name,
            tid: outcome.tid,
            allowed_cpus: outcome.allowed_cpus,
            last_cpu: outcome.last_cpu,
            pages_touched: outcome.pages,
            bytes: outcome.bytes,
            method: outcome.method,
            started_ns: outcome.start.duration_since(t0).as_nanos() as u64,
            elapsed_ns: outcome.end.duration_since(outcome.start).as_nanos() as u64,
        });
    }
    (threads, end)
}

/// A region's report from its workers' reports and a sample of where its
/// pages landed.
fn region_report(
    run: &RegionRun,
    threads: Vec<ThreadReport>,
    page_size: u64,
    elapsed: Duration,
) -> Result<RegionReport, MemoryError> {
    let mut placement = PagePlacement::default();
    for piece in run.region.pieces() {
        let share = (PLACEMENT_SAMPLES as u64 * piece.len() as u64 / run.region.size().max(1))
            .max(1) as usize;
        placement.add(&page_nodes(piece.host_addr(), piece.len(), share)?);
    }
    let method = if threads.iter().any(|t| t.method == PopulateMethod::Touch) {
        PopulateMethod::Touch
    } else {
        PopulateMethod::MadvPopulateWrite
    };
    Ok(RegionReport {
        guest_node: run.region.guest_node(),
        bytes: threads.iter().map(|t| t.bytes).sum(),
        page_size,
        method,
        elapsed_ns: elapsed.as_nanos() as u64,
        context: ContextReport {
            name: run.context.name().to_string(),
            tid: run.context.tid(),
            allowed_cpus: run.context.allowed_cpus().clone(),
        },
        threads,
        placement,
    })
}

#[cfg(test)]
mod tests;
