//! Kernel and initrd loading: format detection by content, the Linux x86 boot
//! protocol (bzImage) and ELF `vmlinux` with or without a PVH entry note.
//!
//! Copying is linux-loader's and ELF headers are read with `object`; this
//! module adds the checks a user needs to hear about in plain words
//! (truncated image, no entry point, too little memory, a command line
//! longer than the kernel accepts). [`probe`] tells the format and checks it
//! before anything is loaded, [`payload`] places the initrd and command
//! line, and [`crate::kernel::cache`] keeps the kernels decompressed on the
//! host.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use linux_loader::loader::bootparam::setup_header;
use linux_loader::loader::{bzimage::BzImage, elf::Elf, KernelLoader, PvhBootCapability};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::kernel::cache::{self, CacheUse, HostKernel};
use crate::kernel::decompress::{Compression, PayloadError};
use crate::layout;
use crate::timeline::{vmm_marks, Recorder, TimelineKernelBoot};

mod error;
mod payload;
mod probe;

pub use crate::kernel::elf::{ElfSegment, EntryMode};
pub use error::LoadError;
pub use payload::{check_initrd, load_cmdline, load_initrd, low_ram_end, map_file_over_guest};
use probe::{open_image, read_at};
pub use probe::{probe_kernel, KernelProbe};

/// x86 `COMMAND_LINE_SIZE`: the most an ELF/PVH kernel accepts.
pub const DEFAULT_CMDLINE_MAX: usize = 2048;
/// Where the boot protocol puts the 64-bit entry in the protected-mode code.
const BZIMAGE_64BIT_ENTRY_OFFSET: u64 = 0x200;

/// What kind of kernel image a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFormat {
    BzImage,
    Elf,
}

impl KernelFormat {
    pub fn name(self) -> &'static str {
        match self {
            KernelFormat::BzImage => "bzimage",
            KernelFormat::Elf => "elf",
        }
    }
}

/// Where the kernel was put and how to enter it.
#[derive(Clone, Debug)]
pub struct LoadedKernel {
    pub format: KernelFormat,
    pub entry: GuestAddress,
    pub mode: EntryMode,
    /// Lowest guest-physical address of the kernel's image.
    pub start: u64,
    /// First byte past the memory the kernel uses while it boots (the
    /// image; for a bzImage also the `init_size` bytes it decompresses
    /// into): the lowest address an initrd may use.
    pub end: u64,
    /// The image's setup header (bzImage only), to seed the zero page.
    pub setup_header: Option<setup_header>,
    /// Longest command line (without the NUL) the kernel accepts.
    pub cmdline_max: usize,
    /// Bytes of the image the guest sees as the file's page cache rather
    /// than a copy (0: kernels are copied into guest RAM, which KVM can map
    /// with large pages).
    pub mapped_from_file: u64,
    /// How a bzImage was decompressed and entered (None for ELF kernels).
    pub boot: Option<TimelineKernelBoot>,
}

/// Where the initrd was put.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LoadedInitrd {
    pub addr: u64,
    pub size: u64,
    /// True when the guest sees the file's page-cache pages (copy-on-write)
    /// instead of a copy.
    pub mapped_from_file: bool,
}

/// How a bzImage's compressed kernel is handled.
#[derive(Clone, Debug, Default)]
pub struct DecompressOptions {
    /// Let the guest run the bzImage's own decompressor (the classic boot)
    /// instead of decompressing on the host.
    pub in_guest: bool,
    /// Where decompressed kernels are cached (None: not cached).
    pub cache_dir: Option<PathBuf>,
}

type HostResult = Result<HostKernel, PayloadError>;

/// A probed kernel whose bzImage payload may be decompressing on a thread
/// of its own while the VMM sets up memory.
pub struct PreparedKernel {
    path: PathBuf,
    probe: KernelProbe,
    host: Option<std::thread::JoinHandle<HostResult>>,
}

impl PreparedKernel {
    pub fn format(&self) -> KernelFormat {
        self.probe.format
    }
}

/// Probes the kernel (bad input fails here, at once) and, for a bzImage
/// unless `opts.in_guest`, starts decompressing its payload on a thread.
/// `recorder` gets a mark when the decompressed kernel is ready.
pub fn prepare_kernel(
    path: &Path,
    opts: &DecompressOptions,
    recorder: Option<Arc<Recorder>>,
) -> Result<PreparedKernel, LoadError> {
    let probe = probe_kernel(path)?;
    let host = match (probe.format, probe.setup_header) {
        (KernelFormat::BzImage, Some(hdr)) if !opts.in_guest => {
            let file = path.to_path_buf();
            let cache = opts.cache_dir.clone();
            let job = move || {
                let r = cache::host_kernel(&file, &hdr, cache.as_deref());
                if let (Some(rec), Ok(k)) = (&recorder, &r) {
                    rec.vmm(&match (k.cache, &k.cache_note) {
                        (CacheUse::Hit, _) => vmm_marks::KERNEL_FROM_CACHE.to_string(),
                        // Says in the timeline that the cache entry was not
                        // used, and why.
                        (CacheUse::Rebuilt, Some(why)) => {
                            format!("{} (cache: rebuilt, {why})", vmm_marks::KERNEL_DECOMPRESSED)
                        }
                        _ => vmm_marks::KERNEL_DECOMPRESSED.to_string(),
                    });
                }
                r
            };
            Some(
                std::thread::Builder::new()
                    .name("kernel-decompress".into())
                    .spawn(job)
                    .map_err(|source| LoadError::KernelRead {
                        path: path.to_path_buf(),
                        source,
                    })?,
            )
        }
        _ => None,
    };
    Ok(PreparedKernel {
        path: path.to_path_buf(),
        probe,
        host,
    })
}

