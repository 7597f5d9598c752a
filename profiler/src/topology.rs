//! Host NUMA topology, read from sysfs/procfs under an injectable root: the
//! node of each CPU (bootscope_model's sysfs node reader), and the node of each page frame range (what the NUMA
//! collector needs to place an allocated page, computed here once and passed
//! to the kernel as small array maps).

use std::collections::BTreeMap;
use std::path::Path;

pub use bootscope_model::numa::page_size;
use bootscope_model::numa::{HostNodes, SysfsRoot};

use crate::profile::NumaNode;

/// Page frames `[start_pfn, end_pfn)` on `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfnRange {
    pub start_pfn: u64,
    pub end_pfn: u64,
    pub node: u32,
}

/// What the host looks like.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// CPU -> node.
    pub cpu_nodes: BTreeMap<u32, u32>,
    pub nodes: Vec<NumaNode>,
    /// Sorted, non-overlapping.
    pub pfn_ranges: Vec<PfnRange>,
    /// Where the ranges came from: `sysfs memory blocks`, `zoneinfo`, or
    /// `single node` when the host has no NUMA information.
    pub pfn_source: String,
}

impl Topology {
    /// Reads the topology below `root` (`/` on a live system). A host
    /// whose sysfs cannot be read is one node 0 without CPUs.
    pub fn read(root: &Path) -> Self {
        let host = HostNodes::read(&SysfsRoot(root.join("sys")))
            .unwrap_or_else(|_| HostNodes::single(Default::default()));
        let nodes: Vec<NumaNode> = host
            .nodes
            .values()
            .map(|n| NumaNode {
                id: n.id,
                cpus: n.cpus.iter().collect(),
            })
            .collect();
        let cpu_nodes = nodes
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |&c| (c, n.id)))
            .collect();
        let (pfn_ranges, pfn_source) = if let Some(r) = memory_block_ranges(root, &host) {
            (r, "sysfs memory blocks")
        } else if let Some(r) = crate::pseudo::read(root.join("proc/zoneinfo"))
            .ok()
            .map(|t| zoneinfo_ranges(&t))
            .filter(|r| !r.is_empty())
        {
            (r, "zoneinfo")
        } else {
            (
                vec![PfnRange {
                    start_pfn: 0,
                    end_pfn: u64::MAX,
                    node: nodes[0].id,
                }],
                "single node",
            )
        };
        Self {
            cpu_nodes,
            nodes,
            pfn_ranges,
            pfn_source: pfn_source.to_string(),
        }
    }

    /// The node holding a page frame.
    pub fn pfn_node(&self, pfn: u64) -> Option<u32> {
        pfn_to_node(&self.pfn_ranges, pfn)
    }

    /// The node of a CPU.
    pub fn cpu_node(&self, cpu: u32) -> Option<u32> {
        self.cpu_nodes.get(&cpu).copied()
    }
}

/// Parses `0-3,8,10-11` (the kernel's list format), ascending; None when
/// it does not parse.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    bootscope_model::cpulist::IdSet::parse(s)
        .ok()
        .map(|set| set.iter().collect())
}

/// Ranges from `/sys/devices/system/node/nodeN/memoryM`: block M covers
/// bytes `[M * block_size, (M + 1) * block_size)`.
fn memory_block_ranges(root: &Path, host: &HostNodes) -> Option<Vec<PfnRange>> {
    let bs = crate::pseudo::read(root.join("sys/devices/system/memory/block_size_bytes")).ok()?;
    let block_bytes = u64::from_str_radix(bs.trim().trim_start_matches("0x"), 16).ok()?;
    let page = page_size();
    if block_bytes == 0 || block_bytes % page != 0 {
        return None;
    }
    let pages_per_block = block_bytes / page;
    let blocks = host
        .nodes
        .values()
        .flat_map(|n| {
            n.memory_blocks.iter().map(move |&m| PfnRange {
                start_pfn: m * pages_per_block,
                end_pfn: (m + 1) * pages_per_block,
                node: n.id,
            })
        })
        .collect();
    let merged = merge_ranges(blocks);
    (!merged.is_empty()).then_some(merged)
}

/// Ranges from `/proc/zoneinfo`: each `Node N, zone Z` section's
/// `start_pfn` and `spanned`.
pub fn zoneinfo_ranges(text: &str) -> Vec<PfnRange> {
    let mut out = Vec::new();
    let mut node: Option<u32> = None;
    let mut spanned: Option<u64> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Node ") {
            node = rest.split(',').next().and_then(|n| n.trim().parse().ok());
            spanned = None;
        } else if let Some(v) = t.strip_prefix("spanned") {
            spanned = v.trim().parse().ok();
        } else if let Some(v) = t.strip_prefix("start_pfn:") {
            if let (Some(n), Some(sp), Ok(start)) = (node, spanned, v.trim().parse::<u64>()) {
                if sp > 0 {
                    out.push(PfnRange {
                        start_pfn: start,
                        end_pfn: start + sp,
                        node: n,
                    });
                }
            }
        }
    }
    merge_ranges(out)
}

