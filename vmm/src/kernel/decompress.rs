//! Decompressing a bzImage's payload on the host.
//!
//! A bzImage is a small real-mode/protected-mode decompressor followed by a
//! compressed ELF `vmlinux` (the "payload", located by the setup header's
//! `payload_offset` and `payload_length`; the build appends the
//! decompressed size as four little-endian bytes). Booted the classic way,
//! the guest runs the decompressor itself, which takes seconds where guest
//! instructions are slow (nested virtualization) and real time anywhere.
//! Here the VMM decompresses the payload instead, checks that the result is
//! an x86-64 ELF with a usable entry (a PVH note or a 64-bit `e_entry`), and
//! keeps it in a cache keyed by the payload's SHA-256 so that later boots of
//! the same kernel skip the work (and, through the index by file identity
//! in [`super::identity`], later boots of the same unchanged file skip
//! reading and hashing it too).
//!
//! Supported: xz (Debian's and most distributions' choice), gzip and zstd.
//! Other compressions (lzma, bzip2, lzo, lz4) are reported as unusable and
//! the caller lets the guest decompress. A payload that claims a supported
//! compression but does not decompress (bad checksum, truncated stream,
//! wrong size) is corrupt: the guest's decompressor would fail on it too.

use std::io::Read;
use std::path::{Path, PathBuf};

use linux_loader::loader::bootparam::setup_header;
use sha2::{Digest, Sha256};

use super::identity::{self, FileIdentity, IndexEntry};
use crate::loader::{ElfSegment, EntryMode};

/// The largest decompressed kernel accepted (the size trailer of anything
/// larger is not a kernel's).
pub const MAX_DECOMPRESSED: u64 = 1 << 30;
/// Lowest entry address of a 64-bit kernel (1 MiB).
const MIN_ENTRY: u64 = 0x10_0000;
/// ELF note type of the PVH 32-bit entry point (`XEN_ELFNOTE_PHYS32_ENTRY`).
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
/// ELF note type naming the guest OS (`XEN_ELFNOTE_GUEST_OS`).
const XEN_ELFNOTE_GUEST_OS: u32 = 6;
const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;

/// The compression of a bzImage payload, recognized by its magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Xz,
    Gzip,
    Zstd,
    Lzma,
    Bzip2,
    Lzo,
    Lz4,
}

impl Compression {
    /// Recognizes the compression from the first bytes of the payload.
    pub fn detect(payload: &[u8]) -> Option<Compression> {
        let starts = |magic: &[u8]| payload.starts_with(magic);
        Some(if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Compression::Xz
        } else if starts(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else if starts(&[0x5d, 0, 0]) {
            Compression::Lzma
        } else if starts(b"BZh") {
            Compression::Bzip2
        } else if starts(&[0x89, b'L', b'Z', b'O']) {
            Compression::Lzo
        } else if starts(&[0x02, 0x21, 0x4c, 0x18]) {
            Compression::Lz4
        } else {
            return None;
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::Xz => "xz",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Lzma => "lzma",
            Compression::Bzip2 => "bzip2",
            Compression::Lzo => "lzo",
            Compression::Lz4 => "lz4",
        }
    }

    /// The compression called `name` (as [`Compression::name`] says it).
    pub fn from_name(name: &str) -> Option<Compression> {
        use Compression::*;
        [Xz, Gzip, Zstd, Lzma, Bzip2, Lzo, Lz4]
            .into_iter()
            .find(|c| c.name() == name)
    }

    /// Whether the host can decompress it.
    pub fn supported(self) -> bool {
        matches!(
            self,
            Compression::Xz | Compression::Gzip | Compression::Zstd
        )
    }
}

/// Why the host could not produce the kernel from a bzImage's payload.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The host cannot use this payload (an unsupported compression, no
    /// payload fields, a result without a usable entry); the guest's own
    /// decompressor may still boot it.
    #[error("{0}")]
    Unusable(String),
    /// The payload is damaged: it does not decompress to the size the image
    /// declares. Booting it would have the guest run garbage.
    #[error("its {compression} payload is corrupt: {detail}")]
    Corrupt {
        compression: &'static str,
        detail: String,
    },
    /// The kernel file could not be read.
    #[error("{0}")]
    Read(#[source] std::io::Error),
}

fn corrupt(c: Compression, detail: impl Into<String>) -> PayloadError {
    PayloadError::Corrupt {
        compression: c.name(),
        detail: detail.into(),
    }
}

/// The payload bytes of a bzImage (`image` is the whole file).
pub fn payload<'a>(image: &'a [u8], hdr: &setup_header) -> Result<&'a [u8], PayloadError> {
    let version = hdr.version;
    if version < 0x0208 {
        return Err(PayloadError::Unusable(format!(
            "boot protocol {version:#06x} has no payload fields (2.08 or later needed)"
        )));
    }
    let setup_sects = if hdr.setup_sects == 0 {
        4
    } else {
        u64::from(hdr.setup_sects)
    };
    let start = (setup_sects + 1) * 512 + u64::from(hdr.payload_offset);
    let len = u64::from(hdr.payload_length);
    if len == 0 {
        return Err(PayloadError::Unusable(
            "the setup header gives no payload (payload_length is 0)".into(),
        ));
    }
    let end = start.saturating_add(len);
    if end > image.len() as u64 {
        return Err(PayloadError::Corrupt {
            compression: "compressed",
            detail: format!(
                "the header puts it at bytes {start}..{end} but the file has {}",
                image.len()
            ),
        });
    }
    Ok(&image[start as usize..end as usize])
}

