//! Kernel format detection by content: a bzImage (the "HdrS" setup header)
//! or an ELF64 x86-64 `vmlinux` (its headers read by
//! [`crate::kernel::elf`]), checked to be loadable before anything is
//! loaded.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use linux_loader::loader::bootparam::setup_header;

use super::{KernelFormat, LoadError};
use crate::kernel::elf::{self, ElfError, ElfSegment};
use crate::layout;

/// Setup header magic "HdrS".
const HDRS_MAGIC: u32 = 0x5372_6448;
/// xloadflags bit: the kernel has a 64-bit entry point at +0x200.
const XLF_KERNEL_64: u16 = 1;

/// Reads up to `buf.len()` bytes at `offset` (fewer at the end of the
/// file).
pub(super) fn read_at(file: &mut File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
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
pub(super) fn open_image(
    path: &Path,
) -> std::io::Result<Result<(File, std::fs::Metadata), &'static str>> {
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
        return probe_elf(path, &mut file, file_size);
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

fn probe_elf(path: &Path, file: &mut File, file_size: u64) -> Result<KernelProbe, LoadError> {
    let not = |detail: &str| LoadError::NotAKernel {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    };
    let cache = object::ReadCache::new(&mut *file);
    let headers = elf::read_headers(&cache).map_err(|e| match e {
        ElfError::NotElf | ElfError::Truncated => not("the ELF header is truncated"),
        ElfError::Not64 => not("it is a 32-bit ELF file; an x86-64 vmlinux is ELF64"),
        ElfError::Unsupported => not(
            "its ELF identification names a byte order or ELF version other than \
             little-endian version 1",
        ),
        ElfError::WrongMachine(machine) => LoadError::ElfWrongMachine {
            path: path.to_path_buf(),
            machine,
        },
        ElfError::ProgramHeaders => {
            not("its program headers are missing or run past the end of the file")
        }
    })?;
    if headers.program_headers == 0 {
        return Err(not(
            "its program headers are missing or run past the end of the file",
        ));
    }
    if headers.past_end.iter().any(|&(_, loadable)| loadable) {
        return Err(not(
            "a loadable segment runs past the end of the file (truncated?)",
        ));
    }
    let segments = headers.segments;
    let min_memory = segments.iter().map(|s| s.range().1).max().unwrap_or(0);
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
        linux: headers.linux,
    })
}
