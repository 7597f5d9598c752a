//! The profile document: one definition, versioned, shared by the collector,
//! the exporters and the TUI. Documented in docs/profile-schema.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::mark::MarkSource;
pub use crate::samples::{ReasonCounts, Sample};
pub use crate::sites::{ExitSite, ExitSites, NpfRange, SiteSymbols};
pub use time_slots::{SlotTotals, TimeSlots};

mod time_slots;

/// Value of the `schema` field.
pub const PROFILE_SCHEMA_NAME: &str = "bootscope.profile";
/// Bump on any change of the document.
pub const PROFILE_SCHEMA_VERSION: u32 = 2;
/// The oldest version [`Profile::read`] still reads (what later versions
/// added is absent from it).
pub const PROFILE_SCHEMA_OLDEST: u32 = 1;

/// A whole profile (`bootscope profile --output FILE`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub schema: String,
    pub version: u32,
    pub target: Target,
    pub host: HostInfo,
    /// Nanoseconds the profile covers (profiling start to end).
    pub duration_ns: u64,
    /// Every data source tried, whether it worked, and what it counted.
    pub sources: Vec<DataSource>,
    pub exits: ExitProfile,
    pub page_faults: PageFaultProfile,
    pub threads: Vec<ThreadProfile>,
    pub numa: NumaProfile,
    /// Boot phase marks (t_ns since profiling start).
    pub marks: Vec<Mark>,
    /// Intervals between marks (same names as the VMM timeline's phases).
    pub phases: Vec<PhaseSpan>,
    /// Cumulative counters sampled over time, for counter tracks and rates.
    pub samples: Vec<Sample>,
    /// Events the kernel could not hand over (ring buffer full); never
    /// silently dropped.
    pub lost_events: u64,
    /// Events not counted because an in-kernel aggregation map was full.
    #[serde(default)]
    pub map_overflows: u64,
    /// What the profiler's own start-up took, stage by stage, before the
    /// target was followed (absent in profiles written before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup: Vec<StartupStage>,
    /// What the profiler's own reading cost while the target ran (absent
    /// in profiles written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector: Option<CollectorCost>,
    /// Exits and page faults per time slot, counted in the kernel (a VMM
    /// profiling itself with `run --initcalls`; absent otherwise and in
    /// profiles written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_slots: Option<TimeSlots>,
    /// What was read out of the traced VM's memory (`bootscope profile`
    /// of another VMM; absent otherwise and in older profiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_read: Option<crate::guest_read::GuestRead>,
    /// The systemd units of the disk image the profiled VMM booted (read
    /// after it exited), as a timeline's `units` (docs/guest.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<crate::units::UnitsDoc>,
    /// The page-fault tail of a restore (the tail collector; absent when
    /// it did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_tail: Option<crate::fault_tail::FaultTail>,
}

/// CPU time of the profiler's reading while the target ran: the thread that
/// reads the ring buffer, samples the counters and reads KVM's statistics,
/// plus the final read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectorCost {
    /// Samples taken (`samples[]`), the final one included.
    pub samples: u64,
    /// CPU time of taking them (every counting map read, KVM's statistics).
    pub sample_cpu_ns: u64,
    /// CPU time of all of the reading, samples included.
    pub cpu_ns: u64,
}

/// One stage of the profiler's start-up: its wall time, and the CPU time
/// of the thread that ran it (less than the wall time when it waited, for
/// the kernel or for a CPU other threads were using).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StartupStage {
    /// In order: `checks`, `topology`, `tracefs formats`, `loader`,
    /// `maps`, `seed`, `verify`, `attach`, `finish` (docs/profile-schema.md).
    pub stage: String,
    pub ns: u64,
    #[serde(default)]
    pub cpu_ns: u64,
}

