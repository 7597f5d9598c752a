//! Guest ingredients from the host's Debian packages: the kernel
//! (`linux-image-amd64`), its KVM modules, and static busybox
//! (`busybox-static`), plus the project's default guest initramfs.

use std::fs;
use std::path::{Path, PathBuf};

use crate::cpio::Builder;
use crate::elf::{self, Linkage};
use crate::util;
use crate::{LabError, Result};
use bootscope_model::output::OutputFile;

/// Where Debian's `busybox-static` package installs busybox.
pub const BUSYBOX: &str = "/bin/busybox";

/// The line the default guest prints once its userspace runs.
pub const HELLO_LINE: &str = "bootscope-guest: hello from userspace";

/// The byte the default guest writes to I/O port 0x80 when its userspace
/// starts. Cloud Hypervisor's debug-port convention reserves 0x60..=0x7f
/// for userspace, so VMMs that follow it can timestamp this moment.
pub const USERSPACE_START_MARKER: u8 = 0x60;

/// Directory of the kernel images.
const BOOT_DIR: &str = "/boot";
/// Root of the per-version module trees.
const MODULES_ROOT: &str = "/lib/modules";
/// Relative path of the AMD KVM module inside a module tree, without suffix.
const KVM_AMD: &str = "kernel/arch/x86/kvm/kvm-amd";
/// Suffixes a module file can have (uncompressed and compressed).
const MODULE_SUFFIXES: [&str; 4] = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"];

/// An installed Debian kernel that can host nested KVM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianKernel {
    /// Kernel release, e.g. `6.1.0-56-amd64`.
    pub version: String,
    /// The bootable image, `/boot/vmlinuz-<version>`.
    pub vmlinuz: PathBuf,
    /// Its module tree, `/lib/modules/<version>`.
    pub modules_dir: PathBuf,
}

/// Finds the newest `/boot/vmlinuz-<version>` whose module tree has the
/// `kvm-amd` module (plain or compressed).
///
/// The lab boots this kernel under QEMU's emulator and loads `kvm_amd` in
/// it; a kernel without that module is useless for the lab.
pub fn find_debian_kernel() -> Result<DebianKernel> {
    find_debian_kernel_in(Path::new(BOOT_DIR), Path::new(MODULES_ROOT))
}

/// [`find_debian_kernel`] with explicit directories (for tests and for
/// hosts that keep kernels elsewhere).
pub fn find_debian_kernel_in(boot_dir: &Path, modules_root: &Path) -> Result<DebianKernel> {
    let entries = fs::read_dir(boot_dir).map_err(|e| LabError::KernelNotFound {
        details: format!("cannot list {}: {e}", boot_dir.display()),
    })?;
    let mut versions = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(version) = name.to_str().and_then(|n| n.strip_prefix("vmlinuz-")) else {
            continue;
        };
        if !version.is_empty() && entry.path().is_file() {
            versions.push(version.to_string());
        }
    }
    if versions.is_empty() {
        return Err(LabError::KernelNotFound {
            details: format!("{} has no vmlinuz-<version> image", boot_dir.display()),
        });
    }
    versions.sort_by(|a, b| util::compare_versions(b, a));
    let mut lacking = Vec::new();
    for version in &versions {
        let modules_dir = modules_root.join(version);
        if find_module_file(&modules_dir, KVM_AMD).is_some() {
            return Ok(DebianKernel {
                version: version.clone(),
                vmlinuz: boot_dir.join(format!("vmlinuz-{version}")),
                modules_dir,
            });
        }
        lacking.push(format!("{} has no {KVM_AMD}.ko", modules_dir.display()));
    }
    Err(LabError::KernelNotFound {
        details: format!(
            "found kernel {} in {}, but {}",
            versions.join(", "),
            boot_dir.display(),
            lacking.join("; ")
        ),
    })
}

/// Finds `<modules_dir>/<rel_without_suffix>{.ko,.ko.xz,.ko.zst,.ko.gz}`.
fn find_module_file(modules_dir: &Path, rel_without_suffix: &str) -> Option<PathBuf> {
    MODULE_SUFFIXES
        .iter()
        .map(|suffix| modules_dir.join(format!("{rel_without_suffix}{suffix}")))
        .find(|p| p.is_file())
}

/// Returns the static busybox binary, or an error saying how to install it.
pub fn static_busybox() -> Result<PathBuf> {
    let path = PathBuf::from(BUSYBOX);
    if !path.is_file() {
        return Err(LabError::BusyboxMissing { path });
    }
    match elf::linkage(&path)? {
        Linkage::Static => Ok(path),
        Linkage::Dynamic(_) | Linkage::NotElf64 => Err(LabError::BusyboxNotStatic { path }),
    }
}

/// The `/init` of the default guest.
///
/// Every step goes through `/bin/busybox` explicitly, so the archive needs
/// no applet links; `echo`, `printf` and `[` are shell builtins.
fn default_init_script() -> String {
    format!(
        r#"#!/bin/sh
# bootscope's default guest: reach userspace, say so, mark it, power off.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
echo '{HELLO_LINE}'
# Userspace-start marker: byte {marker:#04x} to I/O port 0x80 (offset 128 of /dev/port).
[ -c /dev/port ] || /bin/busybox mknod /dev/port c 1 4
printf '\{marker:03o}' | /bin/busybox dd of=/dev/port bs=1 seek=128 count=1 conv=notrunc 2>/dev/null
/bin/busybox poweroff -f
"#,
        marker = USERSPACE_START_MARKER
    )
}

