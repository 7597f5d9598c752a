//! The cache of kernels decompressed on the host: each kept under the
//! SHA-256 of its bzImage's payload in bootscope's cache directory, sealed,
//! and verified (owner, size, seal, a usable entry) before it is used; the
//! index by file identity ([`super::identity`]) finds a known, unchanged
//! file's kernel without reading or hashing the file.

use std::path::{Path, PathBuf};

use linux_loader::loader::bootparam::setup_header;
use sha2::{Digest, Sha256};

use super::decompress::{declared_size, decompress, hex, inspect_elf, payload};
use super::decompress::{Compression, ElfKernel, PayloadError};
use super::identity::{self, FileIdentity, IndexEntry};

/// Where decompressed kernels are kept: the `kernels` directory of
/// bootscope's cache ([`bootscope_model::cache`]: `$XDG_CACHE_HOME/bootscope`,
/// else `~/.cache/bootscope`, else for root `/var/cache/bootscope`),
/// created private where missing and checked to be this user's own and
/// writable by no one else. The error says why it cannot be used.
pub fn user_cache_dir() -> Result<PathBuf, bootscope_model::cache::CacheError> {
    bootscope_model::cache::cache_dir("kernels")
}

/// The kernel cache directory a root process whose `XDG_CACHE_HOME` and
/// `HOME` are these would use (by the same rules as [`user_cache_dir`]),
/// not created or checked: where a bootscope run elsewhere (the lab
/// machine) looks for its kernels.
pub fn cache_dir_for(
    xdg_cache_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    let var = |v: Option<&std::ffi::OsStr>| {
        v.filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    bootscope_model::cache::cache_base_for(var(xdg_cache_home), var(home), 0)
        .ok()
        .map(|base| base.join("kernels"))
}

/// The files that make up the cache entry whose kernel is `cache_file` (a
/// [`HostKernel::cache_file`]): what carrying the entry into another cache
/// directory takes, each under the same name there. A lookup there verifies
/// them as it verifies any entry.
pub fn entry_files(cache_file: &Path) -> Vec<PathBuf> {
    vec![
        cache_file.to_path_buf(),
        bootscope_model::cache::seal_path(cache_file),
    ]
}

/// A decompressed kernel in memory: freshly decompressed, or the cached
/// file mapped read-only.
pub enum KernelBytes {
    Owned(Vec<u8>),
    Mapped(MappedFile),
}

impl KernelBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            KernelBytes::Owned(v) => v,
            KernelBytes::Mapped(m) => m.as_slice(),
        }
    }
}

/// A whole file mapped read-only (private), with its pages populated.
pub struct MappedFile {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone; reading it
// from another thread is as safe as reading a `&[u8]`.
unsafe impl Send for MappedFile {}

impl MappedFile {
    /// Maps the whole of an open file (of `len` bytes, from its metadata).
    pub fn map(file: &std::fs::File, len: u64) -> std::io::Result<MappedFile> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        if len == 0 {
            return Err(std::io::Error::other("empty file"));
        }
        // SAFETY: a new private read-only mapping of a file we opened; the
        // kernel picks the address, so nothing existing is replaced.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MappedFile { ptr, len })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is a readable mapping that lives as long as
        // `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `open`, which no
        // slice outlives (they borrow `self`).
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// Whether the decompressed kernel came from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheUse {
    /// Found in the cache: nothing was decompressed.
    Hit,
    /// Decompressed and stored in the cache.
    Miss,
    /// Found in the cache but not as it was stored (its checksum does not
    /// match, it has none, or the file is not this user's own): decompressed
    /// again and stored over it (`HostKernel::cache_note` says why).
    Rebuilt,
    /// Decompressed; no cache (none configured, or it could not be written:
    /// see `HostKernel::cache_note`).
    Off,
}

impl CacheUse {
    pub fn name(self) -> &'static str {
        match self {
            CacheUse::Hit => "hit",
            CacheUse::Miss => "miss",
            CacheUse::Rebuilt => "rebuilt",
            CacheUse::Off => "off",
        }
    }
}

