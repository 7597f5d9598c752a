//! `run --snapshot`/`--restore` flags against what a snapshot holds: an
//! explicit `--vcpus 1` is checked like any other count, `--memory-restore
//! mmap` with `--hugepages` is refused naming the mode that works, and
//! signals during `--snapshot` leave either nothing or a whole snapshot.

mod support;

use std::time::Duration;

use support::bootscope_output as bootscope;
use support::snapshot::{snapshot_ports, spawn_awaiting_sigusr1};
use support::*;

#[test]
fn vcpus_1_given_is_checked_and_mmap_with_hugepages_is_refused() {
    require_kvm!();
    let tmp = scratch("snapshot-args");
    let snap = tmp.join("snap");
    let o = snapshot_ports(&snap, &["--vcpus", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let dir = snap.to_str().unwrap();
    let restore = ["run", "--no-profile", "--no-summary", "--restore", dir];
    let mut one = restore.to_vec();
    one.extend(["--vcpus", "1"]);
    expect_usage_error(&one, &["vCPU count", "2", "1"]);
    let mut huge = restore.to_vec();
    huge.extend(["--memory-restore", "mmap", "--hugepages", "2M"]);
    expect_usage_error(&huge, &["--hugepages", "--memory-restore copy"]);
    // Left out, the snapshot's two vCPUs are used.
    let o = bootscope(&restore);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn signals_during_a_snapshot_leave_nothing_half_written() {
    require_kvm!();
    let tmp = scratch("snapshot-sigint");
    let snap = tmp.join("snap");
    let child = spawn_awaiting_sigusr1("mini-bzimage-hlt.bin", &snap, &["--memory", "4G"]);
    let pid = child.id() as i32;
    // The guest runs before the snapshot is asked for.
    std::thread::sleep(Duration::from_millis(1500));
    // The snapshot of 4 GiB is being written when the second SIGINT
    // comes (two signals sent back to back would merge into one).
    let kill = |sig| {
        // SAFETY: a signal to a pid this test spawned and has not waited for.
        unsafe { libc::kill(pid, sig) };
    };
    kill(libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(100));
    kill(libc::SIGINT);
    std::thread::sleep(Duration::from_millis(20));
    kill(libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    assert!(matches!(o.status.code(), Some(0 | 130)), "{}", stderr(&o));
    // Nothing beside the final name; under it, nothing or all of it.
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "snap")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    if snap.exists() {
        for f in ["snapshot.json", "state.json", "memory.raw"] {
            assert!(snap.join(f).is_file(), "{f} missing from {snap:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
