//! `bootscope export` as a user meets it: a real boot timeline exported in
//! every format, and bad input refused with exit status 2 and a message
//! naming the file.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod support;

use support::bootscope_output as bootscope;
use support::*;

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("output is UTF-8")
}

/// Runs and expects exit 0, returning standard output.
fn export_ok(args: &[&str]) -> String {
    let mut all = vec!["export"];
    all.extend_from_slice(args);
    let o = bootscope(&all);
    assert_eq!(o.status.code(), Some(0), "{all:?}: {}", stderr(&o));
    stdout(&o)
}

/// Runs and expects exit 2 with every `needles` in stderr, nothing on
/// stdout, and no panic.
fn expect_usage_error(args: &[&str], needles: &[&str]) {
    support::expect_usage_error(args, needles);
    assert!(
        bootscope(args).stdout.is_empty(),
        "{args:?} wrote to stdout"
    );
}

/// Boots the reset fixture and returns the timeline's path.
fn boot_timeline(d: &Path) -> PathBuf {
    let t = d.join("boot.json");
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--memory",
        "64M",
        "--serial",
        "null",
        "--no-summary",
        "--timeline",
        t.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "run: {}", stderr(&o));
    t
}

#[test]
fn timeline_exports_in_every_format() {
    require_kvm!();
    let d = scratch("formats");
    let t = boot_timeline(&d);
    let ts = t.to_str().unwrap();
    let timeline: Value = read_json(&t);
    let phase_names: Vec<&str> = timeline["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(phase_names.contains(&"kernel"), "{phase_names:?}");

    // Chrome trace: phases as slices, marks as instants, names present.
    let trace_text = export_ok(&["--format", "chrome-trace", ts]);
    let trace: Value = serde_json::from_str(&trace_text).unwrap();
    assert_eq!(trace["displayTimeUnit"], "ms");
    let events = trace["traceEvents"].as_array().unwrap();
    for name in &phase_names {
        let slice = events
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == *name)
            .unwrap_or_else(|| panic!("no slice for phase {name}"));
        assert!(slice["dur"].as_f64().unwrap() >= 0.0);
    }
    let marks = timeline["marks"].as_array().unwrap();
    let instants = events.iter().filter(|e| e["ph"] == "i").count();
    assert_eq!(instants, marks.len());
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["args"]["name"] == "boot phases"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "process_name"));

    // The same through --output, written whole.
    let out = d.join("boot.trace.json");
    let printed = export_ok(&[
        "--format",
        "chrome-trace",
        "--output",
        out.to_str().unwrap(),
        ts,
    ]);
    assert!(printed.is_empty());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), trace_text);

    // CSV: phases table has every phase; no per-reason exits in a timeline.
    let phases = export_ok(&["--format", "csv", "--table", "phases", ts]);
    let mut lines = phases.lines();
    assert_eq!(lines.next(), Some("phase,start_ms,end_ms,duration_ms"));
    assert_eq!(lines.count(), phase_names.len());
    let exits = export_ok(&["--format", "csv", ts]);
    assert_eq!(
        exits,
        "reason,code,count,share_percent,latency_total_ns,latency_mean_ns\n"
    );
    for table in ["latency", "threads"] {
        assert_eq!(
            export_ok(&["--format", "csv", "--table", table, ts])
                .lines()
                .count(),
            1
        );
    }

    // Prometheus: a gauge per phase, KVM's exit count when the host has it.
    let prom = export_ok(&["--format", "prometheus", ts]);
    assert!(prom.contains("bootscope_vm_boot_phase_seconds{phase=\"kernel\"} "));
    if let Some(n) = timeline["kvm_stats"]["exits"].as_u64() {
        assert!(prom.contains(&format!("bootscope_kvm_stats_exits_total {n}\n")));
    }
    for line in prom.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }

    // JSON: a profile, which exports exactly like the timeline it came from.
    let profile_path = d.join("profile.json");
    export_ok(&["--format", "json", "-o", profile_path.to_str().unwrap(), ts]);
    let profile: Value = read_json(&profile_path);
    assert_eq!(profile["schema"], "bootscope.profile");
    assert_eq!(profile["version"], 2);
    assert_eq!(profile["target"]["kind"], "self");
    assert_eq!(
        profile["exits"]["kvm_stats_exits"],
        timeline["kvm_stats"]["exits"]
    );
    assert_eq!(
        export_ok(&["--format", "chrome-trace", profile_path.to_str().unwrap()]),
        trace_text
    );

    // Nothing but the outputs is left in the directory (no temporary files).
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["boot.json", "boot.trace.json", "profile.json"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_input_exits_2_naming_the_file() {
    let d = scratch("bad");
    let path = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let missing = d.join("missing.json");
    let missing = missing.to_str().unwrap();
    expect_usage_error(
        &["export", "--format", "json", missing],
        &[missing, "cannot read", "bootscope run --timeline"],
    );
    let text = path("notes.txt", "these are not JSON\n");
    expect_usage_error(
        &["export", "--format", "csv", &text],
        &[&text, "is not JSON"],
    );
    let v2 = path(
        "future-timeline.json",
        r#"{"schema":"bootscope.timeline","version":4,"marks":[],"phases":[]}"#,
    );
    expect_usage_error(
        &["export", "--format", "chrome-trace", &v2],
        &[&v2, "version 4 boot timeline", "reads version 3"],
    );
    let pv9 = path(
        "future-profile.json",
        r#"{"schema":"bootscope.profile","version":9}"#,
    );
    expect_usage_error(
        &["export", "--format", "prometheus", &pv9],
        &[&pv9, "version 9 profile"],
    );
    let other = path("other.json", r#"{"schema":"something.else"}"#);
    expect_usage_error(
        &["export", "--format", "json", &other],
        &[&other, "neither a bootscope profile nor a boot timeline"],
    );
    let cut = path(
        "cut.json",
        r#"{"schema":"bootscope.timeline","version":1,"marks":[{"name":"a"}]}"#,
    );
    expect_usage_error(
        &["export", "--format", "json", &cut],
        &[&cut, "marks[0].source is missing"],
    );

    // Usage mistakes.
    let good = path(
        "good.json",
        r#"{"schema":"bootscope.timeline","version":1,"marks":[],"phases":[]}"#,
    );
    expect_usage_error(
        &["export", "--format", "json", "--table", "phases", &good],
        &["--table only applies to --format csv"],
    );
    expect_usage_error(&["export", "--format", "xml", &good], &["xml"]);
    expect_usage_error(
        &["export", "--format", "csv", "--table", "bogus", &good],
        &["bogus"],
    );
    expect_usage_error(
        &[
            "export",
            "--format",
            "json",
            "--output",
            "/nonexistent-dir/out.json",
            &good,
        ],
        &["/nonexistent-dir", "does not exist"],
    );

    // A failed export leaves an existing output untouched.
    let out = path("out.csv", "previous contents\n");
    expect_usage_error(
        &["export", "--format", "csv", "--output", &out, missing],
        &[missing],
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "previous contents\n"
    );
    let o = bootscope(&["export", "--format", "csv", "--output", &out, &good]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .starts_with("reason,code,count,"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn timeline_schema_constants_agree() {
    use bootscope_profiler::export;
    use bootscope_vmm::timeline;
    assert_eq!(export::TIMELINE_SCHEMA_NAME, timeline::TIMELINE_SCHEMA_NAME);
    assert_eq!(
        export::TIMELINE_SCHEMA_VERSION,
        timeline::TIMELINE_SCHEMA_VERSION
    );
}
