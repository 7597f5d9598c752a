//! What a hostile local user can try against bootscope's command line, by
//! class: shared directories and the cache (planted or opened-up
//! directories, damaged entries), FIFOs and blocking opens, standard output
//! that is closed or full, what reaches the terminal (credentials, a
//! server's escape sequences, bad ports), and unbounded inputs.

mod support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::{fixture, is_root, lab_baseline, recorded, stderr};

fn bootscope() -> Command {
    let mut c = support::bootscope();
    c.stdin(Stdio::null());
    c
}

/// A private scratch directory, removed when dropped.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bootscope-trust-")
        .tempdir()
        .unwrap()
}

fn mkfifo(p: &Path) {
    support::mkfifo(p, 0o666);
}

/// Runs `cmd`, killing it (and failing) if it takes longer than `secs`.
fn output_within(cmd: &mut Command, secs: u64) -> Output {
    support::output_within(cmd, Duration::from_secs(secs))
}

// ---- 1 and 2: shared directories and the cache ----

#[test]
fn without_home_the_cache_is_private_or_refused() {
    let d = scratch();
    let kernel = fixture("mini-bzimage-reset.bin");
    // `env -i`: no HOME, no XDG_CACHE_HOME. /tmp is never the cache.
    let o = output_within(
        bootscope()
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("TMPDIR", d.path())
            .args(["run", "--stop-after", "memory", "--kernel", &kernel]),
        60,
    );
    let e = stderr(&o);
    assert!(!e.contains("/tmp/bootscope"), "{e}");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "{e}");
    if is_root() {
        // Root's is /var/cache/bootscope, created private.
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata("/var/cache/bootscope/kernels").unwrap();
        assert_eq!(m.uid(), 0);
        assert_eq!(m.mode() & 0o077, 0, "{:o}", m.mode());
        assert!(!e.contains("kernel cache is not used"), "{e}");
    } else {
        assert!(e.contains("neither XDG_CACHE_HOME nor HOME"), "{e}");
    }
}

#[test]
fn a_group_writable_cache_is_refused_saying_why() {
    let d = scratch();
    let cache = d.path().join("bootscope");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o770)).unwrap();
    let kernel = fixture("mini-bzimage-reset.bin");
    let o = output_within(
        bootscope().env("XDG_CACHE_HOME", d.path()).args([
            "run",
            "--stop-after",
            "memory",
            "--kernel",
            &kernel,
        ]),
        60,
    );
    let e = stderr(&o);
    assert!(
        e.contains("the kernel cache is not used") && e.contains("group-writable"),
        "{e}"
    );
    assert!(
        !cache.join("kernels").exists(),
        "nothing written in a refused cache"
    );
}

// ---- 4: FIFOs and blocking opens ----

#[test]
fn fifos_as_inputs_do_not_block() {
    let d = scratch();
    let fifo = d.path().join("fifo");
    mkfifo(&fifo);
    let f = fifo.display().to_string();
    let out = d.path().join("out.svg").display().to_string();
    for args in [
        vec!["export", "--json", &f],
        vec!["initcalls", &f],
        vec!["plot", &f, "--output", &out],
        vec!["compare", &f, &f],
    ] {
        let o = output_within(bootscope().args(&args), 20);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
}

#[test]
fn a_serial_fifo_without_a_reader_is_refused_at_once() {
    let d = scratch();
    let fifo = d.path().join("console");
    mkfifo(&fifo);
    let kernel = fixture("mini-bzimage-reset.bin");
    let o = output_within(
        bootscope().args([
            "run",
            "--kernel",
            &kernel,
            "--serial",
            &fifo.display().to_string(),
        ]),
        20,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no process is reading"),
        "{}",
        stderr(&o)
    );
}

/// Whether process `pid` has `path` open.
fn has_open(pid: u32, path: &Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path))
    })
}

