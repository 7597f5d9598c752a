//! virtio-blk end to end in the lab (real nested KVM): Debian's kernel with
//! an initramfs that loads virtio_mmio, virtio_blk and ext4 from its own
//! module tree boots with two disks. On the writable one the guest writes
//! 64 MiB of random data and its SHA-256 (raw, on the block device), syncs
//! and powers off; the lab machine (the VMM's host) checks both in the
//! image. The read-only one holds an ext4 file system made here: the guest
//! mounts it, reads it, and its write fails with EROFS; the image is the
//! same byte for byte afterwards. The guest also has a virtio console
//! beside the serial one (`console=ttyS0 console=hvc0`): once its driver
//! loads, the kernel's lines reach the console sink through it too. One
//! lab boot.

mod support;

use support::*;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Modules to load, with what they need first, from `modules.dep`.
fn module_closure(modules_dir: &Path, wanted: &[&str]) -> Result<Vec<PathBuf>, String> {
    let dep = std::fs::read_to_string(modules_dir.join("modules.dep"))
        .map_err(|e| format!("{}/modules.dep: {e}", modules_dir.display()))?;
    let deps: Vec<(String, Vec<String>)> = dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| {
            (
                m.trim().to_string(),
                d.split_whitespace().map(str::to_string).collect(),
            )
        })
        .collect();
    let name_of = |path: &str| {
        Path::new(path)
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('.').next())
            .unwrap_or_default()
            .replace('-', "_")
    };
    let mut order: Vec<String> = Vec::new();
    fn visit(
        m: &str,
        deps: &[(String, Vec<String>)],
        order: &mut Vec<String>,
    ) -> Result<(), String> {
        if order.iter().any(|o| o == m) {
            return Ok(());
        }
        let (_, needs) = deps
            .iter()
            .find(|(p, _)| p == m)
            .ok_or_else(|| format!("{m} is not in modules.dep"))?;
        for n in needs {
            visit(n, deps, order)?;
        }
        order.push(m.to_string());
        Ok(())
    }
    for w in wanted {
        let path = deps
            .iter()
            .map(|(p, _)| p)
            .find(|p| name_of(p) == w.replace('-', "_"))
            .ok_or_else(|| format!("no module {w} under {}", modules_dir.display()))?
            .clone();
        visit(&path, &deps, &mut order)?;
    }
    let files: Vec<PathBuf> = order.iter().map(|m| modules_dir.join(m)).collect();
    match files
        .iter()
        .find(|f| f.extension().is_none_or(|e| e != "ko"))
    {
        Some(f) => Err(format!(
            "{} is compressed; busybox insmod needs .ko",
            f.display()
        )),
        None => Ok(files),
    }
}

