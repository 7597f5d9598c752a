//! NUMA on a kernel that really has two nodes: the lab machine started with
//! `--numa-nodes 2` (one CPU and half the memory each). Preallocation's
//! placement report (each worker's own `/proc/self/task/TID/stat` and
//! sched_getaffinity, move_pages on sampled pages) and the profile (the
//! scheduler's and the page allocator's tracepoints) are each checked
//! against the lab kernel's own node layout, which its banner prints from
//! `/sys/devices/system/node`.

mod support;

use support::*;

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::Value;

/// One lab machine at a time: each takes two emulated CPUs.
static LAB: Mutex<()> = Mutex::new(());

/// `0`, `0-1`, `0,2-3` as a list of CPUs.
fn cpu_list(s: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u64>().unwrap()..=b.parse::<u64>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// The lab kernel's CPUs per node, from the banner line
/// `lab: 2 NUMA nodes: node0: cpus 0, 962 MiB; node1: cpus 1, ...`.
fn nodes_from_banner(output: &str) -> BTreeMap<u64, Vec<u64>> {
    let line = output
        .lines()
        .find(|l| l.starts_with("lab: ") && l.contains("NUMA nodes:"))
        .unwrap_or_else(|| panic!("no NUMA banner in the lab's output:\n{output}"));
    let mut nodes = BTreeMap::new();
    for part in line.split(';') {
        let rest = part.rsplit("node").next().unwrap();
        let Some((id, rest)) = rest.split_once(": cpus ") else {
            continue;
        };
        let cpus = rest.split(',').next().unwrap().trim();
        nodes.insert(id.trim().parse().unwrap(), cpu_list(cpus));
    }
    nodes
}

/// The CPUs a profiled thread ran on.
fn cpus_run_on(thread: &Value) -> Vec<u64> {
    thread["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cpu"].as_u64().unwrap())
        .collect()
}

struct NumaRun {
    nodes: BTreeMap<u64, Vec<u64>>,
    timeline: Value,
    profile: Value,
}

/// `bootscope lab --numa-nodes 2 -- run ARGS --stop-after memory` with a
/// timeline and a profile; None (after saying why) where the lab cannot run.
fn numa_run(tag: &str, args: &[&str]) -> Option<NumaRun> {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    lab::lab_kernel()?;
    if !can_profile() {
        return None;
    }
    let dir = scratch(tag);
    let timeline = dir.join("timeline.json");
    let profile = dir.join("profile.json");
    let o = run(
        bootscope()
            .args(["lab", "--numa-nodes", "2", "--retries", "2", "--", "run"])
            .args(args)
            .args(["--stop-after", "memory", "--no-summary", "--timeline"])
            .arg(&timeline)
            .arg("--output")
            .arg(&profile),
        None,
    );
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}");
    let run = NumaRun {
        nodes: nodes_from_banner(&out),
        timeline: read_json(&timeline),
        profile: read_json(&profile),
    };
    assert_eq!(run.nodes.len(), 2, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
    Some(run)
}

impl NumaRun {
    fn regions(&self) -> &Vec<Value> {
        self.timeline["memory"]["regions"].as_array().unwrap()
    }

    /// The profile's record of thread `tid`.
    fn profiled_thread(&self, tid: u64) -> &Value {
        self.profile["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"].as_u64() == Some(tid))
            .unwrap_or_else(|| panic!("thread {tid} is not in the profile"))
    }

    /// Every worker of guest node N ran only on host node `node_of(N)`'s
    /// CPUs, as the report (affinity, last CPU) and the profile (the CPUs
    /// it ran on) say each on its own.
    fn check_workers_on(&self, node_of: impl Fn(u64) -> u64) {
        for region in self.regions() {
            let guest = region["guest_node"].as_u64().unwrap();
            let cpus = &self.nodes[&node_of(guest)];
            let threads = region["threads"].as_array().unwrap();
            assert_eq!(threads.len(), 2, "{region}");
            for t in threads {
                let allowed = cpu_list(t["allowed_cpus"].as_str().unwrap());
                assert_eq!(&allowed, cpus, "affinity of {t}");
                assert!(cpus.contains(&t["last_cpu"].as_u64().unwrap()), "{t}");
                assert_eq!(t["node"].as_u64(), Some(node_of(guest)), "{t}");
                let p = self.profiled_thread(t["tid"].as_u64().unwrap());
                assert_eq!(p["name"], t["name"], "{p}");
                let ran = cpus_run_on(p);
                assert!(!ran.is_empty(), "{p}");
                assert!(ran.iter().all(|c| cpus.contains(c)), "{p} ran off {cpus:?}");
            }
        }
    }

    /// Where the sampled pages of each region are (move_pages), per host
    /// node.
    fn sampled_pages(&self, region: &Value) -> BTreeMap<u64, u64> {
        let placement = &region["placement"];
        placement["per_node"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(n, c)| (n.parse().unwrap(), c.as_u64().unwrap()))
            .collect()
    }

    /// The pages a region's workers allocated, by host node (the page
    /// allocator's tracepoint).
    fn allocated_by_node(&self, region: &Value) -> BTreeMap<u64, u64> {
        let mut by = BTreeMap::new();
        for t in region["threads"].as_array().unwrap() {
            let p = self.profiled_thread(t["tid"].as_u64().unwrap());
            for n in p["pages_by_node"].as_array().unwrap() {
                *by.entry(n["node"].as_u64().unwrap()).or_default() += n["pages"].as_u64().unwrap();
            }
        }
        by
    }
}

