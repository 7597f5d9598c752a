//! What the collector is asked to do: the target, the collectors, and the
//! settings of a profile.

use std::time::{Duration, Instant};

use crate::bpf::CollectorKind;
use crate::kvm_stats;

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
    /// Every process that runs a KVM guest, each from its first KVM event
    /// (or from [`Collector::follow`]) on, read apart with
    /// [`Collector::snapshot_each`] (`bootscope exporter`).
    AnyVm,
}

impl TargetSpec {
    /// Whether the target cannot end while profiled (this process, or
    /// every VM).
    pub(super) fn never_ends(self) -> bool {
        matches!(self, TargetSpec::CurrentProcess | TargetSpec::AnyVm)
    }

    pub(super) fn kvm_stats_reader(self) -> kvm_stats::KvmStatsReader {
        if self == TargetSpec::CurrentProcess {
            kvm_stats::KvmStatsReader::stats_fds_only()
        } else {
            kvm_stats::KvmStatsReader::new()
        }
    }
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
    /// Run-queue waits of the target's threads (three programs on every
    /// wake-up and context switch of the host): only when named.
    pub sched: bool,
    /// The page-fault tail of a restore (bpf/tail.bpf.c): on by default
    /// only when the command is a restore (the CLI decides), else only
    /// when named.
    pub tail: bool,
    /// With `tail`: its guest faults also counted over the VM's life
    /// (`tail-total`, for cross-checks with KVM's statistics; a program
    /// on every guest fault after the window too): only when named.
    pub tail_total: bool,
}

impl CollectorSet {
    /// Every collector (`--collect all`).
    pub const ALL: Self = Self {
        sched: true,
        tail: true,
        tail_total: true,
        ..Self::DEFAULT
    };

    /// Without `--collect`: every collector but `sched`, which runs on
    /// every scheduler event of the host and is attached only when asked
    /// for.
    pub const DEFAULT: Self = Self {
        exits: true,
        exit_latency: true,
        faults: true,
        threads: true,
        numa: true,
        phases: true,
        sched: false,
        tail: false,
        tail_total: false,
    };

    /// The collectors' names, as `--collect` takes them: `exit-counts` is
    /// the exits collector without the exits' latency, `tail-total` the
    /// tail with its count over the VM's life.
    pub const NAMES: [&'static str; 9] = [
        "exits",
        "exit-counts",
        "faults",
        "threads",
        "numa",
        "phases",
        "sched",
        "tail",
        "tail-total",
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
            sched: false,
            tail: false,
            tail_total: false,
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
                "sched" => set.sched = true,
                "tail" => set.tail = true,
                "tail-total" => {
                    set.tail = true;
                    set.tail_total = true;
                }
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

    pub(super) fn has(&self, k: CollectorKind) -> bool {
        match k {
            CollectorKind::Exits => self.exits,
            CollectorKind::ExitLatency => self.exits && self.exit_latency,
            CollectorKind::Faults => self.faults,
            CollectorKind::Threads => self.threads,
            CollectorKind::Numa => self.numa,
            CollectorKind::Phases => self.phases,
            CollectorKind::Sched => self.sched,
            CollectorKind::Tail => self.tail,
            CollectorKind::TailTotal => self.tail && self.tail_total,
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
    /// Count exits by guest RIP too (`exits.sites`): the exits programs
    /// then read the exit's RIP and keep a count per site. Off, they are
    /// loaded without that code.
    pub exit_sites: bool,
    /// Attach the guest programs (those that fire only while a vCPU runs:
    /// KVM's exits and their detail, guest faults, marker ports) later:
    /// `start` attaches the others, [`Collector::attach_guest_programs`]
    /// starts these on a thread of their own, and
    /// [`Collector::wait_guest_programs`] waits for them. A VMM profiling
    /// itself waits just before its first `KVM_RUN`, so its set-up runs
    /// beside their attach and no exit is missed.
    pub defer_guest_programs: bool,
    /// Count every exit and page fault per time slot of this width too
    /// (`Profile::time_slots`; `run --initcalls` asks for 100 µs): any
    /// interval of the profile then gets its own counts. None (the
    /// default): the programs are loaded without that code and the map is
    /// one entry big.
    pub time_slots: Option<Duration>,
    /// The guest's serial port whose lines are streamed with the times of
    /// their first and last bytes ([`Collector::serial_lines`]): what puts
    /// the guest kernel's printk clock on the profile's. None (the
    /// default): not streamed.
    pub serial_port: Option<u16>,
    /// The guest's memory in bytes, when known (a VMM profiling itself
    /// knows it). The fault-tail collector's set of distinct guest pages
    /// and its per-region counts are then made for that guest instead of
    /// for the largest one: the kernel zeroes a hash map's buckets when it
    /// creates it. Pages beyond the set's room are counted in the
    /// profile's `fault_tail.working_set.uncounted`.
    pub guest_memory_bytes: Option<u64>,
}

impl CollectorConfig {
    /// Defaults for a target: every collector but `sched`, 200 ms samples, 256 KiB ring
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
            collectors: CollectorSet::DEFAULT,
            origin: None,
            exit_codes,
            expected_threads: None,
            bpf_stats: false,
            exit_sites: false,
            defer_guest_programs: false,
            time_slots: None,
            serial_port: None,
            guest_memory_bytes: None,
        }
    }
}
