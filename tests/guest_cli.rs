//! `bootscope guest build debian` refusing bad input and hosts that cannot
//! build: exit status 2, a message naming the problem, nothing at --out.
//! `bootscope guest build default` writing the default guest's initramfs
//! where asked and printing the paths scripts read.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::*;

fn build(args: &[&str], cache: &Path, out: &Path) -> Output {
    bootscope()
        .args(["guest", "build", "debian"])
        .args(args)
        .arg("--out")
        .arg(out)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap()
}

#[test]
fn bad_sizes_are_refused_before_anything_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("image.raw");
    for (size, words) in [
        ("lots", "--size \"lots\""),
        ("100M", "too small"),
        ("2T", "larger than 1 TiB"),
        ("0", "--size"),
    ] {
        let o = build(&["--size", size], dir.path(), &out);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{size}: {stderr}");
        assert!(stderr.contains(words), "{size}: {stderr}");
        assert!(!out.exists());
    }
}

#[test]
fn no_room_for_the_build_is_bad_input() {
    require_root!("to mount a small file system for the cache");
    require_program!("mmdebstrap", "scripts/deps.sh installs it");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
        .arg(&cache)
        .status()
        .unwrap();
    assert!(mounted.success());
    let out = dir.path().join("image.raw");
    let o = build(&[], &cache, &out);
    let _ = Command::new("umount").arg(&cache).status();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no room for the build"), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn no_network_to_the_packages_is_bad_input() {
    require_root!("for a network namespace without a network");
    require_program!("mmdebstrap", "scripts/deps.sh installs it");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("image.raw");
    // A fresh cache (no image to copy) in a network namespace of its own
    // with only a loopback that is down.
    let o = Command::new("unshare")
        .arg("--net")
        .arg(env!("CARGO_BIN_EXE_bootscope"))
        .args(["guest", "build", "debian", "--out"])
        .arg(&out)
        .env("XDG_CACHE_HOME", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot reach Debian's packages"),
        "{stderr}"
    );
    assert!(!out.exists());
    // The failed build left no directory of its own in the cache.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("bootscope/guests"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn build_default(args: &[&str]) -> Output {
    bootscope()
        .args(["guest", "build", "default"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_default_guest_is_built_where_asked_and_its_paths_printed() {
    let Ok(kernel) = bootscope_lab::find_debian_kernel() else {
        skip("no Debian kernel in /boot (the default guest boots it)");
        return;
    };
    if bootscope_lab::guest::static_busybox().is_err() {
        skip("no static busybox (scripts/deps.sh installs busybox-static)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("guest.cpio");
    let o = build_default(&["--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let printed: Vec<String> = stdout(&o).lines().map(String::from).collect();
    assert_eq!(
        printed,
        [
            kernel.vmlinuz.display().to_string(),
            out.display().to_string()
        ]
    );
    // The initramfs is the default guest's: its init prints the hello line.
    let entries = bootscope_lab::cpio::read_entries(&std::fs::read(&out).unwrap()).unwrap();
    let init = entries
        .iter()
        .find(|e| e.name == Path::new("init"))
        .expect("an init");
    assert!(String::from_utf8_lossy(&init.data).contains(bootscope_lab::guest::HELLO_LINE));
}

#[test]
fn the_default_guest_refuses_an_out_path_it_cannot_write() {
    if bootscope_lab::find_debian_kernel().is_err() {
        skip("no Debian kernel in /boot (the default guest boots it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("missing").join("guest.cpio");
    let o = build_default(&["--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("missing"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    assert!(!out.exists());
}

/// `guest build debian` with the cache under `xdg`: refused, exit 2, with
/// every needle in the message, before anything is built or written.
fn expect_cache_refused(xdg: &Path, needles: &[&str]) {
    let out = xdg.parent().unwrap().join("image.raw");
    let o = build(&[], xdg, &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not trusted as a cache"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n}: {stderr}");
    }
    assert!(!out.exists());
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn an_open_guest_image_cache_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    let cache = xdg.join("bootscope");
    std::fs::create_dir_all(cache.join("guests")).unwrap();
    set_mode(&xdg, 0o700);
    // The cache directory world-writable: anyone could swap `guests`.
    set_mode(&cache, 0o777);
    expect_cache_refused(&xdg, &["world-writable", "bootscope"]);
    set_mode(&cache, 0o700);
    // `guests` itself group-writable.
    set_mode(&cache.join("guests"), 0o770);
    expect_cache_refused(&xdg, &["group-writable", "guests"]);
    set_mode(&cache.join("guests"), 0o700);
    // A directory above it world-writable and not sticky.
    set_mode(&xdg, 0o777);
    expect_cache_refused(&xdg, &["the directory above it", "world-writable"]);
}

#[test]
fn a_guest_image_cache_of_another_user_is_refused() {
    require_root!("to give the cache directory another owner");
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    let cache = xdg.join("bootscope");
    std::fs::create_dir_all(cache.join("guests")).unwrap();
    set_mode(&xdg, 0o700);
    std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).unwrap();
    expect_cache_refused(&xdg, &["owned by uid 65534", "bootscope"]);
    std::os::unix::fs::chown(&cache, Some(0), Some(0)).unwrap();
    std::os::unix::fs::chown(cache.join("guests"), Some(65534), Some(65534)).unwrap();
    expect_cache_refused(&xdg, &["owned by uid 65534", "guests"]);
    // Above the cache, a directory another user owns: it could rename
    // the cache away after the check.
    std::os::unix::fs::chown(cache.join("guests"), Some(0), Some(0)).unwrap();
    std::os::unix::fs::chown(&xdg, Some(65534), Some(65534)).unwrap();
    expect_cache_refused(&xdg, &["the directory above it", "uid 65534"]);
}