const BOUND: [&str; 9] = [
    "--memory",
    "256M",
    "--numa",
    "node=0,memory=128M,host-nodes=0",
    "--numa",
    "node=1,memory=128M,host-nodes=1",
    "--prealloc",
    "--prealloc-threads",
    "2",
];

/// Each guest node bound to its own host node: the workers ran on that
/// node's CPU and every page they allocated, and every sampled page, is on
/// that node; the profile counts them all local.
fn check_bound(run: &NumaRun) {
    run.check_workers_on(|guest| guest);
    for region in run.regions() {
        let node = region["guest_node"].as_u64().unwrap();
        let sampled = run.sampled_pages(region);
        assert_eq!(sampled.keys().collect::<Vec<_>>(), vec![&node], "{region}");
        let allocated = run.allocated_by_node(region);
        assert_eq!(
            allocated.keys().collect::<Vec<_>>(),
            vec![&node],
            "{allocated:?}"
        );
        // 128 MiB of 4 KiB pages at least (THP may give fewer, larger ones
        // only where the lab's THP mode allows: it is `madvise` in Debian
        // and each 2 MiB page is counted as 512).
        assert!(allocated[&node] >= 32768, "{allocated:?}");
    }
    // Guest memory is all on its node (above); the VMM's other pages
    // (a page table, a thread's stack) may rarely come from the other
    // node: at most one in 10,000 of the pages allocated.
    let numa = &run.profile["numa"];
    let remote = numa["pages_remote"].as_u64().unwrap();
    let all = numa["pages_allocated"].as_u64().unwrap();
    assert!(remote * 10_000 <= all, "{numa}");
}

#[test]
fn two_nodes_bound_regions_run_and_land_on_their_own_node() {
    let Some(run) = numa_run("bound", &BOUND) else {
        return;
    };
    check_bound(&run);
}

#[test]
fn two_nodes_placement_holds_under_the_sandbox() {
    let mut args = BOUND.to_vec();
    args.push("--sandbox");
    let Some(run) = numa_run("sandbox", &args) else {
        return;
    };
    check_bound(&run);
}

/// Threads placed on node 0, memory bound to node 1: the pages are on node
/// 1 (move_pages) and the profile counts them remote to the threads that
/// touched them.
#[test]
fn two_nodes_crossed_binding_shows_remote_pages() {
    let Some(run) = numa_run(
        "crossed",
        &[
            "--memory",
            "256M",
            "--numa",
            "node=0,memory=256M,host-nodes=1,policy=bind",
            "--prealloc",
            "--prealloc-threads",
            "2",
            "--prealloc-cpus",
            "0",
        ],
    ) else {
        return;
    };
    run.check_workers_on(|_| 0);
    let region = &run.regions()[0];
    assert_eq!(
        run.sampled_pages(region).keys().collect::<Vec<_>>(),
        vec![&1],
        "{region}"
    );
    let mut remote = 0;
    for t in region["threads"].as_array().unwrap() {
        let p = run.profiled_thread(t["tid"].as_u64().unwrap());
        // The guest memory is remote; only the kernel's page tables for it
        // come from the thread's own node (a few dozen pages).
        let (local, far) = (
            p["pages_local"].as_u64().unwrap(),
            p["pages_remote"].as_u64().unwrap(),
        );
        assert!(far >= 32768 && local * 100 < far, "{p}");
        remote += far;
    }
    assert!(remote >= 65536, "{remote} remote pages for 256 MiB");
    assert!(run.profile["numa"]["pages_remote"].as_u64().unwrap() >= remote);
}

