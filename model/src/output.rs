//! Writing output files safely.
//!
//! Every file bootscope writes goes through here. The rules:
//!
//! - A regular file (or a path where nothing is yet) is replaced
//!   atomically: the data goes to a temporary file in the same directory,
//!   created by [`tempfile`] with an unpredictable name and `O_EXCL` (so a
//!   symbolic link planted under any name cannot redirect it), is flushed
//!   to disk, then renamed over the path. A reader never sees half a file.
//!   A file that already exists keeps its permission bits (and, where the
//!   writer may set them, its owner and group); a new one gets `0666`
//!   less the umask, as with `File::create`.
//! - A character device or a FIFO (`/dev/null`, `/dev/stdout`, a named
//!   pipe) is written in place: it is opened for writing, never replaced by
//!   a regular file. The open never blocks (`O_NONBLOCK`, then back to
//!   blocking writes): a FIFO that no process reads is refused at once
//!   instead of holding the command in `open()`. A FIFO in a sticky
//!   world-writable directory (such as `/tmp`) owned neither by this user
//!   nor by the directory's owner is refused, the rule of the kernel's
//!   `fs.protected_fifos` (and the same rule as for links, below): another
//!   user planted it to read what is written.
//! - A block device, a socket or a directory is refused.
//! - A symbolic link is followed, like a shell's `>` or GNU `sort -o`: the
//!   file it points to is written (atomically, by the rules above) and the
//!   link stays a link. It is refused where following it would be unsafe
//!   or surprising: a link to nothing (a planted dangling link would make
//!   the writer create a file of the link owner's choosing), and a link in
//!   a sticky world-writable directory (such as `/tmp`) owned neither by
//!   this user nor by the directory's owner, the rule of the kernel's
//!   `fs.protected_symlinks`.
//!
//! [`check_writable`] tells before a long run whether a path can be
//! written, and [`check_distinct`] whether two outputs of one command name
//! the same file.
//!
//! Every temporary file made here (and by [`Temporary`], for other
//! writers of their own) is listed while it exists, so that a process
//! ended by a signal can remove them first: [`remove_temporary_files`],
//! which the `bootscope` binary's SIGINT/SIGTERM handling calls before it
//! exits. A temporary file is created and listed under one lock, so none
//! escapes the list; once the list is closed no new one is made.
//!
//! Here the writer; `resolve.rs` where a path leads and what is there,
//! `temporary.rs` the list of temporary files.

