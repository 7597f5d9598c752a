//! The collector: loads the eBPF object, follows the target, streams marks
//! and thread lifetimes from the ring buffer, and turns the in-kernel
//! aggregates into a [`Profile`] whenever asked.
//!
//! ```no_run
//! use bootscope_profiler::collector::{Collector, CollectorConfig, TargetSpec};
//! let c = Collector::start(CollectorConfig::new(TargetSpec::Pid(1234)))?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let live = c.snapshot(); // as often as wanted
//! let done = c.finish();
//! # Ok::<(), bootscope_profiler::ProfilerError>(())
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap as BpfHashMap, IterableMap, MapData, PerCpuArray, RingBuf};
use aya::programs::Program;
use aya::{Ebpf, EbpfLoader, Pod};

use crate::bpf::{self, BsEvent, BsField, CollectorKind, ProgramSpec, Source, PROGRAMS};
use crate::error::ProfilerError;
use crate::hist;
use crate::kvm_stats;
use crate::phases::{self, PhaseNames};
use crate::profile::*;
use crate::reasons::{ReasonTables, ISA_SVM, ISA_VMX};
use crate::topology::{page_size, Topology};
use crate::tracefs::{EventFormat, Tracefs};

/// What to profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// A running process (and the children it starts from now on).
    Pid(u32),
    /// A process the caller launched and holds before exec (see
    /// [`crate::launch::HeldCommand`]); release it after `start`.
    Launched(u32),
    /// This process: bootscope profiling its own VMM.
    CurrentProcess,
}

/// Which collectors to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollectorSet {
    pub exits: bool,
    /// The exits' latency (a second program on every exit, kvm_entry);
    /// only with `exits`.
    pub exit_latency: bool,
    pub faults: bool,
    pub threads: bool,
    pub numa: bool,
    pub phases: bool,
}

impl CollectorSet {
    pub const ALL: Self = Self {
        exits: true,
        exit_latency: true,
        faults: true,
        threads: true,
        numa: true,
        phases: true,
    };

    /// The collectors' names, as `--collect` takes them: `exit-counts` is
    /// the exits collector without the exits' latency.
    pub const NAMES: [&'static str; 6] = [
        "exits",
        "exit-counts",
        "faults",
        "threads",
        "numa",
        "phases",
    ];