/// Sorts ranges and joins neighbours of the same node, across holes too:
/// no page is ever allocated in a hole, and fewer ranges mean a shorter
/// search in the kernel.
pub fn merge_ranges(mut ranges: Vec<PfnRange>) -> Vec<PfnRange> {
    ranges.sort_by_key(|r| (r.start_pfn, r.end_pfn));
    let mut out: Vec<PfnRange> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.node == r.node => {
                last.end_pfn = last.end_pfn.max(r.end_pfn);
            }
            _ => out.push(r),
        }
    }
    out
}

/// The node of a page frame, by binary search over sorted ranges.
pub fn pfn_to_node(ranges: &[PfnRange], pfn: u64) -> Option<u32> {
    let i = ranges.partition_point(|r| r.start_pfn <= pfn);
    let r = ranges.get(i.checked_sub(1)?)?;
    (pfn < r.end_pfn).then_some(r.node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bootscope-topo-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn pfn_lookup() {
        let r = merge_ranges(vec![
            PfnRange {
                start_pfn: 0x100000,
                end_pfn: 0x200000,
                node: 1,
            },
            PfnRange {
                start_pfn: 1,
                end_pfn: 0x80000,
                node: 0,
            },
            PfnRange {
                start_pfn: 0x90000,
                end_pfn: 0x100000,
                node: 0,
            },
        ]);
        // Node 0's two ranges join across the hole.
        assert_eq!(r.len(), 2);
        assert_eq!(pfn_to_node(&r, 0), None);
        assert_eq!(pfn_to_node(&r, 1), Some(0));
        assert_eq!(pfn_to_node(&r, 0x85000), Some(0));
        assert_eq!(pfn_to_node(&r, 0xfffff), Some(0));
        assert_eq!(pfn_to_node(&r, 0x100000), Some(1));
        assert_eq!(pfn_to_node(&r, 0x1fffff), Some(1));
        assert_eq!(pfn_to_node(&r, 0x200000), None);
    }

    #[test]
    fn interleaved_nodes_stay_apart() {
        let r = merge_ranges(vec![
            PfnRange {
                start_pfn: 0,
                end_pfn: 10,
                node: 0,
            },
            PfnRange {
                start_pfn: 10,
                end_pfn: 20,
                node: 1,
            },
            PfnRange {
                start_pfn: 20,
                end_pfn: 30,
                node: 0,
            },
        ]);
        assert_eq!(r.len(), 3);
        assert_eq!(pfn_to_node(&r, 15), Some(1));
        assert_eq!(pfn_to_node(&r, 25), Some(0));
    }

    #[test]
    fn zoneinfo_parsing() {
        let text = "Node 0, zone      DMA
  pages free     3840
        spanned  4095
        present  3998
  start_pfn:           1
Node 0, zone   Normal
        spanned  1048576
  start_pfn:           1048576
Node 1, zone   Normal
        spanned  2097152
  start_pfn:           2097152
Node 1, zone  Movable
        spanned  0
  start_pfn:           0
";
        let r = zoneinfo_ranges(text);
        assert_eq!(
            r,
            vec![
                PfnRange {
                    start_pfn: 1,
                    end_pfn: 2097152,
                    node: 0
                },
                PfnRange {
                    start_pfn: 2097152,
                    end_pfn: 4194304,
                    node: 1
                },
            ]
        );
    }

    #[test]
    fn sysfs_two_nodes() {
        let root = scratch("two");
        let sys = root.join("sys/devices/system");
        std::fs::create_dir_all(sys.join("memory")).unwrap();
        std::fs::create_dir_all(sys.join("cpu")).unwrap();
        std::fs::write(sys.join("cpu/online"), "0-3\n").unwrap();
        std::fs::write(sys.join("memory/block_size_bytes"), "8000000\n").unwrap();
        for (n, cpus, blocks) in [(0u32, "0-1", [0u64, 1, 2]), (1, "2-3", [4, 5, 6])] {
            let d = sys.join(format!("node/node{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpulist"), cpus).unwrap();
            for b in blocks {
                std::fs::create_dir_all(d.join(format!("memory{b}"))).unwrap();
            }
        }
        let t = Topology::read(&root);
        assert_eq!(t.pfn_source, "sysfs memory blocks");
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.cpu_node(3), Some(1));
        assert_eq!(t.cpu_node(9), None);
        let per_block = 0x800_0000 / page_size();
        assert_eq!(t.pfn_node(0), Some(0));
        assert_eq!(t.pfn_node(3 * per_block - 1), Some(0));
        assert_eq!(t.pfn_node(4 * per_block), Some(1));
        assert_eq!(t.pfn_node(7 * per_block), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_numa_is_one_node() {
        let root = scratch("none");
        std::fs::create_dir_all(root.join("sys/devices/system/cpu")).unwrap();
        std::fs::write(root.join("sys/devices/system/cpu/online"), "0-1\n").unwrap();
        let t = Topology::read(&root);
        assert_eq!(
            t.nodes,
            vec![NumaNode {
                id: 0,
                cpus: vec![0, 1]
            }]
        );
        assert_eq!(t.pfn_source, "single node");
        assert_eq!(t.pfn_node(123456789), Some(0));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
