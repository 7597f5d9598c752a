//! `bootscope profile --initcalls` of QEMU machines and memory set-ups
//! other than `-M microvm` on anonymous RAM, in the lab (nested KVM under
//! QEMU's emulator, Debian's kernel and the default busybox guest): `-M
//! q35` (firmware, PCI, its ACPI power-off at the ICH9's PM1a control port
//! 0x604) in one lab machine; guest RAM from a `memory-backend-memfd`
//! object, then in 2 MiB huge pages (`memory-backend-memfd,hugetlb=on`),
//! in another. Each must give the same depth:
//! the guest's memory read through QEMU's, its initcalls on the profile's
//! clock between the kernel's first port I/O and its `Run /init` line,
//! QEMU held at its guest's power-off for the last read.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// QEMU booting the lab's default guest on machine `machine`, with
/// `extra` arguments (a memory backend).
fn qemu_args(pre: &lab::Prereqs, qemu: &Path, machine: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![qemu.display().to_string()];
    v.extend(
        [
            "-enable-kvm",
            "-M",
            machine,
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
        ]
        .map(String::from),
    );
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push("-kernel".into());
    v.push(pre.kernel.display().to_string());
    v.push("-initrd".into());
    v.push(pre.initrd.display().to_string());
    v.push("-append".into());
    v.push("console=ttyS0 panic=-1".into());
    v
}

/// `bootscope lab` carrying bootscope, QEMU and its firmware
/// directories, with the guest's kernel and initramfs.
fn lab_command(pre: &lab::Prereqs, qemu: &Path, firmware: &[&Path]) -> Command {
    let mut cmd = bootscope();
    cmd.current_dir(&pre.dir)
        .args(["lab", "--timeout", "1500", "--retries", "2", "--program"])
        .arg(env!("CARGO_BIN_EXE_bootscope"))
        .arg("--program")
        .arg(qemu);
    for dir in firmware {
        cmd.arg("--input").arg(dir);
    }
    cmd.arg("--input")
        .arg(&pre.kernel)
        .arg("--input")
        .arg(&pre.initrd);
    cmd
}

/// Runs `cmd` (a lab session), prints the lab's console and returns it.
fn run_lab(mut cmd: Command) -> String {
    let o = run(&mut cmd, None);
    let console = String::from_utf8_lossy(&o.stdout).into_owned();
    println!("--- lab console ---\n{console}---");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    console
}

/// The depth every variant must give: the map from QEMU's own ioctls,
/// the kernel's log, at least 300 initcalls on the profile's clock within
/// the kernel's span on the console, and the hold at the guest's ACPI
/// power-off. Returns the guest memory section.
fn assert_read_in_depth(p: &serde_json::Value) -> &serde_json::Value {
    let g = &p["guest_read"];
    assert_eq!(g["memory_map"]["source"], "ioctl", "{:#}", g["memory_map"]);
    let log = g["kernel_log"]["records"]
        .as_array()
        .unwrap_or_else(|| panic!("no kernel log: {:#}", g["missing"]));
    assert!(
        log.iter()
            .any(|r| r["text"].as_str().unwrap().starts_with("Run /init")),
        "no `Run /init` record in {} records",
        log.len()
    );
    let doc = &g["initcalls"];
    let calls = doc["initcalls"]
        .as_array()
        .unwrap_or_else(|| panic!("no initcalls: {:#}", g["missing"]));
    assert!(calls.len() >= 300, "{} initcalls", calls.len());
    assert!(
        doc["clock"]["anchors"].as_u64().unwrap_or(0) >= 10,
        "{:#}",
        doc["clock"]
    );
    let first_pio = lab::profile_mark_t(p, "port I/O: first by kernel code");
    let run_init = lab::profile_mark_t(p, "serial: run init");
    for c in calls {
        let start = c["start_ns"].as_u64().unwrap();
        let end = start + c["duration_ns"].as_u64().unwrap();
        assert!(
            first_pio <= start && end <= run_init,
            "{c:#} outside {first_pio}..{run_init}"
        );
    }
    let passes = g["passes"].as_array().unwrap();
    let shutdown = passes
        .iter()
        .find(|r| r["at"] == "shutdown")
        .unwrap_or_else(|| panic!("no read at shutdown: {passes:#?}"));
    assert!(
        shutdown["held_at"].as_str().unwrap_or("").contains("ACPI"),
        "{shutdown:#}"
    );
    g
}

/// The RAM slot holding the guest's first megabyte above 1 MiB (where
/// the kernel is).
fn ram_slot(g: &serde_json::Value) -> &serde_json::Value {
    let slots = g["memory_map"]["slots"].as_array().unwrap();
    slots
        .iter()
        .find(|s| {
            let (gpa, size) = (s["gpa"].as_u64().unwrap(), s["size"].as_u64().unwrap());
            gpa <= 0x100000 && 0x200000 <= gpa + size && s["kind"] == "ram"
        })
        .unwrap_or_else(|| panic!("no RAM slot at 1 MiB: {slots:#?}"))
}

