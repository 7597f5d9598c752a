//! `bootscope compare` and `check` as a user meets them: pass and fail
//! verdicts against a baseline, every report format, interleaved runs
//! paired by round, meta and revision in the reports, and a clear message
//! with exit status 2 for every kind of bad input.

use serde_json::{json, Value};

mod support;

use support::bench::{bench_doc, write_json};
use support::bootscope_output as bootscope;
use support::*;

const MS: u64 = 1_000_000;

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
