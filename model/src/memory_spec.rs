//! The grammar of guest memory as the user types it: sizes, huge page
//! sizes, NUMA policies and
//! `--numa node=ID,cpus=LIST,memory=SIZE,host-nodes=LIST,policy=...`.
//! The VMM plans memory from it; bench reads a configuration's guest
//! memory with it (a storm's memory check), so both know the same
//! spellings.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::cpulist::{CpuSet, IdSet, NodeSet};

pub use crate::size::{human_size, parse_size};

/// A size, list, policy or `--numa` option that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A CPU or node list that does not parse.
    #[error(transparent)]
    List(#[from] crate::cpulist::CpuListError),
    /// A size that does not parse.
    #[error(transparent)]
    Size(#[from] crate::size::SizeError),
    /// A huge page size the kernel does not offer on x86.
    #[error("huge page size {0:?} is not supported; use 2M or 1G")]
    BadHugePageSize(String),
    /// An unknown NUMA policy.
    #[error("NUMA policy {0:?} is unknown; use bind, preferred or interleave")]
    BadPolicy(String),
    /// A malformed `--numa` option.
    #[error("--numa {spec:?}: {why}; write it as node=ID,memory=SIZE[,cpus=LIST][,host-nodes=LIST][,policy=bind|preferred|interleave]")]
    BadNumaSpec { spec: String, why: String },
}

/// A hugetlb page size (`--hugepages 2M|1G`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum HugePageSize {
    /// 2 MiB pages.
    #[serde(rename = "2M")]
    Size2M,
    /// 1 GiB pages.
    #[serde(rename = "1G")]
    Size1G,
}

impl HugePageSize {
    /// Every size this crate knows.
    pub const ALL: [HugePageSize; 2] = [HugePageSize::Size2M, HugePageSize::Size1G];

    /// Page size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            HugePageSize::Size2M => 2 << 20,
            HugePageSize::Size1G => 1 << 30,
        }
    }

    /// The sysfs directory name of this size's pool (`hugepages-2048kB`).
    pub fn sysfs_dir(self) -> String {
        format!("hugepages-{}kB", self.bytes() >> 10)
    }

    /// The `memfd_create` flags selecting this size.
    pub fn memfd_flags(self) -> libc::c_uint {
        libc::MFD_HUGETLB
            | match self {
                HugePageSize::Size2M => libc::MFD_HUGE_2MB,
                HugePageSize::Size1G => libc::MFD_HUGE_1GB,
            }
    }
}

impl fmt::Display for HugePageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&human_size(self.bytes()))
    }
}

impl FromStr for HugePageSize {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let bad = || SpecError::BadHugePageSize(s.to_string());
        match parse_size(s).map_err(|_| bad())? {
            b if b == 2 << 20 => Ok(HugePageSize::Size2M),
            b if b == 1 << 30 => Ok(HugePageSize::Size1G),
            _ => Err(bad()),
        }
    }
}

/// How a region's pages are placed on its host nodes (mbind(2) modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Only these nodes (`MPOL_BIND`); allocation fails rather than spill.
    Bind,
    /// This node first, others when it is full (`MPOL_PREFERRED`).
    Preferred,
    /// Pages spread round-robin over the nodes (`MPOL_INTERLEAVE`).
    Interleave,
}

impl Policy {
    /// The mbind(2) mode.
    pub fn mode(self) -> libc::c_int {
        match self {
            Policy::Bind => libc::MPOL_BIND,
            Policy::Preferred => libc::MPOL_PREFERRED,
            Policy::Interleave => libc::MPOL_INTERLEAVE,
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Bind => "bind",
            Policy::Preferred => "preferred",
            Policy::Interleave => "interleave",
        })
    }
}

impl FromStr for Policy {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bind" => Ok(Policy::Bind),
            "preferred" => Ok(Policy::Preferred),
            "interleave" => Ok(Policy::Interleave),
            _ => Err(SpecError::BadPolicy(s.to_string())),
        }
    }
}

/// One `--numa` option: a guest NUMA node, its memory, and where that memory
/// lives on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaSpec {
    /// Guest node number (`node=`).
    pub node: u32,
    /// Guest vCPUs of this node (`cpus=`), possibly empty.
    pub cpus: CpuSet,
    /// Bytes of guest memory on this node (`memory=`).
    pub memory: u64,
    /// Host nodes backing it (`host-nodes=`); None leaves placement to the
    /// kernel.
    pub host_nodes: Option<NodeSet>,
    /// How pages are spread over `host_nodes` (`policy=`); None means bind
    /// when host nodes are given.
    pub policy: Option<Policy>,
}

const NUMA_KEYS: &str = "node, cpus, memory, host-nodes, policy";

impl FromStr for NumaSpec {
    type Err = SpecError;