fn guest_init() -> String {
    let bb = "/bin/busybox";
    format!(
        r#"#!/bin/sh
{bb} mount -t proc proc /proc
{bb} mount -t sysfs sysfs /sys
{bb} mount -t devtmpfs devtmpfs /dev
for m in /modules/*.ko; do {bb} insmod $m || echo "bootscope-virtio: insmod $m failed"; done
i=0
while [ ! -b /dev/vdb ] && [ $i -lt 300 ]; do {bb} sleep 0.1; i=$((i+1)); done
echo "bootscope-virtio: vda serial $({bb} cat /sys/block/vda/serial)"
{bb} dd if=/dev/urandom of=/tmp/data bs=1048576 count=64 2>/dev/null
sum=$({bb} sha256sum /tmp/data | {bb} cut -c1-64)
echo "bootscope-virtio: wrote $sum"
{bb} dd if=/tmp/data of=/dev/vda bs=1048576 conv=notrunc,fsync 2>/dev/null
printf '%s' "$sum" | {bb} dd of=/dev/vda bs=1048576 seek=64 conv=notrunc,fsync 2>/dev/null
{bb} sync
{bb} rm /tmp/data
{bb} mkdir -p /mnt
{bb} mount -t ext4 /dev/vdb /mnt && echo "bootscope-virtio: ro content $({bb} cat /mnt/hello.txt)"
if ( echo x > /mnt/new ) 2>/tmp/err; then echo "bootscope-virtio: ro write succeeded"; else echo "bootscope-virtio: ro write refused: $({bb} cat /tmp/err)"; fi
[ -c /dev/port ] || {bb} mknod /dev/port c 1 4
printf '\140' | {bb} dd of=/dev/port bs=1 seek=128 count=1 conv=notrunc 2>/dev/null
{bb} poweroff -f
"#
    )
}

fn initramfs(out: &Path, busybox: &Path, modules: &[PathBuf]) {
    let file = std::fs::File::create(out).unwrap();
    let mut cpio = bootscope_lab::cpio::Builder::new(std::io::BufWriter::new(file));
    for dir in ["dev", "proc", "sys", "bin", "tmp", "mnt", "modules"] {
        cpio.add_dir(dir, 0o755).unwrap();
    }
    cpio.add_char_device("dev/console", 5, 1, 0o600).unwrap();
    cpio.add_file_from_host("bin/busybox", busybox, 0o755)
        .unwrap();
    cpio.add_symlink("bin/sh", "busybox").unwrap();
    for (i, m) in modules.iter().enumerate() {
        let name = m.file_name().unwrap().to_string_lossy();
        cpio.add_file_from_host(format!("modules/{i:02}-{name}"), m, 0o644)
            .unwrap();
    }
    cpio.add_file_bytes("init", guest_init().as_bytes(), 0o755)
        .unwrap();
    cpio.finish().unwrap();
}

/// The lab machine's script: make the writable image, boot, check.
fn lab_script(dir: &Path, busybox: &Path, exe: &Path, kernel: &Path, initrd: &Path) -> String {
    let (d, bb, exe, k, i) = (
        dir.display(),
        busybox.display(),
        exe.display(),
        kernel.display(),
        initrd.display(),
    );
    format!(
        r#"cd {d}
{bb} mkdir -p out
{bb} truncate -s 80M disk.raw
{bb} sha256sum ro.img > ro.before
{exe} run --kernel {k} --initrd {i} --memory 512M --no-profile --timeout 1500 --console virtio --cmdline "console=ttyS0 console=hvc0 reboot=k panic=-1 pci=off io_delay=none" --disk {d}/disk.raw --disk {d}/ro.img,readonly --timeline {d}/out/timeline.json --serial {d}/out/serial.log --no-summary > out/run.log 2>&1
echo "run exit $?" > out/result.txt
echo "image $({bb} head -c 67108864 disk.raw | {bb} sha256sum | {bb} cut -c1-64)" >> out/result.txt
echo "stored $({bb} dd if=disk.raw bs=1048576 skip=64 count=1 2>/dev/null | {bb} head -c 64)" >> out/result.txt
{bb} sha256sum ro.img > ro.after
{bb} cmp ro.before ro.after && echo "ro unchanged" >> out/result.txt
exit 0
"#
    )
}

/// An 8 MiB ext4 image `DIR/ro.img` holding `hello.txt`, for the guest's
/// read-only disk.
fn readonly_image(dir: &Path, mkfs: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("ro")).unwrap();
    std::fs::write(dir.join("ro/hello.txt"), "hello from the host\n").unwrap();
    let ro = dir.join("ro.img");
    let made = Command::new(mkfs)
        .args(["-q", "-F", "-O", "^metadata_csum", "-d"])
        .arg(dir.join("ro"))
        .arg(&ro)
        .arg("8M")
        .status()
        .expect("mkfs.ext4 runs");
    assert!(made.success());
    ro
}

/// The lab's `--input` of each file in `inputs` and `--output` of each
/// file the script writes under `DIR/out`.
fn inputs_and_outputs(dir: &Path, inputs: &[&Path]) -> Vec<std::ffi::OsString> {
    let mut args = Vec::new();
    for i in inputs {
        args.push("--input".into());
        args.push(i.as_os_str().to_owned());
    }
    for o in ["result.txt", "timeline.json", "serial.log", "run.log"] {
        args.push("--output".into());
        args.push(dir.join("out").join(o).into_os_string());
    }
    args
}

fn line_value<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.split_once(prefix).map(|(_, v)| v.trim()))
}

#[test]
fn disk_data_survives_and_a_readonly_disk_refuses_writes_in_the_lab() {
    let kernel = require_lab!();
    let busybox = require_busybox!();
    let Some(mkfs) = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
    else {
        skip_test!("mkfs.ext4 is missing (apt-get install e2fsprogs)");
    };
    let modules_dir = bootscope_lab::guest::find_debian_kernel()
        .expect("the lab found the kernel")
        .modules_dir;
    let modules = match module_closure(
        &modules_dir,
        &[
            "virtio_mmio",
            "virtio_blk",
            "virtio_console",
            "crc32c_generic",
            "ext4",
        ],
    ) {
        Ok(m) => m,
        Err(e) => skip_test!("{e}"),
    };
    let dir = scratch("lab-virtio");
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let ro = readonly_image(&dir, &mkfs);
    let ro_before = std::fs::read(&ro).unwrap();
    let initrd = dir.join("virtio.cpio");
    initramfs(&initrd, &busybox, &modules);
    let script = dir.join("lab.sh");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_bootscope"));
    std::fs::write(&script, lab_script(&dir, &busybox, &exe, &kernel, &initrd)).unwrap();

    let out = Command::new(&exe)
        .args(["lab", "--timeout", "1800", "--memory", "2G", "--exe"])
        .arg(&busybox)
        .arg("--program")
        .arg(&exe)
        .args(inputs_and_outputs(&dir, &[&kernel, &initrd, &ro]))
        .arg("--")
        .arg("sh")
        .arg(&script)
        .output()
        .expect("bootscope lab runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let read = |n: &str| std::fs::read_to_string(dir.join("out").join(n)).unwrap_or_default();
    let (result, serial, run_log) = (read("result.txt"), read("serial.log"), read("run.log"));
    let context = format!("result:\n{result}\nrun:\n{run_log}\nserial:\n{serial}");
    assert!(result.contains("run exit 0"), "{context}");

    // The data and its checksum made it to the image intact.
    let wrote = line_value(&serial, "bootscope-virtio: wrote ").expect("the guest's checksum");
    assert_eq!(wrote.len(), 64, "{context}");
    assert_eq!(line_value(&result, "image "), Some(wrote), "{context}");
    assert_eq!(line_value(&result, "stored "), Some(wrote), "{context}");
    assert!(
        serial.contains("bootscope-virtio: vda serial disk.raw"),
        "{context}"
    );

    // The read-only disk: readable, writes refused with EROFS, unchanged.
    assert!(
        serial.contains("bootscope-virtio: ro content hello from the host"),
        "{context}"
    );
    let refused = line_value(&serial, "bootscope-virtio: ro write refused: ").unwrap_or_default();
    assert!(refused.contains("Read-only file system"), "{context}");
    assert!(result.contains("ro unchanged"), "{context}");
    assert_eq!(std::fs::read(&ro).unwrap(), ro_before);

    // The timeline: both disks, their I/O, in the phase it happened.
    let doc: serde_json::Value =
        serde_json::from_str(&read("timeline.json")).expect("timeline copied back");
    check_timeline(&doc, &serial, &context);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The timeline of the lab boot: both disks and their I/O in the phase it
/// happened, the rng untouched, the virtio console's lines.
fn check_timeline(doc: &serde_json::Value, serial: &str, context: &str) {
    assert_eq!(doc["outcome"]["clean"], true, "{}", doc["outcome"]);
    let devices = doc["devices"].as_array().expect("devices");
    let by_name = |n: &str| {
        devices
            .iter()
            .find(|d| d["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {devices:?}"))
    };
    let rw = &by_name("virtio-blk0")["disk"];
    assert!(
        rw["total"]["bytes_written"].as_u64().unwrap() >= 64 << 20,
        "{rw}"
    );
    assert!(rw["total"]["flushes"].as_u64().unwrap() >= 1, "{rw}");
    assert_eq!(rw["total"]["errors"], 0, "{rw}");
    let user = rw["by_phase"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == "userspace")
        .expect("I/O in userspace");
    assert!(user["bytes_written"].as_u64().unwrap() >= 64 << 20, "{rw}");
    let ro_doc = &by_name("virtio-blk1")["disk"];
    assert_eq!(ro_doc["readonly"], true);
    assert_eq!(ro_doc["total"]["bytes_written"], 0, "{ro_doc}");
    assert!(
        ro_doc["total"]["bytes_read"].as_u64().unwrap() > 0,
        "{ro_doc}"
    );
    assert!(
        by_name("virtio-rng")["driver_ready_ns"].is_null(),
        "no rng driver loaded"
    );
    let regions = doc["guest"]["regions"].as_array().unwrap();
    assert!(regions.iter().any(|r| r["name"] == "virtio-blk0 (MMIO)"));
    // The virtio console carried the kernel's lines logged once its
    // driver was there: they are in the console file twice (serial and
    // hvc0), the earlier ones once.
    let hvc = by_name("virtio-console");
    assert!(hvc["driver_ready_ns"].is_u64(), "{hvc}");
    assert!(hvc["console_bytes"].as_u64().unwrap() > 0, "{hvc}");
    assert_eq!(hvc["bad_requests"], 0, "{hvc}");
    assert_eq!(
        serial.matches("EXT4-fs (vdb): mounted filesystem").count(),
        2,
        "a late kernel line through both consoles: {context}"
    );
    assert_eq!(serial.matches("Linux version").count(), 1, "{context}");
}