/// Profiles `vmm` with `--initcalls` in one lab machine.
fn profile_in_lab(
    pre: &lab::Prereqs,
    qemu: &Path,
    firmware: &[&Path],
    vmm: &[String],
) -> serde_json::Value {
    let out = pre.dir.join("profile.json");
    let mut cmd = lab_command(pre, qemu, firmware);
    cmd.args(["--", "profile", "--initcalls", "--output"])
        .arg(&out)
        .arg("--")
        .args(vmm);
    run_lab(cmd);
    read_json(&out)
}

#[test]
fn qemu_q35_is_read_and_held_at_its_acpi_power_off_in_the_lab() {
    let pre = require_lab_guest!("lab-qemu-q35");
    let Some((qemu, firmware)) = lab::qemu_for_the_lab() else {
        return;
    };
    // SeaBIOS, where QEMU looks for it or where Debian's seabios puts it.
    let Some(bios) = [firmware, Path::new("/usr/share/seabios")]
        .iter()
        .map(|d| d.join("bios-256k.bin"))
        .find(|b| b.is_file())
    else {
        skip("no SeaBIOS (bios-256k.bin in /usr/share/qemu or /usr/share/seabios): apt-get install seabios");
        return;
    };
    let bios_arg = bios.display().to_string();
    let vmm = qemu_args(&pre, &qemu, "q35", &["-bios", &bios_arg]);
    let mut dirs = vec![firmware, bios.parent().unwrap()];
    dirs.dedup();
    let p = profile_in_lab(&pre, &qemu, &dirs, &vmm);
    let g = assert_read_in_depth(&p);
    // q35 powers off through the ICH9's PM1a control register, port 0x604.
    let pio = p["exits"]["pio"].as_array().unwrap();
    assert!(
        pio.iter()
            .any(|x| x["port"] == 0x604 && x["direction"] == "write" && x["size"] == 2),
        "no 16-bit write to port 0x604: {pio:#?}"
    );
    // The firmware's ROM is a read-only slot apart from the guest's RAM.
    let slots = g["memory_map"]["slots"].as_array().unwrap();
    assert!(slots.iter().any(|s| s["kind"] == "rom"), "{slots:#?}");
    ram_slot(g);
}

/// The script run in the lab for the memory backends: QEMU's RAM from
/// a `memory-backend-memfd` object profiled into `out[0]`; then a pool of
/// 2 MiB pages for the guest's 256 MiB and the same in huge pages into
/// `out[1]`, or a `SKIP:` line saying the lab kernel has none.
fn backends_script(exe: &Path, memfd: &[String], huge: &[String], out: &[PathBuf; 2]) -> String {
    let quoted = |v: &[String]| {
        v.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "{exe} profile --initcalls --output {} -- {} || exit 1\n\
         f=/proc/sys/vm/nr_hugepages\n\
         if [ ! -w $f ]; then echo 'SKIP: the lab kernel has no hugetlb pool ($f missing)'; exit 0; fi\n\
         echo 160 > $f\n\
         n=$(cat $f)\n\
         if [ \"$n\" -lt 128 ]; then echo \"SKIP: the lab kernel gave $n huge pages of the 128 the guest needs\"; exit 0; fi\n\
         {exe} profile --initcalls --output {} -- {}\n",
        out[0].display(),
        quoted(memfd),
        out[1].display(),
        quoted(huge),
        exe = exe.display(),
    )
}

#[test]
fn qemu_ram_from_memfd_backends_in_small_and_huge_pages_is_read_in_the_lab() {
    let pre = require_lab_guest!("lab-qemu-hugepages");
    let Some((qemu, firmware)) = lab::qemu_for_the_lab() else {
        return;
    };
    let busybox = require_busybox!();
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_bootscope"));
    let out_dir = pre.dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = [out_dir.join("memfd.json"), out_dir.join("hugepages.json")];
    let memfd = qemu_args(
        &pre,
        &qemu,
        "microvm,memory-backend=mem",
        &["-object", "memory-backend-memfd,id=mem,size=256M"],
    );
    let huge = qemu_args(
        &pre,
        &qemu,
        "microvm,memory-backend=mem",
        &[
            "-object",
            "memory-backend-memfd,id=mem,size=256M,hugetlb=on,hugetlbsize=2M",
        ],
    );
    let script = pre.dir.join("backends.sh");
    std::fs::write(&script, backends_script(&exe, &memfd, &huge, &out)).unwrap();
    let mut cmd = lab_command(&pre, &qemu, &[firmware]);
    cmd.args(["--memory", "1G", "--exe"])
        .arg(&busybox)
        .arg("--output")
        .arg(&out[0])
        .arg("--output")
        .arg(&out[1])
        .args(["--", "sh"])
        .arg(&script);
    let console = run_lab(cmd);
    let memfd_read = |p: &serde_json::Value| {
        let g = assert_read_in_depth(p);
        let slot = ram_slot(g);
        assert!(
            slot["backing"].as_str().unwrap().starts_with("/memfd:"),
            "{slot:#}"
        );
    };
    memfd_read(&read_json(&out[0]));
    if let Some(line) = console.lines().find(|l| l.starts_with("SKIP: ")) {
        skip(&line["SKIP: ".len()..]);
        return;
    }
    memfd_read(&read_json(&out[1]));
}
