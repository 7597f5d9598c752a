//! `run --initcalls` in the lab (real nested KVM): the default guest's
//! initcalls read from its trace buffer at power-off, named from the
//! kernel's symbol table, placed inside the kernel phase on the VMM's clock
//! with a stated alignment error, grouped by level; the console carries
//! none of their lines and the guest makes no more port I/O exits than
//! without `--initcalls`. Their durations agree with the kernel's own
//! (`initcall_debug` in the same boot); a boot that panics keeps those up
//! to the panic. Profiled (and read from the printk log,
//! `--initcalls-method log`), each initcall gets the exits and faults the
//! eBPF programs counted in its span, and its port I/O exits agree with
//! the VMM's own count.

mod support;

use support::*;

use std::sync::OnceLock;

use support::lab::{LabRun, LabRunResult};

/// The default kernel command line of `run`.
const CMDLINE: &str =
    "console=ttyS0 reboot=k panic=-1 pci=off io_delay=none i8042.noaux i8042.nomux i8042.dumbkbd";

/// The boots of this file's tests, one after another in one lab machine
/// (the duration check compares two clocks' readings around each
/// initcall, which another lab machine running beside it on a small host
/// would pull apart), booted by whichever test comes first; `None` where
/// they cannot run (a SKIP line says why); `Err` with the first test's
/// failure, which every test then reports instead of booting them again.
type Boots = Result<Option<Vec<(&'static str, LabRunResult)>>, String>;
static BOOTS: OnceLock<Boots> = OnceLock::new();

/// The boot `tag` of [`BOOTS`], which must have ended with `status`.
fn booted(p: &lab::Prereqs, tag: &str, status: i32) -> Option<&'static LabRunResult> {
    let boots = BOOTS.get_or_init(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| boot_all(p))).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    });
    let boots = match boots {
        Ok(b) => b.as_ref()?,
        Err(e) => panic!("the lab's boots failed: {e}"),
    };
    let (_, r) = boots.iter().find(|(t, _)| *t == tag).unwrap();
    assert_eq!(r.status, Some(status), "{}", r.output);
    if tag != "without" {
        assert!(
            r.output.contains("slowest initcalls"),
            "summary: {}",
            r.output
        );
    }
    Some(r)
}

/// This file's boots, in one lab machine.
fn boot_all(p: &lab::Prereqs) -> Option<Vec<(&'static str, LabRunResult)>> {
    let profile = p.dir.join("out/profiled-profile.json");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let runs = [
        ("with", args(&["--no-profile", "--initcalls"]), vec![]),
        ("without", args(&["--no-profile"]), vec![]),
        (
            "profiled",
            args(&[
                "--initcalls",
                "--initcalls-method",
                "log",
                "--profile",
                "--output",
                profile.to_str().unwrap(),
            ]),
            vec![profile.clone()],
        ),
        (
            "durations",
            args(&[
                "--no-profile",
                "--initcalls",
                "--cmdline",
                &format!("{CMDLINE} quiet initcall_debug"),
            ]),
            vec![],
        ),
        (
            "panic",
            args(&[
                "--no-profile",
                "--initcalls",
                "--cmdline",
                &format!("{CMDLINE} rdinit=/nonexistent init=/nonexistent"),
            ]),
            vec![],
        ),
    ]
    .map(|(tag, args, extra)| LabRun { tag, args, extra });
    let results = lab::runs_in_one_lab(p, &runs)?;
    Some(runs.iter().map(|r| r.tag).zip(results).collect())
}

