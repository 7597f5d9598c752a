//! What the lab tests need: the lab itself (QEMU, Debian's kernel and kvm
//! modules) and, for real boots, the default guest's initramfs. Each check
//! prints SKIP with the reason when something is missing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub struct Prereqs {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// A scratch directory of this test (the initramfs is in it).
    pub dir: PathBuf,
}

/// Debian's kernel when the lab can run here.
pub fn lab_kernel() -> Option<PathBuf> {
    if let Err(e) = bootscope_lab::outer::check_prerequisites(Path::new("qemu-system-x86_64")) {
        eprintln!("SKIP: the lab is unavailable here: {e}");
        return None;
    }
    match bootscope_lab::guest::find_debian_kernel() {
        Ok(k) => Some(k.vmlinuz),
        Err(e) => {
            eprintln!("SKIP: {e}");
            None
        }
    }
}

/// The lab, plus the default guest built into a scratch directory named
/// after `tag`.
pub fn prereqs(tag: &str) -> Option<Prereqs> {
    let kernel = lab_kernel()?;
    let dir = std::env::temp_dir().join(format!("bootscope-labtest-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let initrd = dir.join("guest.cpio");
    if let Err(e) = bootscope_lab::guest::build_default_initramfs(&initrd) {
        eprintln!("SKIP: cannot build the default guest: {e}");
        return None;
    }
    Some(Prereqs {
        kernel,
        initrd,
        dir,
    })
}

/// QEMU on this host, to carry into the lab, and the directory of its
/// microvm firmware (carried in with `--input`).
pub fn qemu_for_the_lab() -> Option<(PathBuf, &'static Path)> {
    let Some(qemu) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("qemu-system-x86_64"))
            .find(|q| q.is_file())
    }) else {
        eprintln!("SKIP: qemu-system-x86_64 is not on PATH");
        return None;
    };
    let firmware = Path::new("/usr/share/qemu");
    if !firmware.join("bios-microvm.bin").is_file() {
        eprintln!("SKIP: QEMU's microvm firmware /usr/share/qemu/bios-microvm.bin is missing");
        return None;
    }
    Some((qemu, firmware))
}
