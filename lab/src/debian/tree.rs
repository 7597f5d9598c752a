//! The image's root tree: Debian's packages through `mmdebstrap`, then the
//! files bootscope adds (workload unit and script, fstab, hostname,
//! machine id, masked prompts and gettys) and the kernel's virtio modules.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::{io_err, DebianImageSpec, GuestBuildError, PACKAGES, WORKLOAD_MARKER};
use super::{MANAGER_PROPERTIES, UNIT_PROPERTIES};
use crate::guest::DebianKernel;

const WORKLOAD_SCRIPT: &str = include_str!("workload.sh");
const WORKLOAD_UNIT: &str = include_str!("bootscope-workload.service");
const FSTAB: &str = include_str!("fstab");
/// The unit's name.
pub const WORKLOAD_UNIT_NAME: &str = "bootscope-workload.service";

/// The kernel modules copied into the image, relative to its module tree:
/// the initrd loads the disk's (virtio_mmio, virtio_blk); the console and
/// the entropy source (`--console virtio`, `--rng`) are loaded by udev
/// from the root file system.
const MODULES: [&str; 6] = [
    "kernel/drivers/virtio/virtio.ko",
    "kernel/drivers/virtio/virtio_ring.ko",
    "kernel/drivers/virtio/virtio_mmio.ko",
    "kernel/drivers/block/virtio_blk.ko",
    "kernel/drivers/char/virtio_console.ko",
    "kernel/drivers/char/hw_random/virtio-rng.ko",
];
/// The module tree's lists of built-in modules, which modprobe reads.
const MODULE_LISTS: [&str; 3] = [
    "modules.builtin",
    "modules.builtin.modinfo",
    "modules.order",
];

/// The workload script with its placeholders filled.
fn workload_script(keep_running: bool) -> String {
    let finish = if keep_running {
        "echo 'bootscope-workload: done; the guest stays up (built with --keep-running)'"
    } else {
        "systemctl poweroff --no-block"
    };
    WORKLOAD_SCRIPT
        .replace("@MARKER@", &format!("0x{WORKLOAD_MARKER:02x}"))
        .replace("@MANAGER_PROPERTIES@", MANAGER_PROPERTIES)
        .replace("@UNIT_PROPERTIES@", UNIT_PROPERTIES)
        .replace("@FINISH@", finish)
}

/// A machine id (32 hex digits) derived from the build's inputs: a root
/// with an empty one is a first boot, which starts systemd-firstboot's
/// prompts.
fn machine_id(spec: &DebianImageSpec) -> String {
    let mut h = Sha256::new();
    h.update(spec.suite.as_bytes());
    h.update(spec.size.to_le_bytes());
    h.update([u8::from(spec.keep_running)]);
    let id: String = h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{id}\n")
}

/// The regular files bootscope adds, as (path in the image, contents).
pub(super) fn added_files(spec: &DebianImageSpec) -> Vec<(String, String)> {
    vec![
        (
            "/usr/local/sbin/bootscope-workload".into(),
            workload_script(spec.keep_running),
        ),
        (
            format!("/etc/systemd/system/{WORKLOAD_UNIT_NAME}"),
            WORKLOAD_UNIT.into(),
        ),
        ("/etc/fstab".into(), FSTAB.into()),
        ("/etc/hostname".into(), "bootscope-guest\n".into()),
        ("/etc/machine-id".into(), machine_id(spec)),
    ]
}

/// Links bootscope adds: enable the workload, mask the prompts and the
/// gettys that would wait on a terminal nobody has.
fn added_links(keep_running: bool) -> Vec<(&'static str, &'static str)> {
    let mut links = vec![
        (
            "/etc/systemd/system/multi-user.target.wants/bootscope-workload.service",
            "../bootscope-workload.service",
        ),
        ("/etc/systemd/system/systemd-firstboot.service", "/dev/null"),
        ("/etc/systemd/system/getty@tty1.service", "/dev/null"),
        ("/etc/systemd/system/autovt@.service", "/dev/null"),
        // Debian's getty-static starts gettys on tty2-6 without dbus.
        ("/etc/systemd/system/getty-static.service", "/dev/null"),
    ];
    if !keep_running {
        // A login prompt on the serial console would only cost exits.
        links.push(("/etc/systemd/system/serial-getty@.service", "/dev/null"));
    }
    links
}

/// The kernel's virtio modules and module lists, as (path relative to the
/// module tree, contents).
pub(super) fn virtio_modules(
    kernel: &DebianKernel,
) -> Result<Vec<(String, Vec<u8>)>, GuestBuildError> {
    let mut out = Vec::new();
    for rel in MODULES.iter().chain(MODULE_LISTS.iter()) {
        let path = kernel.modules_dir.join(rel);
        match fs::read(&path) {
            Ok(bytes) => out.push(((*rel).to_string(), bytes)),
            // A kernel with a driver built in has no module for it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("read", &path)(e)),
        }
    }
    Ok(out)
}

