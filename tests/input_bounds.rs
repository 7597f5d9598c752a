//! Documents are read as a stream from a bounded reader: what is not JSON
//! is refused at its first byte, with memory bounded by that work and not
//! by the input (`/dev/zero`, a FIFO that gives one byte and then
//! nothing); a FIFO is never waited on; and a file a document names (a
//! timeline's initrd) is opened only if it is a regular file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

mod support;

use support::*;

/// What a run of bootscope gave, with its own peak memory.
struct Measured {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// Peak resident set size, in KiB (`getrusage` of this process only).
    max_rss_kib: i64,
}

/// Runs `bootscope ARGS` (standard input empty) and measures its peak
/// memory with `wait4`. A run still going after `limit` is a hang: it is
/// killed and fails the test.
// The child is reaped by `wait4` (which gives its own rusage), not `wait`.
#[allow(clippy::zombie_processes)]
fn measured(args: &[&str], dir: &Path, limit: Duration) -> Measured {
    let out = dir.join("stdout");
    let err = dir.join("stderr");
    let child = bootscope()
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .expect("bootscope runs");
    let pid = child.id() as libc::pid_t;
    let start = std::time::Instant::now();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be filled.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child, with valid pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if start.elapsed() > limit {
            // SAFETY: kill and reap our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!(
                "{args:?} still running after {limit:?} (killed); stderr: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = std::process::ExitStatus::from_raw(status);
    Measured {
        code: status.code(),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
        max_rss_kib: usage.ru_maxrss,
    }
}

/// How long a run that should end at once may take before it counts as a
/// hang (generous: a loaded machine is slow, a hang is forever).
const HANG: Duration = Duration::from_secs(120);

/// Peak memory a refused input may cost: the program itself and one
/// buffer, far below the 1 GiB the old reader took.
const REFUSED_RSS_KIB: i64 = 64 << 10;

/// A FIFO at `dir/name` whose write end this process holds open (so a
/// reader does not see its end), with `bytes` in it.
fn fifo_with(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, File) {
    let p = dir.join(name);
    mkfifo(&p, 0o600);
    // O_RDWR: open without a reader on the other side, and without
    // blocking.
    let mut w = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&p)
        .unwrap();
    w.write_all(bytes).unwrap();
    (p, w)
}

fn refused(m: &Measured, args: &[&str], needles: &[&str]) {
    assert_eq!(m.code, Some(2), "{args:?}: {}", m.stderr);
    assert!(!m.stderr.contains("panicked"), "{args:?}: {}", m.stderr);
    for n in needles {
        assert!(
            m.stderr.contains(n),
            "{args:?}: stderr lacks {n:?}: {}",
            m.stderr
        );
    }
}

#[test]
fn export_of_dev_zero_is_refused_at_its_first_byte_in_bounded_memory() {
    let d = scratch("input-zero");
    for args in [
        &["export", "--format", "json", "/dev/zero"][..],
        &["export", "--format", "csv", "/dev/zero"],
        &["advise", "/dev/zero"],
        &["plot", "/dev/zero", "-o", d.join("o.svg").to_str().unwrap()],
        &["compare", "/dev/zero", "/dev/zero"],
        &["check", "--baseline", "/dev/zero", "/dev/zero"],
    ] {
        let m = measured(args, &d, HANG);
        refused(&m, args, &["/dev/zero", "first byte is 0x00"]);
        assert!(
            m.max_rss_kib < REFUSED_RSS_KIB,
            "{args:?} took {} KiB to refuse /dev/zero",
            m.max_rss_kib
        );
        assert!(m.stdout.is_empty(), "{args:?} wrote {:?}", m.stdout);
    }
}

