//! KVM's own exit statistics, the independent cross-check of the
//! tracepoint counts: debugfs `kvm/<pid>-<fd>/exits`, one directory per VM.
//!
//! A VM's directory disappears when the VM is destroyed, so the collector
//! reads them while it runs and keeps the last value of each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where debugfs is normally mounted.
pub const DEBUGFS: &str = "/sys/kernel/debug";

/// The `exits` value of every VM of the given processes below `kvm_dir`
/// (`<debugfs>/kvm`), keyed by directory name.
pub fn read_exits(kvm_dir: &Path, pids: &[u32]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(kvm_dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split_once('-').and_then(|(p, _)| p.parse::<u32>().ok()) else {
            continue;
        };
        if !pids.contains(&pid) {
            continue;
        }
        if let Some(v) = std::fs::read_to_string(e.path().join("exits"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            out.insert(name, v);
        }
    }
    out
}

/// debugfs's `kvm` directory, mounting debugfs at /sys/kernel/debug if it
/// is not mounted. Err says why it is unavailable.
pub fn kvm_dir() -> Result<PathBuf, String> {
    let dir = Path::new(DEBUGFS).join("kvm");
    if dir.is_dir() {
        return Ok(dir);
    }
    if !crate::mount::is_mounted(DEBUGFS, "debugfs") {
        crate::mount::mount_fs("debugfs", DEBUGFS, "debugfs").map_err(|e| {
            format!("debugfs is not mounted and mounting it failed ({e}); mount -t debugfs none {DEBUGFS}")
        })?;
    }
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(format!("{} does not exist (KVM not loaded?)", dir.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_only_the_target_vms() {
        let d = std::env::temp_dir().join(format!("bootscope-kvmstats-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (name, exits) in [("100-11", "5\n"), ("100-12", "7\n"), ("200-11", "1000\n")] {
            std::fs::create_dir_all(d.join(name)).unwrap();
            std::fs::write(d.join(name).join("exits"), exits).unwrap();
        }
        std::fs::create_dir_all(d.join("not-a-vm")).unwrap();
        let got = read_exits(&d, &[100]);
        assert_eq!(got.values().sum::<u64>(), 12);
        assert_eq!(got.len(), 2);
        assert!(read_exits(&d, &[300]).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
