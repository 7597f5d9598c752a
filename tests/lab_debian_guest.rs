//! The Debian guest image (`bootscope guest build debian`) booted by
//! bootscope's VMM in the lab (real nested KVM) with Debian's own kernel
//! and initrd, root on the virtio disk: systemd reaches multi-user.target,
//! the workload's marker is on the timeline, the guest powers off cleanly,
//! and its units are on the timeline with durations that agree with the
//! guest's own timestamps and a total that agrees with systemd's own
//! `Startup finished` line within 5 %. Its exit sites in the kernel's
//! module area (the virtio, block and file-system drivers are modules) are
//! named `function [module]` from the module list read out of guest
//! memory. The initrd with only the modules that boot loaded (advise's
//! fix for a long initramfs stage) is made, and the image boots from it to
//! its workload. Slow: two boots under
//! emulation.

mod support;

use support::*;

use std::path::Path;

use serde_json::Value;

/// The image, built (or taken from the cache) into `dir`.
fn build_image(dir: &Path) -> Option<std::path::PathBuf> {
    if !root("to build the Debian image") {
        return None;
    }
    program("mmdebstrap", "scripts/deps.sh installs it")?;
    let image = dir.join("debian.raw");
    let out = bootscope()
        .args(["guest", "build", "debian", "--size", "512M", "--out"])
        .arg(&image)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && stderr.contains("cannot reach Debian's packages") {
        skip(stderr);
        return None;
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    Some(image)
}

/// The profile's exit sites in the module area are named from the guest's
/// module list: the driver modules of a disk boot are on it, named sites
/// lie in their own module's text, and the summary says how many.
fn check_module_sites(profile: &Value, output: &str) {
    let sites = &profile["exits"]["sites"];
    let info = &sites["symbols"];
    let modules = info["modules"].as_array().expect("the module list");
    let text = |name: &str| {
        modules.iter().find(|m| m["name"] == name).map(|m| {
            (
                m["text_base"].as_u64().unwrap(),
                m["text_size"].as_u64().unwrap(),
            )
        })
    };
    for name in ["virtio_blk", "ext4"] {
        let (_, size) = text(name).unwrap_or_else(|| panic!("{name} not loaded: {modules:?}"));
        assert!(size > 0, "{name}");
    }
    assert!(
        modules.iter().all(|m| m["text_symbols"].as_u64() > Some(0)),
        "every module has symbols: {modules:?}"
    );
    let named = info["in_modules_named"].as_u64().unwrap_or(0);
    assert!(named > 0, "no module site named: {info}");
    assert!(named <= info["in_modules"].as_u64().unwrap());
    let mut shown = 0;
    for s in sites["sites"].as_array().unwrap() {
        let Some(m) = s["module"].as_str() else {
            continue;
        };
        let rip = s["rip"].as_u64().unwrap();
        let (base, size) = text(m).unwrap_or_else(|| panic!("{m} is not on the list"));
        assert!((base..base + size).contains(&rip), "{s}");
        assert!(s["function"].as_str().is_some_and(|f| !f.is_empty()), "{s}");
        if shown < 10 {
            println!(
                "module site: {} {}+{:#x} [{m}] x{}",
                s["reason"],
                s["function"].as_str().unwrap(),
                s["offset"].as_u64().unwrap(),
                s["count"]
            );
            shown += 1;
        }
    }
    assert!(
        output.contains(&format!("{named} named `function [module]`")),
        "{output}"
    );
}

fn check_units(doc: &Value) {
    let units = &doc["units"];
    assert!(units["error"].is_null(), "{}", units["error"]);
    let list = units["units"].as_array().unwrap();
    assert!(list.len() >= 30, "{} units", list.len());
    // Each unit's span is the guest's own, on the VMM's clock.
    let offset = units["clock"]["offset_ns"].as_i64().unwrap();
    for u in list {
        let start = u["start_ns"].as_u64().unwrap() as i64;
        let guest_start = u["guest_start_us"].as_u64().unwrap() as i64;
        assert_eq!(start, guest_start * 1000 + offset, "{u}");
        if let Some(active) = u["active_ns"].as_u64() {
            let guest_active = u["guest_active_us"].as_u64().unwrap();
            assert_eq!(active as i64, guest_active as i64 * 1000 + offset, "{u}");
            assert_eq!(
                active - start as u64,
                u["duration_ns"].as_u64().unwrap(),
                "{u}"
            );
        }
    }
    let chain: Vec<&str> = units["critical_chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        chain.first(),
        Some(&"bootscope-workload.service"),
        "{chain:?}"
    );
    assert!(chain.contains(&"multi-user.target"), "{chain:?}");
    // systemd's own userspace figure against the timeline's: within 5 %;
    // the kernel's differs by the time the kernel ran before its clock
    // started (long under the lab's emulation), which the timeline states.
    let s = &units["startup"];
    let ratio = s["userspace_ratio"].as_f64().unwrap();
    assert!((0.95..=1.05).contains(&ratio), "{s}");
    let before = s["kernel_before_clock_ns"].as_i64().unwrap();
    let gap = s["timeline_kernel_ns"].as_i64().unwrap() - s["kernel_ns"].as_i64().unwrap();
    assert!((gap - before).abs() <= 1_000_000, "{s}");
    assert!(
        before >= -(units["clock"]["error_ns"].as_i64().unwrap()),
        "{s}"
    );
}

#[test]
fn debian_image_boots_to_its_workload_with_units_on_the_timeline() {
    let kernel = require_lab!();
    let dir = scratch("lab-debian");
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let Some(image) = build_image(&dir) else {
        return;
    };
    let version = kernel
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .unwrap()
        .to_string();
    let initrd = Path::new("/boot").join(format!("initrd.img-{version}"));
    if !initrd.is_file() {
        skip_test!("Debian's initrd {} is missing", initrd.display());
    }
    let timeline = dir.join("out/timeline.json");
    let profile = dir.join("out/profile.json");
    let serial = dir.join("out/serial.log");
    let out = bootscope()
        .args(["lab", "--memory", "3G", "--timeout", "3000", "--", "run"])
        .arg("--kernel")
        .arg(&kernel)
        .arg("--initrd")
        .arg(&initrd)
        .arg("--disk")
        .arg(&image)
        .args(["--memory", "512M", "--timeout", "2400"])
        .args(["--cmdline", "console=ttyS0 root=/dev/vda rw quiet panic=-1"])
        .arg("--timeline")
        .arg(&timeline)
        .arg("--exit-sites")
        .arg("--output")
        .arg(&profile)
        .arg("--serial")
        .arg(&serial)
        .output()
        .expect("bootscope lab runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let console = std::fs::read_to_string(&serial).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{stderr}\nconsole:\n{console}"
    );
    let doc: Value = read_json(&timeline);
    assert_eq!(doc["host_kvm"], "svm", "the lab is real nested SVM");
    assert_eq!(
        doc["outcome"]["reason"], "acpi_power_off",
        "{}",
        doc["outcome"]
    );
    let marks: Vec<&str> = doc["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(marks.contains(&"port 0x80: userspace 0x60"), "{marks:?}");
    assert!(marks.contains(&"systemd: started"), "{marks:?}");
    let phase = |name: &str| {
        doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} phase: {}", doc["phases"]))
    };
    assert_eq!(phase("kernel")["to"], "systemd: started");
    assert_eq!(phase("userspace")["from"], "systemd: started");
    check_units(&doc);
    // The summary has the chain and systemd's own line (the lab passes
    // the program's output on through its own standard output).
    let output = format!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(
        output.contains("critical chain to bootscope-workload.service"),
        "{output}"
    );
    assert!(output.contains("Startup finished in"), "{output}");
    let profile: Value = serde_json::from_slice(&std::fs::read(&profile).unwrap()).unwrap();
    check_module_sites(&profile, &output);
    check_modules_archive(&dir, &kernel, &image, &initrd, &profile);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The initrd with only the boot's modules (what advise offers for a long
/// initramfs stage), made from Debian's initrd and the profile's module
/// list: far smaller, and the image boots from it to its workload and
/// powers off.
fn check_modules_archive(dir: &Path, kernel: &Path, image: &Path, initrd: &Path, profile: &Value) {
    let modules: Vec<String> = profile["exits"]["sites"]["symbols"]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    let archive = bootscope_vmm::kernel::initrd_modules::cached_modules_cpio(
        initrd,
        &dir.join("cache"),
        &modules,
    )
    .unwrap();
    let whole = bootscope_vmm::kernel::initrd::uncompressed(&std::fs::read(initrd).unwrap())
        .unwrap()
        .bytes
        .len() as u64;
    let size = std::fs::metadata(&archive).unwrap().len();
    println!(
        "{} modules: {size} bytes of {whole} unpacked",
        modules.len()
    );
    assert!(size < whole / 2, "{size} of {whole}");
    let serial = dir.join("out/serial-modules.log");
    let timeline = dir.join("out/timeline-modules.json");
    let out = bootscope()
        .args(["lab", "--memory", "3G", "--timeout", "3000", "--", "run"])
        .arg("--kernel")
        .arg(kernel)
        .arg("--initrd")
        .arg(&archive)
        .arg("--disk")
        .arg(image)
        .args(["--memory", "512M", "--timeout", "2400", "--no-profile"])
        .args(["--cmdline", "console=ttyS0 root=/dev/vda rw quiet panic=-1"])
        .arg("--timeline")
        .arg(&timeline)
        .arg("--serial")
        .arg(&serial)
        .output()
        .expect("bootscope lab runs");
    let console = std::fs::read_to_string(&serial).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{}\nconsole:\n{console}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = read_json(&timeline);
    assert_eq!(
        doc["outcome"]["reason"], "acpi_power_off",
        "{}",
        doc["outcome"]
    );
    assert!(
        doc["marks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "port 0x80: userspace 0x60"),
        "{}",
        doc["marks"]
    );
}
