//! Which KVM backend this host runs, read from its loaded modules (and,
//! where none is loaded, from the CPU's flags). Every probe takes an
//! injectable root so tests can use a fake tree.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Which KVM backend the host runs. Serialized (and [`KvmFlavour::as_str`])
/// as `vmx`, `svm`, `pvm` or `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvmFlavour {
    /// Intel VT-x (kvm_intel).
    Vmx,
    /// AMD-V (kvm_amd).
    Svm,
    /// Pagetable-based Virtual Machine (kvm_pvm): only PVM guests run at full
    /// speed; anything else goes through the instruction emulator.
    Pvm,
    /// No usable /dev/kvm.
    None,
}

impl KvmFlavour {
    /// Whether a stock (non-PVM) Linux kernel boots at full speed.
    pub fn boots_stock_kernels(self) -> bool {
        matches!(self, KvmFlavour::Vmx | KvmFlavour::Svm)
    }

    /// The short name: `vmx`, `svm`, `pvm` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            KvmFlavour::Vmx => "vmx",
            KvmFlavour::Svm => "svm",
            KvmFlavour::Pvm => "pvm",
            KvmFlavour::None => "none",
        }
    }
}

impl fmt::Display for KvmFlavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvmFlavour::Vmx => "VMX (Intel VT-x, kvm_intel)",
            KvmFlavour::Svm => "SVM (AMD-V, kvm_amd)",
            KvmFlavour::Pvm => "PVM (kvm_pvm)",
            KvmFlavour::None => "none",
        })
    }
}

/// Roots of the files the probes read (`/` in production).
#[derive(Clone, Debug)]
pub struct HostRoot(pub PathBuf);

impl Default for HostRoot {
    fn default() -> Self {
        Self(PathBuf::from("/"))
    }
}

impl HostRoot {
    /// `p` (an absolute path on the host) below this root.
    pub fn path(&self, p: &str) -> PathBuf {
        self.0.join(p.trim_start_matches('/'))
    }
}

/// Which KVM backend modules are loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvmModules {
    /// `kvm_pvm`.
    pub pvm: bool,
    /// `kvm_intel`.
    pub intel: bool,
    /// `kvm_amd`.
    pub amd: bool,
}

/// The KVM backend modules loaded under `root` (`/sys/module/NAME`).
pub fn kvm_modules(root: &HostRoot) -> KvmModules {
    let module = |m: &str| root.path(&format!("/sys/module/{m}")).exists();
    KvmModules {
        pvm: module("kvm_pvm"),
        intel: module("kvm_intel"),
        amd: module("kvm_amd"),
    }
}

/// Detects the KVM flavour: none without `/dev/kvm`; else from the loaded
/// modules (kvm_pvm first), falling back to the CPU's `vmx`/`svm` flags.
pub fn kvm_flavour(root: &HostRoot) -> KvmFlavour {
    if !root.path("/dev/kvm").exists() {
        return KvmFlavour::None;
    }
    let modules = kvm_modules(root);
    if modules.pvm {
        return KvmFlavour::Pvm;
    }
    if modules.intel {
        return KvmFlavour::Vmx;
    }
    if modules.amd {
        return KvmFlavour::Svm;
    }
    let cpuinfo = std::fs::read_to_string(root.path("/proc/cpuinfo")).unwrap_or_default();
    let has_flag = |f: &str| {
        cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|w| w == f))
    };
    if has_flag("vmx") {
        KvmFlavour::Vmx
    } else if has_flag("svm") {
        KvmFlavour::Svm
    } else {
        KvmFlavour::None
    }
}

/// One line of `bootscope doctor`: each crate reports what it needs of the
/// host, and the CLI prints the lines together.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    pub item: String,
    pub ok: bool,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for p in paths {
            let full = t.path().join(p.trim_start_matches('/'));
            if p.ends_with('/') {
                std::fs::create_dir_all(&full).unwrap();
            } else {
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(&full, "").unwrap();
            }
        }
        t
    }

    fn flavour(t: &tempfile::TempDir) -> KvmFlavour {
        kvm_flavour(&HostRoot(t.path().to_path_buf()))
    }

    #[test]
    fn flavour_from_modules() {
        let t = tree(&["/dev/kvm", "/sys/module/kvm/", "/sys/module/kvm_pvm/"]);
        assert_eq!(flavour(&t), KvmFlavour::Pvm);
        let t = tree(&["/dev/kvm", "/sys/module/kvm_amd/"]);
        assert_eq!(flavour(&t), KvmFlavour::Svm);
        let t = tree(&["/dev/kvm", "/sys/module/kvm_intel/"]);
        assert_eq!(flavour(&t), KvmFlavour::Vmx);
        let t = tree(&["/sys/module/kvm_intel/"]);
        assert_eq!(flavour(&t), KvmFlavour::None);
        let m = kvm_modules(&HostRoot(tree(&["/sys/module/kvm_amd/"]).path().into()));
        assert_eq!(
            m,
            KvmModules {
                amd: true,
                ..Default::default()
            }
        );
    }

    #[test]
    fn flavour_from_cpu_flags() {
        let t = tree(&["/dev/kvm"]);
        std::fs::create_dir_all(t.path().join("proc")).unwrap();
        std::fs::write(t.path().join("proc/cpuinfo"), "flags\t\t: fpu svm lm\n").unwrap();
        assert_eq!(flavour(&t), KvmFlavour::Svm);
    }

    #[test]
    fn names_are_the_json_names() {
        for f in [
            KvmFlavour::Vmx,
            KvmFlavour::Svm,
            KvmFlavour::Pvm,
            KvmFlavour::None,
        ] {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.as_str()));
        }
    }
}
