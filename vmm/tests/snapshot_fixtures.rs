//! Snapshots of the fixture guests (vmm/tests/fixtures) taken at a mark,
//! restored, and run on to their end, under real KVM; and the bad inputs a
//! restore refuses before any vCPU runs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bootscope_testkit::{require_kvm, Capture};
use bootscope_vmm::snapshot::{self, MemoryRestore, RestoreRequest, SnapshotAt, SnapshotRequest};
use bootscope_vmm::timeline::{Clock, Recorder, StopReason};
use bootscope_vmm::vm::{
    restore, restore_marks, run_with_snapshot, ConfigError, RunReport, VmConfig, VmError,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn config(kernel: &Path, console: Capture) -> VmConfig {
    let mut cfg = VmConfig::new(
        kernel.to_path_buf(),
        "console=ttyS0".into(),
        Box::new(console),
    );
    cfg.memory_bytes = 64 << 20;
    cfg.timeout = Some(Duration::from_secs(20));
    // A virtio-rng transport in every snapshot (the fixtures never drive
    // it): its state is saved and loaded too.
    cfg.virtio.rng = true;
    cfg
}

fn recorder() -> Arc<Recorder> {
    Arc::new(Recorder::new(Clock::start()))
}

fn reason(r: &RunReport) -> String {
    let o = r.timeline.outcome.as_ref().expect("an outcome");
    format!("{}: {}", o.reason, o.detail)
}

/// Snapshots `kernel` at `at` into `dir`, the guest stopped there.
fn take(kernel: &Path, dir: &Path, at: SnapshotAt, keep_running: bool) -> (RunReport, String) {
    let console = Capture::default();
    let req = SnapshotRequest {
        dir: dir.to_path_buf(),
        at,
        keep_running,
        signal: None,
    };
    let r = run_with_snapshot(config(kernel, console.clone()), recorder(), req).unwrap();
    (r, console.text())
}

fn open_and_restore(kernel: &Path, dir: &Path) -> Result<(RunReport, String), VmError> {
    restore_by(kernel, dir, MemoryRestore::Copy)
}

/// Restores with `memory`, checking guest memory against the snapshot's
/// digest before the guest runs.
fn restore_by(
    kernel: &Path,
    dir: &Path,
    memory: MemoryRestore,
) -> Result<(RunReport, String), VmError> {
    let snapshot = snapshot::open(dir, true)?;
    let console = Capture::default();
    let req = RestoreRequest {
        snapshot,
        memory,
        force: false,
        verify: true,
        lazy: Default::default(),
    };
    let r = restore(config(kernel, console.clone()), recorder(), req)?;
    Ok((r, console.text()))
}

/// The ports fixture stopped at its userspace mark (0x60) comes back and
/// goes on from the instruction after it: its message, its 1000 writes of
/// 0x90, its reset; the 0x60 it wrote before the snapshot is not written
/// again.
#[test]
fn a_guest_snapshotted_at_a_mark_goes_on_after_the_restore() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snap");
    let kernel = fixture("mini-bzimage-ports.bin");
    let (r, text) = take(&kernel, &dir, SnapshotAt::DebugPort(0x60), false);
    let o = r.timeline.outcome.as_ref().unwrap();
    assert_eq!(o.reason, StopReason::SnapshotTaken.name(), "{}", reason(&r));
    assert_eq!(o.clean, Some(true));
    assert!(o.detail.contains("snapshot at 0x60"), "{}", o.detail);
    assert!(!text.contains("fixture: userspace reached"), "{text}");
    assert_eq!(r.marker_counts.debug_port.get("0x90"), None);
    for f in ["snapshot.json", "state.json", "memory.raw"] {
        let m = std::fs::metadata(dir.join(f)).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "{f}");
    }
    let mem = std::fs::metadata(dir.join("memory.raw")).unwrap();
    assert_eq!(mem.len(), 64 << 20);
    use std::os::unix::fs::MetadataExt;
    assert!(
        mem.blocks() * 512 < 8 << 20,
        "not sparse: {} blocks",
        mem.blocks()
    );

    let (r, text) = open_and_restore(&kernel, &dir).unwrap();
    assert_eq!(
        r.timeline.outcome.as_ref().unwrap().reason,
        StopReason::I8042Reset.name(),
        "{}\n{text}",
        reason(&r)
    );
    assert!(text.contains("fixture: userspace reached"), "{text}");
    assert!(
        !text.contains("Linux version"),
        "the guest booted again: {text}"
    );
    let c = &r.marker_counts.debug_port;
    assert_eq!(c.get("0x90"), Some(&1000), "{c:?}");
    assert_eq!(c.get("0x60"), Some(&1), "{c:?}");
    let names: Vec<&str> = r.timeline.marks.iter().map(|m| m.name.as_str()).collect();
    for m in [
        restore_marks::VMM_SETUP,
        restore_marks::MEMORY_COPIED,
        restore_marks::STATE_RESTORED,
        "vmm: first KVM_RUN",
    ] {
        assert!(names.contains(&m), "{m} missing: {names:?}");
    }
    let phases: Vec<&str> = (r.timeline.phases.iter())
        .map(|p| p.name.as_str())
        .collect();
    // (`vmm setup` starts at the process start mark, which the CLI makes.)
    for p in ["memory", "state restored", "resume", "guest"] {
        assert!(phases.contains(&p), "{p} missing: {phases:?}");
    }
}

