//! Input that must never panic (huge durations, file names that are not
//! UTF-8, broken ELF kernels), output that must not be lost silently (a
//! console on a full disk), and SIGINT/SIGTERM: every command stops its
//! guest or child, writes what it measured and exits 130 or 143.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::*;

#[test]
fn huge_durations_exit_2_naming_the_flag() {
    for value in ["1e30", "18446744073709551616", "inf", "-1", "0"] {
        let timeout = format!("--timeout={value}");
        let duration = format!("--duration={value}");
        let run_timeout = format!("--run-timeout={value}");
        expect_usage_error(&["run", &timeout], &["--timeout"]);
        expect_usage_error(&["profile", &duration, "--", "true"], &["--duration"]);
        expect_usage_error(&["bench", &run_timeout, "--", "run"], &["--run-timeout"]);
        expect_usage_error(&["lab", &timeout, "--", "doctor"], &["--timeout"]);
    }
    expect_usage_error(&["run", "--timeout", "1e30"], &["too long", "30 days"]);
    // Millisecond counts that would overflow a deadline.
    let max = u64::MAX.to_string();
    expect_usage_error(&["run", "--refresh-ms", &max], &["--refresh-ms"]);
    expect_usage_error(
        &["profile", "--sample-interval-ms", &max, "--", "true"],
        &["--sample-interval-ms"],
    );
}

/// `bootscope ARGS` with some arguments that are not UTF-8.
fn run_os(args: &[&OsStr]) -> std::process::Output {
    bootscope().args(args).output().expect("bootscope runs")
}

