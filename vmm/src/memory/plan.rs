//! Turning the memory options into a checked plan: one region per guest
//! NUMA node, each with its page backing, host binding and preallocation
//! placement. Every user mistake is found here, before anything is mapped.

use std::collections::BTreeMap;

use serde::Serialize;

use super::cpulist::{CpuSet, NodeSet};
use super::spec::{human_size, HugePageSize, NumaSpec, Policy};
use super::topology::{hugepage_file, SysfsRoot, ThpMode, Topology};
use super::PlanError;

/// Most preallocation threads per region (a guard against typos; one per
/// host CPU of the region's nodes is the most that helps).
pub const MAX_PREALLOC_THREADS: usize = 1024;

/// The memory options as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryOptions {
    /// `--memory SIZE` (bytes).
    pub total: Option<u64>,
    /// `--numa ...`, one per guest node.
    pub numa: Vec<NumaSpec>,
    /// `--prealloc`.
    pub prealloc: bool,
    /// `--prealloc-threads N`: threads per region.
    pub prealloc_threads: usize,
    /// `--prealloc-cpus LIST`: host CPUs for every region's preallocation
    /// (instead of the CPUs of its host nodes).
    pub prealloc_cpus: Option<CpuSet>,
    /// `--hugepages 2M|1G`.
    pub hugepages: Option<HugePageSize>,
    /// `--thp` / `--no-thp` (default: advise where the host allows it).
    pub thp: ThpChoice,
}

/// Whether anonymous guest memory is advised for transparent huge pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThpChoice {
    /// Advise when the host's THP mode is `always` or `madvise` (QEMU does
    /// the same for its RAM); base pages otherwise.
    #[default]
    Auto,
    /// `--thp`: advise, and fail when the host has THP off.
    Required,
    /// `--no-thp`: base pages only.
    Off,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        Self {
            total: None,
            numa: Vec::new(),
            prealloc: false,
            prealloc_threads: 1,
            prealloc_cpus: None,
            hugepages: None,
            thp: ThpChoice::Auto,
        }
    }
}

/// What kind of pages back guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PageBacking {
    /// Anonymous memory with the base page size.
    Small,
    /// Anonymous memory advised with MADV_HUGEPAGE.
    Transparent,
    /// A hugetlb memfd of this page size.
    HugeTlb(HugePageSize),
}

impl PageBacking {
    /// The page size that sizes must be a multiple of and that one touch
    /// faults in.
    pub fn page_size(self, base: u64) -> u64 {
        match self {
            PageBacking::HugeTlb(size) => size.bytes(),
            PageBacking::Small | PageBacking::Transparent => base,
        }
    }
}

/// Where a region's pages may live on the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Binding {
    /// The mbind(2) policy.
    pub policy: Policy,
    /// The host nodes.
    pub nodes: NodeSet,
}

/// How a region is preallocated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PreallocPlan {
    /// Threads that fault the region in together.
    pub threads: usize,
    /// Host CPUs the region's thread context (and so its threads) run on;
    /// None keeps the process's own CPU set.
    pub cpus: Option<CpuSet>,
}

/// One guest NUMA node's memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegionPlan {
    /// Guest node number (0 for plain `--memory`).
    pub guest_node: u32,
    /// Guest vCPUs of the node (empty for plain `--memory`).
    pub guest_cpus: CpuSet,
    /// Bytes.
    pub size: u64,
    /// Host placement; None leaves it to the kernel.
    pub binding: Option<Binding>,
    /// Preallocation; None when `--prealloc` is off.
    pub prealloc: Option<PreallocPlan>,
}

impl RegionPlan {
    /// Name of the region's thread context thread.
    pub fn context_name(&self) -> String {
        format!("memctx-n{}", self.guest_node)
    }

    /// Name of the region's preallocation thread `index`.
    pub fn worker_name(&self, index: usize) -> String {
        bootscope_model::threads::prealloc_thread_name(self.guest_node, index)
    }
}

/// A checked memory configuration: regions in guest-physical order (by
/// guest node number), laid out one after another from guest RAM offset 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryPlan {
    regions: Vec<RegionPlan>,
    backing: PageBacking,
    page_size: u64,
    #[serde(skip)]
    cpu_nodes: BTreeMap<u32, u32>,
    #[serde(skip)]
    root: SysfsRoot,
}

