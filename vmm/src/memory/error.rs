//! One error enum per operation: parsing what the user typed, reading the
//! host's topology, checking a plan against it, and the memory operations.

use std::io;
use std::path::PathBuf;

use super::cpulist::{CpuSet, NodeSet};
use super::spec::{human_size, HugePageSize, Policy};

/// A size, list, policy or `--numa` option that does not parse.
pub use bootscope_model::memory_spec::SpecError;

/// Reading the host's sysfs failed: which file, and why.
pub use bootscope_model::numa::SysfsError as TopologyError;

fn on_nodes(nodes: &Option<NodeSet>) -> String {
    match nodes {
        Some(n) if n.len() == 1 => format!(" on host node {n}"),
        Some(n) => format!(" on host nodes {n}"),
        None => String::new(),
    }
}

fn boot_hint(size: &HugePageSize) -> &'static str {
    match size {
        HugePageSize::Size1G => {
            " (1 GiB pages often cannot be found once memory is fragmented: reserve them at boot with \
             hugepagesz=1G hugepages=N on the host kernel command line)"
        }
        HugePageSize::Size2M => "",
    }
}

/// The memory options do not fit together or do not fit this host.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Neither `--memory` nor `--numa`.
    #[error("no guest memory size: give --memory SIZE, or one --numa node=ID,memory=SIZE per guest node")]
    NoMemorySize,
    /// A size of zero.
    #[error("{what} is 0; give a positive size such as 512M")]
    ZeroSize { what: String },
    /// A size that is not a whole number of pages.
    #[error(
        "{what} ({size} bytes) is not a multiple of the {} page size; use {} or {}",
        human_size(*page_size), human_size(*round_down), human_size(*round_up)
    )]
    Unaligned {
        what: String,
        size: u64,
        page_size: u64,
        round_down: u64,
        round_up: u64,
    },
    /// `--memory` and the sum of the `--numa` sizes differ.
    #[error(
        "--memory {} does not match the --numa memory sizes ({parts} = {}); make them equal or drop --memory",
        human_size(*total), human_size(*sum)
    )]
    SizesDoNotAddUp { total: u64, sum: u64, parts: String },
    /// The sizes overflow.
    #[error("the --numa memory sizes add up to more than 16 EiB")]
    TooLarge,
    /// Two `--numa` options for one guest node.
    #[error("--numa node={node} is given twice; give one --numa option per guest node")]
    DuplicateGuestNode { node: u32 },
    /// A guest vCPU listed in two guest nodes.
    #[error("guest CPU {cpu} is listed in --numa node={first} and node={second}; a CPU belongs to one node")]
    GuestCpuInTwoNodes { cpu: u32, first: u32, second: u32 },
    /// A guest vCPU beyond `--vcpus`.
    #[error("--numa node={node} lists guest CPU {cpu} but the guest has {vcpus} vCPUs (0-{}); raise --vcpus or fix cpus=", vcpus.saturating_sub(1))]
    GuestCpuOutOfRange { node: u32, cpu: u32, vcpus: u32 },
    /// Absurdly many threads.
    #[error("--prealloc-threads {threads} is more than {max}; more threads than host CPUs ({cpus} here) do not help")]
    TooManyThreads {
        threads: usize,
        max: usize,
        cpus: usize,
    },
    /// `--prealloc-threads 0`.
    #[error("--prealloc-threads is 0; give at least 1 (up to one per host CPU of the node)")]
    ZeroThreads,
    /// An empty CPU list.
    #[error("{what} is empty; name at least one online CPU")]
    EmptyCpuList { what: String },
    /// CPUs that are absent or offline.
    #[error("{what} names CPUs {cpus} that do not exist or are offline on this host; online CPUs are {online}")]
    CpusNotOnline {
        what: String,
        cpus: CpuSet,
        online: CpuSet,
    },
    /// Host nodes that are absent or offline.
    #[error(
        "--numa node={guest_node}: host node {nodes} does not exist or is offline; online host nodes are {online} \
         (see /sys/devices/system/node/online)"
    )]
    HostNodeMissing {
        guest_node: u32,
        nodes: NodeSet,
        online: NodeSet,
    },
    /// `host-nodes=` on a kernel without NUMA.
    #[error("--numa node={guest_node}: host-nodes= needs a kernel with NUMA support, and this host has none; drop host-nodes=")]
    NumaUnavailable { guest_node: u32 },
    /// `policy=` without `host-nodes=`.
    #[error(
        "--numa node={guest_node}: policy={policy} needs host-nodes=LIST to say which host nodes"
    )]
    PolicyWithoutHostNodes { guest_node: u32, policy: Policy },
    /// `policy=preferred` with several nodes.
    #[error("--numa node={guest_node}: policy=preferred takes one host node, not {nodes}; use bind or interleave for several")]
    PreferredNeedsOneNode { guest_node: u32, nodes: NodeSet },
    /// Preallocation threads have nowhere to run.
    #[error(
        "--numa node={guest_node}: host node {nodes} has no online CPUs to run preallocation threads on; \
         give --prealloc-cpus LIST"
    )]
    NodesWithoutCpus { guest_node: u32, nodes: NodeSet },
    /// `--thp` together with `--hugepages`.
    #[error("--thp and --hugepages exclude each other (hugetlb pages are already huge); give one of them")]
    ThpWithHugepages,
    /// `--thp` on a host where THP is off.
    #[error("--thp: transparent huge pages are {mode} on this host ({}); enable them with `echo madvise > {}` or drop --thp", path.display(), path.display())]
    ThpUnavailable { mode: String, path: PathBuf },
    /// A page size the host kernel offers no pool for.
    #[error("--hugepages {size}: this host has no {size} huge page pool ({} is missing); use another size or drop --hugepages", path.display())]
    HugePagesUnsupported { size: HugePageSize, path: PathBuf },
    /// Not enough free huge pages.
    #[error(
        "--hugepages {size}: guest memory needs {needed} pages of {size}{} but only {free} are free; reserve {} more with \
         `echo {reserve_total} > {}`{}",
        on_nodes(nodes), needed - free, nr_path.display(), boot_hint(size)
    )]
    HugePagePoolShort {
        size: HugePageSize,
        /// The host nodes the pages must come from (None: any).
        nodes: Option<NodeSet>,
        needed: u64,
        free: u64,
        /// The value to write into `nr_path` (today's pool plus the shortfall).
        reserve_total: u64,
        nr_path: PathBuf,
    },
}

