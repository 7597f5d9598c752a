//! The project's own boot regression gate, in the lab (real nested KVM):
//! one lab session runs `bootscope bench` on the default guest (three boots
//! with `quiet`, as the baseline was made); `bootscope check` then holds
//! their counts against the committed baseline (pass), and against a copy of
//! the baseline with fewer port I/O exits, as if the boot had grown by as
//! much as dropping `quiet` adds (fail, exit status 1).
//!
//! Counts, not times: under the lab's emulator times vary by tens of
//! percent, while KVM's exit and fault counts of the same boot stay within a
//! few percent. See tests/baselines/README.md.

mod support;

use support::bootscope_output as bootscope;
use support::*;

/// Kernel command line of the baseline: bootscope's default plus `quiet`.
const QUIET_CMDLINE: &str = "console=ttyS0 reboot=k panic=-1 pci=off io_delay=none \
                             i8042.noaux i8042.nomux i8042.dumbkbd quiet";

/// The counts checked, and how much each may grow. Port I/O exits (338)
/// and fixed nested page faults (1,056) are the same from boot to boot; the
/// total is mostly timer interrupts, which grow with the boot's wall time
/// (a loaded machine stretches the emulated boot: about 280 interrupt exits
/// per second), hence its wider limit. Dropping `quiet` multiplies io_exits
/// by more than 100.
const CHECK: [&str; 8] = [
    "--max-regression",
    "30",
    "--metric",
    "exits:total=100",
    "--metric",
    "exits:io_exits=40",
    "--metric",
    "faults:pf_fixed",
];

#[test]
fn lab_boot_counts_hold_against_the_committed_baseline() {
    let p = require_lab_guest!("bench");
    let baseline = lab_baseline();
    let baseline = baseline.as_str();
    let out = p.dir.join("out/bench.json");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let o = bootscope(&[
        "lab",
        "--timeout",
        "900",
        "--",
        "bench",
        "--runs",
        "3",
        "--warmup",
        "0",
        "--label",
        "quiet",
        "--output",
        out.to_str().unwrap(),
        "--",
        "run",
        "--kernel",
        p.kernel.to_str().unwrap(),
        "--initrd",
        p.initrd.to_str().unwrap(),
        "--cmdline",
        QUIET_CMDLINE,
        "--memory",
        "256M",
        "--timeout",
        "600",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The lab streams the inner program's output on its console.
    let all = text(&o);
    assert!(all.contains("bench: [3/3]"), "progress lines: {all}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).expect("bench.json copied back from the lab"))
            .unwrap();
    assert_eq!(
        doc["machine"]["host_kvm"], "svm",
        "the lab is real nested SVM"
    );

    // The boots match the baseline's counts.
    let report = p.dir.join("out/report.xml");
    let mut args = vec![
        "check",
        "--baseline",
        baseline,
        "--format",
        "junit",
        "--output",
        report.to_str().unwrap(),
    ];
    args.extend(CHECK);
    args.push(out.to_str().unwrap());
    let o = bootscope(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let xml = std::fs::read_to_string(&report).unwrap();
    assert!(xml.contains(r#"tests="3" failures="0""#), "{xml}");

    // Against a baseline with 45 % fewer io_exits the same boots are an
    // 82 % growth (a fraction of what dropping `quiet` does): the check
    // fails.
    let mut lower: serde_json::Value = read_json(baseline);
    for c in lower["configs"].as_array_mut().unwrap() {
        for r in c["runs"].as_array_mut().unwrap() {
            let io = r["metrics"]["exits:io_exits"].as_u64().unwrap();
            r["metrics"]["exits:io_exits"] = serde_json::json!(io * 55 / 100);
        }
    }
    let lower_path = p.dir.join("lower.json");
    std::fs::write(&lower_path, serde_json::to_vec(&lower).unwrap()).unwrap();
    let mut args = vec!["check", "--baseline", lower_path.to_str().unwrap()];
    args.extend(CHECK);
    args.push(out.to_str().unwrap());
    let o = bootscope(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("FAIL  io_exits"), "{stdout}");
    let _ = std::fs::remove_dir_all(&p.dir);
}
