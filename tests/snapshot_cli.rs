//! `run --snapshot` and `run --restore` as a user meets them: a snapshot
//! taken at a mark (or on SIGUSR1) restores and the guest goes on; what a
//! restore cannot use exits 2 before the guest runs.

mod support;

use support::bootscope_output as bootscope;
use support::snapshot::{ports_snapshot_with_disk, snapshot_ports, spawn_awaiting_sigusr1};
use support::*;

#[test]
fn a_snapshot_with_a_disk_restores_and_a_changed_disk_is_refused() {
    require_kvm!();
    let tmp = scratch("snapshot-cli");
    let (snap, disk) = ports_snapshot_with_disk(&tmp);
    let timeline = tmp.join("restored.json");
    let o = bootscope(&[
        "run",
        "--no-profile",
        "--no-summary",
        "--restore",
        snap.to_str().unwrap(),
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        stdout(&o).contains("fixture: userspace reached"),
        "{}",
        text(&o)
    );
    let doc = read_json(&timeline);
    let names: Vec<&str> = doc["marks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    for m in [
        "restore: memory copied",
        "restore: state restored",
        "vmm: first KVM_RUN",
    ] {
        assert!(names.contains(&m), "{m}: {names:?}");
    }
    assert_eq!(doc["outcome"]["reason"], "i8042_reset");
    let phases: Vec<&str> = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        phases,
        [
            "vmm setup",
            "memory",
            "state restored",
            "resume",
            "guest",
            "vmm teardown"
        ]
    );
    // The disk changed since: refused, unless --force.
    std::fs::write(&disk, vec![1u8; 8192]).unwrap();
    let restore = [
        "run",
        "--no-profile",
        "--no-summary",
        "--restore",
        snap.to_str().unwrap(),
    ];
    expect_usage_error(
        &restore,
        &["the disk", "changed since the snapshot", "--force"],
    );
    let mut forced = restore.to_vec();
    forced.push("--force");
    let o = bootscope(&forced);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Another memory size than the snapshot's.
    let mut other = restore.to_vec();
    other.extend(["--memory", "128M", "--force"]);
    expect_usage_error(&other, &["memory size", "256 MiB", "128 MiB"]);
    // A snapshot directory that exists and is not empty.
    let o = snapshot_ports(&snap, &["--disk", disk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("not an empty directory"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn sigusr1_takes_the_snapshot() {
    require_kvm!();
    let tmp = scratch("snapshot-usr1");
    let snap = tmp.join("snap");
    let child = spawn_awaiting_sigusr1("mini-bzimage-hlt.bin", &snap, &[]);
    let pid = child.id() as i32;
    // SAFETY: kill with a pid this test spawned and has not waited for.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(snap.join("snapshot.json").is_file());
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--memory-restore uffd` as a user meets it: a lazy restore records
/// the working set, `--prefetch` loads it (the summary says how it went,
/// the timeline has `restore_memory`), and a record that cannot be used
/// exits 2 with `--prefetch`.
#[test]
fn a_uffd_restore_records_and_prefetches_its_working_set() {
    require_kvm!();
    let tmp = scratch("snapshot-uffd");
    let (snap, _disk) = ports_snapshot_with_disk(&tmp);
    let dir = snap.to_str().unwrap();
    let restore = |extra: &[&str], timeline: &std::path::Path| {
        let mut args = vec![
            "run",
            "--no-profile",
            "--serial",
            "null",
            "--restore",
            dir,
            "--memory-restore",
            "uffd",
            "--timeline",
            timeline.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        bootscope(&args)
    };
    // No record yet: --prefetch is refused.
    let t = tmp.join("t0.json");
    let o = restore(&["--prefetch"], &t);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("no working set recorded"),
        "{}",
        text(&o)
    );
    // Lazy: records.
    let t = tmp.join("lazy.json");
    let o = restore(&[], &t);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stderr(&o).contains("restore memory (uffd)"), "{}", text(&o));
    let doc = read_json(&t);
    let m = &doc["restore_memory"];
    assert_eq!(m["mode"], "uffd");
    assert!(m["working_set"]["pages"].as_u64().unwrap() >= 1, "{m}");
    assert!(m["faults"]["count"].as_u64().unwrap() >= 1, "{m}");
    assert!(snap.join("working-set").is_file());
    // Prefetched.
    let t = tmp.join("prefetch.json");
    let o = restore(&["--prefetch", "--prefault-rest"], &t);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stderr(&o).contains("prefetch"), "{}", text(&o));
    let doc = read_json(&t);
    let p = &doc["restore_memory"]["prefetch"];
    assert!(p["pages"].as_u64().unwrap() >= 1, "{p}");
    let names: Vec<&str> = doc["marks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert!(
        names.contains(&"restore: working set prefetched"),
        "{names:?}"
    );
    assert_ne!(p["background"], true, "{p}");
    // Loaded from a thread while the guest runs.
    let t = tmp.join("background.json");
    let o = restore(&["--prefetch", "--prefetch-background"], &t);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc = read_json(&t);
    let p = &doc["restore_memory"]["prefetch"];
    assert_eq!(p["background"], true, "{p}");
    // Whatever the interleaving, each recorded page the guest touched was
    // filled by the load or by the handler.
    assert!(
        p["pages"].as_u64().unwrap() + p["late"].as_u64().unwrap() >= 1,
        "{p}"
    );
    assert!(stderr(&o).contains("while the guest ran"), "{}", text(&o));
    // A record cut short: refused with --prefetch, a warning without.
    let ws = snap.join("working-set");
    let bytes = std::fs::read(&ws).unwrap();
    std::fs::write(&ws, &bytes[..bytes.len() / 2]).unwrap();
    let o = restore(&["--prefetch"], &tmp.join("t1.json"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("working-set"), "{}", text(&o));
    let t = tmp.join("t2.json");
    let o = restore(&[], &t);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let w = read_json(&t)["restore_memory"]["warnings"].to_string();
    assert!(w.contains("truncated"), "{w}");
    prefetch_needing_uffd_is_refused(dir);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--prefetch` on a copied restore, and the background load without the
/// userfaultfd handler: each exits 2 and says what to change.
fn prefetch_needing_uffd_is_refused(dir: &str) {
    // --prefetch with copy.
    let o = bootscope(&[
        "run",
        "--no-profile",
        "--no-summary",
        "--restore",
        dir,
        "--prefetch",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // The background load needs the userfaultfd handler.
    let o = bootscope(&[
        "run",
        "--no-profile",
        "--no-summary",
        "--restore",
        dir,
        "--memory-restore",
        "mmap",
        "--prefetch",
        "--prefetch-background",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("--prefetch-background needs --memory-restore uffd"),
        "{}",
        text(&o)
    );
}
