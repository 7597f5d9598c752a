//! The `bootscope` command line as a user meets it: bad input gets a clear
//! message and exit status 2, good input boots and writes a timeline.

use std::path::Path;

mod support;

use support::bootscope_output as bootscope;
use support::*;

#[test]
fn bad_kernels_exit_2_with_reason() {
    require_kvm!();
    expect_usage_error(
        &["run", "--kernel", "/nonexistent/vmlinuz"],
        &["/nonexistent/vmlinuz", "cannot read kernel"],
    );
    expect_usage_error(
        &["run", "--kernel", &fixture("not-a-kernel.bin")],
        &["not a Linux kernel"],
    );
    expect_usage_error(
        &["run", "--kernel", &fixture("truncated-bzimage.bin")],
        &["truncated bzImage"],
    );
    expect_usage_error(
        &["run", "--kernel", &fixture("mini-noentry.elf")],
        &["without an entry point"],
    );
    expect_usage_error(&["run", "--kernel", "/"], &["not a Linux kernel"]);
}

#[test]
fn corrupt_bzimage_payload_exits_2() {
    require_kvm!();
    // mini-bzimage-reset.bin with a payload that says xz (magic and size
    // trailer) but whose stream is garbage: no decompressor can make a
    // kernel of it, so it is refused rather than booted into.
    let d = scratch("corrupt-payload");
    let k = d.join("vmlinuz");
    let mut bz = std::fs::read(fixture("mini-bzimage-reset.bin")).unwrap();
    let mut payload = vec![0xfd, b'7', b'z', b'X', b'Z', 0];
    payload.extend((0..200u32).map(|i| (i * 37 % 251) as u8));
    payload.extend_from_slice(&4096u32.to_le_bytes());
    let setup = (u32::from(bz[0x1f1]) + 1) * 512;
    let offset = bz.len() as u32 - setup;
    bz[0x248..0x24c].copy_from_slice(&offset.to_le_bytes());
    bz[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    bz.extend_from_slice(&payload);
    std::fs::write(&k, bz).unwrap();
    let k = k.to_str().unwrap();
    expect_usage_error(
        &["run", "--kernel", k, "--no-profile"],
        &[k, "xz payload is corrupt"],
    );
    // The classic boot does not look at the payload: it loads.
    let o = bootscope(&[
        "run",
        "--kernel",
        k,
        "--guest-decompress",
        "--stop-after",
        "load",
        "--no-profile",
        "--no-summary",
        "--serial",
        "null",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn unreadable_kernel_exits_2() {
    require_kvm!();
    let d = scratch("unreadable");
    let k = d.join("vmlinuz");
    std::fs::copy(fixture("mini-bzimage-reset.bin"), &k).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads anything: only check when the file really is unreadable.
    if std::fs::read(&k).is_err() {
        expect_usage_error(
            &["run", "--kernel", k.to_str().unwrap()],
            &["cannot read kernel"],
        );
    } else {
        skip("running as root, permission bits do not stop reads (the rest of the test ran)");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_numbers_exit_2() {
    require_kvm!();
    let k = fixture("mini-bzimage-reset.bin");
    expect_usage_error(
        &["run", "--kernel", &k, "--vcpus", "0"],
        &["--vcpus must be at least 1"],
    );
    expect_usage_error(
        &["run", "--kernel", &k, "--vcpus", "4096"],
        &["--vcpus 4096", "at most"],
    );
    expect_usage_error(&["run", "--kernel", &k, "--memory", "4M"], &["too small"]);
    expect_usage_error(
        &["run", "--kernel", &k, "--memory", "lots"],
        &["--memory", "not a number"],
    );
    expect_usage_error(
        &["run", "--kernel", &k, "--timeout", "0"],
        &["--timeout", "must be a positive"],
    );
    let long = format!("console=ttyS0 {}", "a".repeat(3000));
    expect_usage_error(
        &["run", "--kernel", &k, "--cmdline", &long],
        &["command line is", "at most 2047"],
    );
    expect_usage_error(
        &["run", "--kernel", &k, "--serial-pattern", "nonsense"],
        &["NAME=REGEX"],
    );
    expect_usage_error(
        &[
            "run",
            "--kernel",
            &k,
            "--timeline",
            "/nonexistent-dir/t.json",
        ],
        &["does not exist"],
    );
}

#[test]
fn initrd_larger_than_memory_exits_2() {
    require_kvm!();
    let d = scratch("initrd");
    let big = d.join("big.cpio");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    expect_usage_error(
        &[
            "run",
            "--kernel",
            &fixture("mini-bzimage-reset.bin"),
            "--memory",
            "64M",
            "--initrd",
            big.to_str().unwrap(),
        ],
        &["initrd", "does not fit"],
    );
    expect_usage_error(
        &[
            "run",
            "--kernel",
            &fixture("mini-bzimage-reset.bin"),
            "--initrd",
            "/nonexistent.cpio",
        ],
        &["cannot read initrd /nonexistent.cpio"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn run_writes_timeline_and_summary() {
    require_kvm!();
    let d = scratch("timeline");
    let t = d.join("boot.json");
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--memory",
        "64M",
        "--timeline",
        t.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("fixture: userspace reached"));
    for col in [
        "phase",
        "start ms",
        "duration ms",
        "share",
        "kernel",
        "userspace",
        "vmm setup",
        "total",
    ] {
        assert!(err.contains(col), "summary lacks {col}: {err}");
    }
    let doc: serde_json::Value = read_json(&t);
    assert_eq!(doc["schema"], "bootscope.timeline");
    assert_eq!(doc["version"], 3);
    assert_eq!(doc["outcome"]["clean"], true);
    let names: Vec<String> = doc["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names.first().map(String::as_str),
        Some("vmm: process start")
    );
    assert_eq!(names.last().map(String::as_str), Some("vmm: exit"));
    let phases: Vec<&str> = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for p in ["vmm setup", "kernel", "userspace", "vmm teardown"] {
        assert!(phases.contains(&p), "{p} missing from {phases:?}");
    }
    // No temporary file left behind.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn serial_can_go_to_a_file_or_nowhere() {
    require_kvm!();
    let d = scratch("serial");
    let log = d.join("console.log");
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--serial",
        log.to_str().unwrap(),
        "--no-summary",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("fixture: userspace reached"));
    assert!(o.stdout.is_empty());
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--serial",
        "null",
        "--no-summary",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn custom_serial_pattern_becomes_a_mark() {
    require_kvm!();
    let d = scratch("pattern");
    let t = d.join("t.json");
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--serial-pattern",
        "fixture done=userspace reached",
        "--timeline",
        t.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&t).unwrap();
    assert!(text.contains("serial: fixture done"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn guest_that_never_ends_times_out_with_status_1() {
    require_kvm!();
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-hlt.bin"),
        "--timeout",
        "0.5",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--timeout"), "{}", stderr(&o));
}

/// A guest that writes pseudo-random values to every port and MMIO address
/// the VMM emulates, then triple-faults without asking for a reset: `run`
/// reports the crash, writes the timeline with outcome `triple_fault`
/// (unclean) and exits 1; the VMM never panics.
#[test]
fn hostile_guest_is_reported_not_a_panic() {
    require_kvm!();
    let d = scratch("hostile");
    let t = d.join("t.json");
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-hostile.bin"),
        "--memory",
        "64M",
        "--serial",
        "null",
        "--no-profile",
        // Every port access is an emulated instruction on a PVM host: on a
        // loaded machine their rate can pass the emulation check's.
        "--allow-emulation",
        "--timeline",
        t.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("outcome: guest crashed: triple fault on vcpu0"),
        "{err}"
    );
    assert!(err.contains("did not shut down cleanly"), "{err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    let doc: serde_json::Value = read_json(&t);
    assert_eq!(
        doc["outcome"]["reason"], "triple_fault",
        "{}",
        doc["outcome"]
    );
    assert_eq!(doc["outcome"]["clean"], false);
    let _ = std::fs::remove_dir_all(&d);
}

/// The ways a guest asks to be reset end cleanly (status 0), each with
/// its own outcome; a bare triple fault does not.
#[test]
fn requested_resets_exit_0_and_a_bare_triple_fault_exits_1() {
    require_kvm!();
    let d = scratch("resets");
    for (kernel, reason, code) in [
        ("mini-bzimage-reset.bin", "i8042_reset", 0),
        ("mini-bzimage-cf9.bin", "cf9_reset", 0),
        ("mini-bzimage-restart.bin", "triple_fault_reboot", 0),
        ("mini-bzimage-triple.bin", "triple_fault", 1),
    ] {
        let t = d.join(format!("{reason}.json"));
        let o = bootscope(&[
            "run",
            "--kernel",
            &fixture(kernel),
            "--serial",
            "null",
            "--no-profile",
            "--timeline",
            t.to_str().unwrap(),
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{kernel}: {err}");
        let doc: serde_json::Value = read_json(&t);
        assert_eq!(
            doc["outcome"]["reason"], reason,
            "{kernel}: {}",
            doc["outcome"]
        );
        assert_eq!(doc["outcome"]["clean"], code == 0, "{kernel}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn doctor_reports_the_kvm_flavour() {
    let o = bootscope(&["doctor"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    for item in ["kvm", "tracefs", "bpf", "btf", "numa", "hugepages", "qemu"] {
        assert!(
            out.lines().any(|l| l.starts_with(item)),
            "doctor lacks {item}: {out}"
        );
    }
    let pvm = Path::new("/sys/module/kvm_pvm").exists();
    if pvm {
        assert!(out.contains("PVM"), "{out}");
    }
    let json = bootscope(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(v.as_array().unwrap().len() >= 7);
}

/// On a PVM host a stock kernel is refused by the VMM itself (its emulated
/// instructions counted), not left to its timeout, and the refusal points
/// at the lab.
#[test]
fn stock_kernel_on_pvm_fails_fast() {
    if !Path::new("/sys/module/kvm_pvm").exists() {
        skip_test!("not a PVM host");
    }
    require_kvm!();
    let Some(kernel) = std::fs::read_dir("/boot").ok().and_then(|rd| {
        rd.flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("vmlinuz-"))
    }) else {
        skip_test!("no /boot/vmlinuz-* (apt-get install linux-image-amd64)");
    };
    // The refusal comes from counting emulated instructions, not from the
    // clock: with a timeout far beyond it, the run still ends by the
    // refusal (how long that takes depends on the host's load).
    let o = bootscope(&[
        "run",
        "--kernel",
        kernel.to_str().unwrap(),
        "--serial",
        "null",
        "--timeout",
        "900",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("PVM") && err.contains("bootscope lab"),
        "{err}"
    );
    assert!(err.contains("emulated one by one"), "{err}");
}
