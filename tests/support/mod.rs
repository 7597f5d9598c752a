//! What the root crate's test binaries share: the `bootscope` binary and
//! its output, fixtures and scratch directories, child processes that end
//! with the test, and the capability checks (root, `/dev/kvm` and eBPF
//! from the workspace's test kit, `testkit/`).
//!
//! Each test binary includes this module (`mod support;`) and uses a part
//! of it, hence the `allow`s.
//!
//! A test that needs something this machine lacks (root, `/dev/kvm`, eBPF,
//! the lab, a program) prints one line `SKIP: reason` and returns:
//! `scripts/test` counts every test whose output has a line starting with
//! `SKIP` as skipped. The `require_*!` macros are the checks: each prints
//! that line and returns from the calling test where the capability is
//! absent. A helper that returns a value uses the function under the macro
//! (`kvm_available()`, `can_profile()`, `lab::lab_kernel()`, ...) instead.

#![allow(dead_code, unused_imports, unused_macros)]

pub mod bench;
pub mod ch;
pub mod lab;
pub mod snapshot;

pub use bootscope_testkit::tmux;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

// ---- capability checks ----

// Root, /dev/kvm and eBPF, and the SKIP line, are the workspace's test kit
// (`testkit/`), shared with the other crates' tests; the checks below are
// this crate's own.
pub use bootscope_testkit::{
    can_profile, is_root, kvm_available, require_bpf, require_kvm, require_root, root, skip,
    skip_test,
};

/// `program` on `PATH`, or a SKIP line naming it and `hint` (how to get
/// it).
pub fn program(program: &str, hint: &str) -> Option<PathBuf> {
    let found = find_program(program);
    if found.is_none() {
        skip(format_args!("{program} is not installed ({hint})"));
    }
    found
}

/// `program` on `PATH` (no message).
pub fn find_program(program: &str) -> Option<PathBuf> {
    bootscope_model::proc::find_in_path(program, &std::env::var_os("PATH")?)
}

/// `program` on `PATH` (its path), or returns from the calling test after
/// a SKIP line naming it and how to get it.
macro_rules! require_program {
    ($program:expr, $hint:expr) => {
        match $crate::support::program($program, $hint) {
            Some(path) => path,
            None => return,
        }
    };
}
pub(crate) use require_program;

/// True when QEMU here can bind its memory preallocation threads
/// (`thread-context`, QEMU 7.2 or later); a SKIP line otherwise.
pub fn qemu_with_thread_context() -> bool {
    let version = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout).into_owned();
            let v = s.split("version ").nth(1)?.split_whitespace().next()?;
            let mut it = v.split('.');
            Some((
                it.next()?.parse::<u32>().ok()?,
                it.next()?.parse::<u32>().ok()?,
            ))
        });
    match version {
        Some(v) if v >= (7, 2) => true,
        Some((major, minor)) => {
            skip(format_args!(
                "QEMU {major}.{minor} has no thread-context (7.2 or later needed)"
            ));
            false
        }
        None => {
            skip("qemu-system-x86_64 is not installed");
            false
        }
    }
}

/// Returns from the calling test unless QEMU 7.2 or later is here.
macro_rules! require_qemu_thread_context {
    () => {
        if !$crate::support::qemu_with_thread_context() {
            return;
        }
    };
}
pub(crate) use require_qemu_thread_context;

/// The lab's kernel (Debian's, with kvm_amd), or returns from the calling
/// test after a SKIP line saying what the lab lacks here.
macro_rules! require_lab {
    () => {
        match $crate::support::lab::lab_kernel() {
            Some(kernel) => kernel,
            None => return,
        }
    };
}
pub(crate) use require_lab;

/// The lab and the default guest built into a scratch directory named
/// after `tag` (`lab::Prereqs`), or returns from the calling test after a
/// SKIP line.
macro_rules! require_lab_guest {
    ($tag:expr) => {
        match $crate::support::lab::prereqs($tag) {
            Some(p) => p,
            None => return,
        }
    };
}
pub(crate) use require_lab_guest;

