//! `bootscope profile` of QEMU and Cloud Hypervisor in the lab (nested KVM with AMD SVM under
//! QEMU's emulator, Debian's kernel and the default busybox guest): the
//! guest's memory read through QEMU's, its initcalls put on the profile's
//! clock by its serial lines (each byte timed by eBPF as the guest wrote
//! it) with the exits of their own time, QEMU held at its guest's ACPI
//! power-off for the last read; and `--pid` of a QEMU already running,
//! whose memory map is inferred. Cross-checked against independent
//! sources: the guest's console marks (every initcall runs between the
//! kernel's first port I/O and `Run /init`), KVM's own exit count (the
//! initcalls' exits are part of it), the guest kernel's own log.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// QEMU `-M microvm` booting the lab's default guest, as its arguments.
fn qemu_args(qemu: &Path, kernel: &Path, initrd: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec![qemu.display().to_string()];
    v.extend(
        [
            "-enable-kvm",
            "-M",
            "microvm",
            "-cpu",
            "host",
            "-m",
            "256M",
            "-smp",
            "1",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-serial",
            "stdio",
            "-kernel",
        ]
        .map(String::from),
    );
    v.push(kernel.display().to_string());
    v.push("-initrd".into());
    v.push(initrd.display().to_string());
    v.push("-append".into());
    v.push("console=ttyS0 panic=-1".into());
    v
}

/// Runs `profile --initcalls -- VMM ARGS` in the lab (with the programs
/// and inputs it needs carried in) and returns its profile; the lab's
/// console is printed.
fn profile_initcalls_in_lab(
    pre: &lab::Prereqs,
    tag: &str,
    carry: &[(&str, &Path)],
    vmm: &[String],
) -> serde_json::Value {
    let out = pre.dir.join(format!("{tag}.json"));
    let exe = env!("CARGO_BIN_EXE_bootscope");
    let mut cmd = bootscope();
    cmd.current_dir(&pre.dir).args([
        "lab",
        "--timeout",
        "1200",
        "--retries",
        "2",
        "--program",
        exe,
    ]);
    for (flag, path) in carry {
        cmd.arg(flag).arg(path);
    }
    cmd.args(["--", "profile", "--initcalls", "--output"])
        .arg(&out)
        .arg("--")
        .args(vmm);
    let o = run(&mut cmd, None);
    let console = String::from_utf8_lossy(&o.stdout);
    println!("--- lab console ---\n{console}---");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    read_json(&out)
}

/// The VMM was held at its guest's ACPI power-off and read there.
fn assert_held_at_acpi_power_off(g: &serde_json::Value) {
    let passes = g["passes"].as_array().unwrap();
    let shutdown = passes
        .iter()
        .find(|r| r["at"] == "shutdown")
        .unwrap_or_else(|| panic!("no read at shutdown: {passes:#?}"));
    assert!(
        shutdown["held_at"].as_str().unwrap_or("").contains("ACPI"),
        "{shutdown:#}"
    );
}

#[test]
fn qemu_initcalls_land_on_the_profiles_clock_with_their_exits_in_the_lab() {
    let pre = require_lab_guest!("lab-qemu-initcalls");
    let Some((qemu, firmware)) = lab::qemu_for_the_lab() else {
        return;
    };
    let p = profile_initcalls_in_lab(
        &pre,
        "qemu-initcalls",
        &[("--program", &qemu), ("--input", firmware)],
        &qemu_args(&qemu, &pre.kernel, &pre.initrd),
    );
    let g = &p["guest_read"];
    assert_eq!(g["memory_map"]["source"], "ioctl", "{:#}", g["memory_map"]);
    lab::assert_kernel_log(g);
    lab::assert_initcalls_on_the_clock(&p);
    // The boot's exits equal KVM's own count.
    let total = p["exits"]["total"].as_u64().unwrap();
    assert_eq!(p["exits"]["kvm_stats_exits"].as_u64(), Some(total));
    // QEMU held at its guest's ACPI power-off, read, and continued: the
    // profile ends with QEMU's own exit status 0.
    assert_held_at_acpi_power_off(g);
}

