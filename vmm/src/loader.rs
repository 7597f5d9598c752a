//! Kernel and initrd loading: format detection by content, the Linux x86 boot
//! protocol (bzImage) and ELF `vmlinux` with or without a PVH entry note.
//!
//! Parsing and copying is linux-loader's; this module adds the checks a user
//! needs to hear about in plain words (truncated image, no entry point, too
//! little memory, a command line longer than the kernel accepts).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use linux_loader::loader::bootparam::setup_header;
use linux_loader::loader::{bzimage::BzImage, elf::Elf, KernelLoader, PvhBootCapability};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::kernel::decompress::{self, CacheUse, Compression, HostKernel, PayloadError};
use crate::layout;
use crate::timeline::{vmm_marks, KernelBoot, Recorder};

/// x86 `COMMAND_LINE_SIZE`: the most an ELF/PVH kernel accepts.
pub const DEFAULT_CMDLINE_MAX: usize = 2048;
/// Setup header magic "HdrS".
const HDRS_MAGIC: u32 = 0x5372_6448;
/// xloadflags bit: the kernel has a 64-bit entry point at +0x200.
const XLF_KERNEL_64: u16 = 1;
/// Where the boot protocol puts the 64-bit entry in the protected-mode code.
const BZIMAGE_64BIT_ENTRY_OFFSET: u64 = 0x200;
/// Highest initrd address for kernels older than boot protocol 2.03.
const DEFAULT_INITRD_ADDR_MAX: u64 = 0x37ff_ffff;

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

/// How the boot vCPU enters the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryMode {
    /// 64-bit Linux boot protocol: long mode, RSI = zero page.
    Linux64,
    /// PVH: 32-bit protected mode, paging off, EBX = `hvm_start_info`.
    Pvh,
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
    pub boot: Option<KernelBoot>,
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

/// Errors of kernel, initrd and command line loading.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The kernel file cannot be opened or read.
    #[error("cannot read kernel {path}: {source} (check the path and its permissions)")]
    KernelRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is neither a bzImage nor an ELF kernel.
    #[error(
        "{path} is not a Linux kernel: {detail}; pass a bzImage (such as /boot/vmlinuz-*) \
         or an ELF vmlinux"
    )]
    NotAKernel { path: PathBuf, detail: String },
    /// The bzImage is shorter than its own header says.
    #[error(
        "{path} is a truncated bzImage: the header describes {expected} bytes but the file has \
         {actual}; copy the kernel again"
    )]
    TruncatedBzImage {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    /// The bzImage predates the 64-bit boot protocol.
    #[error(
        "{path} uses boot protocol {version:#06x} without a 64-bit entry point; bootscope needs \
         a 64-bit kernel with boot protocol 2.12 or later"
    )]
    No64BitEntry { path: PathBuf, version: u16 },
    /// The ELF has neither a PVH note nor an entry address.
    #[error(
        "{path} is an ELF file without an entry point (no PVH note and e_entry is 0); pass a \
         vmlinux built with CONFIG_PVH=y or a bzImage"
    )]
    ElfNoEntry { path: PathBuf },
    /// Two loadable segments share guest memory.
    #[error(
        "{path} has overlapping loadable segments (guest-physical {:#x}..{:#x} and {:#x}..{:#x}): \
         one would overwrite the other; relink the kernel so each PT_LOAD has its own addresses",
        first.0, first.1, second.0, second.1
    )]
    ElfOverlappingSegments {
        path: PathBuf,
        first: (u64, u64),
        second: (u64, u64),
    },
    /// A loadable segment lies below 1 MiB, over the boot structures.
    #[error(
        "{path} has a loadable segment at guest-physical {start:#x}..{end:#x}, below 1 MiB where \
         the VMM puts the boot structures (page tables, zero page, command line, ACPI tables); \
         relink the kernel to load at 1 MiB or above"
    )]
    ElfLowSegment { path: PathBuf, start: u64, end: u64 },
    /// The entry point is not inside any loaded segment.
    #[error(
        "{path}: its entry point {entry:#x} ({kind}) lies outside every loadable segment, so the \
         guest would start in empty memory; pass a vmlinux whose entry is inside its code"
    )]
    ElfEntryOutside {
        path: PathBuf,
        entry: u64,
        kind: &'static str,
    },
    /// The ELF is not for x86-64.
    #[error("{path} is an ELF file for machine {machine}, not x86-64")]
    ElfWrongMachine { path: PathBuf, machine: u16 },
    /// linux-loader refused the image.
    #[error("cannot load kernel {path}: {source}")]
    Loader {
        path: PathBuf,
        #[source]
        source: linux_loader::loader::Error,
    },
    /// The kernel does not fit in guest memory.
    #[error(
        "guest memory ({memory_mib} MiB) is too small for kernel {path}: it needs at least \
         {needed_mib} MiB; raise --memory"
    )]
    MemoryTooSmall {
        path: PathBuf,
        memory_mib: u64,
        needed_mib: u64,
    },
    /// The initrd cannot be opened or read.
    #[error("cannot read initrd {path}: {source} (check the path and its permissions)")]
    InitrdRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The initrd is a FIFO, device or directory.
    #[error("initrd {path} is a {kind}, not a regular file; give an initramfs file")]
    InitrdNotRegular { path: PathBuf, kind: &'static str },
    /// The initrd does not fit where the kernel can reach it.
    #[error(
        "initrd {path} ({size_mib} MiB) does not fit in guest memory below the kernel's limit \
         ({available_mib} MiB free after the kernel); raise --memory or shrink the initrd"
    )]
    InitrdTooLarge {
        path: PathBuf,
        size_mib: u64,
        available_mib: u64,
    },
    /// The command line is longer than the kernel accepts.
    #[error(
        "the kernel command line is {len} bytes but this kernel accepts at most {max}; shorten \
         --cmdline"
    )]
    CmdlineTooLong { len: usize, max: usize },
    /// The command line contains a byte the kernel cannot take.
    #[error("the kernel command line contains a NUL or non-ASCII byte; remove it")]
    CmdlineInvalid,
    /// The bzImage's compressed kernel is damaged.
    #[error(
        "{path} cannot be booted: {compression} payload is corrupt ({detail}); the kernel \
         would not decompress in the guest either. Copy or reinstall the kernel image"
    )]
    CorruptPayload {
        path: PathBuf,
        compression: &'static str,
        detail: String,
    },
    /// Writing to guest memory failed.
    #[error("cannot write {what} to guest memory: {detail}")]
    GuestWrite { what: &'static str, detail: String },
}