/// What was profiled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// `command`, `pid` or `self` (bootscope's own VMM).
    pub kind: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    pub pid: u32,
    /// Process name (comm).
    pub name: String,
    /// Exit status of a launched command, if it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// When the target process ended (ns since profiling start), if it
    /// ended while being profiled: the profile then holds partial results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ns: Option<u64>,
    /// `SIGINT` or `SIGTERM` when profiling was interrupted by that signal
    /// (a launched command was then stopped): the profile covers the time
    /// up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
    /// Which VMM ran and the kernel command line it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm: Option<crate::vmm::VmmRun>,
    /// The kernel's page-fault counts of a launched command over its life,
    /// when it ended while profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<ProcessFaults>,
}

/// A process's page faults as the kernel counts them: every thread's
/// `min_flt` and `maj_flt` summed (what `/proc/PID/stat` fields 10 and 12
/// show while it lives; `wait4`'s rusage once it ended).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessFaults {
    pub minflt: u64,
    pub majflt: u64,
    /// Of those, the faults the command took after its fork while held
    /// before its exec, as the profiler started following it (its
    /// `/proc/PID/stat` at the release): the profile's own counts begin
    /// about there, so the like-for-like comparison with
    /// `page_faults.host_total` is `minflt + majflt - held`.
    #[serde(default)]
    pub held: u64,
}

/// The host it ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// `vmx`, `svm`, `pvm` or `none`.
    pub kvm: String,
    pub kernel_release: String,
    pub cpus: u32,
    pub numa_nodes: Vec<NumaNode>,
}

/// A host NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: Vec<u32>,
}

/// One data source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataSource {
    /// e.g. `tracepoint:kvm:kvm_exit`, `kvm_stats`, `procfs`, `vmm`.
    pub name: String,
    /// `attached`, `fallback`, `missing`, `failed` or `disabled`.
    pub status: String,
    /// Why, when not plainly attached.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Events it delivered.
    pub events: u64,
    /// The collector it feeds: `exits`, `faults`, `threads`, `numa`,
    /// `phases` (or `all`).
    #[serde(default)]
    pub collector: String,
    /// With `--bpf-stats`: times the kernel ran this eBPF program while
    /// profiling, for every process (the filter runs before anything is
    /// counted), and the time those runs took (the kernel's own
    /// accounting, BPF_ENABLE_STATS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_ns: Option<u64>,
    /// With `--bpf-stats`: the instructions the kernel's verifier processed
    /// to accept this program (its share of the start-up), where the
    /// kernel reports it (Linux 5.16 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_insns: Option<u32>,
}

pub use crate::hist::HistBucket;

/// Exits of one reason.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitReasonStat {
    /// Human name (`io`, `npf`, `EPT_VIOLATION`, `pio_write 0x3f8`, ...).
    pub reason: String,
    /// Raw code as the source reports it.
    pub code: u64,
    pub count: u64,
    /// Sum of exit latencies (exit to next entry), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_total_ns: Option<u64>,
    /// Latency histogram, when measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_hist: Vec<HistBucket>,
}

/// Exits by reason, vCPU and phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitProfile {
    /// The source the reasons come from (`tracepoint:kvm:kvm_exit`, or the
    /// PVM fallback `tracepoint:kvm:kvm_userspace_exit+kvm_pio+...`).
    pub source: String,
    /// Reason namespace: `svm`, `vmx`, `userspace` (fallback) or `unknown`.
    pub isa: String,
    pub total: u64,
    pub by_reason: Vec<ExitReasonStat>,
    pub by_vcpu: Vec<VcpuExits>,
    pub by_phase: Vec<PhaseExits>,
    /// KVM's own exit count for the same VM(s), for cross-checking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_stats_exits: Option<u64>,
    /// Port I/O the guest did (`tracepoint:kvm:kvm_pio`), by port,
    /// direction and size. On PVM these are most of the exits.
    #[serde(default)]
    pub pio: Vec<PioStat>,
    /// Writes to the boot marker ports (0x80, 0xf4), by port and value,
    /// counted exactly in the kernel.
    #[serde(default)]
    pub marker_writes: Vec<MarkerWrites>,
    /// MMIO accesses KVM handed to the VMM (`tracepoint:kvm:kvm_mmio`).
    #[serde(default)]
    pub mmio: Vec<MmioStat>,
    /// MSR accesses KVM handled (`tracepoint:kvm:kvm_msr`).
    #[serde(default)]
    pub msr: Vec<MsrStat>,
    /// CPUID instructions KVM handled (`tracepoint:kvm:kvm_cpuid`).
    #[serde(default)]
    pub cpuid: Vec<CpuidStat>,
    /// Guest instructions run through KVM's emulator
    /// (`tracepoint:kvm:kvm_emulate_insn`); on PVM, every instruction of a
    /// non-PVM guest.
    #[serde(default)]
    pub emulated_instructions: u64,
    /// Of those, instructions the emulator failed on.
    #[serde(default)]
    pub emulation_failures: u64,
    /// Exits by the guest code that made them (`--exit-sites`); absent
    /// when not collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sites: Option<ExitSites>,
}

