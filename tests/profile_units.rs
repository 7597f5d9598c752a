//! `bootscope profile -- COMMAND` where the command names a disk image
//! (QEMU's `-hda`): the systemd units of the image's journal, written
//! during the command's run, go into the profile, aligned on the
//! console's `Run /init` line.

mod support;

use std::io::Read;
use std::path::Path;
use std::process::Command;

use support::*;

/// An ext4 image of `tree`, or `None` (with a SKIP line) without mkfs.ext4.
fn image_of(tree: &Path, image: &Path) -> Option<()> {
    let Some(mkfs) = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        println!("SKIP: mkfs.ext4 is not installed (e2fsprogs)");
        return None;
    };
    let ok = Command::new(mkfs)
        .args(["-q", "-F", "-d"])
        .arg(tree)
        .arg(image)
        .arg("16M")
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfs.ext4 failed");
    Some(())
}

/// A systemd root: its manager, a target's unit file and, with `journal`,
/// a journal holding one boot (model's fixture).
fn systemd_tree(root: &Path, journal: bool) {
    let machine = root.join("var/log/journal/0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&machine).unwrap();
    std::fs::create_dir_all(root.join("lib/systemd/system")).unwrap();
    std::fs::write(root.join("lib/systemd/systemd"), b"\x7fELF").unwrap();
    std::fs::write(
        root.join("lib/systemd/system/multi-user.target"),
        "[Unit]\nWants=a.service\n",
    )
    .unwrap();
    if journal {
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(
            std::fs::File::open(in_checkout("model/tests/fixtures/compact.journal.gz")).unwrap(),
        )
        .read_to_end(&mut bytes)
        .unwrap();
        std::fs::write(machine.join("system.journal"), bytes).unwrap();
    }
}

#[test]
fn a_profiled_vmm_s_disk_image_gives_its_units() {
    bootscope_testkit::require_bpf!();
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = (dir.path().join("before"), dir.path().join("after"));
    systemd_tree(&before, false);
    systemd_tree(&after, true);
    let image = dir.path().join("disk.raw");
    let booted = dir.path().join("booted.raw");
    if image_of(&before, &image).is_none() || image_of(&after, &booted).is_none() {
        return;
    }
    // The "VMM": its boot writes the journal into the image it was given
    // and prints the kernel's hand-over line on its console.
    let vmm = dir.path().join("qemu-system-x86_64");
    std::fs::write(
        &vmm,
        format!(
            "#!/bin/sh\ncp {} \"$2\" && echo 'Run /init as init process'\n",
            booted.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&vmm, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let pristine = dir.path().join("pristine.raw");
    std::fs::copy(&image, &pristine).unwrap();
    let out = dir.path().join("p.json");
    let o = profile_command(
        &out,
        &[vmm.to_str().unwrap(), "-hda", image.to_str().unwrap()],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = read_json(&out);
    let units = &p["units"];
    assert!(units.is_object(), "no units in the profile: {p}");
    assert_eq!(units.get("error"), None, "{units}");
    assert!(
        units["source"].as_str().unwrap().contains("disk.raw"),
        "{units}"
    );
    let names: Vec<&str> = units["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"a.service"), "{names:?}");
    assert_eq!(units["chain_target"], "multi-user.target");
    // The journal's "Run /init" (900 µs) sits on the console's line.
    let run_init = p["marks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "serial: run init")
        .expect("the console's run init mark")["t_ns"]
        .as_i64()
        .unwrap();
    assert_eq!(
        units["clock"]["offset_ns"].as_i64().unwrap(),
        run_init - 900_000
    );

    // The same boot with the workload named: the chain ends at it.
    std::fs::copy(&pristine, &image).unwrap();
    let named = dir.path().join("named.json");
    let o = bootscope_output(&[
        "profile",
        "--workload-unit",
        "a.service",
        "--output",
        named.to_str().unwrap(),
        "--",
        vmm.to_str().unwrap(),
        "-hda",
        image.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let units = &read_json(&named)["units"];
    assert_eq!(units.get("error"), None, "{units}");
    assert_eq!(units["chain_target"], "a.service");
    assert_eq!(units["critical_chain"][0]["name"], "a.service");
}

#[test]
fn a_workload_unit_that_is_no_unit_name_exits_2() {
    expect_usage_error(
        &["profile", "--workload-unit", "my app", "--", "true"],
        &["my app", "is not a systemd unit name", "myapp.service"],
    );
    expect_usage_error(
        &["profile", "--workload-unit", "a.service", "--pid", "1"],
        &["--workload-unit", "--pid"],
    );
}
