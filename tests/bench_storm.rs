//! `bootscope bench --parallel N`: refusals before any boot, and small real
//! storms of the fixture guests (where /dev/kvm works) end to end: each VM
//! a run, the storm's distribution, makespan and memory, and `check`
//! gating on a storm's p99.

use serde_json::Value;

mod support;

use support::bootscope_output as bootscope;
use support::*;

fn mem_available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[test]
fn parallel_bad_input_is_refused_before_any_boot() {
    let dir = scratch("storm-bad");
    let out = dir.join("bench.json");
    let o = out.to_str().unwrap();
    // No kernel needed: nothing boots.
    let k = "/nonexistent/kernel";
    expect_usage_error(
        &[
            "bench",
            "--parallel",
            "0",
            "-o",
            o,
            "--",
            "run",
            "--kernel",
            k,
        ],
        &["--parallel 0", "1 or more"],
    );
    // Twice the available memory's worth of 1 TiB guests.
    let n = (mem_available() >> 40) * 2 + 2;
    let ns = n.to_string();
    expect_usage_error(
        &[
            "bench",
            "--parallel",
            &ns,
            "-o",
            o,
            "--",
            "run",
            "--kernel",
            k,
            "--memory",
            "1T",
        ],
        &[
            &format!("--parallel {n}: configuration a boots {n} VMs of 1 TiB"),
            "GiB available (MemAvailable",
            "give a smaller N",
        ],
    );
    // The other side is checked too (QEMU's -m).
    expect_usage_error(
        &[
            "bench",
            "--parallel",
            &ns,
            "-o",
            o,
            "--",
            "run",
            "--kernel",
            k,
            "--memory",
            "64M",
            "--vs-command",
            "qemu-system-x86_64",
            "-m",
            "1T",
        ],
        &["configuration b boots"],
    );
    expect_usage_error(&["bench", "--parallel", "x", "--", "run"], &["--parallel"]);
    assert!(!out.exists(), "no output file after a refusal");
}

/// N = 3 fixture guests at once, twice, after one alone each round.
#[test]
fn a_small_storm_of_fixture_guests() {
    require_kvm!();
    let dir = scratch("storm-real");
    let out = dir.join("storm.json");
    let k = fixture("mini-bzimage-reset.bin");
    let o = bootscope(&[
        "bench",
        "--parallel",
        "3",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--output",
        out.to_str().unwrap(),
        "--",
        "run",
        "--kernel",
        &k,
        "--memory",
        "64M",
        "--allow-emulation",
        "--timeout",
        "60",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("storms of 3 VM(s) started at once"), "{err}");
    assert!(err.contains("a storm of 3: 3 ok, 0 failed"), "{err}");
    let summary = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "storms of 3 VMs: 2 with every VM ok",
        "time to userspace",
        "p99",
        "boots per second",
        "PSS of all 3 VMs",
    ] {
        assert!(
            summary.contains(needle),
            "summary lacks {needle:?}: {summary}"
        );
    }
    let doc: Value = read_json(&out);
    assert_eq!(doc["version"], 2);
    assert_eq!(doc["settings"]["parallel"], 3);
    let c = &doc["configs"][0];
    check_storm_runs(c);
    check_storms(c);
    assert_eq!(c["summary"]["storm:time_to_userspace:p99"]["n"], 2);
    assert_eq!(c["summary"]["storm:memory:pss:sum"]["unit"], "bytes");
    assert!(c["summary"]["solo:time_to_userspace"].is_object());
    // check gates on the storm's p99 like any metric (a file against
    // itself: no regression).
    let f = out.to_str().unwrap();
    let o = bootscope(&[
        "check",
        "--baseline",
        f,
        "--metric",
        "storm:time_to_userspace:p99",
        "--metric",
        "storm:memory:pss:sum",
        f,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        report.contains("time to userspace p99 per storm"),
        "{report}"
    );
}

/// `--stop-after memory` storms: the memory set-up time and each VMM's
/// memory at its end, no guest run.
#[test]
fn a_storm_of_memory_set_ups() {
    require_kvm!();
    let dir = scratch("storm-memory");
    let out = dir.join("storm.json");
    let o = bootscope(&[
        "bench",
        "--parallel",
        "4",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--output",
        out.to_str().unwrap(),
        "--",
        "run",
        "--stop-after",
        "memory",
        "--memory",
        "64M",
        "--prealloc",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: Value = read_json(&out);
    let c = &doc["configs"][0];
    let s = &c["storms"][0];
    assert_eq!(s["vms"], 4);
    let m = &s["metrics"];
    assert!(m["storm:memory_ready:p50"].as_u64().unwrap() > 0, "{s}");
    // Preallocated: every VMM holds its 64 MiB of guest memory privately.
    let uss = m["storm:memory:uss:p50"].as_u64().unwrap();
    assert!(uss >= 64 << 20, "USS {uss}: {s}");
    assert!(
        m["storm:memory:uss:sum"].as_u64().unwrap() >= 4 * (64 << 20),
        "{s}"
    );
}

/// The storm's runs, 2 rounds of one alone and 3 at once: each VMM read
/// its own memory at the userspace mark, PSS between USS and RSS.
fn check_storm_runs(c: &Value) {
    let runs = c["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2 * 4);
    assert_eq!(runs.iter().filter(|r| r["solo"] == true).count(), 2);
    assert_eq!(runs.iter().filter(|r| r["vm"].is_u64()).count(), 6);
    for r in runs {
        let m = &r["metrics"];
        // The VMM read its own memory at the userspace mark: PSS between
        // USS and RSS, and at least the guest memory the fixture touched.
        let (uss, pss, rss) = (
            m["memory:uss"].as_u64().unwrap(),
            m["memory:pss"].as_u64().unwrap(),
            m["memory:rss"].as_u64().unwrap(),
        );
        assert!(uss > 0 && uss <= pss && pss <= rss, "{r}");
        assert!(m["time_to_userspace"].as_u64().unwrap() > 0, "{r}");
    }
}

/// Each storm: every VM ok, its percentiles in order, its makespan, memory
/// sum and boot rate consistent.
fn check_storms(c: &Value) {
    let storms = c["storms"].as_array().unwrap();
    assert_eq!(storms.len(), 2);
    for s in storms {
        assert_eq!(s["ok"], true, "{s}");
        let m = &s["metrics"];
        let p = |stat: &str| {
            m[format!("storm:time_to_userspace:{stat}")]
                .as_u64()
                .unwrap()
        };
        assert!(
            p("p50") <= p("p90") && p("p90") <= p("p99") && p("p99") <= p("max"),
            "{s}"
        );
        assert!(m["storm:makespan"].as_u64().unwrap() >= m["storm:wall:max"].as_u64().unwrap() / 2);
        assert!(
            m["storm:memory:pss:sum"].as_u64().unwrap()
                >= m["storm:memory:pss:max"].as_u64().unwrap()
        );
        assert!(s["boots_per_second"].as_f64().unwrap() > 0.0);
    }
}