/// Port I/O to one port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PioStat {
    pub port: u32,
    /// `read` (IN) or `write` (OUT).
    pub direction: String,
    /// Access size in bytes.
    pub size: u32,
    pub count: u64,
}

/// Writes of one value to one marker port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerWrites {
    pub port: u32,
    pub value: u32,
    pub count: u64,
}

/// MMIO accesses to one guest-physical address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmioStat {
    pub gpa: u64,
    /// `read`, `write` or `unsatisfied-read`.
    pub kind: String,
    pub count: u64,
    /// What is at the address (`virtio-blk0 notify`, `boot timer
    /// (MMIO)`), from the layout of bootscope's own VMM; absent for
    /// other VMMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// Accesses to one MSR.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsrStat {
    pub msr: u32,
    /// `read` or `write`.
    pub direction: String,
    pub count: u64,
    /// Of those, accesses that raised #GP in the guest.
    pub faults: u64,
}

/// CPUID executions of one leaf.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidStat {
    pub function: u32,
    pub index: u32,
    pub count: u64,
}

/// Exits of one vCPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VcpuExits {
    pub vcpu: u32,
    #[serde(default)]
    pub tid: u32,
    pub by_reason: BTreeMap<String, u64>,
}

/// Exits during one boot phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseExits {
    pub phase: String,
    pub by_reason: BTreeMap<String, u64>,
}

/// Page faults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PageFaultProfile {
    /// Guest-side faults (KVM MMU: NPF/EPT violations).
    pub guest_total: u64,
    /// Host-side faults of the target's threads.
    pub host_total: u64,
    pub by_thread: Vec<ThreadFaults>,
    pub by_phase: Vec<PhaseFaults>,
    /// Host fault latency histogram, when measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_latency_hist: Vec<HistBucket>,
    /// The tracepoint `guest_total` counts: `tracepoint:kvm:kvm_page_fault`
    /// (VMX/SVM), else `tracepoint:kvmmmu:kvm_mmu_spte_requested`, or empty
    /// when neither fired.
    #[serde(default)]
    pub guest_source: String,
    /// Guest accesses to emulated MMIO that faulted
    /// (`tracepoint:kvmmmu:handle_mmio_page_fault`).
    #[serde(default)]
    pub guest_mmio: u64,
    /// `host_total` split by the mode the fault was taken in.
    #[serde(default)]
    pub host_user: u64,
    #[serde(default)]
    pub host_kernel: u64,
}

/// Faults of one thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadFaults {
    pub tid: u32,
    pub name: String,
    pub guest: u64,
    pub host: u64,
}

/// Faults in one phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseFaults {
    pub phase: String,
    pub guest: u64,
    pub host: u64,
}

/// Time a thread spent on one CPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuResidency {
    pub cpu: u32,
    pub node: u32,
    pub run_ns: u64,
}