fn check_aligned(what: String, size: u64, page_size: u64) -> Result<(), PlanError> {
    if size == 0 {
        return Err(PlanError::ZeroSize { what });
    }
    if size % page_size != 0 {
        let round_down = size / page_size * page_size;
        return Err(PlanError::Unaligned {
            what,
            size,
            page_size,
            round_down,
            round_up: round_down.saturating_add(page_size),
        });
    }
    Ok(())
}

/// The preallocation threads' count and CPU list: positive, at most
/// [`MAX_PREALLOC_THREADS`], CPUs that are online.
fn check_prealloc_options(opts: &MemoryOptions, topo: &Topology) -> Result<(), PlanError> {
    if opts.prealloc_threads == 0 {
        return Err(PlanError::ZeroThreads);
    }
    if opts.prealloc_threads > MAX_PREALLOC_THREADS {
        return Err(PlanError::TooManyThreads {
            threads: opts.prealloc_threads,
            max: MAX_PREALLOC_THREADS,
            cpus: topo.online_cpus.len(),
        });
    }
    if let Some(cpus) = &opts.prealloc_cpus {
        if cpus.is_empty() {
            return Err(PlanError::EmptyCpuList {
                what: "--prealloc-cpus".into(),
            });
        }
        let missing = cpus.difference(&topo.online_cpus);
        if !missing.is_empty() {
            return Err(PlanError::CpusNotOnline {
                what: "--prealloc-cpus".into(),
                cpus: missing,
                online: topo.online_cpus.clone(),
            });
        }
    }
    Ok(())
}

/// The pages that back guest memory: `--hugepages`' size when the host
/// has it, transparent huge pages when asked for or when the host has them
/// on, else small pages.
fn page_backing(opts: &MemoryOptions, topo: &Topology) -> Result<PageBacking, PlanError> {
    let thp_on_host = !matches!(topo.thp, ThpMode::Never | ThpMode::Unsupported);
    Ok(match (opts.hugepages, opts.thp) {
        (Some(_), ThpChoice::Required) => return Err(PlanError::ThpWithHugepages),
        (Some(size), _) => {
            if !topo.hugepages.contains_key(&size) {
                return Err(PlanError::HugePagesUnsupported {
                    size,
                    path: hugepage_file(&topo.root, size, None, "nr_hugepages"),
                });
            }
            PageBacking::HugeTlb(size)
        }
        (None, ThpChoice::Required) => {
            if !thp_on_host {
                return Err(PlanError::ThpUnavailable {
                    mode: topo.thp.to_string(),
                    path: topo.root.path("kernel/mm/transparent_hugepage/enabled"),
                });
            }
            PageBacking::Transparent
        }
        (None, ThpChoice::Auto) if thp_on_host => PageBacking::Transparent,
        (None, _) => PageBacking::Small,
    })
}

/// Region `r`'s preallocation: the threads, on `--prealloc-cpus`, else on
/// the CPUs of the host nodes the region is bound to (which must have
/// some), else anywhere.
fn prealloc_plan(
    opts: &MemoryOptions,
    topo: &Topology,
    r: &RegionPlan,
) -> Result<PreallocPlan, PlanError> {
    let cpus = match (&opts.prealloc_cpus, &r.binding) {
        (Some(cpus), _) => Some(cpus.clone()),
        (None, Some(b)) => {
            let cpus = topo.cpus_of(&b.nodes);
            if cpus.is_empty() {
                return Err(PlanError::NodesWithoutCpus {
                    guest_node: r.guest_node,
                    nodes: b.nodes.clone(),
                });
            }
            Some(cpus)
        }
        (None, None) => None,
    };
    Ok(PreallocPlan {
        threads: opts.prealloc_threads,
        cpus,
    })
}