    /// Parses `node=0,cpus=0-3,memory=1G,host-nodes=0,policy=bind`. Lists
    /// may continue after a comma (`cpus=0-3,8,memory=1G`) or repeat their
    /// key (`cpus=0-3,cpus=8`), since a comma also separates the keys.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let err = |why: String| SpecError::BadNumaSpec {
            spec: s.to_string(),
            why,
        };
        let mut node = None;
        let mut cpus: Option<CpuSet> = None;
        let mut memory = None;
        let mut host_nodes: Option<NodeSet> = None;
        let mut policy = None;
        let mut last_list_key: Option<&str> = None;
        for token in s.split(',') {
            let token = token.trim();
            if token.is_empty() {
                return Err(err("empty item between commas".into()));
            }
            let (key, value) = match token.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => match last_list_key {
                    Some(k) => (k, token),
                    None => {
                        return Err(err(format!(
                            "{token:?} is not KEY=VALUE (keys: {NUMA_KEYS})"
                        )))
                    }
                },
            };
            let list = |v: &str| IdSet::parse(v).map_err(|e| err(format!("{key}: {e}")));
            match key {
                "node" | "nodeid" => {
                    if node.is_some() {
                        return Err(err("node= given twice".into()));
                    }
                    node = Some(
                        value
                            .parse::<u32>()
                            .map_err(|_| err(format!("node={value:?} is not a node number")))?,
                    );
                }
                "cpus" => cpus.get_or_insert_with(IdSet::new).extend(&list(value)?),
                "host-nodes" | "host_nodes" => host_nodes
                    .get_or_insert_with(IdSet::new)
                    .extend(&list(value)?),
                "memory" | "mem" | "size" => {
                    if memory.is_some() {
                        return Err(err("memory= given twice".into()));
                    }
                    memory = Some(parse_size(value).map_err(|e| err(format!("memory: {e}")))?);
                }
                "policy" => {
                    if policy.is_some() {
                        return Err(err("policy= given twice".into()));
                    }
                    policy = Some(value.parse::<Policy>().map_err(|e| err(e.to_string()))?);
                }
                other => return Err(err(format!("unknown key {other:?} (keys: {NUMA_KEYS})"))),
            }
            last_list_key = match key {
                "cpus" => Some("cpus"),
                "host-nodes" | "host_nodes" => Some("host-nodes"),
                _ => None,
            };
        }
        let node = node.ok_or_else(|| err("missing node=ID".into()))?;
        let memory = memory.ok_or_else(|| err("missing memory=SIZE".into()))?;
        if let Some(h) = &host_nodes {
            if h.is_empty() {
                return Err(err(
                    "host-nodes= is empty; name at least one host node".into()
                ));
            }
        }
        Ok(NumaSpec {
            node,
            cpus: cpus.unwrap_or_default(),
            memory,
            host_nodes,
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_page_sizes() {
        assert_eq!("2M".parse::<HugePageSize>().unwrap(), HugePageSize::Size2M);
        assert_eq!(
            "2MiB".parse::<HugePageSize>().unwrap(),
            HugePageSize::Size2M
        );
        assert_eq!("1G".parse::<HugePageSize>().unwrap(), HugePageSize::Size1G);
        assert_eq!(
            "1048576k".parse::<HugePageSize>().unwrap(),
            HugePageSize::Size1G
        );
        let e = "4M".parse::<HugePageSize>().unwrap_err();
        assert!(e.to_string().contains("2M or 1G"), "{e}");
        assert_eq!(HugePageSize::Size2M.sysfs_dir(), "hugepages-2048kB");
        assert_eq!(HugePageSize::Size1G.sysfs_dir(), "hugepages-1048576kB");
        assert_eq!(HugePageSize::Size1G.to_string(), "1 GiB");
    }

    #[test]
    fn policies() {
        assert_eq!("bind".parse::<Policy>().unwrap(), Policy::Bind);
        assert_eq!("Interleave".parse::<Policy>().unwrap(), Policy::Interleave);
        assert_eq!(
            "preferred".parse::<Policy>().unwrap().mode(),
            libc::MPOL_PREFERRED
        );
        let e = "local".parse::<Policy>().unwrap_err();
        assert!(
            e.to_string().contains("bind, preferred or interleave"),
            "{e}"
        );
    }

    #[test]
    fn numa_spec_full() {
        let s: NumaSpec = "node=1,cpus=0-3,memory=1G,host-nodes=0-1,policy=interleave"
            .parse()
            .unwrap();
        assert_eq!(s.node, 1);
        assert_eq!(s.cpus.to_string(), "0-3");
        assert_eq!(s.memory, 1 << 30);
        assert_eq!(s.host_nodes.unwrap().to_string(), "0-1");
        assert_eq!(s.policy, Some(Policy::Interleave));
    }

    #[test]
    fn numa_spec_lists_continue_after_commas() {
        let s: NumaSpec = "node=0,cpus=0-3,8,10-11,memory=512M,host-nodes=0,2"
            .parse()
            .unwrap();
        assert_eq!(s.cpus.to_string(), "0-3,8,10-11");
        assert_eq!(s.host_nodes.unwrap().to_string(), "0,2");
        let s: NumaSpec = "node=0,cpus=0-1,cpus=4,memory=64".parse().unwrap();
        assert_eq!(s.cpus.to_string(), "0-1,4");
        assert_eq!(s.memory, 64 << 20);
        assert_eq!(s.host_nodes, None);
        assert_eq!(s.policy, None);
    }

    #[test]
    fn numa_spec_errors_name_the_problem() {
        let cases = [
            ("cpus=0,memory=1G", "missing node=ID"),
            ("node=0,cpus=0", "missing memory=SIZE"),
            ("node=0,memory=1G,color=red", "unknown key \"color\""),
            ("node=0,memory=1G,8", "not KEY=VALUE"),
            ("node=x,memory=1G", "not a node number"),
            ("node=0,memory=lots", "memory:"),
            (
                "node=0,memory=1G,policy=local",
                "bind, preferred or interleave",
            ),
            ("node=0,memory=1G,cpus=3-1", "cpus:"),
            ("node=0,memory=1G,,policy=bind", "empty item"),
            ("node=0,node=1,memory=1G", "node= given twice"),
        ];
        for (spec, want) in cases {
            let e = spec.parse::<NumaSpec>().unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(want), "{spec}: {msg}");
            assert!(
                msg.contains(spec),
                "{spec}: message should quote the input: {msg}"
            );
        }
    }
}