    /// A comma-separated list of collector names (`exits,phases`); `all`
    /// for every one. Err says what is wrong, naming the choices.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut set = Self {
            exits: false,
            exit_latency: false,
            faults: false,
            threads: false,
            numa: false,
            phases: false,
        };
        for name in list.split(',').map(str::trim) {
            match name {
                "exits" => {
                    set.exits = true;
                    set.exit_latency = true;
                }
                "exit-counts" => set.exits = true,
                "faults" => set.faults = true,
                "threads" => set.threads = true,
                "numa" => set.numa = true,
                "phases" => set.phases = true,
                "all" => set = Self::ALL,
                "" => {
                    return Err(format!(
                        "an empty collector name in \"{list}\"; name one or more of {}, or all",
                        Self::NAMES.join(", ")
                    ))
                }
                other => {
                    return Err(format!(
                        "unknown collector \"{other}\"; choose from {}, or all",
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(set)
    }

    fn has(&self, k: CollectorKind) -> bool {
        match k {
            CollectorKind::Exits => self.exits,
            CollectorKind::ExitLatency => self.exits && self.exit_latency,
            CollectorKind::Faults => self.faults,
            CollectorKind::Threads => self.threads,
            CollectorKind::Numa => self.numa,
            CollectorKind::Phases => self.phases,
        }
    }
}

/// How to profile.
#[derive(Clone, Debug)]
pub struct CollectorConfig {
    pub target: TargetSpec,
    /// The launched command line, for the profile's `target.command`.
    pub command: Vec<String>,
    /// How often cumulative counters are sampled into `Profile::samples`
    /// (at most: samples are spaced at least 250 times their own cost, so
    /// the sampler stays under 0.1 % of a CPU on a slow machine).
    pub sample_interval: Duration,
    /// Ring buffer size in bytes (rounded up to a power of two, at least a
    /// page).
    pub ring_buffer_bytes: u32,
    /// None: read the ring buffer as soon as it has data. Some(d): read it
    /// only every d (a slow consumer; tests use it to overflow the buffer).
    pub drain_interval: Option<Duration>,
    /// The marker ports.
    pub debug_port: u16,
    pub boot_time_port: u16,
    pub collectors: CollectorSet,
    /// The zero of every `t_ns` (default: when the collector starts). A
    /// VMM profiling itself passes its own process start, so the profile
    /// and its timeline share one clock.
    pub origin: Option<Instant>,
    /// Read threads' exit codes in the kernel (`threads[].exit_code`). That
    /// is the one read that needs the kernel's BTF (CO-RE), and parsing it
    /// is most of the profiler's start-up, so a VMM profiling itself, which
    /// knows its own outcome, turns it off (the default for
    /// [`TargetSpec::CurrentProcess`]).
    pub exit_codes: bool,
    /// The most threads the target will have, when known (a VMM profiling
    /// itself knows its vCPUs and preallocation threads). The maps keyed by
    /// thread are then made for that many (with room to spare) instead of
    /// for any VMM: the kernel preallocates every entry of a hash map when
    /// it creates it, a third of the profiler's start-up at the default
    /// sizes. Entries beyond the size are counted in `map_overflows`.
    pub expected_threads: Option<u32>,
    /// Have the kernel count and time every run of every eBPF program
    /// (BPF_ENABLE_STATS) while profiling, and report each program's runs
    /// and run time in `sources[]`: what the eBPF side cost the host. Off
    /// by default: the kernel then reads the clock twice per run, of every
    /// program on the host, not only ours.
    pub bpf_stats: bool,
}

impl CollectorConfig {
    /// Defaults for a target: every collector, 200 ms samples, 256 KiB ring
    /// buffer, ports 0x80 and 0xf4.
    pub fn new(target: TargetSpec) -> Self {
        let exit_codes = !matches!(target, TargetSpec::CurrentProcess);
        Self {
            target,
            command: Vec::new(),
            sample_interval: Duration::from_millis(200),
            ring_buffer_bytes: 256 * 1024,
            drain_interval: None,
            debug_port: 0x80,
            boot_time_port: 0xf4,
            collectors: CollectorSet::ALL,
            origin: None,
            exit_codes,
            expected_threads: None,
            bpf_stats: false,
        }
    }
}

/// What became of one program.
#[derive(Clone, Debug)]
struct ProgramState {
    spec: ProgramSpec,
    /// `attached`, `missing`, `failed` or `disabled`.
    status: &'static str,
    detail: String,
}

#[derive(Clone, Debug, Default)]
struct ThreadInfo {
    tgid: u32,
    name: String,
    start_ns: u64,
    end_ns: Option<u64>,
    exit_code: Option<i32>,
}

/// Everything behind the lock.
struct State {
    bpf: Ebpf,
    /// Held while the kernel keeps run statistics for `--bpf-stats`.
    bpf_stats: Option<OwnedFd>,
    startup: Vec<StartupStage>,
    /// The kernel reads threads' exit codes ([`KernelBtf::reads_exit_codes`]).
    exit_codes: bool,
    started: Instant,
    start_mono_ns: u64,
    finished_ns: Option<u64>,
    target: Target,
    target_pid: u32,
    life: TargetLife,
    host: HostInfo,
    topology: Topology,
    reasons: ReasonTables,
    programs: Vec<ProgramState>,
    extra_sources: Vec<DataSource>,
    threads: BTreeMap<u32, ThreadInfo>,
    tgids: BTreeSet<u32>,
    marks: Vec<Mark>,
    phase_names: PhaseNames,
    current_phase: HashMap<u32, u32>,
    samples: Vec<Sample>,
    kvm_stats: kvm_stats::KvmStatsReader,
    ring_events: u64,
    vmm_marks: u64,
    ring_bytes: u32,
    boot_time_port: u16,
    marks_dropped: u64,
    /// Port marks kept so far (at most MAX_MARKS).
    port_marks: usize,
    /// CPU time of samples taken so far.
    sample_cpu: Duration,
    /// CPU time of the worker thread so far, and of the final read.
    reader_cpu: Duration,
}

/// `BPF_EXIST` (uapi linux/bpf.h): update only an entry that is there.
const BPF_EXIST: u64 = 2;

/// Port marks kept per profile: a guest alternating marker values forever
/// cannot grow the profile without bound. The VMM's own marks, console
/// milestones and the boot timer are few and always kept.
const MAX_MARKS: usize = 10_000;

struct Shared {
    stop: AtomicBool,
    /// An eventfd the worker waits on with the ring buffer: stopping must
    /// not wait for a sleep that may last until the next sample (seconds
    /// when samples are spaced out on a slow machine).
    wake: OwnedFd,
    state: Mutex<State>,
}

impl Shared {
    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: an 8-byte write from a live u64 to our own eventfd; an
        // eventfd write only fails when the counter would overflow, and
        // then the worker is already woken.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// A running profile. Dropping it stops profiling.
pub struct Collector {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    target_pid: u32,
    started: Instant,
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// A load error with the verifier log cut to its last lines, where the
/// verifier says what it rejected (the whole log is thousands of lines).
fn short_load_error(msg: &str) -> String {
    const KEEP: usize = 6;
    match msg.split_once("Verifier output:") {
        Some((head, log)) => {
            let lines: Vec<&str> = log
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let tail = &lines[lines.len().saturating_sub(KEEP)..];
            format!(
                "{}verifier output (last {} lines): {}",
                head,
                tail.len(),
                tail.join(" | ")
            )
        }
        None => msg.to_string(),
    }
}

/// Checks for root or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN).
fn check_privileges() -> Result<(), ProfilerError> {
    let status = crate::pseudo::read("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    if eff & CAP_SYS_ADMIN != 0 || (eff & CAP_BPF != 0 && eff & CAP_PERFMON != 0) {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    Err(ProfilerError::NotPrivileged {
        detail: format!("running as uid {euid} with effective capabilities {eff:#x}"),
    })
}

/// The kernel's pids are the initial namespace's; ours must be too.
fn check_pid_namespace() -> Result<(), ProfilerError> {
    // PROC_PID_INIT_INO in include/linux/proc_ns.h.
    const INIT_PID_NS: &str = "pid:[4026531836]";
    match std::fs::read_link("/proc/self/ns/pid") {
        Ok(l) if l.as_os_str() != INIT_PID_NS => Err(ProfilerError::PidNamespace {
            ns: l.display().to_string(),
        }),
        _ => Ok(()),
    }
}

fn find_or_mount_tracefs() -> Result<Tracefs, ProfilerError> {
    if let Some(t) = Tracefs::find() {
        return Ok(t);
    }
    let target = crate::tracefs::TRACEFS_CANDIDATES[0];
    match crate::mount::mount_fs("nodev", target, "tracefs") {
        Ok(()) => Tracefs::find().ok_or_else(|| ProfilerError::TracefsMissing {
            looked: crate::tracefs::TRACEFS_CANDIDATES.join(", "),
            source: std::io::Error::other("mounted, but it has no events/ directory"),
        }),
        Err(source) => Err(ProfilerError::TracefsMissing {
            looked: crate::tracefs::TRACEFS_CANDIDATES.join(", "),
            source,
        }),
    }
}

fn read_comm(pid: u32, tid: u32) -> Option<String> {
    crate::pseudo::read(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

/// Thread ids of a process.
fn tasks_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// `pid` and its live descendants, parents before children.
///
/// From each thread's `children` file (CONFIG_PROC_CHILDREN, a few reads
/// however busy the host); where the kernel has none, from the parent links
/// of every process's /proc/N/stat.
fn descendants(pid: u32) -> Vec<u32> {
    walk_children(pid, children_of).unwrap_or_else(|| descendants_by_scan(pid))
}

/// Breadth-first from `pid` through `children` (sorted, each pid once);
/// None as soon as `children` has no answer.
fn walk_children(pid: u32, mut children: impl FnMut(u32) -> Option<Vec<u32>>) -> Option<Vec<u32>> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let mut kids = children(out[i])?;
        kids.sort_unstable();
        kids.retain(|k| !out.contains(k));
        out.extend(kids);
        i += 1;
    }
    Some(out)
}

/// Children of `pid` from /proc/PID/task/*/children; None when the kernel
/// does not provide those files.
fn children_of(pid: u32) -> Option<Vec<u32>> {
    let mut kids = Vec::new();
    for tid in tasks_of(pid) {
        match crate::pseudo::read(format!("/proc/{pid}/task/{tid}/children")) {
            Ok(text) => kids.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            ),
            // The thread ended meanwhile: its siblings still answer.
            Err(_) if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {}
            Err(_) => return None,
        }
    }
    Some(kids)
}

/// [`descendants`] from every process's parent link.
fn descendants_by_scan(pid: u32) -> Vec<u32> {
    let mut parent_of = HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(stat) = crate::pseudo::read(format!("/proc/{p}/stat")) {
            // pid (comm) state ppid ...; comm may hold spaces and parens.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok())
            {
                parent_of.insert(p, ppid);
            }
        }
    }
    walk_children(pid, |cur| {
        Some(
            parent_of
                .iter()
                .filter(|(_, &pp)| pp == cur)
                .map(|(&c, _)| c)
                .collect(),
        )
    })
    .unwrap_or_else(|| vec![pid])
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/stat")).exists()
        && crate::pseudo::read(format!("/proc/{pid}/stat"))
            .map(|s| {
                // A zombie has ended: state Z (or X).
                !matches!(
                    s.rsplit_once(')')
                        .and_then(|(_, r)| r.split_whitespace().next()),
                    Some("Z") | Some("X")
                )
            })
            .unwrap_or(false)
}

/// How the collector learns that the target process ended (besides the
/// threads collector's exit event).
enum TargetLife {
    /// Profiling its own process: it cannot end while profiling.
    Own,
    /// A pidfd: readable once the process has exited (a zombie included),
    /// one cheap poll, and no pid reuse to fool it.
    Pidfd(OwnedFd),
    /// /proc/PID/stat, where pidfd_open is missing (Linux before 5.3). For
    /// a process of many threads the kernel sums them all to write it.
    Proc(u32),
}

impl TargetLife {
    fn watch(pid: u32, own: bool) -> Self {
        if own {
            return TargetLife::Own;
        }
        match crate::launch::pidfd_open(pid) {
            Ok(fd) => TargetLife::Pidfd(fd),
            Err(_) => TargetLife::Proc(pid),
        }
    }

    fn ended(&self) -> bool {
        match self {
            TargetLife::Own => false,
            TargetLife::Pidfd(fd) => crate::launch::pidfd_ended(fd, Duration::ZERO),
            TargetLife::Proc(pid) => !process_alive(*pid),
        }
    }
}

/// The KVM backend, when exactly one is loaded: which tracepoints can fire
/// follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KvmBackend {
    /// `kvm_pvm`: kvm_exit and kvm_entry live in the VMX/SVM code.
    Pvm,
    /// `kvm_intel` or `kvm_amd` ("vmx", "svm"): kvm_exit and
    /// kvm_page_fault fire, so their fallbacks are not needed.
    Hardware(&'static str),
    /// None or several: everything is attached.
    Unknown,
}

impl KvmBackend {
    fn detect() -> Self {
        let m = |n: &str| Path::new("/sys/module").join(n).exists();
        Self::from_modules(m("kvm_pvm"), m("kvm_intel"), m("kvm_amd"))
    }

    fn from_modules(pvm: bool, intel: bool, amd: bool) -> Self {
        match (pvm, intel, amd) {
            (true, false, false) => KvmBackend::Pvm,
            (false, true, false) => KvmBackend::Hardware("vmx"),
            (false, false, true) => KvmBackend::Hardware("svm"),
            _ => KvmBackend::Unknown,
        }
    }
}

/// Why a program is not attached on this host although its collector is
/// on: it cannot fire here, or it is a fallback whose primary source does.
/// Each program attached costs start-up (verification, attach) and a run
/// on every event.
fn not_needed(spec: &ProgramSpec, backend: KvmBackend, before: &[ProgramState]) -> Option<String> {
    let attached = |s: Source| {
        before
            .iter()
            .any(|p| p.spec.source == s && p.status == "attached")
    };
    match (spec.source, backend) {
        (Source::SchedProcessFork, _) if attached(Source::TaskNewtask) => {
            Some("not needed: task:task_newtask follows new processes on this kernel".into())
        }
        (Source::KvmExit | Source::KvmEntry, KvmBackend::Pvm) => Some(
            "not attached: this is a PVM host (kvm_pvm), where only KVM's VMX/SVM code, \
             absent here, raises it"
                .into(),
        ),
        (Source::KvmUserspaceExit, KvmBackend::Hardware(isa)) => Some(format!(
            "not needed: kvm:kvm_exit gives the exit reasons on this {isa} host \
             (this is the PVM fallback)"
        )),
        (Source::KvmmmuSpteRequested, KvmBackend::Hardware(isa)) => Some(format!(
            "not needed: kvm:kvm_page_fault counts guest faults on this {isa} host \
             (this is its fallback)"
        )),
        _ => None,
    }
}

/// The maps only one program (or pair) writes: made one entry big when
/// none of their programs is attached, instead of preallocated in full.
const PROGRAM_MAPS: &[(&[&str], &str)] = &[
    (&["bs_kvm_exit", "bs_kvm_entry"], "exit_stats"),
    (&["bs_kvm_exit"], "vcpu_tids"),
    (&["bs_kvm_exit", "bs_kvm_entry"], "exit_start"),
    (&["bs_kvm_userspace_exit"], "uexit_counts"),
    (&["bs_kvm_pio"], "pio_counts"),
    (&["bs_kvm_mmio"], "mmio_counts"),
    (&["bs_kvm_msr"], "msr_counts"),
    (&["bs_kvm_cpuid"], "cpuid_counts"),
    (&["bs_kvm_emulate_insn"], "emulate_counts"),
    (&["bs_marker_pio"], "marker_counts"),
    (&["bs_marker_pio"], "marker_last"),
    (&["bs_mm_page_alloc"], "numa_pages"),
    (&["bs_sched_switch"], "run_time"),
];

/// The maps of [`PROGRAM_MAPS`] that no attached program writes.
fn unused_maps(programs: &[ProgramState]) -> Vec<&'static str> {
    let attached = |name: &str| {
        programs
            .iter()
            .any(|p| p.spec.program == name && p.status == "attached")
    };
    PROGRAM_MAPS
        .iter()
        .filter(|(progs, _)| !progs.iter().any(|p| attached(p)))
        .map(|(_, map)| *map)
        .collect()
}

fn kvm_flavour() -> String {
    let m = |n: &str| Path::new("/sys/module").join(n).exists();
    if m("kvm_pvm") {
        "pvm"
    } else if m("kvm_intel") {
        "vmx"
    } else if m("kvm_amd") {
        "svm"
    } else {
        "none"
    }
    .to_string()
}

fn kernel_release() -> String {
    crate::pseudo::read("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// vCPU index from a thread name: `vcpu3` (bootscope), `CPU 3/KVM` (QEMU).
pub fn vcpu_from_thread_name(name: &str) -> Option<u32> {
    if let Some(n) = name.strip_prefix("vcpu") {
        return n.trim().parse().ok();
    }
    name.strip_prefix("CPU ")
        .and_then(|r| r.split_once('/'))
        .and_then(|(n, _)| n.trim().parse().ok())
}

/// The role of a thread, from its name.
pub fn thread_role(name: &str, tid: u32, tgid: u32) -> &'static str {
    if vcpu_from_thread_name(name).is_some() {
        "vcpu"
    } else if name.starts_with("touch_pages") || name.starts_with("prealloc") {
        "prealloc"
    } else if tid == tgid {
        "main"
    } else {
        "other"
    }
}

/// Decodes a task's `exit_code` (a wait status) as a shell would.
fn exit_status_code(raw: u64) -> i32 {
    let raw = raw as u32;
    let sig = raw & 0x7f;
    if sig == 0 {
        ((raw >> 8) & 0xff) as i32
    } else {
        128 + sig as i32
    }
}

fn hash_entries<K: Pod, V: Pod>(bpf: &Ebpf, name: &str) -> Vec<(K, V)> {
    let Some(map) = bpf.map(name) else {
        return Vec::new();
    };
    // try_from checks the key and value sizes against K and V.
    let Ok(h) = BpfHashMap::<&MapData, K, V>::try_from(map) else {
        return Vec::new();
    };
    // One system call per 64 entries where the kernel can; two per
    // entry otherwise.
    match crate::batch::read::<K, V>(h.map()) {
        Ok(entries) => entries,
        Err(_) => h.iter().filter_map(Result::ok).collect(),
    }
}

fn percpu_sum(bpf: &Ebpf, name: &str, index: u32) -> u64 {
    let Some(map) = bpf.map(name) else {
        return 0;
    };
    PerCpuArray::<&MapData, u64>::try_from(map)
        .ok()
        .and_then(|a| a.get(&index, 0).ok())
        .map(|v| v.iter().sum())
        .unwrap_or(0)
}

fn map_error(name: &str, e: impl std::fmt::Display) -> ProfilerError {
    ProfilerError::Map {
        name: name.to_string(),
        detail: e.to_string(),
    }
}

/// Where the kernel's type information (BTF) stands for one load.
#[derive(Clone, Debug, PartialEq)]
enum KernelBtf {
    /// Parsed, and the object relocated against it (CO-RE): exit codes are
    /// read. `Some(why)` when it was not wanted but could not be avoided.
    Used(Option<String>),
    /// Not wanted, and not parsed.
    Skipped,
    /// This kernel publishes none.
    Missing,
}

impl KernelBtf {
    /// The object was relocated against the kernel's BTF, so the CO-RE
    /// read of `task_struct->exit_code` is right.
    fn reads_exit_codes(&self) -> bool {
        matches!(self, KernelBtf::Used(_))
    }

    fn source(&self) -> DataSource {
        let (status, detail) = match self {
            KernelBtf::Used(None) => (
                "attached",
                format!("{KERNEL_BTF}: CO-RE relocations applied; threads' exit codes read"),
            ),
            KernelBtf::Used(Some(why)) => (
                "attached",
                format!(
                    "{KERNEL_BTF}: parsed although this profile did not ask for exit codes \
                     ({why}); threads' exit codes read"
                ),
            ),
            KernelBtf::Skipped => (
                "disabled",
                format!(
                    "{KERNEL_BTF} not parsed: this profile reads no exit codes, which saves \
                     most of the profiler's start-up"
                ),
            ),
            KernelBtf::Missing => (
                "missing",
                format!(
                    "this kernel has no {KERNEL_BTF} (built without CONFIG_DEBUG_INFO_BTF): \
                     threads' exit codes are not read, everything else is"
                ),
            ),
        };
        DataSource {
            name: "btf:vmlinux".into(),
            status: status.into(),
            detail,
            events: 0,
            collector: "threads".into(),
            ..Default::default()
        }
    }
}

const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// CPU time the calling thread has used (zero if the clock cannot be
/// read).
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// An instant of the start-up: wall clock and this thread's CPU time.
#[derive(Clone, Copy)]
struct StagePoint {
    wall: Instant,
    cpu: Duration,
}

impl StagePoint {
    fn now() -> Self {
        StagePoint {
            wall: Instant::now(),
            cpu: thread_cpu_time(),
        }
    }
}

/// Wall and CPU time of the start-up's stages, kept in the profile
/// (`startup`).
struct Stages {
    last: StagePoint,
    done: Vec<StartupStage>,
}

impl Stages {
    fn new() -> Self {
        Stages {
            last: StagePoint::now(),
            done: Vec::new(),
        }
    }

    /// Ends the stage running since the previous end.
    fn end(&mut self, stage: &str) {
        self.end_at(stage, StagePoint::now());
    }

    /// Ends the stage at `at` (taken earlier); a stage ended more than once
    /// (`verify` and `attach` alternate program by program) adds up.
    fn end_at(&mut self, stage: &str, at: StagePoint) {
        let ns = at.wall.duration_since(self.last.wall).as_nanos() as u64;
        let cpu_ns = at.cpu.saturating_sub(self.last.cpu).as_nanos() as u64;
        self.last = at;
        match self.done.iter_mut().find(|s| s.stage == stage) {
            Some(s) => {
                s.ns += ns;
                s.cpu_ns += cpu_ns;
            }
            None => self.done.push(StartupStage {
                stage: stage.into(),
                ns,
                cpu_ns,
            }),
        }
    }
}

/// An aya loader that has not parsed the kernel's BTF.
///
/// aya 0.14's `EbpfLoader::new()` always parses the kernel's BTF (5 MB:
/// ~25 ms natively, then ~5 ms to free it; two thirds of the profiler's
/// start-up), even when `.btf(None)` follows (aya issue #1172). A profile
/// that reads no exit codes relocates nothing against it, so the loader is
/// made on a short-lived thread that cannot see it: the thread unshares its
/// mount namespace, makes it private and mounts an empty tmpfs on
/// /sys/kernel/btf. No other thread or process sees that mount, and it goes
/// away with the thread.
fn loader_without_kernel_btf() -> Result<EbpfLoader<'static>, String> {
    let hidden = std::thread::Builder::new()
        .name("bootscope-load".into())
        .spawn(|| -> Result<EbpfLoader<'static>, String> {
            // SAFETY: unshare(2) with a flag, no pointers; CLONE_NEWNS
            // (which implies CLONE_FS) is allowed in a threaded process and
            // affects this thread only.
            if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
                return Err(format!(
                    "unshare(CLONE_NEWNS): {}",
                    std::io::Error::last_os_error()
                ));
            }
            crate::mount::mount_flags(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
                .map_err(|e| format!("making the private mount namespace private: {e}"))?;
            crate::mount::mount_flags(
                Some("bootscope"),
                "/sys/kernel/btf",
                Some("tmpfs"),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("size=4k"),
            )
            .map_err(|e| format!("covering /sys/kernel/btf: {e}"))?;
            Ok(EbpfLoader::new())
        })
        .map_err(|e| format!("loader thread: {e}"))?;
    hidden
        .join()
        .unwrap_or_else(|_| Err("loader thread panicked".into()))
}