impl MemoryPlan {
    /// Checks `opts` against the host `topo` and builds the plan.
    pub fn new(opts: &MemoryOptions, topo: &Topology) -> Result<Self, PlanError> {
        check_prealloc_options(opts, topo)?;
        let backing = page_backing(opts, topo)?;
        let page_size = backing.page_size(topo.page_size);

        let mut regions = if opts.numa.is_empty() {
            let total = opts.total.ok_or(PlanError::NoMemorySize)?;
            check_aligned(format!("--memory {}", human_size(total)), total, page_size)?;
            vec![RegionPlan {
                guest_node: 0,
                guest_cpus: CpuSet::new(),
                size: total,
                binding: None,
                prealloc: None,
            }]
        } else {
            Self::numa_regions(opts, topo, page_size)?
        };

        if opts.prealloc {
            for r in &mut regions {
                r.prealloc = Some(prealloc_plan(opts, topo, r)?);
            }
        }

        let plan = MemoryPlan {
            regions,
            backing,
            page_size,
            cpu_nodes: topo.cpu_nodes(),
            root: topo.root.clone(),
        };
        plan.check_hugepage_pools(topo)?;
        Ok(plan)
    }

    fn numa_regions(
        opts: &MemoryOptions,
        topo: &Topology,
        page_size: u64,
    ) -> Result<Vec<RegionPlan>, PlanError> {
        let mut specs: Vec<&NumaSpec> = opts.numa.iter().collect();
        specs.sort_by_key(|s| s.node);
        for w in specs.windows(2) {
            if w[0].node == w[1].node {
                return Err(PlanError::DuplicateGuestNode { node: w[0].node });
            }
        }
        let mut cpu_owner: BTreeMap<u32, u32> = BTreeMap::new();
        let mut sum: u64 = 0;
        let mut regions = Vec::new();
        for s in specs {
            check_aligned(
                format!("--numa node={} memory={}", s.node, human_size(s.memory)),
                s.memory,
                page_size,
            )?;
            sum = sum.checked_add(s.memory).ok_or(PlanError::TooLarge)?;
            for cpu in s.cpus.iter() {
                if let Some(first) = cpu_owner.insert(cpu, s.node) {
                    return Err(PlanError::GuestCpuInTwoNodes {
                        cpu,
                        first,
                        second: s.node,
                    });
                }
            }
            let binding = match (&s.host_nodes, s.policy) {
                (None, None) => None,
                (None, Some(policy)) => {
                    return Err(PlanError::PolicyWithoutHostNodes {
                        guest_node: s.node,
                        policy,
                    })
                }
                (Some(nodes), policy) => {
                    if !topo.numa {
                        return Err(PlanError::NumaUnavailable { guest_node: s.node });
                    }
                    let missing = nodes.difference(&topo.node_ids());
                    if !missing.is_empty() {
                        return Err(PlanError::HostNodeMissing {
                            guest_node: s.node,
                            nodes: missing,
                            online: topo.node_ids(),
                        });
                    }
                    let policy = policy.unwrap_or(Policy::Bind);
                    if policy == Policy::Preferred && nodes.len() > 1 {
                        return Err(PlanError::PreferredNeedsOneNode {
                            guest_node: s.node,
                            nodes: nodes.clone(),
                        });
                    }
                    Some(Binding {
                        policy,
                        nodes: nodes.clone(),
                    })
                }
            };
            regions.push(RegionPlan {
                guest_node: s.node,
                guest_cpus: s.cpus.clone(),
                size: s.memory,
                binding,
                prealloc: None,
            });
        }
        if let Some(total) = opts.total {
            if total != sum {
                let parts = regions
                    .iter()
                    .map(|r| human_size(r.size))
                    .collect::<Vec<_>>()
                    .join(" + ");
                return Err(PlanError::SizesDoNotAddUp { total, sum, parts });
            }
        }
        Ok(regions)
    }

    /// The regions in guest-physical order.
    pub fn regions(&self) -> &[RegionPlan] {
        &self.regions
    }

    /// The page backing shared by all regions.
    pub fn backing(&self) -> PageBacking {
        self.backing
    }

    /// The page size sizes are multiples of (base or huge page size).
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Total guest memory in bytes.
    pub fn total(&self) -> u64 {
        self.regions.iter().map(|r| r.size).sum()
    }

    /// Whether `--prealloc` was asked for.
    pub fn prealloc(&self) -> bool {
        self.regions.iter().any(|r| r.prealloc.is_some())
    }