/// Loads the kernel into guest memory, decompressed on the host when the
/// payload allows (see [`DecompressOptions`]).
pub fn load_kernel(
    mem: &GuestMemoryMmap,
    path: &Path,
    memory_bytes: u64,
    opts: &DecompressOptions,
) -> Result<LoadedKernel, LoadError> {
    prepare_kernel(path, opts, None)?.load(mem, memory_bytes)
}

impl PreparedKernel {
    /// Waits for the decompression (if any) and loads the kernel.
    pub fn load(self, mem: &GuestMemoryMmap, memory_bytes: u64) -> Result<LoadedKernel, LoadError> {
        let PreparedKernel { path, probe, host } = self;
        let path = path.as_path();
        let too_small = |needed: u64| LoadError::MemoryTooSmall {
            path: path.to_path_buf(),
            memory_mib: memory_bytes >> 20,
            needed_mib: needed.div_ceil(1 << 20),
        };
        let needed = probe.min_memory.max(layout::HIMEM_START + (1 << 20));
        if memory_bytes < needed {
            return Err(too_small(needed));
        }
        if probe.format == KernelFormat::Elf {
            return load_elf_file(mem, path, &probe);
        }
        let hdr = probe.setup_header;
        let reason = match host.map(|h| h.join()) {
            None => "--guest-decompress".to_string(),
            Some(Ok(Ok(k))) => {
                if memory_bytes < k.elf.end {
                    return Err(too_small(k.elf.end));
                }
                return load_host_kernel(mem, path, hdr, k);
            }
            Some(Ok(Err(PayloadError::Unusable(why)))) => why,
            Some(Ok(Err(PayloadError::Corrupt {
                compression,
                detail,
            }))) => {
                return Err(LoadError::CorruptPayload {
                    path: path.to_path_buf(),
                    compression,
                    detail,
                })
            }
            Some(Ok(Err(PayloadError::Read(source)))) => {
                return Err(LoadError::KernelRead {
                    path: path.to_path_buf(),
                    source,
                })
            }
            Some(Err(_)) => "the decompression thread failed".to_string(),
        };
        load_bzimage_for_guest(mem, path, &probe, reason)
    }
}

/// The longest command line a bzImage's setup header allows.
fn bzimage_cmdline_max(hdr: Option<&setup_header>) -> usize {
    hdr.map(|h| {
        if h.version >= 0x0206 && h.cmdline_size > 0 {
            h.cmdline_size as usize
        } else {
            255
        }
    })
    .unwrap_or(255)
}

/// Copies the segments of a host-decompressed kernel into guest RAM.
fn load_host_kernel(
    mem: &GuestMemoryMmap,
    path: &Path,
    hdr: Option<setup_header>,
    k: HostKernel,
) -> Result<LoadedKernel, LoadError> {
    let bytes = k.bytes.as_slice();
    for seg in &k.elf.segments {
        let data = &bytes[seg.offset as usize..(seg.offset + seg.filesz) as usize];
        mem.write_slice(data, GuestAddress(seg.paddr))
            .map_err(|e| LoadError::GuestWrite {
                what: "decompressed kernel",
                detail: format!("{}: {e}", path.display()),
            })?;
    }
    let (entry_name, cmdline_max) = match k.elf.mode {
        EntryMode::Pvh => ("pvh", DEFAULT_CMDLINE_MAX - 1),
        EntryMode::Linux64 => ("linux64", bzimage_cmdline_max(hdr.as_ref())),
    };
    Ok(LoadedKernel {
        format: KernelFormat::BzImage,
        entry: GuestAddress(k.elf.entry),
        mode: k.elf.mode,
        start: k
            .elf
            .segments
            .iter()
            .map(|s| s.paddr)
            .min()
            .unwrap_or(k.elf.entry),
        end: k.elf.end,
        setup_header: hdr,
        cmdline_max,
        mapped_from_file: 0,
        boot: Some(TimelineKernelBoot {
            decompressed_by: "host".into(),
            compression: Some(k.compression.name().into()),
            entry: entry_name.into(),
            kaslr: Some(false),
            cache: Some(k.cache.name().into()),
            cache_file: k.cache_file.map(|p| p.display().to_string()),
            cache_note: k.cache_note,
            decompressed_bytes: Some(bytes.len() as u64),
            hash_ns: k.hash_ns,
            decompress_ns: Some(k.decompress_ns),
            reason: None,
        }),
    })
}

