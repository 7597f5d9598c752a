//! The kernel cache's index by file identity: which decompressed kernel a
//! bzImage file gives, found without reading or hashing the file.
//!
//! The cache proper is keyed by the SHA-256 of the compressed payload, which
//! means reading the whole bzImage and hashing megabytes on every boot
//! (a tenth of a second where instructions are slow). This index maps the
//! file's identity, its device, inode, size, modification and status-change
//! times (nanoseconds), to that digest. A file that is written to, replaced
//! or renamed over gets a new status-change time or inode, which no user can
//! set back, so a changed file always misses the index and is hashed again.
//!
//! File times tick coarsely, so a file is recorded only once it has been
//! left alone for a moment ([`SETTLE`]): a rewrite after that always moves
//! its status-change time.
//!
//! Each entry is one small file in the cache directory, named after the
//! identity (`id-<dev>-<ino>-<size>-<mtime>-<ctime>`) and holding the digest,
//! the compression, the decompressed size and the XXH3 checksum of those
//! three words; it is written atomically (mode 0600) and read only when it
//! is this user's own private regular file and its checksum matches
//! ([`bootscope_model::cache`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::decompress::Compression;

/// Who a file is, as far as its contents go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileIdentity {
    /// The identity of the file at `path` (following symbolic links).
    pub fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let m = std::fs::metadata(path)?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Ok(FileIdentity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        })
    }

    fn entry_file(&self, dir: &Path) -> PathBuf {
        dir.join(format!(
            "id-{:x}-{:x}-{}-{}-{}",
            self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns
        ))
    }
}

/// What the index says of a file: its payload's digest, compression and
/// decompressed size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub digest: String,
    pub compression: Compression,
    pub size: u64,
}

/// The index entry of `id` in the cache directory `dir`, if there is a
/// well-formed one.
pub fn lookup(dir: &Path, id: &FileIdentity) -> Option<IndexEntry> {
    let bytes = bootscope_model::cache::read_file(&id.entry_file(dir), 256).ok()??;
    let text = String::from_utf8(bytes).ok()?;
    let (body, sum) = text.trim_end().rsplit_once(' ')?;
    if sum != format!("{:016x}", bootscope_model::cache::checksum(body.as_bytes())) {
        return None;
    }
    let mut words = body.split_whitespace();
    let digest = words.next()?;
    let compression = Compression::from_name(words.next()?)?;
    let size = words.next()?.parse().ok()?;
    let hex_digest = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_digest && words.next().is_none()).then(|| IndexEntry {
        digest: digest.to_string(),
        compression,
        size,
    })
}

/// How long ago a file's status must have last changed for its identity to
/// be recorded. File times come from a clock that ticks coarsely (a
/// scheduler tick), so a file rewritten within the same tick as it was read
/// could keep the times it was recorded with; a file left alone this long
/// cannot be rewritten without its status-change time moving past them.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Whether the file `id` last changed at least [`SETTLE`] ago.
pub fn settled(id: &FileIdentity) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    id.ctime_ns + (SETTLE.as_nanos() as i128) <= now
}

/// Records `entry` for `id` in `dir` (atomically: a temporary file renamed
/// over the entry); a file that changed less than [`SETTLE`] ago is not
/// recorded.
pub fn record(dir: &Path, id: &FileIdentity, entry: &IndexEntry) -> std::io::Result<()> {
    if !settled(id) {
        return Ok(());
    }
    let body = format!(
        "{} {} {}",
        entry.digest,
        entry.compression.name(),
        entry.size
    );
    let sum = bootscope_model::cache::checksum(body.as_bytes());
    bootscope_model::cache::write_private(
        &id.entry_file(dir),
        format!("{body} {sum:016x}\n").as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> IndexEntry {
        IndexEntry {
            digest: "ab".repeat(32),
            compression: Compression::Zstd,
            size: 1234,
        }
    }

    #[test]
    fn a_recorded_file_is_found_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bzImage");
        std::fs::write(&file, b"one").unwrap();
        let id = FileIdentity::of(&file).unwrap();
        assert_eq!(lookup(dir.path(), &id), None);
        // Just written: not recorded yet.
        record(dir.path(), &id, &entry()).unwrap();
        assert_eq!(lookup(dir.path(), &id), None);
        std::thread::sleep(SETTLE + Duration::from_millis(50));
        record(dir.path(), &id, &entry()).unwrap();
        assert_eq!(
            lookup(dir.path(), &FileIdentity::of(&file).unwrap()),
            Some(entry())
        );
        // Rewritten with contents of the same size: the status-change time
        // (and the modification time) move on, and the old entry no longer
        // applies.
        std::fs::write(&file, b"two").unwrap();
        let changed = FileIdentity::of(&file).unwrap();
        assert_ne!(changed, id);
        assert_eq!(lookup(dir.path(), &changed), None);
        // Replaced by another file renamed over it: another inode.
        let other = dir.path().join("other");
        std::fs::write(&other, b"two").unwrap();
        std::fs::rename(&other, &file).unwrap();
        assert_ne!(FileIdentity::of(&file).unwrap(), changed);
    }

    #[test]
    fn malformed_entries_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bzImage");
        std::fs::write(&file, b"x").unwrap();
        let id = FileIdentity::of(&file).unwrap();
        let digest = "ab".repeat(32);
        for text in [
            String::new(),
            format!("{digest} zstd"),
            format!("{digest} rar 12"),
            format!("{digest} zstd twelve"),
            format!("{digest} zstd 12 more"),
            "../../etc zstd 12".to_string(),
        ] {
            let sum = bootscope_model::cache::checksum(text.as_bytes());
            let sealed = format!("{text} {sum:016x}\n");
            bootscope_model::cache::write_private(&id.entry_file(dir.path()), sealed.as_bytes())
                .unwrap();
            assert_eq!(lookup(dir.path(), &id), None, "{text:?}");
        }
        // A well-formed entry whose checksum does not match, or that others
        // may write, is not used either.
        let good = format!("{digest} zstd 12");
        let sum = bootscope_model::cache::checksum(good.as_bytes());
        let file = id.entry_file(dir.path());
        for (text, mode) in [
            (format!("{good} {:016x}\n", sum ^ 1), 0o600),
            (format!("{digest} zstd 13 {sum:016x}\n"), 0o600),
            (format!("{good} {sum:016x}\n"), 0o666),
        ] {
            bootscope_model::cache::write_private(&file, text.as_bytes()).unwrap();
            std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
            assert_eq!(lookup(dir.path(), &id), None, "{text:?} {mode:o}");
        }
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        assert!(lookup(dir.path(), &id).is_some());
    }
}
