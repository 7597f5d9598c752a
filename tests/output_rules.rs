//! The output rules of every command: standard output through the checked
//! writer (a closed pipe ends quietly, a full device is exit status 1), an
//! output that is one of the command's inputs refused (exit 2, naming both
//! flags, the input untouched), outputs that cannot take the data refused
//! before the work; and the messages and exit statuses of the arguments
//! that contradict each other.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use support::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `bootscope ARGS` with standard output on `/dev/full`.
fn to_full(args: &[&str]) -> Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    bootscope()
        .args(args)
        .stdin(Stdio::null())
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// `bootscope ARGS` with standard output a pipe closed before anything is
/// read (`| head -c0`).
fn to_closed_pipe(args: &[&str]) -> Output {
    let mut child = bootscope()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

fn assert_full_is_exit_1(args: &[&str]) {
    let o = to_full(args);
    let e = stderr(&o);
    assert!(!e.contains("panicked"), "{args:?}: {e}");
    assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
    assert!(e.contains("cannot write standard output"), "{args:?}: {e}");
    assert!(e.contains("No space left"), "{args:?}: {e}");
}

fn assert_closed_pipe_is_quiet(args: &[&str]) {
    let o = to_closed_pipe(args);
    let e = stderr(&o);
    assert!(!e.contains("panicked"), "{args:?}: {e}");
    // advise's own notes on its evidence (an initrd not read names the
    // system's error) are not about the output.
    let about_output = e.lines().filter(|l| !l.starts_with("advise: "));
    assert!(
        about_output.clone().all(|l| !l.contains("error")),
        "{args:?}: {e}"
    );
    assert_eq!(o.status.code(), Some(0), "{args:?}: {e}");
}

fn advise_documents() -> [String; 2] {
    [
        recorded("advise-slow.timeline.json"),
        recorded("advise-slow.profile.json"),
    ]
}

// ---- standard output ----

#[test]
fn advise_to_a_full_device_or_a_closed_pipe() {
    let [t, p] = advise_documents();
    for args in [
        vec!["advise", &t, &p],
        vec!["advise", "--json", &t, &p],
        vec!["advise", &t],
        vec!["advise", "--help"],
    ] {
        assert_full_is_exit_1(&args);
        assert_closed_pipe_is_quiet(&args);
    }
}

#[test]
fn advise_writes_its_files_when_standard_output_fails() {
    let d = scratch("advise-files");
    let [t, p] = advise_documents();
    let (json, svg) = (d.join("advice.json"), d.join("advice.svg"));
    let args = ["advise", &t, &p, "-o", s(&json), "--svg", s(&svg)];
    assert_full_is_exit_1(&args);
    assert!(read_json(&json)["findings"].is_array());
    assert!(std::fs::read_to_string(&svg).unwrap().contains("</svg>"));
    std::fs::remove_file(&json).unwrap();
    assert_closed_pipe_is_quiet(&args);
    assert!(read_json(&json)["findings"].is_array());
}

#[test]
fn guest_build_default_to_a_full_device() {
    if bootscope_lab::find_debian_kernel().is_err() {
        skip("no Debian kernel in /boot (the default guest boots it)");
        return;
    }
    if bootscope_lab::guest::static_busybox().is_err() {
        skip("no static busybox (scripts/deps.sh installs busybox-static)");
        return;
    }
    let d = scratch("guest-default-full");
    let out = d.join("guest.cpio");
    assert_full_is_exit_1(&["guest", "build", "default", "--out", s(&out)]);
    // The initramfs is written first: only the printing failed.
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
    assert_closed_pipe_is_quiet(&["guest", "build", "default", "--out", s(&out)]);
    for sub in [
        vec!["guest", "--help"],
        vec!["guest", "build", "debian", "--help"],
    ] {
        assert_full_is_exit_1(&sub);
        assert_closed_pipe_is_quiet(&sub);
    }
}

#[test]
fn the_guest_console_on_a_closed_pipe_ends_quietly() {
    require_kvm!();
    let k = fixture("mini-bzimage-reset.bin");
    // The console (`--serial stdout`) is standard output: a reader gone
    // takes the rest; the boot and its exit status are unchanged.
    let args = ["run", "--kernel", &k, "--no-profile", "--no-summary"];
    assert_closed_pipe_is_quiet(&args);
}

#[test]
fn a_profiled_command_s_output_to_a_full_device_or_a_closed_pipe() {
    require_bpf!();
    let d = scratch("profile-stdout");
    let out = d.join("p.json");
    let args = [
        "profile",
        "--no-summary",
        "-o",
        s(&out),
        "--",
        "echo",
        "hello",
    ];
    assert_full_is_exit_1(&args);
    // The profile is written all the same.
    assert!(read_json(&out)["schema"].is_string());
    assert_closed_pipe_is_quiet(&args);
    // The command's own exit status stays where it is not 0.
    let o = to_full(&[
        "profile",
        "--no-summary",
        "-o",
        s(&out),
        "--",
        "sh",
        "-c",
        "echo x; exit 3",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
}

#[test]
fn the_lab_console_to_a_full_device_or_a_closed_pipe() {
    require_lab!();
    let busybox = require_busybox!();
    let args = ["lab", "--exe", s(&busybox), "--", "echo", "hello"];
    assert_full_is_exit_1(&args);
    assert_closed_pipe_is_quiet(&args);
}

// ---- outputs that would destroy inputs ----

/// A scratch copy of `src` named `name`.
fn copy_in(d: &Path, src: &str, name: &str) -> PathBuf {
    let p = d.join(name);
    std::fs::copy(src, &p).unwrap();
    p
}

/// Runs `args`, expects exit 2 naming both flags, and `input` unchanged.
fn expect_input_kept(args: &[&str], input: &Path, flags: [&str; 2]) {
    let before = std::fs::read(input).unwrap();
    let o = bootscope_output(args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    assert!(!e.contains("panicked"), "{args:?}: {e}");
    for f in flags {
        assert!(e.contains(f), "{args:?}: stderr lacks {f}: {e}");
    }
    assert!(e.contains("would destroy"), "{args:?}: {e}");
    assert!(stdout(&o).is_empty(), "{args:?}: {}", text(&o));
    assert_eq!(std::fs::read(input).unwrap(), before, "{args:?} changed it");
}

#[test]
fn check_refuses_its_baseline_or_current_file_as_output() {
    let d = scratch("check-same");
    let b = copy_in(&d, &lab_baseline(), "b.json");
    let c = copy_in(&d, &lab_baseline(), "c.json");
    let base = ["check", "--baseline"];
    let flags = ["--output", "--baseline"];
    expect_input_kept(
        &[&base[..], &[s(&b), s(&c), "-o", s(&b)]].concat(),
        &b,
        flags,
    );
    // The same file however it is named: ./b.json, a link, a hard link.
    std::os::unix::fs::symlink("b.json", d.join("link.json")).unwrap();
    std::fs::hard_link(&b, d.join("hard.json")).unwrap();
    for other in ["link.json", "hard.json"] {
        let o = d.join(other);
        expect_input_kept(
            &[&base[..], &[s(&b), s(&c), "-o", s(&o)]].concat(),
            &b,
            flags,
        );
    }
    let dotted = format!("{}/./b.json", d.display());
    expect_input_kept(
        &[&base[..], &[s(&b), s(&c), "--output", &dotted]].concat(),
        &b,
        flags,
    );
    let flags = ["--output", "CURRENT.json"];
    expect_input_kept(
        &[&base[..], &[s(&b), s(&c), "-o", s(&c)]].concat(),
        &c,
        flags,
    );
    // Another file, new or not, is written.
    for out in ["report.txt", "report.txt"] {
        let out = d.join(out);
        let o = bootscope_output(&[&base[..], &[s(&b), s(&c), "-o", s(&out)]].concat());
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(std::fs::read_to_string(&out)
            .unwrap()
            .contains("result: pass"));
    }
}

#[test]
fn reports_refuse_their_input_as_output() {
    let d = scratch("reports-same");
    let b = copy_in(&d, &lab_baseline(), "bench.json");
    let loud = copy_in(&d, &recorded("lab-sites-loud.profile.json"), "loud.json");
    let quiet = copy_in(&d, &recorded("lab-sites-quiet.profile.json"), "quiet.json");
    let t = copy_in(&d, &recorded("advise-slow.timeline.json"), "t.json");
    let p = copy_in(&d, &recorded("advise-slow.profile.json"), "p.json");
    let console = d.join("console.log");
    std::fs::write(
        &console,
        "[    0.100000] calling  a_init+0x0/0x10 @ 1\n\
         [    0.200000] initcall a_init+0x0/0x10 returned 0 after 100000 usecs\n",
    )
    .unwrap();
    let cases: Vec<(Vec<&str>, &Path, [&str; 2])> = vec![
        (
            vec!["plot", "-o", s(&b), s(&b)],
            &b,
            ["--output", "INPUT.json"],
        ),
        (
            vec!["plot", "--flamegraph", "-o", s(&loud), s(&loud)],
            &loud,
            ["--output", "INPUT.json"],
        ),
        (
            vec!["compare", s(&b), "-o", s(&b)],
            &b,
            ["--output", "BENCH.json"],
        ),
        (
            vec!["compare", s(&loud), s(&quiet), "-o", s(&quiet)],
            &quiet,
            ["--output", "BENCH.json"],
        ),
        (
            vec!["initcalls", s(&console), "-o", s(&console)],
            &console,
            ["--output", "CONSOLE-LOG"],
        ),
        (
            vec!["export", "--format", "csv", "-o", s(&t), s(&t)],
            &t,
            ["--output", "INPUT"],
        ),
        (
            vec!["advise", s(&t), s(&p), "-o", s(&p)],
            &p,
            ["--output", "TIMELINE-OR-PROFILE.json"],
        ),
        (
            vec!["advise", s(&t), s(&p), "--svg", s(&t)],
            &t,
            ["--svg", "TIMELINE-OR-PROFILE.json"],
        ),
    ];
    for (args, input, flags) in cases {
        expect_input_kept(&args, input, flags);
    }
}

#[test]
fn run_refuses_to_write_over_its_kernel_initrd_or_disk() {
    let d = scratch("run-same");
    let k = d.join("kernel");
    let i = d.join("initrd");
    let disk = d.join("disk.raw");
    for f in [&k, &i, &disk] {
        std::fs::write(f, b"not replaced").unwrap();
    }
    let common = ["run", "--no-profile", "--kernel", s(&k), "--initrd", s(&i)];
    expect_input_kept(
        &[&common[..], &["--timeline", s(&k)]].concat(),
        &k,
        ["--timeline", "--kernel"],
    );
    expect_input_kept(
        &[&common[..], &["--serial", s(&i)]].concat(),
        &i,
        ["--serial", "--initrd"],
    );
    expect_input_kept(
        &[&common[..], &["--disk", s(&disk), "--timeline", s(&disk)]].concat(),
        &disk,
        ["--timeline", "--disk"],
    );
}

#[test]
fn a_full_device_as_output_is_refused_before_the_work() {
    let b = lab_baseline();
    for args in [
        vec!["check", "--baseline", &b, &b, "-o", "/dev/full"],
        vec!["plot", "-o", "/dev/full", &b],
        vec!["compare", &b, &b, "-o", "/dev/full"],
        // Before any run: the kernel named does not even exist.
        vec![
            "bench",
            "--runs",
            "1",
            "-o",
            "/dev/full",
            "--",
            "run",
            "--kernel",
            "/nonexistent",
        ],
        vec![
            "run",
            "--kernel",
            "/nonexistent",
            "--no-profile",
            "--timeline",
            "/dev/full",
        ],
    ] {
        let o = bootscope_output(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            e.contains("/dev/full") && e.contains("No space left"),
            "{args:?}: {e}"
        );
        assert!(!e.contains("bench: ["), "{args:?} ran: {e}");
        assert!(!e.contains("/nonexistent"), "{args:?} went on: {e}");
    }
    // The devices that take anything stay outputs.
    let o = bootscope_output(&["check", "--baseline", &b, &b, "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn guest_build_debian_refuses_an_image_output_that_is_no_file_at_once() {
    let d = scratch("debian-out");
    let fifo = d.join("image.fifo");
    mkfifo(&fifo, 0o600);
    let cache = d.join("cache");
    for (out, words) in [
        ("/dev/full", "No space left"),
        ("/dev/null", "character device"),
        (s(&fifo), "FIFO"),
    ] {
        // A hang guard only: the refusal comes before anything is built.
        let o = output_within(
            bootscope()
                .args(["guest", "build", "debian", "--out", out])
                .env("XDG_CACHE_HOME", &cache),
            Duration::from_secs(120),
        );
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{out}: {}", text(&o));
        assert!(e.contains("--out") && e.contains(words), "{out}: {e}");
        assert!(
            !cache.join("bootscope").join("guests").exists(),
            "{out}: built"
        );
    }
}

// ---- messages and exit statuses ----

#[test]
fn compare_says_a_missing_file_does_not_exist() {
    let d = scratch("compare-missing");
    let p = recorded("lab-sites-loud.profile.json");
    let missing = d.join("nonexistent.json");
    for args in [[s(&missing), &p], [&p, s(&missing)]] {
        let o = bootscope_output(&[&["compare"][..], &args[..]].concat());
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(e.contains(s(&missing)) && e.contains("No such file"), "{e}");
        assert!(!e.contains("not a bootscope document"), "{e}");
    }
    // A file there that is not a document still says so.
    let junk = d.join("junk.json");
    std::fs::write(&junk, "hello").unwrap();
    let o = bootscope_output(&["compare", &p, s(&junk)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("not a bootscope document"),
        "{}",
        text(&o)
    );
}

#[test]
fn run_refuses_a_profile_output_without_a_profile() {
    let d = scratch("run-no-profile");
    let out = d.join("profile.json");
    for o_flag in ["-o", "--output"] {
        let o = bootscope_output(&["run", "--no-profile", o_flag, s(&out)]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(e.contains("--no-profile") && e.contains("--output"), "{e}");
        assert!(!out.exists());
    }
}

#[test]
fn bench_refuses_profile_with_a_run_that_is_not_profiled() {
    for tail in [
        vec!["run", "--no-profile"],
        vec!["run", "--kernel", "k", "--vs", "run", "--no-profile"],
    ] {
        let args = [&["bench", "--profile", "--runs", "1", "--"][..], &tail[..]].concat();
        let o = bootscope_output(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(e.contains("--no-profile") && e.contains("--profile"), "{e}");
        assert!(!e.contains("bench: ["), "{args:?} ran: {e}");
    }
}

#[test]
fn advise_prove_refuses_run_profile_flags_up_front() {
    let [t, p] = advise_documents();
    for flag in ["--no-profile", "--profile"] {
        for docs in [vec![], vec![t.as_str(), p.as_str()]] {
            let args = [
                &["advise"][..],
                &docs[..],
                &["--prove", "--", "run", "--kernel", "/nonexistent", flag],
            ]
            .concat();
            let o = bootscope_output(&args);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
            assert!(e.contains(&format!("leave {flag} out")), "{args:?}: {e}");
            assert!(!e.contains("check boot of"), "{args:?} booted: {e}");
        }
    }
}

#[test]
fn push_urls_never_show_their_credentials() {
    let b = lab_baseline();
    for url in [
        "http://USER:PA/SS@127.0.0.1:1",
        "http://USER:PA/SS@127.0.0.1:99999",
        "http://US/ER:PASS@127.0.0.1:1/x",
        "http://USER:PASS@127.0.0.1:1/a@b",
        "https://USER:PA/SS@127.0.0.1:1",
    ] {
        let o = bootscope_output(&["check", "--baseline", &b, &b, "--push", url]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{url}: {}", text(&o));
        for secret in ["USER", "US/", "PA", "SS", "ER"] {
            assert!(!e.contains(secret), "{url}: {e}");
        }
        assert!(e.contains("***@"), "{url}: {e}");
    }
}

#[test]
fn tiny_significance_levels_are_printed_short() {
    let o = bootscope_output(&[
        "advise",
        "--prove",
        "--level",
        "1e-300",
        "--",
        "run",
        "--kernel",
        "/nonexistent",
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(e.contains("1e-300"), "{e}");
    assert!(!e.contains("0.000000"), "{e}");
    assert!(e.len() < 400, "{e}");
}
