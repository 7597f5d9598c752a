//! `advise --prove` in the lab (real nested KVM): a guest slow in known
//! ways (its kernel messages on the serial console, a gzip-compressed
//! initramfs, no entropy device) is profiled by the check boot, which
//! finds each cause; the A/B benches then accept the fix that helps
//! (`quiet`: the console's bytes are most of the kernel phase) and reject,
//! by measurement, the next candidate, an `initcall_blacklist` of a probe
//! that takes milliseconds of a boot of seconds.
//!
//! Bounded: `--kinds kernel --max-fixes 2 --runs 6` is the check boot, at
//! most 12 boots for `quiet` (six rounds all faster is the least that
//! reaches p < 0.05 with the paired test) and, as a fix that does nothing
//! is stopped once it can no longer reach significance, usually 4 for the
//! other: some 17 boots of the default guest, 3 to 5 minutes on an idle
//! machine. docs/benchmarks.md has a full run with every kind of fix.

mod lab_common;

use std::io::Write;
use std::process::Command;

/// The slow guest's kernel command line: the console on ttyS0 at its
/// default log level; the options that spare probing hardware the VM
/// lacks are in place, so the candidates are the console's and the
/// failed probes'.
const SLOW_CMDLINE: &str = "console=ttyS0 reboot=k panic=-1 io_delay=none pci=off \
                            i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd \
                            cryptomgr.notests 8250.nr_uarts=1";

#[test]
fn prove_accepts_what_helps_and_rejects_what_does_not() {
    let Some(p) = lab_common::prereqs("advise") else {
        return;
    };
    let gz = p.dir.join("guest.cpio.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::best(),
    );
    enc.write_all(&std::fs::read(&p.initrd).unwrap()).unwrap();
    enc.finish().unwrap();
    let out_dir = p.dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let json = out_dir.join("advice.json");
    let svg = out_dir.join("advice.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_bootscope"))
        .args(["lab", "--timeout", "3600", "--", "advise", "--prove"])
        .args(["--runs", "6", "--max-fixes", "2", "--kinds", "kernel"])
        .arg("--output")
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .args(["--", "run", "--kernel"])
        .arg(&p.kernel)
        .arg("--initrd")
        .arg(&gz)
        .args(["--cmdline", SLOW_CMDLINE, "--no-rng"])
        .args(["--memory", "256M", "--serial", "null", "--timeout", "600"])
        .output()
        .expect("bootscope lab runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{output}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "bootscope.advise", "{doc}");
    let rules: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    // Each known cause, found from the check boot's own profile and
    // timeline; the console's first, by far.
    assert_eq!(rules.first(), Some(&"serial-console"), "{rules:?}");
    for want in ["compressed-initramfs", "no-entropy-source"] {
        assert!(
            rules.contains(&want),
            "{want} not found in {rules:?}\n{output}"
        );
    }
    let prove = &doc["prove"];
    assert_eq!(prove["test"], "wilcoxon", "{prove}");
    let fixes = prove["fixes"].as_array().unwrap();
    assert_eq!(fixes.len(), 2, "{output}");
    // The console's bytes are the slow guest's largest cost: quiet helps,
    // in every one of the six rounds.
    let quiet = &fixes[0];
    assert_eq!(quiet["changes"][0]["value"], "quiet", "{quiet}");
    assert_eq!(quiet["verdict"], "accepted", "{output}");
    let ttu = &quiet["time_to_userspace"];
    assert!(
        ttu["significant"].as_bool().unwrap() && ttu["change_pct"].as_f64().unwrap() < 0.0,
        "{quiet}"
    );
    assert!(ttu["ratio"]["high"].as_f64().unwrap() < 1.0, "{quiet}");
    assert_eq!(quiet["rounds"], 6, "{quiet}");
    // ... and removes the console's port I/O exits.
    let io = quiet["exits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "exits:io_exits")
        .expect("io exits compared");
    assert!(
        io["new"]["median"].as_f64().unwrap() * 10.0 < io["base"]["median"].as_f64().unwrap(),
        "{io}"
    );
    // The second candidate, a probe of milliseconds, measured and
    // rejected.
    let other = &fixes[1];
    let words = other["changes"][0]["value"].as_str().unwrap();
    assert!(words.starts_with("initcall_blacklist="), "{other}");
    assert!(
        ["not_significant", "slower"].contains(&other["verdict"].as_str().unwrap()),
        "{other}\n{output}"
    );
    assert!(other["ok_runs"][1].as_u64().unwrap() >= 2, "{other}");
    // Run options were left out as asked, and said so.
    assert!(
        prove["not_tried"].as_array().unwrap().iter().any(|n| {
            n["change"]["value"][0] == "--console" && n["reason"] == "not among the --kinds to try"
        }),
        "{prove}"
    );
    // One fix accepted: it is the combination, and the final command line
    // holds it and not the rejected one.
    assert_eq!(prove["combined"]["verdict"], "accepted", "{prove}");
    let final_cmdline = prove["final_cmdline"].as_str().unwrap();
    assert_eq!(final_cmdline, format!("{SLOW_CMDLINE} quiet"));
    assert!(!final_cmdline.contains(words), "{final_cmdline}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg") && picture.contains("quiet") && picture.contains(words),
        "{picture}"
    );
    // The report, for the record (docs/benchmarks.md).
    println!("{output}");
    let _ = std::fs::remove_dir_all(&p.dir);
}
