//! `bootscope profile` on bootscope's own VMM booting the committed
//! `mini-bzimage-ports.bin` fixture, which writes exactly 1000 times 0x90 to
//! port 0x80 (plus 0x40 and 0x60 to port 0x80, 6 and 7 to port 0xf4):
//! exactly those writes must be counted, on every KVM flavour (PVM
//! included: kvm:kvm_pio fires there).

mod support;

use support::*;

fn marker(p: &bootscope_profiler::Profile, port: u32, value: u32) -> u64 {
    p.exits
        .marker_writes
        .iter()
        .find(|m| m.port == port && m.value == value)
        .map(|m| m.count)
        .unwrap_or(0)
}

#[test]
fn counts_exactly_the_guest_port_writes() {
    require_bpf!();
    require_kvm!();
    let dir = scratch("ports");
    let out = dir.join("profile.json");
    let o = profile_command(
        &out,
        &[
            env!("CARGO_BIN_EXE_bootscope"),
            "run",
            "--kernel",
            &fixture("mini-bzimage-ports.bin"),
            "--serial",
            "null",
            "--no-summary",
        ],
        None,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "bootscope profile failed: {err}");
    let p = read_profile(&out);

    check_port_counts(&p);

    check_exits(&p);

    // Marks and the phases they open, in the VMM timeline's names.
    let names: Vec<&str> = p.marks.iter().map(|m| m.name.as_str()).collect();
    for n in [
        "port 0x80: kernel 0x40",
        "port 0xf4: linux_start_kernel (6)",
        "port 0x80: userspace 0x60",
        "port 0xf4: linux_start_user (7)",
        "port 0x80: custom 0x90",
    ] {
        assert!(names.contains(&n), "mark {n} missing from {names:?}");
    }
    let phases: Vec<&str> = p.phases.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(phases, ["kernel", "userspace", "custom 0x90"]);
    assert!(p.exits.by_phase.iter().any(|x| x.phase == "custom 0x90"));

    // The vCPU thread, where it ran, and the process.
    let vcpu = p
        .threads
        .iter()
        .find(|t| t.name == "vcpu0")
        .expect("vcpu0 thread");
    assert_eq!(vcpu.role, "vcpu");
    assert!(!vcpu.cpus.is_empty() && !vcpu.nodes.is_empty());
    assert_eq!(p.target.kind, "command");
    assert_eq!(p.target.exit_code, Some(0));
    assert!(p.target.ended_ns.is_some());
    assert_eq!(p.lost_events, 0);

    // What the reading cost: at least the final sample, whose CPU time is
    // part of all of the reading's.
    let c = p.collector.as_ref().expect("the reading's cost");
    assert_eq!(c.samples, p.samples.len() as u64);
    assert!(c.samples >= 1 && c.sample_cpu_ns > 0, "{c:?}");
    assert!(c.cpu_ns >= c.sample_cpu_ns, "{c:?}");

    // The summary names the numbers.
    assert!(err.contains("0x80=0x90 x1000"), "{err}");
    assert!(err.contains("lost events: 0"), "{err}");
    assert!(err.contains("profiler reading: "), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn follows_a_running_pid_until_it_ends() {
    require_bpf!();
    require_kvm!();
    let dir = scratch("pid");
    let out = dir.join("profile.json");
    // A guest that halts forever, stopped by the VMM after 3 s.
    let mut vm = bootscope()
        .args([
            "run",
            "--kernel",
            &fixture("mini-bzimage-hlt.bin"),
            "--serial",
            "null",
            "--no-summary",
            "--timeout",
            "3",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let o = run(
        bootscope().args([
            "profile",
            "--output",
            out.to_str().unwrap(),
            "--duration",
            "30",
            "--pid",
            &vm.id().to_string(),
        ]),
        None,
    );
    let status = vm.wait().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = read_profile(&out);
    assert_eq!(p.target.kind, "pid");
    assert_eq!(p.target.pid, vm.id());
    // Not our child, so its exit status comes from the kernel: task_struct's
    // exit_code, read through CO-RE against the kernel's BTF.
    let btf = p.sources.iter().find(|s| s.name == "btf:vmlinux").unwrap();
    let main = p
        .threads
        .iter()
        .find(|t| t.tid == vm.id())
        .expect("the main thread");
    if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        assert_eq!(btf.status, "attached", "{btf:?}");
        assert_eq!(main.exit_code, status.code(), "{main:?}");
    } else {
        eprintln!("this kernel has no BTF: exit codes are not read");
        assert_eq!(btf.status, "missing", "{btf:?}");
        assert_eq!(main.exit_code, None, "{main:?}");
    }
    // It ended on its own, well before --duration: a partial profile.
    assert!(p.target.ended_ns.is_some());
    assert!(p.duration_ns < 20_000_000_000);
    assert!(p.threads.iter().any(|t| t.name == "vcpu0"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_pid_is_named() {
    require_bpf!();
    let o = run(
        bootscope().args(["profile", "--output", "/tmp/x.json", "--pid", "999999999"]),
        None,
    );
    // Bad input: exit status 2, the flag and the pid named.
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--pid 999999999: no such process"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn without_privileges_says_what_to_do() {
    // As root, drop to nobody with setpriv; otherwise this test already
    // runs unprivileged.
    let root = is_root();
    let mut cmd = if root {
        if !std::path::Path::new("/usr/bin/setpriv").exists() {
            skip_test!("setpriv (util-linux) is needed to drop root");
        }
        let mut c = std::process::Command::new("/usr/bin/setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_bootscope"));
        c
    } else {
        bootscope()
    };
    let o = run(
        cmd.args([
            "profile",
            "--output",
            "/tmp/never-written.json",
            "--pid",
            "1",
        ]),
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("needs root, or the CAP_BPF and CAP_PERFMON"),
        "{err}"
    );
}

/// A load test of the streaming path: the flood fixture changes the marker
/// value on every one of its 100,000 port writes, so every write is a ring
/// buffer record. Every one must arrive (none lost), and the in-kernel
/// counts must agree with the guest program.
#[test]
fn a_marker_flood_is_streamed_without_loss() {
    require_bpf!();
    require_kvm!();
    let dir = scratch("flood");
    let out = dir.join("profile.json");
    let o = run(
        bootscope().args([
            "run",
            "--kernel",
            &fixture("mini-bzimage-flood.bin"),
            "--serial",
            "null",
            "--no-summary",
            // On PVM every port write counts as an emulated instruction.
            "--allow-emulation",
            "--profile",
            "--output",
            out.to_str().unwrap(),
        ]),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = read_profile(&out);
    assert_eq!(
        marker(&p, 0x80, 0x90),
        50_000,
        "{:?}",
        p.exits.marker_writes
    );
    assert_eq!(marker(&p, 0x80, 0x91), 50_000);
    assert_eq!(
        p.lost_events, 0,
        "records lost under a 100,000-record flood"
    );
    let ring = p
        .sources
        .iter()
        .find(|s| s.name == "ringbuf:events")
        .expect("ring buffer source");
    // Every value change is a record, plus the boot's own marks and the
    // VMM's thread records.
    assert!(ring.events >= 100_000, "{ring:?}");
    // The profile keeps the first 10,000 port marks and says how many it
    // left out; the VMM's own marks are all kept.
    let port_marks = p.marks.iter().filter(|m| m.source.is_port()).count();
    assert_eq!(port_marks, 10_000);
    assert!(
        ring.detail
            .contains("port marks beyond the first 10000 not kept"),
        "{ring:?}"
    );
    assert!(p.marks.iter().any(|m| m.name == "vmm: guest shutdown"));
}

/// A VMM started by the profiled command (here a shell) is followed as a
/// descendant: its port writes are counted and its exits filed under the
/// phases its own marks open (the phase of a descendant lives in the
/// `followed` map, the launched command's in the target slot).
#[test]
fn follows_a_vmm_started_by_the_command() {
    require_bpf!();
    require_kvm!();
    let dir = scratch("descendant");
    let out = dir.join("profile.json");
    let o = profile_command(
        &out,
        &[
            "sh",
            "-c",
            // `; true`: the shell forks the VMM instead of becoming it.
            "\"$0\" run --kernel \"$1\" --serial null --no-summary --no-profile; true",
            env!("CARGO_BIN_EXE_bootscope"),
            &fixture("mini-bzimage-ports.bin"),
        ],
        None,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "bootscope profile failed: {err}");
    let p = read_profile(&out);
    assert_eq!(p.target.name, "sh");
    assert_eq!(marker(&p, 0x80, 0x90), 1000, "{:?}", p.exits.marker_writes);
    let vmm_tgid = p
        .marks
        .iter()
        .find(|m| m.name == "port 0x80: custom 0x90")
        .and_then(|m| m.tgid)
        .expect("the 0x90 mark");
    assert_ne!(vmm_tgid, p.target.pid, "the VMM is a child of the shell");
    // The descendant's exits are filed under its own phases, switched by
    // the programs at the port write itself (however late the collector
    // reads the mark, and however loaded the host): each phase has exactly
    // the exits the fixture makes in it: the first 0x90 write is the
    // phase's first exit (on PVM it reaches the VMM after kvm_pio, where
    // the phase switched), then 999 more and one exit after them.
    let exits_in = |phase: &str| -> u64 {
        p.exits
            .by_phase
            .iter()
            .filter(|x| x.phase == phase)
            .flat_map(|x| x.by_reason.values())
            .sum()
    };
    let counts: Vec<(&str, u64)> = ["before first mark", "kernel", "userspace", "custom 0x90"]
        .into_iter()
        .map(|phase| (phase, exits_in(phase)))
        .collect();
    assert_eq!(
        counts,
        [
            ("before first mark", 51),
            ("kernel", 78),
            ("userspace", 29),
            ("custom 0x90", 1001)
        ],
        "{:?}",
        p.exits.by_phase
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --collect phases`: the marks and marker writes still counted
/// exactly, nothing of the collectors left out (their programs not even
/// attached, and said so).
#[test]
fn collects_only_what_was_asked_for() {
    require_bpf!();
    require_kvm!();
    let dir = scratch("collect");
    let out = dir.join("profile.json");
    let out_s = out.to_str().unwrap();
    let o = bootscope_output(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-ports.bin"),
        "--serial",
        "null",
        "--no-summary",
        "--profile",
        "--collect",
        "phases",
        "--output",
        out_s,
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let p = read_profile(&out);
    assert_eq!(marker(&p, 0x80, 0x90), 1000, "{:?}", p.exits.marker_writes);
    assert_eq!(marker(&p, 0xf4, 7), 1);
    let phases: Vec<&str> = p.phases.iter().map(|x| x.name.as_str()).collect();
    assert!(phases.contains(&"custom 0x90"), "{phases:?}");
    // The exits collector's programs: not attached, and why.
    for name in [
        "tracepoint:kvm:kvm_pio",
        "tracepoint:kvm:kvm_userspace_exit",
    ] {
        let s = bootscope_testkit::find(&p.sources, name, |s| s.name == name);
        assert_eq!(s.status, "disabled", "{s:?}");
        assert!(s.detail.contains("collector not enabled"), "{s:?}");
    }
    assert_eq!(p.exits.total, 0, "{:?}", p.exits);
    assert!(p.exits.pio.is_empty());
    assert_eq!(p.page_faults.guest_total + p.page_faults.host_user, 0);
    // No thread placement either: the threads collector was left out.
    assert!(
        p.sources
            .iter()
            .filter(|s| s.name.starts_with("tracepoint:sched:")
                || s.name.starts_with("tracepoint:task:"))
            .all(|s| s.status == "disabled"),
        "{:?}",
        p.sources
    );
    // A collector name that does not exist: a usage error naming it.
    expect_usage_error(
        &["run", "--kernel", "x", "--collect", "exits,pages"],
        &[
            "\"pages\"",
            "exits, exit-counts, faults, threads, numa, phases",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The exact counts of the fixture's port writes, per port and value.
fn check_port_counts(p: &bootscope_profiler::Profile) {
    assert_eq!(marker(p, 0x80, 0x90), 1000, "{:?}", p.exits.marker_writes);
    assert_eq!(marker(p, 0x80, 0x40), 1);
    assert_eq!(marker(p, 0x80, 0x60), 1);
    assert_eq!(marker(p, 0xf4, 6), 1);
    assert_eq!(marker(p, 0xf4, 7), 1);
    let port80 = p
        .exits
        .pio
        .iter()
        .find(|s| s.port == 0x80 && s.direction == "write")
        .expect("port 0x80 writes");
    assert_eq!(port80.count, 1002);
}

/// Exits: kvm_exit where it fires, the userspace-exit fallback on PVM;
/// either way every port write is an exit to bootscope's VMM.
fn check_exits(p: &bootscope_profiler::Profile) {
    assert!(p.exits.total >= 1002, "exits {:?}", p.exits);
    if p.host.kvm == "pvm" {
        assert_eq!(p.exits.source, "tracepoint:kvm:kvm_userspace_exit");
        assert_eq!(p.exits.isa, "userspace");
        let io = p
            .exits
            .by_reason
            .iter()
            .find(|r| r.reason == "KVM_EXIT_IO")
            .expect("KVM_EXIT_IO");
        assert!(io.count >= 1002);
        let fb = p
            .sources
            .iter()
            .find(|s| s.name == "tracepoint:kvm:kvm_userspace_exit")
            .unwrap();
        assert_eq!(fb.status, "fallback");
        // Raised only by the VMX/SVM code: not attached on PVM.
        let exit = p
            .sources
            .iter()
            .find(|s| s.name == "tracepoint:kvm:kvm_exit")
            .unwrap();
        assert_eq!(exit.status, "disabled", "{exit:?}");
        assert!(exit.detail.contains("PVM"), "{exit:?}");
    } else {
        assert_eq!(p.exits.source, "tracepoint:kvm:kvm_exit");
    }
    if let Some(k) = p.exits.kvm_stats_exits {
        assert!(k >= 1002, "KVM's own count {k}");
    }
}
