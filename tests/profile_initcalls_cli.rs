//! `bootscope profile --initcalls`: the launched command gets the initcall
//! trace parameters on its guest's kernel command line, in the VMM's own
//! options, and the profile records which VMM ran and what was added. The
//! VMMs here are stand-in scripts named as the VMMs are (they record the
//! arguments they were given): no guest boots.

mod support;

use std::path::{Path, PathBuf};

use support::*;

const ADDED: [&str; 3] = [
    "trace_buf_size=512K",
    "trace_event=initcall:*",
    "trace_clock=perf",
];

/// A stand-in VMM named `name` in `dir` that writes its arguments, one a
/// line, to `dir/args`, and the config file it is given to `dir/config`.
fn stand_in(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > {d}/args\n\
         for a in \"$@\"; do case $a in --config-file=*) cat \"${{a#--config-file=}}\" > {d}/config;; esac; done\n",
        d = dir.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn profile_initcalls(out: &Path, command: &[&str]) -> std::process::Output {
    let mut cmd = bootscope();
    cmd.args(["profile", "--initcalls", "--no-summary", "--output"])
        .arg(out)
        .arg("--")
        .args(command);
    run(&mut cmd, None)
}

#[test]
fn bad_vmm_commands_are_refused_before_anything_runs() {
    let dir = scratch("initcalls-refused");
    let out = dir.join("p.json");
    let qemu = stand_in(&dir, "qemu-system-x86_64");
    let o = profile_initcalls(&out, &[qemu.to_str().unwrap(), "-hda", "disk.img"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("--initcalls: QEMU is given no -kernel"),
        "{}",
        text(&o)
    );
    let fc = stand_in(&dir, "firecracker");
    let o = profile_initcalls(
        &out,
        &[
            fc.to_str().unwrap(),
            "--config-file",
            "/nonexistent/vm.json",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("Firecracker's --config-file /nonexistent/vm.json"),
        "{}",
        text(&o)
    );
    let o = profile_initcalls(&out, &["true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("true is not a VMM bootscope knows"),
        "{}",
        text(&o)
    );
    // Nothing ran, nothing was written.
    assert!(!out.exists());
    assert!(!dir.join("args").exists());
    // A running process: what to add, in words.
    let pid = std::process::id().to_string();
    expect_usage_error(
        &["profile", "--initcalls", "--pid", &pid],
        &[
            &format!("--initcalls with --pid {pid}"),
            &format!("add `{}`", ADDED.join(" ")),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn qemu_and_firecracker_commands_are_launched_rewritten() {
    require_bpf!();
    let dir = scratch("initcalls-rewritten");
    let out = dir.join("p.json");
    let qemu = stand_in(&dir, "qemu-system-x86_64");
    let o = profile_initcalls(
        &out,
        &[
            qemu.to_str().unwrap(),
            "-kernel",
            "k",
            "-append",
            "console=ttyS0 quiet",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    let want = format!("console=ttyS0 quiet {}", ADDED.join(" "));
    assert_eq!(args, format!("-kernel\nk\n-append\n{want}\n"));
    assert!(
        stderr(&o).contains("QEMU gets trace_buf_size=512K"),
        "{}",
        text(&o)
    );
    let p = read_json(&out);
    assert_eq!(p["target"]["vmm"]["kind"], "qemu");
    assert_eq!(p["target"]["vmm"]["cmdline"], want.as_str());
    assert_eq!(p["target"]["vmm"]["added"], serde_json::json!(ADDED));
    assert_eq!(p["target"]["command"][4], want.as_str());

    // Firecracker: a private copy of its config; the user's is untouched.
    let fc = stand_in(&dir, "firecracker");
    let cfg = dir.join("vm.json");
    let original = r#"{"boot-source": {"kernel_image_path": "k", "boot_args": "console=ttyS0"}}"#;
    std::fs::write(&cfg, original).unwrap();
    let o = profile_initcalls(
        &out,
        &[
            fc.to_str().unwrap(),
            "--no-api",
            &format!("--config-file={}", cfg.display()),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), original);
    let given: serde_json::Value = read_json(dir.join("config"));
    assert_eq!(
        given["boot-source"]["boot_args"],
        format!("console=ttyS0 {}", ADDED.join(" ")).as_str()
    );
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    let private = args.lines().nth(1).unwrap();
    let private = private.strip_prefix("--config-file=").unwrap();
    assert_ne!(private, cfg.to_str().unwrap());
    assert!(!Path::new(private).exists(), "the private copy is removed");
    assert_eq!(read_json(&out)["target"]["vmm"]["kind"], "firecracker");
    std::fs::remove_dir_all(&dir).unwrap();
}
