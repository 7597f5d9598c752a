//! What `bootscope lab` does with the command it runs: bootscope's own
//! output files come back, the profiled command's arguments reach it as
//! they were given (flags named like bootscope's outputs included), files
//! it names are carried in, and bad input is refused before the lab starts.

mod support;

use support::*;

#[test]
fn bad_lab_input_is_refused_before_the_lab_starts() {
    let dir = scratch("lab-bad-input");
    let d = dir.to_str().unwrap();
    let p = format!("{d}/p.json");
    // The same output from the lab and from the command in it.
    expect_usage_error(
        &[
            "lab", "--output", &p, "--", "profile", "-o", &p, "--", "true",
        ],
        &["lab output", "p.json", "named twice"],
    );
    // profile's default output, named again relative to the same directory.
    let o = run(
        bootscope()
            .current_dir(&dir)
            .args(["lab", "--output", "./profile.json", "--", "profile"])
            .args(["--", "true"]),
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("named twice"), "{}", stderr(&o));
    // An output inside a directory carried in.
    std::fs::create_dir_all(dir.join("data/sub")).unwrap();
    let inside = format!("{d}/data/sub/t.json");
    expect_usage_error(
        &[
            "lab",
            "--input",
            &format!("{d}/data"),
            "--",
            "run",
            "--timeline",
            &inside,
        ],
        &[&inside, "lies in the directory", "--input"],
    );
    // An input that does not exist.
    let missing = format!("{d}/missing.img");
    expect_usage_error(
        &["lab", "--input", &missing, "--", "doctor"],
        &[&missing, "does not exist", "--input"],
    );
    // Not a bootscope command, and no --exe.
    expect_usage_error(
        &["lab", "--", "qemu-system-x86_64", "-serial", "stdio"],
        &["not a valid bootscope command", "--exe PATH"],
    );
    expect_usage_error(
        &["lab", "--", "profile", "--no-such-flag", "--", "true"],
        &["not a valid bootscope command", "--no-such-flag"],
    );
    // Nothing was written.
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, vec!["data"], "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lines `fake-vmm arg: ARG` the fake VMM printed, in order.
fn echoed_args(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("fake-vmm arg: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn profiled_command_arguments_pass_through_unchanged() {
    require_lab!();
    let dir = scratch("lab-pass-through");
    std::fs::create_dir_all(dir.join("images")).unwrap();
    std::fs::write(dir.join("images/kernel"), "kernel contents\n").unwrap();
    // A VMM that prints its arguments and reads the kernel it was given.
    let vmm = dir.join("fake-vmm");
    std::fs::write(
        &vmm,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"fake-vmm arg: $a\"; done\ncat images/kernel\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&vmm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let command: Vec<&str> = ["./fake-vmm", "--kernel", "images/kernel"]
        .into_iter()
        .chain(bootscope_testkit::OUTPUT_LIKE_ARGS)
        .chain([
            "-o",
            "y",
            "--serial=tty",
            "--timeline",
            "t.json",
            "--console",
            "off",
        ])
        .collect();
    let o = run(
        bootscope()
            .current_dir(&dir)
            .args(["lab", "--timeout", "900", "--", "profile", "--"])
            .args(&command),
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    println!("--- lab console ---\n{out}---");
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    assert_eq!(echoed_args(&out), command[1..], "{out}");
    assert!(out.contains("kernel contents"), "{out}");
    // profile's default output came back to the directory it ran in, and
    // it recorded the command as given.
    let p = read_profile(&dir.join("profile.json"));
    assert_eq!(p.target.command, command, "{:?}", p.target);
    assert_eq!(p.target.exit_code, Some(0));
    // The command's own "outputs" were nothing to the lab.
    for name in ["x", "y", "tty", "stdio", "t.json"] {
        assert!(!dir.join(name).exists(), "{name} was written");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_carried_in_and_brought_back_holds_what_the_lab_wrote() {
    require_lab!();
    let busybox = require_busybox!();
    let dir = scratch("lab-in-out-real");
    let img = dir.join("disk.img");
    std::fs::write(&img, "host line\n").unwrap();
    let img_s = img.to_str().unwrap();
    // The command in the lab reads the file carried in and appends to it,
    // as a guest writes its disk image.
    let script = format!("cat {img_s} && echo lab line >> {img_s}");
    let o = run(
        bootscope()
            .current_dir(&dir)
            .args(["lab", "--timeout", "900", "--exe"])
            .arg(&busybox)
            .args([
                "--input", img_s, "--output", img_s, "--", "sh", "-c", &script,
            ]),
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    assert!(out.contains("host line"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&img).unwrap(),
        "host line\nlab line\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn qemu_microvm_is_profiled_in_the_lab_with_its_own_serial_flag() {
    let pre = require_lab_guest!("lab-qemu-microvm");
    let Some((qemu, firmware)) = lab::qemu_for_the_lab() else {
        return;
    };
    let out = pre.dir.join("qemu.json");
    let qemu = qemu.to_str().unwrap();
    // The kernel and initramfs are carried in because the command names
    // them; QEMU's firmware directory is named with --input.
    let command = [
        qemu,
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
        pre.kernel.to_str().unwrap(),
        "-initrd",
        pre.initrd.to_str().unwrap(),
        "-append",
        "console=ttyS0 quiet panic=-1",
    ];
    let o = run(
        bootscope()
            .current_dir(&pre.dir)
            .args(["lab", "--timeout", "900", "--program", qemu, "--input"])
            .arg(firmware)
            .args(["--", "profile", "--output", out.to_str().unwrap(), "--"])
            .args(command),
        None,
    );
    let console = String::from_utf8_lossy(&o.stdout);
    println!("--- lab console ---\n{console}---");
    assert_eq!(o.status.code(), Some(0), "{console}\n{}", stderr(&o));
    // The guest's console reached QEMU's own stdio.
    assert!(
        console
            .lines()
            .any(|l| l.trim_end() == bootscope_lab::guest::HELLO_LINE),
        "{console}"
    );
    assert!(!pre.dir.join("stdio").exists());
    let p = read_profile(&out);
    assert_eq!(p.target.command, command, "{:?}", p.target);
    assert_eq!(p.target.exit_code, Some(0), "{:?}", p.target);
    assert_eq!(p.exits.source, "tracepoint:kvm:kvm_exit");
    let io = p
        .exits
        .by_reason
        .iter()
        .find(|r| r.reason == "io")
        .expect("io exits");
    assert!(io.count > 100, "{io:?}");
    std::fs::remove_dir_all(&pre.dir).unwrap();
}
