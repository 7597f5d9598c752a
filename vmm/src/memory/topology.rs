//! The host's NUMA nodes, CPUs and page pools as the memory planner sees
//! them: bootscope_model's sysfs node reader, plus hugetlb pools and THP,
//! read under an injectable root so multi-node logic is testable on a
//! one-node machine.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

pub use bootscope_model::numa::page_size as host_page_size;
pub use bootscope_model::numa::SysfsRoot;
use bootscope_model::numa::{read_u64, HostNodes};
use serde::Serialize;

use super::cpulist::{CpuSet, NodeSet};
use super::spec::HugePageSize;
use super::TopologyError;

/// The file `file` of the hugetlb pool for `size`: the global pool
/// (`kernel/mm/hugepages/...`) or, with `node`, that node's.
pub fn hugepage_file(
    root: &SysfsRoot,
    size: HugePageSize,
    node: Option<u32>,
    file: &str,
) -> PathBuf {
    match node {
        Some(n) => root.path(&format!(
            "devices/system/node/node{n}/hugepages/{}/{file}",
            size.sysfs_dir()
        )),
        None => root.path(&format!("kernel/mm/hugepages/{}/{file}", size.sysfs_dir())),
    }
}

/// A hugetlb page pool (global or one node's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HugePagePool {
    /// Pages reserved in the pool (`nr_hugepages`).
    pub total: u64,
    /// Pages not in use (`free_hugepages`).
    pub free: u64,
}

/// Transparent huge page mode (`kernel/mm/transparent_hugepage/enabled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    /// Every anonymous mapping may get huge pages.
    Always,
    /// Only mappings advised with MADV_HUGEPAGE.
    Madvise,
    /// Never.
    Never,
    /// The kernel has no THP support (the file is absent).
    Unsupported,
}

impl fmt::Display for ThpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThpMode::Always => "always",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
            ThpMode::Unsupported => "unsupported",
        })
    }
}

/// One host NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeTopology {
    /// Node number.
    pub id: u32,
    /// Its online CPUs (empty for a memory-only node).
    pub cpus: CpuSet,
    /// `MemTotal` from the node's meminfo, bytes.
    pub mem_total: Option<u64>,
    /// `MemFree` from the node's meminfo, bytes.
    pub mem_free: Option<u64>,
    /// The node's hugetlb pools by page size (sizes the kernel offers).
    pub hugepages: BTreeMap<HugePageSize, HugePagePool>,
}

/// The host as the memory planner sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// The sysfs tree this was read from (pools are re-read from it just
    /// before allocating).
    #[serde(skip)]
    pub root: SysfsRoot,
    /// Whether the kernel exposes NUMA nodes at all (`devices/system/node`);
    /// without it there is one implicit node 0 and no mbind(2).
    pub numa: bool,
    /// Online CPUs (`devices/system/cpu/online`).
    pub online_cpus: CpuSet,
    /// Online nodes by number.
    pub nodes: BTreeMap<u32, NodeTopology>,
    /// Global hugetlb pools by page size (sizes the kernel offers).
    pub hugepages: BTreeMap<HugePageSize, HugePagePool>,
    /// Transparent huge page mode.
    pub thp: ThpMode,
    /// Base page size in bytes.
    pub page_size: u64,
}

/// Reads the pools present under `dir/hugepages-*kB` for every known size.
fn read_pools(
    root: &SysfsRoot,
    node: Option<u32>,
) -> Result<BTreeMap<HugePageSize, HugePagePool>, TopologyError> {
    let mut pools = BTreeMap::new();
    for size in HugePageSize::ALL {
        let nr = hugepage_file(root, size, node, "nr_hugepages");
        if !nr.exists() {
            continue;
        }
        let free = read_u64(&hugepage_file(root, size, node, "free_hugepages"))?;
        pools.insert(
            size,
            HugePagePool {
                total: read_u64(&nr)?,
                free,
            },
        );
    }
    Ok(pools)
}

/// The selected word (`[madvise]`) of the THP `enabled` file.
pub fn parse_thp_mode(text: &str) -> ThpMode {
    let selected = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')));
    match selected {
        Some("always") => ThpMode::Always,
        Some("madvise") => ThpMode::Madvise,
        Some("never") => ThpMode::Never,
        _ => ThpMode::Unsupported,
    }
}

impl Topology {
    /// Reads the live host (`/sys`).
    pub fn host() -> Result<Self, TopologyError> {
        Self::read(&SysfsRoot::default())
    }

