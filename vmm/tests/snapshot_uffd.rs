//! Lazy restores under real KVM: guest memory served by the userfaultfd
//! handler, the working set recorded up to the guest's next mark and
//! prefetched on a later restore, the records a prefetch refuses, and a
//! handler that dies.
//!
//! The guest is the initrd fixture: snapshotted at its userspace mark, it
//! then reads one byte of every page of its initrd, prints `fixture:
//! initrd read` (the window's end, a console pattern) and halts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bootscope_model::restore_memory::RestoreMemoryDoc;
use bootscope_testkit::{require_kvm, Capture};
use bootscope_vmm::console::MilestonePattern;
use bootscope_vmm::snapshot::working_set::{self, WorkingSet};
use bootscope_vmm::snapshot::{
    self, LazyOptions, MemoryRestore, RestoreRequest, SnapshotAt, SnapshotRequest,
};
use bootscope_vmm::timeline::{Clock, Recorder};
use bootscope_vmm::vm::{restore, run_with_snapshot, ConfigError, RunReport, VmConfig, VmError};

const INITRD_PAGES: u64 = 1024;
const UNTIL: &str = "serial: initrd";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mini-bzimage-initrd.bin")
}

fn config(initrd: &Path, console: Capture) -> VmConfig {
    let mut cfg = VmConfig::new(fixture(), "console=ttyS0".into(), Box::new(console));
    cfg.initrd = Some(initrd.to_path_buf());
    cfg.memory_bytes = 64 << 20;
    // The guest halts after its work: the run ends at the timeout.
    cfg.timeout = Some(Duration::from_secs(2));
    cfg.patterns = vec![MilestonePattern::new("initrd", "fixture: initrd read").unwrap()];
    cfg
}

fn recorder() -> Arc<Recorder> {
    Arc::new(Recorder::new(Clock::start()))
}

/// An initrd of data in every page, and a snapshot of the fixture at its
/// userspace mark, before it reads the initrd.
fn snapshot_at_userspace(tmp: &Path, name: &str) -> (PathBuf, PathBuf) {
    let initrd = tmp.join(format!("{name}.initrd"));
    let bytes: Vec<u8> = (0..INITRD_PAGES * 4096)
        .map(|i| (i % 251) as u8 | 1)
        .collect();
    std::fs::write(&initrd, bytes).unwrap();
    let dir = tmp.join(name);
    let req = SnapshotRequest {
        dir: dir.clone(),
        at: SnapshotAt::Userspace,
        keep_running: false,
        signal: None,
    };
    run_with_snapshot(config(&initrd, Capture::default()), recorder(), req).unwrap();
    (dir, initrd)
}

fn lazy(prefetch: bool, record: bool) -> LazyOptions {
    LazyOptions {
        prefetch,
        record,
        until: Some(UNTIL.into()),
        ..Default::default()
    }
}

fn restore_with(
    dir: &Path,
    initrd: &Path,
    memory: MemoryRestore,
    verify: bool,
    lazy: LazyOptions,
) -> Result<(RunReport, String), VmError> {
    let snapshot = snapshot::open(dir, verify)?;
    let console = Capture::default();
    let req = RestoreRequest {
        snapshot,
        memory,
        force: false,
        verify,
        lazy,
    };
    let r = restore(config(initrd, console.clone()), recorder(), req)?;
    Ok((r, console.text()))
}

fn doc(r: &RunReport) -> &RestoreMemoryDoc {
    r.timeline.restore_memory.as_ref().expect("restore_memory")
}

fn outcome(r: &RunReport) -> String {
    let o = r.timeline.outcome.as_ref().unwrap();
    format!("{}: {}", o.reason, o.detail)
}

/// With `--verify` every page is read through the handler before the
/// guest runs and must make the snapshot's digest; the guest then does
/// its work from memory served on demand.
#[test]
fn a_uffd_restore_serves_the_snapshots_memory_exactly() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, initrd) = snapshot_at_userspace(tmp.path(), "snap");
    let (r, text) =
        restore_with(&dir, &initrd, MemoryRestore::Uffd, true, lazy(false, false)).unwrap();
    assert!(
        text.contains("fixture: initrd read"),
        "{}\n{text}",
        outcome(&r)
    );
    let d = doc(&r);
    assert_eq!(d.mode, "uffd");
    assert_eq!(d.window_end, UNTIL);
    let f = d.faults.as_ref().unwrap();
    // --verify read all 16,384 pages before the first KVM_RUN.
    assert!(f.run_count >= (64 << 20) / 4096, "{f:?}");
    assert!(d.error.is_none(), "{d:?}");
    let names: Vec<&str> = r.timeline.marks.iter().map(|m| m.name.as_str()).collect();
    assert!(names.contains(&"restore: memory registered"), "{names:?}");
}

