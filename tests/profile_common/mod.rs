//! What the profile tests share: whether this machine can profile, the
//! `bootscope` binary, fixtures and scratch directories.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn bootscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bootscope"))
}

pub fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("vmm/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bootscope-profile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// True when eBPF profiling is possible here; prints why not otherwise.
/// Only a truly absent capability skips: not root, no tracefs. (Without
/// the kernel's BTF it profiles everything but exit codes.)
pub fn can_profile() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: eBPF profiling needs root (tests run as uid != 0)");
        return false;
    }
    // The profiler mounts tracefs itself when it can; only a kernel without
    // tracefs support skips.
    let has_tracefs = std::fs::read_to_string("/proc/filesystems")
        .map(|f| f.lines().any(|l| l.ends_with("tracefs")))
        .unwrap_or(false);
    if !has_tracefs {
        eprintln!("SKIP: this kernel has no tracefs");
        return false;
    }
    true
}

pub fn kvm_available() -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP: /dev/kvm cannot be opened ({e})");
            false
        }
    }
}

pub fn run(cmd: &mut Command, stdin: Option<&str>) -> Output {
    use std::io::Write;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("bootscope runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

/// `bootscope profile --output OUT -- COMMAND...`, with `stdin` fed to the
/// command: its output.
pub fn profile_command(out: &Path, command: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = bootscope();
    cmd.args(["profile", "--output"])
        .arg(out)
        .arg("--")
        .args(command);
    run(&mut cmd, stdin)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn read_profile(path: &Path) -> bootscope_profiler::Profile {
    bootscope_profiler::Profile::read(path).expect("a valid profile")
}

/// Runs `bootscope ARGS` to completion and captures its output.
pub fn bootscope_output(args: &[&str]) -> Output {
    bootscope().args(args).output().expect("bootscope runs")
}

/// Runs and expects exit status 2, every needle in standard error, and no
/// panic.
pub fn expect_usage_error(args: &[&str], needles: &[&str]) {
    let o = bootscope_output(args);
    let err = stderr(&o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{args:?} should exit 2; stderr: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}: {err}");
    }
}

/// The `[slot, count]` pairs of a profile's `time_slots` series, summed.
pub fn slot_sum(series: &serde_json::Value) -> u64 {
    series
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| pair[1].as_u64().unwrap())
        .sum()
}