/// Builds the project's default guest initramfs at `out_path`.
///
/// The guest is static busybox and an `/init` that mounts proc, sysfs and
/// devtmpfs, prints [`HELLO_LINE`] on the console, writes
/// [`USERSPACE_START_MARKER`] to I/O port 0x80 through `/dev/port`, and
/// powers off. `/dev/console` is in the archive itself because the kernel
/// opens it for `/init` before anything is mounted.
///
/// The archive is uncompressed and written atomically (temporary file and
/// rename), so a concurrent reader never sees half an archive.
pub fn build_default_initramfs(out_path: &Path) -> Result<()> {
    let busybox = static_busybox()?;
    let mut file = OutputFile::create_with_mode(out_path, 0o644)?;
    {
        let writer = std::io::BufWriter::new(file.file_mut());
        let mut cpio = Builder::new(writer);
        for dir in ["dev", "proc", "sys", "bin", "root", "tmp"] {
            cpio.add_dir(dir, 0o755)?;
        }
        cpio.add_char_device("dev/console", 5, 1, 0o600)?;
        cpio.add_file_from_host("bin/busybox", &busybox, 0o755)?;
        cpio.add_symlink("bin/sh", "busybox")?;
        cpio.add_file_bytes("init", default_init_script().as_bytes(), 0o755)?;
        cpio.finish()?;
    }
    Ok(file.commit()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::{read_entries, EntryKind};

    #[test]
    fn kernel_search_picks_newest_with_kvm_amd() {
        let dir = util::temp_dir("guest-test").unwrap();
        let boot = dir.path().join("boot");
        let modules = dir.path().join("modules");
        fs::create_dir_all(&boot).unwrap();
        for v in ["6.1.0-9-amd64", "6.1.0-56-amd64", "6.10.0-1-amd64"] {
            fs::write(boot.join(format!("vmlinuz-{v}")), b"k").unwrap();
        }
        fs::write(boot.join("config-6.1.0-56-amd64"), b"").unwrap();
        let err = find_debian_kernel_in(&boot, &modules).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("kvm-amd"), "{msg}");
        assert!(msg.contains("apt-get install linux-image-amd64"), "{msg}");

        // 6.1.0-9 and 6.1.0-56 have the module (compressed), 6.10 does not.
        for v in ["6.1.0-9-amd64", "6.1.0-56-amd64"] {
            let kvm = modules.join(v).join("kernel/arch/x86/kvm");
            fs::create_dir_all(&kvm).unwrap();
            fs::write(kvm.join("kvm-amd.ko.xz"), b"m").unwrap();
        }
        let k = find_debian_kernel_in(&boot, &modules).unwrap();
        assert_eq!(k.version, "6.1.0-56-amd64");
        assert_eq!(k.vmlinuz, boot.join("vmlinuz-6.1.0-56-amd64"));
        assert_eq!(k.modules_dir, modules.join("6.1.0-56-amd64"));

        let empty = dir.path().join("empty");
        fs::create_dir_all(&empty).unwrap();
        let msg = find_debian_kernel_in(&empty, &modules)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("no vmlinuz"), "{msg}");
    }

    #[test]
    fn default_init_marks_userspace() {
        let script = default_init_script();
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(script.contains("echo 'bootscope-guest: hello from userspace'\n"));
        // 0x60 is octal 140.
        assert!(script.contains(r"printf '\140' | /bin/busybox dd of=/dev/port bs=1 seek=128"));
        assert!(script.contains("mknod /dev/port c 1 4"));
        assert!(script.trim_end().ends_with("poweroff -f"));
    }

    #[test]
    fn default_initramfs_contents() {
        if let Err(e) = static_busybox() {
            println!("SKIP default_initramfs_contents: {e}");
            return;
        }
        let dir = util::temp_dir("guest-test").unwrap();
        let out = dir.path().join("guest.cpio");
        build_default_initramfs(&out).unwrap();
        let bytes = fs::read(&out).unwrap();
        let entries = read_entries(&bytes).unwrap();
        let get = |n: &str| entries.iter().find(|e| e.name == Path::new(n));
        let init = get("init").unwrap();
        assert_eq!(init.mode, 0o100755);
        assert_eq!(init.data, default_init_script().as_bytes());
        let console = get("dev/console").unwrap();
        assert_eq!(console.kind, EntryKind::CharDevice);
        assert_eq!((console.rdev_major, console.rdev_minor), (5, 1));
        assert_eq!(get("bin/busybox").unwrap().data, fs::read(BUSYBOX).unwrap());
        assert_eq!(get("bin/sh").unwrap().data, b"busybox");
        // Only the archive is left in the directory.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn default_initramfs_into_missing_directory_fails_cleanly() {
        let dir = util::temp_dir("guest-test").unwrap();
        let out = dir.path().join("no/such/dir/guest.cpio");
        let err = build_default_initramfs(&out).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("no/such/dir") || msg.contains("busybox"),
            "{msg}"
        );
    }
}