    /// Reads the tree under `root`.
    pub fn read(root: &SysfsRoot) -> Result<Self, TopologyError> {
        let host = HostNodes::read(root)?;
        let hugepages = read_pools(root, None)?;
        let mut nodes = BTreeMap::new();
        for (id, node) in host.nodes {
            let hugepages = if host.numa {
                read_pools(root, Some(id))?
            } else {
                hugepages.clone()
            };
            nodes.insert(
                id,
                NodeTopology {
                    id,
                    cpus: node.cpus,
                    mem_total: node.mem_total,
                    mem_free: node.mem_free,
                    hugepages,
                },
            );
        }
        let thp = match std::fs::read_to_string(root.path("kernel/mm/transparent_hugepage/enabled"))
        {
            Ok(text) => parse_thp_mode(&text),
            Err(_) => ThpMode::Unsupported,
        };
        Ok(Topology {
            root: root.clone(),
            numa: host.numa,
            online_cpus: host.online_cpus,
            nodes,
            hugepages,
            thp,
            page_size: host_page_size(),
        })
    }

    /// Online node numbers.
    pub fn node_ids(&self) -> NodeSet {
        self.nodes.keys().copied().collect()
    }

    /// The node `cpu` belongs to.
    pub fn cpu_node(&self, cpu: u32) -> Option<u32> {
        self.nodes
            .values()
            .find(|n| n.cpus.contains(cpu))
            .map(|n| n.id)
    }

    /// CPU number to node number, for every online CPU on a node.
    pub fn cpu_nodes(&self) -> BTreeMap<u32, u32> {
        self.nodes
            .values()
            .flat_map(|n| n.cpus.iter().map(move |c| (c, n.id)))
            .collect()
    }

