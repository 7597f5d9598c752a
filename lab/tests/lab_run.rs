//! Runs the real lab: QEMU's emulator boots the host's Debian kernel with
//! nested KVM, runs a program inside and brings its results back.
//!
//! Each test prints `SKIP` with the reason and passes when the host lacks
//! QEMU, a Debian kernel or static busybox. A lab run takes several seconds
//! of emulation.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bootscope_lab::{check_prerequisites, run_lab_with_console, LabConfig, LabError};
use bootscope_testkit::Capture;

const BUSYBOX: &str = "/bin/busybox";

/// A private scratch directory (`tempfile`), removed at the end of the
/// test.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("bootscope-lab-it-{name}-"))
        .tempdir()
        .unwrap()
}

fn lab_available(test: &str) -> bool {
    match check_prerequisites(Path::new("qemu-system-x86_64")) {
        Ok(_) => true,
        Err(e) => {
            println!("SKIP: {test}: {e}");
            false
        }
    }
}

fn config(exe: &str, args: &[&str]) -> LabConfig {
    let mut cfg = LabConfig::new(exe, args.iter().map(OsString::from).collect());
    cfg.memory_mib = 1024;
    cfg.timeout = Duration::from_secs(300);
    cfg
}

fn run(cfg: &LabConfig) -> (Result<bootscope_lab::LabOutcome, LabError>, String) {
    let console = Capture::default();
    let mut sink = console.clone();
    let start = Instant::now();
    let result = run_lab_with_console(cfg, &mut sink);
    let text = console.text();
    println!(
        "--- guest console ({:.1} s wall) ---\n{text}---",
        start.elapsed().as_secs_f64()
    );
    (result, text)
}

/// An input file travels in, two outputs (one named by a relative path
/// through `..`, both in directories that do not exist yet) travel back
/// byte-exact, an output the program does not create is skipped, the
/// arguments arrive as they were given, and the exit code comes back.
#[test]
fn inputs_outputs_and_exit_code_round_trip() {
    if !lab_available("inputs_outputs_and_exit_code_round_trip") {
        return;
    }
    let scratch = scratch("roundtrip");
    let input = scratch.path().join("in put.bin");
    let content: Vec<u8> = (0..20_000u32)
        .flat_map(|i| [(i % 256) as u8, (i * 7 % 253) as u8])
        .chain(b"\r\n\x00\x1b[0m end".iter().copied())
        .collect();
    fs::write(&input, &content).unwrap();
    let out1 = scratch.path().join("new/sub/out1.bin");
    let out2 = scratch.path().join("other/timeline.json");
    let never = scratch.path().join("never/written.txt");
    // Stale copy from an earlier run: it must be replaced, not appended to.
    fs::create_dir_all(out2.parent().unwrap()).unwrap();
    fs::write(&out2, b"stale").unwrap();

    let script = r#"test -c /dev/kvm || exit 99
cat "$1" > "$3"
cat "$1" "$1" "$1" > "${4#--timeline=}"
echo "guest: wrote outputs; args: $2 $5 $6"
exit 3"#;
    // The outputs are named relative to the directory the lab starts in.
    let cwd = std::env::current_dir().unwrap();
    let rel = |p: &Path| {
        let up = cwd.components().count() - 1;
        let mut r = PathBuf::new();
        for _ in 0..up {
            r.push("..");
        }
        r.join(p.strip_prefix("/").unwrap())
    };
    let rel_out2 = rel(&out2.parent().unwrap().join("x/../timeline.json"));
    let timeline_arg = format!("--timeline={}", rel_out2.display());
    let mut cfg = config(
        BUSYBOX,
        &[
            "sh",
            "-c",
            script,
            "lab-test",
            input.to_str().unwrap(),
            "--output",
            out1.to_str().unwrap(),
            &timeline_arg,
            "-o",
            "--serial",
        ],
    );
    cfg.outputs = vec![out1.clone(), rel_out2, never.clone()];
    let (result, console) = run(&cfg);
    let outcome = result.unwrap_or_else(|e| panic!("lab run failed: {e}"));
    println!(
        "lab run took {:.2} s (QEMU start to exit)",
        outcome.elapsed.as_secs_f64()
    );
    assert_eq!(outcome.exit_code, 3, "console:\n{console}");
    assert!(outcome.nested_kvm);
    assert!(
        console.contains("lab: nested KVM ready (kvm_amd npt=Y)"),
        "{console}"
    );
    assert!(
        console.contains("guest: wrote outputs; args: --output -o --serial"),
        "{console}"
    );
    assert_eq!(outcome.outputs, vec![out1.clone(), out2.clone()]);
    assert_eq!(fs::read(&out1).unwrap(), content);
    let tripled: Vec<u8> = content
        .iter()
        .chain(&content)
        .chain(&content)
        .copied()
        .collect();
    assert_eq!(fs::read(&out2).unwrap(), tripled);
    assert!(!never.exists());
    assert!(!never.parent().unwrap().exists());
    // Only the final files are left: no temporary files next to them.
    assert_eq!(fs::read_dir(out1.parent().unwrap()).unwrap().count(), 1);
    assert_eq!(fs::read_dir(out2.parent().unwrap()).unwrap().count(), 1);
}

