//! `bootscope profile --initcalls` of Firecracker in the lab (nested KVM
//! with AMD SVM under QEMU's emulator): Debian's kernel decompressed (an
//! ELF vmlinux, as Firecracker boots it) and the default busybox guest,
//! configured by a `--config-file` whose `boot_args` bootscope extends in
//! a private copy. Checked: the memory slots learned from Firecracker's
//! own ioctls, the guest kernel's log read from its memory, every initcall
//! on the profile's clock between the kernel's first port I/O and
//! `Run /init`, the module list read, Firecracker held at its guest's
//! reset through the i8042 (Firecracker's only way out on x86: the guest
//! ends with `reboot -f`) and read there; and `profile --pid` of a
//! Firecracker already running, its map inferred. Skipped (a `SKIP:` line) where Firecracker is not installed:
//! `FC_BIN`, default /usr/local/bin/firecracker (docs/lab.md builds it).

mod support;

use std::path::{Path, PathBuf};

use support::*;

/// The guest's kernel command line in the config: the reset through the
/// i8042 (`reboot=k`) is how a guest ends Firecracker on x86.
const BOOT_ARGS: &str = "console=ttyS0 reboot=k panic=-1";

/// Firecracker on this host, or a SKIP line saying why there is none.
fn firecracker() -> Option<PathBuf> {
    let fc = std::env::var_os("FC_BIN").map_or_else(
        || PathBuf::from("/usr/local/bin/firecracker"),
        PathBuf::from,
    );
    if fc.is_file() {
        return Some(fc);
    }
    skip(format_args!(
        "{} is missing (build Firecracker as docs/lab.md says, or set FC_BIN)",
        fc.display()
    ));
    None
}

/// The ELF kernel inside the lab's bzImage, written into `dir`.
fn vmlinux(pre: &lab::Prereqs) -> PathBuf {
    let out = pre.dir.join("vmlinux");
    let image = std::fs::read(&pre.kernel).unwrap();
    let elf = bootscope_profiler::guest_symbols::image::KernelImage::parse(&image)
        .expect("a bzImage")
        .expect("its payload decompresses");
    std::fs::write(&out, elf.bytes()).unwrap();
    out
}

/// The default guest with an `/init` that ends in a reset (appended as a
/// second archive, which replaces the first's `/init`): it mounts what the
/// default guest mounts, prints its line, writes its userspace mark to
/// port 0x80, and `reboot -f` (a reset through the i8042 with `reboot=k`).
/// The default guest's `poweroff -f` halts the kernel: Firecracker has no
/// power-off, and would run on.
fn resetting_guest(pre: &lab::Prereqs) -> PathBuf {
    let bb = "/bin/busybox";
    let init = format!(
        "#!/bin/sh\n{bb} mount -t proc proc /proc\n{bb} mount -t sysfs sysfs /sys\n\
         {bb} mount -t devtmpfs devtmpfs /dev\necho '{hello}'\n\
         [ -c /dev/port ] || {bb} mknod /dev/port c 1 4\n\
         printf '\\{mark:03o}' | {bb} dd of=/dev/port bs=1 seek=128 count=1 conv=notrunc 2>/dev/null\n\
         {bb} reboot -f\n",
        hello = bootscope_lab::guest::HELLO_LINE,
        mark = bootscope_lab::guest::USERSPACE_START_MARKER,
    );
    let mut bytes = std::fs::read(&pre.initrd).unwrap();
    let mut cpio = bootscope_lab::cpio::Builder::new(Vec::new());
    cpio.add_file_bytes("init", init.as_bytes(), 0o755).unwrap();
    bytes.extend(cpio.finish().unwrap());
    let out = pre.dir.join("guest-reset.cpio");
    std::fs::write(&out, bytes).unwrap();
    out
}

/// Firecracker's config for `kernel` and `initrd`: 1 vCPU, 256 MiB, no
/// drives or network.
fn config(kernel: &Path, initrd: &Path) -> serde_json::Value {
    serde_json::json!({
        "boot-source": {
            "kernel_image_path": kernel,
            "initrd_path": initrd,
            "boot_args": BOOT_ARGS,
        },
        "drives": [],
        "machine-config": { "vcpu_count": 1, "mem_size_mib": 256 },
    })
}

