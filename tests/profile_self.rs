//! `bootscope run` profiles its own VMM by default: the profile counts every
//! marker port write in the kernel, carries the VMM's own marks, and agrees
//! with KVM's own exit statistic and the VMM's own counts.

mod support;

use support::*;

use std::path::PathBuf;
use std::process::Output;

/// `bootscope run --kernel FIXTURE --serial null EXTRA... --output P
/// --timeline T` in a scratch directory: its output, the profile and the
/// timeline (Null where not written), and the directory.
fn run_self_profiled(
    tag: &str,
    kernel: &str,
    extra: &[&str],
) -> (Output, serde_json::Value, serde_json::Value, PathBuf) {
    let d = scratch(tag);
    let out = d.join("profile.json");
    let timeline = d.join("timeline.json");
    let k = fixture(kernel);
    let mut args = vec!["run", "--kernel", &k, "--serial", "null"];
    args.extend(extra);
    args.extend([
        "--output",
        out.to_str().unwrap(),
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    let o = run(bootscope().args(&args), None);
    let read = |p: &PathBuf| {
        std::fs::read(p)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null)
    };
    let (p, t) = (read(&out), read(&timeline));
    (o, p, t, d)
}

#[test]
fn run_writes_its_own_profile() {
    require_kvm!();
    require_bpf!();
    let (o, p, t, d) = run_self_profiled("self", "mini-bzimage-ports.bin", &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(p["schema"], "bootscope.profile");
    assert_eq!(p["target"]["kind"], "self");
    let writes = p["exits"]["marker_writes"].as_array().unwrap();
    let count = |port: u64, value: u64| {
        writes
            .iter()
            .find(|w| w["port"] == port && w["value"] == value)
            .and_then(|w| w["count"].as_u64())
            .unwrap_or(0)
    };
    // Counted in the kernel, exactly as the guest wrote them.
    assert_eq!(count(0x80, 0x90), 1000);
    assert_eq!(count(0x80, 0x40), 1);
    assert_eq!(count(0xf4, 7), 1);
    // The VMM's own marks arrived in-process.
    let marks: Vec<&str> = p["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(marks.contains(&"vmm: first KVM_RUN"), "{marks:?}");
    check_attach_phases(&p, &t);
    // The vCPU thread is named and placed.
    let threads = p["threads"].as_array().unwrap();
    assert!(threads
        .iter()
        .any(|t| t["name"] == "vcpu0" && !t["cpus"].as_array().unwrap().is_empty()));
    // A VMM profiling itself reads no exit codes, so the loader never
    // parses the kernel's BTF (most of the profiler's start-up).
    let btf = p["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "btf:vmlinux")
        .unwrap();
    assert_eq!(btf["status"], "disabled", "{btf}");
    assert!(
        threads.iter().all(|t| t["exit_code"].is_null()),
        "{threads:?}"
    );
    // Cross-check: KVM's own exit count, as the VMM read it, matches the
    // profile's copy.
    // The profiler finds the VMM's statistics files once it says its vCPUs
    // exist, and reads its copies after the VM is gone.
    let vmm_exits = t["kvm_stats"]["exits"].as_u64().unwrap();
    assert_eq!(
        p["exits"]["kvm_stats_exits"].as_u64(),
        Some(vmm_exits),
        "{}",
        p["sources"]
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// The profiler attached before the VMM started: its attach is a phase
/// of its own, and the VMM's set-up starts after it; the guest programs
/// were attached beside the set-up, and the VMM waited for them before
/// its first KVM_RUN.
fn check_attach_phases(p: &serde_json::Value, t: &serde_json::Value) {
    let tmarks: Vec<(&str, u64)> = t["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["t_ns"].as_u64().unwrap()))
        .collect();
    let at = |name: &str| tmarks.iter().find(|m| m.0 == name).map(|m| m.1);
    let attached = at("vmm: profiler attached").expect("the attach mark");
    assert!(attached <= at("vmm: memory ready").unwrap(), "{tmarks:?}");
    let phases: Vec<(&str, u64, u64)> = t["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["start_ns"].as_u64().unwrap(),
                p["end_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(phases[0], ("profiler attach", 0, attached), "{phases:?}");
    assert_eq!(phases[1].0, "vmm setup", "{phases:?}");
    assert_eq!(phases[1].1, attached, "{phases:?}");
    // The guest programs were attached beside the set-up; the VMM waited
    // for them before its first KVM_RUN.
    let (wait, run) = (
        at("vmm: waiting for the profiler's guest programs").expect("the wait mark"),
        at("vmm: first KVM_RUN").unwrap(),
    );
    let guest = at("vmm: profiler's guest programs attached").expect("the guest mark");
    assert!(attached < guest && guest <= run, "{tmarks:?}");
    assert_eq!(phases[1].2, wait, "{phases:?}");
    assert_eq!(
        phases[2],
        ("profiler guest attach", wait, run),
        "{phases:?}"
    );
    // The profile's set-up stages all fall inside the first phase, the
    // guest programs' stages after it.
    let stages = p["startup"].as_array().unwrap();
    let sum = |guest: bool| -> u64 {
        stages
            .iter()
            .filter(|s| s["stage"].as_str().unwrap().starts_with("guest ") == guest)
            .map(|s| s["ns"].as_u64().unwrap())
            .sum()
    };
    assert!(sum(false) <= attached, "{} > {attached}", sum(false));
    assert!(sum(true) > 0 && sum(true) <= guest - attached, "{stages:?}");
}

/// The guest programs' attach held back (GUEST_ATTACH_DELAY_ENV) past the
/// VMM's set-up: the VMM waits for it, and every port write of the guest,
/// the first ones right after the first KVM_RUN, is still counted in the
/// kernel. Preallocation ran with the set-up's programs alone, and the
/// profile and the placement report show each worker, its CPUs, node and
/// pages.
#[test]
fn the_first_kvm_run_waits_for_the_guest_programs() {
    require_kvm!();
    require_bpf!();
    const DELAY_MS: u64 = 400;
    let d = scratch("selfwait");
    let (out, timeline) = (d.join("p.json"), d.join("t.json"));
    let o = run(
        bootscope()
            .env(
                bootscope_profiler::collector::GUEST_ATTACH_DELAY_ENV,
                DELAY_MS.to_string(),
            )
            .args(["run", "--kernel", &fixture("mini-bzimage-ports.bin")])
            .args(["--serial", "null", "--memory", "256M", "--prealloc"])
            .args(["--prealloc-threads", "2", "--output"])
            .args([out.as_os_str(), "--timeline".as_ref(), timeline.as_os_str()]),
        None,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let read = |p: &PathBuf| -> serde_json::Value { read_json(p) };
    let (p, t) = (read(&out), read(&timeline));
    let at = |name: &str| {
        t["marks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["t_ns"].as_u64())
            .unwrap_or_else(|| panic!("no mark {name}: {}", t["marks"]))
    };
    let attached = at("vmm: profiler attached");
    let guest = at("vmm: profiler's guest programs attached");
    let run_at = at("vmm: first KVM_RUN");
    assert!(guest >= attached + DELAY_MS * 1_000_000, "{}", t["marks"]);
    assert!(guest <= run_at, "{}", t["marks"]);
    let wait = t["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "profiler guest attach")
        .expect("the wait phase");
    assert_eq!(wait["end_ns"].as_u64(), Some(run_at));
    // Counted in the kernel from the first write on.
    let writes = p["exits"]["marker_writes"].as_array().unwrap();
    let count = |port: u64, value: u64| {
        writes
            .iter()
            .find(|w| w["port"] == port && w["value"] == value)
            .and_then(|w| w["count"].as_u64())
            .unwrap_or(0)
    };
    assert_eq!(count(0x80, 0x40), 1, "{writes:?}");
    assert_eq!(count(0x80, 0x90), 1000, "{writes:?}");
    for s in p["sources"].as_array().unwrap() {
        assert_ne!(s["status"], "failed", "{s}");
    }
    // The workers, as the VMM placed them and as the profile saw them.
    let workers = t["memory"]["regions"][0]["threads"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{workers:?}");
    let threads = p["threads"].as_array().unwrap();
    let mut allocated = 0;
    for w in workers {
        assert_eq!(w["pages_touched"].as_u64(), Some((128 << 20) / 4096), "{w}");
        let seen = threads
            .iter()
            .find(|th| th["tid"] == w["tid"])
            .unwrap_or_else(|| panic!("worker {w} not in the profile: {threads:?}"));
        assert_eq!(seen["name"], w["name"], "{seen}");
        assert_eq!(seen["role"], "prealloc", "{seen}");
        assert!(!seen["cpus"].as_array().unwrap().is_empty(), "{seen}");
        assert_eq!(seen["nodes"][0], w["node"], "{seen} {w}");
        allocated += seen["bytes_allocated"].as_u64().unwrap();
    }
    // The 256 MiB (4 KiB or huge pages), give or take their page tables.
    assert!(
        allocated > (256 << 20) * 97 / 100 && allocated < (256 << 20) * 103 / 100,
        "{allocated}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn no_profile_runs_without_bpf() {
    require_kvm!();
    let d = scratch("noprof");
    let o = run(
        bootscope().args([
            "run",
            "--kernel",
            &fixture("mini-bzimage-reset.bin"),
            "--serial",
            "null",
            "--no-profile",
        ]),
        None,
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("profile of pid"));
    let _ = std::fs::remove_dir_all(&d);
}

/// Profiling itself, the VMM finds its own vCPU statistics files; the
/// copies it makes land in the same descriptor table and must not be taken
/// for more vCPUs at the next scan (a second-long run scans several times).
#[test]
fn self_profile_reads_each_vcpu_once() {
    require_kvm!();
    require_bpf!();
    let (o, p, t, d) =
        run_self_profiled("selfstats", "mini-bzimage-hlt.bin", &["--timeout", "1.5"]);
    // A halted guest that reaches --timeout ends unclean (1).
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let source = p["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"].as_str().unwrap_or("").starts_with("kvm_stats:"))
        .expect("a kvm_stats source");
    assert_eq!(source["name"], "kvm_stats:stats_fd", "{source}");
    assert!(
        source["detail"].as_str().unwrap().contains("of 1 vCPU(s)"),
        "{source}"
    );
    assert_eq!(
        p["exits"]["kvm_stats_exits"].as_u64(),
        t["kvm_stats"]["exits"].as_u64(),
        "the profile's copy of KVM's count and the VMM's own"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bpf_stats_account_for_every_event() {
    require_kvm!();
    require_bpf!();
    let (o, p, _, d) = run_self_profiled("stats", "mini-bzimage-ports.bin", &["--bpf-stats"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let sources = p["sources"].as_array().unwrap();
    let stats = sources
        .iter()
        .find(|s| s["name"] == "bpf_stats:run_time")
        .unwrap();
    if stats["status"] != "attached" {
        // A kernel without BPF_ENABLE_STATS says so and profiles the rest.
        skip_test!(
            "this kernel has no BPF run-time statistics: {}",
            stats["detail"]
        );
    }
    let mut timed = 0;
    for s in sources.iter().filter(|s| s["status"] != "missing") {
        let (Some(runs), Some(ns)) = (s["runs"].as_u64(), s["run_ns"].as_u64()) else {
            continue;
        };
        timed += 1;
        // The kernel's own count of runs includes every event we counted
        // (and the runs for processes we do not follow).
        let events = s["events"].as_u64().unwrap();
        assert!(runs >= events, "{s}");
        assert_eq!(runs > 0, ns > 0, "{s}");
    }
    assert!(timed >= 10, "{sources:?}");
    // The 1,000+ port writes ran the kvm_pio programs at least as often.
    let pio_runs: Vec<u64> = sources
        .iter()
        .filter(|s| s["name"] == "tracepoint:kvm:kvm_pio")
        .filter_map(|s| s["runs"].as_u64())
        .collect();
    assert_eq!(pio_runs.len(), 2, "{sources:?}");
    assert!(pio_runs.iter().all(|&r| r >= 1002), "{pio_runs:?}");
    assert!(stderr.contains("eBPF programs: "), "{stderr}");
    // Without the flag the kernel is not asked to time anything.
    let (o, p, _, d2) = run_self_profiled("nostats", "mini-bzimage-ports.bin", &[]);
    assert_eq!(o.status.code(), Some(0));
    let sources = p["sources"].as_array().unwrap();
    assert!(
        sources.iter().all(|s| s.get("runs").is_none()),
        "{sources:?}"
    );
    assert!(!sources.iter().any(|s| s["name"] == "bpf_stats:run_time"));
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

/// With `--initcalls` the profiler counts every exit and page fault per
/// 100 µs slot in the kernel: per reason, the slots add up to the profile's
/// own total (nothing lost, nothing counted twice). Without it there are
/// none. (The fixture is not Linux: its initcalls say why there are none,
/// and the run is unchanged.)
#[test]
fn initcalls_count_exits_and_faults_per_time_slot() {
    require_kvm!();
    require_bpf!();
    let (o, p, t, d) = run_self_profiled("slots", "mini-bzimage-ports.bin", &["--initcalls"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(t["initcalls"]["error"].is_string(), "{}", t["initcalls"]);
    let slots = &p["time_slots"];
    assert_eq!(slots["slot_ns"], 100_000, "{slots}");
    // On the timeline's clock: slot 0 starts at the VMM's start.
    assert_eq!(slots["start_ns"], 0, "{slots}");
    assert_eq!(slots["overflow_exits"], 0, "{slots}");
    assert_eq!(slots["overflow_faults"], 0, "{slots}");
    assert!(slots["full_from_slot"].is_null(), "{slots}");
    assert_eq!(slots["exits_source"], p["exits"]["source"]);
    let by_reason = p["exits"]["by_reason"].as_array().unwrap();
    assert!(!by_reason.is_empty());
    for r in by_reason {
        let name = r["reason"].as_str().unwrap();
        assert_eq!(
            slot_sum(&slots["exits"][name]),
            r["count"].as_u64().unwrap(),
            "{name}"
        );
    }
    assert_eq!(
        slots["exits"].as_object().unwrap().len(),
        by_reason.len(),
        "{slots}"
    );
    // The port writes are in the slots where the guest made them: between
    // the VMM's first KVM_RUN and the guest's shutdown on the timeline.
    let mark = |name: &str| {
        t["marks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["t_ns"].as_u64())
            .unwrap_or_else(|| panic!("no mark {name}"))
    };
    let (k0, k1) = (
        mark("vmm: first KVM_RUN") / 100_000,
        mark("vmm: guest shutdown") / 100_000,
    );
    let io_name = by_reason
        .iter()
        .max_by_key(|r| r["count"].as_u64())
        .unwrap()["reason"]
        .as_str()
        .unwrap();
    let in_kernel: u64 = slots["exits"][io_name]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pair| (k0..=k1).contains(&pair[0].as_u64().unwrap()))
        .map(|pair| pair[1].as_u64().unwrap())
        .sum();
    assert!(
        in_kernel >= 1000,
        "{io_name}: {in_kernel} in slots {k0}..={k1}"
    );
    let faults = &p["page_faults"];
    assert_eq!(slot_sum(&slots["guest_faults"]), faults["guest_total"]);
    assert_eq!(slot_sum(&slots["host_faults"]), faults["host_total"]);

    // Without --initcalls: no slots.
    let (o, p, _, d2) = run_self_profiled("noslots", "mini-bzimage-ports.bin", &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(p["time_slots"].is_null(), "{}", p["time_slots"]);
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

/// A slot map too small for the boot counts what it had no room for, and
/// says from which slot on its counts are incomplete: never silently short.
#[test]
fn a_full_slot_map_counts_what_it_lost() {
    require_kvm!();
    require_bpf!();
    let d = scratch("slotsfull");
    let out = d.join("profile.json");
    let o = run(
        bootscope()
            .env("BOOTSCOPE_TIME_SLOT_ENTRIES", "4")
            .args(["run", "--kernel", &fixture("mini-bzimage-ports.bin")])
            .args(["--serial", "null", "--initcalls", "--output"])
            .arg(&out),
        None,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let p: serde_json::Value = read_json(&out);
    let slots = &p["time_slots"];
    assert_eq!(slots["capacity"], 4, "{slots}");
    assert!(slots["entries"].as_u64().unwrap() <= 4, "{slots}");
    let lost = slots["overflow_exits"].as_u64().unwrap();
    assert!(lost > 0, "{slots}");
    assert!(slots["full_from_slot"].is_u64(), "{slots}");
    let counted: u64 = slots["exits"]
        .as_object()
        .unwrap()
        .values()
        .map(slot_sum)
        .sum();
    assert_eq!(counted + lost, p["exits"]["total"].as_u64().unwrap());
    let faults = &p["page_faults"];
    let total_faults =
        faults["guest_total"].as_u64().unwrap() + faults["host_total"].as_u64().unwrap();
    let counted_faults = slot_sum(&slots["guest_faults"]) + slot_sum(&slots["host_faults"]);
    assert!(
        counted_faults + slots["overflow_faults"].as_u64().unwrap() >= total_faults,
        "{slots}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
