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
        format!("prealloc-n{}-{index}", self.guest_node)
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

impl MemoryPlan {
    /// Checks `opts` against the host `topo` and builds the plan.
    pub fn new(opts: &MemoryOptions, topo: &Topology) -> Result<Self, PlanError> {
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
        let thp_on_host = !matches!(topo.thp, ThpMode::Never | ThpMode::Unsupported);
        let backing = match (opts.hugepages, opts.thp) {
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
        };
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
                r.prealloc = Some(PreallocPlan {
                    threads: opts.prealloc_threads,
                    cpus,
                });
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
mod tests {
    use super::super::topology::fake::FakeSysfs;
    use super::*;

    fn two_nodes() -> (FakeSysfs, Topology) {
        let t = FakeSysfs::two_nodes();
        let topo = Topology::read(&t.root()).unwrap();
        (t, topo)
    }

    fn numa(specs: &[&str]) -> Vec<NumaSpec> {
        specs.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn err(opts: &MemoryOptions, topo: &Topology) -> String {
        MemoryPlan::new(opts, topo).unwrap_err().to_string()
    }

    #[test]
    fn plain_memory_is_one_unbound_region() {
        let (_t, topo) = two_nodes();
        let opts = MemoryOptions {
            total: Some(512 << 20),
            ..Default::default()
        };
        let plan = MemoryPlan::new(&opts, &topo).unwrap();
        assert_eq!(plan.regions().len(), 1);
        let r = &plan.regions()[0];
        assert_eq!(
            (r.guest_node, r.size, &r.binding, &r.prealloc),
            (0, 512 << 20, &None, &None)
        );
        assert_eq!(plan.backing(), PageBacking::Transparent);
        assert_eq!(plan.page_size(), 4096);
        assert!(!plan.prealloc());
    }

    #[test]
    fn two_bound_regions_take_their_node_cpus() {
        let (_t, topo) = two_nodes();
        let opts = MemoryOptions {
            total: Some(3 << 30),
            numa: numa(&[
                "node=1,cpus=2-3,memory=1G,host-nodes=1",
                "node=0,cpus=0-1,memory=2G,host-nodes=0,policy=preferred",
            ]),
            prealloc: true,
            prealloc_threads: 3,
            ..Default::default()
        };
        let plan = MemoryPlan::new(&opts, &topo).unwrap();
        let r = plan.regions();
        // Sorted by guest node.
        assert_eq!((r[0].guest_node, r[0].size), (0, 2 << 30));
        assert_eq!((r[1].guest_node, r[1].size), (1, 1 << 30));
        assert_eq!(r[0].binding.as_ref().unwrap().policy, Policy::Preferred);
        assert_eq!(r[1].binding.as_ref().unwrap().policy, Policy::Bind);
        let p0 = r[0].prealloc.as_ref().unwrap();
        let p1 = r[1].prealloc.as_ref().unwrap();
        assert_eq!(p0.threads, 3);
        assert_eq!(p0.cpus.as_ref().unwrap().to_string(), "0-3");
        assert_eq!(p1.cpus.as_ref().unwrap().to_string(), "4-7");
        assert_eq!(r[1].context_name(), "memctx-n1");
        assert_eq!(r[1].worker_name(3), "prealloc-n1-3");
        assert_eq!(plan.total(), 3 << 30);
        assert_eq!(plan.host_node_of_cpu(6), Some(1));
        plan.check_vcpus(4).unwrap();
        let e = plan.check_vcpus(3).unwrap_err().to_string();
        assert!(
            e.contains("guest CPU 3") && e.contains("3 vCPUs (0-2)"),
            "{e}"
        );
    }

    #[test]
    fn interleave_spans_both_nodes_cpus_and_explicit_cpus_win() {
        let (_t, topo) = two_nodes();
        let mut opts = MemoryOptions {
            numa: numa(&["node=0,memory=1G,host-nodes=0-1,policy=interleave"]),
            prealloc: true,
            ..Default::default()
        };
        let plan = MemoryPlan::new(&opts, &topo).unwrap();
        assert_eq!(
            plan.regions()[0]
                .prealloc
                .as_ref()
                .unwrap()
                .cpus
                .as_ref()
                .unwrap()
                .to_string(),
            "0-7"
        );
        opts.prealloc_cpus = Some("5,7".parse().unwrap());
        let plan = MemoryPlan::new(&opts, &topo).unwrap();
        assert_eq!(
            plan.regions()[0]
                .prealloc
                .as_ref()
                .unwrap()
                .cpus
                .as_ref()
                .unwrap()
                .to_string(),
            "5,7"
        );
    }

    #[test]
    fn unbound_prealloc_keeps_the_process_cpus() {
        let (_t, topo) = two_nodes();
        let opts = MemoryOptions {
            total: Some(64 << 20),
            prealloc: true,
            prealloc_threads: 2,
            ..Default::default()
        };
        let plan = MemoryPlan::new(&opts, &topo).unwrap();
        assert_eq!(
            plan.regions()[0].prealloc,
            Some(PreallocPlan {
                threads: 2,
                cpus: None
            })
        );
    }

    #[test]
    fn bad_input_errors() {
        let (_t, topo) = two_nodes();
        let base = MemoryOptions {
            total: Some(1 << 30),
            prealloc: true,
            ..Default::default()
        };
        let with = |f: &dyn Fn(&mut MemoryOptions)| {
            let mut o = base.clone();
            f(&mut o);
            err(&o, &topo)
        };
        let cases: Vec<(String, &str)> = vec![
            (with(&|o| o.prealloc_threads = 0), "--prealloc-threads is 0"),
            (with(&|o| o.prealloc_threads = 5000), "--prealloc-threads 5000 is more than 1024; more threads than host CPUs (8 here)"),
            (with(&|o| o.prealloc_cpus = Some("6-9".parse().unwrap())), "names CPUs 8-9 that do not exist or are offline on this host; online CPUs are 0-7"),
            (with(&|o| o.prealloc_cpus = Some(CpuSet::new())), "--prealloc-cpus is empty"),
            (with(&|o| o.total = None), "no guest memory size"),
            (with(&|o| o.total = Some(0)), "--memory 0 bytes is 0"),
            (with(&|o| o.total = Some((1 << 30) + 512)), "not a multiple of the 4 KiB page size"),
            (
                with(&|o| {
                    o.hugepages = Some(HugePageSize::Size2M);
                    o.total = Some((1 << 30) + (1 << 20));
                }),
                "is not a multiple of the 2 MiB page size; use 1 GiB or 1026 MiB",
            ),
            (
                with(&|o| o.numa = numa(&["node=0,memory=512M", "node=1,memory=256M"])),
                "--memory 1 GiB does not match the --numa memory sizes (512 MiB + 256 MiB = 768 MiB)",
            ),
            (with(&|o| o.numa = numa(&["node=0,memory=512M", "node=0,memory=512M"])), "--numa node=0 is given twice"),
            (with(&|o| o.numa = numa(&["node=0,memory=512M,cpus=0-1", "node=1,memory=512M,cpus=1"])), "guest CPU 1 is listed in --numa node=0 and node=1"),
            (with(&|o| o.numa = numa(&["node=0,memory=1G,host-nodes=0,2-3"])), "host node 2-3 does not exist or is offline; online host nodes are 0-1"),
            (with(&|o| o.numa = numa(&["node=0,memory=1G,policy=bind"])), "policy=bind needs host-nodes=LIST"),
            (with(&|o| o.numa = numa(&["node=0,memory=1G,host-nodes=0-1,policy=preferred"])), "policy=preferred takes one host node, not 0-1"),
            (with(&|o| { o.thp = ThpChoice::Required; o.hugepages = Some(HugePageSize::Size2M) }), "--thp and --hugepages exclude each other"),
            (with(&|o| o.hugepages = Some(HugePageSize::Size1G)), "needs 1 pages of 1 GiB but only 0 are free; reserve 1 more"),
            (with(&|o| o.hugepages = Some(HugePageSize::Size1G)), "hugepagesz=1G hugepages=N"),
        ];
        for (msg, want) in cases {
            assert!(msg.contains(want), "want {want:?} in: {msg}");
        }
    }

    #[test]
    fn thp_is_advised_by_default_where_the_host_allows_it() {
        let (_t, madvise) = two_nodes();
        let never = FakeSysfs::new();
        never.file("devices/system/cpu/online", "0-1\n").file(
            "kernel/mm/transparent_hugepage/enabled",
            "always madvise [never]\n",
        );
        let never = Topology::read(&never.root()).unwrap();
        let backing = |thp, topo: &Topology| {
            let opts = MemoryOptions {
                total: Some(64 << 20),
                thp,
                ..Default::default()
            };
            MemoryPlan::new(&opts, topo).map(|p| p.backing())
        };
        assert_eq!(
            backing(ThpChoice::Auto, &madvise).unwrap(),
            PageBacking::Transparent
        );
        assert_eq!(
            backing(ThpChoice::Required, &madvise).unwrap(),
            PageBacking::Transparent
        );
        assert_eq!(
            backing(ThpChoice::Off, &madvise).unwrap(),
            PageBacking::Small
        );
        assert_eq!(
            backing(ThpChoice::Auto, &never).unwrap(),
            PageBacking::Small
        );
        assert!(backing(ThpChoice::Required, &never).is_err());
        // Huge pages win over the default advice.
        let opts = MemoryOptions {
            total: Some(64 << 20),
            hugepages: Some(HugePageSize::Size2M),
            ..Default::default()
        };
        assert_eq!(
            MemoryPlan::new(&opts, &madvise).unwrap().backing(),
            PageBacking::HugeTlb(HugePageSize::Size2M)
        );
    }

    #[test]
    fn numa_errors_on_hosts_without_it() {
        let t = FakeSysfs::new();
        t.file("devices/system/cpu/online", "0-1\n").file(
            "kernel/mm/transparent_hugepage/enabled",
            "always madvise [never]\n",
        );
        let topo = Topology::read(&t.root()).unwrap();
        let opts = MemoryOptions {
            numa: numa(&["node=0,memory=1G,host-nodes=0"]),
            ..Default::default()
        };
        assert!(err(&opts, &topo).contains("needs a kernel with NUMA support"));
        let opts = MemoryOptions {
            total: Some(1 << 30),
            thp: ThpChoice::Required,
            ..Default::default()
        };
        let e = err(&opts, &topo);
        assert!(
            e.contains("transparent huge pages are never") && e.contains("echo madvise >"),
            "{e}"
        );
        let opts = MemoryOptions {
            total: Some(1 << 30),
            hugepages: Some(HugePageSize::Size2M),
            ..Default::default()
        };
        assert!(err(&opts, &topo).contains("has no 2 MiB huge page pool"));
    }

    #[test]
    fn memory_only_node_needs_prealloc_cpus() {
        let t = FakeSysfs::two_nodes();
        t.file("devices/system/node/online", "0-2\n")
            .file("devices/system/node/node2/cpulist", "\n");
        let topo = Topology::read(&t.root()).unwrap();
        let mut opts = MemoryOptions {
            numa: numa(&["node=0,memory=1G,host-nodes=2"]),
            prealloc: true,
            ..Default::default()
        };
        let e = err(&opts, &topo);
        assert!(
            e.contains("host node 2 has no online CPUs") && e.contains("--prealloc-cpus"),
            "{e}"
        );
        opts.prealloc_cpus = Some("0-1".parse().unwrap());
        MemoryPlan::new(&opts, &topo).unwrap();
    }

    #[test]
    fn hugepage_shortfall_says_how_many_and_how_to_reserve() {
        let (t, topo) = two_nodes();
        // Node 1 has 100 free 2 MiB pages; 300 MiB bound there needs 150.
        let opts = MemoryOptions {
            numa: numa(&[
                "node=0,memory=100M,host-nodes=0",
                "node=1,memory=300M,host-nodes=1",
            ]),
            hugepages: Some(HugePageSize::Size2M),
            ..Default::default()
        };
        let e = MemoryPlan::new(&opts, &topo).unwrap_err();
        match &e {
            PlanError::HugePagePoolShort {
                needed,
                free,
                nodes,
                reserve_total,
                ..
            } => {
                assert_eq!((*needed, *free, *reserve_total), (150, 100, 150));
                assert_eq!(nodes.as_ref().unwrap().to_string(), "1");
            }
            other => panic!("{other}"),
        }
        let path =
            t.0.join("devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages");
        assert_eq!(
            e.to_string(),
            format!(
                "--hugepages 2 MiB: guest memory needs 150 pages of 2 MiB on host node 1 but only 100 are free; \
                 reserve 50 more with `echo 150 > {}`",
                path.display()
            )
        );

        // Unbound: the global pool (200 free, 200 reserved) is what counts.
        let opts = MemoryOptions {
            total: Some(500 << 20),
            hugepages: Some(HugePageSize::Size2M),
            ..Default::default()
        };
        let e = err(&opts, &topo);
        assert!(
            e.contains(
                "needs 250 pages of 2 MiB but only 200 are free; reserve 50 more with `echo 250 >"
            ),
            "{e}"
        );
        assert!(
            e.contains("kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
            "{e}"
        );

        // Interleaved over both nodes: 300 pages = 150 per node, 100 free each.
        let opts = MemoryOptions {
            numa: numa(&["node=0,memory=600M,host-nodes=0-1,policy=interleave"]),
            hugepages: Some(HugePageSize::Size2M),
            ..Default::default()
        };
        assert!(err(&opts, &topo)
            .contains("needs 150 pages of 2 MiB on host node 0 but only 100 are free"));

        // Bound to both nodes: 180 pages fit in 200, 220 do not.
        let mut opts = MemoryOptions {
            numa: numa(&["node=0,memory=360M,host-nodes=0-1"]),
            hugepages: Some(HugePageSize::Size2M),
            ..Default::default()
        };
        MemoryPlan::new(&opts, &topo).unwrap();
        opts.numa = numa(&["node=0,memory=440M,host-nodes=0-1"]);
        let e = err(&opts, &topo);
        assert!(e.contains("needs 220 pages of 2 MiB on host nodes 0-1 but only 200 are free; reserve 20 more with `echo 120 >"), "{e}");
        assert!(
            e.contains("node0/hugepages/hugepages-2048kB/nr_hugepages"),
            "{e}"
        );

        // A partly used pool: 20 free of 100 reserved on node 0.
        t.pool(Some(0), "hugepages-2048kB", 100, 20);
        let topo = Topology::read(&t.root()).unwrap();
        let opts = MemoryOptions {
            numa: numa(&["node=0,memory=64M,host-nodes=0"]),
            hugepages: Some(HugePageSize::Size2M),
            ..Default::default()
        };
        let e = err(&opts, &topo);
        assert!(e.contains("needs 32 pages of 2 MiB on host node 0 but only 20 are free; reserve 12 more with `echo 112 >"), "{e}");
    }

    #[test]
    fn hugepage_plan_that_fits() {
        let (_t, topo) = two_nodes();
        let opts = MemoryOptions {
            numa: numa(&[
                "node=0,memory=200M,host-nodes=0",
                "node=1,memory=200M,host-nodes=1",
            ]),
            hugepages: Some(HugePageSize::Size2M),
            prealloc: true,
            prealloc_threads: 2,
            ..Default::default()
        };
        let plan = MemoryPlan::new(&opts, &topo).unwrap();
        assert_eq!(plan.backing(), PageBacking::HugeTlb(HugePageSize::Size2M));
        assert_eq!(plan.page_size(), 2 << 20);
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["regions"][1]["binding"]["nodes"], "1");
        assert_eq!(json["regions"][1]["prealloc"]["cpus"], "4-7");
    }
}
