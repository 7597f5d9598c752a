//! What this host offers the VMM: KVM, NUMA nodes, huge page pools, QEMU
//! for the lab. `bootscope doctor` prints these beside what the profiler
//! reports of tracefs, BPF and BTF.
//! Every probe takes an injectable root so tests can use a fake tree.

use std::path::PathBuf;

use serde::Serialize;

pub use bootscope_model::host::{kvm_flavour, Finding, HostRoot, KvmFlavour};

/// A huge page pool.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HugePagePool {
    pub size_kib: u64,
    pub total: u64,
    pub free: u64,
}

/// Lists huge page pools under sysfs.
pub fn huge_page_pools(root: &HostRoot) -> Vec<HugePagePool> {
    let mut pools = Vec::new();
    let dir = root.path("/sys/kernel/mm/hugepages");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return pools;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(size) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|s| s.parse().ok())
        else {
            continue;
        };
        let read = |f: &str| {
            std::fs::read_to_string(e.path().join(f))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        pools.push(HugePagePool {
            size_kib: size,
            total: read("nr_hugepages"),
            free: read("free_hugepages"),
        });
    }
    pools.sort_by_key(|p| p.size_kib);
    pools
}

/// NUMA node ids under sysfs.
pub fn numa_nodes(root: &HostRoot) -> Vec<u32> {
    let mut nodes: Vec<u32> = std::fs::read_dir(root.path("/sys/devices/system/node"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_prefix("node")
                        .and_then(|n| n.parse().ok())
                })
                .collect()
        })
        .unwrap_or_default();
    nodes.sort_unstable();
    nodes
}

/// Searches PATH for a program.
pub fn which(program: &str) -> Option<PathBuf> {
    bootscope_model::proc::find_in_path(program, &std::env::var_os("PATH")?)
}

/// `bootscope doctor`'s KVM lines: the flavour and whether `/dev/kvm`
/// opens.
pub fn kvm_findings(root: &HostRoot) -> Vec<Finding> {
    let mut out = Vec::new();
    let flavour = kvm_flavour(root);
    let kvm_detail = match flavour {
        KvmFlavour::Vmx | KvmFlavour::Svm => format!("{flavour}: stock kernels boot at full speed"),
        KvmFlavour::Pvm => format!(
            "{flavour}: only PVM guest kernels run natively; a stock kernel runs through the \
             instruction emulator and never finishes booting; use `bootscope lab` for real KVM"
        ),
        KvmFlavour::None => "no /dev/kvm: load kvm_intel or kvm_amd, or use `bootscope lab`".into(),
    };
    out.push(Finding {
        item: "kvm".into(),
        ok: flavour.boots_stock_kernels(),
        detail: kvm_detail,
    });
    let devkvm = root.path("/dev/kvm");
    let open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&devkvm);
    out.push(Finding {
        item: "/dev/kvm".into(),
        ok: open.is_ok(),
        detail: match open {
            Ok(_) => "opens read-write".into(),
            Err(e) => format!("cannot open: {e} (run as root or join the kvm group)"),
        },
    });
    out
}

/// `bootscope doctor`'s memory and lab lines: NUMA nodes, huge page
/// pools, QEMU.
pub fn memory_findings(root: &HostRoot) -> Vec<Finding> {
    let mut out = Vec::new();
    let nodes = numa_nodes(root);
    out.push(Finding {
        item: "numa".into(),
        ok: !nodes.is_empty(),
        detail: format!(
            "{} node(s): {}",
            nodes.len(),
            nodes
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    });
    let pools = huge_page_pools(root);
    out.push(Finding {
        item: "hugepages".into(),
        ok: !pools.is_empty(),
        detail: if pools.is_empty() {
            "no huge page pools".into()
        } else {
            pools
                .iter()
                .map(|p| format!("{} KiB: {} total, {} free", p.size_kib, p.total, p.free))
                .collect::<Vec<_>>()
                .join("; ")
        },
    });
    let qemu = which("qemu-system-x86_64");
    out.push(Finding {
        item: "qemu".into(),
        ok: qemu.is_some(),
        detail: match qemu {
            Some(p) => format!("{} (needed by `bootscope lab`)", p.display()),
            None => "qemu-system-x86_64 not found: apt-get install qemu-system-x86 (needed by `bootscope lab`)".into(),
        },
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[&str]) -> tempdir::TempTree {
        let t = tempdir::TempTree::new();
        for f in files {
            let p = t.0.join(f.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            if f.ends_with('/') {
                std::fs::create_dir_all(&p).unwrap();
            } else {
                std::fs::write(&p, "").unwrap();
            }
        }
        t
    }

    mod tempdir {
        pub struct TempTree(pub std::path::PathBuf);
        impl TempTree {
            pub fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "bootscope-host-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::SeqCst)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
        }
        impl Drop for TempTree {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn pools_and_nodes() {
        let t = tree(&[
            "/sys/devices/system/node/node0/",
            "/sys/devices/system/node/node1/",
            "/sys/devices/system/node/possible",
        ]);
        let dir = t.0.join("sys/kernel/mm/hugepages/hugepages-2048kB");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("nr_hugepages"), "16\n").unwrap();
        std::fs::write(dir.join("free_hugepages"), "4\n").unwrap();
        let root = HostRoot(t.0.clone());
        assert_eq!(numa_nodes(&root), [0, 1]);
        assert_eq!(
            huge_page_pools(&root),
            [HugePagePool {
                size_kib: 2048,
                total: 16,
                free: 4
            }]
        );
    }
}
