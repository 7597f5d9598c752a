use super::*;
use std::ffi::OsStr;
use std::os::unix::fs::symlink;

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bootscope-model-test-")
        .tempdir()
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn replaces_a_regular_file_keeping_its_mode_and_leaves_no_temporary() {
    let d = scratch();
    let p = d.path().join("out.json");
    write_file(&p, b"one").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = std::fs::metadata(&p).unwrap().ino();
    write_file(&p, b"two").unwrap();
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"two");
    assert_eq!(m.mode() & 0o7777, 0o640);
    assert_ne!(m.ino(), before, "replaced by a new file, not rewritten");
    assert_eq!(names(d.path()), ["out.json"]);
}

#[test]
fn an_uncommitted_file_leaves_the_path_alone() {
    let d = scratch();
    let p = d.path().join("out.json");
    write_file(&p, b"old").unwrap();
    let mut f = OutputFile::create(&p).unwrap();
    f.write_all(b"half").unwrap();
    drop(f);
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    assert_eq!(names(d.path()), ["out.json"]);
}

#[test]
fn a_character_device_is_written_in_place() {
    write_file(Path::new("/dev/null"), b"nothing").unwrap();
    let m = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(m.file_type().is_char_device());
    check_writable(Path::new("/dev/null")).unwrap();
}

#[test]
fn a_fifo_is_written_in_place() {
    let d = scratch();
    let p = d.path().join("pipe");
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    check_writable(&p).unwrap();
    // No reader: refused at once, not blocked in open().
    let e = write_file(&p, b"nobody").unwrap_err();
    assert!(matches!(e, OutputError::NoReader { .. }), "{e}");
    let mut reader = crate::input::Input::open(&p).unwrap().reader();
    write_file(&p, b"through the pipe").unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut got).unwrap();
    assert_eq!(got, b"through the pipe");
    assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
}

#[test]
fn a_link_to_a_file_is_followed_and_stays_a_link() {
    let d = scratch();
    let real = d.path().join("real.json");
    std::fs::write(&real, b"old").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = d.path().join("link.json");
    symlink("real.json", &link).unwrap();
    write_file(&link, b"new").unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), b"new");
    assert_eq!(std::fs::metadata(&real).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(names(d.path()), ["link.json", "real.json"]);
}

#[test]
fn a_dangling_link_is_refused() {
    let d = scratch();
    let link = d.path().join("link.json");
    let target = d.path().join("elsewhere");
    symlink(&target, &link).unwrap();
    let e = write_file(&link, b"x").unwrap_err();
    assert!(matches!(e, OutputError::DanglingLink { .. }), "{e}");
    assert!(check_writable(&link).is_err());
    assert!(!target.exists());
}

#[test]
fn a_stranger_link_in_a_sticky_directory_is_refused() {
    bootscope_testkit::require_root!("to give a link another owner");
    let d = scratch();
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = shared.join("out.json");
    symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(54321), Some(54321)).unwrap();
    let e = write_file(&link, b"overwritten").unwrap_err();
    assert!(matches!(e, OutputError::UntrustedLink { .. }), "{e}");
    assert!(e.to_string().contains("uid 54321"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // The same link made by the writer itself is followed.
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    write_file(&link, b"mine").unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"mine");
}

#[test]
fn a_stranger_fifo_in_a_sticky_directory_is_not_written() {
    bootscope_testkit::require_root!("to give a FIFO another owner");
    let d = scratch();
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let p = shared.join("out.json");
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    std::os::unix::fs::lchown(&p, Some(54321), Some(54321)).unwrap();
    // Its planter reads it: still refused, nothing written.
    let mut reader = crate::input::Input::open(&p).unwrap().reader();
    for e in [
        write_file(&p, b"secret").unwrap_err(),
        check_writable(&p).unwrap_err(),
        open_stream(&p).unwrap_err(),
    ] {
        assert!(matches!(e, OutputError::UntrustedFifo { .. }), "{e}");
        assert!(e.to_string().contains("uid 54321"), "{e}");
    }
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut got).unwrap();
    assert!(got.is_empty());
    // The same FIFO made by the writer itself is written.
    std::os::unix::fs::lchown(&p, Some(0), Some(0)).unwrap();
    let mut reader = crate::input::Input::open(&p).unwrap().reader();
    write_file(&p, b"mine").unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut got).unwrap();
    assert_eq!(got, b"mine");
}

