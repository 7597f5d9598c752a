//! The snapshot directory: written whole under a temporary name beside its
//! final one and renamed into place (no half-written snapshot is ever under
//! the final name), its files private (0600, the directory 0700); read back
//! with every check a restore makes before it builds anything.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::state::{
    MachineState, Manifest, MANIFEST_FILE, MEMORY_FILE, SCHEMA, STATE_FILE, VERSION,
};
use super::SnapshotError;

/// Largest state or manifest file read (a state of many vCPUs is a few
/// hundred KiB).
const STATE_LIMIT: u64 = 64 << 20;

fn io<'a>(path: &'a Path, what: &'static str) -> impl Fn(std::io::Error) -> SnapshotError + 'a {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// Checks, before the guest runs, that `dir` can become a snapshot: it
/// does not exist or is an empty directory, its parent exists, and the
/// parent's file system has room for `memory_bytes` (a sparse file needs
/// less; this is the bound).
pub fn check_target(dir: &Path, memory_bytes: u64) -> Result<(), SnapshotError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {
            let mut entries = std::fs::read_dir(dir).map_err(io(dir, "read"))?;
            if entries.next().is_some() {
                return Err(SnapshotError::TargetNotEmpty(dir.to_path_buf()));
            }
        }
        Ok(_) => return Err(SnapshotError::TargetNotEmpty(dir.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(dir, "look at")(e)),
    }
    let parent = parent_of(dir);
    let st = nix_statvfs(&parent).map_err(io(&parent, "statvfs"))?;
    if st < memory_bytes + (16 << 20) {
        return Err(SnapshotError::NoRoom {
            dir: parent,
            free: st,
            need: memory_bytes,
        });
    }
    Ok(())
}

fn parent_of(dir: &Path) -> PathBuf {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Free bytes for this user on the file system of `path`.
fn nix_statvfs(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: statvfs is plain data; zeroed is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// A snapshot being written: a private temporary directory beside `dir`.
pub struct Staging {
    tmp: tempfile::TempDir,
    dir: PathBuf,
    /// Its place in the list a signal's exit removes (`staging.rs`).
    listed: super::staging::Listed,
}

impl Staging {
    pub fn new(dir: &Path) -> Result<Self, SnapshotError> {
        let parent = parent_of(dir);
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "snapshot".into());
        let (tmp, listed) = super::staging::create(
            || {
                tempfile::Builder::new()
                    .prefix(&format!(".{name}."))
                    .permissions(std::fs::Permissions::from_mode(0o700))
                    .tempdir_in(&parent)
            },
            |t| t.path().to_path_buf(),
        )
        .map_err(io(&parent, "create a temporary directory in"))?;
        Ok(Self {
            tmp,
            dir: dir.to_path_buf(),
            listed,
        })
    }

    /// A new private file in the staging directory.
    pub fn create(&self, name: &str) -> Result<File, SnapshotError> {
        let path = self.tmp.path().join(name);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(&self.dir, "create a file in the snapshot"))
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), SnapshotError> {
        let mut f = self.create(name)?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(io(&self.dir, "write"))
    }

    /// Renames the finished snapshot into place (over an empty directory
    /// if there is one).
    pub fn finish(self) -> Result<PathBuf, SnapshotError> {
        let Self { tmp, dir, listed } = self;
        let path = tmp.path().to_path_buf();
        super::staging::rename(listed, &path, &dir)
            .map_err(io(&dir, "rename the snapshot into"))?;
        // Renamed: nothing is left to remove.
        let _ = tmp.keep();
        Ok(dir)
    }
}

/// Opens a snapshot file: not a link, a regular file owned by this user
/// and writable by no one else.
fn open_checked(dir: &Path, name: &str) -> Result<(File, std::fs::Metadata), SnapshotError> {
    let path = dir.join(name);
    let (f, m) =
        bootscope_model::input::open_nonblocking(&path, libc::O_NOFOLLOW).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::NotFound => SnapshotError::NotASnapshot {
                    dir: dir.to_path_buf(),
                    why: format!("it has no {name}"),
                },
                _ => io(&path, "open")(e),
            }
        })?;
    check_owner(&path, &m, m.is_file())?;
    Ok((f, m))
}