/// Which of the two known stalls of two nested vCPUs run at once by the
/// emulator a timed-out run shows, from the vCPU states the VMM reports on
/// timeout (the lab relays the inner command's error on its stdout): a
/// vCPU halted with interrupts off beside one spinning with interrupts off
/// (a spinlock waiter that is never woken), or a vCPU with a page fault
/// pending (nested page faults KVM emulates into guest page faults, over
/// and over). None for any other outcome.
fn nested_stall(out: &str) -> Option<&'static str> {
    if out.contains("guest crashed: triple fault on vcpu")
        && out.contains("with no reset or power-off request")
    {
        return Some("a triple fault with no request, no oops on the console");
    }
    let detail = out
        .lines()
        .find_map(|l| l.split_once("guest still running after --timeout"))?
        .1;
    let vcpus: Vec<&str> = detail.split("; ").skip(1).collect();
    let halted_off = |v: &&str| v.contains(" halted at rip ") && v.contains("interrupts off)");
    let running_off = |v: &&str| v.contains(" running at rip ") && v.contains("interrupts off)");
    if vcpus.iter().any(halted_off) && vcpus.iter().any(running_off) {
        return Some("one vCPU halted and one spinning, interrupts off on both");
    }
    if vcpus.iter().any(|v| v.contains("exception 14 pending")) {
        return Some("a page fault pending on a running vCPU");
    }
    None
}

#[test]
fn nested_stalls_are_told_apart_from_other_timeouts() {
    let lock = "bootscope: error: the guest did not shut down cleanly: guest still running after \
                --timeout 240.0 s; vcpu0 halted at rip 0xffffffff81a592fa (ring 0, interrupts off); \
                vcpu1 running at rip 0xffffffff81a5a45e (ring 0, interrupts off)";
    let fault = "guest still running after --timeout 240.0 s; vcpu0 running at rip \
                 0xffffffffc05b120c (ring 0, interrupts on), exception 14 pending; vcpu1 halted \
                 at rip 0xffffffff81a592eb (ring 0, interrupts on)";
    let idle = "guest still running after --timeout 240.0 s; vcpu0 halted at rip \
                0xffffffff81a592eb (ring 0, interrupts on); vcpu1 halted at rip \
                0xffffffff81a592eb (ring 0, interrupts on)";
    assert!(nested_stall(lock).unwrap().contains("spinning"));
    assert!(nested_stall(fault).unwrap().contains("page fault"));
    assert_eq!(nested_stall(idle), None, "a guest waiting for an interrupt");
    assert_eq!(nested_stall("guest kernel panicked: Kernel panic"), None);
    let triple = "bootscope: error: the guest did not shut down cleanly: guest crashed: triple \
                  fault on vcpu0 (KVM_EXIT_SHUTDOWN) with no reset or power-off request";
    assert!(nested_stall(triple).unwrap().contains("triple fault"));
    assert_eq!(
        nested_stall("guest triple fault, reboot requested: triple_fault_reboot"),
        None
    );
    assert_eq!(
        nested_stall("vcpu0 halted at rip 0x1 (ring 0, interrupts off); vcpu1 running at rip 0x2 (ring 0, interrupts off)"),
        None,
        "only a timed-out run"
    );
}