/// One thread of the target, short-lived ones included.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadProfile {
    pub tid: u32,
    pub name: String,
    /// `vcpu`, `prealloc`, `main` or `other`, from the name.
    pub role: String,
    /// First and last time seen (ns since profiling start).
    pub start_ns: u64,
    pub end_ns: u64,
    pub cpus: Vec<CpuResidency>,
    /// Nodes of the CPUs it ran on.
    pub nodes: Vec<u32>,
    /// Pages it allocated, and how many landed on the node of the CPU that
    /// allocated them.
    pub pages_allocated: u64,
    pub pages_local: u64,
    pub pages_remote: u64,
    /// Its process.
    #[serde(default)]
    pub tgid: u32,
    /// Total run time over all CPUs.
    #[serde(default)]
    pub run_ns: u64,
    /// Bytes it allocated (`pages_allocated` counts base pages, so a 2 MiB
    /// huge page counts 512 pages and 2 MiB here).
    #[serde(default)]
    pub bytes_allocated: u64,
    /// Where its pages landed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pages_by_node: Vec<NodePages>,
    /// Its exit code, if it ended while profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// How long it waited for a host CPU (`--collect sched`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runqueue_wait: Option<RunqueueWait>,
}

/// Time a thread was runnable but not running: woken or preempted, waiting
/// in a run queue for a host CPU (the second field of
/// `/proc/PID/task/TID/schedstat`, from profiling start on).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunqueueWait {
    pub total_ns: u64,
    /// Waits (each from a queueing to the switch that ran the thread).
    pub count: u64,
    /// The waits, log2 buckets.
    pub hist: Vec<HistBucket>,
    /// The same, by the boot phase its process was in when each wait ended.
    pub by_phase: Vec<PhaseWait>,
}

/// A thread's run-queue waits in one boot phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseWait {
    pub phase: String,
    pub total_ns: u64,
    pub count: u64,
    pub hist: Vec<HistBucket>,
}

/// Pages on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePages {
    pub node: u32,
    pub pages: u64,
}

/// Where the target's pages landed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NumaProfile {
    pub pages_local: u64,
    pub pages_remote: u64,
    pub by_node: Vec<NodeLocality>,
    /// `tracepoint:kmem:mm_page_alloc` when it was attached.
    #[serde(default)]
    pub source: String,
    /// Base page size in bytes.
    #[serde(default)]
    pub page_size: u64,
    /// All base pages the target allocated, and their bytes.
    #[serde(default)]
    pub pages_allocated: u64,
    #[serde(default)]
    pub bytes_allocated: u64,
    /// Pages whose node (or whose allocating CPU's node) is unknown.
    #[serde(default)]
    pub pages_unknown_node: u64,
    /// How page frames were mapped to nodes (`sysfs memory blocks`,
    /// `zoneinfo`, `single node`).
    #[serde(default)]
    pub pfn_map_source: String,
}

/// Pages that landed on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeLocality {
    pub node: u32,
    pub pages_local: u64,
    pub pages_remote: u64,
}

/// A boot phase mark.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    pub name: String,
    /// `vmm`, `debug_port`, `boot_time_port`, `boot_timer`, `serial`.
    pub source: MarkSource,
    pub t_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// The process the mark came from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgid: Option<u32>,
    /// A marker-port write's guest RIP, where the exits collector saw the
    /// I/O exit (VMX/SVM hosts): whether the kernel or the code before it
    /// wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_rip: Option<u64>,
}

/// The prefix of the phases made of a systemd guest's units (`unit:
/// NAME`, nested in `userspace`).
pub const UNIT_PHASE_PREFIX: &str = "unit: ";

