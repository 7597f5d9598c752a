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
fn a_workload_unit_needs_a_unit_name_and_a_disk() {
    let mut args = run_with_disk("/nonexistent/own.raw");
    args.extend(["--workload-unit".into(), "app".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    expect_usage_error(
        &args,
        &["'app' is not a systemd unit name", "myapp.service"],
    );
    let kernel = fixture("mini-bzimage-reset.bin");
    expect_usage_error(
        &["run", "--kernel", &kernel, "--workload-unit", "app.service"],
        &["--workload-unit", "--disk"],
    );
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

// ---- a disk is an input: links, devices, locks and modes ----

fn open_disk(path: &std::path::Path, readonly: bool) -> Result<(), String> {
    bootscope_vmm::virtio::DiskImage::open(&bootscope_vmm::virtio::DiskSpec {
        path: path.to_path_buf(),
        readonly,
    })
    .map(drop)
    .map_err(|e| e.to_string())
}

fn set_mode(p: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_link_planted_by_another_user_in_a_sticky_directory_is_refused() {
    require_root!("to plant a link as another user");
    let dir = scratch("disk-planted");
    let target = dir.join("victim.img");
    std::fs::write(&target, vec![0u8; 4096]).unwrap();
    // A sticky world-writable directory owned by nobody, as /tmp is by
    // root; a link in it owned by a third user.
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    set_mode(&shared, 0o1777);
    std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
    let link = shared.join("disk.img");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65533), Some(65533)).unwrap();
    let l = link.to_str().unwrap();
    for spec in [l.to_string(), format!("{l},readonly")] {
        expect_disk_refused(
            &spec,
            &["--disk", l, "symbolic link owned by uid 65533", "shared"],
        );
    }
    // The same link made by the directory's owner is followed.
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    open_disk(&link, false).unwrap();
    // A link to nothing is refused, as for outputs.
    std::fs::remove_file(&target).unwrap();
    let e = open_disk(&link, true).unwrap_err();
    assert!(e.contains("which does not exist"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kernel_interfaces_and_devices_are_not_disks() {
    let attr = [
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/kernel/uevent_seqnum",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("a sysfs attribute");
    // A sysfs attribute says it is a regular file of 4096 bytes.
    expect_disk_refused(attr, &["--disk", attr, "sysfs", "kernel interface"]);
    expect_disk_refused(&format!("{attr},readonly"), &["sysfs"]);
    expect_disk_refused("/proc/self/environ,readonly", &["procfs"]);
    expect_disk_refused("/dev/null", &["--disk /dev/null", "a character device"]);
    let dir = scratch("disk-fifo");
    let fifo = dir.join("fifo");
    mkfifo(&fifo, 0o666);
    expect_disk_refused(fifo.to_str().unwrap(), &["--disk", "a FIFO"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child process holding a BSD flock on `path`: the `flock` command
/// running `cat`, which ends when its input is closed (on drop).
struct FlockHolder {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
}

impl FlockHolder {
    fn hold(path: &std::path::Path, mode: &str) -> Self {
        use std::io::{BufRead, Write};
        use std::process::Stdio;
        let mut child = std::process::Command::new("flock")
            .arg(mode)
            .arg(path)
            .arg("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("flock runs");
        // `cat` runs once the lock is held: a line echoed proves it.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"held\n").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n", "flock holds the image");
        Self {
            child,
            stdin: Some(stdin),
        }
    }
}

impl Drop for FlockHolder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn a_flock_held_by_another_process_refuses_the_disk() {
    if support::find_program("flock").is_none() {
        skip("no flock command (util-linux)");
        return;
    }
    let dir = scratch("disk-flock");
    let img = dir.join("locked.img");
    std::fs::write(&img, vec![0u8; 4096]).unwrap();
    let p = img.to_str().unwrap();
    let holder = FlockHolder::hold(&img, "--exclusive");
    expect_disk_refused(p, &["--disk", p, "in use by another process", "flock"]);
    expect_disk_refused(&format!("{p},readonly"), &["flock'ed for writing"]);
    drop(holder);
    // A shared flock lets readers in, not a writer.
    let holder = FlockHolder::hold(&img, "--shared");
    open_disk(&img, true).unwrap();
    expect_disk_refused(p, &["in use by another process"]);
    drop(holder);
    open_disk(&img, false).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_root_owned_read_only_image_needs_readonly() {
    require_root!("to own an image as root, whose open succeeds through any mode");
    let dir = scratch("disk-0444");
    let img = dir.join("ro.img");
    std::fs::write(&img, vec![0u8; 4096]).unwrap();
    set_mode(&img, 0o444);
    let p = img.to_str().unwrap();
    expect_disk_refused(p, &["--disk", p, "mode 0444", "add ,readonly", "chmod"]);
    open_disk(&img, true).unwrap();
    // Another user's image that only its owner may write: root writes it
    // as the owner could.
    set_mode(&img, 0o644);
    std::os::unix::fs::chown(&img, Some(65534), Some(65534)).unwrap();
    open_disk(&img, false).unwrap();
    assert_eq!(std::fs::read(&img).unwrap().len(), 4096, "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A loop device over an image, its file system mounted; detached and
/// unmounted on drop whatever the test did.
struct MountedLoop {
    device: String,
    mountpoint: Option<std::path::PathBuf>,
}

impl MountedLoop {
    /// Why not, as a SKIP reason, where the machine cannot.
    fn new(img: &std::path::Path, mountpoint: &std::path::Path) -> Result<Self, String> {
        let sh = |cmd: &mut std::process::Command| {
            let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if o.status.success() {
                Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
            } else {
                Err(format!(
                    "{cmd:?}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
        };
        let device = sh(std::process::Command::new("losetup")
            .args(["--find", "--show"])
            .arg(img))
        .map_err(|e| format!("no loop device: {e}"))?;
        let mut me = Self {
            device,
            mountpoint: None,
        };
        sh(std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&me.device))?;
        sh(std::process::Command::new("mount")
            .arg(&me.device)
            .arg(mountpoint))
        .map_err(|e| format!("cannot mount a loop device: {e}"))?;
        me.mountpoint = Some(mountpoint.to_path_buf());
        Ok(me)
    }

    fn unmount(&mut self) {
        if let Some(m) = self.mountpoint.take() {
            let s = std::process::Command::new("umount").arg(&m).status();
            assert!(s.is_ok_and(|s| s.success()), "umount {}", m.display());
        }
    }
}

impl Drop for MountedLoop {
    fn drop(&mut self) {
        if let Some(m) = self.mountpoint.take() {
            let _ = std::process::Command::new("umount").arg(&m).status();
        }
        let _ = std::process::Command::new("losetup")
            .arg("--detach")
            .arg(&self.device)
            .status();
    }
}

#[test]
fn a_mounted_block_device_is_refused() {
    require_root!("to set up and mount a loop device");
    for program in ["losetup", "mkfs.ext4", "mount"] {
        if support::find_program(program).is_none()
            && !std::path::Path::new("/usr/sbin").join(program).exists()
        {
            skip(format_args!("no {program}"));
            return;
        }
    }
    let dir = scratch("disk-loop");
    let img = dir.join("fs.img");
    std::fs::write(&img, vec![0u8; 8 << 20]).unwrap();
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut lo = match MountedLoop::new(&img, &mnt) {
        Ok(lo) => lo,
        Err(why) => {
            let _ = std::fs::remove_dir_all(&dir);
            skip(format_args!("{why}"));
            return;
        }
    };
    let dev = lo.device.clone();
    for spec in [dev.clone(), format!("{dev},readonly")] {
        expect_disk_refused(&spec, &["--disk", &dev, "block device in use", "unmount"]);
    }
    // Unmounted, the same device is a disk, and an open one holds it.
    lo.unmount();
    let held = bootscope_vmm::virtio::DiskImage::open(&bootscope_vmm::virtio::DiskSpec {
        path: dev.clone().into(),
        readonly: false,
    })
    .unwrap();
    assert_eq!(held.size, 8 << 20);
    let o = std::process::Command::new("mount")
        .arg(&dev)
        .arg(&mnt)
        .output()
        .unwrap();
    if o.status.success() {
        lo.mountpoint = Some(mnt.clone());
    }
    assert!(!o.status.success(), "mounted a disk in use");
    drop(held);
    drop(lo);
    let _ = std::fs::remove_dir_all(&dir);
}
