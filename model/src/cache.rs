//! bootscope's cache: where it lives, who must own it, and how each entry
//! is checked before use.
//!
//! The cache holds what bootscope made and means to reuse: the default
//! guest's initramfs, decompressed kernels, the symbol tables recovered
//! from them, and the index from kernel files to their decompressed
//! kernels. Root boots what it finds there, so the rules are strict:
//!
//! - **Where.** `$XDG_CACHE_HOME/bootscope` (an absolute path), else
//!   `$HOME/.cache/bootscope`; for root with neither set (a systemd unit,
//!   cron, `env -i`), [`ROOT_CACHE_DIR`]. Anyone else with neither set
//!   gets a refusal: there is no fallback to a shared directory such as
//!   `/tmp`, where another user could plant the directory or a link.
//! - **Created private.** A missing directory is created with mode 0700.
//! - **Owned and closed**, checked as ssh checks `~/.ssh` ([`check_dir`]):
//!   the cache directory and each directory under it must be owned by the
//!   user running bootscope and writable by no one else; every directory
//!   above (its real path, links resolved) must be owned by that user or
//!   root and writable by no one else, unless it has the sticky bit (as
//!   `/tmp` has: another user cannot then rename or remove what is in it).
//!   Each cache file must be a regular file owned by the user and writable
//!   by no one else ([`check_file`]); it is opened without following a
//!   link and without blocking.
//! - **Sealed.** Each entry has a seal beside it (`NAME.xxh3`): its size
//!   and its XXH3-64 checksum ([`seal`]), written when the entry is and
//!   checked on every use ([`verify`]), a few milliseconds for a 60 MB
//!   kernel. An entry whose seal is missing or does not match is not used:
//!   the caller rebuilds it and says so. An entry too large to hold in
//!   memory (a guest image) is sealed and checked as it is read
//!   ([`Sealer`], [`verify_seal`]): the same seal.

use std::fs::{File, Metadata};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::proc::effective_uid;

/// The cache of root when neither `XDG_CACHE_HOME` nor `HOME` is set.
pub const ROOT_CACHE_DIR: &str = "/var/cache/bootscope";

/// Why the cache (or one of its entries) cannot be used. Each message
/// names the path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("no cache directory: neither XDG_CACHE_HOME nor HOME is set (only root has a default, {ROOT_CACHE_DIR}); set one of them to a directory of your own")]
    NoPlace,
    #[error("cannot create the cache directory {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot look at {}: {source}", path.display())]
    Stat {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not trusted as a cache: {why}; fix it (or remove it and let bootscope create it again), or point XDG_CACHE_HOME at a directory of your own", path.display())]
    Untrusted { path: PathBuf, why: String },
}

fn var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// The cache directory by the rules of [this module](self), not yet
/// created or checked.
pub fn cache_base() -> Result<PathBuf, CacheError> {
    cache_base_for(var("XDG_CACHE_HOME"), var("HOME"), effective_uid())
}

/// [`cache_base`] for a process with these variables and effective uid.
pub fn cache_base_for(
    xdg: Option<PathBuf>,
    home: Option<PathBuf>,
    uid: u32,
) -> Result<PathBuf, CacheError> {
    if let Some(x) = xdg {
        return Ok(x.join("bootscope"));
    }
    if let Some(h) = home {
        return Ok(h.join(".cache").join("bootscope"));
    }
    if uid == 0 {
        return Ok(PathBuf::from(ROOT_CACHE_DIR));
    }
    Err(CacheError::NoPlace)
}

/// The cache directory's subdirectory `sub` (empty: the cache directory
/// itself), created private where missing and checked ([`check_dir`]).
pub fn cache_dir(sub: &str) -> Result<PathBuf, CacheError> {
    let base = cache_base()?;
    let dir = if sub.is_empty() {
        base.clone()
    } else {
        base.join(sub)
    };
    private_dir(&base, &dir)?;
    Ok(dir)
}

/// Creates `dir` (under the cache directory `base`) where missing, mode
/// 0700, and checks it and every directory above it by [`check_dir`]. The
/// part that exists is checked first: nothing is created in a directory
/// that is not trusted.
pub fn private_dir(base: &Path, dir: &Path) -> Result<(), CacheError> {
    let existing = dir
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && std::fs::metadata(a).is_ok())
        .unwrap_or(Path::new("/"));
    check_chain(base, existing, dir)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CacheError::Create {
            path: dir.to_path_buf(),
            source,
        })?;
    check_dir(base, dir)
}

