//! `bootscope profile` reading the traced VMM's guest memory, with
//! bootscope's own VMM (`bootscope run`) as the traced VMM: its memory
//! slots caught from its KVM_SET_USER_MEMORY_REGION calls, its guest's
//! boot parameters read through them at the guest's end (the VMM held
//! stopped for the read, then continued), compared with what the VMM
//! itself says in its timeline (an independent source); `--pid` of a
//! running VMM whose map cannot be learned names why. (That a held VMM is
//! continued when bootscope is killed or interrupted is
//! tests/profile_hold_kill.rs's.)
//!
//! The fixture guests are no Linux kernels (no VMCOREINFO): the kernel
//! log, initcalls and modules are named missing with that reason here;
//! reading them from a real kernel is the lab's (tests/lab_*.rs).

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

fn vmm_run(kernel: &str, timeline: &Path, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        env!("CARGO_BIN_EXE_bootscope").into(),
        "run".into(),
        "--kernel".into(),
        fixture(kernel),
        "--serial".into(),
        "null".into(),
        "--no-profile".into(),
        "--no-summary".into(),
        "--memory".into(),
        "64M".into(),
        "--timeline".into(),
        timeline.display().to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

#[test]
fn a_traced_vmms_slots_and_boot_parameters_are_read_at_its_guests_end() {
    require_kvm!();
    require_bpf!();
    let d = scratch("guest-mem");
    let (out, timeline) = (d.join("p.json"), d.join("t.json"));
    let cmdline = "console=ttyS0 bootscope.test=guest-memory";
    let vmm = vmm_run(
        "mini-bzimage-cmdline.bin",
        &timeline,
        &["--cmdline", cmdline],
    );
    let args: Vec<&str> = vmm.iter().map(String::as_str).collect();
    let o = profile_command(&out, &args, None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = read_json(&out);
    let t = read_json(&timeline);
    let g = &p["guest_read"];
    assert_eq!(g["memory_map"]["source"], "ioctl", "{g:#}");
    // Every RAM byte the VMM says it gave the guest is in a RAM slot.
    let slots = g["memory_map"]["slots"].as_array().unwrap();
    let ram: u64 = slots
        .iter()
        .filter(|s| s["kind"] == "ram")
        .map(|s| s["size"].as_u64().unwrap())
        .sum();
    assert_eq!(Some(ram), t["guest"]["memory_bytes"].as_u64(), "{g:#}");
    for r in t["guest"]["regions"].as_array().unwrap() {
        if r["name"] != "RAM" {
            continue;
        }
        let (a, b) = (r["start"].as_u64().unwrap(), r["end"].as_u64().unwrap());
        assert!(
            slots.iter().any(|s| {
                let (g0, n) = (s["gpa"].as_u64().unwrap(), s["size"].as_u64().unwrap());
                g0 <= a && b <= g0 + n
            }),
            "RAM {a:#x}-{b:#x} in a slot: {slots:?}"
        );
    }
    // Read with the VMM held at the guest's reset, then continued: the
    // VMM ended by itself with success.
    let passes = g["passes"].as_array().unwrap();
    let shutdown = passes
        .iter()
        .find(|x| x["at"] == "shutdown")
        .unwrap_or_else(|| panic!("a shutdown pass: {g:#}"));
    assert!(shutdown["held_ns"].as_u64().unwrap() > 0, "{shutdown}");
    assert!(
        shutdown["held_at"].as_str().unwrap().contains("i8042"),
        "{shutdown}"
    );
    assert!(shutdown["bytes_read"].as_u64().unwrap() > 0, "{shutdown}");
    assert_eq!(p["target"]["exit_code"], 0);
    // The command line and e820 map, read from guest memory, are what the
    // VMM says it gave.
    let b = &g["boot_params"];
    assert_eq!(b["cmdline"], t["guest"]["cmdline"], "{b:#}");
    assert!(b["cmdline"].as_str().unwrap().contains("guest-memory"));
    let e820 = b["e820"].as_array().unwrap();
    let e820_ram: u64 = e820
        .iter()
        .filter(|e| e["kind"] == 1)
        .map(|e| e["size"].as_u64().unwrap())
        .sum();
    assert!(e820_ram > 0 && e820_ram <= ram, "{e820:?}");
    // No Linux kernel: the log is missing, and says why.
    let missing = g["missing"].as_array().unwrap();
    let why = missing
        .iter()
        .find(|m| m["part"] == "kernel_log")
        .unwrap_or_else(|| panic!("kernel_log named missing: {missing:?}"));
    assert!(why["why"].as_str().unwrap().contains("VMCOREINFO"), "{why}");
    let s = stderr(&o);
    assert!(s.contains("guest memory of pid"), "{s}");
    assert!(s.contains("read at shutdown"), "{s}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn without_guest_memory_nothing_is_read_or_held() {
    require_kvm!();
    require_bpf!();
    let d = scratch("guest-mem-off");
    let (out, timeline) = (d.join("p.json"), d.join("t.json"));
    let vmm = vmm_run("mini-bzimage-reset.bin", &timeline, &[]);
    let mut cmd = bootscope();
    cmd.args(["profile", "--no-guest-memory", "--output"])
        .arg(&out)
        .arg("--")
        .args(&vmm);
    let o = run(&mut cmd, None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(read_json(&out).get("guest_read").is_none());
    let _ = std::fs::remove_dir_all(&d);
}

/// The state letter of `pid`, None once it is gone.
fn state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn pid_of_a_vmm_whose_map_cannot_be_learned_says_why_and_succeeds() {
    require_kvm!();
    require_bpf!();
    let d = scratch("guest-mem-pid");
    let (out, timeline) = (d.join("p.json"), d.join("t.json"));
    let vmm = vmm_run("mini-bzimage-hlt.bin", &timeline, &["--timeout", "30"]);
    let mut child = Command::new(&vmm[0])
        .args(&vmm[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Its guest runs (halted) once it has mapped its RAM.
    wait_for(20, "the VMM's guest memory", || {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .ok()
            .filter(|m| m.lines().filter(|l| l.contains("rw-")).count() > 4)
    });
    std::thread::sleep(Duration::from_millis(300));
    let o = output_within(
        bootscope().args([
            "profile",
            "--pid",
            &pid.to_string(),
            "--duration",
            "1",
            "--output",
            out.to_str().unwrap(),
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let g = &read_json(&out)["guest_read"];
    // Started after its KVM_SET_USER_MEMORY_REGION calls, and no
    // VMCOREINFO to infer from: the map is named missing, with why.
    assert_eq!(g["memory_map"]["source"], "none", "{g:#}");
    let detail = g["memory_map"]["detail"].as_str().unwrap();
    assert!(detail.contains("VMCOREINFO"), "{detail}");
    let missing = g["missing"].as_array().unwrap();
    assert!(
        missing.iter().any(|m| m["part"] == "memory_map"),
        "{missing:?}"
    );
    // Read at its end, unheld (and at its userspace mark first when the
    // profile started before the guest wrote it, as on a loaded host).
    let passes = g["passes"].as_array().unwrap();
    assert_eq!(passes.last().unwrap()["at"], "end", "{g:#}");
    assert!(passes.iter().all(|p| p["at"] != "shutdown"), "{g:#}");
    assert_ne!(state(pid), Some('T'), "the VMM runs on");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}
