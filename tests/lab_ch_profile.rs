//! Cloud Hypervisor's restores profiled by bootscope in the lab
//! (scripts/lab-ch-restore-profile): the restore guest under CH, snapshotted
//! while it waits for a console line, restored with `copy` and `ondemand`,
//! each under `bootscope profile --collect ...,tail -- cloud-hypervisor
//! --restore ...`. The profile's fault counts equal, within 1 %, KVM's own
//! statistics (debugfs `pf_fixed`, `pf_taken` over the VM's life) and the
//! kernel's (the CH process's threads' minflt/majflt over the window),
//! as scripts/lab-ch-restore-profile.py compares them. Skipped (SKIP line)
//! without the lab or without cloud-hypervisor and ch-remote (CH_BIN_DIR,
//! default /usr/local/bin).

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::*;

/// The directory holding cloud-hypervisor and ch-remote, or a SKIP line.
fn ch_bin_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("CH_BIN_DIR").unwrap_or("/usr/local/bin".into()));
    for name in ["cloud-hypervisor", "ch-remote"] {
        if !dir.join(name).is_file() {
            skip(format_args!(
                "{} is missing (build Cloud Hypervisor as docs/lab.md says, or set CH_BIN_DIR)",
                dir.join(name).display()
            ));
            return None;
        }
    }
    Some(dir)
}

#[test]
fn ch_restore_fault_counts_match_kvm_and_the_kernel() {
    let Some(bin) = ch_bin_dir() else { return };
    if lab::lab_kernel().is_none() || lab::static_busybox().is_none() {
        return;
    }
    let dir = scratch("lab-ch-profile");
    let o = Command::new("sh")
        .arg("scripts/lab-ch-restore-profile")
        .arg(&dir)
        .env("CH_BIN_DIR", &bin)
        .env("BOOTSCOPE", env!("CARGO_BIN_EXE_bootscope"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("sh runs");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{out}");
    let checks: Vec<&str> = out.lines().filter(|l| l.starts_with("check ")).collect();
    for mode in ["copy", "ondemand"] {
        for name in ["kvm_pf_fixed", "kvm_pf_taken", "proc_minflt", "proc_majflt"] {
            let line = checks
                .iter()
                .find(|l| l.starts_with(&format!("check {mode} {name} ")))
                .unwrap_or_else(|| panic!("no check {mode} {name}\n{out}"));
            assert!(line.ends_with("within_1pct=yes"), "{line}\n{out}");
        }
        // The restore faulted: a window with no guest fault proves nothing.
        let fixed = checks
            .iter()
            .find(|l| l.starts_with(&format!("check {mode} kvm_pf_fixed ")))
            .unwrap();
        let profile: u64 = fixed
            .split_whitespace()
            .find_map(|w| w.strip_prefix("profile="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{fixed}"));
        assert!(profile > 0, "{fixed}\n{out}");
    }
}