fn read_at(file: &mut File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    file.seek(SeekFrom::Start(offset))?;
    let mut done = 0;
    while done < buf.len() {
        let n = file.read(&mut buf[done..])?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// A loadable ELF segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElfSegment {
    pub offset: u64,
    pub paddr: u64,
    pub filesz: u64,
    /// Bytes it occupies in memory (at least `filesz`).
    pub memsz: u64,
}

impl ElfSegment {
    /// The guest-physical bytes it occupies, `[start, end)`.
    fn range(&self) -> (u64, u64) {
        (
            self.paddr,
            self.paddr.saturating_add(self.memsz.max(self.filesz)),
        )
    }
}

/// Facts read from a kernel file without loading it.
#[derive(Clone, Debug)]
pub struct KernelProbe {
    pub format: KernelFormat,
    pub file_size: u64,
    /// bzImage: setup header.
    pub setup_header: Option<setup_header>,
    /// Memory the kernel needs to boot, in bytes (bzImage: the relocation
    /// target plus `init_size`; ELF: the highest loaded address).
    pub min_memory: u64,
    /// ELF: the loadable segments.
    pub segments: Vec<ElfSegment>,
    /// ELF: its notes name the guest OS as Linux, so `e_entry` is the
    /// 64-bit `startup_64`.
    pub linux: bool,
}

/// Opens an image (kernel or initrd) for reading. The open itself never
/// blocks (`O_NONBLOCK`: a FIFO would otherwise wait for a writer forever),
/// and anything but a regular file is refused with what it is (`Ok(Err)`).
fn open_image(path: &Path) -> std::io::Result<Result<(File, std::fs::Metadata), &'static str>> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Err(bootscope_model::input::kind_name(meta.file_type())));
    }
    // Back to blocking reads (which a regular file has anyway).
    // SAFETY: fcntl on a descriptor owned by `file`, with integer flags.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(Ok((file, meta)))
}

