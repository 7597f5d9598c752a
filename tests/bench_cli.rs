//! `bootscope bench`, `compare`, `check` and `plot` as a user meets them:
//! real repeated boots of the tiny fixture kernels (where /dev/kvm works),
//! pass and fail verdicts against a baseline, every report format, and a
//! clear message with exit status 2 for every kind of bad input.

use serde_json::{json, Value};

mod support;

use support::bench::write_json;
use support::bootscope_output as bootscope;
use support::*;

const MS: u64 = 1_000_000;

/// The bench file of two interleaved configurations, 3 runs and 1 warm-up
/// each, every run's metrics and each configuration's summary there.
fn check_interleaved_file(out: &std::path::Path) {
    let doc: Value = read_json(out);
    assert_eq!(doc["schema"], "bootscope.bench");
    assert_eq!(doc["version"], 2);
    assert_eq!(doc["settings"]["interleaved"], true);
    assert!(!doc["created"].as_str().unwrap().is_empty());
    assert!(!doc["machine"]["host_kvm"].as_str().unwrap().is_empty());
    for c in doc["configs"].as_array().unwrap() {
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 4, "{c}");
        assert_eq!(runs.iter().filter(|r| r["warmup"] == true).count(), 1);
        for r in runs {
            assert_eq!(r["ok"], true, "{r}");
            for m in ["wall", "phase:kernel", "time_to_userspace", "exits:total"] {
                assert!(r["metrics"][m].as_u64().is_some(), "{m} missing: {r}");
            }
            // The fixture prints the kernel's lines: console marks too.
            assert!(r["metrics"]["console:run init"].as_u64().is_some(), "{r}");
        }
        let s = &c["summary"]["phase:kernel"];
        assert_eq!(s["n"], 3);
        assert_eq!(s["unit"], "ns");
        for f in ["mean", "sd", "min", "median", "max"] {
            assert!(s[f].as_f64().is_some(), "{f}: {s}");
        }
        assert_eq!(c["summary"]["exits:total"]["unit"], "count");
    }
}

