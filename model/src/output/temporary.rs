//! The temporary files of this process: each listed while it exists, so
//! that a process ended by a signal removes them first
//! ([`remove_temporary_files`]).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use super::OutputError;

/// The temporary file's name prefix: `.NAME.`, the name cut short enough
/// that the random part and suffix still fit in a file name.
pub(super) fn temp_prefix(path: &Path) -> Result<OsString, OutputError> {
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
pub(super) fn plain(e: std::io::Error) -> std::io::Error {
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
pub(super) struct Registry {
    /// Set by [`remove_temporary_files`]: no new temporary file is made.
    closed: bool,
    next: u64,
    pub(super) live: BTreeMap<u64, PathBuf>,
}

impl Registry {
    pub(super) const fn new() -> Self {
        Registry {
            closed: false,
            next: 0,
            live: BTreeMap::new(),
        }
    }

    /// Makes a temporary file with `make` and lists it, unless the list is
    /// closed (the process is ending on a signal).
    pub(super) fn create(
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
    pub(super) fn remove_all(&mut self) -> usize {
        self.closed = true;
        let live = std::mem::take(&mut self.live);
        live.values()
            .filter(|p| std::fs::remove_file(p).is_ok())
            .count()
    }
}

/// This process's temporary files.
static TEMPORARIES: Mutex<Registry> = Mutex::new(Registry::new());

pub(super) fn temporaries() -> MutexGuard<'static, Registry> {
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

/// A new directory `$TMPDIR/PREFIX<random>` that only this user can enter
/// (mode 0700 whatever the umask: `tempfile` alone would leave it 0755),
/// removed with its contents when dropped. For a process's own scratch
/// files: nobody else can plant, replace or read anything in it.
pub fn private_temp_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
}

/// A temporary file listed for [`remove_temporary_files`]: created with an
/// unpredictable name and `O_EXCL` in the given directory, removed when
/// dropped, or renamed into place by [`Temporary::persist`]. For writers
/// with their own rules (a cache file); outputs use [`OutputFile`](super::OutputFile).
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