/// A boot phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSpan {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Errors reading a profile file.
#[derive(Debug, thiserror::Error)]
pub enum ProfileReadError {
    /// The file cannot be opened, or is beyond the input limits
    /// ([`crate::input`]).
    #[error("profile: {0}")]
    Limits(#[from] crate::input::InputError),
    /// The file cannot be read.
    #[error("cannot read profile {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Not JSON, or not a profile.
    #[error("{path} is not a bootscope profile: {detail}")]
    Malformed { path: String, detail: String },
    /// A profile of another version.
    #[error("{path} is a version {found} profile; this bootscope reads versions {PROFILE_SCHEMA_OLDEST} to {PROFILE_SCHEMA_VERSION}")]
    Version { path: String, found: u64 },
}

/// Why a JSON document is not a profile this bootscope reads
/// ([`Profile::parse`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// Not a profile at all.
    #[error("its \"schema\" field is {found}, not \"{PROFILE_SCHEMA_NAME}\"")]
    NotAProfile { found: String },
    /// A profile of another version.
    #[error("it is a version {found} profile; this bootscope reads versions {PROFILE_SCHEMA_OLDEST} to {PROFILE_SCHEMA_VERSION}")]
    Version { found: u64 },
    /// A field missing, or of the wrong type.
    #[error("a field is missing or has the wrong type: {0}")]
    Field(String),
}

impl Profile {
    /// The sources the kernel timed (`--bpf-stats`): each with its runs
    /// and run time.
    pub fn timed_sources(&self) -> impl Iterator<Item = (&DataSource, u64, u64)> {
        self.sources
            .iter()
            .filter_map(|s| Some((s, s.runs?, s.run_ns?)))
    }

    /// An empty profile with the schema fields set.
    pub fn new() -> Self {
        Self {
            schema: PROFILE_SCHEMA_NAME.into(),
            version: PROFILE_SCHEMA_VERSION,
            ..Default::default()
        }
    }

    /// Reads and checks a profile file, as a stream
    /// ([`crate::input::document`]): its `schema` and `version` are checked
    /// before the rest is read (or after, when they are not among its
    /// first fields).
    pub fn read(path: &std::path::Path) -> Result<Self, ProfileReadError> {
        use crate::input::document::{JsonStream, StreamError};
        let p = path.display().to_string();
        let malformed = |detail| ProfileReadError::Malformed {
            path: p.clone(),
            detail,
        };
        let as_read_error = |e: ProfileError| match e {
            ProfileError::NotAProfile { .. } => malformed(format!(
                "its \"schema\" field is not \"{PROFILE_SCHEMA_NAME}\""
            )),
            ProfileError::Version { found } => ProfileReadError::Version {
                path: p.clone(),
                found,
            },
            ProfileError::Field(detail) => malformed(detail),
        };
        let from_document = |e: StreamError| match e {
            StreamError::Input(e) => ProfileReadError::Limits(e),
            other => malformed(other.detail()),
        };
        let doc = JsonStream::open(path).map_err(from_document)?;
        Self::check_head(&doc).map_err(as_read_error)?;
        let profile: Profile = doc.parse().map_err(from_document)?;
        profile.check_schema().map_err(as_read_error)?;
        Ok(profile)
    }

    /// Checks the `schema` and `version` fields a document's head has
    /// (those it does not have are checked once it is read,
    /// [`Profile::check_schema`]).
    pub fn check_head(doc: &crate::input::document::JsonStream) -> Result<(), ProfileError> {
        use crate::document::{kind_of, DocKind, DocumentError};
        let whole = doc.head_is_whole();
        // A field the head did not reach is taken as right here.
        let schema = serde_json::Value::from(PROFILE_SCHEMA_NAME);
        let version = serde_json::Value::from(PROFILE_SCHEMA_VERSION);
        let null = serde_json::Value::Null;
        let absent = |right| if whole { &null } else { right };
        let schema_v = doc.schema_value().unwrap_or(absent(&schema));
        let version_v = doc.version_value().unwrap_or(absent(&version));
        match kind_of(schema_v, version_v, &[DocKind::Profile]) {
            Ok(_) => Ok(()),
            Err(DocumentError::Schema { .. }) => Err(ProfileError::NotAProfile {
                found: doc
                    .schema_value()
                    .map_or_else(|| "missing".into(), ToString::to_string),
            }),
            Err(_) => Err(ProfileError::Version {
                found: doc.version().unwrap_or(0),
            }),
        }
    }