/// Loads a bzImage the classic way: its protected-mode code at 1 MiB,
/// entered at its 64-bit entry, where it decompresses itself.
fn load_bzimage_for_guest(
    mem: &GuestMemoryMmap,
    path: &Path,
    probe: &KernelProbe,
    reason: String,
) -> Result<LoadedKernel, LoadError> {
    let mut file = reopen(path)?;
    let res = BzImage::load(
        mem,
        None,
        &mut file,
        Some(GuestAddress(layout::HIMEM_START)),
    )
    .map_err(|source| LoadError::Loader {
        path: path.to_path_buf(),
        source,
    })?;
    let hdr = res.setup_header.or(probe.setup_header);
    let compression = hdr.as_ref().and_then(|h| {
        let mut head = [0u8; 8];
        let at = (u64::from(if h.setup_sects == 0 { 4 } else { h.setup_sects }) + 1) * 512
            + u64::from(h.payload_offset);
        let n = read_at(&mut file, at, &mut head).ok()?;
        Compression::detect(&head[..n]).map(|c| c.name().to_string())
    });
    Ok(LoadedKernel {
        format: KernelFormat::BzImage,
        entry: GuestAddress(res.kernel_load.0 + BZIMAGE_64BIT_ENTRY_OFFSET),
        mode: EntryMode::Linux64,
        start: res.kernel_load.0,
        // The decompressor claims init_size bytes from the load address,
        // past the image's own end: an initrd there would be overwritten
        // before the kernel reads it.
        end: res.kernel_end.max(probe.min_memory),
        cmdline_max: bzimage_cmdline_max(hdr.as_ref()),
        setup_header: hdr,
        // A bzImage decompresses itself over its own memory: a copy it
        // must be.
        mapped_from_file: 0,
        boot: Some(TimelineKernelBoot {
            decompressed_by: "guest".into(),
            compression,
            entry: "bzimage-linux64".into(),
            kaslr: Some(true),
            cache: None,
            cache_file: None,
            cache_note: None,
            decompressed_bytes: None,
            hash_ns: None,
            decompress_ns: None,
            reason: Some(reason),
        }),
    })
}

/// Opens the probed kernel again (a file swapped for a non-regular one
/// since is refused).
fn reopen(path: &Path) -> Result<File, LoadError> {
    let read_err = |source| LoadError::KernelRead {
        path: path.to_path_buf(),
        source,
    };
    let (file, _) = open_image(path)
        .map_err(read_err)?
        .map_err(|_| read_err(std::io::Error::other("it is no longer a regular file")))?;
    Ok(file)
}

/// Loads an ELF vmlinux: its segments copied into guest RAM, entered
/// through its PVH note or at `e_entry`.
fn load_elf_file(
    mem: &GuestMemoryMmap,
    path: &Path,
    probe: &KernelProbe,
) -> Result<LoadedKernel, LoadError> {
    let mut file = reopen(path)?;
    let res = Elf::load(mem, None, &mut file, None).map_err(|e| match e {
        linux_loader::loader::Error::Elf(linux_loader::loader::elf::Error::InvalidEntryAddress) => {
            LoadError::ElfNoEntry {
                path: path.to_path_buf(),
            }
        }
        other => LoadError::Loader {
            path: path.to_path_buf(),
            source: other,
        },
    })?;
    let inside = |addr: GuestAddress| {
        probe.segments.iter().any(|seg| {
            let (start, end) = seg.range();
            (start..end).contains(&addr.0)
        })
    };
    // A Linux vmlinux is entered at startup_64 (its e_entry) with a zero
    // page: its PVH path would first probe for Xen through 256 CPUID
    // leaves, each a VM exit.
    let (entry, mode) = match res.pvh_boot_cap {
        _ if probe.linux && res.kernel_load.0 >= layout::HIMEM_START && inside(res.kernel_load) => {
            (res.kernel_load, EntryMode::Linux64)
        }
        PvhBootCapability::PvhEntryPresent(addr) => (addr, EntryMode::Pvh),
        _ if res.kernel_load.0 >= layout::HIMEM_START => (res.kernel_load, EntryMode::Linux64),
        _ => {
            return Err(LoadError::ElfNoEntry {
                path: path.to_path_buf(),
            })
        }
    };
    if !inside(entry) {
        return Err(LoadError::ElfEntryOutside {
            path: path.to_path_buf(),
            entry: entry.0,
            kind: match mode {
                EntryMode::Pvh => "the PVH note's",
                EntryMode::Linux64 => "e_entry",
            },
        });
    }
    Ok(LoadedKernel {
        format: KernelFormat::Elf,
        entry,
        mode,
        start: probe
            .segments
            .iter()
            .map(|s| s.paddr)
            .min()
            .unwrap_or(entry.0),
        end: res.kernel_end.max(probe.min_memory),
        setup_header: None,
        cmdline_max: DEFAULT_CMDLINE_MAX - 1,
        mapped_from_file: 0,
        boot: None,
    })
}

#[cfg(test)]
mod tests;
