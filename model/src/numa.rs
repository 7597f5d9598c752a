//! The host's NUMA nodes as sysfs shows them (`devices/system/node`: each
//! node's CPUs, memory, distances and memory blocks), read under an
//! injectable root so multi-node logic is testable on a one-node machine.
//! The VMM's memory planner and the profiler's NUMA collector build their
//! own views on [`HostNodes`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::cpulist::{CpuSet, IdSet};

/// Where sysfs is mounted (`/sys` in production, a fake tree in tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysfsRoot(pub PathBuf);

impl Default for SysfsRoot {
    fn default() -> Self {
        Self(PathBuf::from("/sys"))
    }
}

impl SysfsRoot {
    /// `rel` (relative to the sysfs mount point) under this root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel.trim_start_matches('/'))
    }
}

/// Reading sysfs failed.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file held something unexpected.
    #[error("cannot parse {}: {why}", path.display())]
    Parse { path: PathBuf, why: String },
}

/// The text of a sysfs file.
pub fn read_text(path: &Path) -> Result<String, SysfsError> {
    std::fs::read_to_string(path).map_err(|source| SysfsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A CPU or node list file (`0-3,8`).
pub fn read_list(path: &Path) -> Result<IdSet, SysfsError> {
    IdSet::parse(&read_text(path)?).map_err(|e| SysfsError::Parse {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

/// A file holding one decimal number.
pub fn read_u64(path: &Path) -> Result<u64, SysfsError> {
    let s = read_text(path)?;
    s.trim().parse().map_err(|_| SysfsError::Parse {
        path: path.to_path_buf(),
        why: format!("{:?} is not a number", s.trim()),
    })
}

/// One host NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostNode {
    /// Node number.
    pub id: u32,
    /// Its online CPUs (empty for a memory-only node).
    pub cpus: CpuSet,
    /// `MemTotal` from the node's meminfo, bytes.
    pub mem_total: Option<u64>,
    /// `MemFree` from the node's meminfo, bytes.
    pub mem_free: Option<u64>,
    /// Its `distance` row: the distance to node 0, 1, ... (empty when
    /// absent).
    pub distances: Vec<u32>,
    /// The numbers M of its `memoryM` blocks, ascending.
    pub memory_blocks: Vec<u64>,
}

/// The host's nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostNodes {
    /// Whether the kernel exposes NUMA nodes at all (`devices/system/node`);
    /// without it there is one implicit node 0 holding every online CPU.
    pub numa: bool,
    /// Online CPUs (`devices/system/cpu/online`).
    pub online_cpus: CpuSet,
    /// Nodes by number: the online ones (`devices/system/node/online`, or
    /// every `nodeN` directory when that file is absent).
    pub nodes: BTreeMap<u32, HostNode>,
}

impl HostNodes {
    /// A host without NUMA: node 0 holds `cpus`.
    pub fn single(cpus: CpuSet) -> Self {
        let node = HostNode {
            cpus: cpus.clone(),
            ..HostNode::default()
        };
        Self {
            numa: false,
            online_cpus: cpus,
            nodes: BTreeMap::from([(0, node)]),
        }
    }

    /// Reads the tree under `root`. The online CPU list, the node list and
    /// each node's CPU list must be readable; meminfo, distances and
    /// memory blocks may be absent.
    pub fn read(root: &SysfsRoot) -> Result<Self, SysfsError> {
        let online_cpus = read_list(&root.path("devices/system/cpu/online"))?;
        if !root.path("devices/system/node").is_dir() {
            return Ok(Self::single(online_cpus));
        }
        let online = root.path("devices/system/node/online");
        let ids: Vec<u32> = if online.exists() {
            read_list(&online)?.iter().collect()
        } else {
            node_dirs(&root.path("devices/system/node"))
        };
        let mut nodes = BTreeMap::new();
        for id in ids {
            let dir = root.path(&format!("devices/system/node/node{id}"));
            let cpus = read_list(&dir.join("cpulist"))?.intersection(&online_cpus);
            let (mem_total, mem_free) = match std::fs::read_to_string(dir.join("meminfo")) {
                Ok(text) => parse_node_meminfo(&text),
                Err(_) => (None, None),
            };
            let distances = std::fs::read_to_string(dir.join("distance"))
                .map(|t| {
                    t.split_whitespace()
                        .filter_map(|d| d.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            let node = HostNode {
                id,
                cpus,
                mem_total,
                mem_free,
                distances,
                memory_blocks: numbered_entries(&dir, "memory"),
            };
            nodes.insert(id, node);
        }
        Ok(Self {
            numa: true,
            online_cpus,
            nodes,
        })
    }
}

/// The numbers N of the entries `{prefix}N` of `dir`, ascending.
fn numbered_entries<T: std::str::FromStr + Ord>(dir: &Path, prefix: &str) -> Vec<T> {
    let mut out: Vec<T> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    out.sort();
    out
}

/// The numbers of the `nodeN` directories of `dir`, ascending.
fn node_dirs(dir: &Path) -> Vec<u32> {
    numbered_entries(dir, "node")
}

/// `MemTotal` and `MemFree` (bytes) from a node's meminfo
/// (`Node 0 MemTotal:       24634636 kB`).
pub fn parse_node_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name| crate::proc::meminfo_field(text, name);
    (field("MemTotal"), field("MemFree"))
}

/// The host's base page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(tag: &str, files: &[(&str, &str)]) -> SysfsRoot {
        let d = std::env::temp_dir().join(format!("bootscope-numa-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (rel, text) in files {
            let p = d.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::fs::create_dir_all(&d).unwrap();
        SysfsRoot(d)
    }

    #[test]
    fn reads_nodes_cpus_memory_and_distances() {
        let root = tree(
            "two",
            &[
                ("devices/system/cpu/online", "0-2,4-7\n"),
                ("devices/system/node/node0/cpulist", "0-3\n"),
                ("devices/system/node/node0/distance", "10 21\n"),
                (
                    "devices/system/node/node0/meminfo",
                    "Node 0 MemTotal:  1024 kB\nNode 0 MemFree:   512 kB\n",
                ),
                ("devices/system/node/node0/memory3/online", "1\n"),
                ("devices/system/node/node0/memory1/online", "1\n"),
                ("devices/system/node/node1/cpulist", "4-7\n"),
            ],
        );
        let h = HostNodes::read(&root).unwrap();
        assert!(h.numa);
        assert_eq!(h.nodes.len(), 2);
        let n0 = &h.nodes[&0];
        assert_eq!(n0.cpus.to_string(), "0-2");
        assert_eq!(
            (n0.mem_total, n0.mem_free),
            (Some(1 << 20), Some(512 << 10))
        );
        assert_eq!(n0.distances, vec![10, 21]);
        assert_eq!(n0.memory_blocks, vec![1, 3]);
        assert!(h.nodes[&1].distances.is_empty() && h.nodes[&1].mem_total.is_none());
        std::fs::write(root.path("devices/system/node/online"), "1\n").unwrap();
        let h = HostNodes::read(&root).unwrap();
        assert_eq!(h.nodes.keys().copied().collect::<Vec<_>>(), vec![1]);
        std::fs::remove_dir_all(&root.0).unwrap();
    }

    #[test]
    fn without_numa_node_zero_has_every_cpu() {
        let root = tree("none", &[("devices/system/cpu/online", "0-1\n")]);
        let h = HostNodes::read(&root).unwrap();
        assert_eq!(h, HostNodes::single(IdSet::parse("0-1").unwrap()));
        std::fs::remove_file(root.path("devices/system/cpu/online")).unwrap();
        let e = HostNodes::read(&root).unwrap_err().to_string();
        assert!(e.contains("devices/system/cpu/online"), "{e}");
        std::fs::remove_dir_all(&root.0).unwrap();
    }
}