    /// Online CPUs of the given nodes (unknown nodes contribute none).
    pub fn cpus_of(&self, nodes: &NodeSet) -> CpuSet {
        let mut cpus = CpuSet::new();
        for n in nodes.iter() {
            if let Some(node) = self.nodes.get(&n) {
                cpus.extend(&node.cpus);
            }
        }
        cpus
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A fake sysfs tree in a temporary directory.

    use std::path::{Path, PathBuf};

    /// A temporary directory removed on drop.
    pub struct FakeSysfs(pub PathBuf);

    impl FakeSysfs {
        /// An empty tree.
        pub fn new() -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "bootscope-sysfs-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }

        /// Writes `text` at `rel`, creating directories.
        pub fn file(&self, rel: &str, text: &str) -> &Self {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }

        /// A hugetlb pool (global when `node` is None).
        pub fn pool(&self, node: Option<u32>, dir: &str, nr: u64, free: u64) -> &Self {
            let base = match node {
                Some(n) => format!("devices/system/node/node{n}/hugepages/{dir}"),
                None => format!("kernel/mm/hugepages/{dir}"),
            };
            self.file(&format!("{base}/nr_hugepages"), &format!("{nr}\n"));
            self.file(&format!("{base}/free_hugepages"), &format!("{free}\n"));
            self
        }

        /// Two nodes, eight CPUs (0-3 on node 0, 4-7 on node 1), 8 GiB per
        /// node, THP in madvise mode, 2 MiB pools of 100 free pages per node.
        pub fn two_nodes() -> Self {
            let t = Self::new();
            t.file("devices/system/cpu/online", "0-7\n")
                .file("devices/system/node/online", "0-1\n")
                .file("devices/system/node/possible", "0-1\n")
                .file("devices/system/node/node0/cpulist", "0-3\n")
                .file("devices/system/node/node1/cpulist", "4-7\n")
                .file(
                    "devices/system/node/node0/meminfo",
                    "Node 0 MemTotal:        8388608 kB\nNode 0 MemFree:         4194304 kB\n",
                )
                .file(
                    "devices/system/node/node1/meminfo",
                    "Node 1 MemTotal:        8388608 kB\nNode 1 MemFree:         8000000 kB\n",
                )
                .file(
                    "kernel/mm/transparent_hugepage/enabled",
                    "always [madvise] never\n",
                )
                .pool(None, "hugepages-2048kB", 200, 200)
                .pool(Some(0), "hugepages-2048kB", 100, 100)
                .pool(Some(1), "hugepages-2048kB", 100, 100)
                .pool(None, "hugepages-1048576kB", 0, 0)
                .pool(Some(0), "hugepages-1048576kB", 0, 0)
                .pool(Some(1), "hugepages-1048576kB", 0, 0);
            t
        }

        /// The tree's root.
        pub fn root(&self) -> super::SysfsRoot {
            super::SysfsRoot(self.0.clone())
        }

        /// The tree's path.
        #[allow(dead_code)]
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cpulist::IdSet;
    use super::fake::FakeSysfs;
    use super::*;
    use bootscope_model::numa::parse_node_meminfo;

    #[test]
    fn reads_two_node_tree() {
        let t = FakeSysfs::two_nodes();
        let topo = Topology::read(&t.root()).unwrap();
        assert!(topo.numa);
        assert_eq!(topo.online_cpus.to_string(), "0-7");
        assert_eq!(topo.node_ids().to_string(), "0-1");
        assert_eq!(topo.nodes[&0].cpus.to_string(), "0-3");
        assert_eq!(topo.nodes[&1].cpus.to_string(), "4-7");
        assert_eq!(topo.nodes[&0].mem_total, Some(8 << 30));
        assert_eq!(topo.nodes[&0].mem_free, Some(4 << 30));
        assert_eq!(
            topo.nodes[&1].hugepages[&HugePageSize::Size2M],
            HugePagePool {
                total: 100,
                free: 100
            }
        );
        assert_eq!(topo.hugepages[&HugePageSize::Size2M].free, 200);
        assert_eq!(topo.thp, ThpMode::Madvise);
        assert_eq!(topo.cpu_node(5), Some(1));
        assert_eq!(topo.cpu_node(9), None);
        assert_eq!(
            topo.cpus_of(&IdSet::parse("0-1").unwrap()).to_string(),
            "0-7"
        );
        assert_eq!(topo.cpu_nodes().len(), 8);
    }

    #[test]
    fn offline_cpus_leave_the_node_lists() {
        let t = FakeSysfs::two_nodes();
        t.file("devices/system/cpu/online", "0-2,4-7\n");
        let topo = Topology::read(&t.root()).unwrap();
        assert_eq!(topo.nodes[&0].cpus.to_string(), "0-2");
    }

    #[test]
    fn memory_only_node() {
        let t = FakeSysfs::two_nodes();
        t.file("devices/system/node/online", "0-2\n")
            .file("devices/system/node/node2/cpulist", "\n");
        let topo = Topology::read(&t.root()).unwrap();
        assert!(topo.nodes[&2].cpus.is_empty());
        assert!(topo.nodes[&2].hugepages.is_empty());
        assert_eq!(topo.nodes[&2].mem_total, None);
    }

    #[test]
    fn without_numa_there_is_one_node() {
        let t = FakeSysfs::new();
        t.file("devices/system/cpu/online", "0-1\n");
        let topo = Topology::read(&t.root()).unwrap();
        assert!(!topo.numa);
        assert_eq!(topo.node_ids().to_string(), "0");
        assert_eq!(topo.nodes[&0].cpus.to_string(), "0-1");
        assert_eq!(topo.thp, ThpMode::Unsupported);
    }

    #[test]
    fn unreadable_files_name_the_path() {
        let t = FakeSysfs::new();
        let e = Topology::read(&t.root()).unwrap_err();
        assert!(e.to_string().contains("devices/system/cpu/online"), "{e}");
        t.file("devices/system/cpu/online", "zero\n");
        let e = Topology::read(&t.root()).unwrap_err();
        assert!(e.to_string().contains("zero"), "{e}");
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_thp_mode("[always] madvise never"), ThpMode::Always);
        assert_eq!(parse_thp_mode("always madvise [never]\n"), ThpMode::Never);
        assert_eq!(parse_thp_mode(""), ThpMode::Unsupported);
        let (t, f) = parse_node_meminfo(
            "Node 0 MemTotal:  1024 kB\nNode 0 MemFree:   512 kB\nNode 0 MemUsed: 512 kB\n",
        );
        assert_eq!((t, f), (Some(1 << 20), Some(512 << 10)));
    }

    #[test]
    fn reads_this_host() {
        let topo = Topology::host().unwrap();
        assert!(!topo.online_cpus.is_empty());
        assert!(!topo.nodes.is_empty());
        assert_eq!(topo.page_size, 4096);
        for cpu in topo.online_cpus.iter() {
            assert!(topo.cpu_node(cpu).is_some(), "cpu {cpu} has no node");
        }
    }
}