#[test]
fn sigterm_ends_a_command_waiting_on_a_fifo() {
    let d = scratch();
    let fifo = d.path().join("console.log");
    mkfifo(&fifo);
    // A writer that never writes: the read waits.
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let mut child = bootscope()
        .args(["initcalls", &fifo.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Signalled once it catches SIGTERM and has the FIFO open, whatever
    // the host's load makes of its start.
    let pid = child.id();
    support::wait_for(120, "the command to open the FIFO", || {
        (support::catches_signal(pid, libc::SIGTERM) && has_open(pid, &fifo)).then_some(())
    });
    // SAFETY: kill with a valid pid and signal.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    // A command that ignored SIGTERM would wait for the FIFO for ever:
    // the cap only reports that hang.
    let status = support::wait_for(120, "the command to end after SIGTERM", || {
        child.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(143));
    drop(holder);
}

#[test]
fn a_planted_fifo_in_a_sticky_directory_is_not_written() {
    support::require_root!("to plant a FIFO owned by another user");
    let d = scratch();
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let plant = |name: &str| {
        let p = shared.join(name);
        mkfifo(&p);
        std::os::unix::fs::lchown(&p, Some(54321), Some(54321)).unwrap();
        // The planter reads it, so a write would not block.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags_nonblock()
            .open(&p)
            .unwrap();
        (p, reader)
    };
    let (out, mut r1) = plant("out.json");
    let o = output_within(
        bootscope().args([
            "export",
            "--json",
            "-o",
            &out.display().to_string(),
            &recorded("lab-sites-loud.timeline.json"),
        ]),
        20,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("uid 54321"), "{}", stderr(&o));
    let (_page, mut r2) = plant("bootscope.1");
    let o = output_within(
        bootscope().args(["man", "--out-dir", &shared.display().to_string()]),
        20,
    );
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    for r in [&mut r1, &mut r2] {
        let mut got = Vec::new();
        let _ = r.read_to_end(&mut got);
        assert!(got.is_empty(), "written into a planted FIFO");
    }
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK)
    }
}

// ---- 5: standard output closed or full ----

/// Every subcommand, each with an invocation that writes to standard
/// output (its help where it needs a guest or root to print anything).
fn stdout_commands(d: &Path) -> Vec<Vec<String>> {
    let console = d.join("console.log");
    std::fs::write(
        &console,
        "[    0.100000] calling  a_init+0x0/0x10 @ 1\n\
         [    0.200000] initcall a_init+0x0/0x10 returned 0 after 100000 usecs\n",
    )
    .unwrap();
    let bench = lab_baseline();
    let loud = recorded("lab-sites-loud.profile.json");
    let quiet = recorded("lab-sites-quiet.profile.json");
    let timeline = recorded("lab-sites-loud.timeline.json");
    let mut v: Vec<Vec<String>> = [
        vec!["doctor"],
        vec!["doctor", "--json"],
        vec!["compare", &loud, &quiet],
        vec!["check", "--baseline", &bench, &bench],
        vec!["initcalls", &console.display().to_string()],
        vec!["export", "--format", "csv", &timeline],
        vec!["export", "--json", &loud],
        vec!["completions", "bash"],
        vec!["--help"],
        vec!["--version"],
    ]
    .into_iter()
    .map(|a| a.into_iter().map(String::from).collect())
    .collect();
    for sub in [
        "run",
        "doctor",
        "lab",
        "demo",
        "profile",
        "bench",
        "compare",
        "check",
        "exporter",
        "initcalls",
        "plot",
        "export",
        "completions",
        "man",
    ] {
        v.push(vec![sub.to_string(), "--help".to_string()]);
    }
    v
}

#[test]
fn a_closed_pipe_ends_every_command_quietly() {
    let d = scratch();
    for args in stdout_commands(d.path()) {
        let mut child = bootscope()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before anything is read (`| head -c0`).
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        assert!(!e.contains("error"), "{args:?}: {e}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {e}");
    }
}

#[test]
fn a_full_device_is_exit_1_with_a_message() {
    let d = scratch();
    for args in stdout_commands(d.path()) {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = bootscope()
            .args(&args)
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains("cannot write standard output"), "{args:?}: {e}");
    }
}

// ---- 6: what reaches the terminal ----

/// A one-shot HTTP server answering every request with `status` and
/// `body`; returns its port and the requests it got.
fn answering(status: &str, body: &'static [u8]) -> (u16, std::thread::JoinHandle<String>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let status = status.to_string();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 65536];
        // Headers, then the body (Content-Length).
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            req.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&req).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if req.len() >= end + 4 + len {
                    break;
                }
            }
        }
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        String::from_utf8_lossy(&req).into_owned()
    });
    (port, h)
}

fn check_push(url: &str) -> Output {
    let bench = lab_baseline();
    output_within(
        bootscope().args(["check", "--baseline", &bench, &bench, "--push", url]),
        60,
    )
}

