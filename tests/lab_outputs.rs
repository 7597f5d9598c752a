//! The files `bootscope lab` writes back (its own `--output`, the outputs
//! of the command it runs) follow the rules of every other output, and are
//! checked before the lab starts: no lab is booted here. Each command runs
//! with a `PATH` that holds no QEMU, so a check made only after the lab's
//! preparation would show as QEMU missing instead of the refusal.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use support::*;

/// `bootscope lab ARGS` where no QEMU can be found.
fn lab(args: &[&str]) -> Output {
    bootscope()
        .arg("lab")
        .args(args)
        .env("PATH", "/nonexistent")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("bootscope runs")
}

/// Expects exit 2 with every needle in standard error, and no QEMU looked
/// for.
fn expect_refused(args: &[&str], needles: &[&str]) {
    let o = lab(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("QEMU"), "{args:?}: checked too late: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}: {err}");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_full_device_is_refused_as_a_lab_output() {
    expect_refused(
        &["--output", "/dev/full", "--exe", "/bin/true", "--", "x"],
        &["--output", "/dev/full"],
    );
    // The same for an output of the command run in the lab.
    expect_refused(
        &[
            "--",
            "run",
            "--kernel",
            "/bin/true",
            "--timeline",
            "/dev/full",
        ],
        &["the output of the command in the lab", "/dev/full"],
    );
}

#[test]
fn an_output_that_is_a_program_carried_in_is_refused_and_kept() {
    let d = scratch("lab-out-in");
    let data = d.join("data.bin");
    std::fs::write(&data, b"input data").unwrap();
    let exe = d.join("prog");
    std::fs::copy("/bin/true", &exe).unwrap();
    let other = d.join("other-name");
    std::os::unix::fs::symlink(&data, &other).unwrap();
    let e = s(&exe);
    for (args, flag) in [
        (
            vec!["--program", s(&data), "--output", s(&data)],
            "--program",
        ),
        // The same file by another name.
        (
            vec!["--program", s(&data), "--output", s(&other)],
            "--program",
        ),
    ] {
        let mut all = args.clone();
        all.extend(["--exe", "/bin/true", "--", "x"]);
        expect_refused(&all, &["--output", flag, "would destroy what is read"]);
    }
    expect_refused(
        &["--exe", e, "--output", e, "--", "x"],
        &["--output", "the program run in the lab"],
    );
    // The command run in the lab writing over a file carried in.
    expect_refused(
        &[
            "--input",
            s(&data),
            "--",
            "run",
            "--kernel",
            "/bin/true",
            "--timeline",
            s(&data),
        ],
        &["the output of the command in the lab", "--input"],
    );
    assert_eq!(std::fs::read(&data).unwrap(), b"input data");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_input_the_lab_also_brings_back_goes_on_to_the_lab() {
    // `--input IMG --output IMG`: carried in, brought back after the run
    // (tests/lab_args.rs runs it); nothing refused, the lab goes on to
    // look for QEMU (absent here), the file untouched.
    let d = scratch("lab-in-out");
    let img = d.join("disk.img");
    std::fs::write(&img, b"image").unwrap();
    let o = lab(&[
        "--input",
        s(&img),
        "--output",
        s(&img),
        "--",
        "run",
        "--kernel",
        "/bin/true",
        "--disk",
        s(&img),
    ]);
    let err = stderr(&o);
    assert!(err.contains("QEMU"), "{err}");
    assert!(!err.contains("would destroy"), "{err}");
    assert_eq!(std::fs::read(&img).unwrap(), b"image");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_link_planted_in_a_sticky_directory_is_refused_as_a_lab_output() {
    require_root!("to plant a link as another user");
    let d = scratch("lab-out-planted");
    let victim = d.join("victim.txt");
    std::fs::write(&victim, b"kept").unwrap();
    // A sticky world-writable directory, as /tmp is; a link in it owned by
    // a user who is neither this one nor the directory's owner.
    let shared = d.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
    let link = shared.join("out.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65533), Some(65533)).unwrap();
    expect_refused(
        &["--output", s(&link), "--exe", "/bin/true", "--", "x"],
        &["--output", "symbolic link owned by uid 65533"],
    );
    expect_refused(
        &["--", "run", "--kernel", "/bin/true", "--timeline", s(&link)],
        &[
            "the output of the command in the lab",
            "symbolic link owned by uid 65533",
        ],
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"kept");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn outputs_that_pass_the_checks_go_on_to_the_lab() {
    // Nothing refused: the lab goes on to look for QEMU (absent here),
    // having written nothing. A missing directory is made by the lab when
    // it writes the file back, so it is not refused either.
    let d = scratch("lab-out-good");
    let good = d.join("out.json");
    let later = d.join("later/out.json");
    let o = lab(&[
        "--output",
        s(&good),
        "--output",
        s(&later),
        "--exe",
        "/bin/true",
        "--",
        "x",
    ]);
    let err = stderr(&o);
    assert!(err.contains("QEMU"), "{err}");
    assert!(!good.exists() && !later.exists(), "nothing written");
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&d);
}