fn stat(path: &Path) -> Result<Metadata, CacheError> {
    std::fs::symlink_metadata(path).map_err(|source| CacheError::Stat {
        path: path.to_path_buf(),
        source,
    })
}

fn untrusted(path: &Path, why: String) -> CacheError {
    CacheError::Untrusted {
        path: path.to_path_buf(),
        why,
    }
}

/// What is wrong with the permissions of a directory of the cache that must
/// be this user's own (`own`), or of a directory above it.
fn dir_problem(m: &Metadata, uid: u32, own: bool) -> Option<String> {
    if !m.is_dir() {
        return Some("it is not a directory".into());
    }
    let owner_ok = m.uid() == uid || (!own && m.uid() == 0);
    if !owner_ok {
        return Some(format!(
            "it is owned by uid {}, not by {} (uid {uid})",
            m.uid(),
            if own {
                "this user"
            } else {
                "this user or root"
            }
        ));
    }
    let open = m.mode() & 0o022;
    let sticky = m.mode() & 0o1000 != 0;
    if open != 0 && (own || !sticky) {
        return Some(format!(
            "it is {}-writable (mode {:04o})",
            if open & 0o002 != 0 { "world" } else { "group" },
            m.mode() & 0o7777
        ));
    }
    None
}

/// Checks the cache directory `dir` (at or under the cache directory
/// `base`): `dir` and each directory from `base` down to it owned by this
/// user and writable by no one else; each directory above `base` (its real
/// path) owned by this user or root and writable by no one else unless
/// sticky.
pub fn check_dir(base: &Path, dir: &Path) -> Result<(), CacheError> {
    check_chain(base, dir, dir)
}

/// [`check_dir`] of the existing directory `existing` (`dir` or one above
/// it; `base` may not exist yet), naming `dir` in the error.
fn check_chain(base: &Path, existing: &Path, dir: &Path) -> Result<(), CacheError> {
    let uid = effective_uid();
    let real = std::fs::canonicalize(existing).map_err(|source| CacheError::Stat {
        path: existing.to_path_buf(),
        source,
    })?;
    let real_base = std::fs::canonicalize(base).ok();
    for p in real.ancestors() {
        let m = stat(p)?;
        let own = real_base.as_ref().is_some_and(|b| p.starts_with(b));
        if let Some(why) = dir_problem(&m, uid, own) {
            let why = if p == real && existing == dir {
                why
            } else {
                format!("the directory above it, {}: {why}", p.display())
            };
            return Err(untrusted(dir, why));
        }
    }
    Ok(())
}

