//! `run --disk`, `--rng` and `--console` as a user meets them: an image
//! that cannot be a disk exits 2 with a message naming it, before the
//! guest starts; a good one becomes a virtio-blk device on the timeline.

mod support;

use support::bootscope_output as bootscope;
use support::*;

fn run_with_disk(disk: &str) -> Vec<String> {
    [
        "run",
        "--no-profile",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--serial",
        "null",
        "--disk",
        disk,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn expect_disk_refused(disk: &str, needles: &[&str]) {
    let args = run_with_disk(disk);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    expect_usage_error(&args, needles);
}

#[test]
fn bad_disks_exit_2_naming_the_image() {
    let dir = scratch("disk-cli");
    let missing = dir.join("missing.img");
    expect_disk_refused(missing.to_str().unwrap(), &["--disk", "no such file"]);
    expect_disk_refused(dir.to_str().unwrap(), &["is a directory"]);
    let odd = dir.join("odd.img");
    std::fs::write(&odd, vec![0u8; 1000]).unwrap();
    expect_disk_refused(odd.to_str().unwrap(), &["1000 bytes", "512-byte sectors"]);
    let fifo = dir.join("fifo");
    mkfifo(&fifo, 0o600);
    // Refused at once (opened without blocking), writable or not.
    expect_disk_refused(fifo.to_str().unwrap(), &["a FIFO"]);
    expect_disk_refused(&format!("{},readonly", fifo.display()), &["a FIFO"]);
    let good = dir.join("good.img");
    std::fs::write(&good, vec![0u8; 4096]).unwrap();
    expect_disk_refused(
        &format!("{},ro", good.display()),
        &["--disk", "unknown option \"ro\""],
    );
    // Locked by another VMM (an open file description lock held here).
    let held = bootscope_vmm::virtio::DiskImage::open(&bootscope_vmm::virtio::DiskSpec {
        path: good.clone(),
        readonly: false,
    })
    .unwrap();
    expect_disk_refused(good.to_str().unwrap(), &["in use by another process"]);
    expect_disk_refused(
        &format!("{},readonly", good.display()),
        &["in use by another process"],
    );
    drop(held);
    // Twice in one VM.
    let g = good.to_str().unwrap();
    let mut args = run_with_disk(g);
    args.extend(["--disk".to_string(), g.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    expect_usage_error(&args, &["given twice"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn virtio_devices_need_acpi() {
    require_kvm!();
    let dir = scratch("disk-acpi");
    let good = dir.join("good.img");
    std::fs::write(&good, vec![0u8; 4096]).unwrap();
    let mut args = run_with_disk(good.to_str().unwrap());
    args.push("--no-acpi".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    expect_usage_error(&args, &["--disk need ACPI", "--no-acpi"]);
    // Without ACPI and without asking, no rng: the run goes on.
    let o = bootscope(&[
        "run",
        "--no-profile",
        "--no-acpi",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--serial",
        "null",
        "--no-summary",
    ]);
    assert_ne!(o.status.code(), Some(2), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_disk_and_the_rng_are_on_the_timeline() {
    require_kvm!();
    let dir = scratch("disk-timeline");
    let good = dir.join("good.img");
    std::fs::write(&good, vec![0u8; 8192]).unwrap();
    let timeline = dir.join("t.json");
    let o = bootscope(&[
        "run",
        "--no-profile",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--serial",
        "null",
        "--no-summary",
        "--disk",
        &format!("{},readonly", good.display()),
        "--console",
        "virtio",
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = read_json(&timeline);
    let devices = doc["devices"].as_array().expect("devices");
    let names: Vec<&str> = devices.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(names, ["virtio-blk0", "virtio-rng", "virtio-console"]);
    let disk = &devices[0]["disk"];
    assert_eq!(disk["readonly"], true);
    assert_eq!(disk["capacity_bytes"], 8192);
    assert_eq!(disk["serial"], "good.img");
    assert_eq!(devices[0]["irq"], 5);
    assert_eq!(devices[0]["mmio_start"], 0xd000_1000u64);
    let regions = doc["guest"]["regions"].as_array().unwrap();
    for n in [
        "virtio-blk0 (MMIO)",
        "virtio-rng (MMIO)",
        "virtio-console (MMIO)",
    ] {
        assert!(regions.iter().any(|r| r["name"] == n), "{n}");
    }
    // The default command line turned to the virtio console.
    let cmdline = doc["guest"]["cmdline"].as_str().unwrap();
    assert!(cmdline.starts_with("console=hvc0 "), "{cmdline}");
    let _ = std::fs::remove_dir_all(&dir);
}
