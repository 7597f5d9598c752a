//! A VMM that `bootscope profile` holds stopped (SIGSTOP, sent by eBPF at
//! the exit that ends its guest) is continued however bootscope ends:
//! killed (SIGKILL: its watchdog process, told of the VMM before any hold,
//! continues it once bootscope's end of their pipe closes), or interrupted
//! (SIGTERM, SIGINT: the hold is read and continued before the launched
//! command is stopped). The traced VMM is bootscope's own (`bootscope run`
//! of the fixture that writes port 0x80 100,000 times, then resets), so
//! this runs wherever KVM and eBPF do, without the lab.
//!
//! To kill bootscope "while it holds the VMM", bootscope is itself stopped
//! (SIGSTOP) as soon as the VMM runs: the kernel's eBPF program still
//! stops the VMM at its guest's reset, and nothing in bootscope can
//! continue it until the test kills or interrupts bootscope. This test
//! binary is the child subreaper of what it starts, so it reaps a VMM that
//! outlives a killed bootscope and reads its exit status.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// The state letter of `pid`, None once it is gone.
fn state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The parent of `pid`.
fn parent(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) takes plain integers.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// The VMM: the process `profile` (`prof`) launched, once it has exec'd
/// `bootscope run` (it is released only after the hold is armed).
fn launched_vmm(prof: u32) -> u32 {
    wait_for(60, "the launched VMM to run", || {
        let kids = std::fs::read_to_string(format!("/proc/{prof}/task/{prof}/children")).ok()?;
        kids.split_whitespace()
            .filter_map(|k| k.parse::<u32>().ok())
            .find(|&k| {
                // Before its exec the child's command line is bootscope
                // profile's own.
                std::fs::read(format!("/proc/{k}/cmdline"))
                    .is_ok_and(|c| c.split(|&b| b == 0).nth(1) == Some(b"run"))
            })
    })
}