#[test]
fn pid_of_a_running_qemu_reads_its_guest_memory_in_the_lab() {
    let pre = require_lab_guest!("lab-qemu-pid");
    let Some((qemu, firmware)) = lab::qemu_for_the_lab() else {
        return;
    };
    let busybox = require_busybox!();
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_bootscope"));
    let out_dir = pre.dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let (out, console) = (out_dir.join("pid.json"), out_dir.join("console.txt"));
    let script = pre.dir.join("pid.sh");
    let qemu_cmd = qemu_args(&qemu, &pre.kernel, &pre.initrd);
    std::fs::write(&script, lab::pid_script(&exe, &qemu_cmd, &out, &console)).unwrap();
    let o = Command::new(&exe)
        .args(["lab", "--timeout", "1200", "--retries", "2", "--exe"])
        .arg(&busybox)
        .arg("--program")
        .arg(&exe)
        .arg("--program")
        .arg(&qemu)
        .arg("--input")
        .arg(firmware)
        .arg("--input")
        .arg(&pre.kernel)
        .arg("--input")
        .arg(&pre.initrd)
        .arg("--output")
        .arg(&out)
        .arg("--output")
        .arg(&console)
        .args(["--", "sh"])
        .arg(&script)
        .output()
        .expect("bootscope lab runs");
    println!("{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let guest_console = std::fs::read_to_string(&console).unwrap_or_default();
    assert!(
        guest_console.contains(bootscope_lab::guest::HELLO_LINE),
        "{guest_console}"
    );
    let p = read_json(&out);
    // Known by its command, read while it ran.
    assert_eq!(p["target"]["vmm"]["kind"], "qemu", "{:#}", p["target"]);
    let g = &p["guest_read"];
    // Its slots were set before bootscope came: the map is inferred from
    // /proc/PID/maps and the guest kernel's VMCOREINFO.
    assert_eq!(
        g["memory_map"]["source"], "inferred",
        "{:#}",
        g["memory_map"]
    );
    let log = g["kernel_log"]["records"]
        .as_array()
        .expect("the kernel log");
    assert!(
        log.iter()
            .any(|r| r["text"].as_str().unwrap().starts_with("Linux version")),
        "no banner record"
    );
    // Its kernel, from its own command line, names the modules' symbols.
    let missing = g["missing"].as_array().unwrap();
    assert!(
        !missing.iter().any(|m| m["part"] == "modules"),
        "{missing:#?}"
    );
}

/// Cloud Hypervisor (CH_BIN_DIR, default /usr/local/bin, as tests/lab_ch.rs
/// finds it) booting the same guest from Debian's kernel decompressed
/// (its PVH entry): initcalls on the profile's clock, held at its ACPI
/// power-off (port 0x600), the kernel's boot parameters read by symbol.
#[test]
fn cloud_hypervisor_initcalls_land_on_the_profiles_clock_in_the_lab() {
    let pre = require_lab_guest!("lab-ch-initcalls");
    let dir = PathBuf::from(std::env::var_os("CH_BIN_DIR").unwrap_or("/usr/local/bin".into()));
    let ch = dir.join("cloud-hypervisor");
    if !ch.is_file() {
        skip(format_args!(
            "{} is missing (build Cloud Hypervisor as docs/lab.md says, or set CH_BIN_DIR)",
            ch.display()
        ));
        return;
    }
    // The ELF kernel in a bzImage, as CH boots it.
    let vmlinux = pre.dir.join("vmlinux");
    let image = std::fs::read(&pre.kernel).unwrap();
    let elf = bootscope_profiler::guest_symbols::image::KernelImage::parse(&image)
        .expect("a bzImage")
        .expect("its payload decompresses");
    std::fs::write(&vmlinux, elf.bytes()).unwrap();
    let path = |p: &Path| p.display().to_string();
    let mut vmm = vec![path(&ch), "--kernel".into(), path(&vmlinux)];
    vmm.extend(["--initramfs".into(), path(&pre.initrd)]);
    vmm.extend(
        [
            "--cmdline",
            "console=ttyS0 panic=-1",
            "--serial",
            "tty",
            "--console",
            "off",
            "--memory",
            "size=256M",
            "--cpus",
            "boot=1",
        ]
        .map(String::from),
    );
    let p = profile_initcalls_in_lab(&pre, "ch-initcalls", &[("--program", &ch)], &vmm);
    let g = &p["guest_read"];
    let calls = g["initcalls"]["initcalls"].as_array().expect("initcalls");
    assert!(calls.len() >= 300, "{} initcalls", calls.len());
    assert!(g["initcalls"]["clock"]["anchors"].as_u64().unwrap() >= 10);
    let (first_pio, run_init) = (
        lab::profile_mark_t(&p, "port I/O: first by kernel code"),
        lab::profile_mark_t(&p, "serial: run init"),
    );
    for c in calls {
        let start = c["start_ns"].as_u64().unwrap();
        assert!(first_pio <= start && start <= run_init, "{c:#}");
    }
    assert_held_at_acpi_power_off(g);
}
