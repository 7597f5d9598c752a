//! What goes into guest memory beside the kernel: the initrd (placed as
//! high as the kernel allows, copied or mapped from its file) and the
//! command line.

use std::fs::File;
use std::path::Path;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::probe::open_image;
use super::{LoadError, LoadedInitrd, LoadedKernel};
use crate::layout;

/// Highest initrd address for kernels older than boot protocol 2.03.
const DEFAULT_INITRD_ADDR_MAX: u64 = 0x37ff_ffff;

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