/// Waits (at most 120 s) until `pid` has been in state `T` for 200 ms:
/// true; false when it ended first.
fn stays_stopped(pid: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(120);
    let mut since = None;
    while Instant::now() < until {
        match state(pid) {
            Some('T') => {
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() >= Duration::from_millis(200) {
                    return true;
                }
            }
            None | Some('Z') | Some('X') => return false,
            Some(_) => since = None,
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!(
        "process {pid} neither stopped nor ended in 120 s: {:?}",
        state(pid)
    );
}

/// `bootscope profile` of the flood fixture's VMM, its output in `dir`.
fn start_profile(dir: &Path) -> Child {
    let fixture = fixture("mini-bzimage-flood.bin");
    let timeline = dir.join("t.json");
    let log = std::fs::File::create(dir.join("profile.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_bootscope"))
        .args(["profile", "--no-summary", "--output"])
        .arg(dir.join("p.json"))
        .args(["--", env!("CARGO_BIN_EXE_bootscope"), "run", "--kernel"])
        .arg(&fixture)
        .args(["--serial", "null", "--no-profile", "--no-summary"])
        // A PVM host emulates this guest (a few seconds): let it.
        .arg("--allow-emulation")
        .args(["--memory", "64M", "--timeline"])
        .arg(&timeline)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("bootscope profile starts")
}

/// Starts the profile, stops bootscope as soon as its VMM runs, and
/// waits until the VMM is held at its guest's reset. None: the VMM's
/// guest had already ended (and been read) before bootscope was stopped;
/// the round proves nothing, and the caller tries again.
fn held_with_bootscope_stopped(dir: &Path) -> Option<(Child, u32)> {
    let mut prof = start_profile(dir);
    let vmm = launched_vmm(prof.id());
    signal(prof.id(), libc::SIGSTOP);
    if stays_stopped(vmm) {
        return Some((prof, vmm));
    }
    signal(prof.id(), libc::SIGCONT);
    let status = prof.wait().unwrap();
    eprintln!("the guest ended before bootscope was stopped ({status}): again");
    None
}

/// Makes this process the child subreaper of what it starts: a VMM whose
/// bootscope was killed is then this process's child, reaped here.
fn become_subreaper() {
    // SAFETY: prctl with plain integer arguments.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// Reaps `pid` (an ended child of this process) and gives its exit code.
fn reap(pid: u32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: waitpid with a valid pointer to an int on this frame.
    let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    assert_eq!(r, pid as libc::pid_t, "{}", std::io::Error::last_os_error());
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

/// A fresh scratch directory and a round held with bootscope stopped (up
/// to three tries).
fn held_round(tag: &str) -> (std::path::PathBuf, Child, u32) {
    for attempt in 0..3 {
        let d = scratch(&format!("{tag}-{attempt}"));
        if let Some((prof, vmm)) = held_with_bootscope_stopped(&d) {
            return (d, prof, vmm);
        }
    }
    panic!("in three rounds the guest always ended before bootscope could be stopped");
}

#[test]
fn a_held_vmm_is_continued_when_bootscope_is_killed() {
    require_kvm!();
    require_bpf!();
    become_subreaper();
    let (d, mut prof, vmm) = held_round("hold-kill");
    signal(prof.id(), libc::SIGKILL);
    let status = prof.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    // Orphaned, the VMM is now this process's: continued by the watchdog,
    // it runs to its guest's end by itself and says so in its timeline.
    let until = Instant::now() + Duration::from_secs(60);
    while parent(vmm) != Some(std::process::id()) || state(vmm) != Some('Z') {
        assert!(
            Instant::now() < until,
            "the VMM did not run to its end: state {:?}, parent {:?}",
            state(vmm),
            parent(vmm)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(reap(vmm), Some(0), "the VMM ran to its end with success");
    let t = read_json(d.join("t.json"));
    assert_eq!(t["outcome"]["reason"], "i8042_reset", "{:#}", t["outcome"]);
    assert_eq!(t["outcome"]["clean"], true);
    // Killed, bootscope wrote no profile (nor half of one).
    assert!(!d.join("p.json").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// bootscope gets `sig` while stopped, holding the VMM, then runs on.
fn interrupted_while_holding(sig: i32, name: &str) {
    let (d, mut prof, vmm) = held_round(&format!("hold-{name}"));
    signal(prof.id(), sig);
    signal(prof.id(), libc::SIGCONT);
    let status = prof.wait().unwrap();
    let log = std::fs::read_to_string(d.join("profile.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(128 + sig), "{log}");
    // bootscope reaped the VMM: nothing left stopped.
    assert_eq!(state(vmm), None, "{log}");
    let p = read_json(d.join("p.json"));
    assert_eq!(p["target"]["interrupted_by"], name, "{log}");
    // The hold was read, then continued: the VMM ended by itself (its
    // guest's reset), or by the signal passed on to its group after.
    let passes = p["guest_read"]["passes"].as_array().unwrap();
    let shutdown = passes
        .iter()
        .find(|x| x["at"] == "shutdown")
        .unwrap_or_else(|| panic!("a shutdown pass: {passes:?}\n{log}"));
    assert!(shutdown["held_ns"].as_u64().unwrap() > 0, "{shutdown}");
    assert!(
        shutdown["held_at"].as_str().unwrap_or("").contains("i8042"),
        "{shutdown}"
    );
    let code = p["target"]["exit_code"].as_i64();
    assert!(
        code == Some(0) || code == Some(128 + i64::from(sig)),
        "{code:?}\n{log}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_held_vmm_is_read_and_continued_when_bootscope_gets_sigterm() {
    require_kvm!();
    require_bpf!();
    interrupted_while_holding(libc::SIGTERM, "SIGTERM");
}

#[test]
fn a_held_vmm_is_read_and_continued_when_bootscope_gets_sigint() {
    require_kvm!();
    require_bpf!();
    interrupted_while_holding(libc::SIGINT, "SIGINT");
}
