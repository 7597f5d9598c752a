//! `bootscope export --format pprof` read by the real `go tool pprof`: a
//! profile with exit sites exported, and `-top` lists its top functions.
//! Skipped (said why) where Go is not installed.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bootscope_profiler::profile::ExitReasonStat;
use bootscope_profiler::sites::{ExitSite, ExitSites};
use bootscope_profiler::Profile;

use support::*;

/// The `go` command: on PATH, or Go's default install directory.
fn go() -> Option<PathBuf> {
    find_program("go").or_else(|| {
        let g = PathBuf::from("/usr/local/go/bin/go");
        g.is_file().then_some(g)
    })
}

fn site(reason: &str, rip: u64, function: &str, count: u64) -> ExitSite {
    ExitSite {
        reason: reason.into(),
        vcpu: 0,
        phase: "kernel".into(),
        rip: Some(rip),
        count,
        timed: count,
        latency_total_ns: count * 1000,
        function: Some(function.into()),
        offset: Some(0x10),
        module: None,
    }
}

/// Sites whose top functions (by exits) are io_serial_in, io_serial_out,
/// native_write_msr, in that order.
fn profile_with_sites() -> Profile {
    let mut p = Profile::new();
    let sites = vec![
        site("io", 0xffff_ffff_8160_0010, "io_serial_in", 9000),
        site("io", 0xffff_ffff_8160_0090, "io_serial_out", 5000),
        site("io", 0xffff_ffff_8160_00a0, "io_serial_out", 1000),
        site("msr", 0xffff_ffff_8107_0000, "native_write_msr", 3000),
        site("hlt", 0xffff_ffff_81c0_0000, "default_idle", 7),
    ];
    for (reason, code, count) in [("io", 123, 15000), ("msr", 124, 3000), ("hlt", 120, 7)] {
        p.exits.by_reason.push(ExitReasonStat {
            reason: reason.into(),
            code,
            count,
            ..Default::default()
        });
    }
    p.exits.total = 18007;
    p.exits.sites = Some(ExitSites {
        sites,
        ..Default::default()
    });
    p
}

fn pprof_top(go: &Path, dir: &Path, pb: &Path, extra: &[&str]) -> String {
    let mut cmd = Command::new(go);
    cmd.current_dir(dir)
        .args(["tool", "pprof", "-top", "-nodecount=10", "-symbolize=none"])
        .args(extra)
        .arg(pb)
        // No toolchain download. Go 1.26 builds pprof on first use, into
        // its build cache (under HOME unless GOCACHE says): minutes on a
        // slow machine, hence the generous limit.
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod");
    if std::env::var_os("HOME").is_none() && std::env::var_os("GOCACHE").is_none() {
        cmd.env("HOME", std::env::temp_dir());
    }
    let o = output_within(&mut cmd, Duration::from_secs(900));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "go tool pprof failed: {stderr}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn go_tool_pprof_lists_the_top_functions() {
    let Some(go) = go() else {
        skip_test!("Go is not installed (no go on PATH or in /usr/local/go/bin)");
    };
    let d = scratch("pprof-go");
    let json = d.join("profile.json");
    std::fs::write(&json, serde_json::to_string(&profile_with_sites()).unwrap()).unwrap();
    let pb = d.join("sites.pb.gz");
    let o = bootscope()
        .args(["export", "--format", "pprof", "-o"])
        .arg(&pb)
        .arg(&json)
        .output()
        .expect("bootscope runs");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The default sample type: exits, as the summary ranks.
    let top = pprof_top(&go, &d, &pb, &[]);
    // The summary's ranking of the io exits, and the other reason's top.
    let summary = profile_with_sites();
    let ranked = summary.exits.sites.as_ref().unwrap().top_functions("io");
    let names: Vec<&str> = ranked.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["io_serial_in", "io_serial_out"]);
    // `-top` rows: flat flat% sum% cum cum% name; flat order is by exits.
    let rows: Vec<(u64, &str)> = top
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 6 && f[1].ends_with('%'))
                .then(|| Some((f[0].parse().ok()?, f[5])))
                .flatten()
        })
        .collect();
    assert_eq!(
        rows.iter().take(3).collect::<Vec<_>>(),
        [
            &(9000, "io_serial_in"),
            &(6000, "io_serial_out"),
            &(3000, "native_write_msr"),
        ],
        "{top}"
    );
    assert!(top.contains("18007"), "total exits missing: {top}");

    let time = pprof_top(&go, &d, &pb, &["-sample_index=exit_time"]);
    assert!(time.contains("io_serial_in"), "{time}");
    let _ = std::fs::remove_dir_all(&d);
}