/// Runs `profile --initcalls -- firecracker --no-api --config-file F` in
/// the lab, with Firecracker and the guest's files carried in; returns the
/// profile and the config file (which must be as it was written).
fn profile_in_lab(pre: &lab::Prereqs, fc: &Path) -> (serde_json::Value, PathBuf, String) {
    let kernel = vmlinux(pre);
    let initrd = resetting_guest(pre);
    let file = pre.dir.join("vm.json");
    let written = serde_json::to_string_pretty(&config(&kernel, &initrd)).unwrap();
    std::fs::write(&file, &written).unwrap();
    let out = pre.dir.join("fc-initcalls.json");
    let mut cmd = bootscope();
    cmd.current_dir(&pre.dir)
        .args(["lab", "--timeout", "1200", "--retries", "2", "--program"])
        .arg(env!("CARGO_BIN_EXE_bootscope"))
        .arg("--program")
        .arg(fc)
        .arg("--input")
        .arg(&kernel)
        .arg("--input")
        .arg(&initrd)
        .args(["--", "profile", "--initcalls", "--output"])
        .arg(&out)
        .arg("--")
        .arg(fc)
        .args(["--no-api", "--config-file"])
        .arg(&file);
    let o = run(&mut cmd, None);
    println!(
        "--- lab console ---\n{}---",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (read_json(&out), file, written)
}

#[test]
fn firecracker_initcalls_land_on_the_profiles_clock_in_the_lab() {
    let pre = require_lab_guest!("lab-fc-initcalls");
    let Some(fc) = firecracker() else {
        return;
    };
    let (p, file, written) = profile_in_lab(&pre, &fc);
    // The user's config is untouched; the guest had the trace parameters.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
    let vmm = &p["target"]["vmm"];
    assert_eq!(vmm["kind"], "firecracker", "{vmm:#}");
    let cmdline = vmm["cmdline"].as_str().unwrap();
    assert!(
        cmdline.starts_with(BOOT_ARGS) && cmdline.contains("trace_event=initcall:"),
        "{cmdline}"
    );
    let g = &p["guest_read"];
    assert_eq!(g["memory_map"]["source"], "ioctl", "{:#}", g["memory_map"]);
    lab::assert_kernel_log(g);
    lab::assert_initcalls_on_the_clock(&p);
    // The module list was read (the default guest loads none).
    let missing = g["missing"].as_array().unwrap();
    assert!(
        !missing.iter().any(|m| m["part"] == "modules"),
        "{missing:#?}"
    );
    // Held at the guest's reset through the i8042, read, and continued.
    let passes = g["passes"].as_array().unwrap();
    let shutdown = passes
        .iter()
        .find(|r| r["at"] == "shutdown")
        .unwrap_or_else(|| panic!("no read at shutdown: {passes:#?}"));
    assert!(
        shutdown["held_at"].as_str().unwrap_or("").contains("i8042"),
        "{shutdown:#}"
    );
}

/// `profile --pid` of a Firecracker already running in the lab: its
/// memory slots were set before bootscope came, so the map is inferred
/// (the VMM's mappings and the guest kernel's VMCOREINFO); the guest
/// kernel's log and module list are read through it.
#[test]
fn pid_of_a_running_firecracker_reads_its_guest_memory_in_the_lab() {
    let pre = require_lab_guest!("lab-fc-pid");
    let Some(fc) = firecracker() else {
        return;
    };
    let busybox = require_busybox!();
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_bootscope"));
    let kernel = vmlinux(&pre);
    let initrd = resetting_guest(&pre);
    let file = pre.dir.join("vm.json");
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&config(&kernel, &initrd)).unwrap(),
    )
    .unwrap();
    let out_dir = pre.dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let (out, console) = (out_dir.join("pid.json"), out_dir.join("console.txt"));
    let script = pre.dir.join("pid.sh");
    let vmm = [
        fc.display().to_string(),
        "--no-api".into(),
        "--config-file".into(),
        file.display().to_string(),
    ];
    std::fs::write(&script, lab::pid_script(&exe, &vmm, &out, &console)).unwrap();
    let mut cmd = bootscope();
    cmd.args(["lab", "--timeout", "1200", "--retries", "2", "--exe"])
        .arg(&busybox)
        .arg("--program")
        .arg(&exe)
        .arg("--program")
        .arg(&fc);
    for input in [&kernel, &initrd, &file] {
        cmd.arg("--input").arg(input);
    }
    cmd.arg("--output")
        .arg(&out)
        .arg("--output")
        .arg(&console)
        .args(["--", "sh"])
        .arg(&script);
    let o = run(&mut cmd, None);
    println!("{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let guest_console = std::fs::read_to_string(&console).unwrap_or_default();
    assert!(
        guest_console.contains(bootscope_lab::guest::HELLO_LINE),
        "{guest_console}"
    );
    let p = read_json(&out);
    assert_eq!(
        p["target"]["vmm"]["kind"], "firecracker",
        "{:#}",
        p["target"]
    );
    let g = &p["guest_read"];
    assert_eq!(
        g["memory_map"]["source"], "inferred",
        "{:#}",
        g["memory_map"]
    );
    lab::assert_kernel_log(g);
    let missing = g["missing"].as_array().unwrap();
    assert!(
        !missing.iter().any(|m| m["part"] == "modules"),
        "{missing:#?}"
    );
}