#[test]
fn bench_interleaves_two_boots_then_compare_and_plot_read_it() {
    require_kvm!();
    let dir = scratch("interleave");
    let out = dir.join("bench.json");
    let k = fixture("mini-bzimage-ports.bin");
    let o = bootscope(&[
        "bench",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--label",
        "big",
        "--label",
        "small",
        "--output",
        out.to_str().unwrap(),
        "--",
        "run",
        "--kernel",
        &k,
        "--timeout",
        "30",
        "--vs",
        "run",
        "--kernel",
        &k,
        "--memory",
        "64M",
        "--timeout",
        "30",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = stderr(&o);
    // Progress while it runs: one line per run, warm-ups marked, ABBA order.
    assert!(err.contains("bench: [1/8] big warm-up 1/1: ok"), "{err}");
    assert!(err.contains("bench: [3/8] small run 1/3: ok"), "{err}");
    assert!(err.contains("bench: [8/8] big run 3/3: ok"), "{err}");
    let summary = stdout(&o);
    assert!(summary.contains("kernel phase"), "{summary}");
    assert!(
        summary.contains("small compared with big (Welch's t-test):"),
        "{summary}"
    );

    check_interleaved_file(&out);

    // One interleaved file compares its two configurations.
    let o = bootscope(&["compare", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report = stdout(&o);
    assert!(report.contains("big in"), "{report}");
    assert!(report.contains("kernel phase"), "{report}");
    assert!(
        report.contains(", p = ") || report.contains(", p < "),
        "{report}"
    );
    let o = bootscope(&[
        "compare",
        "--format",
        "json",
        "--test",
        "mann-whitney",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "bootscope.compare");
    assert!(v["metrics"].as_array().unwrap().len() >= 5, "{v}");

    // The same fixture, the same counts: a count check passes.
    let o = bootscope(&[
        "check",
        "--config",
        "small",
        "--baseline",
        out.to_str().unwrap(),
        "--metric",
        "exits:total=5",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let svg = dir.join("bench.svg");
    let o = bootscope(&["plot", out.to_str().unwrap(), "-o", svg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<?xml") && s.trim_end().ends_with("</svg>"));
    assert!(s.contains("Median boot"), "no timeline section");
    assert!(s.contains("kernel phase"), "no box plot row");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_against_another_command_times_wall_and_console() {
    require_kvm!();
    let dir = scratch("command");
    let out = dir.join("vs.json");
    let k = fixture("mini-bzimage-ports.bin");
    let o = bootscope(&[
        "bench",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--output",
        out.to_str().unwrap(),
        "--console-pattern",
        "hello=^hello$",
        "--",
        "run",
        "--kernel",
        &k,
        "--vs-command",
        "sh",
        "-c",
        "sleep 0.05; echo 'Linux version 0.0.0 (other vmm)'; echo hello",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: Value = read_json(&out);
    let b = &doc["configs"][1];
    assert_eq!(b["kind"], "command");
    assert_eq!(b["command"][0], "sh");
    let banner = b["summary"]["console:kernel banner"]["min"]
        .as_f64()
        .unwrap();
    assert!(banner >= 40.0 * MS as f64, "{banner}");
    assert!(b["summary"]["console:hello"]["n"] == 2, "{b}");
    assert!(b["summary"].get("phase:kernel").is_none());
    // Compared on what both have: wall time and console marks.
    let o = bootscope(&["compare", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report = stdout(&o);
    assert!(report.contains("wall time"), "{report}");
    assert!(report.contains("console \"kernel banner\""), "{report}");
    assert!(!report.contains("kernel phase"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_refuses_bad_run_arguments() {
    let dir = scratch("badrun");
    // bench gives every run its own timeline.
    let o = bootscope(&["bench", "--", "run", "--timeline", "/tmp/x.json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("leave out --timeline"), "{}", text(&o));
    let o = bootscope(&["bench", "--runs", "0", "--", "run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("--runs must be at least 1"),
        "{}",
        text(&o)
    );
    let o = bootscope(&["bench", "--", "run", "--vs-command"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("--vs-command needs a program"),
        "{}",
        text(&o)
    );
    // The first run is refused as bad input: bench stops at once.
    let o = bootscope(&[
        "bench",
        "--runs",
        "5",
        "--",
        "run",
        "--kernel",
        "/nonexistent/bzImage",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("refused as bad input"), "{err}");
    assert!(err.contains("/nonexistent/bzImage"), "{err}");
    assert_eq!(err.matches("bench: [").count(), 0, "{err}");
    // Another command that does not exist.
    let o = bootscope(&[
        "bench",
        "--",
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--vs-command",
        "/nonexistent/vmm",
    ]);
    if kvm_available() {
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            stderr(&o).contains("cannot start /nonexistent/vmm"),
            "{}",
            text(&o)
        );
    }
    let o = bootscope(&["bench", "--output", "/nonexistent/dir/b.json", "--", "run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("does not exist; create it first"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A baseline bench file, one like it and one 30 % slower with twice the
#[test]
fn plot_draws_a_timeline() {
    let dir = scratch("plot");
    let t = json!({
        "schema": "bootscope.timeline", "version": 1, "host_kvm": "svm",
        "guest": {"kernel": "/boot/vmlinuz", "vcpus": 2, "memory_bytes": 268435456u64},
        "outcome": {"reason": "guest_halt", "clean": true, "detail": "halted"},
        "marks": [{"name": "vmm: process start", "source": "vmm", "t_ns": 0},
                  {"name": "serial: run init", "source": "serial", "t_ns": 900 * MS}],
        "phases": [{"name": "vmm setup", "start_ns": 0, "end_ns": 10 * MS, "duration_ns": 10 * MS},
                   {"name": "kernel", "start_ns": 10 * MS, "end_ns": 900 * MS, "duration_ns": 890 * MS}],
        "kvm_stats": {"exits": 21191, "io_exits": 17628, "halt_exits": 3}
    });
    let input = write_json(&dir, "timeline.json", &t);
    let svg = dir.join("t.svg");
    let o = bootscope(&["plot", &input, "--output", svg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains(">vmm setup</text>") && s.contains(">serial: run init</text>"));
    assert!(s.contains(">17,628</text>"), "exit bar label");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn committed_lab_baseline_is_valid_and_a_count_check_against_it_can_fail() {
    let baseline = lab_baseline();
    let base = baseline.as_str();
    let doc: Value = read_json(&baseline);
    assert_eq!(doc["schema"], "bootscope.bench");
    assert_eq!(doc["machine"]["host_kvm"], "svm", "made in the lab");
    // The limits of tests/bench_lab.rs.
    let metrics = ["exits:total=100", "exits:io_exits=40", "faults:pf_fixed"];
    let mut args = vec!["check", "--baseline", base, "--max-regression", "30"];
    for m in &metrics {
        args.extend(["--metric", m]);
    }
    // Against itself: pass.
    let mut same = args.clone();
    same.push(base);
    let o = bootscope(&same);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Against a baseline whose io exits are 40 % lower (as if the current
    // boot had grown by two thirds, like dropping `quiet`): fail.
    let dir = scratch("baseline");
    let mut lower = doc.clone();
    for c in lower["configs"].as_array_mut().unwrap() {
        for r in c["runs"].as_array_mut().unwrap() {
            let io = r["metrics"]["exits:io_exits"].as_u64().unwrap();
            r["metrics"]["exits:io_exits"] = json!(io * 6 / 10);
        }
    }
    let lower = write_json(&dir, "lower.json", &lower);
    let mut fail = vec![
        "check",
        "--baseline",
        lower.as_str(),
        "--max-regression",
        "25",
    ];
    for m in &metrics {
        fail.extend(["--metric", m]);
    }
    fail.push(base);
    let o = bootscope(&fail);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // 40 % lower is about two thirds more (rounding moves the decimals).
    assert!(stdout(&o).contains("FAIL  io_exits 6"), "{}", text(&o));
    assert!(stdout(&o).contains("ok    exits (total)"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_records_meta_and_the_git_revision() {
    require_kvm!();
    require_program!("git", "apt-get install git");
    let dir = scratch("meta");
    let git = |args: &[&str]| bootscope_testkit::git(&dir, args);
    git(&["init", "-q"]);
    std::fs::write(dir.join("kernel.config"), "CONFIG_X=y").unwrap();
    git(&["add", "kernel.config"]);
    git(&["commit", "-q", "-m", "kernel"]);
    let head = git(&["rev-parse", "HEAD"]);
    let out = dir.join("bench.json");
    let k = fixture("mini-bzimage-ports.bin");
    let o = support::bootscope()
        .current_dir(&dir)
        .args(["bench", "--runs", "1", "--warmup", "0"])
        .args(["--meta", "kernel=mini 1", "--meta", "config=x=y"])
        .arg("--output")
        .arg(&out)
        .args(["--", "run", "--kernel", &k, "--timeout", "30"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let short = &head[..12];
    assert!(
        stdout(&o).contains(&format!(
            "measured: git {short}; meta config=x=y, kernel=mini 1"
        )),
        "{}",
        text(&o)
    );
    let doc: Value = read_json(&out);
    assert_eq!(doc["version"], 2);
    assert_eq!(doc["meta"], json!({"kernel": "mini 1", "config": "x=y"}));
    assert_eq!(doc["git"], json!({"commit": head, "dirty": false}));
    // compare and check name them.
    let o = bootscope(&["compare", out.to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        stdout(&o).contains(&format!("base:     git {short}; meta")),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
