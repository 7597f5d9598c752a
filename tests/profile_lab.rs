//! `bootscope profile` where kvm:kvm_exit really fires: inside the lab
//! (nested KVM with AMD SVM under QEMU's emulator, Debian's kernel). The
//! fixture's port writes are exits with reason `io`, each with its exit
//! latency, and the total equals KVM's own count.

mod support;

use support::*;

use bootscope_profiler::profile::{DataSource, ExitReasonStat, MarkSource};
use bootscope_profiler::Profile;
use std::path::PathBuf;

/// Profiles the ports fixture under our VMM in the lab (`profile ARGS`),
/// with its scratch directory; None (after saying why) where the lab cannot
/// run.
fn profile_in_lab(tag: &str, args: &[&str]) -> Option<(Profile, PathBuf)> {
    lab::lab_kernel()?;
    let dir = scratch(tag);
    let out = dir.join("lab-profile.json");
    let exe = env!("CARGO_BIN_EXE_bootscope");
    let o = run(
        bootscope()
            .args(["lab", "--timeout", "900", "--program", exe, "--", "profile"])
            .args(args)
            .args([
                "--output",
                out.to_str().unwrap(),
                "--",
                exe,
                "run",
                "--kernel",
                &fixture("mini-bzimage-ports.bin"),
                "--serial",
                "null",
                "--no-summary",
            ]),
        None,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    Some((read_profile(&out), dir))
}

/// The fixture's port writes: exits with reason `io`, at least its 1002.
fn io_exits(p: &Profile) -> &ExitReasonStat {
    let io = p
        .exits
        .by_reason
        .iter()
        .find(|r| r.reason == "io")
        .expect("io exits");
    assert!(io.count >= 1002, "{io:?}");
    io
}

/// The exits counted equal KVM's own count of the VM's exits.
fn assert_counts_equal_kvms(p: &Profile) {
    assert_eq!(
        p.exits.kvm_stats_exits,
        Some(p.exits.total),
        "{:?}",
        p.sources
    );
}

fn source<'a>(p: &'a Profile, name: &str) -> &'a DataSource {
    p.sources
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no source {name}"))
}