#[test]
fn push_credentials_are_never_printed() {
    // Accepted.
    let (port, server) = answering("200 OK", b"");
    let o = check_push(&format!("http://user:s3cret@127.0.0.1:{port}"));
    let req = server.join().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(e.contains("pushed to http://***@127.0.0.1"), "{e}");
    assert!(!e.contains("s3cret") && !e.contains("user:"), "{e}");
    // Sent as basic authentication: base64("user:s3cret").
    assert!(req.contains("dXNlcjpzM2NyZXQ="), "{req}");
    // Refused, with escape sequences in the body.
    let (port, server) = answering("400 Bad Request", b"no\x1b]0;pwned\x07\x1b[2J!");
    let o = check_push(&format!("http://user:s3cret@127.0.0.1:{port}/"));
    server.join().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains('\u{1b}') && !e.contains('\u{7}'), "{e:?}");
    assert!(e.contains("no\\e]0;pwned\\u{07}\\e[2J!"), "{e}");
    assert!(!e.contains("s3cret"), "{e}");
    // Nobody listening.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let o = check_push(&format!("http://user:s3cret@127.0.0.1:{port}"));
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("s3cret"), "{e}");
}

#[test]
fn an_impossible_port_is_bad_input() {
    let o = check_push("http://user:s3cret@127.0.0.1:99999");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("not a port"), "{e}");
    assert!(!e.contains("s3cret") && !e.contains("refused"), "{e}");
}

// ---- 7: unbounded inputs ----

#[test]
fn inputs_have_a_size_limit_checked_before_reading() {
    let d = scratch();
    let big = d.path().join("big.json");
    // Sparse: 3 GiB that take no space.
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(3 << 30).unwrap();
    let b = big.display().to_string();
    let out = d.path().join("o.svg").display().to_string();
    for args in [
        vec!["export", "--json", &b],
        vec!["initcalls", &b],
        vec!["plot", &b, "--output", &out],
        vec!["compare", &b, &b],
    ] {
        let o = output_within(bootscope().args(&args), 20);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("input limit") && e.contains("BOOTSCOPE_MAX_INPUT"),
            "{args:?}: {e}"
        );
    }
    // An endless device: refused at its first byte, which no JSON
    // document starts with (nothing more is read).
    let o = output_within(
        bootscope()
            .env("BOOTSCOPE_MAX_INPUT", "16M")
            .args(["export", "--json", "/dev/zero"]),
        20,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("/dev/zero is not JSON (its first byte is 0x00"),
        "{}",
        stderr(&o)
    );
    // The limit raised: the file is read (and found not to be JSON).
    let small = d.path().join("small.json");
    std::fs::write(&small, vec![b' '; 2048]).unwrap();
    let s = small.display().to_string();
    let o = output_within(
        bootscope()
            .env("BOOTSCOPE_MAX_INPUT", "1K")
            .args(["export", "--json", &s]),
        20,
    );
    assert!(
        stderr(&o).contains("input limit of 1 KiB"),
        "{}",
        stderr(&o)
    );
    let o = output_within(
        bootscope()
            .env("BOOTSCOPE_MAX_INPUT", "4K")
            .args(["export", "--json", &s]),
        20,
    );
    assert!(!stderr(&o).contains("input limit"), "{}", stderr(&o));
    let o = output_within(
        bootscope()
            .env("BOOTSCOPE_MAX_INPUT", "lots")
            .args(["export", "--json", &s]),
        20,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("BOOTSCOPE_MAX_INPUT"), "{}", stderr(&o));
}

#[test]
fn initcall_timestamps_that_overflow_are_an_error() {
    let d = scratch();
    let log = d.path().join("console.log");
    std::fs::write(
        &log,
        "[    0.100000] calling  a_init+0x0/0x10 @ 1\n\
         [99999999999.000000] initcall a_init+0x0/0x10 returned 0 after 1 usecs\n",
    )
    .unwrap();
    let o = output_within(
        bootscope().args(["initcalls", &log.display().to_string()]),
        20,
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("line 2") && e.contains("out of range"), "{e}");
    std::fs::write(
        &log,
        "[    0.100000] calling  a_init+0x0/0x10 @ 1\n\
         [    0.200000] initcall a_init+0x0/0x10 returned 0 after 18446744073709551 usecs\n",
    )
    .unwrap();
    let o = output_within(
        bootscope().args(["initcalls", &log.display().to_string()]),
        20,
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("a_init") && e.contains("out of range"), "{e}");
}