#[test]
fn output_directories_are_reached_only_by_safe_links() {
    let d = scratch();
    check_out_dir(d.path()).unwrap();
    check_out_dir(&d.path().join("not-yet")).unwrap();
    let link = d.path().join("dangling");
    symlink(d.path().join("nothing"), &link).unwrap();
    assert!(check_out_dir(&link).is_err());
    let file = d.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert!(check_out_dir(&file).is_err());
}

#[test]
fn a_link_planted_at_a_guessable_temporary_name_is_not_used() {
    let d = scratch();
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let p = d.path().join("out.json");
    // Names a writer with a pid-based temporary name would use.
    let pid = std::process::id();
    for name in [
        format!(".out.json.tmp{pid}"),
        ".out.json.tmp".to_string(),
        "out.json.tmp".to_string(),
    ] {
        symlink(&victim, d.path().join(name)).unwrap();
    }
    let mut a = OutputFile::create(&p).unwrap();
    let b = OutputFile::create(&p).unwrap();
    a.write_all(b"output").unwrap();
    drop(b);
    a.commit().unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::read(&p).unwrap(), b"output");
    assert!(!std::fs::symlink_metadata(&p)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_ne!(
        std::fs::metadata(&p).unwrap().ino(),
        std::fs::metadata(&victim).unwrap().ino()
    );
}

fn listed(p: &Path) -> bool {
    temporaries().live.values().any(|l| l == p)
}

#[test]
fn temporary_files_are_listed_while_they_exist() {
    let d = scratch();
    let p = d.path().join("out.json");
    let mut f = OutputFile::create(&p).unwrap();
    let Inner::Temp(t) = &f.inner else {
        panic!("a regular file goes through a temporary file");
    };
    let tmp = t.path().to_path_buf();
    assert!(listed(&tmp));
    f.write_all(b"x").unwrap();
    f.commit().unwrap();
    assert!(!listed(&tmp), "committed: off the list");
    let f = OutputFile::create(&p).unwrap();
    let Inner::Temp(t) = &f.inner else { panic!() };
    let tmp = t.path().to_path_buf();
    drop(f);
    assert!(
        !listed(&tmp) && !tmp.exists(),
        "dropped: removed and off the list"
    );
    let t = Temporary::new_in(d.path(), OsStr::new(".c-"), "", 0o600).unwrap();
    let tmp = t.path().to_path_buf();
    assert!(listed(&tmp));
    t.persist(&d.path().join("c")).unwrap();
    assert!(!listed(&tmp));
    assert_eq!(names(d.path()), ["c", "out.json"]);
}

/// What a signal does: every listed file removed, none made after.
#[test]
fn removing_the_listed_files_closes_the_list() {
    let d = scratch();
    let mut reg = Registry::new();
    let make = || tempfile::Builder::new().prefix(".x.").tempfile_in(d.path());
    let (a, _) = reg.create(make).unwrap();
    let (b, _) = reg.create(make).unwrap();
    let (a, b) = (
        a.into_temp_path().keep().unwrap(),
        b.into_temp_path().keep().unwrap(),
    );
    assert!(a.exists() && b.exists());
    assert_eq!(reg.remove_all(), 2);
    assert!(!a.exists() && !b.exists());
    let e = reg.create(make).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
    assert!(names(d.path()).is_empty(), "{:?}", names(d.path()));
}