/// Sizes of the maps keyed by thread for a target of at most `threads`
/// threads on a host of `cpus` CPUs and `nodes` NUMA nodes: twice the
/// threads (at least 64) times what else is in the key, never more than the
/// object's own (default) size.
///
/// Sized down, they cost less to read as well: a read walks every bucket
/// of a hash map, empty or not (a sample reads exit_stats, exit_start and
/// fault_counts).
fn thread_map_sizes(threads: u32, cpus: u32, nodes: u32) -> [(&'static str, u32); 7] {
    let t = threads
        .saturating_mul(2)
        .max(64)
        .checked_next_power_of_two()
        .unwrap_or(1 << 31);
    let size = |per_thread: u32, floor: u32, default: u32| {
        t.saturating_mul(per_thread)
            .checked_next_power_of_two()
            .unwrap_or(u32::MAX)
            .clamp(floor, default)
    };
    [
        // tid
        ("threads", size(1, 64, 32768)),
        ("exit_start", size(1, 64, 8192)),
        // tid x CPU
        ("run_time", size(cpus.max(1), 256, 32768)),
        // tid x page node x CPU node
        (
            "numa_pages",
            size(nodes.max(1).saturating_pow(2), 256, 16384),
        ),
        // tid x phase x kind; tid x phase x exit code
        ("fault_counts", size(32, 1024, 16384)),
        ("uexit_counts", size(32, 1024, 8192)),
        // vCPU (a thread) x reason x phase
        ("exit_stats", size(64, 1024, 16384)),
    ]
}

/// What the object is loaded with, besides the configuration.
struct ObjectSettings<'a> {
    /// `EVENT__FIELD` from the format files, for the fields programs read
    /// with a helper call.
    globals: &'a BTreeMap<String, BsField>,
    /// The fields programs load straight from the record, by patch slot
    /// (crate::patch); None for one this kernel lacks.
    direct: &'a [Option<BsField>],
    fork_follows: bool,
    ring_bytes: u32,
    /// Maps made one entry big ([`unused_maps`]).
    unused_maps: &'a [&'static str],
}

/// Loads the object with every field global resolved from the formats.
fn load_object(
    config: &CollectorConfig,
    topology: &Topology,
    settings: &ObjectSettings,
    stages: &mut Stages,
) -> Result<(Ebpf, KernelBtf), ProfilerError> {
    let (mut loader, btf) = if !Path::new(KERNEL_BTF).exists() {
        // Nothing to parse: the loader is cheap as it is.
        (EbpfLoader::new(), KernelBtf::Missing)
    } else if config.exit_codes {
        (EbpfLoader::new(), KernelBtf::Used(None))
    } else {
        match loader_without_kernel_btf() {
            Ok(l) => (l, KernelBtf::Skipped),
            Err(why) => (EbpfLoader::new(), KernelBtf::Used(Some(why))),
        }
    };
    stages.end("loader");
    for (name, field) in settings.globals {
        loader.override_global(name.as_str(), field, true);
    }
    let debug_port = u32::from(config.debug_port);
    let boot_time_port = u32::from(config.boot_time_port);
    let fork_follows = u32::from(settings.fork_follows);
    let read_exit_code = u32::from(btf.reads_exit_codes());
    let nr_ranges = topology.pfn_ranges.len().min(bpf::MAX_PFN_RANGES) as u32;
    loader
        .override_global("marker_port_debug", &debug_port, true)
        .override_global("marker_port_boot_time", &boot_time_port, true)
        .override_global("fork_follows", &fork_follows, true)
        .override_global("read_exit_code", &read_exit_code, true)
        .override_global("nr_pfn_ranges", &nr_ranges, true)
        .map_max_entries("events", settings.ring_bytes);
    if let Some(threads) = config.expected_threads {
        let cpus = topology.cpu_nodes.len() as u32;
        let nodes = topology.nodes.len() as u32;
        for (map, entries) in thread_map_sizes(threads, cpus, nodes) {
            loader.map_max_entries(map, entries);
        }
    }
    // After the sizes above: an unused map stays small whatever they say.
    for map in settings.unused_maps {
        loader.map_max_entries(map, 1);
    }
    let (object, _) = crate::patch::patch(bpf::OBJECT, settings.direct)?;
    let ebpf = loader
        .load(object.bytes())
        .map_err(|source| ProfilerError::Load { source })?;
    stages.end("maps");
    Ok((ebpf, btf))
}