#[test]
fn exit_counts_without_latency_agree_with_kvm_in_the_lab() {
    // One program per exit instead of two: each exit is counted by its
    // vCPU's next exit, the last ones when the profile is read.
    let Some((p, dir)) = profile_in_lab("lab-counts", &["--collect", "exit-counts"]) else {
        return;
    };
    assert_eq!(p.exits.source, "tracepoint:kvm:kvm_exit");
    io_exits(&p);
    for r in &p.exits.by_reason {
        assert!(
            r.latency_total_ns.is_none() && r.latency_hist.is_empty(),
            "{r:?}"
        );
    }
    assert_counts_equal_kvms(&p);
    let entry = source(&p, "tracepoint:kvm:kvm_entry");
    assert_eq!(entry.status, "disabled", "{entry:?}");
    assert!(entry.detail.contains("exit-counts"), "{entry:?}");
    let exit = source(&p, "tracepoint:kvm:kvm_exit");
    assert_eq!(exit.status, "attached", "{exit:?}");
    // The other collectors were not asked for.
    assert!(
        p.threads.iter().all(|t| t.cpus.is_empty()),
        "{:?}",
        p.threads
    );
    assert_eq!(p.page_faults.guest_total, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kvm_exit_reasons_latency_and_cross_check_in_the_lab() {
    let Some((p, dir)) = profile_in_lab("lab", &[]) else {
        return;
    };

    assert_eq!(p.host.kvm, "svm");
    assert_eq!(p.exits.source, "tracepoint:kvm:kvm_exit");
    assert_eq!(p.exits.isa, "svm");
    // The PVM fallbacks are not attached where their primaries fire.
    for name in [
        "tracepoint:kvm:kvm_userspace_exit",
        "tracepoint:kvmmmu:kvm_mmu_spte_requested",
    ] {
        let s = source(&p, name);
        assert_eq!(s.status, "disabled", "{s:?}");
    }
    let io = io_exits(&p);
    assert!(io.latency_total_ns.unwrap_or(0) > 0, "{io:?}");
    // Every io exit has a latency, but the last (the reset write): the
    // vCPU never entered the guest again.
    let timed = io.latency_hist.iter().map(|b| b.count).sum::<u64>();
    assert!(
        timed + 1 >= io.count && timed <= io.count,
        "{timed} timed of {io:?}"
    );
    // KVM's own statistic counts the same exits: read from debugfs, the
    // VM held by a copy of its descriptor so that its last exits are in
    // (the VMM is long gone when the final count is taken), not polled
    // every tick.
    assert_counts_equal_kvms(&p);
    let stats = p
        .sources
        .iter()
        .find(|s| s.name.starts_with("kvm_stats:"))
        .unwrap();
    assert_eq!(stats.name, "kvm_stats:debugfs", "{stats:?}");
    assert!(stats.detail.contains("each VM held"), "{stats:?}");

    let count = |port: u32, value: u32| {
        p.exits
            .marker_writes
            .iter()
            .find(|m| m.port == port && m.value == value)
            .map(|m| m.count)
    };
    assert_eq!(count(0x80, 0x90), Some(1000));
    assert_eq!(count(0xf4, 7), Some(1));

    let vcpu0 = p.threads.iter().find(|t| t.name == "vcpu0").expect("vcpu0");
    let by_vcpu = p
        .exits
        .by_vcpu
        .iter()
        .find(|v| v.vcpu == 0)
        .expect("vCPU 0");
    assert_eq!(by_vcpu.tid, vcpu0.tid);
    assert!(p.page_faults.guest_source == "tracepoint:kvm:kvm_page_fault");
    // Every collector loads on this kernel too (Linux 6.1's verifier).
    let failed: Vec<_> = p.sources.iter().filter(|s| s.status == "failed").collect();
    assert!(failed.is_empty(), "{failed:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bootscope run` profiling itself where kvm:kvm_exit fires: its guest
/// programs are attached beside the VMM's set-up (on the lab's one CPU,
/// mostly in the wait before the first KVM_RUN), and not one exit is
/// missed: the profile's count equals KVM's own (the VMM's statistics
/// file descriptors), and preallocation's workers are in the profile.
#[test]
fn self_profile_sees_every_exit_from_the_first_kvm_run_in_the_lab() {
    require_lab!();
    let dir = scratch("lab-self");
    let (out, timeline) = (dir.join("self.json"), dir.join("self-timeline.json"));
    let exe = env!("CARGO_BIN_EXE_bootscope");
    let o = run(
        bootscope()
            .args(["lab", "--timeout", "900", "--program", exe, "--", "run"])
            .args(["--kernel", &fixture("mini-bzimage-ports.bin")])
            .args(["--serial", "null", "--no-summary", "--memory", "64M"])
            .args(["--prealloc", "--prealloc-threads", "2", "--output"])
            .args([out.as_os_str(), "--timeline".as_ref(), timeline.as_os_str()]),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = read_profile(&out);
    assert_eq!(p.exits.source, "tracepoint:kvm:kvm_exit");
    io_exits(&p);
    assert_counts_equal_kvms(&p);
    let exit = source(&p, "tracepoint:kvm:kvm_exit");
    assert_eq!(exit.status, "attached", "{exit:?}");
    let stages: Vec<&str> = p.startup.iter().map(|s| s.stage.as_str()).collect();
    assert!(stages.contains(&"guest verify"), "{stages:?}");
    let t: serde_json::Value = read_json(&timeline);
    let phases: Vec<&str> = t["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases[..3],
        ["profiler attach", "vmm setup", "profiler guest attach"]
    );
    let workers = p.threads.iter().filter(|t| t.role == "prealloc").count();
    assert_eq!(workers, 2, "{:?}", p.threads);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bootscope profile -- qemu-system-x86_64 -M microvm ...` booting
/// Debian's kernel in the lab, without `io_delay=none`: the port-0x80
/// writes of 0x00 (the set-up code's `io_delay`) carry their guest RIP and
/// open no firmware phase; the kernel phase starts at the kernel's first
/// port I/O (from kernel text), and the userspace phase at QEMU's console
/// line of init (`-serial stdio`, on bootscope's pipe), in the order the
/// guest's own console has them.
/// The port 0x80 writes of 0x00 (console marks carry a value too: their
/// line's printk stamp).
fn io_delay_writes(p: &Profile) -> impl Iterator<Item = &bootscope_profiler::profile::Mark> {
    p.marks
        .iter()
        .filter(|m| m.source == MarkSource::DebugPort && m.value == Some(0))
}

#[test]
fn qemu_phases_follow_the_guests_console_in_the_lab() {
    let pre = require_lab_guest!("lab-qemu-phases");
    let Some((qemu, firmware)) = lab::qemu_for_the_lab() else {
        return;
    };
    let out = pre.dir.join("qemu.json");
    let exe = env!("CARGO_BIN_EXE_bootscope");
    let o = run(
        bootscope()
            .current_dir(&pre.dir)
            .args(["lab", "--timeout", "900", "--program", exe, "--program"])
            .arg(&qemu)
            .arg("--input")
            .arg(firmware)
            .args(["--", "profile", "--output", out.to_str().unwrap(), "--"])
            .arg(&qemu)
            .args(["-enable-kvm", "-M", "microvm", "-cpu", "host", "-m", "256M"])
            .args(["-smp", "1", "-nodefaults", "-no-user-config", "-display"])
            .args(["none", "-no-reboot", "-serial", "stdio", "-kernel"])
            .arg(&pre.kernel)
            .arg("-initrd")
            .arg(&pre.initrd)
            .args(["-append", "console=ttyS0 panic=-1"]),
        None,
    );
    let console = String::from_utf8_lossy(&o.stdout);
    println!("--- lab console ---\n{console}---");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The guest's console passed through bootscope to its standard output.
    assert!(
        console
            .lines()
            .any(|l| l.trim_end() == bootscope_lab::guest::HELLO_LINE),
        "{console}"
    );
    let p = read_profile(&out);
    println!("marks: {:#?}\nphases: {:#?}", p.marks, p.phases);
    let mark = |name: &str| {
        p.marks
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no mark {name}: {:?}", p.marks))
    };
    let banner = mark("serial: kernel banner").t_ns;
    let init = mark("serial: run init").t_ns;
    let half = bootscope_profiler::phases::KERNEL_HALF;
    // The kernel's first port I/O, from kernel text, before its console
    // was up.
    let first = p
        .marks
        .iter()
        .find(|m| {
            m.name
                .starts_with(bootscope_profiler::phases::FIRST_KERNEL_PIO)
        })
        .unwrap_or_else(|| panic!("no first kernel port I/O: {:?}", p.marks));
    assert!(first.guest_rip.is_some_and(|r| r >= half), "{first:?}");
    assert!(first.t_ns < banner, "{first:?} banner at {banner}");
    // Port 0x80 writes of 0x00 (io_delay) are not firmware markers: every
    // one carries its guest RIP and is named by who made it.
    for m in io_delay_writes(&p) {
        let rip = m.guest_rip.unwrap_or_else(|| panic!("no RIP: {m:?}"));
        let by = if rip >= half { "kernel" } else { "boot" };
        assert_eq!(m.name, format!("port 0x80: 0x00 by {by} code"), "{m:?}");
    }
    assert!(
        p.phases.iter().all(|s| s.name != "firmware"),
        "{:?}",
        p.phases
    );
    // init's own marker, written through /dev/port (kernel code).
    let marker = mark("port 0x80: userspace 0x60");
    assert!(marker.guest_rip.is_some_and(|r| r >= half), "{marker:?}");
    let phase = |name: &str| {
        p.phases
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no phase {name}: {:?}", p.phases))
    };
    let (kernel, user) = (phase("kernel"), phase("userspace"));
    assert_eq!(kernel.start_ns, first.t_ns);
    assert_eq!(kernel.end_ns, user.start_ns);
    // The guest's own console: userspace from its init line, and the
    // milestones in the order its console has them.
    assert_eq!(user.start_ns, init);
    assert!(init < marker.t_ns);
    let at = |needle: &str| console.find(needle).unwrap_or_else(|| panic!("{needle:?}"));
    assert!(
        at("Linux version") < at("Freeing unused kernel")
            && at("Freeing unused kernel") < at("as init process")
    );
    assert!(banner < mark("serial: free initmem").t_ns && mark("serial: free initmem").t_ns < init);
    // What ran before the kernel ended where it began.
    for s in &p.phases {
        if s.name == "bootloader" {
            assert_eq!(s.end_ns, kernel.start_ns, "{s:?}");
        }
    }
    std::fs::remove_dir_all(&pre.dir).unwrap();
}