/// Allocating, binding, preallocating or inspecting guest memory failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The plan no longer fits the host (a huge page pool shrank).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The host's topology could not be read.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The guest-physical layout does not cover the plan.
    #[error("the guest RAM ranges add up to {layout} bytes but the memory plan holds {plan}; build both from the same size")]
    LayoutMismatch { layout: u64, plan: u64 },
    /// A guest range that does not start or end on a page boundary.
    #[error("guest RAM range {addr:#x}+{len:#x} is not aligned to the {} page size", human_size(*page_size))]
    LayoutUnaligned { addr: u64, len: u64, page_size: u64 },
    /// The guest ranges overlap or are out of order.
    #[error("guest RAM range {addr:#x}+{len:#x} overlaps or comes before the previous one; give the ranges sorted and apart")]
    LayoutUnsorted { addr: u64, len: u64 },
    /// vm-memory refused the regions.
    #[error("cannot build guest memory from the mapped regions: {0}")]
    Regions(#[source] vm_memory::GuestRegionCollectionError),
    /// memfd_create or ftruncate failed.
    #[error("cannot create the {} memory file for guest node {guest_node}: {source}", human_size(*bytes))]
    Memfd {
        guest_node: u32,
        bytes: u64,
        #[source]
        source: io::Error,
    },
    /// mmap failed.
    #[error("cannot map {} of guest memory for guest node {guest_node}: {source}", human_size(*bytes))]
    Map {
        guest_node: u32,
        bytes: u64,
        #[source]
        source: io::Error,
    },
    /// The kernel could not reserve the huge pages (the pool shrank after
    /// planning).
    #[error(
        "cannot reserve {pages} pages of {size} for guest node {guest_node}: {source}; the pool has fewer free pages: \
         raise /sys/kernel/mm/hugepages/{}/nr_hugepages by at least {pages} (`echo N > ...`)",
        size.sysfs_dir()
    )]
    HugePageReserve {
        guest_node: u32,
        size: HugePageSize,
        pages: u64,
        #[source]
        source: io::Error,
    },
    /// mbind(2) failed.
    #[error("cannot bind guest node {guest_node}'s memory to host nodes {nodes} (policy {policy}): {source}")]
    Mbind {
        guest_node: u32,
        nodes: NodeSet,
        policy: Policy,
        #[source]
        source: io::Error,
    },
    /// madvise(2) failed.
    #[error("madvise({advice}) on guest node {guest_node}'s memory failed: {source}")]
    Madvise {
        guest_node: u32,
        advice: &'static str,
        #[source]
        source: io::Error,
    },
    /// A thread context thread could not start.
    #[error("cannot start thread context {name}: {source}")]
    ContextStart {
        name: String,
        #[source]
        source: io::Error,
    },
    /// A thread context could not restrict itself to its CPUs.
    #[error(
        "thread context {name} cannot run on CPUs {cpus}: {source} (are they in this process's CPU set? \
         see `taskset -pc $PID` and the cgroup's cpuset.cpus)"
    )]
    SetAffinity {
        name: String,
        cpus: CpuSet,
        #[source]
        source: io::Error,
    },
    /// The context thread ended before answering.
    #[error("thread context {name} stopped before answering")]
    ContextGone { name: String },
    /// A thread could not be created through its context.
    #[error("thread context {context} cannot start thread {name}: {source}")]
    Spawn {
        context: String,
        name: String,
        #[source]
        source: io::Error,
    },
    /// A preallocation thread panicked.
    #[error("preallocation thread {name} panicked")]
    WorkerPanicked { name: String },
    /// Faulting pages in failed.
    #[error("preallocation thread {thread} cannot populate guest node {guest_node}'s memory: {source}{hint}")]
    Populate {
        thread: String,
        guest_node: u32,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    /// A system call used for inspection failed.
    #[error("{call} failed: {source}")]
    Syscall {
        call: &'static str,
        #[source]
        source: io::Error,
    },
}