impl Collector {
    /// Starts profiling. Tracepoints this kernel lacks are recorded as
    /// missing in `sources[]` and the rest goes on; errors are for what
    /// makes profiling impossible.
    pub fn start(config: CollectorConfig) -> Result<Collector, ProfilerError> {
        let mut stages = Stages::new();
        check_privileges()?;
        check_pid_namespace()?;
        let (kind, target_pid) = match config.target {
            TargetSpec::Pid(p) => ("pid", p),
            TargetSpec::Launched(p) => ("command", p),
            TargetSpec::CurrentProcess => ("self", std::process::id()),
        };
        if target_pid == 0 || !Path::new(&format!("/proc/{target_pid}")).exists() {
            return Err(ProfilerError::NoSuchProcess { pid: target_pid });
        }
        // A thread id stands for its process.
        let target_pid = crate::pseudo::read(format!("/proc/{target_pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(target_pid);
        let tracefs = find_or_mount_tracefs()?;
        stages.end("checks");
        let topology = Topology::read(Path::new("/"));
        stages.end("topology");

        let backend = KvmBackend::detect();
        // Field layouts from the format files.
        let mut formats: HashMap<(&str, &str), Option<EventFormat>> = HashMap::new();
        let mut programs = Vec::new();
        let mut globals: BTreeMap<String, BsField> = BTreeMap::new();
        let mut direct: Vec<Option<BsField>> = vec![None; crate::patch::PATCH_SLOTS.len()];
        for spec in PROGRAMS {
            if let Some(why) = not_needed(spec, backend, &programs) {
                programs.push(ProgramState {
                    spec: *spec,
                    status: "disabled",
                    detail: why,
                });
                continue;
            }
            let fmt = formats
                .entry((spec.system, spec.event))
                .or_insert_with(|| tracefs.format(spec.system, spec.event).ok().flatten())
                .clone();
            let mut st = ProgramState {
                spec: *spec,
                status: "attached",
                detail: String::new(),
            };
            if !config.collectors.has(spec.collector) {
                st.status = "disabled";
                st.detail =
                    if spec.collector == CollectorKind::ExitLatency && config.collectors.exits {
                        "exit latency not asked for (--collect exit-counts): each exit is counted \
                     by the next exit of its vCPU, or when the profile is read"
                            .into()
                    } else {
                        "collector not enabled".into()
                    };
            } else if let Some(fmt) = fmt {
                let missing: Vec<&str> = spec
                    .fields
                    .iter()
                    .copied()
                    .filter(|f| fmt.field(f).is_none())
                    .collect();
                if missing.is_empty() {
                    let mut unreadable = None;
                    for f in spec.fields.iter().chain(spec.optional_fields) {
                        let Some(d) = fmt.field(f) else { continue };
                        let field = BsField {
                            off: d.offset,
                            size: d.size,
                        };
                        match crate::patch::slot_of(spec.event, f) {
                            // Loaded straight from the record: patched in.
                            Some(slot) => match crate::patch::check_field(spec.event, f, field) {
                                Ok(()) => direct[slot] = Some(field),
                                Err(why) => unreadable = Some(why),
                            },
                            None => {
                                globals.insert(format!("{}__{}", spec.event, f), field);
                            }
                        }
                    }
                    if let Some(why) = unreadable {
                        st.status = "failed";
                        st.detail = why;
                    }
                } else {
                    st.status = "failed";
                    st.detail = format!(
                        "its format file lacks field(s) {} on this kernel",
                        missing.join(", ")
                    );
                }
            } else {
                st.status = "missing";
                st.detail = format!(
                    "this kernel has no tracepoint {}:{} ({} lacks it)",
                    spec.system,
                    spec.event,
                    tracefs.root().join("events").display()
                );
            }
            programs.push(st);
        }
        let reasons = ReasonTables::from_formats(
            formats.get(&("kvm", "kvm_exit")).and_then(|f| f.as_ref()),
            formats
                .get(&("kvm", "kvm_userspace_exit"))
                .and_then(|f| f.as_ref()),
        );
        let newtask_ok = programs
            .iter()
            .any(|p| p.spec.source == Source::TaskNewtask && p.status == "attached");
        let ring_bytes = config
            .ring_buffer_bytes
            .max(page_size() as u32)
            .checked_next_power_of_two()
            .unwrap_or(1 << 30);
        stages.end("tracefs formats");
        let unused = unused_maps(&programs);
        let settings = ObjectSettings {
            globals: &globals,
            direct: &direct,
            fork_follows: !newtask_ok,
            ring_bytes,
            unused_maps: &unused,
        };
        let (mut ebpf, kernel_btf) = load_object(&config, &topology, &settings, &mut stages)?;

        // Lookup tables for the NUMA collector.
        {
            let map = ebpf
                .map_mut("cpu_nodes")
                .ok_or_else(|| map_error("cpu_nodes", "absent"))?;
            let mut a =
                Array::<&mut MapData, u32>::try_from(map).map_err(|e| map_error("cpu_nodes", e))?;
            for (&cpu, &node) in &topology.cpu_nodes {
                if cpu < bpf::MAX_CPUS {
                    a.set(cpu, node, 0).map_err(|e| map_error("cpu_nodes", e))?;
                }
            }
        }
        {
            let map = ebpf
                .map_mut("pfn_ranges")
                .ok_or_else(|| map_error("pfn_ranges", "absent"))?;
            let mut a = Array::<&mut MapData, bpf::BsPfnRange>::try_from(map)
                .map_err(|e| map_error("pfn_ranges", e))?;
            for (i, r) in topology
                .pfn_ranges
                .iter()
                .take(bpf::MAX_PFN_RANGES)
                .enumerate()
            {
                let v = bpf::BsPfnRange {
                    start_pfn: r.start_pfn,
                    end_pfn: r.end_pfn,
                    node: r.node,
                    pad: 0,
                };
                a.set(i as u32, v, 0)
                    .map_err(|e| map_error("pfn_ranges", e))?;
            }
        }

        // The target, its live descendants and their threads.
        let now = Instant::now();
        let now_mono_ns = monotonic_ns();
        // Instant is CLOCK_MONOTONIC on Linux: an earlier origin shifts both.
        let started = config.origin.filter(|o| *o <= now).unwrap_or(now);
        let start_mono_ns =
            now_mono_ns.saturating_sub(now.duration_since(started).as_nanos() as u64);
        let mut threads = BTreeMap::new();
        let mut tgids = BTreeSet::new();
        let procs = match config.target {
            // A held child has no threads or children yet.
            TargetSpec::Launched(p) => vec![p],
            _ => descendants(target_pid),
        };
        {
            let map = ebpf
                .map_mut("followed")
                .ok_or_else(|| map_error("followed", "absent"))?;
            let mut followed = BpfHashMap::<&mut MapData, u32, u32>::try_from(map)
                .map_err(|e| map_error("followed", e))?;
            // Phase 0 until the first phase mark.
            for &p in &procs {
                followed
                    .insert(p, 0, 0)
                    .map_err(|e| map_error("followed", e))?;
                tgids.insert(p);
            }
        }
        {
            let map = ebpf
                .map_mut("target")
                .ok_or_else(|| map_error("target", "absent"))?;
            let mut slot = Array::<&mut MapData, bpf::BsTarget>::try_from(map)
                .map_err(|e| map_error("target", e))?;
            let target = bpf::BsTarget {
                tgid: target_pid,
                phase: 0,
            };
            slot.set(0, target, 0).map_err(|e| map_error("target", e))?;
        }
        {
            let map = ebpf
                .map_mut("threads")
                .ok_or_else(|| map_error("threads", "absent"))?;
            let mut known = BpfHashMap::<&mut MapData, u32, u32>::try_from(map)
                .map_err(|e| map_error("threads", e))?;
            for &p in &procs {
                for tid in tasks_of(p) {
                    let _ = known.insert(tid, p, 0);
                    threads.insert(
                        tid,
                        ThreadInfo {
                            tgid: p,
                            name: read_comm(p, tid).unwrap_or_default(),
                            start_ns: 0,
                            ..Default::default()
                        },
                    );
                }
            }
        }

        stages.end("seed");

        // Before attaching, so that every run of ours is counted.
        let mut stats_source = None;
        let bpf_stats = if config.bpf_stats {
            match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
                Ok(fd) => {
                    stats_source = Some(DataSource {
                        name: "bpf_stats:run_time".into(),
                        status: "attached".into(),
                        detail: "the kernel counts and times every run of every eBPF program \
                                 while profiling; sources[].runs and run_ns are ours"
                            .into(),
                        collector: "all".into(),
                        ..Default::default()
                    });
                    Some(fd)
                }
                Err(e) => {
                    stats_source = Some(DataSource {
                        name: "bpf_stats:run_time".into(),
                        status: "failed".into(),
                        detail: format!(
                            "BPF_ENABLE_STATS refused ({e}): program run times need Linux 5.8 \
                             or later and CAP_SYS_ADMIN; everything else is profiled"
                        ),
                        collector: "all".into(),
                        ..Default::default()
                    });
                    None
                }
            }
        } else {
            None
        };

        // Attach, threads first (PROGRAMS order).
        for st in programs.iter_mut().filter(|s| s.status == "attached") {
            let spec = st.spec;
            let mut verified = None;
            let res = (|| -> Result<(), String> {
                let refused = |e: aya::programs::ProgramError| {
                    format!(
                        "the kernel refused it: {}",
                        short_load_error(&e.to_string())
                    )
                };
                let attach_failed = |e: aya::programs::ProgramError| format!("attach failed: {e}");
                // Programs that read no field of the record attach raw
                // (docs/profiler.md: the kernel then builds no record for them).
                match ebpf.program_mut(spec.program) {
                    Some(Program::TracePoint(prog)) => {
                        prog.load().map_err(refused)?;
                        verified = Some(StagePoint::now());
                        prog.attach(spec.system, spec.event)
                            .map_err(attach_failed)?;
                    }
                    Some(Program::RawTracePoint(prog)) => {
                        prog.load().map_err(refused)?;
                        verified = Some(StagePoint::now());
                        prog.attach(spec.event).map_err(attach_failed)?;
                    }
                    Some(_) => {
                        return Err(format!(
                            "program {} is neither a tracepoint nor a raw tracepoint program",
                            spec.program
                        ))
                    }
                    None => return Err(format!("program {} is not in the object", spec.program)),
                }
                Ok(())
            })();
            if let Err(detail) = res {
                st.status = "failed";
                st.detail = detail;
            }
            // A program that failed before attaching spent it all verifying.
            stages.end_at("verify", verified.unwrap_or_else(StagePoint::now));
            stages.end("attach");
        }
        if !programs.iter().any(|p| p.status == "attached") {
            let detail = programs
                .iter()
                .map(|p| format!("{}: {} {}", p.spec.source_name(), p.status, p.detail))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(ProfilerError::NothingAttached { detail });
        }

        let ring = ebpf
            .take_map("events")
            .ok_or_else(|| map_error("events", "absent"))?;
        let ring = RingBuf::try_from(ring).map_err(|e| map_error("events", e))?;

        let target_name = read_comm(target_pid, target_pid).unwrap_or_default();
        let host = HostInfo {
            kvm: kvm_flavour(),
            kernel_release: kernel_release(),
            cpus: topology.cpu_nodes.len() as u32,
            numa_nodes: topology.nodes.clone(),
        };
        let mut extra_sources = vec![DataSource {
            name: "procfs:threads".into(),
            status: "attached".into(),
            detail: "names of threads that existed before profiling started".into(),
            events: threads.len() as u64,
            collector: "threads".into(),
            ..Default::default()
        }];
        extra_sources.push(DataSource {
            name: "sysfs:numa".into(),
            status: "attached".into(),
            detail: format!(
                "{} node(s); page frames mapped to nodes from {} ({} range(s){})",
                topology.nodes.len(),
                topology.pfn_source,
                topology.pfn_ranges.len(),
                if topology.pfn_ranges.len() > bpf::MAX_PFN_RANGES {
                    format!(
                        "; only the first {} are searched, pages beyond count as unknown node",
                        bpf::MAX_PFN_RANGES
                    )
                } else {
                    String::new()
                }
            ),
            events: 0,
            collector: "numa".into(),
            ..Default::default()
        });
        extra_sources.push(kernel_btf.source());
        extra_sources.extend(stats_source);
        stages.end("finish");
        let state = State {
            startup: stages.done,
            exit_codes: kernel_btf.reads_exit_codes(),
            bpf: ebpf,
            bpf_stats,
            started,
            start_mono_ns,
            finished_ns: None,
            target: Target {
                kind: kind.into(),
                command: config.command.clone(),
                pid: target_pid,
                name: target_name,
                exit_code: None,
                ended_ns: None,
                interrupted_by: None,
            },
            target_pid,
            life: TargetLife::watch(target_pid, config.target == TargetSpec::CurrentProcess),
            host,
            topology,
            reasons,
            programs,
            extra_sources,
            threads,
            tgids,
            marks: Vec::new(),
            phase_names: PhaseNames::default(),
            current_phase: HashMap::new(),
            samples: Vec::new(),
            kvm_stats: if matches!(config.target, TargetSpec::CurrentProcess) {
                kvm_stats::KvmStatsReader::stats_fds_only()
            } else {
                kvm_stats::KvmStatsReader::new()
            },
            ring_events: 0,
            vmm_marks: 0,
            ring_bytes,
            boot_time_port: config.boot_time_port,
            marks_dropped: 0,
            port_marks: 0,
            sample_cpu: Duration::ZERO,
            reader_cpu: Duration::ZERO,
        };
        // SAFETY: eventfd takes an initial value and flags, no pointers.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(ProfilerError::Thread {
                source: std::io::Error::last_os_error(),
            });
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            // SAFETY: a fresh descriptor owned by nobody else.
            wake: unsafe { OwnedFd::from_raw_fd(wake) },
            state: Mutex::new(state),
        });
        let worker_shared = shared.clone();
        let sample_interval = config.sample_interval.max(Duration::from_millis(10));
        let drain_interval = config.drain_interval;
        let worker = std::thread::Builder::new()
            .name("bootscope-collect".into())
            .spawn(move || worker_loop(worker_shared, ring, sample_interval, drain_interval))
            .map_err(|source| ProfilerError::Thread { source })?;
        Ok(Collector {
            shared,
            worker: Some(worker),
            target_pid,
            started,
        })
    }

    /// The pid being profiled.
    pub fn target_pid(&self) -> u32 {
        self.target_pid
    }

    /// When profiling started (the zero of every `t_ns`).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// True once the target process has ended.
    pub fn target_ended(&self) -> bool {
        let st = self.lock();
        st.target.ended_ns.is_some() || st.life.ended()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in the worker cannot leave the state half-updated in a way
        // that matters more than losing the profile.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a mark that arrives in-process (bootscope's own VMM), stamped
    /// now. Port marks (`debug_port`, `boot_time_port`) are ignored while the
    /// phases collector sees the same writes in the kernel; returns whether
    /// the mark was recorded.
    pub fn add_mark(&self, name: &str, source: &str, value: Option<u64>) -> bool {
        self.add_mark_at(name, source, value, Instant::now())
    }

    /// As [`Collector::add_mark`], for a mark that happened at `at`.
    pub fn add_mark_at(&self, name: &str, source: &str, value: Option<u64>, at: Instant) -> bool {
        let mut st = self.lock();
        let port_mark =
            source == phases::source::DEBUG_PORT || source == phases::source::BOOT_TIME_PORT;
        let kernel_sees_ports = st
            .programs
            .iter()
            .any(|p| p.spec.source == Source::MarkerPio && p.status == "attached");
        if port_mark && kernel_sees_ports {
            return false;
        }
        let t_ns = at.saturating_duration_since(st.started).as_nanos() as u64;
        let tgid = st.target_pid;
        st.vmm_marks += 1;
        st.push_mark(Mark {
            name: name.into(),
            source: source.into(),
            t_ns,
            value,
            tgid: Some(tgid),
        });
        true
    }

    /// The profile so far; callable as often as wanted.
    pub fn snapshot(&self) -> Profile {
        let mut st = self.lock();
        st.poll_target();
        let now = st.now_ns();
        st.build(now)
    }

    /// A VMM profiling itself calls this once its vCPUs exist: their KVM
    /// statistics files are found now, in one scan of its descriptor table,
    /// instead of scan after scan until they show up.
    pub fn vcpus_created(&self) {
        let mut st = self.lock();
        st.kvm_stats.request_scan();
        st.refresh_kvm_stats(true);
    }

    /// Stops profiling and returns the final profile (partial if the target
    /// ended early).
    pub fn finish(mut self) -> Profile {
        // Dropping self afterwards detaches the programs.
        self.final_profile()
    }

    /// The final profile, like [`finish`](Self::finish), but leaves the
    /// programs attached (for a caller that exits right away and lets the
    /// kernel release them).
    pub fn final_profile(&mut self) -> Profile {
        self.stop_worker();
        let mut st = self.lock();
        let began = thread_cpu_time();
        st.poll_target();
        st.take_sample();
        st.reader_cpu += thread_cpu_time().saturating_sub(began);
        let now = st.now_ns();
        st.finished_ns = Some(now);
        st.build(now)
    }

    fn stop_worker(&mut self) {
        self.shared.stop();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop_worker();
    }
}