/// A lazy restore records its working set; a restore with `--prefetch`
/// loads it and takes far fewer faults, in `uffd` and `mmap` mode alike.
#[test]
fn a_recorded_working_set_is_prefetched() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, initrd) = snapshot_at_userspace(tmp.path(), "snap");
    let (r, text) =
        restore_with(&dir, &initrd, MemoryRestore::Uffd, false, lazy(false, true)).unwrap();
    assert!(text.contains("fixture: initrd read"), "{}", outcome(&r));
    let lazy_doc = doc(&r).clone();
    let ws = lazy_doc.working_set.as_ref().unwrap();
    assert!(ws.pages >= INITRD_PAGES, "{lazy_doc:?}");
    assert!(ws.recorded.is_some(), "{lazy_doc:?}");
    let lazy_faults = lazy_doc.faults.as_ref().unwrap().count;
    assert!(lazy_faults >= INITRD_PAGES, "{lazy_doc:?}");
    let snap = snapshot::open(&dir, false).unwrap();
    let record = working_set::read(&snap).unwrap();
    assert_eq!(record.len(), ws.pages);

    // Loaded while the guest ran (`prefetch_first` unset): whatever the
    // interleaving of the load and the guest's faults, the load and the
    // handler filled each recorded page once between them, and the
    // guest's faults are the pages outside the record, those the load had
    // not reached (late) and those it was filling (raced).
    let (r, text) =
        restore_with(&dir, &initrd, MemoryRestore::Uffd, false, lazy(true, false)).unwrap();
    assert!(text.contains("fixture: initrd read"), "{}", outcome(&r));
    let d = doc(&r);
    let p = d.prefetch.as_ref().expect("prefetch");
    let f = d.faults.as_ref().unwrap();
    assert!(p.background, "{d:?}");
    assert_eq!(p.misses + p.late + p.raced, f.count, "{d:?}");
    // Hits: at least 95 % of the pages the lazy restore touched were in
    // the record.
    assert!(p.misses * 20 <= ws.pages, "{d:?}");
    assert!(p.pages + p.late <= record.len(), "{d:?}");
    let names: Vec<&str> = r.timeline.marks.iter().map(|m| m.name.as_str()).collect();
    let done = names.contains(&"restore: background prefetch done");
    let unfinished = d.warnings.iter().any(|w| w.contains("unfinished"));
    assert_ne!(done, unfinished, "{names:?} {d:?}");
    if done {
        // Faults outside the window filled recorded pages too.
        let outside = f.run_count - f.count;
        assert!(p.pages + p.late + outside >= record.len(), "{d:?}");
    }

    // Loaded before the first KVM_RUN (`run --prefetch`), no late fault.
    let mut first = lazy(true, false);
    first.prefetch_first = true;
    let (r, text) = restore_with(&dir, &initrd, MemoryRestore::Uffd, false, first).unwrap();
    assert!(text.contains("fixture: initrd read"), "{}", outcome(&r));
    let p = doc(&r).prefetch.clone().unwrap();
    assert!(!p.background && p.late == 0, "{p:?}");
    assert!(p.pages >= record.len(), "{p:?}");
    assert_eq!(p.misses, doc(&r).faults.as_ref().unwrap().count, "{p:?}");

    // mmap: recorded from the page tables at the mark, then prefetched.
    let mdir = tmp.path().join("mmap");
    std::fs::create_dir(&mdir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&mdir, std::fs::Permissions::from_mode(0o700)).unwrap();
    for f in ["snapshot.json", "state.json", "memory.raw"] {
        std::fs::copy(dir.join(f), mdir.join(f)).unwrap();
    }
    let (r, _) = restore_with(
        &mdir,
        &initrd,
        MemoryRestore::Mmap,
        false,
        lazy(false, true),
    )
    .unwrap();
    let m = doc(&r).working_set.clone().unwrap();
    assert_eq!(m.source, "pagemap");
    assert!(m.pages >= INITRD_PAGES && m.recorded.is_some(), "{m:?}");
    let (r, text) = restore_with(
        &mdir,
        &initrd,
        MemoryRestore::Mmap,
        false,
        lazy(true, false),
    )
    .unwrap();
    assert!(text.contains("fixture: initrd read"), "{}", outcome(&r));
    let p = doc(&r).prefetch.clone().unwrap();
    assert!(p.pages >= m.pages, "{p:?}");
    assert!(p.misses * 20 <= m.pages, "{p:?}");
}