/// The same boot without --initcalls. The console differs only by the
/// longer command line (echoed twice), the log buffer's notice and three
/// shutdown lines, some 700 bytes; printing the 670-odd initcalls' lines
/// would add over 80,000. Port I/O exits follow the console bytes.
fn assert_no_console_cost(with: &LabRunResult, without: &LabRunResult, error: u64) {
    let extra_bytes = with.serial.len() as i64 - without.serial.len() as i64;
    assert!(
        extra_bytes < 2_000,
        "the console grew by {extra_bytes} bytes with --initcalls"
    );
    let io = |d: &serde_json::Value| d["kvm_stats"]["io_exits"].as_u64().unwrap();
    let (with, without) = (io(&with.timeline), io(&without.timeline));
    eprintln!(
        "alignment error {error} ns; console +{extra_bytes} bytes; io exits {with} with, {without} without"
    );
    assert!(
        with as f64 <= without as f64 * 1.05,
        "io exits {with} with --initcalls, {without} without"
    );
}

#[test]
fn initcalls_of_the_default_guest_are_on_the_timeline_without_console_cost() {
    let p = require_lab_guest!("initcalls");
    let Some(with) = booted(&p, "with", 0) else {
        return;
    };
    let (doc, console) = (&with.timeline, &with.serial);
    let ic = &doc["initcalls"];
    assert!(ic["error"].is_null(), "{}", ic["error"]);
    assert!(
        ic["method"].as_str().unwrap().contains("tracepoints"),
        "{}",
        ic["method"]
    );
    assert_eq!(ic["trace_overrun"], 0, "events lost");
    let calls = ic["initcalls"].as_array().unwrap();
    assert!(calls.len() >= 300, "only {} initcalls", calls.len());
    let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in ["serial8250_init", "pci_subsys_init", "acpi_init"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    // Every one named from the kernel's symbol table (an address is shown
    // where a name is not found).
    let unnamed: Vec<&&str> = names.iter().filter(|n| n.starts_with("0x")).collect();
    assert!(unnamed.is_empty(), "not in the symbol table: {unnamed:?}");
    let clock = &ic["clock"];
    let error = clock["error_ns"].as_u64().expect("the clock is aligned");
    assert!(clock["anchors"].as_u64().unwrap() >= 10, "{clock}");
    assert!(error < 20_000_000, "alignment error {error} ns");
    let kernel = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "kernel")
        .expect("a kernel phase");
    let (k0, k1) = (
        kernel["start_ns"].as_u64().unwrap(),
        kernel["end_ns"].as_u64().unwrap(),
    );
    let mut last = 0;
    for c in calls {
        let start = c["start_ns"].as_u64().unwrap();
        let end = start + c["duration_ns"].as_u64().unwrap();
        assert!(start >= last, "starts out of order at {c}");
        assert!(
            start + error >= k0 && end <= k1 + error,
            "{c} outside the kernel phase {k0}..{k1}"
        );
        last = start;
    }
    let levels: Vec<&str> = ic["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["level"].as_str().unwrap())
        .collect();
    for l in [
        "early", "core", "postcore", "arch", "subsys", "fs", "device", "late",
    ] {
        assert!(levels.contains(&l), "level {l} missing from {levels:?}");
    }
    // Port I/O exits per initcall: some made them, and together no more
    // than the whole boot.
    let per_call: Vec<u64> = calls
        .iter()
        .map(|c| c["io_exits"].as_u64().expect("io_exits per initcall"))
        .collect();
    let boot_io = doc["kvm_stats"]["io_exits"].as_u64().unwrap();
    assert!(
        per_call.iter().any(|&n| n > 0),
        "no initcall made an io exit"
    );
    assert!(
        per_call.iter().sum::<u64>() <= boot_io,
        "{per_call:?} > {boot_io}"
    );
    assert!(
        !console.contains("calling  ") && !console.contains("initcall serial8250_init"),
        "initcall lines reached the console"
    );

    assert_no_console_cost(with, booted(&p, "without", 0).unwrap(), error);
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// Profiled (`run` profiles itself by default), the eBPF programs count
/// every exit and fault per 100 µs slot: per reason the slots add up to the
/// profile's total, which is KVM's own count; each initcall gets its exits
/// by reason and its faults, and its port I/O exits agree with what the VMM
/// counted for it in its own slots (the same exits, timed in the kernel at
/// `kvm_exit` rather than when the VMM handles them).
#[test]
fn profiled_initcalls_get_the_exits_the_kernel_counted() {
    let p = require_lab_guest!("initcalls-profiled");
    let Some(profiled) = booted(&p, "profiled", 0) else {
        return;
    };
    let doc = &profiled.timeline;
    let profile: serde_json::Value =
        serde_json::from_slice(&profiled.extra[0]).expect("the profile");
    let slots = &profile["time_slots"];
    assert_eq!(slots["slot_ns"], 100_000, "{slots}");
    assert_eq!(slots["start_ns"], 0, "{slots}");
    assert_eq!(slots["overflow_exits"], 0, "{slots}");
    assert_eq!(slots["exits_source"], "tracepoint:kvm:kvm_exit");
    let exits = &profile["exits"];
    let mut all = 0;
    for r in exits["by_reason"].as_array().unwrap() {
        let name = r["reason"].as_str().unwrap();
        let n = slot_sum(&slots["exits"][name]);
        assert_eq!(n, r["count"].as_u64().unwrap(), "{name}");
        all += n;
    }
    assert_eq!(
        Some(all),
        exits["kvm_stats_exits"].as_u64(),
        "KVM's own count"
    );
    assert_eq!(
        slot_sum(&slots["guest_faults"]),
        profile["page_faults"]["guest_total"]
    );
    assert_eq!(
        slot_sum(&slots["host_faults"]),
        profile["page_faults"]["host_total"]
    );

    let ic = &doc["initcalls"];
    assert!(ic["error"].is_null(), "{}", ic["error"]);
    assert!(ic["method"].as_str().unwrap().contains("initcall_debug"));
    assert_eq!(ic["slot_ns"], 100_000);
    assert!(ic["sample_spacing_ns"].is_null(), "{ic:.300}");
    let calls = ic["initcalls"].as_array().unwrap();
    assert!(calls.len() >= 300, "only {} initcalls", calls.len());
    let (mut vmm_io, mut bpf_io, mut faulted) = (0, 0, 0);
    let mut apart = Vec::new();
    for c in calls {
        let counted = &c["counted"];
        assert!(c["sampled"].is_null(), "{c}");
        let by_reason = counted["exits_by_reason"].as_object();
        let total: u64 = by_reason.map_or(0, |m| m.values().map(|v| v.as_u64().unwrap()).sum());
        assert_eq!(counted["exits"].as_u64(), Some(total), "{c}");
        let io = counted["exits_by_reason"]["io"].as_u64().unwrap_or(0);
        let vmm = c["io_exits"].as_u64().unwrap();
        // Partial slots are shared pro rata on both sides, so an exit near
        // a slot's edge may round to a neighbour; and the VMM stamps an
        // exit when it handles it, after the kernel's `kvm_exit`, so a
        // vCPU thread preempted in between (a loaded host) moves the
        // exits at an initcall's edge to its neighbour on the VMM's side.
        if io.abs_diff(vmm) > 2 + vmm / 50 {
            apart.push(format!(
                "{}: {io} in the kernel, {vmm} by the VMM",
                c["name"]
            ));
        }
        vmm_io += vmm;
        bpf_io += io;
        faulted += counted["guest_faults"].as_u64().unwrap();
    }
    eprintln!(
        "{} of {} initcalls' io exits apart: {apart:?}",
        apart.len(),
        calls.len()
    );
    assert!(apart.len() * 100 <= calls.len() * 2, "{apart:?}");
    assert!(vmm_io > 1_000, "{vmm_io}");
    assert!(
        bpf_io.abs_diff(vmm_io) * 100 <= vmm_io,
        "initcalls' io exits: {bpf_io} in the kernel's slots, {vmm_io} in the VMM's"
    );
    assert!(faulted > 0, "no initcall made a guest page fault");
    for l in ic["levels"].as_array().unwrap() {
        assert!(l["counted"].is_object(), "{l}");
    }
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// With `initcall_debug` on the command line too, the kernel logs its own
/// measure of each initcall (`ktime_get()` around the call) in the same
/// boot: the traced durations agree with it, within 10 % or 50 µs, from
/// the point where the kernel's clock is finer than its 4 ms jiffies (the
/// switch to kvm-clock, about half the initcalls in). The traced span also
/// holds `initcall_debug`'s own `calling` line (its probe runs after the
/// trace event's), some 15 µs in the lab; `quiet` keeps the console from
/// printing inside it.
#[test]
fn traced_durations_agree_with_the_kernels_own() {
    let p = require_lab_guest!("initcalls-durations");
    let Some(durations) = booted(&p, "durations", 0) else {
        return;
    };
    let doc = &durations.timeline;
    let ic = &doc["initcalls"];
    assert!(ic["error"].is_null(), "{}", ic["error"]);
    let calls = ic["initcalls"].as_array().unwrap().len() as u64;
    let check = &ic["kernel_durations"];
    let compared = check["compared"].as_u64().expect("compared with the log");
    let coarse = check["coarse"].as_u64().unwrap();
    let agree = check["agree"].as_u64().unwrap();
    // Every initcall found in the log, by name.
    assert_eq!(compared + coarse, calls, "{check}");
    assert!(compared >= 200, "{compared} compared: {check}");
    // An interrupt, or the host preempting the vCPU, between the two
    // clocks' readings of one initcall (`initcall_debug`'s probes print
    // between them) pulls the two figures apart, either way. How many
    // that touches depends on the host's load (the lab's host is
    // emulated): 85 to 96 % of 385 agreed on a quiet host, 74 % with two
    // busy loops beside the lab on its 2 CPUs. The slower initcalls (1 ms
    // or more, where the 50 µs floor does not make agreement easy) agree
    // in the median whatever the load: a wrong clock, or calls paired
    // wrongly, fails that.
    let fine = |c: &&serde_json::Value| {
        c["guest_start_ns"].as_u64().unwrap() >= check["from_guest_ns"].as_u64().unwrap()
    };
    let pairs: Vec<(u64, u64)> = ic["initcalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(fine)
        .filter_map(|c| {
            let kernel = c["kernel_duration_ns"].as_u64()?;
            Some((c["duration_ns"].as_u64().unwrap(), kernel))
        })
        .collect();
    assert_eq!(pairs.len() as u64, compared, "{check}");
    let mut slow: Vec<f64> = pairs
        .iter()
        .filter(|&&(_, k)| k >= 1_000_000)
        .map(|&(t, k)| t as f64 / k as f64)
        .collect();
    slow.sort_by(f64::total_cmp);
    let median = slow[slow.len() / 2];
    eprintln!(
        "durations: {agree} of {compared} agree; {} of 1 ms or more, \
         median traced/kernel {median:.3}",
        slow.len()
    );
    assert!(slow.len() >= 10, "{} initcalls of 1 ms or more", slow.len());
    assert!((0.9..=1.1).contains(&median), "median {median}: {check}");
    assert!(
        agree * 100 >= compared * 50,
        "{agree} of {compared} agree: {check}"
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// A kernel that panics during its boot (no init to run, after the last
/// initcall) and resets: its initcalls are still read from its memory.
#[test]
fn a_boot_that_panics_keeps_its_initcalls() {
    let p = require_lab_guest!("initcalls-panic");
    let Some(panic) = booted(&p, "panic", 1) else {
        return;
    };
    let (doc, console) = (&panic.timeline, &panic.serial);
    assert!(console.contains("Kernel panic"), "{console}");
    let ic = &doc["initcalls"];
    assert!(ic["error"].is_null(), "{}", ic["error"]);
    let calls = ic["initcalls"].as_array().unwrap();
    assert!(calls.len() >= 300, "only {} initcalls", calls.len());
    let levels: Vec<&str> = ic["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["level"].as_str().unwrap())
        .collect();
    assert_eq!(levels.last(), Some(&"late"), "{levels:?}");
    let _ = std::fs::remove_dir_all(&p.dir);
}