/// Network errors in apt's and mmdebstrap's output.
const NETWORK_ERRORS: [&str; 6] = [
    "Temporary failure resolving",
    "Could not resolve",
    "Could not connect",
    "Unable to connect",
    "Failed to fetch",
    "Network is unreachable",
];

/// Runs mmdebstrap into `root`, its output kept in `log`.
pub(super) fn mmdebstrap(suite: &str, root: &Path, log: &Path) -> Result<(), GuestBuildError> {
    let log_file = fs::File::create(log).map_err(io_err("create", log))?;
    let log_err = log_file.try_clone().map_err(io_err("open", log))?;
    let status = Command::new("mmdebstrap")
        .arg("--variant=minbase")
        .arg(format!("--include={}", PACKAGES.join(",")))
        .arg("--mode=root")
        .arg(suite)
        .arg(root)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .status()
        .map_err(io_err("run mmdebstrap for", root))?;
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(6).collect();
    let tail = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
    if let Some(line) = text
        .lines()
        .find(|l| NETWORK_ERRORS.iter().any(|n| l.contains(n)))
    {
        return Err(GuestBuildError::NoNetwork {
            detail: line.trim().to_string(),
        });
    }
    if text.contains("No space left on device") {
        return Err(GuestBuildError::NoRoom {
            dir: root.to_path_buf(),
            free: 0,
            need: super::BUILD_SPACE,
        });
    }
    Err(GuestBuildError::Step {
        step: "mmdebstrap",
        detail: format!("{status}: {tail}"),
    })
}

fn write_file(root: &Path, rel: &str, contents: &[u8], mode: u32) -> Result<(), GuestBuildError> {
    let path = root.join(rel.trim_start_matches('/'));
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    }
    // Replace what the packages put there (a link included).
    let _ = fs::remove_file(&path);
    fs::write(&path, contents).map_err(io_err("write", &path))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
        .map_err(io_err("set the mode of", &path))
}

/// Adds bootscope's files, links and the kernel's modules to the tree.
pub(super) fn add_files(
    spec: &DebianImageSpec,
    root: &Path,
    modules: &[(String, Vec<u8>)],
) -> Result<(), GuestBuildError> {
    for (rel, contents) in added_files(spec) {
        let mode = if rel.contains("/sbin/") { 0o755 } else { 0o644 };
        write_file(root, &rel, contents.as_bytes(), mode)?;
    }
    for (link, target) in added_links(spec.keep_running) {
        let path = root.join(link.trim_start_matches('/'));
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
        }
        let _ = fs::remove_file(&path);
        symlink(target, &path).map_err(io_err("create the link", &path))?;
    }
    let _ = fs::remove_file(root.join("etc/systemd/system/getty.target.wants/getty@tty1.service"));
    if spec.keep_running {
        // Log in as root without a password on the serial console.
        let shadow = root.join("etc/shadow");
        let text = fs::read_to_string(&shadow).map_err(io_err("read", &shadow))?;
        let text = text.replacen("root:*:", "root::", 1);
        write_file(root, "/etc/shadow", text.as_bytes(), 0o640)?;
    }
    let tree = format!("/usr/lib/modules/{}", spec.kernel.version);
    for (rel, bytes) in modules {
        write_file(root, &format!("{tree}/{rel}"), bytes, 0o644)?;
    }
    let output = Command::new("depmod")
        .arg("-b")
        .arg(root)
        .arg(&spec.kernel.version)
        .env("PATH", "/usr/sbin:/sbin:/usr/bin:/bin")
        .output()
        .map_err(io_err("run depmod for", root))?;
    if !output.status.success() {
        return Err(GuestBuildError::Step {
            step: "depmod",
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// About how many bytes the tree takes in an ext4 image: its files' blocks
/// and inodes, plus the journal and metadata of a small file system.
pub(super) fn tree_bytes(root: &Path) -> Result<u64, GuestBuildError> {
    fn walk(dir: &Path, total: &mut u64) -> Result<(), GuestBuildError> {
        for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
            let entry = entry.map_err(io_err("list", dir))?;
            let meta = entry.metadata().map_err(io_err("inspect", &entry.path()))?;
            *total += meta.size().div_ceil(4096) * 4096 + 256;
            if meta.is_dir() {
                walk(&entry.path(), total)?;
            }
        }
        Ok(())
    }
    let mut total = 0;
    walk(root, &mut total)?;
    Ok(total + total / 10 + (96 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_script_has_no_placeholder_left() {
        for keep in [false, true] {
            let s = workload_script(keep);
            assert!(!s.contains('@'), "{s}");
            assert!(s.contains("chr(0x60)"));
            assert_eq!(s.contains("poweroff"), !keep);
        }
    }

    #[test]
    fn the_unit_runs_after_multi_user_and_is_wanted_by_it() {
        assert!(WORKLOAD_UNIT.contains("\nAfter=multi-user.target\n"));
        assert!(WORKLOAD_UNIT.contains("\nWantedBy=multi-user.target\n"));
        let links = added_links(false);
        assert!(links
            .iter()
            .any(|(l, _)| l.ends_with("multi-user.target.wants/bootscope-workload.service")));
    }
}