use std::ffi::CString;
use std::fs::{File, Metadata, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why an output cannot be written. Each message names the path and what
/// to do.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{} is a directory; give a file name", path.display())]
    IsDirectory { path: PathBuf },
    #[error("{}: directory {} does not exist; create it first", path.display(), dir.display())]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error("{} is a symbolic link to {}, which does not exist; remove the link or name the file itself", path.display(), target.display())]
    DanglingLink { path: PathBuf, target: PathBuf },
    #[error("{} is a symbolic link owned by uid {owner} in the shared directory {}; links there are not followed unless this user or the directory's owner made them: remove it or name the file itself", path.display(), dir.display())]
    UntrustedLink {
        path: PathBuf,
        dir: PathBuf,
        owner: u32,
    },
    #[error("{} is a FIFO owned by uid {owner} in the shared directory {}; FIFOs there are not written unless this user or the directory's owner made them: remove it or choose another name", path.display(), dir.display())]
    UntrustedFifo {
        path: PathBuf,
        dir: PathBuf,
        owner: u32,
    },
    #[error("{} is a FIFO that no process is reading; start its reader first, or give a file", path.display())]
    NoReader { path: PathBuf },
    #[error("{}: too many levels of symbolic links", path.display())]
    TooManyLinks { path: PathBuf },
    #[error("{} is a {what}; give a regular file, a character device or a FIFO", path.display())]
    Unsupported { path: PathBuf, what: &'static str },
    #[error("cannot write {}: {source}", path.display())]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: cannot create a file in {}: {source}; choose a directory you can write to", path.display(), dir.display())]
    DirectoryNotWritable {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{first_flag} {} and {second_flag} {} name the same file; give each its own", first.display(), second.display())]
    SameFile {
        first_flag: String,
        first: PathBuf,
        second_flag: String,
        second: PathBuf,
    },
}

/// Permission bits a new file gets (less the umask), as with `File::create`.
pub const DEFAULT_MODE: u32 = 0o666;

mod resolve;
mod temporary;

use resolve::{existing_dir, kind, parent_dir, resolve, Kind};
use temporary::{plain, temp_prefix};
pub use temporary::{private_temp_dir, remove_temporary_files, Temporary};
#[cfg(test)]
use temporary::{temporaries, Registry};

/// Whether this process may write the existing device or FIFO at `path`
/// (checked without opening it: opening a FIFO blocks until a reader comes).
fn may_write(path: &Path) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string for the call's duration.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The file `path` names, its links followed by the outputs' rules (for
/// `run --disk`, which writes too): see [`OutputError::UntrustedLink`].
pub fn follow_links(path: &Path) -> Result<PathBuf, OutputError> {
    resolve(path).map(|r| r.path)
}

/// Checks, without writing anything, that [`write_file`] to `path` would
/// succeed as far as can be told now: its directory exists and takes a new
/// file (one is created and removed there), it is not a directory, socket
/// or block device, its links are ones that are followed, and a device or
/// FIFO is writable. Call it before a long run so that a bad output path
/// fails at once.
pub fn check_writable(path: &Path) -> Result<(), OutputError> {
    let r = resolve(path)?;
    match kind(&r)? {
        Kind::InPlace => may_write(&r.path).map_err(|source| OutputError::NotWritable {
            path: r.path.clone(),
            source,
        }),
        Kind::Replace => {
            let dir = existing_dir(&r)?;
            Temporary::new_in(&dir, &temp_prefix(&r.path)?, ".tmp", DEFAULT_MODE)
                .map(drop)
                .map_err(|e| OutputError::DirectoryNotWritable {
                    path: r.path.clone(),
                    dir,
                    source: plain(e),
                })
        }
    }
}

/// An output file being written: a temporary file renamed over its path on
/// [`OutputFile::commit`], or a device or FIFO written in place. Dropped
/// without a commit, the temporary file is removed and the path untouched.
pub struct OutputFile {
    inner: Inner,
    path: PathBuf,
}

enum Inner {
    Temp(Temporary),
    InPlace(File),
}

impl OutputFile {
    /// Starts writing `path`; a new file gets [`DEFAULT_MODE`] less the
    /// umask.
    pub fn create(path: &Path) -> Result<Self, OutputError> {
        Self::create_with_mode(path, DEFAULT_MODE)
    }

    /// Starts writing `path`; a new file gets `mode` less the umask (an
    /// existing one keeps its own).
    pub fn create_with_mode(path: &Path, mode: u32) -> Result<Self, OutputError> {
        let r = resolve(path)?;
        let inner = match kind(&r)? {
            Kind::InPlace => Inner::InPlace(open_in_place(&r.path)?),
            Kind::Replace => {
                let dir = existing_dir(&r)?;
                let tmp =
                    Temporary::new_in(&dir, &temp_prefix(&r.path)?, ".tmp", mode).map_err(|e| {
                        OutputError::DirectoryNotWritable {
                            path: r.path.clone(),
                            dir,
                            source: plain(e),
                        }
                    })?;
                if let Some(m) = &r.meta {
                    keep_owner_and_mode(tmp.as_file(), m).map_err(|source| OutputError::Io {
                        what: "keep the permissions of",
                        path: r.path.clone(),
                        source,
                    })?;
                }
                Inner::Temp(tmp)
            }
        };
        Ok(OutputFile {
            inner,
            path: r.path,
        })
    }

    /// The file the data goes to (the temporary file, or the device).
    pub fn file_mut(&mut self) -> &mut File {
        match &mut self.inner {
            Inner::Temp(t) => t.as_file_mut(),
            Inner::InPlace(f) => f,
        }
    }

    /// The path written: the one given, with its symbolic links followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Finishes the file: flushes it to disk and renames it into place (a
    /// device or FIFO has had its data already).
    pub fn commit(self) -> Result<(), OutputError> {
        let path = self.path;
        match self.inner {
            Inner::InPlace(mut f) => f.flush().map_err(|source| OutputError::NotWritable {
                path: path.clone(),
                source,
            }),
            Inner::Temp(t) => {
                t.as_file()
                    .sync_all()
                    .map_err(|source| OutputError::NotWritable {
                        path: path.clone(),
                        source,
                    })?;
                t.persist(&path).map_err(|source| OutputError::Io {
                    what: "rename into place",
                    path: path.clone(),
                    source,
                })
            }
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file_mut().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file_mut().flush()
    }
}

/// Opens a device or FIFO for writing without blocking (a FIFO with no
/// reader fails at once with `ENXIO`), then puts it back to blocking
/// writes; checks on the open descriptor that it is still a device or
/// FIFO.
fn open_in_place(path: &Path) -> Result<File, OutputError> {
    let not_writable = |source| OutputError::NotWritable {
        path: path.to_path_buf(),
        source,
    };
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ENXIO) {
                OutputError::NoReader {
                    path: path.to_path_buf(),
                }
            } else {
                not_writable(e)
            }
        })?;
    let t = f.metadata().map_err(not_writable)?.file_type();
    if !(t.is_fifo() || t.is_char_device()) {
        return Err(OutputError::Unsupported {
            path: path.to_path_buf(),
            what: crate::input::kind_name(t),
        });
    }
    crate::input::set_blocking(&f).map_err(not_writable)?;
    Ok(f)
}

/// Checks that `dir`, an output directory (`man --out-dir`), is a
/// directory reached by links that are safe to follow (the rules of
/// [this module](self)); a directory not there yet is fine.
pub fn check_out_dir(dir: &Path) -> Result<(), OutputError> {
    let r = resolve(dir)?;
    match &r.meta {
        None => Ok(()),
        Some(m) if m.is_dir() => Ok(()),
        Some(m) => Err(OutputError::Unsupported {
            path: dir.to_path_buf(),
            what: crate::input::kind_name(m.file_type()),
        }),
    }
}

/// Gives the temporary file the owner, group and permission bits of the
/// file it replaces. The owner is kept where this process may set it (as
/// root); elsewhere the file belongs to its writer, as with any new file.
fn keep_owner_and_mode(tmp: &File, old: &Metadata) -> std::io::Result<()> {
    // Changing the owner clears set-user-ID bits: set the mode after it.
    let _ = std::os::unix::fs::fchown(tmp, Some(old.uid()), Some(old.gid()));
    tmp.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777))
}

