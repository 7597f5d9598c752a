//! What a `--disk` must be before it is opened, and the locks taken once it
//! is: the rules of docs/architecture.md (Trust rules, disks).
//!
//! - Its symbolic links are followed by the outputs' rules
//!   ([`bootscope_model::output::follow_links`]): a link planted by another
//!   user in a sticky world-writable directory is refused.
//! - It is looked at before it is opened (opening a device can act on it):
//!   only a regular file or a block device is opened, and a regular file of
//!   a kernel interface (sysfs, procfs, debugfs, ...) is refused.
//! - A block device is opened with `O_EXCL`: one that is mounted, or held
//!   by LVM, a RAID or another exclusive opener, is refused.
//! - A writable disk must have its write permission bits set: root writes
//!   through any mode, so a 0444 image would otherwise become writable.
//! - Once open it is locked both ways other programs lock images: an open
//!   file description lock (QEMU's, which also meets POSIX locks) and a BSD
//!   `flock` (the `flock` command's); either one held elsewhere refuses it.

use std::fs::{File, Metadata};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use super::image::DiskError;

/// File systems whose files are kernel interfaces, not storage: their
/// regular files (a sysfs attribute says it has 4096 bytes) are refused.
const KERNEL_INTERFACES: [(i64, &str); 13] = [
    (0x6265_6572, "sysfs"),
    (0x9fa0, "procfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x6265_6570, "configfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0xcafe_4a11, "bpf"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x4249_4e4d, "binfmt_misc"),
];

/// What the file type of a disk is called when it is refused; None for a
/// regular file or a block device.
pub(super) fn refused_kind(t: &std::fs::FileType) -> Option<&'static str> {
    if t.is_file() || t.is_block_device() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() {
        Some("a character device")
    } else {
        Some("not a regular file")
    }
}

/// The kernel interface file system `path` is on, if it is on one.
pub(super) fn kernel_interface(path: &Path) -> Option<&'static str> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a valid statfs to fill.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    interface_name(st.f_type as i64)
}

/// [`kernel_interface`] of an open file.
pub(super) fn kernel_interface_of(file: &File) -> Option<&'static str> {
    // SAFETY: as in kernel_interface.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open and `st` a valid statfs to fill.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    interface_name(st.f_type as i64)
}

fn interface_name(magic: i64) -> Option<&'static str> {
    let magic = magic & 0xffff_ffff;
    KERNEL_INTERFACES
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// Refuses a writable disk whose permission bits let no one write it (its
/// owner's when this user owns it): root's open would succeed regardless.
pub(super) fn writable_mode(shown: &str, meta: &Metadata) -> Result<(), DiskError> {
    let me = bootscope_model::proc::effective_uid();
    let bits = if meta.uid() == me { 0o200 } else { 0o222 };
    if meta.mode() & bits == 0 {
        return Err(DiskError::ReadOnlyMode {
            path: shown.to_string(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Takes a BSD `flock` on the disk, shared for a read-only disk, exclusive
/// otherwise; refused when another open file holds a conflicting one.
pub(super) fn take_flock(file: &File, readonly: bool, shown: &str) -> Result<(), DiskError> {
    let how = if readonly {
        libc::LOCK_SH
    } else {
        libc::LOCK_EX
    };
    // SAFETY: the descriptor is open for the duration of the call.
    if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Err(DiskError::Locked {
            path: shown.to_string(),
            held: if readonly {
                "flock'ed for writing there"
            } else {
                "flock'ed there"
            },
        }),
        _ => Err(DiskError::Lock {
            path: shown.to_string(),
            source: err,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::image::{DiskImage, DiskSpec};
    use super::*;
    use std::path::PathBuf;

    fn spec(path: &Path, readonly: bool) -> DiskSpec {
        DiskSpec {
            path: path.to_path_buf(),
            readonly,
        }
    }

    fn image(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, vec![0u8; 4096]).unwrap();
        p
    }

    #[test]
    fn a_sysfs_attribute_is_refused() {
        let attr = Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
        let attr = if attr.exists() {
            attr
        } else {
            Path::new("/sys/kernel/uevent_seqnum")
        };
        assert_eq!(kernel_interface(attr), Some("sysfs"));
        for ro in [false, true] {
            let e = DiskImage::open(&spec(attr, ro)).unwrap_err();
            assert!(matches!(e, DiskError::KernelInterface { .. }), "{e}");
            assert!(e.to_string().contains("sysfs"), "{e}");
        }
        let e = DiskImage::open(&spec(Path::new("/proc/self/status"), true)).unwrap_err();
        assert!(e.to_string().contains("procfs"), "{e}");
        assert_eq!(kernel_interface(Path::new("/")), None);
    }

    #[test]
    fn a_flock_held_elsewhere_refuses_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path(), "held.img");
        // Another open file description holds the flock: a separate open,
        // as another process's would be.
        let other = File::open(&p).unwrap();
        // SAFETY: the descriptor is open.
        assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_SH) }, 0);
        let e = DiskImage::open(&spec(&p, false)).unwrap_err();
        assert!(matches!(e, DiskError::Locked { .. }), "{e}");
        assert!(e.to_string().contains("flock"), "{e}");
        // Readers share it.
        drop(DiskImage::open(&spec(&p, true)).unwrap());
        // SAFETY: as above.
        assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX) }, 0);
        let e = DiskImage::open(&spec(&p, true)).unwrap_err();
        assert!(e.to_string().contains("flock'ed for writing"), "{e}");
        drop(other);
        // And a disk in use holds one that `flock` users see.
        let d = DiskImage::open(&spec(&p, false)).unwrap();
        let probe = File::open(&p).unwrap();
        // SAFETY: as above.
        let r = unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        assert_eq!(r, -1);
        drop(d);
    }

    #[test]
    fn an_image_nobody_may_write_needs_readonly() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path(), "ro.img");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
        let e = DiskImage::open(&spec(&p, false)).unwrap_err();
        if bootscope_testkit::is_root() {
            assert!(
                matches!(e, DiskError::ReadOnlyMode { mode: 0o444, .. }),
                "{e}"
            );
            assert!(e.to_string().contains(",readonly"), "{e}");
        }
        drop(DiskImage::open(&spec(&p, true)).unwrap());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(DiskImage::open(&spec(&p, false)).unwrap());
    }

    #[test]
    fn a_link_planted_in_a_shared_directory_is_not_followed() {
        bootscope_testkit::require_root!("to plant a link as another user");
        let dir = tempfile::tempdir().unwrap();
        let target = image(dir.path(), "target.img");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let link = shared.join("disk.img");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let e = DiskImage::open(&spec(&link, false)).unwrap_err();
        assert!(matches!(e, DiskError::Link { .. }), "{e}");
        assert!(e.to_string().contains("uid 65534"), "{e}");
        // The directory's owner may: the same link owned by it is followed.
        std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
        drop(DiskImage::open(&spec(&link, false)).unwrap());
    }
}