#[test]
fn temporary_names_differ() {
    let d = scratch();
    let p = d.path().join("out.json");
    let a = OutputFile::create(&p).unwrap();
    let b = OutputFile::create(&p).unwrap();
    let (Inner::Temp(ta), Inner::Temp(tb)) = (&a.inner, &b.inner) else {
        panic!("a regular file goes through a temporary file");
    };
    assert_ne!(ta.path(), tb.path());
    assert_eq!(ta.path().parent(), Some(d.path()));
}

#[test]
fn unwritable_places_are_refused_before_writing() {
    let d = scratch();
    let e = check_writable(&d.path().join("missing/out.json")).unwrap_err();
    assert!(matches!(e, OutputError::NoDirectory { .. }), "{e}");
    let e = check_writable(d.path()).unwrap_err();
    assert!(matches!(e, OutputError::IsDirectory { .. }), "{e}");
    // procfs takes no new files, even from root.
    let e = check_writable(Path::new("/proc/bootscope-out.json")).unwrap_err();
    assert!(
        e.to_string().contains("cannot create a file in /proc"),
        "{e}"
    );
    assert!(!e.to_string().contains(".tmp"), "no temporary name: {e}");
    check_writable(&d.path().join("out.json")).unwrap();
    assert!(
        names(d.path()).is_empty(),
        "the check leaves nothing behind"
    );
}

#[test]
fn streams_truncate_in_place_and_follow_only_safe_links() {
    let d = scratch();
    let p = d.path().join("serial.log");
    std::fs::write(&p, b"old old old").unwrap();
    let ino = std::fs::metadata(&p).unwrap().ino();
    let mut f = open_stream(&p).unwrap();
    f.write_all(b"new").unwrap();
    drop(f);
    assert_eq!(std::fs::read(&p).unwrap(), b"new");
    assert_eq!(std::fs::metadata(&p).unwrap().ino(), ino);
    let link = d.path().join("dangling");
    symlink(d.path().join("nothing"), &link).unwrap();
    assert!(open_stream(&link).is_err());
    assert!(!d.path().join("nothing").exists());
}

#[test]
fn one_file_named_twice_is_found_however_spelt() {
    let d = scratch();
    let a = d.path().join("a.json");
    let dot = d.path().join(".").join("a.json");
    let link = d.path().join("l.json");
    symlink("a.json", &link).unwrap();
    let other = d.path().join("b.json");
    // Neither exists yet: compared by directory and name.
    let e = check_distinct(&[("--timeline", &a), ("--output", &dot)]).unwrap_err();
    assert!(e.to_string().contains("--timeline"), "{e}");
    assert!(e.to_string().contains("--output"), "{e}");
    check_distinct(&[("--timeline", &a), ("--output", &other)]).unwrap();
    // Existing: by inode, through a link or a hard link.
    std::fs::write(&a, b"").unwrap();
    assert!(check_distinct(&[("--timeline", &a), ("--output", &link)]).is_err());
    let hard = d.path().join("hard.json");
    std::fs::hard_link(&a, &hard).unwrap();
    assert!(check_distinct(&[("-o", &hard), ("--serial", &a)]).is_err());
    let null = Path::new("/dev/null");
    check_distinct(&[("--timeline", null), ("--output", null)]).unwrap();
}

/// A process's scratch directory is its user's alone, whatever the umask
/// (`tempfile` by itself makes it 0777 less the umask), and goes when
/// dropped.
#[test]
fn private_temp_dirs_are_0700_and_removed() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let d = super::private_temp_dir("bootscope-output-test-").unwrap();
    let meta = std::fs::symlink_metadata(d.path()).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
    let euid = crate::proc::effective_uid();
    assert_eq!(meta.uid(), euid);
    let name = d.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("bootscope-output-test-"), "{name}");
    let path = d.path().to_path_buf();
    drop(d);
    assert!(!path.exists());
}
