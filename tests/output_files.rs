//! Hostile paths given to the command line: outputs that are devices,
//! links, planted links, one file named twice, unwritable directories;
//! FIFOs as inputs; `profile`'s and `check`'s exit statuses. Bad input is
//! exit status 2 with a message naming it, found before anything long
//! starts, and nothing outside the output is touched.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::bootscope_output as bootscope;
use support::*;

fn bootscope_cmd(args: &[&str]) -> Command {
    let mut c = support::bootscope();
    c.args(args);
    c
}

fn is_char_device(p: &str) -> bool {
    std::fs::symlink_metadata(p)
        .map(|m| m.file_type().is_char_device())
        .unwrap_or(false)
}

#[test]
fn timeline_to_dev_null_leaves_the_device() {
    require_kvm!();
    let k = fixture("mini-bzimage-reset.bin");
    let o = bootscope(&[
        "run",
        "--kernel",
        &k,
        "--no-profile",
        "--no-summary",
        "--serial",
        "null",
        "--timeline",
        "/dev/null",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(is_char_device("/dev/null"), "/dev/null is still a device");
}

#[test]
fn report_to_dev_null_leaves_the_device() {
    let b = lab_baseline();
    let o = bootscope(&["check", "--baseline", &b, &b, "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(is_char_device("/dev/null"));
    let o = bootscope(&["plot", "-o", "/dev/null", &b]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(is_char_device("/dev/null"));
}

#[test]
fn an_output_link_is_followed_and_stays_a_link() {
    let d = scratch("out-link");
    let real = d.join("real.txt");
    std::fs::write(&real, "old").unwrap();
    let link = d.join("link.txt");
    std::os::unix::fs::symlink("real.txt", &link).unwrap();
    let b = lab_baseline();
    let o = bootscope(&["check", "--baseline", &b, &b, "-o", link.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let report = std::fs::read_to_string(&real).unwrap();
    assert!(report.contains("result: pass"), "{report}");
    // A link to nothing is refused: it would make bootscope create a file
    // wherever the link points.
    let dangling = d.join("dangling.txt");
    let target = d.join("created-elsewhere.txt");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    expect_usage_error(
        &[
            "check",
            "--baseline",
            &b,
            &b,
            "-o",
            dangling.to_str().unwrap(),
        ],
        &["dangling.txt", "symbolic link", "does not exist"],
    );
    assert!(!target.exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// A link planted at the name a writer with pid-based temporary names
/// would use (`.NAME.tmpPID`; the shell `exec`s bootscope, so `$$` is its
/// pid) catches nothing: the victim is untouched and the output is a new
/// file of its own.
#[test]
fn a_link_planted_at_a_guessable_temporary_name_catches_nothing() {
    let d = scratch("planted");
    let victim = d.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let b = lab_baseline();
    let script = format!(
        "cd '{}' && for n in .report.txt.tmp$$ .report.txt.tmp report.txt.tmp; do ln -s victim $n; done && exec '{}' check --baseline '{b}' '{b}' -o report.txt",
        d.display(),
        env!("CARGO_BIN_EXE_bootscope"),
    );
    let o = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let report = d.join("report.txt");
    let m = std::fs::symlink_metadata(&report).unwrap();
    assert!(m.file_type().is_file());
    assert_ne!(m.ino(), std::fs::metadata(&victim).unwrap().ino());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn two_outputs_naming_one_file_exit_2() {
    let d = scratch("same-file");
    let k = fixture("mini-bzimage-reset.bin");
    let a = d.join("a.json");
    let a_again = d.join(".").join("a.json");
    expect_usage_error(
        &[
            "run",
            "--kernel",
            &k,
            "--timeline",
            a.to_str().unwrap(),
            "--output",
            a_again.to_str().unwrap(),
        ],
        &["--timeline", "--output", "name the same file"],
    );
    // Through a link to an existing file, with the console log.
    std::fs::write(&a, "").unwrap();
    let link = d.join("link.log");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    expect_usage_error(
        &[
            "run",
            "--kernel",
            &k,
            "--timeline",
            a.to_str().unwrap(),
            "--serial",
            link.to_str().unwrap(),
        ],
        &["--serial", "name the same file"],
    );
    assert_eq!(std::fs::read(&a).unwrap(), b"", "nothing written");
    let _ = std::fs::remove_dir_all(&d);
}

/// procfs takes no new files, even from root: every command refuses such
/// an output at once, naming the flag, before it boots or benches.
#[test]
fn an_unwritable_directory_exits_2_before_anything_runs() {
    let k = fixture("mini-bzimage-reset.bin");
    let b = lab_baseline();
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "--kernel", &k, "--timeline", "/proc/bootscope.json"],
        vec!["run", "--kernel", &k, "--output", "/proc/bootscope.json"],
        vec!["run", "--kernel", &k, "--serial", "/proc/bootscope.log"],
        vec!["profile", "-o", "/proc/bootscope.json", "--", "true"],
        vec![
            "bench",
            "--runs",
            "50",
            "--output",
            "/proc/bootscope.json",
            "--",
            "run",
            "--kernel",
            &k,
        ],
        vec!["check", "--baseline", &b, &b, "-o", "/proc/report.txt"],
        vec!["lab", "--", "run", "--timeline", "/proc/bootscope.json"],
        vec!["compare", &b, &b, "-o", "/proc/report.txt"],
        vec!["plot", "-o", "/proc/plot.svg", &b],
        vec![
            "export",
            "--format",
            "json",
            "-o",
            "/proc/out.json",
            "/nonexistent",
        ],
    ];
    for args in cases {
        let o = output_within(&mut bootscope_cmd(&args), Duration::from_secs(20));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("/proc/"), "{args:?} names the path: {err}");
        assert!(
            err.contains("cannot create a file in /proc"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("bench:"), "{args:?}: no run started: {err}");
        assert!(!err.contains(".tmp"), "{args:?}: no temporary name: {err}");
    }
}

#[test]
fn check_that_cannot_write_its_report_is_not_a_regression() {
    let b = lab_baseline();
    let d = scratch("check-dir");
    // Not 1, which CI reads as a regression.
    expect_usage_error(
        &["check", "--baseline", &b, &b, "-o", "/proc/report.txt"],
        &["--output", "/proc/report.txt"],
    );
    expect_usage_error(
        &["check", "--baseline", &b, &b, "-o", d.to_str().unwrap()],
        &["is a directory"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_fifo_as_kernel_or_initrd_exits_2_at_once() {
    let d = scratch("fifo-in");
    let fifo = d.join("pipe");
    mkfifo(&fifo, 0o600);
    let f = fifo.to_str().unwrap();
    let k = fixture("mini-bzimage-reset.bin");
    // Profiling on (the default): the kernel is probed before the profiler
    // attaches, and the initrd checked; neither needs /dev/kvm.
    let runs: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "--kernel", f], "it is a FIFO"),
        (
            vec!["run", "--kernel", &k, "--initrd", f, "--serial", "null"],
            "is a FIFO, not a regular file",
        ),
    ];
    for (args, needle) in &runs {
        let o = output_within(&mut bootscope_cmd(args), Duration::from_secs(20));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(f) && err.contains(needle), "{args:?}: {err}");
    }
    if kvm_available() {
        for (args, needle) in runs {
            let mut args = args.clone();
            args.push("--no-profile");
            let o = output_within(&mut bootscope_cmd(&args), Duration::from_secs(20));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Waits until `pid` (a child that exits at once) is a zombie; the cap
/// only reports a child that never exits.
fn wait_for_zombie(pid: u32) {
    let deadline = Instant::now() + support::HANG_CAP;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        if stat
            .rsplit_once(')')
            .unwrap()
            .1
            .trim_start()
            .starts_with('Z')
        {
            return;
        }
        assert!(Instant::now() < deadline, "`true` did not exit: {stat}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn profile_bad_input_exits_2_with_a_message() {
    let d = scratch("profile-input");
    let out = d.join("p.json");
    let o = out.to_str().unwrap();
    // pid_max is at most 2^22: this pid never exists.
    expect_usage_error(
        &["profile", "-o", o, "--pid", "99999999"],
        &["--pid 99999999", "no such process"],
    );
    expect_usage_error(
        &["profile", "-o", o, "--duration", "0", "--", "true"],
        &["must be a positive number of seconds"],
    );
    expect_usage_error(
        &["profile", "-o", o, "--duration=-1", "--", "true"],
        &["must be a positive number of seconds"],
    );
    expect_usage_error(
        &["profile", "-o", o, "--", "/nonexistent/program"],
        &["cannot run /nonexistent/program", "No such file"],
    );
    expect_usage_error(
        &["profile", "-o", o, "--", "bootscope-no-such-command"],
        &["bootscope-no-such-command", "no such command in PATH"],
    );
    let not_exec = d.join("script");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    expect_usage_error(
        &["profile", "-o", o, "--", not_exec.to_str().unwrap()],
        &["not executable"],
    );
    // A child not waited for yet: a zombie once it has exited.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    wait_for_zombie(pid);
    let pid_s = pid.to_string();
    expect_usage_error(
        &["profile", "-o", o, "--pid", &pid_s],
        &[&format!("--pid {pid}"), "exited", "zombie"],
    );
    child.wait().unwrap();
    assert!(!out.exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&d);
}

/// Not a hostile case but the other half of it: the checks do not refuse
/// ordinary outputs, and a new file gets the usual permissions.
#[test]
fn ordinary_outputs_are_written_with_the_usual_mode() {
    let d = scratch("ordinary");
    let b = lab_baseline();
    let report: PathBuf = d.join("r.txt");
    let o = bootscope(&[
        "check",
        "--baseline",
        &b,
        &b,
        "-o",
        report.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The umask bootscope inherited, read without changing it.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
        .unwrap();
    let mode = std::fs::metadata(&report).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o666 & !mask, "mode {mode:o}");
    // A replaced file keeps its mode.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&report, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = bootscope(&[
        "check",
        "--baseline",
        &b,
        &b,
        "-o",
        report.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::metadata(&report).unwrap().mode() & 0o777, 0o600);
    let names: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "no temporary file left behind");
    let _ = std::fs::remove_dir_all(&d);
}

/// A boot timeline of `marks` marks with long names: its JSON export is
/// large enough (about 1 KiB a mark) that writing it takes a while.
fn big_timeline(path: &Path, marks: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let name = "x".repeat(1000);
    write!(
        f,
        r#"{{"schema":"bootscope.timeline","version":1,"vmm":"bootscope 0.1.0","host_kvm":"none","phases":[],"marks":["#
    )
    .unwrap();
    for i in 0..marks {
        let sep = if i == 0 { "" } else { "," };
        write!(
            f,
            r#"{sep}{{"name":"{name} {i}","source":"vmm","t_ns":{i}}}"#
        )
        .unwrap();
    }
    write!(f, "]}}").unwrap();
    f.flush().unwrap();
}

/// The names in `dir` that look like a writer's temporary file for
/// `name`: `.NAME.` + random + `.tmp`.
fn temporaries(dir: &Path, name: &str) -> Vec<String> {
    let prefix = format!(".{name}.");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix) && n.ends_with(".tmp"))
        .collect()
}

/// SIGINT or SIGTERM to a short command (here `export`) while it writes
/// its output: the real binary is killed in the middle of the write (its
/// temporary file seen in the directory), exits 130 or 143, leaves no
/// temporary file, and the output keeps its previous contents.
#[test]
fn a_signal_during_a_write_leaves_no_temporary_file() {
    let d = scratch("signal-write");
    let input = d.join("big-timeline.json");
    big_timeline(&input, 30_000);
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let out_dir = d.join(format!("out-{sig}"));
        std::fs::create_dir_all(&out_dir).unwrap();
        let out = out_dir.join("out.json");
        let mut caught = false;
        // The window is the write and its flush to disk; should one try
        // miss it (the rename came first), try again.
        for _attempt in 0..5 {
            std::fs::write(&out, b"previous contents").unwrap();
            let mut child = bootscope_cmd(&["export", "--json", "-o"])
                .arg(&out)
                .arg(&input)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut seen = false;
            while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
                if !temporaries(&out_dir, "out.json").is_empty() {
                    // SAFETY: kill(2) with our own child's pid, not reaped.
                    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
                    seen = true;
                    break;
                }
            }
            let o = child.wait_with_output().unwrap();
            let err = stderr(&o);
            assert!(seen || o.status.success(), "export failed: {err}");
            assert!(
                temporaries(&out_dir, "out.json").is_empty(),
                "temporary file left behind ({:?}): {err}",
                o.status
            );
            let names: Vec<_> = std::fs::read_dir(&out_dir).unwrap().flatten().collect();
            assert_eq!(names.len(), 1, "{names:?}");
            let now = std::fs::read(&out).unwrap();
            if seen && o.status.code() == Some(code) && now == b"previous contents" {
                caught = true;
                break;
            }
            // Missed: the rename came before the signal, or the export
            // ended first. Either way the output is whole, never half.
            assert!(
                o.status.success() || o.status.code() == Some(code),
                "{:?}: {err}",
                o.status
            );
            let doc: serde_json::Value =
                serde_json::from_slice(&now).expect("a whole output, or the previous one");
            assert!(doc.is_object());
        }
        assert!(caught, "never caught the export in its write");
    }
    let _ = std::fs::remove_dir_all(&d);
}
