//! A real boot to userspace under bootscope's VMM, inside the lab (nested real
//! KVM under QEMU's emulator): the guest's own output, the kernel and
//! userspace phases, and KVM's own exit statistic.

mod support;

use support::*;

#[test]
fn default_guest_boots_to_userspace_in_the_lab() {
    let p = require_lab_guest!("boot");
    let timeline = p.dir.join("out/timeline.json");
    let serial = p.dir.join("out/serial.log");
    std::fs::create_dir_all(timeline.parent().unwrap()).unwrap();
    let out = bootscope()
        .args(["lab", "--timeout", "900", "--", "run"])
        .arg("--kernel")
        .arg(&p.kernel)
        .arg("--initrd")
        .arg(&p.initrd)
        .args(["--vcpus", "2", "--memory", "256M", "--timeout", "600"])
        .args([
            "--serial-pattern",
            "two cpus=smp: Brought up 1 node, 2 CPUs",
        ])
        .arg("--timeline")
        .arg(&timeline)
        .arg("--serial")
        .arg(&serial)
        .output()
        .expect("bootscope lab runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );

    // The guest's own words, from the console file that came back.
    let console = std::fs::read_to_string(&serial).expect("serial log copied back from the lab");
    assert!(
        console.contains("bootscope-guest: hello from userspace"),
        "{console}"
    );
    assert!(console.contains("Linux version"), "{console}");

    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&timeline).expect("timeline copied back")).unwrap();
    assert_eq!(doc["schema"], "bootscope.timeline");
    assert_eq!(doc["host_kvm"], "svm", "the lab is real nested SVM");
    assert_eq!(doc["outcome"]["clean"], true, "{}", doc["outcome"]);
    // The guest found our ACPI tables: no i8042 probe, and `poweroff` wrote
    // S5 to the sleep control register instead of halting.
    assert_eq!(
        doc["outcome"]["reason"], "acpi_power_off",
        "{}",
        doc["outcome"]
    );
    assert!(
        console.contains("ACPI: PM: Preparing to enter system sleep state S5"),
        "{console}"
    );
    assert!(
        !console.contains("rtc_cmos rtc_cmos: broken or not accessible"),
        "the CMOS RTC must answer: {console}"
    );
    assert_eq!(doc["guest"]["kernel_format"], "bzimage");
    check_kernel_boot(&doc["guest"]["kernel_boot"]);
    check_marks_and_phases(&doc);
    // KVM's own statistics saw the boot: thousands of exits, port I/O among
    // them.
    let exits = doc["kvm_stats"]["exits"].as_u64().expect("kvm_stats.exits");
    assert!(exits > 1000, "only {exits} exits for a real boot");
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// `lab -- run` without `--kernel` boots the default guest, as `run` does on
/// a host whose KVM can.
#[test]
fn lab_run_without_kernel_boots_the_default_guest() {
    let p = require_lab_guest!("default");
    let serial = p.dir.join("serial.log");
    let out = bootscope()
        .args(["lab", "--timeout", "900", "--", "run", "--timeout", "600"])
        .arg("--serial")
        .arg(&serial)
        .output()
        .expect("bootscope lab runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert!(stderr.contains("default guest: kernel"), "{stderr}");
    assert!(!stderr.contains("no default guest kernel"), "{stderr}");
    let console = std::fs::read_to_string(&serial).expect("serial log copied back from the lab");
    assert!(
        console.contains("bootscope-guest: hello from userspace"),
        "{console}"
    );
    let _ = std::fs::remove_dir_all(&p.dir);
}

#[test]
fn lab_reports_a_failing_guest() {
    let kernel = require_lab!();
    // A command line the kernel cannot live with: no init to run.
    let out = bootscope()
        .args(["lab", "--timeout", "900", "--", "run"])
        .arg("--kernel")
        .arg(&kernel)
        .args([
            "--memory",
            "256M",
            "--timeout",
            "600",
            "--cmdline",
            "console=ttyS0 reboot=k panic=-1 pci=off rdinit=/nonexistent init=/nonexistent",
        ])
        .output()
        .expect("bootscope lab runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("Kernel panic") || stderr.contains("panicked"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

/// The children of `pid` (from /proc/PID/task/*/children).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for tid in bootscope_model::proc::threads_of(pid) {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
            out.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its entry is left for the parent to reap.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            !matches!(state, Some(Some('Z')) | Some(Some('X')))
        })
        .unwrap_or(false)
}

#[test]
fn killing_the_lab_kills_its_emulator() {
    require_lab!();
    let busybox = require_busybox!();
    let mut child = bootscope()
        .args(["lab", "--timeout", "900", "--exe"])
        .arg(&busybox)
        .args(["--", "sleep", "600"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("bootscope lab starts");
    // Wait for QEMU to appear under it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let qemu = loop {
        let found = children(child.id()).into_iter().find(|&c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .is_ok_and(|n| n.trim_end().starts_with("qemu-system"))
        });
        if let Some(q) = found {
            break q;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no QEMU under bootscope lab after 120 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "bootscope lab ended early"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // SAFETY: plain kill(2) of our own child, which has not been reaped.
    let killed = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(killed, 0);
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive(qemu) {
        assert!(
            std::time::Instant::now() < deadline,
            "QEMU (pid {qemu}) still running 10 s after bootscope lab was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The kernel was decompressed by the VMM and entered directly, and the
/// timeline says so.
fn check_kernel_boot(kb: &serde_json::Value) {
    assert_eq!(kb["decompressed_by"], "host", "{kb}");
    assert_eq!(kb["compression"], "xz", "{kb}");
    assert_eq!(kb["entry"], "linux64", "{kb}");
    assert_eq!(kb["kaslr"], false, "{kb}");
    assert!(
        kb["decompressed_bytes"].as_u64().unwrap_or(0) > 1 << 20,
        "{kb}"
    );
}

/// The VMM's, the console's and the guest's marks, and the kernel and
/// userspace phases between them.
fn check_marks_and_phases(doc: &serde_json::Value) {
    let marks = doc["marks"].as_array().unwrap();
    let has = |name: &str| marks.iter().any(|m| m["name"] == name);
    assert!(
        has("vmm: kernel decompressed") || has("vmm: kernel read from cache"),
        "the decompression thread's mark: {marks:?}"
    );
    for m in [
        "vmm: first KVM_RUN",
        "serial: kernel banner",
        "serial: run init",
        "port 0x80: userspace 0x60",
        "serial: two cpus",
        "vmm: guest shutdown",
    ] {
        assert!(has(m), "mark {m:?} missing: {marks:?}");
    }
    let phase = |name: &str| {
        doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("phase {name} missing: {}", doc["phases"]))
    };
    let kernel = phase("kernel");
    let user = phase("userspace");
    assert!(kernel["duration_ns"].as_u64().unwrap() > 0);
    assert!(user["start_ns"].as_u64().unwrap() >= kernel["end_ns"].as_u64().unwrap());
    // The userspace phase opens at the guest's own marker (or the console
    // line just before it).
    let to = kernel["to"].as_str().unwrap();
    assert!(
        to == "serial: run init" || to == "port 0x80: userspace 0x60",
        "{to}"
    );
}