/// Samples are at least this many times their own duration apart.
const SAMPLE_SPACING: u32 = 1000;

/// Time to the next sample: the interval asked for, or more when a sample
/// costs over 0.1 % of it.
fn sample_spacing(interval: Duration, cost: Duration) -> Duration {
    interval.max(cost.saturating_mul(SAMPLE_SPACING))
}

/// Reads the ring buffer (on data, or every `drain_interval`) and samples
/// counters every `sample_interval`, until told to stop.
fn worker_loop(
    shared: Arc<Shared>,
    mut ring: RingBuf<aya::maps::MapData>,
    sample_interval: Duration,
    drain_interval: Option<Duration>,
) {
    // KVM's debugfs directory of a VM vanishes with the VM, so it is read
    // every tick, not only at samples.
    let tick = Duration::from_millis(10);
    let cpu_at_start = thread_cpu_time();
    let mut next_sample = Instant::now() + sample_interval;
    let mut first_sample = true;
    let mut next_drain = Instant::now() + drain_interval.unwrap_or_default();
    let drain = |ring: &mut RingBuf<aya::maps::MapData>, shared: &Shared| {
        let mut events = Vec::new();
        while let Some(item) = ring.next() {
            if let Some(e) = BsEvent::from_bytes(&item) {
                events.push(e);
            }
        }
        if !events.is_empty() {
            // Records of different CPUs may arrive out of order.
            events.sort_by_key(|e| e.ts_ns);
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            for e in &events {
                st.apply_event(e);
            }
        }
    };
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        let now = Instant::now();
        if stopping || drain_interval.is_none() || now >= next_drain {
            drain(&mut ring, &shared);
            if let Some(d) = drain_interval {
                next_drain = now + d;
            }
        }
        if stopping {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.reader_cpu = thread_cpu_time().saturating_sub(cpu_at_start);
            break;
        }
        let frequent = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if now < next_sample {
                if st.kvm_stats.needs_frequent_reads() {
                    st.refresh_kvm_stats(false);
                }
            } else {
                st.poll_target();
                let began = Instant::now();
                st.take_sample();
                // A sample reads every counting map entry by entry and looks
                // for the target's vCPU statistics files: a fraction of a
                // millisecond natively, tens of milliseconds where every
                // instruction is emulated. Spacing samples at least
                // SAMPLE_SPACING times their own cost keeps the sampler
                // under 0.1 % of a CPU, which on a one-CPU machine is taken
                // from the guest.
                // The first sample also pays one-time costs (code and
                // buffers faulted in: 20 to 30 ms in the lab against about
                // one for the next ones), so it does not set the spacing.
                next_sample = if first_sample {
                    now + sample_interval
                } else {
                    now + sample_spacing(sample_interval, began.elapsed())
                };
                first_sample = false;
            }
            st.reader_cpu = thread_cpu_time().saturating_sub(cpu_at_start);
            st.kvm_stats.needs_frequent_reads()
        };
        // Sleep until the next sample unless counts need reading more often:
        // a profiler on a one-CPU machine takes its CPU time from the guest.
        let until_sample = next_sample.saturating_duration_since(Instant::now());
        let wait = if frequent {
            until_sample.min(tick)
        } else {
            until_sample
        };
        // The ring buffer's data (unless it is read on a timer) or a stop
        // request ends the wait early.
        let mut pfds = [
            libc::pollfd {
                fd: shared.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: ring.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let n = if drain_interval.is_some() { 1 } else { 2 };
        // SAFETY: n valid pollfds for descriptors open for the whole call.
        unsafe { libc::poll(pfds.as_mut_ptr(), n, wait.as_millis().max(1) as i32) };
    }
}

impl State {
    fn now_ns(&self) -> u64 {
        self.finished_ns
            .unwrap_or_else(|| self.started.elapsed().as_nanos() as u64)
    }