/// Checks that the initrd at `path` is a regular file that can be opened,
/// without reading it (and without blocking on a FIFO).
pub fn check_initrd(path: &Path) -> Result<(), LoadError> {
    match open_image(path) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kind)) => Err(LoadError::InitrdNotRegular {
            path: path.to_path_buf(),
            kind,
        }),
        Err(source) => Err(LoadError::InitrdRead {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Detects the kernel format by content and checks it is loadable.
pub fn probe_kernel(path: &Path) -> Result<KernelProbe, LoadError> {
    let read_err = |source| LoadError::KernelRead {
        path: path.to_path_buf(),
        source,
    };
    let (mut file, meta) = match open_image(path).map_err(read_err)? {
        Ok(f) => f,
        Err(kind) => {
            return Err(LoadError::NotAKernel {
                path: path.to_path_buf(),
                detail: format!("it is a {kind}, not a regular file"),
            })
        }
    };
    let file_size = meta.len();
    let mut head = [0u8; 0x280];
    let n = read_at(&mut file, 0, &mut head).map_err(read_err)?;
    let head = &head[..n];
    if head.len() >= 4 && &head[..4] == b"\x7fELF" {
        return probe_elf(path, &mut file, file_size, head);
    }
    if head.len() >= 0x206
        && u32::from_le_bytes([head[0x202], head[0x203], head[0x204], head[0x205]]) == HDRS_MAGIC
    {
        return probe_bzimage(path, file_size, head);
    }
    let detail = if file_size == 0 {
        "the file is empty".to_string()
    } else if head.len() >= 0x202 && head[0x1fe] == 0x55 && head[0x1ff] == 0xaa {
        "it has a boot sector but no \"HdrS\" setup header (an old zImage or a disk image)"
            .to_string()
    } else {
        "no ELF magic and no \"HdrS\" setup header at offset 0x202".to_string()
    };
    Err(LoadError::NotAKernel {
        path: path.to_path_buf(),
        detail,
    })
}

fn probe_bzimage(path: &Path, file_size: u64, head: &[u8]) -> Result<KernelProbe, LoadError> {
    let mut hdr = setup_header::default();
    let hdr_len = std::mem::size_of::<setup_header>();
    let avail = head.len().saturating_sub(0x1f1).min(hdr_len);
    // setup_header is plain old data read byte for byte from the image.
    vm_memory::ByteValued::as_mut_slice(&mut hdr)[..avail]
        .copy_from_slice(&head[0x1f1..0x1f1 + avail]);
    let version = hdr.version;
    let setup_sects = if hdr.setup_sects == 0 {
        4
    } else {
        hdr.setup_sects as u64
    };
    let setup_bytes = (setup_sects + 1) * 512;
    // syssize counts 16-byte paragraphs of protected-mode code.
    let expected = setup_bytes + u64::from(hdr.syssize) * 16;
    if file_size < expected || file_size <= setup_bytes {
        return Err(LoadError::TruncatedBzImage {
            path: path.to_path_buf(),
            expected: expected.max(setup_bytes + 1),
            actual: file_size,
        });
    }
    if version < 0x020c || hdr.xloadflags & XLF_KERNEL_64 == 0 {
        return Err(LoadError::No64BitEntry {
            path: path.to_path_buf(),
            version,
        });
    }
    // The decompressor extracts the kernel at pref_address (for relocatable
    // kernels) and needs init_size bytes there.
    let load = if hdr.pref_address != 0 {
        hdr.pref_address
    } else {
        u64::from(hdr.code32_start)
    };
    let min_memory = load
        .max(u64::from(hdr.code32_start).saturating_add(file_size - setup_bytes))
        .saturating_add(u64::from(hdr.init_size));
    Ok(KernelProbe {
        format: KernelFormat::BzImage,
        file_size,
        setup_header: Some(hdr),
        min_memory,
        segments: Vec::new(),
        linux: true,
    })
}

fn probe_elf(
    path: &Path,
    file: &mut File,
    file_size: u64,
    head: &[u8],
) -> Result<KernelProbe, LoadError> {
    let not = |detail: &str| LoadError::NotAKernel {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    };
    if head.len() < 64 {
        return Err(not("the ELF header is truncated"));
    }
    if head[4] != 2 {
        return Err(not("it is a 32-bit ELF file; an x86-64 vmlinux is ELF64"));
    }
    let machine = u16::from_le_bytes([head[18], head[19]]);
    if machine != 62 {
        return Err(LoadError::ElfWrongMachine {
            path: path.to_path_buf(),
            machine,
        });
    }
    let phoff = u64::from_le_bytes(head[32..40].try_into().unwrap_or_default());
    let phentsize = u16::from_le_bytes([head[54], head[55]]) as u64;
    let phnum = u16::from_le_bytes([head[56], head[57]]) as u64;
    if phnum == 0 || phentsize < 56 || phoff.saturating_add(phnum * phentsize) > file_size {
        return Err(not(
            "its program headers are missing or run past the end of the file",
        ));
    }
    let mut min_memory = 0u64;
    let mut segments = Vec::new();
    let mut linux = false;
    for i in 0..phnum {
        let mut ph = [0u8; 56];
        let n = read_at(file, phoff + i * phentsize, &mut ph).map_err(|source| {
            LoadError::KernelRead {
                path: path.to_path_buf(),
                source,
            }
        })?;
        if n < 56 {
            return Err(not("a program header is truncated"));
        }
        let p_type = u32::from_le_bytes(ph[0..4].try_into().unwrap_or_default());
        let p_offset = u64::from_le_bytes(ph[8..16].try_into().unwrap_or_default());
        let p_paddr = u64::from_le_bytes(ph[24..32].try_into().unwrap_or_default());
        let p_filesz = u64::from_le_bytes(ph[32..40].try_into().unwrap_or_default());
        let p_memsz = u64::from_le_bytes(ph[40..48].try_into().unwrap_or_default());
        if p_type == 4 && !linux && p_filesz <= 64 << 10 {
            let mut notes = vec![0u8; p_filesz as usize];
            let n =
                read_at(file, p_offset, &mut notes).map_err(|source| LoadError::KernelRead {
                    path: path.to_path_buf(),
                    source,
                })?;
            linux = decompress::notes_say_linux(&notes[..n]);
        }
        if p_type == 1 {
            if p_offset.saturating_add(p_filesz) > file_size {
                return Err(not(
                    "a loadable segment runs past the end of the file (truncated?)",
                ));
            }
            min_memory = min_memory.max(p_paddr.saturating_add(p_memsz.max(p_filesz)));
            segments.push(ElfSegment {
                offset: p_offset,
                paddr: p_paddr,
                filesz: p_filesz,
                memsz: p_memsz,
            });
        }
    }
    // Two loadable segments over the same guest memory: one overwrites the
    // other and the guest runs whatever was loaded last.
    let mut ranges: Vec<(u64, u64)> = segments
        .iter()
        .map(ElfSegment::range)
        .filter(|(start, end)| end > start)
        .collect();
    ranges.sort_unstable();
    if let Some(&(start, end)) = ranges.first().filter(|r| r.0 < layout::HIMEM_START) {
        return Err(LoadError::ElfLowSegment {
            path: path.to_path_buf(),
            start,
            end,
        });
    }
    if let Some(w) = ranges.windows(2).find(|w| w[1].0 < w[0].1) {
        return Err(LoadError::ElfOverlappingSegments {
            path: path.to_path_buf(),
            first: w[0],
            second: w[1],
        });
    }
    Ok(KernelProbe {
        format: KernelFormat::Elf,
        file_size,
        setup_header: None,
        min_memory,
        segments,
        linux,
    })
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
                let r = decompress::host_kernel(&file, &hdr, cache.as_deref());
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
        boot: Some(KernelBoot {
            decompressed_by: "host".into(),
            compression: Some(k.compression.name().into()),
            entry: entry_name.into(),
            kaslr: false,
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
        boot: Some(KernelBoot {
            decompressed_by: "guest".into(),
            compression,
            entry: "bzimage-linux64".into(),
            kaslr: true,
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

/// End of the guest RAM block that starts at `HIMEM_START` (below the MMIO
/// gap).
pub fn low_ram_end(memory_bytes: u64) -> u64 {
    memory_bytes.min(layout::MMIO_GAP_START)
}

/// Loads the initrd as high as the kernel allows, page aligned.
pub fn load_initrd(
    mem: &GuestMemoryMmap,
    path: &Path,
    kernel: &LoadedKernel,
    memory_bytes: u64,
    map_from_file: bool,
) -> Result<LoadedInitrd, LoadError> {
    let read_err = |source| LoadError::InitrdRead {
        path: path.to_path_buf(),
        source,
    };
    let (mut file, meta) = match open_image(path).map_err(read_err)? {
        Ok(f) => f,
        Err(kind) => {
            return Err(LoadError::InitrdNotRegular {
                path: path.to_path_buf(),
                kind,
            })
        }
    };
    let size = meta.len();
    let addr_max = kernel
        .setup_header
        .filter(|h| h.version >= 0x0203 && h.initrd_addr_max != 0)
        .map(|h| u64::from(h.initrd_addr_max))
        .unwrap_or(DEFAULT_INITRD_ADDR_MAX);
    let top = low_ram_end(memory_bytes).min(addr_max.saturating_add(1));
    let bottom = kernel.end.next_multiple_of(4096);
    let available = top.saturating_sub(bottom);
    if size > available {
        return Err(LoadError::InitrdTooLarge {
            path: path.to_path_buf(),
            size_mib: size.div_ceil(1 << 20),
            available_mib: available >> 20,
        });
    }
    let addr = (top - size) & !0xfff;
    if map_from_file
        && size > 0
        && map_file_over_guest(mem, GuestAddress(addr), &file, 0, size).is_ok()
    {
        return Ok(LoadedInitrd {
            addr,
            size,
            mapped_from_file: true,
        });
    }
    mem.read_exact_volatile_from(GuestAddress(addr), &mut file, size as usize)
        .map_err(|e| LoadError::GuestWrite {
            what: "initrd",
            detail: e.to_string(),
        })?;
    Ok(LoadedInitrd {
        addr,
        size,
        mapped_from_file: false,
    })
}

/// Maps `len` bytes of `file` (from offset 0) privately over guest memory at
/// `addr`, so every VM started from the same image shares its page-cache
/// pages until it writes to them (QEMU measured ~20 MB less per extra VM).
///
/// Fails (and the caller copies instead) when the range is not page aligned,
/// spans two regions, or lies in a mapping that cannot be split, such as
/// hugetlb memory.
pub fn map_file_over_guest(
    mem: &GuestMemoryMmap,
    addr: GuestAddress,
    file: &File,
    file_offset: u64,
    len: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use vm_memory::GuestMemoryBackend;
    if addr.0 % 4096 != 0 || file_offset % 4096 != 0 {
        return Err(std::io::Error::other(
            "guest address or file offset not page aligned",
        ));
    }
    let mapped = len.next_multiple_of(4096) as usize;
    // The whole range must be one contiguous host mapping.
    mem.get_slice(addr, mapped)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let host = mem
        .get_host_address(addr)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    // SAFETY: `host..host+mapped` lies inside one guest region owned by `mem`
    // (checked above) that no vCPU runs on yet; MAP_FIXED replaces those pages
    // with a private file mapping of the same protection, keeping the range
    // valid for as long as `mem` lives.
    let r = unsafe {
        libc::mmap(
            host.cast(),
            mapped,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_FIXED,
            file.as_raw_fd(),
            file_offset as libc::off_t,
        )
    };
    if r == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Checks the command line against the kernel's limit and writes it.
pub fn load_cmdline(mem: &GuestMemoryMmap, cmdline: &str, max: usize) -> Result<(), LoadError> {
    // An image's cmdline_size may promise more than the guest-memory room
    // the command line has.
    let max = max.min(layout::CMDLINE_MAX_SIZE - 1);
    if cmdline.len() > max {
        return Err(LoadError::CmdlineTooLong {
            len: cmdline.len(),
            max,
        });
    }
    if cmdline.bytes().any(|b| b == 0 || !b.is_ascii()) {
        return Err(LoadError::CmdlineInvalid);
    }
    let mut bytes = cmdline.as_bytes().to_vec();
    bytes.push(0);
    mem.write_slice(&bytes, GuestAddress(layout::CMDLINE_START))
        .map_err(|e| LoadError::GuestWrite {
            what: "command line",
            detail: e.to_string(),
        })
}

#[cfg(test)]
mod tests;