/// A full boot with two guest NUMA nodes (one vCPU and 256 MiB each, each
/// bound to its own host node): the guest kernel reports the two nodes it
/// found in the VMM's SRAT and SLIT, and the profile's exits split by vCPU
/// add up to KVM's own count.
#[test]
fn guest_boots_with_two_numa_nodes_and_exits_split_by_vcpu() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let p = require_lab_guest!("numa-boot");
    require_bpf!();
    let serial = p.dir.join("serial.log");
    let profile = p.dir.join("profile.json");
    let timeline = p.dir.join("timeline.json");
    let boot = || {
        run(
            bootscope()
                .args(["lab", "--numa-nodes", "2", "--retries", "2"])
                .args(["--timeout", "600", "--", "run", "--kernel"])
                .arg(&p.kernel)
                .arg("--initrd")
                .arg(&p.initrd)
                .args(["--vcpus", "2", "--memory", "512M", "--timeout", "240"])
                .args(["--numa", "node=0,cpus=0,memory=256M,host-nodes=0"])
                .args(["--numa", "node=1,cpus=1,memory=256M,host-nodes=1"])
                .args(["--no-summary", "--serial"])
                .arg(&serial)
                .arg("--output")
                .arg(&profile)
                .arg("--timeline")
                .arg(&timeline),
            None,
        )
    };
    let mut o = boot();
    // With two lab CPUs the emulator runs both nested vCPUs at once, and
    // now and then the guest stops for good in one of two ways
    // (docs/architecture.md, "Two nested vCPUs at once"); such a boot is
    // started again, at most twice. Any other failure fails at once.
    for _ in 0..2 {
        let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        let Some(stall) = nested_stall(&out) else {
            break;
        };
        eprintln!("the nested guest stopped making progress ({stall}); booting it again");
        o = boot();
    }
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
    let console = std::fs::read_to_string(&serial).unwrap();
    for line in [
        "smp: Brought up 2 nodes, 2 CPUs",
        "SRAT: PXM 0 -> APIC 0x00 -> Node 0",
        "SRAT: PXM 1 -> APIC 0x01 -> Node 1",
        "ACPI: SRAT: Node 0 PXM 0 [mem 0x00000000-0x0fffffff]",
        "ACPI: SRAT: Node 1 PXM 1 [mem 0x10000000-0x1fffffff]",
        "Fallback order for Node 1: 1 0",
        "bootscope-guest: hello from userspace",
    ] {
        assert!(
            console.contains(line),
            "no {line:?} in the console:\n{console}"
        );
    }
    let doc: Value = read_json(&timeline);
    assert_eq!(doc["outcome"]["clean"], true, "{}", doc["outcome"]);
    let prof: Value = read_json(&profile);
    let exits = &prof["exits"];
    let by_vcpu = exits["by_vcpu"].as_array().unwrap();
    let per_vcpu: Vec<u64> = by_vcpu
        .iter()
        .map(|v| {
            v["by_reason"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum()
        })
        .collect();
    assert_eq!(per_vcpu.len(), 2, "{by_vcpu:?}");
    assert!(per_vcpu.iter().all(|&n| n > 1000), "{per_vcpu:?}");
    let total = exits["total"].as_u64().unwrap();
    assert_eq!(per_vcpu.iter().sum::<u64>(), total);
    assert_eq!(
        exits["kvm_stats_exits"].as_u64(),
        Some(total),
        "KVM's own count"
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// QEMU 7.2's own thread-context on the lab's node 1, with its memory bound
/// there, profiled from outside (`bootscope profile -- ...`): its
/// `touch_pages` threads ran on node 1's CPUs and their pages are local.
#[test]
fn qemu_thread_context_on_node_1_is_profiled_local() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    require_lab!();
    require_bpf!();
    let Some((qemu, firmware)) = lab::qemu_for_the_lab() else {
        return;
    };
    let dir = scratch("numa-qemu");
    let out = dir.join("qemu.json");
    let qemu = qemu.to_str().unwrap();
    // The monitor's `quit` ends QEMU once preallocation is done (-S: the
    // guest never runs).
    let script = format!(
        "echo quit | exec {qemu} -enable-kvm -S -M microvm -nodefaults -display none \
         -name debug-threads=on -m 256M \
         -object thread-context,id=tc1,node-affinity=1 \
         -object memory-backend-ram,id=m0,size=256M,host-nodes=1,policy=bind,prealloc=on,prealloc-threads=2,prealloc-context=tc1 \
         -machine memory-backend=m0 -monitor stdio"
    );
    let o = run(
        bootscope()
            .args([
                "lab",
                "--numa-nodes",
                "2",
                "--retries",
                "2",
                "--program",
                qemu,
            ])
            .arg("--input")
            .arg(firmware)
            .args(["--", "profile", "--output"])
            .arg(&out)
            .args(["--", "/bin/sh", "-c", &script]),
        None,
    );
    let console = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{console}");
    let nodes = nodes_from_banner(&console);
    let p: Value = read_json(&out);
    let touch: Vec<&Value> = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "touch_pages")
        .collect();
    assert_eq!(touch.len(), 2, "{}", p["threads"]);
    let mut pages = 0;
    for t in touch {
        assert_eq!(t["role"], "prealloc", "{t}");
        let ran = cpus_run_on(t);
        assert!(
            !ran.is_empty() && ran.iter().all(|c| nodes[&1].contains(c)),
            "{t}"
        );
        assert_eq!(t["nodes"], serde_json::json!([1]), "{t}");
        assert_eq!(t["pages_remote"].as_u64(), Some(0), "{t}");
        let by_node = t["pages_by_node"].as_array().unwrap();
        assert!(by_node.iter().all(|n| n["node"] == 1), "{t}");
        pages += t["pages_local"].as_u64().unwrap();
    }
    // 256 MiB of 4 KiB pages, give or take QEMU's own.
    assert!(pages >= 65536 * 97 / 100, "{pages} pages");
    let _ = std::fs::remove_dir_all(&dir);
}
