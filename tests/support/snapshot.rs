//! Snapshots of the fixture guests taken with `run --snapshot`, for the
//! tests of `--snapshot` and `--restore`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use super::{bootscope, catches_signal, fixture, text, wait_for};

/// `run --snapshot DIR --snapshot-at AT` of the fixture kernel `kernel`
/// (no profile, no summary, serial to null) with `extra` flags: the
/// command, to run or to spawn (`AT` of `SIGUSR1` waits for the signal).
pub fn snapshot_cmd(kernel: &str, dir: &Path, at: &str, extra: &[&str]) -> Command {
    let mut cmd = bootscope();
    cmd.args(["run", "--no-profile", "--no-summary", "--kernel"])
        .arg(fixture(kernel))
        .args(["--serial", "null"])
        .args(extra)
        .arg("--snapshot")
        .arg(dir)
        .args(["--snapshot-at", at]);
    cmd
}

/// The ports fixture's snapshot at its userspace mark (0x60) into `dir`,
/// with `extra` flags: what the run gave.
pub fn snapshot_ports(dir: &Path, extra: &[&str]) -> Output {
    snapshot_cmd("mini-bzimage-ports.bin", dir, "0x60", extra)
        .output()
        .expect("bootscope runs")
}

/// The ports fixture's snapshot at its userspace mark, with an 8 KiB
/// zeroed disk, both in `tmp`: (the snapshot's directory, the disk).
pub fn ports_snapshot_with_disk(tmp: &Path) -> (PathBuf, PathBuf) {
    let disk = tmp.join("disk.img");
    std::fs::write(&disk, vec![0u8; 8192]).unwrap();
    let snap = tmp.join("snap");
    let o = snapshot_ports(&snap, &["--disk", disk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    (snap, disk)
}

/// [`snapshot_cmd`] at `SIGUSR1`, spawned (standard output to null,
/// standard error piped), once it handles SIGUSR1: the child, to signal.
pub fn spawn_awaiting_sigusr1(kernel: &str, dir: &Path, extra: &[&str]) -> Child {
    let child = snapshot_cmd(kernel, dir, "SIGUSR1", extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bootscope runs");
    // Signalled once it handles SIGUSR1, not after a guessed delay.
    wait_for(120, "the run to handle SIGUSR1", || {
        catches_signal(child.id(), libc::SIGUSR1).then_some(())
    });
    child
}