fn refused(dir: &Path, initrd: &Path, memory: MemoryRestore) -> String {
    match restore_with(dir, initrd, memory, false, lazy(true, false)) {
        Ok((r, _)) => panic!("restored: {}", outcome(&r)),
        Err(VmError::Config(ConfigError::Snapshot(e))) => {
            assert!(e.is_bad_input(), "{e}");
            e.to_string()
        }
        Err(e) => panic!("not a snapshot error: {e}"),
    }
}

/// A record of another snapshot, cut short, or naming pages outside guest
/// memory: refused with `--prefetch`, ignored with a warning without it.
#[test]
fn a_prefetch_refuses_a_record_it_cannot_use() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, initrd) = snapshot_at_userspace(tmp.path(), "snap");
    let (other, _) = snapshot_at_userspace(tmp.path(), "other");
    let snap = snapshot::open(&dir, false).unwrap();
    let path = dir.join(working_set::WORKING_SET_FILE);
    let e = refused(&dir, &initrd, MemoryRestore::Uffd);
    assert!(e.contains("no working set recorded"), "{e}");
    let write = |bytes: &[u8]| {
        let _ = std::fs::remove_file(&path);
        bootscope_model::output::write_file_with_mode(&path, bytes, 0o600).unwrap();
    };
    let manifest = &snap.manifest;
    // Another snapshot's.
    let other_state = snapshot::open(&other, false).unwrap().manifest.state_sha256;
    let set = WorkingSet::from_pages((0..64).collect());
    write(&working_set::encode(
        &set,
        &other_state,
        manifest.memory_bytes,
    ));
    for mode in [MemoryRestore::Uffd, MemoryRestore::Mmap] {
        let e = refused(&dir, &initrd, mode);
        assert!(e.contains("another snapshot"), "{e}");
    }
    // Cut short.
    let good = working_set::encode(&set, &manifest.state_sha256, manifest.memory_bytes);
    write(&good[..good.len() - 10]);
    let e = refused(&dir, &initrd, MemoryRestore::Uffd);
    assert!(e.contains("truncated"), "{e}");
    // Pages outside guest memory.
    let past = WorkingSet::from_pages(vec![3, manifest.memory_bytes / 4096]);
    write(&working_set::encode(
        &past,
        &manifest.state_sha256,
        manifest.memory_bytes,
    ));
    let e = refused(&dir, &initrd, MemoryRestore::Uffd);
    assert!(e.contains("outside the guest"), "{e}");
    // Without --prefetch: a warning, the restore runs and records anew.
    let (r, text) =
        restore_with(&dir, &initrd, MemoryRestore::Uffd, false, lazy(false, true)).unwrap();
    assert!(text.contains("fixture: initrd read"), "{}", outcome(&r));
    let d = doc(&r);
    assert!(
        d.warnings.iter().any(|w| w.contains("outside the guest")),
        "{d:?}"
    );
    assert!(working_set::read(&snapshot::open(&dir, false).unwrap()).is_ok());
    // --prefetch with the copy mode.
    let e = refused(&dir, &initrd, MemoryRestore::Copy);
    assert!(e.contains("need --memory-restore uffd or mmap"), "{e}");
}

/// The handler dying mid-run stops the VMM: the run ends as an error that
/// says why, the timeline's `restore_memory.error` too.
#[test]
fn a_dead_handler_stops_the_run_with_an_error() {
    require_kvm!();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, initrd) = snapshot_at_userspace(tmp.path(), "snap");
    let mut opts = lazy(false, true);
    opts.fail_handler_after = Some(20);
    let (r, text) = restore_with(&dir, &initrd, MemoryRestore::Uffd, false, opts).unwrap();
    let o = r.timeline.outcome.as_ref().unwrap();
    assert_eq!(o.reason, "error", "{}", outcome(&r));
    assert!(
        o.detail.contains("userfaultfd handler failed"),
        "{}",
        o.detail
    );
    assert!(!text.contains("fixture: initrd read"), "{text}");
    let d = doc(&r);
    assert!(
        d.error.as_ref().unwrap().contains("after 20 faults"),
        "{d:?}"
    );
    // Nothing recorded from a run whose memory failed.
    assert!(!dir.join(working_set::WORKING_SET_FILE).exists());
}
