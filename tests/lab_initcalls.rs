//! `run --initcalls` in the lab (real nested KVM): the default guest's
//! initcalls read from its memory at power-off, placed inside the kernel
//! phase on the VMM's clock with a stated alignment error, grouped by level;
//! the console carries none of their lines and the guest makes no more port
//! I/O exits than without `--initcalls`.

mod lab_common;

use lab_common::prereqs;

use std::path::Path;
use std::process::Command;

/// Boots the default guest in the lab; returns the timeline and console.
fn boot(p: &lab_common::Prereqs, tag: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let timeline = p.dir.join(format!("out/{tag}-timeline.json"));
    let serial = p.dir.join(format!("out/{tag}-serial.log"));
    std::fs::create_dir_all(timeline.parent().unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bootscope"))
        .args(["lab", "--timeout", "900", "--", "run"])
        .arg("--kernel")
        .arg(&p.kernel)
        .arg("--initrd")
        .arg(&p.initrd)
        .args(["--memory", "256M", "--timeout", "600", "--no-profile"])
        .args(extra)
        .arg("--timeline")
        .arg(&timeline)
        .arg("--serial")
        .arg(&serial)
        .output()
        .expect("bootscope lab runs");
    // The lab passes on what ran inside on either stream.
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{output}");
    if extra.contains(&"--initcalls") {
        assert!(output.contains("slowest initcalls"), "summary: {output}");
    }
    let doc = serde_json::from_slice(&std::fs::read(&timeline).unwrap()).unwrap();
    (doc, read(&serial))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).expect("serial log copied back from the lab")
}

#[test]
fn initcalls_of_the_default_guest_are_on_the_timeline_without_console_cost() {
    let Some(p) = prereqs("initcalls") else {
        return;
    };
    let (doc, console) = boot(&p, "with", &["--initcalls"]);
    let ic = &doc["initcalls"];
    assert!(ic["error"].is_null(), "{}", ic["error"]);
    let calls = ic["initcalls"].as_array().unwrap();
    assert!(calls.len() >= 300, "only {} initcalls", calls.len());
    let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in ["serial8250_init", "pci_subsys_init", "acpi_init"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let clock = &ic["clock"];
    let error = clock["error_ns"].as_u64().expect("the clock is aligned");
    assert!(clock["anchors"].as_u64().unwrap() >= 10, "{clock}");
    assert!(error < 20_000_000, "alignment error {error} ns");
    let kernel = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "kernel")
        .expect("a kernel phase");
    let (k0, k1) = (
        kernel["start_ns"].as_u64().unwrap(),
        kernel["end_ns"].as_u64().unwrap(),
    );
    let mut last = 0;
    for c in calls {
        let start = c["start_ns"].as_u64().unwrap();
        let end = start + c["duration_ns"].as_u64().unwrap();
        assert!(start >= last, "starts out of order at {c}");
        assert!(
            start + error >= k0 && end <= k1 + error,
            "{c} outside the kernel phase {k0}..{k1}"
        );
        last = start;
    }
    let levels: Vec<&str> = ic["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["level"].as_str().unwrap())
        .collect();
    for l in [
        "early", "core", "postcore", "arch", "subsys", "fs", "device", "late",
    ] {
        assert!(levels.contains(&l), "level {l} missing from {levels:?}");
    }
    // Port I/O exits per initcall: some made them, and together no more
    // than the whole boot.
    let per_call: Vec<u64> = calls
        .iter()
        .map(|c| c["io_exits"].as_u64().expect("io_exits per initcall"))
        .collect();
    let boot_io = doc["kvm_stats"]["io_exits"].as_u64().unwrap();
    assert!(
        per_call.iter().any(|&n| n > 0),
        "no initcall made an io exit"
    );
    assert!(
        per_call.iter().sum::<u64>() <= boot_io,
        "{per_call:?} > {boot_io}"
    );
    assert!(
        !console.contains("calling  ") && !console.contains("initcall serial8250_init"),
        "initcall lines reached the console"
    );

    // The same boot without --initcalls. The console differs only by the
    // longer command line (echoed twice), the log buffer's notice and three
    // shutdown lines, some 700 bytes; printing the 670-odd initcalls' lines
    // would add over 80,000. Port I/O exits follow the console bytes.
    let (plain, plain_console) = boot(&p, "without", &[]);
    let extra_bytes = console.len() as i64 - plain_console.len() as i64;
    assert!(
        extra_bytes < 2_000,
        "the console grew by {extra_bytes} bytes with --initcalls"
    );
    let io = |d: &serde_json::Value| d["kvm_stats"]["io_exits"].as_u64().unwrap();
    let (with, without) = (io(&doc), io(&plain));
    assert!(
        with as f64 <= without as f64 * 1.05,
        "io exits {with} with --initcalls, {without} without"
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}