    /// The host node a host CPU belongs to.
    pub fn host_node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.cpu_nodes.get(&cpu).copied()
    }

    /// The sysfs tree the plan was checked against.
    pub fn sysfs_root(&self) -> &SysfsRoot {
        &self.root
    }

    /// Checks that every guest CPU named in `--numa cpus=` exists.
    pub fn check_vcpus(&self, vcpus: u32) -> Result<(), PlanError> {
        for r in &self.regions {
            if let Some(cpu) = r.guest_cpus.highest().filter(|&c| c >= vcpus) {
                return Err(PlanError::GuestCpuOutOfRange {
                    node: r.guest_node,
                    cpu,
                    vcpus,
                });
            }
        }
        Ok(())
    }

    /// Checks that the hugetlb pools of `topo` hold enough free pages for
    /// this plan, per host node where regions are bound and overall. Done
    /// before mapping anything: touching a hugetlb page the pool cannot
    /// supply kills the process with SIGBUS instead of failing cleanly.
    pub fn check_hugepage_pools(&self, topo: &Topology) -> Result<(), PlanError> {
        let PageBacking::HugeTlb(size) = self.backing else {
            return Ok(());
        };
        let pages_of = |bytes: u64| bytes / size.bytes();
        // Pages that must come from one node, and pages that may come from
        // any node of a set.
        let mut per_node: BTreeMap<u32, u64> = BTreeMap::new();
        let mut per_set: Vec<(NodeSet, u64)> = Vec::new();
        for r in &self.regions {
            let pages = pages_of(r.size);
            match &r.binding {
                Some(b) if b.nodes.len() == 1 && b.policy != Policy::Preferred => {
                    *per_node
                        .entry(b.nodes.iter().next().unwrap_or(0))
                        .or_default() += pages;
                }
                Some(b) if b.policy == Policy::Interleave => {
                    let share = pages.div_ceil(b.nodes.len() as u64);
                    for n in b.nodes.iter() {
                        *per_node.entry(n).or_default() += share;
                    }
                }
                Some(b) if b.policy == Policy::Bind => per_set.push((b.nodes.clone(), pages)),
                _ => {}
            }
        }
        // `nodes` are where the pages must come from, `node` the pool to grow.
        let short =
            |nodes: Option<NodeSet>, node: Option<u32>, needed: u64, free: u64, reserved: u64| {
                PlanError::HugePagePoolShort {
                    size,
                    nodes,
                    needed,
                    free,
                    reserve_total: reserved + (needed - free),
                    nr_path: hugepage_file(&topo.root, size, node, "nr_hugepages"),
                }
            };
        let node_pool = |n: u32| {
            topo.nodes
                .get(&n)
                .and_then(|node| node.hugepages.get(&size))
                .copied()
        };
        for (&n, &needed) in &per_node {
            if let Some(pool) = node_pool(n) {
                if needed > pool.free {
                    return Err(short(
                        Some(NodeSet::from_iter([n])),
                        Some(n),
                        needed,
                        pool.free,
                        pool.total,
                    ));
                }
            }
        }
        for (nodes, pages) in &per_set {
            // Pages already promised to single nodes of the set are not
            // available to it. Growing the set's first node is enough.
            let needed = pages
                + nodes
                    .iter()
                    .map(|n| per_node.get(&n).copied().unwrap_or(0))
                    .sum::<u64>();
            let pools: Vec<_> = nodes
                .iter()
                .filter_map(|n| node_pool(n).map(|p| (n, p)))
                .collect();
            if let (true, Some(&(first, first_pool))) = (pools.len() == nodes.len(), pools.first())
            {
                let free: u64 = pools.iter().map(|(_, p)| p.free).sum();
                if needed > free {
                    return Err(short(
                        Some(nodes.clone()),
                        Some(first),
                        needed,
                        free,
                        first_pool.total,
                    ));
                }
            }
        }
        let needed: u64 = self.regions.iter().map(|r| pages_of(r.size)).sum();
        let pool = topo.hugepages.get(&size).copied().unwrap_or_default();
        if needed > pool.free {
            return Err(short(None, None, needed, pool.free, pool.total));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
