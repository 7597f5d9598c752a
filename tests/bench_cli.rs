//! `bootscope bench`, `compare`, `check` and `plot` as a user meets them:
//! real repeated boots of the tiny fixture kernels (where /dev/kvm works),
//! pass and fail verdicts against a baseline, every report format, and a
//! clear message with exit status 2 for every kind of bad input.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

mod support;

use support::bootscope_output as bootscope;
use support::*;

/// A bench document with one configuration whose runs have these metrics.
fn bench_doc(label: &str, runs: &[&[(&str, u64)]]) -> Value {
    let runs: Vec<Value> = runs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let metrics: serde_json::Map<String, Value> =
                m.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            json!({"index": i, "round": i, "warmup": false, "ok": true, "exit_code": 0,
                   "metrics": metrics})
        })
        .collect();
    json!({
        "schema": "bootscope.bench", "version": 1, "created": "2026-01-01T00:00:00Z",
        "bootscope": "bootscope 0.1.0",
        "machine": {"hostname": "h", "kernel_release": "6.1", "cpu_model": "cpu", "cpus": 2,
                    "memory_bytes": 1, "host_kvm": "svm"},
        "settings": {"runs": runs.len(), "warmup": 0, "interleaved": false, "profile": false},
        "configs": [{"label": label, "kind": "bootscope", "command": ["--kernel", "k"],
                     "runs": runs}]
    })
}

fn write_json(dir: &Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p.display().to_string()
}

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
/// port exits.
fn check_files(dir: &std::path::Path) -> (String, String, String) {
    let run = |io: u64, kernel_ms: u64| -> Vec<(&'static str, u64)> {
        vec![
            ("exits:io_exits", io),
            ("exits:total", io + 1000),
            ("phase:kernel", kernel_ms * MS),
            ("time_to_userspace", (kernel_ms + 50) * MS),
        ]
    };
    let base_runs = [run(1000, 100), run(1002, 101), run(998, 99), run(1001, 100)];
    let base_refs: Vec<&[(&str, u64)]> = base_runs.iter().map(|r| r.as_slice()).collect();
    let base = write_json(dir, "base.json", &bench_doc("base", &base_refs));
    let same_runs = [run(1001, 100), run(999, 101), run(1000, 100)];
    let same_refs: Vec<&[(&str, u64)]> = same_runs.iter().map(|r| r.as_slice()).collect();
    let same = write_json(dir, "same.json", &bench_doc("cur", &same_refs));
    let worse_runs = [run(2000, 130), run(2004, 131), run(1999, 129)];
    let worse_refs: Vec<&[(&str, u64)]> = worse_runs.iter().map(|r| r.as_slice()).collect();
    let worse = write_json(dir, "worse.json", &bench_doc("cur", &worse_refs));
    (base, same, worse)
}

