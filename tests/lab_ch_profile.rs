//! Cloud Hypervisor's restores profiled by bootscope in the lab
//! (scripts/lab-ch-restore-profile): the restore guest under CH, snapshotted
//! while it waits for a console line, restored with `copy` and `ondemand`,
//! each under `bootscope profile --collect ...,tail -- cloud-hypervisor
//! --restore ...`. Over the same interval, CH's life, the profile's fault
//! counts equal within 1 % KVM's own statistic of CH's VM (`pf_fixed`, read
//! from debugfs when CH ended) and the kernel's count of CH's page faults
//! (minflt + majflt, as /proc/PID/stat shows them, less those before its
//! exec; the profile may be under it by 2 %: the kernel counts there the
//! faults get_user_pages takes for a thread, with no exception), as
//! scripts/lab-ch-restore-profile.py compares them. (KVM's
//! `pf_taken` leaves out the MMIO faults KVM answers from its cache, which
//! no tracepoint marks: not compared; docs/benchmarks.md.) Skipped (SKIP line)
//! without the lab or without cloud-hypervisor and ch-remote (CH_BIN_DIR,
//! default /usr/local/bin).

mod support;

use support::*;

/// The `profile=` and `reference=` values of one check line.
fn values(line: &str) -> (u64, u64) {
    let get = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    (get("profile="), get("reference="))
}

#[test]
fn ch_restore_fault_counts_match_kvm_and_the_kernel() {
    let Some((_, out)) = ch::run_lab_script("lab-ch-restore-profile", &[], "lab-ch-profile") else {
        return;
    };
    // Every figure judged, for the margin in a later log.
    println!("{out}");
    let checks: Vec<&str> = out.lines().filter(|l| l.starts_with("check ")).collect();
    let check = |mode: &str, name: &str| {
        *checks
            .iter()
            .find(|l| l.starts_with(&format!("check {mode} {name} ")))
            .unwrap_or_else(|| panic!("no check {mode} {name}\n{out}"))
    };
    let mut fixed = Vec::new();
    for mode in ["copy", "ondemand"] {
        for name in ["kvm_pf_fixed", "proc_faults"] {
            let line = check(mode, name);
            assert!(line.ends_with("within_1pct=yes"), "{line}\n{out}");
            // Both sides counted something: an empty count proves nothing.
            let (profile, reference) = values(line);
            assert!(profile > 0 && reference > 0, "{line}\n{out}");
        }
        fixed.push(values(check(mode, "kvm_pf_fixed")).1);
    }
    // The on-demand restore faults its memory in from the file: many more
    // guest faults than the copying one, whose memory is in before it runs.
    assert!(fixed[1] > fixed[0] * 10, "{fixed:?}\n{out}");
}