/// A bzImage's kernel, decompressed on the host and ready to load.
pub struct HostKernel {
    pub compression: Compression,
    pub bytes: KernelBytes,
    pub elf: ElfKernel,
    pub cache: CacheUse,
    /// The cache file (read or written).
    pub cache_file: Option<PathBuf>,
    /// Why the cache was not used, when it was not.
    pub cache_note: Option<String>,
    /// Time spent hashing the payload (None: the cache's index by file
    /// identity named the kernel, nothing was read or hashed).
    pub hash_ns: Option<u64>,
    /// Time spent decompressing (0 on a cache hit).
    pub decompress_ns: u64,
}

/// Reads the bzImage at `path`, and returns its kernel decompressed, from
/// the cache in `cache_dir` when it is there (and storing it there when it
/// was not). The cache's index by file identity (see [`identity`]) finds a
/// known, unchanged file's kernel without reading the file.
///
/// [`identity`]: super::identity
pub fn host_kernel(
    path: &Path,
    hdr: &setup_header,
    cache_dir: Option<&Path>,
) -> Result<HostKernel, PayloadError> {
    let id = cache_dir.and_then(|_| FileIdentity::of(path).ok());
    if let (Some(dir), Some(id)) = (cache_dir, &id) {
        if let Some(k) = known_file(dir, id) {
            return Ok(k);
        }
    }
    let image = bootscope_model::input::read_input(path)
        .map_err(|e| PayloadError::Read(std::io::Error::other(e.to_string())))?;
    let payload = payload(&image, hdr)?;
    let compression = Compression::detect(payload);
    let t = std::time::Instant::now();
    let digest = hex(&Sha256::digest(payload));
    let hash_ns = Some(t.elapsed().as_nanos() as u64);
    let cache_file = cache_dir.map(|d| d.join(format!("vmlinux-{digest}")));
    // Indexed only when the file did not change while it was read.
    let index = |c: Compression, size: u64| {
        if let (Some(dir), Some(id)) = (cache_dir, &id) {
            if FileIdentity::of(path).ok().as_ref() == Some(id) {
                let entry = IndexEntry {
                    digest: digest.clone(),
                    compression: c,
                    size,
                };
                // An index that cannot be written costs the next boot a hash.
                let _ = identity::record(dir, id, &entry);
            }
        }
    };
    let mut rebuilt = None;
    if let (Some(file), Some(c)) = (&cache_file, compression) {
        let found = match cached(file, declared_size(payload)) {
            Found::Sound(bytes, elf) => Some((bytes, elf)),
            Found::Absent => None,
            Found::Damaged(why) => {
                rebuilt = Some(why);
                None
            }
        };
        if let Some((bytes, elf)) = found {
            index(c, bytes.as_slice().len() as u64);
            return Ok(HostKernel {
                compression: c,
                bytes,
                elf,
                cache: CacheUse::Hit,
                cache_file: cache_file.clone(),
                cache_note: None,
                hash_ns,
                decompress_ns: 0,
            });
        }
    }
    let t = std::time::Instant::now();
    let (compression, vmlinux) = decompress(payload)?;
    let decompress_ns = t.elapsed().as_nanos() as u64;
    let elf = inspect_elf(&vmlinux).map_err(PayloadError::Unusable)?;
    let (cache, cache_note) = store(cache_dir, cache_file.as_deref(), &vmlinux, rebuilt);
    if matches!(cache, CacheUse::Miss | CacheUse::Rebuilt) {
        index(compression, vmlinux.len() as u64);
    }
    Ok(HostKernel {
        compression,
        bytes: KernelBytes::Owned(vmlinux),
        elf,
        cache,
        cache_file: if matches!(cache, CacheUse::Miss | CacheUse::Rebuilt) {
            cache_file
        } else {
            None
        },
        cache_note,
        hash_ns,
        decompress_ns,
    })
}