/// Checks a cache file's metadata (from the open descriptor): a regular
/// file, owned by this user, writable by no one else.
pub fn check_file(path: &Path, m: &Metadata) -> Result<(), CacheError> {
    let uid = effective_uid();
    if !m.is_file() {
        return Err(untrusted(
            path,
            format!("it is a {}", crate::input::kind_name(m.file_type())),
        ));
    }
    if m.uid() != uid {
        return Err(untrusted(
            path,
            format!(
                "it is owned by uid {}, not by this user (uid {uid})",
                m.uid()
            ),
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(untrusted(
            path,
            format!("it is writable by others (mode {:04o})", m.mode() & 0o7777),
        ));
    }
    Ok(())
}

/// Opens the cache file at `path` without following a link or blocking,
/// and checks it ([`check_file`]). `Ok(None)`: there is none.
pub fn open_file(path: &Path) -> Result<Option<(File, Metadata)>, CacheError> {
    match crate::input::open_nonblocking(path, libc::O_NOFOLLOW) {
        Ok((f, m)) => {
            check_file(path, &m)?;
            Ok(Some((f, m)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(untrusted(
            path,
            "it is a symbolic link (cache files never are)".into(),
        )),
        Err(source) => Err(CacheError::Stat {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads the cache file at `path` whole, checked by [`open_file`] and
/// read at most `limit` bytes. `Ok(None)`: there is none.
pub fn read_file(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CacheError> {
    use std::io::Read;
    let Some((f, m)) = open_file(path)? else {
        return Ok(None);
    };
    if m.len() > limit {
        return Err(untrusted(
            path,
            format!(
                "it is {} bytes, more than a cache entry of its kind",
                m.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(m.len() as usize);
    f.take(limit)
        .read_to_end(&mut out)
        .map_err(|source| CacheError::Stat {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(out))
}

/// The checksum of a cache entry: XXH3, 64 bits.
pub fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Where the seal of the cache entry `file` is: `FILE.xxh3`.
pub fn seal_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".xxh3");
    PathBuf::from(name)
}

fn seal_text(bytes: &[u8]) -> String {
    seal_line(checksum(bytes), bytes.len() as u64)
}

fn seal_line(checksum: u64, len: u64) -> String {
    format!("xxh3 {checksum:016x} {len}\n")
}

/// The seal of an entry too large to hold in memory (a guest image),
/// computed as its bytes go by: the same seal [`store`] writes for them.
#[derive(Default)]
pub struct Sealer {
    hasher: xxhash_rust::xxh3::Xxh3,
    len: u64,
}

impl Sealer {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next bytes of the entry.
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// The next `n` bytes of the entry, all zero (a sparse file's hole).
    pub fn zeros(&mut self, mut n: u64) {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        while n > 0 {
            let k = n.min(ZEROS.len() as u64);
            self.update(&ZEROS[..k as usize]);
            n -= k;
        }
    }

    /// How many bytes went by.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no byte went by.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The seal of the bytes that went by.
    pub fn seal(&self) -> Seal {
        Seal(seal_line(self.hasher.digest(), self.len))
    }
}

/// A computed seal, to store beside its entry ([`store_seal`]) or to check
/// against the stored one ([`verify_seal`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seal(String);

/// Writes `seal` as the seal of the cache entry `file` (before the entry
/// itself is stored, as [`store`] does).
pub fn store_seal(file: &Path, seal: &Seal) -> std::io::Result<()> {
    write_private(&seal_path(file), seal.0.as_bytes())
}

/// Checks the seal `seal`, computed from the contents of the cache entry
/// `file`, against the one stored beside it.
pub fn verify_seal(file: &Path, seal: &Seal) -> Verdict {
    let Ok(Some(text)) = read_file(&seal_path(file), 128) else {
        return Verdict::Unsealed;
    };
    if text == seal.0.as_bytes() {
        Verdict::Sound
    } else {
        Verdict::Mismatch
    }
}

/// Writes a file of the cache atomically, mode 0600: a temporary file in
/// its directory (listed for removal should a signal end the process),
/// renamed over it once complete.
pub fn write_private(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file
        .parent()
        .ok_or_else(|| std::io::Error::other("the cache file has no directory"))?;
    let name = file.file_name().unwrap_or_default();
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    let mut tmp = crate::output::Temporary::new_in(dir, &prefix, ".tmp", 0o600)?;
    tmp.as_file_mut().write_all(bytes)?;
    tmp.as_file().sync_data()?;
    tmp.persist(file)
}

/// Stores `bytes` as the cache entry `file`: its seal first, then the
/// entry (so that a reader never finds a fresh entry under a stale seal
/// that matches it).
pub fn store(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    store_seal(file, &Seal(seal_text(bytes)))?;
    write_private(file, bytes)
}

/// How a cache entry's contents compare with its seal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The seal is there and matches.
    Sound,
    /// No seal (or one that cannot be read or trusted).
    Unsealed,
    /// The seal does not match the contents.
    Mismatch,
}

impl Verdict {
    /// Why an entry was rebuilt, for the timeline: `checksum mismatch`,
    /// `no checksum`; None for a sound entry.
    pub fn why_rebuilt(self) -> Option<&'static str> {
        match self {
            Verdict::Sound => None,
            Verdict::Unsealed => Some("no checksum"),
            Verdict::Mismatch => Some("checksum mismatch"),
        }
    }
}

/// Checks the contents `bytes` of the cache entry `file` against its seal.
pub fn verify(file: &Path, bytes: &[u8]) -> Verdict {
    verify_seal(file, &Seal(seal_text(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn set_mode(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A private scratch directory (0700 under a sticky /tmp owned by
    /// root, a place the rules trust).
    fn scratch() -> tempfile::TempDir {
        crate::output::private_temp_dir("bootscope-cache-test-").unwrap()
    }

    #[test]
    fn the_place_never_falls_back_to_a_shared_directory() {
        let x = Some(PathBuf::from("/x"));
        let h = Some(PathBuf::from("/home/u"));
        assert_eq!(
            cache_base_for(x.clone(), h.clone(), 1000).unwrap(),
            Path::new("/x/bootscope")
        );
        assert_eq!(
            cache_base_for(None, h, 1000).unwrap(),
            Path::new("/home/u/.cache/bootscope")
        );
        assert_eq!(
            cache_base_for(None, None, 0).unwrap(),
            Path::new(ROOT_CACHE_DIR)
        );
        let e = cache_base_for(None, None, 1000).unwrap_err();
        assert!(matches!(e, CacheError::NoPlace), "{e}");
        assert!(e.to_string().contains("XDG_CACHE_HOME"), "{e}");
    }

    #[test]
    fn a_private_directory_is_created_and_trusted() {
        let d = scratch();
        let base = d.path().join("bootscope");
        let dir = base.join("kernels");
        private_dir(&base, &dir).unwrap();
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        check_dir(&base, &dir).unwrap();
    }

    #[test]
    fn a_group_or_world_writable_directory_is_refused() {
        let d = scratch();
        let base = d.path().join("bootscope");
        let dir = base.join("kernels");
        private_dir(&base, &dir).unwrap();
        for (which, mode) in [(&dir, 0o770), (&base, 0o777), (&dir, 0o1777)] {
            set_mode(which, mode);
            let e = check_dir(&base, &dir).unwrap_err();
            assert!(matches!(e, CacheError::Untrusted { .. }), "{e}");
            assert!(e.to_string().contains("writable"), "{e}");
            set_mode(which, 0o700);
        }
        // Nothing is created under a directory that is refused.
        set_mode(&base, 0o770);
        let deeper = dir.join("deeper");
        assert!(private_dir(&base, &deeper).is_err());
        assert!(!deeper.exists());
        set_mode(&base, 0o700);
        // Above the cache: group-writable refused, sticky world-writable
        // (like /tmp) allowed.
        set_mode(d.path(), 0o775);
        assert!(check_dir(&base, &dir).is_err());
        set_mode(d.path(), 0o1777);
        check_dir(&base, &dir).unwrap();
        set_mode(d.path(), 0o700);
    }

    #[test]
    fn a_foreign_directory_or_file_is_refused() {
        bootscope_testkit::require_root!("to give a directory another owner");
        let d = scratch();
        let base = d.path().join("bootscope");
        private_dir(&base, &base).unwrap();
        std::os::unix::fs::chown(&base, Some(54321), None).unwrap();
        let e = check_dir(&base, &base).unwrap_err();
        assert!(e.to_string().contains("uid 54321"), "{e}");
        std::os::unix::fs::chown(&base, Some(0), None).unwrap();
        let f = base.join("entry");
        write_private(&f, b"x").unwrap();
        std::os::unix::fs::chown(&f, Some(54321), None).unwrap();
        let e = open_file(&f).unwrap_err();
        assert!(e.to_string().contains("uid 54321"), "{e}");
    }

    #[test]
    fn files_must_be_private_regular_files_not_links() {
        let d = scratch();
        let f = d.path().join("entry");
        write_private(&f, b"data").unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        assert!(open_file(&f).unwrap().is_some());
        set_mode(&f, 0o620);
        assert!(open_file(&f).is_err());
        set_mode(&f, 0o600);
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = open_file(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(open_file(&d.path().join("none")).unwrap().is_none());
    }

    #[test]
    fn a_sealed_entry_is_sound_until_its_contents_change() {
        let d = scratch();
        let f = d.path().join("vmlinux-x");
        let mut data = vec![7u8; 1 << 20];
        store(&f, &data).unwrap();
        assert_eq!(verify(&f, &std::fs::read(&f).unwrap()), Verdict::Sound);
        data[1 << 19] = 0;
        assert_eq!(verify(&f, &data), Verdict::Mismatch);
        assert_eq!(verify(&f, &data[..10]), Verdict::Mismatch);
        std::fs::remove_file(seal_path(&f)).unwrap();
        assert_eq!(verify(&f, &data), Verdict::Unsealed);
        assert_eq!(Verdict::Mismatch.why_rebuilt(), Some("checksum mismatch"));
    }

    #[test]
    fn a_streamed_seal_is_the_stored_one() {
        let d = scratch();
        let f = d.path().join("guest.raw");
        let mut data = vec![0u8; 200_000];
        data[10] = 1;
        data[150_000] = 2;
        store(&f, &data).unwrap();
        let mut s = Sealer::new();
        s.update(&data[..100]);
        s.zeros(100_000 - 100);
        s.update(&data[100_000..]);
        assert_eq!(s.len(), 200_000);
        assert_eq!(verify_seal(&f, &s.seal()), Verdict::Sound);
        s.update(b"more");
        assert_eq!(verify_seal(&f, &s.seal()), Verdict::Mismatch);
        let g = d.path().join("other.raw");
        store_seal(&g, &s.seal()).unwrap();
        assert_eq!(verify_seal(&g, &s.seal()), Verdict::Sound);
        assert_eq!(
            verify_seal(&d.path().join("none"), &s.seal()),
            Verdict::Unsealed
        );
    }
}
