//! Where a write to a path lands: its symbolic links followed by the
//! rules of [the module documentation](super), and what is there.

use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::OutputError;
use crate::proc::effective_uid;

/// The symbolic-link hops followed before giving up, as the kernel's
/// `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// Where a write to a path lands once its symbolic links are followed.
pub(super) struct Resolved {
    /// The path of the file itself (no symbolic link).
    pub(super) path: PathBuf,
    /// Its metadata, if it exists.
    pub(super) meta: Option<Metadata>,
}

/// What is at a resolved path, as far as writing goes.
pub(super) enum Kind {
    /// A regular file, or nothing yet: replaced atomically.
    Replace,
    /// A character device or FIFO: written in place.
    InPlace,
}

pub(super) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether the file `meta` in `dir` was planted by another user: `dir` is
/// sticky and world-writable (such as `/tmp`) and the file is owned
/// neither by this user nor by the directory's owner (the rule of the
/// kernel's `fs.protected_symlinks` and `fs.protected_fifos`).
pub(super) fn planted(dir: &Path, meta: &Metadata) -> bool {
    match std::fs::metadata(dir) {
        Ok(d) => {
            let shared = d.mode() & 0o1002 == 0o1002;
            shared && meta.uid() != effective_uid() && meta.uid() != d.uid()
        }
        Err(_) => false,
    }
}

/// Follows the symbolic links of `path`'s last component, refusing the ones
/// [the module documentation](super) says are refused.
pub(super) fn resolve(path: &Path) -> Result<Resolved, OutputError> {
    if path.as_os_str().is_empty() {
        return Err(OutputError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    let mut cur = path.to_path_buf();
    for hop in 0..=MAX_LINKS {
        let meta = match std::fs::symlink_metadata(&cur) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if hop > 0 {
                    return Err(OutputError::DanglingLink {
                        path: path.to_path_buf(),
                        target: cur,
                    });
                }
                return Ok(Resolved {
                    path: cur,
                    meta: None,
                });
            }
            Err(source) => {
                return Err(OutputError::Io {
                    what: "look at",
                    path: cur,
                    source,
                })
            }
        };
        if !meta.file_type().is_symlink() {
            return Ok(Resolved {
                path: cur,
                meta: Some(meta),
            });
        }
        let dir = parent_dir(&cur);
        if planted(&dir, &meta) {
            return Err(OutputError::UntrustedLink {
                path: cur,
                dir,
                owner: meta.uid(),
            });
        }
        let target = std::fs::read_link(&cur).map_err(|source| OutputError::Io {
            what: "read the symbolic link",
            path: cur.clone(),
            source,
        })?;
        cur = if target.is_absolute() {
            target
        } else {
            dir.join(target)
        };
    }
    Err(OutputError::TooManyLinks {
        path: path.to_path_buf(),
    })
}

pub(super) fn kind(r: &Resolved) -> Result<Kind, OutputError> {
    let Some(m) = &r.meta else {
        return Ok(Kind::Replace);
    };
    let t = m.file_type();
    let unsupported = |what| {
        Err(OutputError::Unsupported {
            path: r.path.clone(),
            what,
        })
    };
    if t.is_file() {
        Ok(Kind::Replace)
    } else if t.is_fifo() && planted(&parent_dir(&r.path), m) {
        Err(OutputError::UntrustedFifo {
            path: r.path.clone(),
            dir: parent_dir(&r.path),
            owner: m.uid(),
        })
    } else if t.is_char_device() || t.is_fifo() {
        Ok(Kind::InPlace)
    } else if t.is_dir() {
        Err(OutputError::IsDirectory {
            path: r.path.clone(),
        })
    } else if t.is_block_device() {
        unsupported("block device")
    } else if t.is_socket() {
        unsupported("socket")
    } else {
        unsupported("special file")
    }
}

/// The directory a replaced file's temporary file goes in, checked to
/// exist.
pub(super) fn existing_dir(r: &Resolved) -> Result<PathBuf, OutputError> {
    let dir = parent_dir(&r.path);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        _ => Err(OutputError::NoDirectory {
            path: r.path.clone(),
            dir,
        }),
    }
}