/// The decompressed size the build appended to the payload (its last four
/// bytes, little-endian).
pub fn declared_size(payload: &[u8]) -> Option<u64> {
    let tail: [u8; 4] = payload
        .get(payload.len().checked_sub(4)?..)?
        .try_into()
        .ok()?;
    Some(u64::from(u32::from_le_bytes(tail)))
}

/// Decompresses a payload, checking the result against the size trailer.
pub fn decompress(payload: &[u8]) -> Result<(Compression, Vec<u8>), PayloadError> {
    let c = Compression::detect(payload).ok_or_else(|| {
        PayloadError::Unusable(format!(
            "the payload's compression is not recognized (it starts with {})",
            hex(&payload[..payload.len().min(6)])
        ))
    })?;
    if !c.supported() {
        return Err(PayloadError::Unusable(format!(
            "{} payloads are not decompressed on the host (xz, gzip and zstd are)",
            c.name()
        )));
    }
    let expected = declared_size(payload).ok_or_else(|| corrupt(c, "it is too short"))?;
    if expected == 0 || expected > MAX_DECOMPRESSED {
        return Err(corrupt(
            c,
            format!("its size trailer says {expected} bytes"),
        ));
    }
    // Read one byte more than declared, to notice a longer stream.
    let limit = expected + 1;
    let mut out = Vec::with_capacity(expected as usize);
    let result = match c {
        Compression::Xz => xz_single_stream(payload, limit, &mut out),
        Compression::Gzip => flate2::bufread::GzDecoder::new(payload)
            .take(limit)
            .read_to_end(&mut out),
        Compression::Zstd => zstd::stream::read::Decoder::with_buffer(payload)
            .map(|d| d.single_frame())
            .and_then(|d| d.take(limit).read_to_end(&mut out)),
        _ => unreachable!("checked supported above"),
    };
    if let Err(e) = result {
        return Err(corrupt(c, e.to_string()));
    }
    if out.len() as u64 != expected {
        return Err(corrupt(
            c,
            format!(
                "it decompresses to {}{} bytes, but its size trailer says {expected}",
                out.len(),
                if out.len() as u64 == limit {
                    " or more"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok((c, out))
}

/// Decodes the one xz stream at the start of `input` (the kernel's size
/// trailer follows it) into `out`, at most `limit` bytes.
fn xz_single_stream(input: &[u8], limit: u64, out: &mut Vec<u8>) -> std::io::Result<usize> {
    use xz2::stream::{Action, Status, Stream};
    let mut stream = Stream::new_stream_decoder(u64::MAX, 0)?;
    out.reserve_exact((limit as usize).saturating_sub(out.len()));
    loop {
        let (before_in, before_out) = (stream.total_in(), out.len());
        let rest = &input[before_in as usize..];
        let action = if rest.is_empty() {
            Action::Finish
        } else {
            Action::Run
        };
        if stream.process_vec(rest, out, action)? == Status::StreamEnd {
            return Ok(out.len());
        }
        if out.len() as u64 >= limit {
            // As much as allowed: the caller reports the size mismatch.
            return Ok(out.len());
        }
        if stream.total_in() == before_in && out.len() == before_out {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the xz stream ends early",
            ));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the loader needs of a decompressed vmlinux.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfKernel {
    /// Where and how the boot vCPU enters it.
    pub entry: u64,
    pub mode: EntryMode,
    pub segments: Vec<ElfSegment>,
    /// First byte past the highest segment.
    pub end: u64,
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Checks that `elf` is an x86-64 kernel the VMM can enter, and how: at its
/// 64-bit `e_entry` (Linux 64-bit boot protocol) when that lies in a
/// loadable segment, else through its PVH note. The error says what is
/// missing.
pub fn inspect_elf(elf: &[u8]) -> Result<ElfKernel, String> {
    if !elf.starts_with(b"\x7fELF") {
        return Err("the decompressed payload is not an ELF file".into());
    }
    let short = || "the decompressed ELF header is truncated".to_string();
    if elf.get(4) != Some(&2) || le_u16(elf, 18) != Some(62) {
        return Err("the decompressed payload is not an x86-64 ELF64 kernel".into());
    }
    let e_entry = le_u64(elf, 24).ok_or_else(short)?;
    let phoff = le_u64(elf, 32).ok_or_else(short)?;
    let phentsize = u64::from(le_u16(elf, 54).ok_or_else(short)?);
    let phnum = u64::from(le_u16(elf, 56).ok_or_else(short)?);
    if phentsize < 56 || phoff.saturating_add(phnum * phentsize) > elf.len() as u64 {
        return Err("the decompressed ELF's program headers are outside the file".into());
    }
    let mut segments = Vec::new();
    let mut pvh = None;
    for i in 0..phnum {
        let ph = (phoff + i * phentsize) as usize;
        let field = |at: usize| le_u64(elf, ph + at).unwrap_or_default();
        let p_type = le_u32(elf, ph).unwrap_or_default();
        let (offset, paddr, filesz, memsz) = (field(8), field(24), field(32), field(40));
        if offset.saturating_add(filesz) > elf.len() as u64 {
            return Err(format!(
                "the decompressed ELF's segment {i} runs past the end of the file"
            ));
        }
        match p_type {
            PT_LOAD => segments.push(ElfSegment {
                offset,
                paddr,
                filesz,
                memsz,
            }),
            PT_NOTE if pvh.is_none() => {
                pvh = pvh_entry(&elf[offset as usize..(offset + filesz) as usize]);
            }
            _ => {}
        }
    }
    if segments.is_empty() {
        return Err("the decompressed ELF has no loadable segment".into());
    }
    let mut ranges: Vec<(u64, u64)> = segments
        .iter()
        .map(|s| (s.paddr, s.paddr.saturating_add(s.memsz.max(s.filesz))))
        .collect();
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err("the decompressed ELF has overlapping loadable segments".into());
    }
    let end = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let inside = |a: u64| ranges.iter().any(|r| (r.0..r.1).contains(&a));
    // A bzImage's vmlinux has its 64-bit entry (startup_64) at e_entry:
    // entered there with a zero page, the kernel skips the PVH path's probe
    // for Xen (256 CPUID leaves, each a VM exit). The PVH note serves
    // when e_entry does not.
    let (entry, mode) = if e_entry >= MIN_ENTRY && inside(e_entry) {
        (e_entry, EntryMode::Linux64)
    } else if let Some(e) = pvh.filter(|&e| inside(e)) {
        (e, EntryMode::Pvh)
    } else {
        return Err(format!(
            "the decompressed ELF has no usable entry (e_entry {e_entry:#x} is not a 64-bit \
             entry inside its segments, and {})",
            match pvh {
                Some(e) => format!("its PVH entry {e:#x} lies outside them"),
                None => "it has no PVH note".to_string(),
            }
        ));
    };
    Ok(ElfKernel {
        entry,
        mode,
        segments,
        end,
    })
}

/// Whether a PT_NOTE segment's notes name the guest OS as Linux
/// (`XEN_ELFNOTE_GUEST_OS` "linux", which every x86 vmlinux built with PVH
/// or Xen support carries): its `e_entry` is then `startup_64`.
pub fn notes_say_linux(notes: &[u8]) -> bool {
    find_note(notes, XEN_ELFNOTE_GUEST_OS).is_some_and(|d| d.starts_with(b"linux"))
}

/// The descriptor of the first "Xen" note of type `kind`.
fn find_note(notes: &[u8], kind: u32) -> Option<&[u8]> {
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = le_u32(notes, at)? as usize;
        let descsz = le_u32(notes, at + 4)? as usize;
        let k = le_u32(notes, at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(namesz.next_multiple_of(4))?;
        if k == kind && notes.get(name_at..name_at + namesz)? == b"Xen\0" {
            return notes.get(desc_at..desc_at.checked_add(descsz)?);
        }
        at = desc_at.checked_add(descsz.next_multiple_of(4))?;
    }
    None
}

/// The PVH entry address from a PT_NOTE segment's notes, if there is one.
fn pvh_entry(notes: &[u8]) -> Option<u64> {
    let desc = find_note(notes, XEN_ELFNOTE_PHYS32_ENTRY)?;
    match desc.len() {
        4 => le_u32(desc, 0).map(u64::from),
        8 => le_u64(desc, 0),
        _ => None,
    }
}

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
    let (cache, cache_note) = match &cache_file {
        None => (CacheUse::Off, Some("no cache directory".to_string())),
        Some(file) => match cache_dir
            .map_or(Ok(()), |d| bootscope_model::cache::private_dir(d, d))
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|()| bootscope_model::cache::store(file, &vmlinux))
        {
            Ok(()) => {
                index(compression, vmlinux.len() as u64);
                match rebuilt {
                    Some(why) => (CacheUse::Rebuilt, Some(why)),
                    None => (CacheUse::Miss, None),
                }
            }
            Err(e) => (
                CacheUse::Off,
                Some(format!("cannot write {}: {e}", file.display())),
            ),
        },
    };
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
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    fn pvh_elf() -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mini-pvh.elf");
        std::fs::read(path).unwrap()
    }

    /// `data` compressed as the kernel build does: the stream, then the
    /// decompressed size as four little-endian bytes.
    pub(crate) fn kernel_payload(c: Compression, data: &[u8]) -> Vec<u8> {
        let mut out = match c {
            Compression::Xz => {
                let mut e = xz2::write::XzEncoder::new(Vec::new(), 6);
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Zstd => {
                // With a checksum, as the zstd command the kernel build
                // runs writes by default.
                let mut e = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
                e.include_checksum(true).unwrap();
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            other => panic!("no encoder for {other:?}"),
        };
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out
    }

    #[test]
    fn detects_every_kernel_compression_by_magic() {
        let cases: [(&[u8], Compression); 7] = [
            (&[0xfd, b'7', b'z', b'X', b'Z', 0, 0], Compression::Xz),
            (&[0x1f, 0x8b, 8], Compression::Gzip),
            (&[0x28, 0xb5, 0x2f, 0xfd, 0], Compression::Zstd),
            (&[0x5d, 0, 0, 0x80], Compression::Lzma),
            (b"BZh9", Compression::Bzip2),
            (&[0x89, b'L', b'Z', b'O', 0], Compression::Lzo),
            (&[0x02, 0x21, 0x4c, 0x18], Compression::Lz4),
        ];
        for (magic, c) in cases {
            assert_eq!(Compression::detect(magic), Some(c), "{magic:02x?}");
        }
        assert_eq!(Compression::detect(b"\x7fELF"), None);
    }

    #[test]
    fn decompresses_xz_gzip_and_zstd_to_the_declared_size() {
        let elf = pvh_elf();
        for c in [Compression::Xz, Compression::Gzip, Compression::Zstd] {
            let (got_c, got) = decompress(&kernel_payload(c, &elf)).unwrap();
            assert_eq!(got_c, c);
            assert_eq!(got, elf, "{c:?}");
        }
    }

    #[test]
    fn unsupported_compressions_are_unusable_not_corrupt() {
        let mut lz4 = vec![0x02, 0x21, 0x4c, 0x18];
        lz4.extend_from_slice(&[0; 32]);
        let e = decompress(&lz4).unwrap_err();
        assert!(
            matches!(&e, PayloadError::Unusable(m) if m.contains("lz4")),
            "{e}"
        );
        let e = decompress(b"no magic here at all").unwrap_err();
        assert!(matches!(e, PayloadError::Unusable(_)), "{e}");
    }

    #[test]
    fn damaged_payloads_are_corrupt() {
        let elf = pvh_elf();
        for c in [Compression::Xz, Compression::Gzip, Compression::Zstd] {
            let good = kernel_payload(c, &elf);
            // A flipped byte in the middle of the stream.
            let mut flipped = good.clone();
            let mid = flipped.len() / 2;
            flipped[mid] ^= 0x55;
            // The stream cut short (the size trailer kept).
            let mut cut = good[..good.len() / 2].to_vec();
            cut.extend_from_slice(&good[good.len() - 4..]);
            // A size trailer that disagrees with the stream.
            let mut wrong = good.clone();
            let n = wrong.len();
            wrong[n - 4..].copy_from_slice(&(elf.len() as u32 + 7).to_le_bytes());
            for (what, p) in [("flipped", flipped), ("cut", cut), ("wrong size", wrong)] {
                let e = decompress(&p).unwrap_err();
                assert!(
                    matches!(e, PayloadError::Corrupt { compression, .. } if compression == c.name()),
                    "{c:?} {what}: {e}"
                );
            }
        }
    }

    /// mini-pvh.elf with e_entry 0: only its PVH note is an entry.
    pub(crate) fn pvh_only_elf() -> Vec<u8> {
        let mut elf = pvh_elf();
        elf[24..32].copy_from_slice(&0u64.to_le_bytes());
        elf
    }

    #[test]
    fn inspects_entries_preferring_the_64bit_one() {
        // mini-pvh.elf: e_entry 0x100000 inside its segment, and a PVH note.
        let k = inspect_elf(&pvh_elf()).unwrap();
        assert_eq!((k.entry, k.mode), (0x100000, EntryMode::Linux64));
        assert_eq!(k.segments.len(), 1);
        let k = inspect_elf(&pvh_only_elf()).unwrap();
        assert_eq!((k.entry, k.mode), (0x100000, EntryMode::Pvh));
        let noentry = std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mini-noentry.elf"),
        )
        .unwrap();
        let e = inspect_elf(&noentry).unwrap_err();
        assert!(
            e.contains("no usable entry") && e.contains("no PVH note"),
            "{e}"
        );
        assert!(inspect_elf(b"plain text").is_err());
    }

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

    #[test]
    fn linux_guest_os_note() {
        let note = |name: &[u8], kind: u32, desc: &[u8]| {
            let mut n = Vec::new();
            n.extend_from_slice(&(name.len() as u32).to_le_bytes());
            n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            n.extend_from_slice(&kind.to_le_bytes());
            n.extend_from_slice(name);
            n.resize(n.len().next_multiple_of(4), 0);
            n.extend_from_slice(desc);
            n.resize(n.len().next_multiple_of(4), 0);
            n
        };
        let mut notes = note(b"Xen\0", 7, b"2.6\0");
        notes.extend(note(b"Xen\0", 6, b"linux\0"));
        assert!(notes_say_linux(&notes));
        assert!(!notes_say_linux(&note(b"Xen\0", 6, b"freebsd\0")));
        assert!(!notes_say_linux(&note(b"GNU\0", 6, b"linux\0")));
        // The fixture's only note is its PVH entry.
        assert!(!notes_say_linux(&pvh_elf()[0x174..0x188]));
        assert_eq!(pvh_entry(&pvh_elf()[0x174..0x188]), Some(0x100000));
    }
}