    fn ktime_to_t(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.start_mono_ns)
    }

    /// Records a mark; if it opens a new phase for its process, tells the
    /// kernel.
    fn push_mark(&mut self, mark: Mark) {
        if matches!(mark.source.as_str(), "debug_port" | "boot_time_port") {
            if self.port_marks >= MAX_MARKS {
                self.marks_dropped += 1;
                return;
            }
            self.port_marks += 1;
        }
        if let Some(name) = phases::phase_of_mark(&mark) {
            let idx = self.phase_names.index(&name);
            let tgid = mark.tgid.unwrap_or(self.target_pid);
            if self.current_phase.get(&tgid) != Some(&idx) {
                self.current_phase.insert(tgid, idx);
                self.set_phase(tgid, idx);
            }
        }
        self.marks.push(mark);
    }

    /// Tells the kernel a process's phase: the target's in its array slot
    /// (unless it has ended: the slot is then cleared), a descendant's in
    /// `followed` (only while it is there: an ended one is not revived).
    fn set_phase(&mut self, tgid: u32, phase: u32) {
        if tgid == self.target_pid {
            if self.target.ended_ns.is_some() {
                return;
            }
            if let Some(map) = self.bpf.map_mut("target") {
                if let Ok(mut slot) = Array::<&mut MapData, bpf::BsTarget>::try_from(map) {
                    let _ = slot.set(0, bpf::BsTarget { tgid, phase }, 0);
                }
            }
        }
        if let Some(map) = self.bpf.map_mut("followed") {
            if let Ok(mut m) = BpfHashMap::<&mut MapData, u32, u32>::try_from(map) {
                let _ = m.insert(tgid, phase, BPF_EXIST);
            }
        }
    }

    fn apply_event(&mut self, e: &BsEvent) {
        self.ring_events += 1;
        let t = self.ktime_to_t(e.ts_ns);
        match e.kind {
            bpf::event_kind::MARK => {
                let value = e.arg1;
                let (name, source) = if e.arg0 == u64::from(self.boot_time_port) {
                    (
                        phases::boot_time_port_mark_name(value as u8),
                        phases::source::BOOT_TIME_PORT,
                    )
                } else {
                    (
                        phases::debug_port_mark_name(value as u8),
                        phases::source::DEBUG_PORT,
                    )
                };
                self.push_mark(Mark {
                    name,
                    source: source.into(),
                    t_ns: t,
                    value: Some(value),
                    tgid: Some(e.tgid),
                });
            }
            bpf::event_kind::TASK_NEW => {
                let tgid = if e.tgid == 0 { e.tid } else { e.tgid };
                // Without clone flags (fork fallback) a thread cannot be told
                // from a process: it is filed as its own.
                let new_process =
                    e.arg1 != bpf::CLONE_FLAGS_UNKNOWN && e.arg1 & bpf::CLONE_THREAD == 0;
                if new_process {
                    self.tgids.insert(e.tid);
                    let parent_tgid = self.threads.get(&(e.arg0 as u32)).map(|t| t.tgid);
                    if let Some(p) = parent_tgid.and_then(|p| self.current_phase.get(&p).copied()) {
                        self.current_phase.insert(e.tid, p);
                    }
                }
                let entry = self.threads.entry(e.tid).or_default();
                entry.tgid = tgid;
                entry.name = e.comm();
                entry.start_ns = t;
            }
            bpf::event_kind::TASK_RENAME => {
                let name = e.comm();
                if e.tid == self.target_pid {
                    self.target.name = name.clone();
                }
                let entry = self.threads.entry(e.tid).or_insert_with(|| ThreadInfo {
                    tgid: e.tgid,
                    start_ns: t,
                    ..Default::default()
                });
                entry.name = name;
            }
            bpf::event_kind::TASK_EXIT => {
                let entry = self.threads.entry(e.tid).or_insert_with(|| ThreadInfo {
                    tgid: e.tgid,
                    name: e.comm(),
                    start_ns: 0,
                    ..Default::default()
                });
                entry.end_ns = Some(t);
                entry.exit_code = self.exit_codes.then(|| exit_status_code(e.arg0));
                if e.arg1 != 0 {
                    // Its last exit is counted: read KVM's total one last
                    // time and let the VM go.
                    self.kvm_stats.release(e.tgid);
                    if e.tgid == self.target_pid && self.target.ended_ns.is_none() {
                        self.target.ended_ns = Some(t);
                    }
                }
            }
            _ => {}
        }
    }

    /// Notices a target that ended without its exit event (missed, or the
    /// threads collector is off).
    fn poll_target(&mut self) {
        if self.target.ended_ns.is_none() && self.life.ended() {
            self.target.ended_ns = Some(self.now_ns());
        }
    }

    fn source_counts(&self) -> [u64; bpf::SOURCE_COUNT] {
        let mut out = [0u64; bpf::SOURCE_COUNT];
        if let Some(map) = self.bpf.map("source_events") {
            if let Ok(a) = PerCpuArray::<&MapData, u64>::try_from(map) {
                for (i, slot) in out.iter_mut().enumerate() {
                    if let Ok(v) = a.get(&(i as u32), 0) {
                        *slot = v.iter().sum();
                    }
                }
            }
        }
        out
    }

    /// Reads KVM's own counts; `rescan` also looks for new vCPUs (for a
    /// VMM profiling itself, only once it said they exist).
    fn refresh_kvm_stats(&mut self, rescan: bool) {
        let pids: Vec<u32> = self.tgids.iter().copied().collect();
        // Until a VM shows up, look for one on every tick: short-lived VMs
        // would otherwise be missed.
        let rescan = rescan || self.kvm_stats.total().is_none();
        self.kvm_stats.poll(&pids, rescan);
    }

    fn take_sample(&mut self) {
        let began = thread_cpu_time();
        self.take_sample_untimed();
        self.sample_cpu += thread_cpu_time().saturating_sub(began);
    }

    fn take_sample_untimed(&mut self) {
        self.refresh_kvm_stats(true);
        let t_ns = self.now_ns();
        // Samples need the counts only, not each program's events.
        let mut events = [0; bpf::SOURCE_COUNT];
        let exits = self.exit_reasons(false, &mut events);
        let faults = self.faults(&mut events);
        let by_reason: BTreeMap<String, u64> = exits
            .by_reason
            .iter()
            .map(|r| (r.reason.clone(), r.count))
            .collect();
        self.samples.push(Sample {
            t_ns,
            exits_total: exits.total,
            exits_by_reason: by_reason,
            guest_faults: faults.guest_total,
            host_faults: faults.host_total,
        });
    }

    fn thread_name(&self, tid: u32) -> String {
        self.threads
            .get(&tid)
            .map(|t| t.name.clone())
            .unwrap_or_default()
    }

    /// kvm_exit's counts and latency histograms, each exit still open
    /// (no kvm_entry has counted it yet: a vCPU in userspace, or the VM
    /// gone) added to its key's count without a latency.
    fn exit_stats(&self) -> BTreeMap<bpf::BsExitKey, bpf::BsHist> {
        let mut out: BTreeMap<bpf::BsExitKey, bpf::BsHist> =
            hash_entries::<bpf::BsExitKey, bpf::BsHist>(&self.bpf, "exit_stats")
                .into_iter()
                .collect();
        let open = hash_entries::<u32, bpf::BsExitStart>(&self.bpf, "exit_start");
        for (_, e) in open.into_iter().filter(|(_, e)| e.ts_ns != 0) {
            let key = bpf::BsExitKey {
                tgid: e.tgid,
                vcpu_id: e.vcpu_id,
                reason: e.reason,
                isa: e.isa,
                phase: e.phase,
            };
            out.entry(key).or_default().count += 1;
        }
        out
    }

    /// `exits` without the per-port detail (what samples need).
    /// `with_detail`: the latency histograms and each vCPU's thread too
    /// (a sample needs only the counts).
    ///
    /// The programs that run on every exit, fault, switch or allocation
    /// keep no event counter (to stay cheap): this and the other readers of
    /// their maps add what they counted to `events` (indexed by `Source`)
    /// as they go, so that a profile reads each map once. An event a full
    /// map could not count is in `map_overflows` instead.
    fn exit_reasons(
        &self,
        with_detail: bool,
        events: &mut [u64; bpf::SOURCE_COUNT],
    ) -> ExitProfile {
        let mut out = ExitProfile::default();
        let uexit_attached = self.attached(Source::KvmUserspaceExit);
        let exit_entries = self.exit_stats();
        let mut by_vcpu: BTreeMap<(u32, u32), VcpuExits> = BTreeMap::new();
        let mut by_phase: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
        let mut by_reason: BTreeMap<(u32, u32), (String, u64)> = BTreeMap::new();
        if !exit_entries.is_empty() {
            out.source = "tracepoint:kvm:kvm_exit".into();
            let isas: BTreeSet<u32> = exit_entries.keys().map(|k| k.isa).collect();
            out.isa = match isas.iter().copied().collect::<Vec<_>>()[..] {
                [ISA_VMX] => "vmx",
                [ISA_SVM] => "svm",
                [] => "unknown",
                [_] => "unknown",
                _ => "mixed",
            }
            .into();
            let vcpu_tids: HashMap<(u32, u32), u32> = if with_detail {
                hash_entries::<bpf::BsVcpuKey, u32>(&self.bpf, "vcpu_tids")
                    .into_iter()
                    .map(|(k, v)| ((k.tgid, k.vcpu_id), v))
                    .collect()
            } else {
                HashMap::new()
            };
            // Latency by reason: slots and total.
            let mut lat: HashMap<(u32, u32), (Vec<u64>, u64)> = HashMap::new();
            for (k, h) in &exit_entries {
                let n = h.count;
                let name = self.reasons.exit_name(k.isa, k.reason);
                out.total += n;
                events[Source::KvmExit as usize] += n;
                let timed: u64 = h.slots.iter().sum();
                events[Source::KvmEntry as usize] += timed;
                if with_detail && timed > 0 {
                    let e = lat
                        .entry((k.isa, k.reason))
                        .or_insert_with(|| (vec![0; hist::HIST_SLOTS], 0));
                    hist::add_slots(&mut e.0, &h.slots);
                    e.1 += h.total_ns;
                }
                let r = by_reason
                    .entry((k.isa, k.reason))
                    .or_insert_with(|| (name.clone(), 0));
                r.1 += n;
                let v = by_vcpu
                    .entry((k.tgid, k.vcpu_id))
                    .or_insert_with(|| VcpuExits {
                        vcpu: k.vcpu_id,
                        tid: vcpu_tids.get(&(k.tgid, k.vcpu_id)).copied().unwrap_or(0),
                        by_reason: BTreeMap::new(),
                    });
                *v.by_reason.entry(name.clone()).or_default() += n;
                *by_phase
                    .entry(k.phase)
                    .or_default()
                    .entry(name)
                    .or_default() += n;
            }
            for ((isa, reason), (name, count)) in by_reason {
                let (hist_slots, total) = lat.remove(&(isa, reason)).unwrap_or_default();
                out.by_reason.push(ExitReasonStat {
                    reason: name,
                    code: u64::from(reason),
                    count,
                    latency_total_ns: (!hist_slots.is_empty()).then_some(total),
                    latency_hist: hist::buckets(&hist_slots),
                });
            }
        } else if uexit_attached {
            out.source = "tracepoint:kvm:kvm_userspace_exit".into();
            out.isa = "userspace".into();
            let mut vcpu_of_tid: HashMap<u32, u32> = HashMap::new();
            let entries: Vec<(bpf::BsUexitKey, u64)> = hash_entries(&self.bpf, "uexit_counts");
            // Threads without a vCPU number in their name get one by order.
            let mut tids: Vec<u32> = entries.iter().map(|(k, _)| k.tid).collect();
            tids.sort();
            tids.dedup();
            let mut next = 0;
            for tid in tids {
                let v = vcpu_from_thread_name(&self.thread_name(tid)).unwrap_or_else(|| {
                    next += 1;
                    10_000 + next - 1
                });
                vcpu_of_tid.insert(tid, v);
            }
            for (k, n) in &entries {
                let name = self.reasons.userspace_name(k.code);
                out.total += n;
                events[Source::KvmUserspaceExit as usize] += n;
                let r = by_reason
                    .entry((0, k.code))
                    .or_insert_with(|| (name.clone(), 0));
                r.1 += n;
                let vcpu = vcpu_of_tid.get(&k.tid).copied().unwrap_or(0);
                let v = by_vcpu.entry((k.tgid, k.tid)).or_insert_with(|| VcpuExits {
                    vcpu,
                    tid: k.tid,
                    by_reason: BTreeMap::new(),
                });
                *v.by_reason.entry(name.clone()).or_default() += n;
                *by_phase
                    .entry(k.phase)
                    .or_default()
                    .entry(name)
                    .or_default() += n;
            }
            for ((_, code), (name, count)) in by_reason {
                out.by_reason.push(ExitReasonStat {
                    reason: name,
                    code: u64::from(code),
                    count,
                    latency_total_ns: None,
                    latency_hist: Vec::new(),
                });
            }
        } else {
            out.isa = "unknown".into();
        }
        out.by_reason
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
        out.by_vcpu = by_vcpu.into_values().collect();
        out.by_phase = by_phase
            .into_iter()
            .map(|(p, by_reason)| PhaseExits {
                phase: self.phase_names.name(p),
                by_reason,
            })
            .collect();
        out
    }

    fn attached(&self, s: Source) -> bool {
        self.programs
            .iter()
            .any(|p| p.spec.source == s && p.status == "attached")
    }

    fn exits(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> ExitProfile {
        let mut out = self.exit_reasons(true, events);
        // Where kvm_exit gave the reasons, the fallback's map was not read
        // for them (both attached only when the backend is unknown).
        if out.source == "tracepoint:kvm:kvm_exit" && self.attached(Source::KvmUserspaceExit) {
            events[Source::KvmUserspaceExit as usize] =
                hash_entries::<bpf::BsUexitKey, u64>(&self.bpf, "uexit_counts")
                    .iter()
                    .map(|(_, n)| n)
                    .sum();
        }
        out.kvm_stats_exits = self.kvm_stats.total();
        let mut pio: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
        for (k, n) in hash_entries::<bpf::BsPioKey, u64>(&self.bpf, "pio_counts") {
            events[Source::KvmPio as usize] += n;
            *pio.entry((k.port, k.rw, k.size)).or_default() += n;
        }
        out.pio = pio
            .into_iter()
            .map(|((port, rw, size), count)| PioStat {
                port,
                direction: if rw != 0 { "write" } else { "read" }.into(),
                size,
                count,
            })
            .collect();
        out.pio
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.port.cmp(&b.port)));
        let mut markers: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for (k, n) in hash_entries::<bpf::BsMarkerKey, u64>(&self.bpf, "marker_counts") {
            *markers.entry((k.port, k.value)).or_default() += n;
        }
        out.marker_writes = markers
            .into_iter()
            .map(|((port, value), count)| MarkerWrites { port, value, count })
            .collect();
        let mut mmio: BTreeMap<(u64, u32), u64> = BTreeMap::new();
        for (k, n) in hash_entries::<bpf::BsMmioKey, u64>(&self.bpf, "mmio_counts") {
            events[Source::KvmMmio as usize] += n;
            *mmio.entry((k.gpa, k.kind)).or_default() += n;
        }
        out.mmio = mmio
            .into_iter()
            .map(|((gpa, kind), count)| MmioStat {
                gpa,
                kind: match kind {
                    0 => "unsatisfied-read",
                    1 => "read",
                    2 => "write",
                    _ => "unknown",
                }
                .into(),
                count,
            })
            .collect();
        out.mmio
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.gpa.cmp(&b.gpa)));
        let mut msr: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
        for (k, n) in hash_entries::<bpf::BsMsrKey, u64>(&self.bpf, "msr_counts") {
            events[Source::KvmMsr as usize] += n;
            let e = msr.entry((k.msr, k.write)).or_default();
            e.0 += n;
            if k.exception != 0 {
                e.1 += n;
            }
        }
        out.msr = msr
            .into_iter()
            .map(|((msr, write), (count, faults))| MsrStat {
                msr,
                direction: if write != 0 { "write" } else { "read" }.into(),
                count,
                faults,
            })
            .collect();
        out.msr
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.msr.cmp(&b.msr)));
        let mut cpuid: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for (k, n) in hash_entries::<bpf::BsCpuidKey, u64>(&self.bpf, "cpuid_counts") {
            events[Source::KvmCpuid as usize] += n;
            *cpuid.entry((k.function, k.index)).or_default() += n;
        }
        out.cpuid = cpuid
            .into_iter()
            .map(|((function, index), count)| CpuidStat {
                function,
                index,
                count,
            })
            .collect();
        for (k, n) in hash_entries::<bpf::BsEmulateKey, u64>(&self.bpf, "emulate_counts") {
            events[Source::KvmEmulateInsn as usize] += n;
            out.emulated_instructions += n;
            if k.failed != 0 {
                out.emulation_failures += n;
            }
        }
        out
    }

    fn faults(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> PageFaultProfile {
        let mut out = PageFaultProfile::default();
        let entries = hash_entries::<bpf::BsFaultKey, u64>(&self.bpf, "fault_counts");
        let has = |kind| entries.iter().any(|(k, n)| k.kind == kind && *n > 0);
        let guest_kind = if has(bpf::fault_kind::GUEST) {
            out.guest_source = "tracepoint:kvm:kvm_page_fault".into();
            Some(bpf::fault_kind::GUEST)
        } else if has(bpf::fault_kind::GUEST_MAP) {
            out.guest_source = "tracepoint:kvmmmu:kvm_mmu_spte_requested".into();
            Some(bpf::fault_kind::GUEST_MAP)
        } else {
            None
        };
        let mut by_thread: BTreeMap<u32, ThreadFaults> = BTreeMap::new();
        let mut by_phase: BTreeMap<u32, PhaseFaults> = BTreeMap::new();
        for (k, n) in entries {
            let source = match k.kind {
                bpf::fault_kind::GUEST => Some(Source::KvmPageFault),
                bpf::fault_kind::GUEST_MAP => Some(Source::KvmmmuSpteRequested),
                bpf::fault_kind::GUEST_MMIO => Some(Source::KvmmmuMmioPageFault),
                bpf::fault_kind::HOST_USER => Some(Source::PageFaultUser),
                bpf::fault_kind::HOST_KERNEL => Some(Source::PageFaultKernel),
                _ => None,
            };
            if let Some(source) = source {
                events[source as usize] += n;
            }
            let (guest, host) = match k.kind {
                bpf::fault_kind::HOST_USER => {
                    out.host_user += n;
                    (0, n)
                }
                bpf::fault_kind::HOST_KERNEL => {
                    out.host_kernel += n;
                    (0, n)
                }
                bpf::fault_kind::GUEST_MMIO => {
                    out.guest_mmio += n;
                    (0, 0)
                }
                kind if Some(kind) == guest_kind => (n, 0),
                _ => (0, 0),
            };
            if guest == 0 && host == 0 {
                continue;
            }
            out.guest_total += guest;
            out.host_total += host;
            let t = by_thread.entry(k.tid).or_insert_with(|| ThreadFaults {
                tid: k.tid,
                name: self.thread_name(k.tid),
                ..Default::default()
            });
            t.guest += guest;
            t.host += host;
            let p = by_phase.entry(k.phase).or_insert_with(|| PhaseFaults {
                phase: self.phase_names.name(k.phase),
                ..Default::default()
            });
            p.guest += guest;
            p.host += host;
        }
        out.by_thread = by_thread.into_values().collect();
        out.by_phase = by_phase.into_values().collect();
        out
    }

    fn threads_and_numa(
        &self,
        now: u64,
        events: &mut [u64; bpf::SOURCE_COUNT],
    ) -> (Vec<ThreadProfile>, NumaProfile) {
        let page = page_size();
        let mut numa = NumaProfile {
            source: if self.attached(Source::MmPageAlloc) {
                "tracepoint:kmem:mm_page_alloc".into()
            } else {
                String::new()
            },
            page_size: page,
            pfn_map_source: self.topology.pfn_source.clone(),
            ..Default::default()
        };
        let mut threads: BTreeMap<u32, ThreadProfile> = BTreeMap::new();
        let entry = |threads: &mut BTreeMap<u32, ThreadProfile>, tid: u32, tgid: u32| {
            threads.entry(tid).or_insert_with(|| {
                let info = self.threads.get(&tid);
                let name = info
                    .map(|i| i.name.clone())
                    .filter(|n| !n.is_empty())
                    .or_else(|| read_comm(tgid, tid))
                    .unwrap_or_default();
                let tgid = info.map(|i| i.tgid).filter(|&g| g != 0).unwrap_or(tgid);
                ThreadProfile {
                    tid,
                    role: thread_role(&name, tid, tgid).into(),
                    name,
                    start_ns: info.map(|i| i.start_ns).unwrap_or(0),
                    end_ns: info.and_then(|i| i.end_ns).unwrap_or(now),
                    tgid,
                    exit_code: info.and_then(|i| i.exit_code),
                    ..Default::default()
                }
            });
        };
        for (&tid, info) in &self.threads {
            entry(&mut threads, tid, info.tgid);
        }
        let mut cpus: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for (k, v) in hash_entries::<bpf::BsRunKey, bpf::BsRunVal>(&self.bpf, "run_time") {
            events[Source::SchedSwitch as usize] += v.slices;
            entry(&mut threads, k.tid, v.tgid);
            *cpus.entry(k.tid).or_default().entry(k.cpu).or_default() += v.run_ns;
        }
        let mut by_node: BTreeMap<u32, NodeLocality> = BTreeMap::new();
        let mut nodes_of: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for (k, v) in hash_entries::<bpf::BsNumaKey, bpf::BsNumaVal>(&self.bpf, "numa_pages") {
            events[Source::MmPageAlloc as usize] += v.allocs;
            entry(&mut threads, k.tid, k.tgid);
            let t = threads.get_mut(&k.tid).expect("just inserted");
            t.pages_allocated += v.pages;
            numa.pages_allocated += v.pages;
            let known = k.page_node != bpf::NODE_UNKNOWN && k.cpu_node != bpf::NODE_UNKNOWN;
            if !known {
                numa.pages_unknown_node += v.pages;
            } else if k.page_node == k.cpu_node {
                t.pages_local += v.pages;
                numa.pages_local += v.pages;
            } else {
                t.pages_remote += v.pages;
                numa.pages_remote += v.pages;
            }
            if k.page_node != bpf::NODE_UNKNOWN {
                *nodes_of
                    .entry(k.tid)
                    .or_default()
                    .entry(k.page_node)
                    .or_default() += v.pages;
                let n = by_node.entry(k.page_node).or_insert_with(|| NodeLocality {
                    node: k.page_node,
                    ..Default::default()
                });
                if known && k.page_node == k.cpu_node {
                    n.pages_local += v.pages;
                } else if known {
                    n.pages_remote += v.pages;
                }
            }
        }
        numa.bytes_allocated = numa.pages_allocated * page;
        numa.by_node = by_node.into_values().collect();
        for (tid, t) in threads.iter_mut() {
            t.bytes_allocated = t.pages_allocated * page;
            if let Some(c) = cpus.get(tid) {
                t.cpus = c
                    .iter()
                    .map(|(&cpu, &run_ns)| CpuResidency {
                        cpu,
                        node: self.topology.cpu_node(cpu).unwrap_or(bpf::NODE_UNKNOWN),
                        run_ns,
                    })
                    .collect();
                t.run_ns = c.values().sum();
                let nodes: BTreeSet<u32> = t.cpus.iter().map(|c| c.node).collect();
                t.nodes = nodes.into_iter().collect();
            }
            if let Some(n) = nodes_of.get(tid) {
                t.pages_by_node = n
                    .iter()
                    .map(|(&node, &pages)| NodePages { node, pages })
                    .collect();
            }
        }
        (threads.into_values().collect(), numa)
    }

    fn sources(
        &self,
        counts: &[u64; bpf::SOURCE_COUNT],
        exits: &ExitProfile,
        faults: &PageFaultProfile,
    ) -> Vec<DataSource> {
        let mut out = Vec::new();
        for p in &self.programs {
            let events = counts[p.spec.source as usize];
            let mut status = p.status.to_string();
            let mut detail = if p.detail.is_empty() {
                format!("feeds {}", p.spec.feeds)
            } else {
                p.detail.clone()
            };
            let collector = match p.spec.collector {
                CollectorKind::Exits | CollectorKind::ExitLatency => "exits",
                CollectorKind::Faults => "faults",
                CollectorKind::Threads => "threads",
                CollectorKind::Numa => "numa",
                CollectorKind::Phases => "phases",
            };
            if p.status == "attached" {
                match p.spec.source {
                    Source::KvmExit if events == 0 => {
                        detail = format!(
                            "attached, but fired 0 times for the target{}; exit reasons come from {}",
                            if self.host.kvm == "pvm" {
                                " (PVM host: kvm_exit is only raised by the VMX/SVM code)"
                            } else {
                                ""
                            },
                            if exits.source.is_empty() { "no source" } else { &exits.source }
                        );
                    }
                    Source::KvmUserspaceExit
                        if exits.source == "tracepoint:kvm:kvm_userspace_exit" =>
                    {
                        status = "fallback".into();
                        detail = "exits.by_reason counts exits to the VMM by KVM_EXIT_* reason: kvm:kvm_exit did not fire".into();
                    }
                    Source::KvmmmuSpteRequested
                        if faults.guest_source == "tracepoint:kvmmmu:kvm_mmu_spte_requested" =>
                    {
                        status = "fallback".into();
                        detail = "page_faults.guest_total counts KVM MMU mappings: kvm:kvm_page_fault did not fire".into();
                    }
                    _ => {}
                }
            }
            let (runs, run_ns) = match self.program_run_stats(p) {
                Some((runs, ns)) => (Some(runs), Some(ns)),
                None => (None, None),
            };
            out.push(DataSource {
                name: p.spec.source_name(),
                status,
                detail,
                events,
                collector: collector.into(),
                runs,
                run_ns,
            });
        }
        out.push(DataSource {
            name: "ringbuf:events".into(),
            status: "attached".into(),
            detail: format!(
                "{} KiB ring buffer for marks and thread lifetimes; lost records are in lost_events{}",
                self.ring_bytes / 1024,
                if self.marks_dropped > 0 {
                    format!(
                        "; {} port marks beyond the first {MAX_MARKS} not kept",
                        self.marks_dropped
                    )
                } else {
                    String::new()
                }
            ),
            events: self.ring_events,
            collector: "all".into(),
            ..Default::default()
        });
        let (status, detail) = self.kvm_stats.describe();
        out.push(DataSource {
            name: format!("kvm_stats:{}", self.kvm_stats.method()),
            status: status.into(),
            detail,
            events: self.kvm_stats.total().unwrap_or(0),
            collector: "exits".into(),
            ..Default::default()
        });
        out.extend(self.extra_sources.iter().cloned());
        if self.vmm_marks > 0 {
            out.push(DataSource {
                name: "vmm".into(),
                status: "attached".into(),
                detail: "marks added in-process by bootscope's VMM".into(),
                events: self.vmm_marks,
                collector: "phases".into(),
                ..Default::default()
            });
        }
        out
    }

    /// Runs and run time of an attached program, when the kernel keeps
    /// them (`--bpf-stats`).
    fn program_run_stats(&self, p: &ProgramState) -> Option<(u64, u64)> {
        self.bpf_stats.as_ref()?;
        if p.status != "attached" {
            return None;
        }
        let info = self.bpf.program(p.spec.program)?.info().ok()?;
        Some((
            info.run_count(),
            u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
        ))
    }

    fn build(&self, now: u64) -> Profile {
        let mut counts = self.source_counts();
        let exits = self.exits(&mut counts);
        let page_faults = self.faults(&mut counts);
        let (threads, numa) = self.threads_and_numa(now, &mut counts);
        let mut marks = self.marks.clone();
        marks.sort_by_key(|m| m.t_ns);
        let phases = phases::derive_spans(&marks, now);
        Profile {
            sources: self.sources(&counts, &exits, &page_faults),
            target: self.target.clone(),
            host: self.host.clone(),
            duration_ns: now,
            exits,
            page_faults,
            threads,
            numa,
            marks,
            phases,
            samples: self.samples.clone(),
            lost_events: percpu_sum(&self.bpf, "lost_events", 0),
            map_overflows: percpu_sum(&self.bpf, "map_overflows", 0),
            startup: self.startup.clone(),
            collector: Some(CollectorCost {
                samples: self.samples.len() as u64,
                sample_cpu_ns: self.sample_cpu.as_nanos() as u64,
                cpu_ns: self.reader_cpu.as_nanos() as u64,
            }),
            ..Profile::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_names() {
        assert_eq!(vcpu_from_thread_name("vcpu0"), Some(0));
        assert_eq!(vcpu_from_thread_name("vcpu12"), Some(12));
        assert_eq!(vcpu_from_thread_name("CPU 3/KVM"), Some(3));
        assert_eq!(vcpu_from_thread_name("touch_pages"), None);
        assert_eq!(thread_role("CPU 1/KVM", 5, 4), "vcpu");
        assert_eq!(thread_role("touch_pages", 5, 4), "prealloc");
        assert_eq!(thread_role("qemu-system-x86", 4, 4), "main");
        assert_eq!(thread_role("call_rcu", 6, 4), "other");
    }

    #[test]
    fn collector_is_shareable_with_a_ui_thread() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Collector>();
    }

    #[test]
    fn collector_lists() {
        let s = CollectorSet::parse("exits, phases").unwrap();
        assert!(s.exits && s.phases && !s.faults && !s.threads && !s.numa);
        assert!(s.exit_latency && s.has(CollectorKind::ExitLatency));
        let all = CollectorSet::parse("all").unwrap();
        assert_eq!(all, CollectorSet::ALL);
        assert!(all.exits && all.exit_latency && all.faults && all.threads && all.numa);
        let each = CollectorSet::parse(&CollectorSet::NAMES.join(",")).unwrap();
        assert_eq!(each, CollectorSet::ALL);
        // Exits counted, their latency not; named with exits, exits wins.
        let counts = CollectorSet::parse("exit-counts").unwrap();
        assert!(counts.exits && !counts.exit_latency);
        assert!(counts.has(CollectorKind::Exits) && !counts.has(CollectorKind::ExitLatency));
        assert!(
            CollectorSet::parse("exit-counts,exits")
                .unwrap()
                .exit_latency
        );
        let e = CollectorSet::parse("exits,pages").unwrap_err();
        assert!(
            e.contains("\"pages\"") && e.contains("exits, exit-counts, faults"),
            "{e}"
        );
        assert!(CollectorSet::parse("").unwrap_err().contains("empty"));
        assert!(CollectorSet::parse("exits,").unwrap_err().contains("empty"));
    }

    #[test]
    fn samples_cost_at_most_a_fraction_of_a_percent() {
        let ms = Duration::from_millis;
        // Natively a sample costs well under a millisecond: the interval
        // holds.
        // (75 to 230 us here: at most 230 ms apart).
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(80)), ms(200));
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(200)), ms(200));
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(230)), ms(230));
        // Emulated, 3 ms a sample: 3 s apart.
        assert_eq!(sample_spacing(ms(200), ms(3)), ms(3000));
    }

    #[test]
    fn thread_maps_are_sized_for_the_threads_expected() {
        let sizes = |t, c, n| {
            thread_map_sizes(t, c, n)
                .into_iter()
                .collect::<std::collections::HashMap<_, _>>()
        };
        // A small VM on a small host: a fraction of the defaults.
        let s = sizes(4, 2, 1);
        assert_eq!(s["threads"], 64);
        assert_eq!(s["run_time"], 256);
        assert_eq!(s["numa_pages"], 256);
        assert_eq!(s["fault_counts"], 2048);
        assert_eq!(s["exit_stats"], 4096);
        // Room to spare: twice the threads, rounded up.
        let s = sizes(200, 8, 2);
        assert_eq!(s["threads"], 512);
        assert_eq!(s["run_time"], 4096);
        assert_eq!(s["numa_pages"], 2048);
        // Never beyond the object's own sizes.
        let s = sizes(100_000, 512, 8);
        assert_eq!(s["threads"], 32768);
        assert_eq!(s["run_time"], 32768);
        assert_eq!(s["exit_start"], 8192);
        assert_eq!(s["uexit_counts"], 8192);
        assert_eq!(s["exit_stats"], 16384);
        let s = sizes(u32::MAX, u32::MAX, u32::MAX);
        assert_eq!(s["numa_pages"], 16384);
    }

    /// The loader made without the kernel's BTF has none, and the mount
    /// that hid it was seen by its own thread only.
    #[test]
    fn kernel_btf_is_hidden_from_the_loader_thread_only() {
        // SAFETY: geteuid has no preconditions.
        if !Path::new(KERNEL_BTF).exists() || unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP: needs root and a kernel with {KERNEL_BTF}");
            return;
        }
        let loader = loader_without_kernel_btf().expect("loader without kernel BTF");
        let shown = format!("{loader:?}");
        assert!(shown.starts_with("EbpfLoader { btf: None"), "{shown:.200}");
        assert!(Path::new(KERNEL_BTF).exists());
        for view in ["/proc/thread-self/mountinfo", "/proc/self/mountinfo"] {
            let mounts = std::fs::read_to_string(view).unwrap();
            assert!(
                !mounts
                    .lines()
                    .any(|l| l.split_whitespace().nth(4) == Some("/sys/kernel/btf")),
                "{view} still shows the mount"
            );
        }
    }

    #[test]
    fn programs_that_cannot_fire_or_are_fallbacks_are_not_attached() {
        assert_eq!(
            KvmBackend::from_modules(true, false, false),
            KvmBackend::Pvm
        );
        assert_eq!(
            KvmBackend::from_modules(false, false, true),
            KvmBackend::Hardware("svm")
        );
        assert_eq!(
            KvmBackend::from_modules(true, true, false),
            KvmBackend::Unknown
        );
        assert_eq!(
            KvmBackend::from_modules(false, false, false),
            KvmBackend::Unknown
        );
        let spec = |src: Source| *PROGRAMS.iter().find(|p| p.source == src).unwrap();
        let state = |src: Source, status| ProgramState {
            spec: spec(src),
            status,
            detail: String::new(),
        };
        let skipped = |src, backend, before: &[ProgramState]| {
            not_needed(&spec(src), backend, before).is_some()
        };
        let svm = KvmBackend::Hardware("svm");
        let unknown = KvmBackend::Unknown;
        assert!(skipped(Source::KvmExit, KvmBackend::Pvm, &[]));
        assert!(skipped(Source::KvmEntry, KvmBackend::Pvm, &[]));
        assert!(!skipped(Source::KvmUserspaceExit, KvmBackend::Pvm, &[]));
        assert!(skipped(Source::KvmUserspaceExit, svm, &[]));
        assert!(skipped(Source::KvmmmuSpteRequested, svm, &[]));
        assert!(!skipped(Source::KvmExit, svm, &[]));
        assert!(!skipped(Source::KvmPageFault, KvmBackend::Pvm, &[]));
        // Unknown backend: everything.
        for p in PROGRAMS {
            if p.source != Source::SchedProcessFork {
                assert!(not_needed(p, unknown, &[]).is_none(), "{p:?}");
            }
        }
        // The fork fallback only where task_newtask is attached.
        let newtask_ok = [state(Source::TaskNewtask, "attached")];
        let newtask_missing = [state(Source::TaskNewtask, "missing")];
        assert!(skipped(Source::SchedProcessFork, unknown, &newtask_ok));
        assert!(!skipped(
            Source::SchedProcessFork,
            unknown,
            &newtask_missing
        ));
        // Their maps stay small; shared ones only when every writer is off.
        let all: Vec<ProgramState> = PROGRAMS
            .iter()
            .map(|p| ProgramState {
                spec: *p,
                status: match p.source {
                    Source::KvmExit => "disabled",
                    _ => "attached",
                },
                detail: String::new(),
            })
            .collect();
        assert_eq!(unused_maps(&all), ["vcpu_tids"]);
        let none: Vec<ProgramState> = all
            .iter()
            .cloned()
            .map(|mut p| {
                p.status = "disabled";
                p
            })
            .collect();
        assert_eq!(unused_maps(&none).len(), PROGRAM_MAPS.len());
        // Every map named is a symbol of the object.
        let symbol = |name: &str| {
            let n = name.len();
            bpf::OBJECT
                .windows(n + 2)
                .any(|w| w[0] == 0 && &w[1..=n] == name.as_bytes() && w[n + 1] == 0)
        };
        for (progs, map) in PROGRAM_MAPS {
            assert!(symbol(map), "{map}");
            for prog in *progs {
                assert!(PROGRAMS.iter().any(|p| p.program == *prog), "{prog}");
            }
        }
    }

    #[test]
    fn load_errors_keep_the_verifier_verdict() {
        let log = "the BPF_PROG_LOAD syscall returned Invalid argument (os error 22). Verifier output: 0: R1=ctx\n1: (85) call\n\n2: a\n3: b\n4: c\n5: d\ninfinite loop detected at insn 86\nverification time 4760 usec\n";
        let s = short_load_error(log);
        assert!(s.starts_with("the BPF_PROG_LOAD syscall returned Invalid argument"));
        assert!(s.contains("infinite loop detected at insn 86"));
        assert!(!s.contains("R1=ctx"));
        assert_eq!(short_load_error("plain"), "plain");
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_status_code(0), 0);
        assert_eq!(exit_status_code(3 << 8), 3);
        assert_eq!(exit_status_code(9), 137);
    }

    #[test]
    fn descendants_include_self() {
        let me = std::process::id();
        assert_eq!(descendants(me)[0], me);
        assert!(process_alive(me));
        assert!(!tasks_of(me).is_empty());
    }

    /// A target's end is seen once it has exited, before it is reaped (a
    /// zombie has ended), by its pidfd and by /proc alike; our own process
    /// never ends while profiling.
    #[test]
    fn a_target_ends_when_it_exits() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let by_fd = TargetLife::watch(pid, false);
        assert!(
            matches!(by_fd, TargetLife::Pidfd(_)),
            "pidfd_open (Linux 5.3+)"
        );
        let by_proc = TargetLife::Proc(pid);
        assert!(!by_fd.ended() && !by_proc.ended());
        drop(child.stdin.take());
        // Not reaped yet: a zombie.
        let until = Instant::now() + Duration::from_secs(10);
        while !by_fd.ended() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(by_fd.ended());
        assert!(by_proc.ended());
        child.wait().unwrap();
        assert!(by_fd.ended());
        assert!(!TargetLife::watch(std::process::id(), true).ended());
    }

    #[test]
    fn descendants_follow_children_and_grandchildren() {
        // sh starts sleep as its child; both are our descendants, found the
        // same way from the children files and from the /proc scan.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let me = std::process::id();
        let found = descendants(me);
        let scanned = descendants_by_scan(me);
        // SAFETY: kill(2) with a pid and a signal.
        unsafe { libc::kill(grandchild as i32, libc::SIGKILL) };
        child.wait().unwrap();
        for list in [&found, &scanned] {
            assert_eq!(list[0], me);
            let c = list.iter().position(|&p| p == child.id()).expect("child");
            let g = list
                .iter()
                .position(|&p| p == grandchild)
                .expect("grandchild");
            assert!(c < g, "{list:?}");
        }
        if Path::new(&format!("/proc/{me}/task/{me}/children")).exists() {
            assert_eq!(children_of(child.id()), Some(vec![]), "reaped");
        }
    }
}