#[test]
fn a_fifo_that_gives_one_byte_and_then_nothing_is_refused_at_that_byte() {
    let d = scratch("input-fifo-byte");
    // The writer stays open and writes nothing more: a reader that wanted
    // more than the first byte would wait forever (and the run be killed
    // as a hang).
    for (i, args) in [
        &["export", "--format", "json"][..],
        &["advise"],
        &["tui"],
        &["plot"],
    ]
    .iter()
    .enumerate()
    {
        let (p, writer) = fifo_with(&d, &format!("fifo{i}"), b"x");
        let mut all = args.to_vec();
        all.push(p.to_str().unwrap());
        let svg = d.join("o.svg");
        if args[0] == "plot" {
            all.extend(["-o", svg.to_str().unwrap()]);
        }
        let m = measured(&all, &d, HANG);
        refused(&m, &all, &["first byte is 'x'"]);
        assert!(
            m.max_rss_kib < REFUSED_RSS_KIB,
            "{all:?}: {} KiB",
            m.max_rss_kib
        );
        drop(writer);
    }
}

#[test]
fn a_fifo_without_a_writer_is_not_waited_on() {
    let d = scratch("input-fifo-none");
    let p = d.join("fifo");
    mkfifo(&p, 0o600);
    let path = p.to_str().unwrap();
    for args in [
        &["advise", path][..],
        &["export", "--format", "json", path],
        &["tui", path],
        &["compare", path, path],
    ] {
        let m = measured(args, &d, HANG);
        refused(&m, args, &[path, "empty"]);
    }
}

/// The advise fixture's timeline with its initrd set to `initrd`.
fn timeline_naming(dir: &Path, initrd: &str) -> PathBuf {
    let mut t = read_json(recorded("advise-slow.timeline.json"));
    t["guest"]["initrd"] = initrd.into();
    let p = dir.join("timeline.json");
    std::fs::write(&p, serde_json::to_vec_pretty(&t).unwrap()).unwrap();
    p
}

#[test]
fn advise_does_not_open_a_device_or_fifo_a_timeline_names_as_its_initrd() {
    let d = scratch("input-initrd");
    let fifo = d.join("initrd.fifo");
    mkfifo(&fifo, 0o600);
    let mut named = vec![
        (fifo.to_str().unwrap().to_string(), "is a FIFO"),
        ("/dev/null".to_string(), "is a character device"),
        (d.to_str().unwrap().to_string(), "is a directory"),
    ];
    if Path::new("/dev/ttyS0").exists() {
        named.push(("/dev/ttyS0".into(), "is a character device"));
    }
    for (initrd, what) in named {
        let t = timeline_naming(&d, &initrd);
        // A FIFO opened for reading would wait for a writer forever; a
        // terminal opened would be reconfigured or become the controlling
        // terminal.
        let m = measured(&["advise", t.to_str().unwrap()], &d, HANG);
        assert_eq!(m.code, Some(0), "{initrd}: {}", m.stderr);
        assert!(
            m.stderr.contains("the timeline's initrd was not read")
                && m.stderr.contains(what)
                && m.stderr.contains("not a regular file"),
            "{initrd}: {}",
            m.stderr
        );
    }
    // A regular file is read: its compression is known.
    let cpio = d.join("initrd.cpio");
    std::fs::write(&cpio, b"070701000").unwrap();
    let t = timeline_naming(&d, cpio.to_str().unwrap());
    let m = measured(&["advise", t.to_str().unwrap()], &d, HANG);
    assert_eq!(m.code, Some(0), "{}", m.stderr);
    assert!(!m.stderr.contains("was not read"), "{}", m.stderr);
}

#[test]
fn a_document_of_another_kind_is_told_from_its_head() {
    let d = scratch("input-head");
    // A profile of a later version: refused from its first two fields,
    // however much follows.
    let p = d.join("v9.json");
    let mut text = br#"{"schema": "bootscope.profile", "version": 9, "pad": ""#.to_vec();
    text.extend(std::iter::repeat_n(b'a', 8 << 20));
    text.extend(b"\"}");
    std::fs::write(&p, &text).unwrap();
    let path = p.to_str().unwrap();
    for args in [&["export", "--format", "json", path][..], &["advise", path]] {
        let m = measured(args, &d, HANG);
        refused(&m, args, &["version 9"]);
    }
}