/// Stores a kernel just decompressed as `file` in the cache directory
/// `dir` (made private first): a miss, or a rebuilt entry when `rebuilt`
/// says why the old one was not sound; the cache is off (said why) when
/// there is none or it cannot be written.
fn store(
    dir: Option<&Path>,
    file: Option<&Path>,
    vmlinux: &[u8],
    rebuilt: Option<String>,
) -> (CacheUse, Option<String>) {
    let Some(file) = file else {
        return (CacheUse::Off, Some("no cache directory".to_string()));
    };
    let stored = dir
        .map_or(Ok(()), |d| bootscope_model::cache::private_dir(d, d))
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|()| bootscope_model::cache::store(file, vmlinux));
    match (stored, rebuilt) {
        (Ok(()), Some(why)) => (CacheUse::Rebuilt, Some(why)),
        (Ok(()), None) => (CacheUse::Miss, None),
        (Err(e), _) => (
            CacheUse::Off,
            Some(format!("cannot write {}: {e}", file.display())),
        ),
    }
}

/// The cached kernel of a file the index knows, unchanged since (and
/// sound: a damaged entry is found again by the payload's digest, and
/// rebuilt there).
fn known_file(dir: &Path, id: &FileIdentity) -> Option<HostKernel> {
    let entry = identity::lookup(dir, id)?;
    let file = dir.join(format!("vmlinux-{}", entry.digest));
    let Found::Sound(bytes, elf) = cached(&file, Some(entry.size)) else {
        return None;
    };
    Some(HostKernel {
        compression: entry.compression,
        bytes,
        elf,
        cache: CacheUse::Hit,
        cache_file: Some(file),
        cache_note: None,
        hash_ns: None,
        decompress_ns: 0,
    })
}

/// What the cache holds for a kernel.
enum Found {
    /// The entry, as it was stored: its seal matches.
    Sound(KernelBytes, ElfKernel),
    /// No entry.
    Absent,
    /// An entry that must not be used, and why (for the timeline):
    /// `checksum mismatch`, `no checksum`, or what is wrong with the file.
    Damaged(String),
}

/// The cached kernel at `file`: opened without following a link or
/// blocking, checked to be this user's own private regular file, of the
/// declared size, matching its seal (XXH3 of its contents), and a usable
/// kernel.
fn cached(file: &Path, declared: Option<u64>) -> Found {
    use bootscope_model::cache;
    let (f, meta) = match cache::open_file(file) {
        Ok(Some(found)) => found,
        Ok(None) => return Found::Absent,
        Err(e) => return Found::Damaged(e.to_string()),
    };
    if Some(meta.len()) != declared {
        return Found::Damaged(format!(
            "size {} where the kernel declares {}",
            meta.len(),
            declared.unwrap_or(0)
        ));
    }
    let mapped = match MappedFile::map(&f, meta.len()) {
        Ok(m) => m,
        Err(e) => return Found::Damaged(format!("cannot map it: {e}")),
    };
    if let Some(why) = cache::verify(file, mapped.as_slice()).why_rebuilt() {
        return Found::Damaged(why.to_string());
    }
    match inspect_elf(mapped.as_slice()) {
        Ok(elf) => Found::Sound(KernelBytes::Mapped(mapped), elf),
        Err(e) => Found::Damaged(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_follows_xdg_then_home() {
        let dir = |x: Option<&str>, h: Option<&str>| {
            cache_dir_for(x.map(std::ffi::OsStr::new), h.map(std::ffi::OsStr::new))
        };
        assert_eq!(
            dir(Some("/x"), Some("/root")),
            Some(PathBuf::from("/x/bootscope/kernels"))
        );
        // A relative or empty XDG_CACHE_HOME is ignored, as the spec says.
        for x in [Some("rel"), Some(""), None] {
            assert_eq!(
                dir(x, Some("/root")),
                Some(PathBuf::from("/root/.cache/bootscope/kernels"))
            );
        }
        // Without either variable, root's cache is /var/cache/bootscope.
        assert_eq!(
            dir(None, Some("")),
            Some(PathBuf::from("/var/cache/bootscope/kernels"))
        );
        assert_eq!(
            dir(None, None),
            Some(PathBuf::from("/var/cache/bootscope/kernels"))
        );
    }
}
