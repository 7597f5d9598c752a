//! Guest memory back-end: regions bound to host NUMA nodes, huge pages
//! (hugetlb memfd or transparent), and NUMA-aware parallel preallocation
//! through thread contexts.
//!
//! The flow, for the VMM:
//!
//! ```text
//! MemoryOptions ──MemoryPlan::new(&opts, &Topology::host()?)──▶ MemoryPlan   (all user errors here)
//! MemoryPlan + guest RAM ranges ──allocate()──▶ GuestMemoryBacking         (mapped, advised, mbind'ed)
//! GuestMemoryBacking ──preallocate()──▶ PreallocReport                     (all regions at once)
//! GuestMemoryBacking::guest_memory() ──▶ vm-memory GuestMemoryMmap          (KVM slots, loaders)
//! ```
//!
//! * A region is one guest NUMA node's memory (`--numa node=ID,...`), or
//!   all of it for plain `--memory`. Regions are laid out in guest node
//!   order over the RAM ranges the caller passes (its guest-physical layout,
//!   e.g. `bootparams::ram_ranges`), cut where a region ends; each piece is
//!   its own mapping, NUMA-bound with mbind(2) before it is touched.
//! * Preallocation runs one [`ThreadContext`] per region: a thread that pins
//!   itself to the region's host CPUs when it starts and then creates the
//!   region's `prealloc-n<node>-<i>` threads, which inherit that affinity
//!   and never set it. All regions' threads start before any is awaited.
//!   With `--sandbox`, create the contexts ([`PreallocContexts::new`])
//!   before the sandbox denies sched_setaffinity, and preallocate through
//!   them ([`preallocate_in`]) whenever convenient; a context created after
//!   the sandbox fails with [`MemoryError::SetAffinity`].
//! * The host is read from sysfs under an injectable [`SysfsRoot`], so
//!   multi-node placement is tested against fake trees.
//! * An initrd mapped over guest memory from its file
//!   (`loader::map_file_over_guest`, MAP_FIXED) replaces that range's
//!   mapping: it loses the region's mbind policy and any preallocated pages,
//!   which is what a page-cache-shared range should do.

mod backing;
mod context;
pub mod cpulist;
mod error;
mod plan;
mod prealloc;
mod spec;
mod sys;
mod topology;
mod verify;

pub use backing::{allocate, AnonMapping, BackedRegion, GuestMemoryBacking, Piece, ANON_ALIGN};
pub use context::ThreadContext;
pub use cpulist::{CpuSet, IdSet, NodeSet};
pub use error::{MemoryError, PlanError, SpecError, TopologyError};
pub use plan::{
    Binding, MemoryOptions, MemoryPlan, PageBacking, PreallocPlan, RegionPlan, ThpChoice,
    MAX_PREALLOC_THREADS,
};
pub use prealloc::{
    preallocate, preallocate_in, preallocate_with, ContextReport, MethodChoice, PopulateMethod,
    PreallocContexts, PreallocReport, RegionReport, ThreadReport, PLACEMENT_SAMPLES,
};
pub use spec::{human_size, parse_size, HugePageSize, NumaSpec, Policy};
pub use sys::{gettid, thread_affinity};
pub use topology::{host_page_size, HugePagePool, NodeTopology, SysfsRoot, ThpMode, Topology};
pub use verify::{
    mempolicy_at, own_last_cpu, page_nodes, stat_last_cpu, thread_placement, PagePlacement,
    ThreadPlacement,
};
