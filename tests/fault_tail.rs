//! The fault-tail collector on a restore of bootscope's own VMM: on by
//! default for `run --restore`, its window from the first `KVM_RUN` to the
//! guest's next mark, its host faults against the kernel's own per-thread
//! counters over the same window, and its guest faults against KVM's own
//! statistics over the VM's life (the interval both sides count).

mod support;

use support::bootscope_output as bootscope;
use support::snapshot::ports_snapshot_with_disk;
use support::*;

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// A boot that is not a restore has no tail unless named.
fn plain_boot_has_no_tail(tmp: &std::path::Path) {
    let plain = tmp.join("plain.json");
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-ports.bin"),
        "--serial",
        "null",
        "--no-summary",
        "--output",
        plain.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(read_json(&plain).get("fault_tail").is_none());
}

/// The profile's `sources[]`.
fn sources(p: &serde_json::Value) -> &[serde_json::Value] {
    p["sources"].as_array().expect("sources[]")
}

/// A source's `detail`, empty when it has none.
fn detail(s: &serde_json::Value) -> &str {
    s["detail"].as_str().unwrap_or("")
}

/// How the window's end reads a fault's frame: raw where the kernel's
/// BTF places kvm_page_fault's gfn, else from the classic record.
fn window_end_reads_the_frame(p: &serde_json::Value) {
    let gfn = sources(p)
        .iter()
        .find(|s| s["name"] == "btf:kvm_page_fault gfn")
        .expect("the gfn's source");
    let raw = gfn["status"] == "attached";
    assert_eq!(detail(gfn).contains("attached raw"), raw, "{gfn}");
}

/// The default for a restore: the tail without its count over the VM's
/// life (no program left on every guest fault after the window).
fn the_life_count_is_asked_for(tmp: &std::path::Path, snap: &std::path::Path) {
    let p = tmp.join("default.json");
    let o = bootscope(&[
        "run",
        "--restore",
        snap.to_str().unwrap(),
        "--memory-restore",
        "mmap",
        "--no-summary",
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = read_json(&p);
    assert!(p["fault_tail"].is_object(), "{}", p["fault_tail"]);
    assert!(p["fault_tail"].get("guest_faults_total").is_none());
    let life = sources(&p)
        .iter()
        .find(|s| detail(s).contains("--collect tail-total"))
        .expect("the life count's program");
    assert_eq!(life["status"], "disabled", "{life}");
}

/// The window closed: its programs were detached, all but the count over
/// the VM's life (`sources[]` of the tail collector, by program).
fn window_programs_were_detached(p: &serde_json::Value) {
    let tail: Vec<&serde_json::Value> = sources(p)
        .iter()
        .filter(|s| s["collector"] == "tail" && s["status"] == "attached")
        .filter(|s| s["name"].as_str().unwrap_or("").starts_with("tracepoint:"))
        .collect();
    let life: Vec<_> = tail
        .iter()
        .filter(|s| detail(s).contains("guest_faults_total"))
        .collect();
    assert_eq!(life.len(), 1, "{tail:?}");
    let detached = tail
        .iter()
        .filter(|s| detail(s).starts_with("detached at the window's end"))
        .count();
    assert_eq!(detached, tail.len() - 1, "{tail:?}");
    assert!(detached >= 4, "{tail:?}");
    // With --bpf-stats, a detached program keeps the runs the kernel
    // counted until it was detached: the window's end ran at least once
    // for each of the window's guest faults.
    for s in &tail {
        assert!(s["runs"].as_u64().is_some(), "no run count: {s}");
    }
    let spte = tail
        .iter()
        .find(|s| {
            s["name"] == "tracepoint:kvmmmu:kvm_mmu_spte_requested"
                && detail(s).starts_with("detached")
        })
        .expect("the window's end program");
    let faults = p["fault_tail"]["guest_faults"].as_u64().unwrap();
    println!(
        "window end: {} runs for {faults} guest faults",
        spte["runs"]
    );
    assert!(spte["runs"].as_u64().unwrap() >= faults, "{spte}");
}

#[test]
fn a_restore_is_profiled_with_its_fault_tail() {
    require_root!("to load the eBPF programs");
    require_kvm!();
    require_bpf!();
    let tmp = scratch("fault-tail");
    let (snap, _disk) = ports_snapshot_with_disk(&tmp);
    let profile = tmp.join("p.json");
    let timeline = tmp.join("t.json");
    let o = bootscope(&[
        "run",
        "--restore",
        snap.to_str().unwrap(),
        "--memory-restore",
        "mmap",
        "--collect",
        "exits,faults,threads,numa,phases,tail-total",
        "--output",
        profile.to_str().unwrap(),
        "--timeline",
        timeline.to_str().unwrap(),
        "--bpf-stats",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("fault tail: "),
        "the summary's line: {}",
        text(&o)
    );
    let p = read_json(&profile);
    let t = &p["fault_tail"];
    assert_eq!(t["restore"]["vmm"], "bootscope", "{t}");
    window_end_reads_the_frame(&p);
    assert_eq!(t["restore"]["memory_mode"], "mmap", "{t}");

    // The window: from the first KVM_RUN to the guest's next mark, which
    // is the first guest mark after the VMM's first KVM_RUN.
    let w = &t["window"];
    let run = u(&w["first_kvm_run_ns"]);
    let end = u(&w["end_ns"]);
    assert!(end > run, "{w}");
    let next = p["marks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["source"] != "vmm" && u(&m["t_ns"]) >= run)
        .min_by_key(|m| u(&m["t_ns"]))
        .expect("a guest mark after the restore");
    assert_eq!(w["end_mark"], next["name"], "{w}");
    assert_eq!(u(&next["t_ns"]), end);

    // Host faults: what the collector gave to guest faults and to the rest
    // adds up, thread by thread summed, to the kernel's own counters
    // (task min_flt/maj_flt, /proc/PID/task/TID/stat) over the window.
    let h = &t["host"];
    let threads = h["threads"].as_array().unwrap();
    assert!(!threads.is_empty(), "{h}");
    let minflt: u64 = threads.iter().map(|x| u(&x["minflt"])).sum();
    let majflt: u64 = threads.iter().map(|x| u(&x["majflt"])).sum();
    assert_eq!(
        minflt,
        u(&h["minor_in_guest_faults"]) + u(&h["minor_other"]),
        "{h}"
    );
    assert_eq!(
        majflt,
        u(&h["major_in_guest_faults"]) + u(&h["major_other"]),
        "{h}"
    );

    // Guest faults over the VM's life against KVM's own statistics: each
    // mapping KVM's MMU requested belongs to one fault KVM took
    // (pf_taken), and every fault fixed outside the fast path requested
    // one.
    let kvm = &read_json(&timeline)["kvm_stats"];
    let total = u(&t["guest_faults_total"]);
    assert!(total <= u(&kvm["pf_taken"]), "{total} vs {kvm}");
    assert!(
        total >= u(&kvm["pf_fixed"]).saturating_sub(u(&kvm["pf_fast"])),
        "{total} vs {kvm}"
    );
    assert!(u(&t["guest_faults"]) <= total);
    fault_tail_parts_add_up(t);

    window_programs_were_detached(&p);

    plain_boot_has_no_tail(&tmp);
    the_life_count_is_asked_for(&tmp, &snap);
}