/// A static busybox (for the lab's `--exe`), or returns from the calling
/// test after a SKIP line.
macro_rules! require_busybox {
    () => {
        match $crate::support::lab::static_busybox() {
            Some(busybox) => busybox,
            None => return,
        }
    };
}
pub(crate) use require_busybox;

// ---- the bootscope binary ----

pub fn bootscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bootscope"))
}

/// Runs `bootscope ARGS` to completion and captures its output.
pub fn bootscope_output(args: &[&str]) -> Output {
    bootscope().args(args).output().expect("bootscope runs")
}

/// Runs `cmd` with `stdin` fed to it (none: an empty standard input) and
/// captures its output.
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

/// Whether process `pid` has a handler for signal `sig` (`SigCgt` in its
/// status): a test signals a child once it is ready, not after a guessed
/// delay.
pub fn catches_signal(pid: u32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}

/// The least time a command is given before it counts as hung.
pub const HANG_CAP: Duration = Duration::from_secs(120);

/// Runs `cmd` (standard input empty), which must end by itself: a hang is
/// killed and fails the test. `limit` is how long the command takes at
/// most on a quiet host; the cap is several times that (and at least
/// [`HANG_CAP`]), so a loaded host does not fail a test that only waits.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let limit = (limit * 4).max(HANG_CAP);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still running after {limit:?} (killed); stderr: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A command's exit status, standard output and standard error, for an
/// assertion's message.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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

// ---- files ----

/// A fixture guest (`vmm/tests/fixtures`, built by the vmm's build script).
pub fn fixture(name: &str) -> String {
    in_checkout("vmm/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// A recorded lab boot's timeline or profile (`tests/fixtures`; its
/// README says how each was made).
pub fn recorded(name: &str) -> String {
    in_checkout("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// The committed lab baseline (tests/baselines/README.md).
pub fn lab_baseline() -> String {
    in_checkout("tests/baselines/lab-default-guest.json")
        .display()
        .to_string()
}

/// A path in this checkout.
pub fn in_checkout(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// An empty scratch directory of this test binary, named after `tag`.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bootscope-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A JSON document (a timeline, a bench file) read whole.
pub fn read_json(path: impl AsRef<Path>) -> serde_json::Value {
    let path = path.as_ref();
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A profile's `fault_tail` (`t`) whose curve, kinds and regions each add
/// up to its guest faults, with a working set of no more pages than
/// faults; returns the guest faults.
pub fn fault_tail_parts_add_up(t: &serde_json::Value) -> u64 {
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    let sum = |part: &str, count: &dyn Fn(&serde_json::Value) -> u64| -> u64 {
        t[part].as_array().unwrap().iter().map(count).sum()
    };
    let guest = u(&t["guest_faults"]);
    let curve = sum("curve", &|b| {
        b["counts"].as_array().unwrap().iter().map(u).sum()
    });
    assert_eq!(curve, guest, "curve: {t}");
    assert_eq!(sum("by_kind", &|k| u(&k["count"])), guest, "by_kind: {t}");
    assert_eq!(sum("regions", &|r| u(&r["faults"])), guest, "regions: {t}");
    assert!(u(&t["working_set"]["pages"]) <= guest, "{t}");
    guest
}

pub fn read_profile(path: &Path) -> bootscope_profiler::Profile {
    bootscope_profiler::Profile::read(path).expect("a valid profile")
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

/// Makes a FIFO at `p` with permission bits `mode`.
pub fn mkfifo(p: &Path, mode: libc::mode_t) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), mode) }, 0);
}

// ---- processes and waiting ----

/// A child process killed when the test ends, however it ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback TCP port free at the time of asking.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `probe` until it gives a value; panics naming `what` after
/// `secs` seconds.
pub fn wait_for<T>(secs: u64, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
