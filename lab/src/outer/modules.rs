//! The host kernel's KVM modules for the outer guest, in load order and
//! decompressed.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::guest::DebianKernel;
use crate::{LabError, Result};

/// Kernel module that provides nested KVM; its dependencies come from
/// `modules.dep`.
const ROOT_MODULE: &str = "kvm_amd";

/// A kernel module ready to be put into the archive.
pub(crate) struct Module {
    /// Module name as in `lsmod` (`kvm_amd`).
    pub(crate) name: String,
    /// Path in the guest, always an uncompressed `.ko`.
    pub(crate) guest: PathBuf,
    /// Uncompressed contents.
    pub(crate) contents: Vec<u8>,
}

/// The KVM modules in load order (dependencies first), decompressed.
pub(super) fn kvm_modules(kernel: &DebianKernel) -> Result<Vec<Module>> {
    modules_with_deps(kernel, ROOT_MODULE)
}

/// The module `root` (a name as in `lsmod`) and the modules it needs, in
/// load order (dependencies first), decompressed.
pub(crate) fn modules_with_deps(kernel: &DebianKernel, root: &str) -> Result<Vec<Module>> {
    let dep_path = kernel.modules_dir.join("modules.dep");
    let text = fs::read_to_string(&dep_path).map_err(|e| LabError::ModuleDep {
        module: root.into(),
        modules_dep: dep_path.clone(),
        reason: e.to_string(),
    })?;
    let order = module_load_order(&text, root).map_err(|reason| LabError::ModuleDep {
        module: root.into(),
        modules_dep: dep_path.clone(),
        reason,
    })?;
    let guest_dir = Path::new("/lib/modules").join(&kernel.version);
    order
        .into_iter()
        .map(|rel| {
            let host = kernel.modules_dir.join(&rel);
            let contents = read_module(&host)?;
            let plain = strip_compression_suffix(&rel);
            Ok(Module {
                name: module_name(&rel),
                guest: guest_dir.join(plain),
                contents,
            })
        })
        .collect()
}

/// Resolves `root` (a module name) and its dependencies from the text of
/// `modules.dep`, returning module paths relative to the module tree in an
/// order `insmod` can load them.
fn module_load_order(modules_dep: &str, root: &str) -> std::result::Result<Vec<String>, String> {
    let mut deps: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut by_name: HashMap<String, &str> = HashMap::new();
    for line in modules_dep.lines() {
        let Some((module, rest)) = line.split_once(':') else {
            continue;
        };
        let module = module.trim();
        deps.insert(module, rest.split_whitespace().collect());
        by_name.insert(module_name(module), module);
    }
    let start = by_name
        .get(&module_name(root))
        .copied()
        .ok_or_else(|| format!("it lists no module named {root}"))?;
    let mut order = Vec::new();
    let mut done = HashSet::new();
    let mut in_progress = HashSet::new();
    fn visit<'a>(
        module: &'a str,
        deps: &HashMap<&'a str, Vec<&'a str>>,
        done: &mut HashSet<&'a str>,
        in_progress: &mut HashSet<&'a str>,
        order: &mut Vec<String>,
    ) -> std::result::Result<(), String> {
        if done.contains(module) {
            return Ok(());
        }
        if !in_progress.insert(module) {
            return Err(format!("its dependencies of {module} form a cycle"));
        }
        let list = deps
            .get(module)
            .ok_or_else(|| format!("{module} is needed but has no entry of its own"))?;
        // modprobe loads the listed dependencies from last to first.
        for dep in list.iter().rev() {
            visit(dep, deps, done, in_progress, order)?;
        }
        in_progress.remove(module);
        done.insert(module);
        order.push(module.to_string());
        Ok(())
    }
    visit(start, &deps, &mut done, &mut in_progress, &mut order)?;
    Ok(order)
}

/// `kernel/arch/x86/kvm/kvm-amd.ko.xz` -> `kvm_amd`.
fn module_name(path_or_name: &str) -> String {
    let base = path_or_name.rsplit('/').next().unwrap_or(path_or_name);
    let base = base.split(".ko").next().unwrap_or(base);
    base.replace('-', "_")
}

fn strip_compression_suffix(rel: &str) -> &str {
    for suffix in [".xz", ".zst", ".gz"] {
        if let Some(stripped) = rel.strip_suffix(suffix) {
            return stripped;
        }
    }
    rel
}

/// Reads a module, decompressing `.ko.xz`, `.ko.zst` and `.ko.gz` with the
/// host's tools: busybox `insmod` cannot be relied on to do it.
fn read_module(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let (tool, package) = if name.ends_with(".ko.xz") {
        ("xz", "xz-utils")
    } else if name.ends_with(".ko.zst") {
        ("zstd", "zstd")
    } else if name.ends_with(".ko.gz") {
        ("gzip", "gzip")
    } else {
        return fs::read(path).map_err(|e| LabError::io("read", path, e));
    };
    let fail = |reason: String| LabError::ModuleDecompress {
        path: path.to_path_buf(),
        tool,
        package,
        reason,
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest;

    #[test]
    fn module_order_from_modules_dep() {
        let dep = "kernel/arch/x86/kvm/kvm.ko.xz: kernel/virt/lib/irqbypass.ko.xz\n\
                   kernel/arch/x86/kvm/kvm-amd.ko.xz: kernel/drivers/crypto/ccp/ccp.ko.xz kernel/arch/x86/kvm/kvm.ko.xz kernel/virt/lib/irqbypass.ko.xz\n\
                   kernel/drivers/crypto/ccp/ccp.ko.xz:\n\
                   kernel/virt/lib/irqbypass.ko.xz:\n";
        assert_eq!(
            module_load_order(dep, "kvm_amd").unwrap(),
            vec![
                "kernel/virt/lib/irqbypass.ko.xz",
                "kernel/arch/x86/kvm/kvm.ko.xz",
                "kernel/drivers/crypto/ccp/ccp.ko.xz",
                "kernel/arch/x86/kvm/kvm-amd.ko.xz",
            ]
        );
        assert!(module_load_order(dep, "kvm_intel").is_err());
        let broken = "a.ko: b.ko\n";
        assert!(module_load_order(broken, "a").unwrap_err().contains("b.ko"));
        let cycle = "a.ko: b.ko\nb.ko: a.ko\n";
        assert!(module_load_order(cycle, "a").unwrap_err().contains("cycle"));
        assert_eq!(module_name("kernel/arch/x86/kvm/kvm-amd.ko.zst"), "kvm_amd");
        assert_eq!(strip_compression_suffix("x/kvm.ko.zst"), "x/kvm.ko");
        assert_eq!(strip_compression_suffix("x/kvm.ko"), "x/kvm.ko");
    }

    #[test]
    fn host_modules_resolve() {
        let Ok(kernel) = guest::find_debian_kernel() else {
            println!("SKIP host_modules_resolve: no Debian kernel with kvm-amd installed");
            return;
        };
        let modules = kvm_modules(&kernel).unwrap();
        let names: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names.last(), Some(&"kvm_amd"));
        let pos = |n: &str| names.iter().position(|m| *m == n).unwrap();
        assert!(pos("kvm") < pos("kvm_amd"));
        assert!(pos("irqbypass") < pos("kvm"));
        for m in &modules {
            assert!(
                m.contents.starts_with(b"\x7fELF"),
                "{} is not an ELF object",
                m.name
            );
            assert!(m.guest.to_string_lossy().ends_with(".ko"));
        }
    }
}