/// Writes `bytes` to `path` by the rules of [this module](self).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_file_with_mode(path, bytes, DEFAULT_MODE)
}

/// [`write_file`], a new file getting `mode` less the umask.
pub fn write_file_with_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), OutputError> {
    let mut f = OutputFile::create_with_mode(path, mode)?;
    let written = f.file_mut().write_all(bytes);
    written.map_err(|source| OutputError::NotWritable {
        path: f.path().to_path_buf(),
        source,
    })?;
    f.commit()
}

/// Opens `path` for a stream written as it goes (a console log): a regular
/// file is truncated or created in place (readers may follow it), a device
/// or FIFO opened for writing; links are followed by the same rules as for
/// [`write_file`], and the file itself is opened with `O_NOFOLLOW`.
pub fn open_stream(path: &Path) -> Result<File, OutputError> {
    let r = resolve(path)?;
    match kind(&r)? {
        Kind::InPlace => open_in_place(&r.path),
        Kind::Replace => {
            existing_dir(&r)?;
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(DEFAULT_MODE)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
                .open(&r.path)
                .map_err(|source| OutputError::NotWritable {
                    path: r.path,
                    source,
                })
        }
    }
}

/// What a path names, for telling whether two outputs are one file.
#[derive(PartialEq, Eq)]
enum Identity {
    /// An existing file: its device and inode.
    Inode(u64, u64),
    /// A file still to be created: its directory (canonical) and name.
    Path(PathBuf),
}

/// The identity of the file a write to `path` lands on; None for a
/// character device, which any number of outputs may share (`/dev/null`).
fn identity(path: &Path) -> Option<Identity> {
    let r = resolve(path).ok()?;
    match &r.meta {
        Some(m) if m.file_type().is_char_device() => None,
        Some(m) => Some(Identity::Inode(m.dev(), m.ino())),
        None => {
            let dir = parent_dir(&r.path);
            let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
            Some(Identity::Path(dir.join(r.path.file_name()?)))
        }
    }
}

/// Refuses two of one command's outputs (flag, path) that name the same
/// file, however spelt (`./a` and `a`, a link and its target, two hard
/// links); character devices such as `/dev/null` may be shared.
pub fn check_distinct(outputs: &[(&str, &Path)]) -> Result<(), OutputError> {
    let ids: Vec<Option<Identity>> = outputs.iter().map(|(_, p)| identity(p)).collect();
    for (i, a) in ids.iter().enumerate() {
        let Some(a) = a else { continue };
        for (j, b) in ids.iter().enumerate().skip(i + 1) {
            if b.as_ref() == Some(a) {
                return Err(OutputError::SameFile {
                    first_flag: outputs[i].0.to_string(),
                    first: outputs[i].1.to_path_buf(),
                    second_flag: outputs[j].0.to_string(),
                    second: outputs[j].1.to_path_buf(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