/// A snapshot restores again and again, its memory copied or mapped (and
/// equal to the snapshot's either way), and a copy of its directory
/// restores too.
#[test]
fn a_snapshot_restores_twice_and_from_a_copy() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snap");
    let kernel = fixture("mini-bzimage-reset.bin");
    take(&kernel, &dir, SnapshotAt::Userspace, false);
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o700)).unwrap();
    for f in ["snapshot.json", "state.json", "memory.raw"] {
        std::fs::copy(dir.join(f), copy.join(f)).unwrap();
    }
    for (d, how) in [
        (&dir, MemoryRestore::Copy),
        (&dir, MemoryRestore::Mmap),
        (&copy, MemoryRestore::Copy),
        (&copy, MemoryRestore::Mmap),
    ] {
        let (r, text) = restore_by(&kernel, d, how).unwrap();
        assert_eq!(
            r.timeline.outcome.as_ref().unwrap().reason,
            StopReason::I8042Reset.name(),
            "{}",
            reason(&r)
        );
        assert!(text.contains("fixture: userspace reached"), "{text}");
    }
}

/// With `keep_running` the guest goes on to its end after the snapshot.
#[test]
fn a_guest_goes_on_after_a_snapshot_when_asked() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snap");
    let (r, text) = take(
        &fixture("mini-bzimage-ports.bin"),
        &dir,
        SnapshotAt::DebugPort(0x60),
        true,
    );
    assert_eq!(
        r.timeline.outcome.as_ref().unwrap().reason,
        StopReason::I8042Reset.name(),
        "{}",
        reason(&r)
    );
    assert!(text.contains("fixture: userspace reached"), "{text}");
    assert_eq!(r.marker_counts.debug_port.get("0x90"), Some(&1000));
    assert!(dir.join("snapshot.json").is_file());
}

/// A snapshot of the reset fixture at its userspace mark, for the bad
/// input tests to spoil.
fn good_snapshot(tmp: &Path) -> PathBuf {
    let dir = tmp.join("snap");
    take(
        &fixture("mini-bzimage-reset.bin"),
        &dir,
        SnapshotAt::Userspace,
        false,
    );
    dir
}

/// The error, which must be bad input.
fn refused(kernel: &Path, dir: &Path, cfg: Option<VmConfig>) -> String {
    let result = snapshot::open(dir, true)
        .map_err(VmError::from)
        .and_then(|snapshot| {
            let req = RestoreRequest {
                snapshot,
                memory: MemoryRestore::Copy,
                force: false,
                verify: true,
                lazy: Default::default(),
            };
            let cfg = cfg.unwrap_or_else(|| config(kernel, Capture::default()));
            restore(cfg, recorder(), req)
        });
    match result {
        Ok(r) => panic!("restored: {}", reason(&r)),
        Err(VmError::Config(ConfigError::Snapshot(e))) => {
            assert!(e.is_bad_input(), "{e}");
            e.to_string()
        }
        Err(e) => panic!("not a snapshot error: {e}"),
    }
}

fn spoil(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_restore_refuses_what_is_not_its_snapshot() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let kernel = fixture("mini-bzimage-reset.bin");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(refused(&kernel, &empty, None).contains("not a bootscope snapshot"));
    assert!(refused(&kernel, &kernel, None).contains("not a directory"));
    let dir = good_snapshot(tmp.path());
    // Another kernel, memory size, vCPU count or command line.
    let other = fixture("mini-bzimage-ports.bin");
    let e = refused(&kernel, &dir, Some(config(&other, Capture::default())));
    assert!(e.contains("the kernel") && e.contains("changed"), "{e}");
    let mut cfg = config(&kernel, Capture::default());
    cfg.memory_bytes = 128 << 20;
    assert!(refused(&kernel, &dir, Some(cfg)).contains("memory size"));
    let mut cfg = config(&kernel, Capture::default());
    cfg.vcpus = 2;
    assert!(refused(&kernel, &dir, Some(cfg)).contains("vCPU count"));
    let mut cfg = config(&kernel, Capture::default());
    cfg.cmdline = "quiet".into();
    assert!(refused(&kernel, &dir, Some(cfg)).contains("command line"));
}

