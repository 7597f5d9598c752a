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

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

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

/// The symbolic-link hops followed before giving up, as the kernel's
/// `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// Where a write to a path lands once its symbolic links are followed.
struct Resolved {
    /// The path of the file itself (no symbolic link).
    path: PathBuf,
    /// Its metadata, if it exists.
    meta: Option<Metadata>,
}

/// What is at a resolved path, as far as writing goes.
enum Kind {
    /// A regular file, or nothing yet: replaced atomically.
    Replace,
    /// A character device or FIFO: written in place.
    InPlace,
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether the file `meta` in `dir` was planted by another user: `dir` is
/// sticky and world-writable (such as `/tmp`) and the file is owned
/// neither by this user nor by the directory's owner (the rule of the
/// kernel's `fs.protected_symlinks` and `fs.protected_fifos`).
fn planted(dir: &Path, meta: &Metadata) -> bool {
    match std::fs::metadata(dir) {
        Ok(d) => {
            let shared = d.mode() & 0o1002 == 0o1002;
            shared && meta.uid() != effective_uid() && meta.uid() != d.uid()
        }
        Err(_) => false,
    }
}

/// Follows the symbolic links of `path`'s last component, refusing the ones
/// [the module documentation](self) says are refused.
fn resolve(path: &Path) -> Result<Resolved, OutputError> {
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

fn kind(r: &Resolved) -> Result<Kind, OutputError> {
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
fn existing_dir(r: &Resolved) -> Result<PathBuf, OutputError> {
    let dir = parent_dir(&r.path);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        _ => Err(OutputError::NoDirectory {
            path: r.path.clone(),
            dir,
        }),
    }
}

/// The temporary file's name prefix: `.NAME.`, the name cut short enough
/// that the random part and suffix still fit in a file name.
fn temp_prefix(path: &Path) -> Result<OsString, OutputError> {
    let name = path.file_name().ok_or_else(|| OutputError::IsDirectory {
        path: path.to_path_buf(),
    })?;
    let bytes = name.as_bytes();
    let mut prefix = b".".to_vec();
    prefix.extend_from_slice(&bytes[..bytes.len().min(200)]);
    prefix.push(b'.');
    Ok(OsString::from_vec(prefix))
}

/// `tempfile`'s errors end with ` at path "TEMPORARY NAME"`, which means
/// nothing to the user (the messages name the output and its directory):
/// the error without it, of the same kind.
fn plain(e: std::io::Error) -> std::io::Error {
    if e.raw_os_error().is_some() {
        return e;
    }
    let text = e.to_string();
    match text.rfind(" at path \"") {
        Some(end) => std::io::Error::new(e.kind(), &text[..end]),
        None => e,
    }
}

/// The temporary files of this process that exist now, by a serial number.
struct Registry {
    /// Set by [`remove_temporary_files`]: no new temporary file is made.
    closed: bool,
    next: u64,
    live: BTreeMap<u64, PathBuf>,
}

impl Registry {
    const fn new() -> Self {
        Registry {
            closed: false,
            next: 0,
            live: BTreeMap::new(),
        }
    }

    /// Makes a temporary file with `make` and lists it, unless the list is
    /// closed (the process is ending on a signal).
    fn create(
        &mut self,
        make: impl FnOnce() -> std::io::Result<tempfile::NamedTempFile>,
    ) -> std::io::Result<(tempfile::NamedTempFile, u64)> {
        if self.closed {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "interrupted by a signal: no new file is written",
            ));
        }
        let file = make()?;
        let id = self.next;
        self.next += 1;
        self.live.insert(id, file.path().to_path_buf());
        Ok((file, id))
    }

    /// Removes every listed file and closes the list; returns how many were
    /// removed.
    fn remove_all(&mut self) -> usize {
        self.closed = true;
        let live = std::mem::take(&mut self.live);
        live.values()
            .filter(|p| std::fs::remove_file(p).is_ok())
            .count()
    }
}

/// This process's temporary files.
static TEMPORARIES: Mutex<Registry> = Mutex::new(Registry::new());

fn temporaries() -> MutexGuard<'static, Registry> {
    // The list stays usable after a thread panicked holding it.
    TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes every temporary file this process is writing and refuses new
/// ones from then on (creating one fails with `ErrorKind::Interrupted`).
/// For a process about to exit on a signal: an output being written is
/// left as it was (its temporary file gone, the file at its path
/// untouched, or complete if its rename came first), and nothing is left
/// beside it. Safe to call from any thread but not from a signal handler
/// (it takes a lock); returns how many files were removed.
pub fn remove_temporary_files() -> usize {
    temporaries().remove_all()
}

/// A temporary file listed for [`remove_temporary_files`]: created with an
/// unpredictable name and `O_EXCL` in the given directory, removed when
/// dropped, or renamed into place by [`Temporary::persist`]. For writers
/// with their own rules (a cache file); outputs use [`OutputFile`].
pub struct Temporary {
    // Dropped first: the file is removed before it leaves the list, so
    // there is no moment when it exists unlisted.
    file: tempfile::NamedTempFile,
    listed: Listed,
}

/// A temporary file's place in the list; leaving it on drop.
struct Listed(u64);

impl Drop for Listed {
    fn drop(&mut self) {
        temporaries().live.remove(&self.0);
    }
}

impl Temporary {
    /// A new temporary file in `dir` named `PREFIX` + random + `SUFFIX`,
    /// with permission bits `mode` less the umask.
    pub fn new_in(dir: &Path, prefix: &OsStr, suffix: &str, mode: u32) -> std::io::Result<Self> {
        let (file, id) = temporaries().create(|| {
            tempfile::Builder::new()
                .prefix(prefix)
                .suffix(suffix)
                .permissions(std::fs::Permissions::from_mode(mode))
                .tempfile_in(dir)
        })?;
        Ok(Temporary {
            file,
            listed: Listed(id),
        })
    }

    pub fn as_file(&self) -> &File {
        self.file.as_file()
    }

    pub fn as_file_mut(&mut self) -> &mut File {
        self.file.as_file_mut()
    }

    /// The temporary file's own path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Renames the file to `path` (replacing what is there); on failure it
    /// is removed.
    pub fn persist(self, path: &Path) -> std::io::Result<()> {
        let Temporary { file, listed } = self;
        let result = file.persist(path).map(drop).map_err(|e| e.error);
        drop(listed);
        result
    }
}

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
