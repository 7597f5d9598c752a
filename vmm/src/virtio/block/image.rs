//! A `--disk` image: parsed from `PATH[,readonly]`, checked before it is
//! opened and on the open descriptor (a regular file or an unmounted block
//! device, a whole number of 512-byte sectors: the rules are
//! [`super::checks`]'), opened without blocking and locked as QEMU locks
//! its images (an open file description lock) and as the `flock` command
//! does: exclusive for a writable disk, shared for a read-only one, so two
//! VMs cannot both open one image writable, nor one write what another
//! reads.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use super::checks;
use std::path::{Path, PathBuf};

/// The sector size of the virtio-blk interface.
pub const SECTOR_SIZE: u64 = 512;

/// `--disk PATH[,readonly]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSpec {
    pub path: PathBuf,
    pub readonly: bool,
}

/// Why a `--disk` cannot be used. Every one is bad input.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("--disk {0:?}: give PATH or PATH,readonly")]
    Syntax(String),
    #[error("--disk {spec:?}: unknown option {option:?} (the only option is readonly)")]
    Option { spec: String, option: String },
    #[error("--disk {path}: no such file")]
    Missing { path: String },
    #[error("--disk {path}: cannot open it {how}: {source}")]
    Open {
        path: String,
        how: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--disk {path}: is {what}, not a disk image (give a raw image file or a block device)"
    )]
    NotAnImage { path: String, what: &'static str },
    #[error("--disk {path}: its size, {size} bytes, is not a whole number of 512-byte sectors (a raw image is; `truncate -s` can round it)")]
    Unaligned { path: String, size: u64 },
    #[error("--disk {path}: is empty")]
    Empty { path: String },
    #[error(
        "--disk {path}: is in use by another process ({held}); stop it, or give both ,readonly"
    )]
    Locked { path: String, held: &'static str },
    #[error("--disk {path}: cannot lock it: {source}")]
    Lock {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--disk {path}: given twice")]
    Twice { path: String },
    #[error("--disk {path}: {source}")]
    Link {
        path: String,
        #[source]
        source: bootscope_model::output::OutputError,
    },
    #[error("--disk {path}: is a file of {fs}, a kernel interface, not a disk image (give a raw image file or a block device)")]
    KernelInterface { path: String, fs: &'static str },
    #[error("--disk {path}: is a block device in use (mounted, or held by LVM, a RAID or another program); unmount it or stop its user first")]
    Busy { path: String },
    #[error("--disk {path}: its mode {mode:04o} lets no one write it; add ,readonly to boot it read-only, or make it writable (chmod u+w) if the guest is meant to write it")]
    ReadOnlyMode { path: String, mode: u32 },
    #[error("--disk {path}: changed while it was opened; try again")]
    Changed { path: String },
}

impl std::str::FromStr for DiskSpec {
    type Err = DiskError;

    fn from_str(spec: &str) -> Result<Self, DiskError> {
        let mut parts = spec.split(',');
        let path = parts.next().unwrap_or_default();
        if path.is_empty() {
            return Err(DiskError::Syntax(spec.to_string()));
        }
        let mut readonly = false;
        for option in parts {
            match option {
                "readonly" => readonly = true,
                other => {
                    return Err(DiskError::Option {
                        spec: spec.to_string(),
                        option: other.to_string(),
                    })
                }
            }
        }
        Ok(Self {
            path: PathBuf::from(path),
            readonly,
        })
    }
}

/// An opened, checked and locked disk image.
#[derive(Debug)]
pub struct DiskImage {
    pub file: File,
    pub path: PathBuf,
    pub readonly: bool,
    /// Its size in bytes (a whole number of sectors).
    pub size: u64,
}

impl DiskImage {
    /// Opens and checks `spec`'s image and takes its locks.
    pub fn open(spec: &DiskSpec) -> Result<Self, DiskError> {
        let shown = spec.path.display().to_string();
        let real = bootscope_model::output::follow_links(&spec.path).map_err(|source| {
            DiskError::Link {
                path: shown.clone(),
                source,
            }
        })?;
        let how = if spec.readonly {
            "for reading"
        } else {
            "for reading and writing"
        };
        let open_err = |source: std::io::Error| match source.kind() {
            std::io::ErrorKind::NotFound => DiskError::Missing {
                path: shown.clone(),
            },
            _ if source.raw_os_error() == Some(libc::EBUSY) => DiskError::Busy {
                path: shown.clone(),
            },
            _ => DiskError::Open {
                path: shown.clone(),
                how,
                source,
            },
        };
        // Looked at before it is opened: opening a device can act on it.
        let before = std::fs::symlink_metadata(&real).map_err(open_err)?;
        check_before_open(spec, &shown, &real, &before)?;
        let block = before.file_type().is_block_device();
        // O_NONBLOCK: nothing waits in open(); O_NOFOLLOW: the file looked
        // at is the file opened; O_EXCL on a block device: refused when
        // mounted or held.
        let excl = if block { libc::O_EXCL } else { 0 };
        let file = OpenOptions::new()
            .read(true)
            .write(!spec.readonly)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW | excl)
            .open(&real)
            .map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if (meta.dev(), meta.ino()) != (before.dev(), before.ino()) {
            return Err(DiskError::Changed { path: shown });
        }
        if let Some(fs) = checks::kernel_interface_of(&file) {
            return Err(DiskError::KernelInterface { path: shown, fs });
        }
        let size = if block {
            (&file).seek(SeekFrom::End(0)).map_err(open_err)?
        } else {
            meta.len()
        };
        if size == 0 {
            return Err(DiskError::Empty { path: shown });
        }
        if size % SECTOR_SIZE != 0 {
            return Err(DiskError::Unaligned { path: shown, size });
        }
        lock(&file, spec.readonly, &shown)?;
        checks::take_flock(&file, spec.readonly, &shown)?;
        Ok(Self {
            file,
            path: spec.path.clone(),
            readonly: spec.readonly,
            size,
        })
    }

    /// Opens every spec; the same image twice is refused (a second open
    /// file description would conflict with the first's lock anyway).
    pub fn open_all(specs: &[DiskSpec]) -> Result<Vec<Self>, DiskError> {
        let mut out: Vec<Self> = Vec::new();
        for spec in specs {
            let image = Self::open(spec).map_err(|e| match e {
                DiskError::Locked { .. } if same_file_open(&out, &spec.path) => DiskError::Twice {
                    path: spec.path.display().to_string(),
                },
                e => e,
            })?;
            if same_file_open(&out, &spec.path) {
                return Err(DiskError::Twice {
                    path: spec.path.display().to_string(),
                });
            }
            out.push(image);
        }
        Ok(out)
    }

    /// The serial number `GET_ID` answers: the image's file name, cut to
    /// the interface's 20 bytes.
    pub fn serial(&self) -> String {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut s = String::new();
        for c in name.chars() {
            if s.len() + c.len_utf8() > 20 {
                break;
            }
            s.push(c);
        }
        s
    }
}

/// The checks made on what `real` (`spec`'s path, links followed) is
/// before it is opened.
fn check_before_open(
    spec: &DiskSpec,
    shown: &str,
    real: &Path,
    before: &std::fs::Metadata,
) -> Result<(), DiskError> {
    if let Some(what) = checks::refused_kind(&before.file_type()) {
        return Err(DiskError::NotAnImage {
            path: shown.to_string(),
            what,
        });
    }
    if let Some(fs) = checks::kernel_interface(real) {
        return Err(DiskError::KernelInterface {
            path: shown.to_string(),
            fs,
        });
    }
    if !spec.readonly {
        checks::writable_mode(shown, before)?;
    }
    Ok(())
}

fn same_file_open(open: &[DiskImage], path: &Path) -> bool {
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    open.iter().any(|d| {
        d.file
            .metadata()
            .is_ok_and(|o| o.dev() == m.dev() && o.ino() == m.ino())
    })
}

/// Takes the image's open file description lock: a write lock on the whole
/// file for a writable disk, a read lock for a read-only one. The lock
/// lives as long as the file stays open.
fn lock(file: &File, readonly: bool, shown: &str) -> Result<(), DiskError> {
    // SAFETY: flock is plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = if readonly {
        libc::F_RDLCK as i16
    } else {
        libc::F_WRLCK as i16
    };
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = 0;
    fl.l_len = 0;
    // SAFETY: the descriptor is open for the duration of the call and `fl`
    // is a valid flock the kernel only reads.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if r == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Err(DiskError::Locked {
            path: shown.to_string(),
            held: if readonly {
                "open for writing there"
            } else {
                "open there"
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
    use super::*;

    fn image(size: u64) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(size).unwrap();
        f
    }

    fn spec(path: &Path, readonly: bool) -> DiskSpec {
        DiskSpec {
            path: path.to_path_buf(),
            readonly,
        }
    }

    #[test]
    fn specs_parse() {
        let s: DiskSpec = "/a/b.img".parse().unwrap();
        assert_eq!(s, spec(Path::new("/a/b.img"), false));
        let s: DiskSpec = "b.img,readonly".parse().unwrap();
        assert!(s.readonly);
        assert!(matches!(
            "b.img,ro".parse::<DiskSpec>(),
            Err(DiskError::Option { .. })
        ));
        assert!(matches!(
            ",readonly".parse::<DiskSpec>(),
            Err(DiskError::Syntax(_))
        ));
    }

    #[test]
    fn bad_images_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.img");
        assert!(matches!(
            DiskImage::open(&spec(&missing, false)),
            Err(DiskError::Missing { .. })
        ));
        for ro in [false, true] {
            let e = DiskImage::open(&spec(dir.path(), ro)).unwrap_err();
            assert!(e.to_string().contains("a directory"), "{e}");
        }
        let odd = image(1000);
        let e = DiskImage::open(&spec(odd.path(), false)).unwrap_err();
        assert!(matches!(e, DiskError::Unaligned { size: 1000, .. }), "{e}");
        let empty = image(0);
        assert!(matches!(
            DiskImage::open(&spec(empty.path(), true)),
            Err(DiskError::Empty { .. })
        ));
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = DiskImage::open(&spec(&fifo, true)).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let e = DiskImage::open(&spec(Path::new("/dev/null"), true)).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }

    #[test]
    fn locks_exclude_a_second_writer_and_share_readers() {
        let img = image(4096);
        let w = DiskImage::open(&spec(img.path(), false)).unwrap();
        assert_eq!(w.size, 4096);
        for ro in [false, true] {
            let e = DiskImage::open(&spec(img.path(), ro)).unwrap_err();
            assert!(matches!(e, DiskError::Locked { .. }), "{e}");
        }
        drop(w);
        let r1 = DiskImage::open(&spec(img.path(), true)).unwrap();
        let r2 = DiskImage::open(&spec(img.path(), true)).unwrap();
        assert!(matches!(
            DiskImage::open(&spec(img.path(), false)),
            Err(DiskError::Locked { .. })
        ));
        drop((r1, r2));
        let both = [spec(img.path(), true), spec(img.path(), true)];
        assert!(matches!(
            DiskImage::open_all(&both),
            Err(DiskError::Twice { .. })
        ));
    }

    #[test]
    fn serial_is_the_file_name_cut_to_20_bytes() {
        let d = DiskImage {
            file: tempfile::tempfile().unwrap(),
            path: PathBuf::from("/x/a-very-long-image-name.raw"),
            readonly: true,
            size: 512,
        };
        assert_eq!(d.serial(), "a-very-long-image-na");
    }
}
