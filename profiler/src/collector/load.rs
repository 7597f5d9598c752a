//! Loading: the object with its fields, globals and map sizes set, the
//! lookup tables filled, and each planned program verified and attached.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use aya::maps::{Array, MapData};
use aya::programs::Program;
use aya::{Ebpf, EbpfLoader};
use bootscope_model::proc::thread_cpu_time;

use super::config::{CollectorConfig, TargetSpec};
use super::maps::map_error;
use super::plan::{ProgramState, ProgramStatus};
use crate::bpf::{self, BsField, ProgramSpec};
use crate::error::ProfilerError;
use crate::profile::{DataSource, StartupStage};
use crate::topology::Topology;

/// A load error with the verifier log cut to its last lines, where the
/// verifier says what it rejected (the whole log is thousands of lines).
pub(super) fn short_load_error(msg: &str) -> String {
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

/// Where the kernel's type information (BTF) stands for one load.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum KernelBtf {
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
    pub(super) fn reads_exit_codes(&self) -> bool {
        matches!(self, KernelBtf::Used(_))
    }

    pub(super) fn source(&self) -> DataSource {
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

pub(super) const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// An instant of the start-up: wall clock and this thread's CPU time.
#[derive(Clone, Copy)]
pub(super) struct StagePoint {
    wall: Instant,
    cpu: Duration,
}

impl StagePoint {
    pub(super) fn now() -> Self {
        StagePoint {
            wall: Instant::now(),
            cpu: thread_cpu_time(),
        }
    }
}

/// Wall and CPU time of the start-up's stages, kept in the profile
/// (`startup`).
pub(super) struct Stages {
    pub(super) last: StagePoint,
    pub(super) done: Vec<StartupStage>,
}

impl Stages {
    pub(super) fn new() -> Self {
        Stages {
            last: StagePoint::now(),
            done: Vec::new(),
        }
    }

    /// Ends the stage running since the previous end.
    pub(super) fn end(&mut self, stage: &str) {
        self.end_at(stage, StagePoint::now());
    }

    /// Ends the stage at `at` (taken earlier); a stage ended more than once
    /// (`verify` and `attach` alternate program by program) adds up.
    pub(super) fn end_at(&mut self, stage: &str, at: StagePoint) {
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
pub(super) fn loader_without_kernel_btf() -> Result<EbpfLoader<'static>, String> {
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
pub(super) fn thread_map_sizes(threads: u32, cpus: u32, nodes: u32) -> [(&'static str, u32); 9] {
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
        ("sched_tasks", size(1, 64, 16384)),
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
        // tid x phase
        ("sched_waits", size(16, 1024, 16384)),
        // vCPU (a thread) x reason x phase
        ("exit_stats", size(64, 1024, 16384)),
    ]
}

/// What the object is loaded with, besides the configuration.
pub(super) struct ObjectSettings<'a> {
    /// `EVENT__FIELD` from the format files, for the fields programs read
    /// with a helper call.
    pub(super) globals: &'a BTreeMap<String, BsField>,
    /// The fields programs load straight from the record, by patch slot
    /// (crate::patch); None for one this kernel lacks.
    pub(super) direct: &'a [Option<BsField>],
    pub(super) fork_follows: bool,
    pub(super) ring_bytes: u32,
    /// Maps made one entry big ([`unused_maps`]).
    pub(super) unused_maps: &'a [&'static str],
}

/// The maps only exit sites fill: one entry big without `--exit-sites`.
pub(super) const SITE_MAPS: [&str; 2] = ["exit_sites", "npf_ranges"];

/// Entries of the per-time-slot map when slots are on: one per run of
/// [`crate::bpf::SLOT_RUN`] slots (3.2 ms) and exit reason (or fault kind) that
/// occurred in it. A boot of tens of thousands of exits fills a fraction;
/// a guest that stays up keeps adding a few per run, and once it is full
/// the latest slots lose counts (counted in `time_slot_overflows`). Not
/// preallocated: what is not used costs only its buckets (16 bytes each).
pub(super) const TIME_SLOT_ENTRIES: u32 = 65_536;

/// [`TIME_SLOT_ENTRIES`], or `BOOTSCOPE_TIME_SLOT_ENTRIES` where set (tests
/// fill a small map on purpose).
pub(super) fn time_slot_entries() -> u32 {
    std::env::var("BOOTSCOPE_TIME_SLOT_ENTRIES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(TIME_SLOT_ENTRIES)
}

/// Loads the object with every field global resolved from the formats;
/// time slots, when on, start at `slot_base_mono_ns` (CLOCK_MONOTONIC).
pub(super) fn load_object(
    config: &CollectorConfig,
    topology: &Topology,
    settings: &ObjectSettings,
    slot_base_mono_ns: u64,
    stages: &mut Stages,
) -> Result<Loaded, ProfilerError> {
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
    let (fields, gfn, sources) = match config.collectors.tail {
        true => {
            let (fields, counters) = fault_counter_fields();
            let (gfn, gfn_source) = spte_gfn_field();
            stages.end("task fields");
            (fields, gfn, vec![counters, gfn_source])
        }
        false => ([0; 3], None, Vec::new()),
    };
    let gfn_off = gfn.unwrap_or(0);
    loader
        .override_global("read_fault_counters", &fields[0], true)
        .override_global("task_min_flt_off", &fields[1], true)
        .override_global("task_maj_flt_off", &fields[2], true)
        .override_global("spte_gfn_off", &gfn_off, true);
    for (name, field) in settings.globals {
        loader.override_global(name.as_str(), field, true);
    }
    let debug_port = u32::from(config.debug_port);
    let serial_port = u32::from(config.serial_port.unwrap_or(0));
    let boot_time_port = u32::from(config.boot_time_port);
    let fork_follows = u32::from(settings.fork_follows);
    let read_exit_code = u32::from(btf.reads_exit_codes());
    let tail_bucket_ns = super::tail::BUCKET_NS;
    let nr_ranges = topology.pfn_ranges.len().min(bpf::MAX_PFN_RANGES) as u32;
    loader
        .override_global("marker_port_debug", &debug_port, true)
        .override_global("marker_port_boot_time", &boot_time_port, true)
        .override_global("serial_port", &serial_port, true)
        .override_global("fork_follows", &fork_follows, true)
        .override_global("read_exit_code", &read_exit_code, true)
        .override_global("tail_bucket_ns", &tail_bucket_ns, true)
        .override_global("nr_pfn_ranges", &nr_ranges, true)
        .map_max_entries("events", settings.ring_bytes);
    if let Some(threads) = config.expected_threads {
        let cpus = topology.cpu_nodes.len() as u32;
        let nodes = topology.nodes.len() as u32;
        for (map, entries) in thread_map_sizes(threads, cpus, nodes) {
            loader.map_max_entries(map, entries);
        }
    }
    let exit_sites_on = u32::from(config.exit_sites);
    loader.override_global("exit_sites_on", &exit_sites_on, true);
    let follow_any_vm = u32::from(config.target == TargetSpec::AnyVm);
    loader.override_global("follow_any_vm", &follow_any_vm, true);
    let slot_ns: u64 = config
        .time_slots
        .map_or(0, |w| (w.as_nanos() as u64).max(1));
    loader
        .override_global("time_slot_ns", &slot_ns, true)
        .override_global("time_slot_base_ns", &slot_base_mono_ns, true);
    loader.map_max_entries(
        "time_slots",
        if slot_ns > 0 { time_slot_entries() } else { 1 },
    );
    let threads = config.expected_threads;
    for (map, entries) in super::tail::map_sizes(config.guest_memory_bytes, threads) {
        loader.map_max_entries(map, entries);
    }
    // After the sizes above: an unused map stays small whatever they say.
    let site_maps: &[&str] = if config.exit_sites { &[] } else { &SITE_MAPS };
    for map in settings.unused_maps.iter().chain(site_maps) {
        loader.map_max_entries(map, 1);
    }
    let (object, _) = crate::patch::patch(bpf::OBJECT, settings.direct)?;
    let ebpf = loader
        .load(object.bytes())
        .map_err(|source| ProfilerError::Load { source })?;
    stages.end("maps");
    Ok(Loaded {
        ebpf,
        kernel_btf: btf,
        counters: sources,
        spte_gfn: gfn,
    })
}

/// What [`load_object`] made and found.
pub(super) struct Loaded {
    pub(super) ebpf: Ebpf,
    pub(super) kernel_btf: KernelBtf,
    /// What the tail collector's offsets came from.
    pub(super) counters: Vec<DataSource>,
    /// `struct kvm_page_fault`'s `gfn` offset, when found: the window's
    /// end then attaches raw (`bs_tail_spte_raw`).
    pub(super) spte_gfn: Option<u32>,
}

/// The window's end program, `bs_tail_spte`, replaced by its raw twin
/// where `gfn` (the offset of `struct kvm_page_fault`'s `gfn`) is known.
pub(super) fn use_raw_spte(programs: &mut [ProgramState], gfn: Option<u32>) {
    if gfn.is_none() {
        return;
    }
    for p in programs
        .iter_mut()
        .filter(|p| p.spec.program == "bs_tail_spte")
    {
        p.spec.program = "bs_tail_spte_raw";
        p.spec.fields = &[];
    }
}

/// The offset of `struct kvm_page_fault`'s `gfn` in this kernel (KVM's
/// module BTF, or the kernel's own with a record in the cache), and the
/// data source saying how the window's end reads a fault's frame.
fn spte_gfn_field() -> (Option<u32>, DataSource) {
    let cache = btf_record("kvm-page-fault-gfn");
    let btf_dir = Path::new(KERNEL_BTF).parent().unwrap_or(Path::new("/"));
    let found = crate::task_fields::kvm_fault_gfn(btf_dir, cache.as_deref());
    let (gfn, status, detail) = match found {
        Ok((f, from)) => (
            Some(f.offset),
            "attached",
            format!(
                "kvm_page_fault gfn at +{} ({}): the window's end attached raw, \
                 reading the fault it is given",
                f.offset,
                from.display()
            ),
        ),
        Err(why) => (
            None,
            "missing",
            format!(
                "the window's end attached as a classic tracepoint, its record built at \
                 each guest fault ({why})"
            ),
        ),
    };
    let source = DataSource {
        name: "btf:kvm_page_fault gfn".into(),
        status: status.into(),
        detail,
        events: 0,
        collector: "tail".into(),
        ..Default::default()
    };
    (gfn, source)
}

/// Where the record of the fields named `name` is kept (the cache's
/// `btf` directory), when there is a cache.
fn btf_record(name: &str) -> Option<std::path::PathBuf> {
    bootscope_model::cache::cache_dir("btf")
        .ok()
        .map(|d| d.join(name))
}

/// The tail programs' globals for `task_struct`'s fault counters (read
/// them or not, `min_flt`'s and `maj_flt`'s offsets), found in the
/// kernel's BTF without parsing all of it (crate::task_fields), and the
/// data source saying how they are read.
fn fault_counter_fields() -> ([u32; 3], DataSource) {
    let cache = btf_record("task-fault-counters");
    let found = crate::task_fields::fault_counters_cached(Path::new(KERNEL_BTF), cache.as_deref());
    let fields = match &found {
        Ok(c) => [1, c.min_flt.offset, c.maj_flt.offset],
        Err(_) => [0; 3],
    };
    let (status, detail) = match found {
        Ok(c) => (
            "attached",
            format!(
                "task_struct min_flt at +{}, maj_flt at +{} ({KERNEL_BTF}): \
                 the threads' fault counters read in each guest fault",
                c.min_flt.offset, c.maj_flt.offset
            ),
        ),
        Err(why) => (
            "missing",
            format!(
                "the threads' fault counters are not read ({why}): every guest fault \
                 counts as resident and no host fault is counted"
            ),
        ),
    };
    let source = DataSource {
        name: "btf:task_struct fault counters".into(),
        status: status.into(),
        detail,
        events: 0,
        collector: "tail".into(),
        ..Default::default()
    };
    (fields, source)
}

/// Fills the NUMA collector's lookup tables: each CPU's node and the page
/// frame ranges of each node.
pub(super) fn fill_topology_maps(
    ebpf: &mut Ebpf,
    topology: &Topology,
) -> Result<(), ProfilerError> {
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
    Ok(())
}

/// With `wanted` (`--bpf-stats`), has the kernel count and time every run
/// of every program; the descriptor keeps that on. The source says how it
/// went.
pub(super) fn enable_run_stats(wanted: bool) -> (Option<OwnedFd>, Option<DataSource>) {
    if !wanted {
        return (None, None);
    }
    let (fd, status, detail) = match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
        Ok(fd) => (
            Some(fd),
            "attached",
            "the kernel counts and times every run of every eBPF program \
                                 while profiling; sources[].runs and run_ns are ours"
                .to_string(),
        ),
        Err(e) => (
            None,
            "failed",
            format!(
                "BPF_ENABLE_STATS refused ({e}): program run times need Linux 5.8 \
                             or later and CAP_SYS_ADMIN; everything else is profiled"
            ),
        ),
    };
    let source = DataSource {
        name: "bpf_stats:run_time".into(),
        status: status.into(),
        detail,
        collector: "all".into(),
        ..Default::default()
    };
    (fd, Some(source))
}

/// The names of the verify and attach stages in `startup[]`.
pub(super) struct AttachStages {
    pub(super) verify: &'static str,
    pub(super) attach: &'static str,
}

/// Before the target is followed.
pub(super) const SETUP_STAGES: AttachStages = AttachStages {
    verify: "verify",
    attach: "attach",
};

/// Verifies and attaches every program planned as attached that `chosen`
/// picks, threads first (PROGRAMS order); one that fails is marked failed
/// with the reason.
pub(super) fn attach_programs(
    ebpf: &mut Ebpf,
    programs: &mut [ProgramState],
    chosen: impl Fn(&ProgramSpec) -> bool,
    stages: &mut Stages,
    names: &AttachStages,
) {
    for st in programs
        .iter_mut()
        .filter(|s| s.is_attached() && chosen(&s.spec))
    {
        let mut verified = None;
        if let Err(detail) = attach_one(ebpf, &st.spec, &mut verified) {
            st.status = ProgramStatus::Failed;
            st.detail = detail;
        }
        // A program that failed before attaching spent it all verifying.
        stages.end_at(names.verify, verified.unwrap_or_else(StagePoint::now));
        stages.end(names.attach);
    }
}

/// Loads (verifies) and attaches one program; `verified` is set once the
/// kernel accepted it.
fn attach_one(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
    verified: &mut Option<StagePoint>,
) -> Result<(), String> {
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
            *verified = Some(StagePoint::now());
            prog.attach(spec.system, spec.event)
                .map_err(attach_failed)?;
        }
        Some(Program::RawTracePoint(prog)) => {
            prog.load().map_err(refused)?;
            *verified = Some(StagePoint::now());
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        if !Path::new(KERNEL_BTF).exists() {
            bootscope_testkit::skip_test!("no {KERNEL_BTF} on this host");
        }
        bootscope_testkit::require_root!("to mount over the kernel's BTF");
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
    fn load_errors_keep_the_verifier_verdict() {
        let log = "the BPF_PROG_LOAD syscall returned Invalid argument (os error 22). Verifier output: 0: R1=ctx\n1: (85) call\n\n2: a\n3: b\n4: c\n5: d\ninfinite loop detected at insn 86\nverification time 4760 usec\n";
        let s = short_load_error(log);
        assert!(s.starts_with("the BPF_PROG_LOAD syscall returned Invalid argument"));
        assert!(s.contains("infinite loop detected at insn 86"));
        assert!(!s.contains("R1=ctx"));
        assert_eq!(short_load_error("plain"), "plain");
    }
}