#[test]
fn a_restore_refuses_a_damaged_or_untrusted_snapshot() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let kernel = fixture("mini-bzimage-reset.bin");
    let fresh = |name: &str| {
        let d = tmp.path().join(name);
        take(&kernel, &d, SnapshotAt::Userspace, false);
        d
    };
    // A state file changed by one byte, or cut short.
    let d = fresh("tampered");
    spoil(&d.join("state.json"), |b| {
        let i = b.len() / 2;
        b[i] = if b[i] == b'1' { b'2' } else { b'1' };
    });
    assert!(refused(&kernel, &d, None).contains("SHA-256"));
    let d = fresh("truncated");
    spoil(&d.join("state.json"), |b| b.truncate(b.len() / 2));
    assert!(refused(&kernel, &d, None).contains("SHA-256"));
    // A memory file of another size; one whose content changed (--verify).
    let d = fresh("short");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("memory.raw"))
        .unwrap();
    f.set_len(32 << 20).unwrap();
    assert!(refused(&kernel, &d, None).contains("bytes"));
    let d = fresh("changed");
    spoil(&d.join("memory.raw"), |b| b[0x7000] ^= 0xff);
    assert!(refused(&kernel, &d, None).contains("--verify"));
    assert!(
        snapshot::open(&d, false).is_ok(),
        "without --verify memory is not read"
    );
    // A newer version.
    let d = fresh("newer");
    spoil(&d.join("snapshot.json"), |b| {
        let t = String::from_utf8(b.clone()).unwrap();
        *b = t.replace("\"version\": 2", "\"version\": 3").into_bytes();
    });
    assert!(refused(&kernel, &d, None).contains("version 3"));
    // Writable by others.
    let d = fresh("open");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(refused(&kernel, &d, None).contains("writable by others"));
}

#[test]
fn a_snapshot_is_never_written_over_something() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("full");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), b"mine").unwrap();
    let req = SnapshotRequest {
        dir: dir.clone(),
        at: SnapshotAt::Userspace,
        keep_running: false,
        signal: None,
    };
    let cfg = config(&fixture("mini-bzimage-reset.bin"), Capture::default());
    match run_with_snapshot(cfg, recorder(), req) {
        Err(VmError::Config(ConfigError::Snapshot(e))) => {
            assert!(e.is_bad_input());
            assert!(e.to_string().contains("not an empty directory"), "{e}");
        }
        Err(e) => panic!("{e}"),
        Ok(r) => panic!("ran: {}", reason(&r)),
    }
    assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"mine");
    // Only the directory given is there: nothing half-written beside it.
    let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(names.len(), 1);
}

/// A snapshot asked for by a signal flag (the CLI's SIGUSR1) while the
/// guest is halted forever: it restores halted, and stays so until the
/// timeout.
#[test]
fn a_signal_snapshots_a_halted_guest() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snap");
    let kernel = fixture("mini-bzimage-hlt.bin");
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let setter = flag.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        setter.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let console = Capture::default();
    let req = SnapshotRequest {
        dir: dir.clone(),
        at: SnapshotAt::Signal,
        keep_running: false,
        signal: Some(flag),
    };
    let r = run_with_snapshot(config(&kernel, console.clone()), recorder(), req).unwrap();
    t.join().unwrap();
    let o = r.timeline.outcome.as_ref().unwrap();
    assert!(o.detail.contains("snapshot at SIGUSR1"), "{}", reason(&r));
    assert!(console.text().contains("fixture: userspace reached"));
    let snapshot = snapshot::open(&dir, false).unwrap();
    let mut cfg = config(&kernel, Capture::default());
    cfg.timeout = Some(Duration::from_secs(1));
    let req = RestoreRequest {
        snapshot,
        memory: MemoryRestore::Copy,
        force: false,
        verify: false,
        lazy: Default::default(),
    };
    let r = restore(cfg, recorder(), req).unwrap();
    let o = r.timeline.outcome.as_ref().unwrap();
    assert_eq!(o.reason, StopReason::Timeout.name(), "{}", reason(&r));
    assert!(o.detail.contains("halted"), "{}", o.detail);
}