/// The rules of the cache: this user's, writable by no one else.
pub(super) fn check_owner(
    path: &Path,
    m: &std::fs::Metadata,
    kind_ok: bool,
) -> Result<(), SnapshotError> {
    let uid = bootscope_model::proc::effective_uid();
    let why = if !kind_ok {
        Some("it is not a regular file".to_string())
    } else if m.uid() != uid {
        Some(format!(
            "it is owned by uid {}, not by this user (uid {uid})",
            m.uid()
        ))
    } else if m.mode() & 0o022 != 0 {
        Some(format!(
            "it is writable by others (mode {:04o})",
            m.mode() & 0o7777
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(SnapshotError::Untrusted {
            path: path.to_path_buf(),
            why,
        }),
        None => Ok(()),
    }
}

fn read_limited(
    mut f: &File,
    m: &std::fs::Metadata,
    path: &Path,
) -> Result<Vec<u8>, SnapshotError> {
    use std::io::Read;
    if m.len() > STATE_LIMIT {
        return Err(SnapshotError::Corrupt {
            path: path.to_path_buf(),
            why: format!("it is {} bytes, more than a state file can be", m.len()),
        });
    }
    let mut v = Vec::with_capacity(m.len() as usize);
    f.read_to_end(&mut v).map_err(io(path, "read"))?;
    Ok(v)
}

/// A snapshot read back and checked: its state and its memory file.
pub struct OpenSnapshot {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub state: MachineState,
    pub memory: File,
}

/// Reads the snapshot in `dir` with every check that needs no VM: the
/// directory and its files this user's and private, the manifest's schema
/// and version, the state file's digest, the memory file's size (and with
/// `verify` its digest).
pub fn open(dir: &Path, verify: bool) -> Result<OpenSnapshot, SnapshotError> {
    let m = std::fs::symlink_metadata(dir).map_err(|e| SnapshotError::NotASnapshot {
        dir: dir.to_path_buf(),
        why: e.to_string(),
    })?;
    if !m.is_dir() {
        return Err(SnapshotError::NotASnapshot {
            dir: dir.to_path_buf(),
            why: "it is not a directory".into(),
        });
    }
    check_owner(dir, &m, true)?;
    let (f, fm) = open_checked(dir, MANIFEST_FILE)?;
    let manifest_path = dir.join(MANIFEST_FILE);
    let bytes = read_limited(&f, &fm, &manifest_path)?;
    let head: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| SnapshotError::Corrupt {
            path: manifest_path.clone(),
            why: e.to_string(),
        })?;
    if head.get("schema").and_then(|s| s.as_str()) != Some(SCHEMA) {
        return Err(SnapshotError::NotASnapshot {
            dir: dir.to_path_buf(),
            why: format!("{MANIFEST_FILE} is not a {SCHEMA} document"),
        });
    }
    let version = head.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    if version != u64::from(VERSION) {
        return Err(SnapshotError::Version { found: version });
    }
    let manifest: Manifest = serde_json::from_value(head).map_err(|e| SnapshotError::Corrupt {
        path: manifest_path,
        why: e.to_string(),
    })?;
    let state_path = dir.join(STATE_FILE);
    let (sf, sm) = open_checked(dir, STATE_FILE)?;
    let state_bytes = read_limited(&sf, &sm, &state_path)?;
    let digest = {
        use sha2::Digest;
        super::state::hex(&sha2::Sha256::digest(&state_bytes))
    };
    if digest != manifest.state_sha256 {
        return Err(SnapshotError::Corrupt {
            path: state_path,
            why: "its SHA-256 is not the manifest's (truncated or changed since the snapshot)"
                .into(),
        });
    }
    let state: MachineState =
        serde_json::from_slice(&state_bytes).map_err(|e| SnapshotError::Corrupt {
            path: state_path.clone(),
            why: e.to_string(),
        })?;
    let memory_path = dir.join(MEMORY_FILE);
    let (memory, mm) = open_checked(dir, MEMORY_FILE)?;
    let layout_bytes: u64 = state.identity.regions.iter().map(|r| r.bytes).sum();
    if mm.len() != manifest.memory_bytes || layout_bytes != manifest.memory_bytes {
        return Err(SnapshotError::Corrupt {
            path: memory_path,
            why: format!(
                "it is {} bytes; the snapshot's memory is {} bytes",
                mm.len(),
                manifest.memory_bytes
            ),
        });
    }
    if verify {
        let d = super::memory::file_digest(&memory, mm.len()).map_err(io(&memory_path, "read"))?;
        if d != manifest.memory_xxh3 {
            return Err(SnapshotError::Corrupt {
                path: memory_path,
                why: "its content's digest is not the manifest's (--verify)".into(),
            });
        }
    }
    Ok(OpenSnapshot {
        dir: dir.to_path_buf(),
        manifest,
        state,
        memory,
    })
}
