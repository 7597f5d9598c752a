//! `advise --prove` in the lab (real nested KVM): a guest slow in known
//! ways (a verbose serial console, a gzip-compressed initramfs, no
//! `pci=off` nor `i8042.*` options, no entropy device) is profiled by the
//! check boot, and the A/B benches accept the fixes that help (`quiet`)
//! and reject, by measurement, at least one candidate that does not.
//! Slow: some 20 to 30 boots of the lab guest; on a shared machine the
//! boots vary so much that `quiet`'s saving may not reach significance
//! (docs/benchmarks.md).

mod lab_common;

use std::io::Write;
use std::process::Command;

/// The slow guest's kernel command line: the console on ttyS0 at its
/// default log level, and none of the options that spare the kernel
/// probing hardware the VM lacks.
const SLOW_CMDLINE: &str = "console=ttyS0 reboot=k panic=-1 io_delay=none";

#[test]
#[ignore = "slow: 20 to 30 lab boots (tens of minutes); run with `cargo test --release --test advise_lab -- --ignored`"]
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
        .args(["lab", "--timeout", "5400", "--", "advise", "--prove"])
        .args(["--runs", "4", "--max-fixes", "3", "--level", "0.05"])
        .arg("--output")
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .args(["--", "run", "--kernel"])
        .arg(&p.kernel)
        .arg("--initrd")
        .arg(&gz)
        .args([
            "--cmdline",
            SLOW_CMDLINE,
            "--memory",
            "256M",
            "--serial",
            "null",
        ])
        .args(["--timeout", "600"])
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
    // timeline.
    for want in [
        "serial-console",
        "compressed-initramfs",
        "no-entropy-source",
    ] {
        assert!(
            rules.contains(&want),
            "{want} not found in {rules:?}\n{output}"
        );
    }
    let prove = &doc["prove"];
    let fixes = prove["fixes"].as_array().unwrap();
    let verdict = |change: &str| {
        fixes
            .iter()
            .find(|f| f["changes"][0]["value"] == change)
            .map(|f| f["verdict"].as_str().unwrap().to_string())
    };
    // The console's bytes are the slow guest's largest cost: quiet helps.
    assert_eq!(verdict("quiet").as_deref(), Some("accepted"), "{output}");
    let quiet = fixes
        .iter()
        .find(|f| f["changes"][0]["value"] == "quiet")
        .unwrap();
    let ttu = &quiet["time_to_userspace"];
    assert!(
        ttu["significant"].as_bool().unwrap() && ttu["change_pct"].as_f64().unwrap() < 0.0,
        "{quiet}"
    );
    // At least one candidate measured and rejected.
    let rejected: Vec<&serde_json::Value> = fixes
        .iter()
        .filter(|f| {
            ["not_significant", "slower", "breaks_boot"].contains(&f["verdict"].as_str().unwrap())
        })
        .collect();
    assert!(
        !rejected.is_empty(),
        "no fix rejected by measurement:\n{output}"
    );
    for r in &rejected {
        assert!(
            r["ok_runs"][1].as_u64().unwrap() > 0 || r["verdict"] == "breaks_boot",
            "{r}"
        );
    }
    // The final command line holds the accepted fixes and no rejected one.
    let final_cmdline = prove["final_cmdline"].as_str().unwrap();
    assert!(final_cmdline.contains("quiet"), "{final_cmdline}");
    for r in &rejected {
        if let Some(words) = r["changes"][0]["value"].as_str() {
            assert!(
                !final_cmdline.contains(words),
                "{final_cmdline} holds rejected {words}"
            );
        }
    }
    assert!(
        prove["combined"]["verdict"] == "accepted",
        "{}",
        prove["combined"]
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg") && picture.contains("quiet"),
        "{picture}"
    );
}