#[test]
fn check_passes_fails_and_reports_in_every_format() {
    let dir = scratch("check");
    let (base, same, worse) = check_files(&dir);

    let o = bootscope(&["check", "--baseline", &base, &same]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("result: pass"), "{}", text(&o));

    let o = bootscope(&["check", "--baseline", &base, &worse]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let report = stdout(&o);
    assert!(
        report.contains("FAIL  kernel phase 30.0 % slower, p < 0.001"),
        "{report}"
    );
    assert!(
        report.contains("result: REGRESSION (3 of 3 metrics regressed)"),
        "{report}"
    );

    // Counts only, with a generous limit: the doubling still fails; a
    // 150 % limit lets it pass.
    let o = bootscope(&[
        "check",
        "--baseline",
        &base,
        "--metric",
        "exits:io_exits",
        "--max-regression",
        "50",
        &worse,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = bootscope(&[
        "check",
        "--baseline",
        &base,
        "--metric",
        "exits:io_exits=150",
        &worse,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // JSON.
    let o = bootscope(&["check", "--baseline", &base, "--format", "json", &worse]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "bootscope.check");
    assert_eq!(v["verdict"], "regression");
    assert_eq!(v["results"].as_array().unwrap().len(), 3);

    // JUnit to a file, the text report on standard output.
    let xml_path = dir.join("report.xml");
    let o = bootscope(&[
        "check",
        "--baseline",
        &base,
        "--format",
        "junit",
        "--output",
        xml_path.to_str().unwrap(),
        "--metric",
        "exits:io_exits",
        "--metric",
        "exits:total=200",
        &worse,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stdout(&o).contains("FAIL  io_exits"), "{}", text(&o));
    let xml = std::fs::read_to_string(&xml_path).unwrap();
    assert!(
        xml.starts_with(r#"<?xml version="1.0" encoding="UTF-8"?>"#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<testsuite name="bootscope check cur" tests="2" failures="1""#),
        "{xml}"
    );
    assert!(
        xml.contains(
            r#"<testcase classname="bootscope.check.count" name="exits:io_exits" time="0">"#
        ),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<failure type="regression" message="io_exits 99.9"#),
        "{xml}"
    );
    assert!(
        xml.contains(
            r#"<testcase classname="bootscope.check.count" name="exits:total" time="0"/>"#
        ),
        "{xml}"
    );
    assert_eq!(xml.matches("<testsuite ").count(), 1);
    assert!(xml.trim_end().ends_with("</testsuites>"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_pairs_interleaved_runs_by_round() {
    // Two configurations of one file, run interleaved on a machine whose
    // speed drifts from round to round (kernel phase 1.0 to 2.9 s); the
    // second is 2 % slower in every round, and one of its runs failed.
    let dir = scratch("paired");
    let base: Vec<u64> = (0..20u64).map(|r| (1000 + 100 * r) * MS).collect();
    let rows = |scale: f64| -> Vec<Vec<(&'static str, u64)>> {
        base.iter()
            .map(|v| {
                vec![
                    ("phase:kernel", (*v as f64 * scale) as u64),
                    ("exits:total", 10),
                ]
            })
            .collect()
    };
    let (a, b) = (rows(1.0), rows(1.02));
    let refs = |r: &[Vec<(&'static str, u64)>]| -> Vec<Value> {
        let slices: Vec<&[(&str, u64)]> = r.iter().map(Vec::as_slice).collect();
        bench_doc("x", &slices)["configs"][0]["runs"]
            .as_array()
            .unwrap()
            .clone()
    };
    let mut doc = bench_doc("bare", &[&a[0]]);
    doc["configs"][0]["runs"] = json!(refs(&a));
    let mut second = doc["configs"][0].clone();
    second["label"] = json!("profiled");
    let mut runs = refs(&b);
    runs[3]["ok"] = json!(false);
    second["runs"] = json!(runs);
    doc["configs"].as_array_mut().unwrap().push(second);
    let file = write_json(&dir, "two.json", &doc);

    let o = bootscope(&["compare", "--test", "mann-whitney", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("not significant"), "{}", text(&o));
    let o = bootscope(&["compare", "--test", "wilcoxon", "--format", "json", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["test"], "wilcoxon");
    let kernel = &v["metrics"][0];
    assert_eq!(kernel["metric"], "phase:kernel", "{v}");
    assert_eq!(kernel["significant"], true, "{v}");
    // The failed run's round is left out on both sides.
    assert_eq!(
        (kernel["base"]["n"].clone(), kernel["new"]["n"].clone()),
        (json!(19), json!(19))
    );
    let r = &kernel["ratio"];
    for end in ["estimate", "low", "high"] {
        assert!((r[end].as_f64().unwrap() - 1.02).abs() < 1e-6, "{r}");
    }
    let o = bootscope(&["compare", "--test", "wilcoxon", &file]);
    assert!(
        stdout(&o).contains("Wilcoxon signed-rank (runs paired by round)"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs bootscope with `args`: exit status 2 and `needle` on stderr.
fn expect_usage(args: &[&str], needle: &str) {
    let o = bootscope(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    assert!(
        stderr(&o).contains(needle),
        "{args:?}: want {needle:?} in {}",
        text(&o)
    );
}

#[test]
fn check_and_compare_explain_bad_input() {
    let dir = scratch("badinput");
    let one_run = [("phase:kernel", 100 * MS), ("exits:total", 10u64)];
    let good = write_json(&dir, "good.json", &bench_doc("a", &[&one_run, &one_run]));
    let malformed = dir.join("malformed.json");
    std::fs::write(
        &malformed,
        b"{\"schema\": \"bootscope.bench\", \"version\": 1, \"configs\": 3}",
    )
    .unwrap();
    let notjson = dir.join("notjson.json");
    std::fs::write(&notjson, b"<html>").unwrap();
    let mut v3 = bench_doc("a", &[&one_run]);
    v3["version"] = json!(3);
    let v3 = write_json(&dir, "v3.json", &v3);
    let timeline = write_json(
        &dir,
        "timeline.json",
        &json!({"schema": "bootscope.timeline", "version": 1}),
    );
    let other_phases = [("phase:userspace", 100 * MS), ("exits:total", 10u64)];
    let other = write_json(
        &dir,
        "other.json",
        &bench_doc("a", &[&other_phases, &other_phases]),
    );

    let m = malformed.to_str().unwrap();
    let n = notjson.to_str().unwrap();
    expect_usage(
        &["check", "--baseline", m, &good],
        "malformed.json: malformed bootscope.bench file",
    );
    expect_usage(
        &["check", "--baseline", n, &good],
        "notjson.json is not JSON",
    );
    expect_usage(
        &["check", "--baseline", &v3, &good],
        "v3.json: bootscope.bench version 3, this bootscope reads version 2",
    );
    expect_usage(
        &["check", "--baseline", &timeline, &good],
        "schema \"bootscope.timeline\", expected bootscope.bench",
    );
    expect_usage(
        &["check", "--baseline", "/nonexistent/base.json", &good],
        "cannot read /nonexistent/base.json",
    );
    expect_usage(
        &["check", "--baseline", &good, &other],
        "the boot phases differ: only in",
    );
    expect_usage(&["compare", &good, &other], "only in");
    expect_usage(
        &[
            "check",
            "--baseline",
            &good,
            "--metric",
            "exits:io_exits",
            &good,
        ],
        "metric \"exits:io_exits\" is not in",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_and_compare_explain_bad_options() {
    let dir = scratch("badoptions");
    let one_run = [("phase:kernel", 100 * MS), ("exits:total", 10u64)];
    let good = write_json(&dir, "good.json", &bench_doc("a", &[&one_run, &one_run]));
    let single = write_json(&dir, "single.json", &bench_doc("a", &[&one_run]));
    let notjson = dir.join("notjson.json");
    std::fs::write(&notjson, b"<html>").unwrap();
    let n = notjson.to_str().unwrap();
    // A time check needs two runs per side for Welch's test ...
    expect_usage(
        &[
            "check",
            "--baseline",
            &good,
            "--metric",
            "phase:kernel",
            &single,
        ],
        "needs at least 2 successful runs",
    );
    // ... and more for Mann-Whitney at alpha 0.01.
    expect_usage(
        &[
            "check",
            "--baseline",
            &good,
            "--metric",
            "phase:kernel",
            "--test",
            "mann-whitney",
            &good,
        ],
        "could never find a regression",
    );
    // A count check works with one run.
    let o = bootscope(&[
        "check",
        "--baseline",
        &single,
        "--metric",
        "exits:total",
        &single,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    expect_usage(
        &["check", "--baseline", &good, "--alpha", "2", &good],
        "--alpha 2",
    );
    expect_usage(
        &[
            "check",
            "--baseline",
            &good,
            "--metric",
            "exits:total=lots",
            &good,
        ],
        "allowed regression in percent",
    );
    expect_usage(&["compare", &good], "holds one configuration");
    expect_usage(
        &["compare", "--test", "wilcoxon", &good, &good],
        "the paired test compares the runs of each round of one bench file",
    );
    // check's baseline was recorded apart: no pairs to make.
    expect_usage(
        &["check", "--test", "wilcoxon", "--baseline", &good, &good],
        "invalid value 'wilcoxon'",
    );
    expect_usage(
        &["plot", n, "-o", dir.join("x.svg").to_str().unwrap()],
        "is not JSON",
    );
    expect_usage(
        &["plot", &good, "-o", "/nonexistent/dir/x.svg"],
        "does not exist; create it first",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

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
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
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

#[test]
fn compare_and_check_print_meta_and_revision() {
    let dir = scratch("provenance");
    let runs: &[&[(&str, u64)]] = &[
        &[("exits:total", 1000), ("phase:kernel", 10 * MS)],
        &[("exits:total", 1001), ("phase:kernel", 11 * MS)],
        &[("exits:total", 1002), ("phase:kernel", 12 * MS)],
    ];
    let mut base = bench_doc("a", runs);
    base["meta"] = json!({"kernel": "6.1", "host": "ci-1"});
    base["git"] = json!({"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": true});
    let base = write_json(&dir, "base.json", &base);
    // A file without either field (as written before they existed) reads.
    let plain = write_json(&dir, "plain.json", &bench_doc("a", runs));

    let o = bootscope(&["compare", &base, &plain]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report = stdout(&o);
    assert!(
        report.contains(
            "  base:     git 0123456789ab, uncommitted changes; meta host=ci-1, kernel=6.1"
        ),
        "{report}"
    );
    assert!(
        report.contains("  new:      (no git revision or notes)"),
        "{report}"
    );
    for flag in ["--json", "-j"] {
        let o = bootscope(&["compare", flag, &base, &plain]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["base"]["meta"]["kernel"], "6.1", "{v}");
        assert_eq!(v["base"]["git"]["dirty"], true, "{v}");
        assert!(
            v["new"].get("meta").is_none() && v["new"].get("git").is_none(),
            "{v}"
        );
    }

    let o = bootscope(&[
        "check",
        "--baseline",
        &base,
        "--metric",
        "exits:total",
        &plain,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report = stdout(&o);
    assert!(
        report.contains(
            "  baseline: git 0123456789ab, uncommitted changes; meta host=ci-1, kernel=6.1"
        ),
        "{report}"
    );
    let o = bootscope(&["check", "--json", "--baseline", &base, &plain]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["baseline"]["meta"]["host"], "ci-1", "{v}");
    assert_eq!(
        v["baseline"]["git"]["commit"],
        "0123456789abcdef0123456789abcdef01234567"
    );

    // Files without notes: no provenance lines at all.
    let o = bootscope(&["compare", &plain, &plain]);
    assert!(!stdout(&o).contains("base:"), "{}", text(&o));

    // --json and --format together, and bad --meta, are bad input.
    let o = bootscope(&["compare", "--json", "--format", "text", &base, &plain]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("--json"), "{}", text(&o));
    let o = bootscope(&[
        "check",
        "--json",
        "--format",
        "junit",
        "--baseline",
        &base,
        &plain,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for (bad, why) in [
        ("novalue", "no '='"),
        ("=v", "the key is empty"),
        ("a b=c", "space"),
    ] {
        let o = bootscope(&["bench", "--meta", bad, "--", "run", "--kernel", "k"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("--meta {bad:?}")), "{err}");
        assert!(err.contains(why) && err.contains("give KEY=VALUE"), "{err}");
        assert!(!err.contains("bench: [1/"), "runs started: {err}");
    }
    let o = bootscope(&["bench", "--meta", "k=1", "--meta", "k=2", "--", "run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("given twice"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