#[test]
fn kernel_paths_that_are_not_utf8_work() {
    require_kvm!();
    let d = scratch("non-utf8");
    let kernel = d.join(OsStr::from_bytes(b"kernel-\xff.bin"));
    std::fs::copy(fixture("mini-bzimage-reset.bin"), &kernel).unwrap();
    let timeline = d.join("t.json");
    // Profiled where it can be: the profile records the command line.
    let o = run_os(&[
        "run".as_ref(),
        "--kernel".as_ref(),
        kernel.as_os_str(),
        "--serial".as_ref(),
        "null".as_ref(),
        "--timeline".as_ref(),
        timeline.as_os_str(),
        "--output".as_ref(),
        d.join("p.json").as_os_str(),
    ]);
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    if can_profile() {
        assert_eq!(o.status.code(), Some(0), "{err}");
        let doc: serde_json::Value = read_json(&timeline);
        assert_eq!(doc["outcome"]["clean"], true);
        assert!(doc["guest"]["kernel"].as_str().unwrap().contains("kernel-"));
    }
    // Missing: the usual refusal, the name shown lossily.
    let missing = d.join(OsStr::from_bytes(b"missing-\xfe"));
    let o = run_os(&[
        "run".as_ref(),
        "--kernel".as_ref(),
        missing.as_os_str(),
        "--no-profile".as_ref(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot read kernel") && err.contains("missing-"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // A text option (a --serial file name is one) that is not UTF-8: named.
    let o = run_os(&[
        "run".as_ref(),
        "--serial".as_ref(),
        OsStr::from_bytes(b"/tmp/console-\xff.log"),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--serial") && err.contains("console-") && err.contains("not valid UTF-8"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn console_on_a_full_disk_is_an_error() {
    // Named, /dev/full is refused before the boot.
    let k = fixture("mini-bzimage-reset.bin");
    let args = ["run", "--kernel", &k, "--no-profile", "--no-summary"];
    let o = support::bootscope_output(&[&args[..], &["--serial", "/dev/full"]].concat());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--serial") && err.contains("/dev/full") && err.contains("No space left"),
        "{err}"
    );
    // On standard output, found full while the guest writes: exit 1.
    require_kvm!();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = support::bootscope()
        .args(args)
        .stdout(full)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left"), "{err}");
    assert!(err.contains("bytes of guest console output lost"), "{err}");
}

/// mini-pvh.elf (one PT_LOAD at 0x100000, 0xd8 bytes, and a PT_NOTE with
/// the PVH entry 0x100000 inside it) with bytes patched.
fn patched_pvh(dir: &Path, name: &str, at: usize, value: &[u8]) -> PathBuf {
    let mut bytes = std::fs::read(fixture("mini-pvh.elf")).unwrap();
    bytes[at..at + value.len()].copy_from_slice(value);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn broken_elf_kernels_exit_2() {
    require_kvm!();
    let d = scratch("elf");
    // Program headers start at 64, 56 bytes each. The PT_NOTE (the second)
    // made a PT_LOAD: it overlaps the first.
    let overlap = patched_pvh(&d, "overlap.elf", 64 + 56, &1u32.to_le_bytes());
    // The PT_LOAD's physical address moved to 0x200000: the entry at
    // 0x100000 is outside every segment.
    let stray = patched_pvh(&d, "stray.elf", 64 + 24, &0x200000u64.to_le_bytes());
    for extra in [&[][..], &["--no-profile"][..]] {
        let mut args = vec!["run", "--kernel", overlap.to_str().unwrap()];
        args.extend_from_slice(extra);
        expect_usage_error(&args, &["overlap.elf", "overlapping loadable segments"]);
        let mut args = vec!["run", "--kernel", stray.to_str().unwrap()];
        args.extend_from_slice(extra);
        expect_usage_error(
            &args,
            &[
                "stray.elf",
                "entry point 0x100000",
                "outside every loadable segment",
            ],
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

fn send(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) with our own child's pid, not yet reaped.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

/// Waits until `ready` holds (polling), panicking after `secs`.
fn wait_for(secs: u64, what: &str, mut ready: impl FnMut() -> bool) {
    support::wait_for(secs, what, || ready().then_some(()));
}

fn wait_exit(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("still running {secs} s after the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes whose command line mentions `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[test]
fn run_stopped_by_a_signal_writes_its_timeline() {
    require_kvm!();
    let d = scratch("run-signal");
    for (sig, name, code) in [
        (libc::SIGTERM, "SIGTERM", 143),
        (libc::SIGINT, "SIGINT", 130),
    ] {
        let timeline = d.join(format!("{name}.json"));
        let console = d.join(format!("{name}.log"));
        // The hlt guest prints its lines and then halts forever.
        let mut child = bootscope()
            .args([
                "run",
                "--kernel",
                &fixture("mini-bzimage-hlt.bin"),
                "--no-profile",
            ])
            .arg("--serial")
            .arg(&console)
            .arg("--timeline")
            .arg(&timeline)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(30, "the guest console", || {
            std::fs::metadata(&console).is_ok_and(|m| m.len() > 0)
        });
        send(&child, sig);
        let status = wait_exit(&mut child, 20);
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_eq!(status.code(), Some(code), "{name}: {err}");
        assert!(err.contains(&format!("interrupted by {name}")), "{err}");
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&timeline).expect("timeline written")).unwrap();
        assert_eq!(doc["outcome"]["reason"], "interrupted", "{doc}");
        assert_eq!(doc["outcome"]["clean"], false);
        let detail = doc["outcome"]["detail"].as_str().unwrap();
        assert!(detail.contains(name), "{detail}");
        assert!(!doc["phases"].as_array().unwrap().is_empty());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn profile_stopped_by_sigterm_stops_its_command() {
    require_bpf!();
    let d = scratch("profile-signal");
    let out = d.join("p.json");
    // A sleep no other test runs: found by its argument.
    let mut child = bootscope()
        .args(["profile", "--no-summary", "--output"])
        .arg(&out)
        .args(["--", "sleep", "1234.5"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sleeper = String::new();
    wait_for(60, "the launched sleep", || {
        let children =
            std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
                .unwrap_or_default();
        sleeper = children.split_whitespace().next().unwrap_or("").to_string();
        // Released: it is sleep now, not the held fork.
        !sleeper.is_empty()
            && std::fs::read_to_string(format!("/proc/{sleeper}/comm"))
                .is_ok_and(|c| c.trim() == "sleep")
    });
    send(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, 30);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        !Path::new(&format!("/proc/{sleeper}")).exists(),
        "sleep {sleeper} outlived the profiler"
    );
    assert!(processes_naming("sleep 1234.5").is_empty());
    let p: serde_json::Value = read_json(&out);
    assert_eq!(p["target"]["interrupted_by"], "SIGTERM", "{}", p["target"]);
    assert_eq!(p["target"]["exit_code"], 143);
    let _ = std::fs::remove_dir_all(&d);
}

/// The launched command's pid (bootscope's child) once it runs `comm`.
fn launched(bootscope: &Child, comm: &str) -> u32 {
    let mut pid = 0;
    wait_for(60, "the launched command", || {
        let children = std::fs::read_to_string(format!(
            "/proc/{}/task/{}/children",
            bootscope.id(),
            bootscope.id()
        ))
        .unwrap_or_default();
        pid = children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pid != 0
            && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
    });
    pid
}

/// `profile -- sh -c '... & ...'`: the command leads a process group of its
/// own; SIGINT or SIGTERM to bootscope reaches the whole group, and no
/// process of it survives (a non-interactive shell's background job
/// ignores SIGINT: it is ended after). The profile says it was
/// interrupted.
#[test]
fn profile_stopped_by_a_signal_ends_the_command_s_process_group() {
    require_bpf!();
    let d = scratch("profile-group");
    for (sig, name, code) in [
        (libc::SIGTERM, "SIGTERM", 143),
        (libc::SIGINT, "SIGINT", 130),
    ] {
        let out = d.join(format!("{name}.json"));
        let script = format!("sleep 1235.{code} & sleep 1235.{code}");
        let mut child = bootscope()
            .args(["profile", "--no-summary", "--output"])
            .arg(&out)
            .args(["--", "sh", "-c", &script])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pgid = launched(&child, "sh");
        wait_for(30, "both sleeps", || {
            bootscope_model::proc::group_members(pgid).len() == 3
        });
        send(&child, sig);
        let status = wait_exit(&mut child, 30);
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert_eq!(status.code(), Some(code), "{name}: {err}");
        let left = bootscope_model::proc::group_members(pgid);
        assert!(left.is_empty(), "{name}: group {pgid} left {left:?}: {err}");
        let words = format!("sleep 1235.{code}");
        assert!(processes_naming(&words).is_empty(), "{name}: {err}");
        let p: serde_json::Value = read_json(&out);
        assert_eq!(p["target"]["interrupted_by"], name, "{}", p["target"]);
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A launched command that exits leaving a background job: the job is
/// ended with it, and the command's own status is kept.
#[test]
fn profile_ends_what_the_command_left_in_its_group() {
    require_bpf!();
    let d = scratch("profile-leftover");
    let out = d.join("p.json");
    let mut child = bootscope()
        .args(["profile", "--no-summary", "--output"])
        .arg(&out)
        .args(["--", "sh", "-c", "sleep 1236.5 & sleep 1; exit 3"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pgid = launched(&child, "sh");
    let status = wait_exit(&mut child, 60);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(err.contains("left 1 process"), "{err}");
    assert!(
        bootscope_model::proc::group_members(pgid).is_empty(),
        "{err}"
    );
    assert!(processes_naming("sleep 1236.5").is_empty(), "{err}");
    let p: serde_json::Value = read_json(&out);
    assert_eq!(p["target"]["exit_code"], 3);
    assert!(p["target"]["interrupted_by"].is_null(), "{}", p["target"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bench_interrupted_keeps_finished_runs() {
    require_kvm!();
    let d = scratch("bench-signal");
    // A kernel path of its own: its processes are found by it.
    let kernel = d.join("bench-signal-kernel.bin");
    std::fs::copy(fixture("mini-bzimage-reset.bin"), &kernel).unwrap();
    let out = d.join("bench.json");
    let log = d.join("bench.log");
    let mut child = bootscope()
        .args(["bench", "--runs", "500", "--warmup", "0", "--output"])
        .arg(&out)
        .args(["--", "run", "--kernel"])
        .arg(&kernel)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for(120, "two finished runs", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains(" 2/500]"))
    });
    send(&child, libc::SIGINT);
    let status = wait_exit(&mut child, 30);
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted by SIGINT"), "{err}");
    let doc: serde_json::Value = read_json(&out);
    assert_eq!(doc["interrupted_by"], "SIGINT");
    let runs = doc["configs"][0]["runs"].as_array().unwrap();
    assert!((2..500).contains(&runs.len()), "{} runs", runs.len());
    assert!(runs.iter().all(|r| r["ok"] == true), "{runs:?}");
    let work = std::env::temp_dir().join(format!("bootscope-bench-{pid}"));
    assert!(!work.exists(), "{} left behind", work.display());
    let left = processes_naming(kernel.to_str().unwrap());
    assert!(left.is_empty(), "runs left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn lab_stopped_by_sigterm_stops_qemu_and_cleans_up() {
    let d = scratch("lab-signal");
    // The lab's temporary directory goes under TMPDIR: here, to be checked.
    let mut child = bootscope()
        .args(["lab", "--", "doctor"])
        .env("TMPDIR", &d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let qemu = loop {
        if let Some(status) = child.try_wait().unwrap() {
            // No QEMU, no Debian kernel or no busybox here.
            let o = child.wait_with_output().unwrap();
            let _ = std::fs::remove_dir_all(&d);
            skip_test!("the lab cannot start here ({status}): {}", stderr(&o));
        }
        let children =
            std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
                .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.starts_with("qemu-system"))
        }) {
            break pid.to_string();
        }
        assert!(Instant::now() < deadline, "QEMU never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    send(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, 30);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(
        !Path::new(&format!("/proc/{qemu}")).exists(),
        "QEMU {qemu} outlived the lab"
    );
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}