/// A dynamically linked program runs in the guest (its libraries and
/// loader are carried along) and sees `/dev/kvm` and the mounted tracefs.
#[test]
fn dynamic_program_sees_kvm_and_tracefs() {
    if !lab_available("dynamic_program_sees_kvm_and_tracefs") {
        return;
    }
    // GNU env from coreutils is dynamically linked on Debian.
    let env = "/usr/bin/env";
    let scratch = scratch("dynamic");
    let input = scratch.path().join("data.txt");
    fs::write(&input, b"carried in\n").unwrap();
    let cfg = config(
        env,
        &[
            "/bin/sh",
            "-c",
            "test -c /dev/kvm && test -d /sys/kernel/tracing/events/kvm && cat \"$1\" && echo lab-env-ok",
            "sh",
            input.to_str().unwrap(),
        ],
    );
    let (result, console) = run(&cfg);
    let outcome = result.unwrap_or_else(|e| panic!("lab run failed: {e}"));
    assert_eq!(outcome.exit_code, 0, "console:\n{console}");
    assert!(outcome.nested_kvm);
    assert!(console.contains("carried in"), "{console}");
    assert!(console.contains("lab-env-ok"), "{console}");
    assert!(outcome.outputs.is_empty());
}

/// An extra program arrives at its own path with its shared libraries, and
/// a directory input arrives with everything under it (links followed).
#[test]
fn extra_programs_and_directory_inputs() {
    if !lab_available("extra_programs_and_directory_inputs") {
        return;
    }
    let scratch = scratch("extras");
    let tree = scratch.path().join("tree");
    fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    fs::write(tree.join("top.txt"), b"from the top\n").unwrap();
    fs::write(tree.join("sub/deeper/deep.txt"), b"from deep down\n").unwrap();
    std::os::unix::fs::symlink("top.txt", tree.join("alias.txt")).unwrap();
    // GNU env (dynamically linked) at /usr/bin/env, not busybox's applet.
    let script = r#"cat "$1/sub/deeper/deep.txt" "$1/alias.txt" && /usr/bin/env --version | head -n 1 && echo lab-extras-ok"#;
    let mut cfg = config(BUSYBOX, &["sh", "-c", script, "sh", tree.to_str().unwrap()]);
    cfg.extra_programs = vec![PathBuf::from("/usr/bin/env")];
    cfg.extra_inputs = vec![tree.clone()];
    let (result, console) = run(&cfg);
    let outcome = result.unwrap_or_else(|e| panic!("lab run failed: {e}"));
    assert_eq!(outcome.exit_code, 0, "console:\n{console}");
    assert!(console.contains("from deep down"), "{console}");
    assert!(console.contains("from the top"), "{console}");
    assert!(console.contains("GNU coreutils"), "{console}");
    assert!(console.contains("lab-extras-ok"), "{console}");

    // A missing extra program is reported by name before anything runs.
    let mut cfg = config(BUSYBOX, &["true"]);
    cfg.extra_programs = vec![PathBuf::from("/nonexistent/tool")];
    let err = run_lab_with_console(&cfg, &mut std::io::sink()).unwrap_err();
    assert!(matches!(err, LabError::ProgramMissing { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/tool"), "{err}");
}

/// A run that outlives its timeout is stopped with a clear error.
#[test]
fn timeout_kills_qemu() {
    if !lab_available("timeout_kills_qemu") {
        return;
    }
    let mut cfg = config(BUSYBOX, &["sleep", "600"]);
    cfg.timeout = Duration::from_secs(3);
    let start = Instant::now();
    let (result, _) = run(&cfg);
    let err = result.unwrap_err();
    assert!(matches!(err, LabError::Timeout { .. }), "{err}");
    assert!(
        err.to_string().contains("did not finish within 3 s"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

/// A lab machine that stops running anything is caught by its heartbeat
/// long before the timeout, and started again once: here the heartbeat is
/// stopped on purpose (every process writing it gets SIGSTOP) while the
/// program sleeps on, in both attempts.
#[test]
fn frozen_lab_machine_is_caught_by_its_heartbeat() {
    if !lab_available("frozen_lab_machine_is_caught_by_its_heartbeat") {
        return;
    }
    let script = r#"n=0
for p in /proc/[0-9]*; do
	if ls -l "$p/fd" 2>/dev/null | grep -q ttyS2; then kill -STOP "${p#/proc/}" && n=$((n+1)); fi
done
echo "guest: stopped $n heartbeat processes"
sleep 600"#;
    let mut cfg = config(BUSYBOX, &["sh", "-c", script]);
    cfg.freeze_after = Duration::from_secs(10);
    cfg.frozen_retries = 1;
    let start = Instant::now();
    let (result, console) = run(&cfg);
    let err = result.unwrap_err();
    assert!(matches!(err, LabError::Frozen { .. }), "{err}");
    assert!(!console.contains("stopped 0 heartbeat"), "{console}");
    assert_eq!(
        console.matches("guest: stopped").count(),
        2,
        "two attempts: {console}"
    );
    assert!(
        console.contains("the lab machine froze (no heartbeat for 10 s")
            && console.contains("starting it again (attempt 2 of 2)"),
        "{console}"
    );
    let text = err.to_string();
    assert!(text.contains("the lab machine froze"), "{text}");
    assert!(text.contains("--retries N"), "{text}");
    // Well before the 300 s timeout: twice boot, the stop, 10 s of silence.
    assert!(
        start.elapsed() < Duration::from_secs(200),
        "{:?}",
        start.elapsed()
    );
}

/// A heartbeat silence too short to mean anything is refused.
#[test]
fn too_short_freeze_limit_is_refused() {
    let mut cfg = config(BUSYBOX, &["true"]);
    cfg.freeze_after = Duration::from_secs(3);
    let err = run_lab_with_console(&cfg, &mut std::io::sink()).unwrap_err();
    assert!(matches!(err, LabError::InvalidConfig(_)), "{err}");
    assert!(err.to_string().contains("at least 10 s"), "{err}");
}

/// Without QEMU the error says what to install.
#[test]
fn missing_qemu_is_reported() {
    let mut cfg = config(BUSYBOX, &["true"]);
    cfg.qemu = PathBuf::from("/nonexistent/qemu-system-x86_64");
    let err = run_lab_with_console(&cfg, &mut std::io::sink()).unwrap_err();
    assert!(matches!(err, LabError::QemuMissing { .. }), "{err}");
    assert!(
        err.to_string().contains("apt-get install qemu-system-x86"),
        "{err}"
    );
}

/// A missing program is reported by name.
#[test]
fn missing_program_is_reported() {
    if !lab_available("missing_program_is_reported") {
        return;
    }
    let cfg = config("/nonexistent/bootscope", &["--help"]);
    let err = run_lab_with_console(&cfg, &mut std::io::sink()).unwrap_err();
    assert!(matches!(err, LabError::ExeMissing { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/bootscope"), "{err}");
}

/// The default guest initramfs boots to userspace under plain QEMU (no
/// KVM needed), prints its line and writes 0x60 to port 0x80, which an
/// `isa-debugcon` device on that port records.
#[test]
fn default_guest_boots_and_marks_userspace() {
    if !lab_available("default_guest_boots_and_marks_userspace") {
        return;
    }
    let kernel = bootscope_lab::find_debian_kernel().unwrap();
    let scratch = scratch("default-guest");
    let initramfs = scratch.path().join("guest.cpio");
    bootscope_lab::build_default_initramfs(&initramfs).unwrap();
    let port80 = scratch.path().join("port80.bin");
    let start = Instant::now();
    let out = Command::new("timeout")
        .arg("300")
        .arg("qemu-system-x86_64")
        .args([
            "-accel", "tcg", "-m", "512", "-smp", "1", "-display", "none",
        ])
        .args(["-nodefaults", "-no-user-config", "-no-reboot"])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(&initramfs)
        .args(["-append", "console=ttyS0 quiet panic=-1"])
        .args(["-serial", "stdio"])
        .arg("-chardev")
        .arg(format!("file,id=p80,path={}", port80.display()))
        .args(["-device", "isa-debugcon,iobase=0x80,chardev=p80"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let console = String::from_utf8_lossy(&out.stdout);
    println!(
        "default guest: {:.1} s wall\n{console}\n{}",
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "QEMU failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        console
            .lines()
            .any(|l| l.trim_end() == "bootscope-guest: hello from userspace"),
        "{console}"
    );
    let marker = fs::read(&port80).unwrap();
    assert!(marker.contains(&0x60), "port 0x80 saw {marker:02x?}");
}