    /// Checks the `schema` and `version` of a profile read.
    pub fn check_schema(&self) -> Result<(), ProfileError> {
        if self.schema != PROFILE_SCHEMA_NAME {
            return Err(ProfileError::NotAProfile {
                found: format!("{:?}", self.schema),
            });
        }
        if !Self::reads_version(u64::from(self.version)) {
            return Err(ProfileError::Version {
                found: u64::from(self.version),
            });
        }
        Ok(())
    }

    /// Whether this bootscope reads profiles of version `v`.
    pub fn reads_version(v: u64) -> bool {
        (u64::from(PROFILE_SCHEMA_OLDEST)..=u64::from(PROFILE_SCHEMA_VERSION)).contains(&v)
    }

    /// Checks a JSON document's `schema` and `version` and reads it as a
    /// profile.
    pub fn parse(doc: &serde_json::Value) -> Result<Self, ProfileError> {
        let schema = doc.get("schema");
        if schema.and_then(|s| s.as_str()) != Some(PROFILE_SCHEMA_NAME) {
            return Err(ProfileError::NotAProfile {
                found: schema.map_or_else(|| "missing".into(), ToString::to_string),
            });
        }
        let found = doc.get("version").and_then(|s| s.as_u64()).unwrap_or(0);
        if !(u64::from(PROFILE_SCHEMA_OLDEST)..=u64::from(PROFILE_SCHEMA_VERSION)).contains(&found)
        {
            return Err(ProfileError::Version { found });
        }
        Self::deserialize(doc).map_err(|e| ProfileError::Field(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_checks_schema_version_and_fields() {
        let doc = serde_json::to_value(Profile::new()).unwrap();
        assert_eq!(Profile::parse(&doc).unwrap(), Profile::new());
        let mut v1 = doc.clone();
        v1["version"] = 1.into();
        assert_eq!(Profile::parse(&v1).unwrap().version, 1);
        let mut v3 = doc.clone();
        v3["version"] = 3.into();
        assert_eq!(
            Profile::parse(&v3).unwrap_err(),
            ProfileError::Version { found: 3 }
        );
        let mut other = doc.clone();
        other["schema"] = "bootscope.timeline".into();
        assert!(matches!(
            Profile::parse(&other),
            Err(ProfileError::NotAProfile { .. })
        ));
        let mut bad = doc;
        bad["exits"]["total"] = "many".into();
        assert!(matches!(Profile::parse(&bad), Err(ProfileError::Field(_))));
    }

    #[test]
    fn time_slots_give_an_interval_its_counts_partial_slots_pro_rata() {
        let slots = TimeSlots {
            slot_ns: 100,
            start_ns: 0,
            exits: [
                ("io".to_string(), vec![[0, 4], [1, 2], [5, 10]]),
                ("npf".to_string(), vec![[1, 1]]),
            ]
            .into(),
            guest_faults: vec![[1, 1]],
            host_faults: vec![[5, 3]],
            ..TimeSlots::default()
        };
        let all = slots.between(0, 1_000);
        assert_eq!(all.exits, 17);
        assert_eq!(all.exits_by_reason["io"], 16);
        assert_eq!((all.guest_faults, all.host_faults), (1, 3));
        // Half of slot 0 (2) and all of slot 1 (2 io, 1 npf).
        let t = slots.between(50, 200);
        assert_eq!(t.exits_by_reason["io"], 4);
        assert_eq!(t.exits, 5);
        // Inside one slot: its share.
        assert_eq!(slots.between(500, 550).exits_by_reason["io"], 5);
        // Nothing there, or an empty interval: no reasons at all.
        assert_eq!(slots.between(200, 500), SlotTotals::default());
        assert_eq!(slots.between(60, 60), SlotTotals::default());
        // Slots that start before the profile's zero: slot 0 is -50..50.
        let shifted = TimeSlots {
            start_ns: -50,
            ..slots.clone()
        };
        assert_eq!(shifted.between(0, 50).exits_by_reason["io"], 2);
        assert_eq!(shifted.between(0, 100).exits_by_reason["io"], 3);
    }
}
