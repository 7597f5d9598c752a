//! Kernel, initrd and command-line loading into a small guest memory, the
//! way `vm.rs` does it: `load_kernel`, `load_initrd`, `load_cmdline`, then
//! the zero page or the PVH start info.

use bootscope_vmm::bootparams;
use bootscope_vmm::layout;
use bootscope_vmm::loader::{self, EntryMode, KernelFormat};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::memfile::MemFile;

/// Guest RAM of the kernel targets: enough for the fixtures, small enough to
/// map afresh for every input.
const GUEST_MEMORY: u64 = 64 << 20;

/// The bzImage fixture the initrd target patches its header fields into.
const BZIMAGE: &[u8] = include_bytes!("../../vmm/tests/fixtures/mini-bzimage-reset.bin");
/// The PVH fixture (a kernel without a setup header).
const PVH_ELF: &[u8] = include_bytes!("../../vmm/tests/fixtures/mini-pvh.elf");

/// Guest sizes the initrd target picks from: below, at and above the
/// limits the loader computes with (2 MiB minimum, the 32-bit MMIO gap at
/// 3 GiB, RAM above 4 GiB).
const MEMORY_SIZES: [u64; 8] = [
    2 << 20,
    3 << 20,
    5 << 20,
    64 << 20,
    1 << 30,
    3 << 30,
    (3 << 30) + (2 << 20),
    5 << 30,
];

fn guest_memory(bytes: u64) -> GuestMemoryMmap {
    GuestMemoryMmap::<()>::from_ranges(&bootparams::ram_ranges(bytes))
        .expect("mapping guest memory for a fuzz input")
}

/// Any bytes as a bzImage: "HdrS" is forced in at 0x202 (when the input
/// reaches it) and ELF magic is broken, so every input takes the bzImage
/// path of format detection.
pub fn bzimage(data: &[u8]) {
    let mut image = data.to_vec();
    if image.len() >= 0x206 {
        image[0x202..0x206].copy_from_slice(b"HdrS");
    }
    if image.starts_with(b"\x7fELF") {
        image[0] = 0;
    }
    boot(&image, false);
}

/// Any bytes as an ELF kernel: the first four bytes are forced to the ELF
/// magic; its segments are copied into guest memory.
pub fn elf(data: &[u8]) {
    let mut image = b"\x7fELF".to_vec();
    image.extend_from_slice(data.get(4..).unwrap_or_default());
    boot(&image, true);
}

/// Loads `image` as the kernel and writes what the boot vCPU reads: the
/// command line and the zero page or PVH start info. `in_guest`: a
/// bzImage booted the classic way; else its payload is decompressed on the
/// host (not cached).
fn boot(image: &[u8], in_guest: bool) {
    let file = MemFile::new(image);
    let mem = guest_memory(GUEST_MEMORY);
    let options = loader::DecompressOptions {
        in_guest,
        cache_dir: None,
    };
    let Ok(kernel) = loader::load_kernel(&mem, file.path(), GUEST_MEMORY, &options) else {
        return;
    };
    assert!(
        kernel.end <= GUEST_MEMORY,
        "the kernel ends at {:#x}, past guest memory",
        kernel.end
    );
    assert!(
        (layout::HIMEM_START..GUEST_MEMORY).contains(&kernel.entry.0),
        "entry {:#x} outside guest memory",
        kernel.entry.0
    );
    let cmdline = "console=ttyS0 reboot=k";
    if loader::load_cmdline(&mem, cmdline, kernel.cmdline_max).is_err() {
        assert!(
            cmdline.len() > kernel.cmdline_max,
            "a valid command line within the limit was refused"
        );
    }
    match kernel.mode {
        EntryMode::Linux64 => {
            let params =
                bootparams::build_zero_page(&kernel, None, cmdline.len(), GUEST_MEMORY, None);
            bootparams::write_zero_page(&mem, &params).expect("the zero page fits in guest memory");
        }
        EntryMode::Pvh => {
            bootparams::write_pvh_start_info(&mem, None, GUEST_MEMORY, None)
                .expect("the PVH start info fits in guest memory");
        }
    }
}

/// The fields the initrd target reads from the front of its input (missing
/// bytes read as zero): flags (1 byte), guest size index (1), then the
/// bzImage's version (2), initrd_addr_max (4), cmdline_size (4) and
/// init_size (4), the initrd's length (2) and a command-line repeat count
/// (1); then the initrd's bytes, then the command line.
struct InitrdCase<'a> {
    /// Bit 0: map the initrd from its file. Bit 1: boot the PVH ELF kernel
    /// (no setup header) instead of the bzImage.
    flags: u8,
    memory: u64,
    /// Setup header fields patched into the bzImage.
    version: u16,
    initrd_addr_max: u32,
    cmdline_size: u32,
    init_size: u32,
    initrd: &'a [u8],
    cmdline: String,
}

const INITRD_HEADER: usize = 19;

impl<'a> InitrdCase<'a> {
    fn parse(data: &'a [u8]) -> Self {
        let mut head = [0u8; INITRD_HEADER];
        let n = data.len().min(INITRD_HEADER);
        head[..n].copy_from_slice(&data[..n]);
        let rest = &data[n..];
        let u16_at = |i: usize| u16::from_le_bytes([head[i], head[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap_or_default());
        let initrd_len = usize::from(u16_at(16)).min(rest.len());
        let (initrd, cmdline) = rest.split_at(initrd_len);
        // One repeat byte lets short inputs reach long command lines.
        let cmdline = String::from_utf8_lossy(cmdline).repeat(1 + usize::from(head[18]) * 16);
        Self {
            flags: head[0],
            memory: MEMORY_SIZES[usize::from(head[1]) % MEMORY_SIZES.len()],
            version: u16_at(2),
            initrd_addr_max: u32_at(4),
            cmdline_size: u32_at(8),
            init_size: u32_at(12) & 0x03ff_ffff,
            initrd,
            cmdline,
        }
    }

    fn kernel_image(&self) -> Vec<u8> {
        if self.flags & 2 != 0 {
            return PVH_ELF.to_vec();
        }
        let mut image = BZIMAGE.to_vec();
        image[0x206..0x208].copy_from_slice(&self.version.to_le_bytes());
        image[0x22c..0x230].copy_from_slice(&self.initrd_addr_max.to_le_bytes());
        image[0x238..0x23c].copy_from_slice(&self.cmdline_size.to_le_bytes());
        image[0x260..0x264].copy_from_slice(&self.init_size.to_le_bytes());
        image
    }
}

/// A kernel (the bzImage fixture with fuzzed setup header fields, or the
/// PVH fixture), then a fuzzed initrd and command line, in guests of
/// several sizes. Checks where the initrd and command line land: inside
/// RAM, below the kernel's limits, clear of the memory the kernel claims,
/// and byte for byte what was given.
pub fn initrd_cmdline(data: &[u8]) {
    let case = InitrdCase::parse(data);
    let kernel_file = MemFile::new(&case.kernel_image());
    let mem = guest_memory(case.memory);
    let options = loader::DecompressOptions {
        in_guest: true,
        cache_dir: None,
    };
    let Ok(kernel) = loader::load_kernel(&mem, kernel_file.path(), case.memory, &options) else {
        return;
    };
    let initrd_file = MemFile::new(case.initrd);
    let map = case.flags & 1 != 0;
    if let Ok(initrd) = loader::load_initrd(&mem, initrd_file.path(), &kernel, case.memory, map) {
        check_initrd(&mem, &case, &kernel, &initrd);
    }
    if loader::load_cmdline(&mem, &case.cmdline, kernel.cmdline_max).is_ok() {
        let len = case.cmdline.len();
        assert!(len <= kernel.cmdline_max);
        assert!(
            len < layout::CMDLINE_MAX_SIZE,
            "a {len}-byte command line was written past the {} bytes reserved for it",
            layout::CMDLINE_MAX_SIZE
        );
        let mut back = vec![0u8; len + 1];
        mem.read_slice(&mut back, GuestAddress(layout::CMDLINE_START))
            .expect("reading the command line back");
        assert_eq!(&back[..len], case.cmdline.as_bytes());
        assert_eq!(back[len], 0, "the command line is not NUL-terminated");
    }
}

fn check_initrd(
    mem: &GuestMemoryMmap,
    case: &InitrdCase<'_>,
    kernel: &loader::LoadedKernel,
    initrd: &loader::LoadedInitrd,
) {
    let (addr, size) = (initrd.addr, initrd.size);
    assert_eq!(size, case.initrd.len() as u64);
    assert_eq!(addr % 4096, 0, "initrd at {addr:#x} is not page aligned");
    // An empty initrd occupies nothing, wherever its address points.
    assert!(
        size == 0 || addr >= kernel.end,
        "initrd at {addr:#x} overlaps the kernel"
    );
    assert!(
        addr + size <= loader::low_ram_end(case.memory),
        "initrd {addr:#x}+{size:#x} runs past RAM below the MMIO gap"
    );
    if kernel.format == KernelFormat::BzImage {
        let hdr = kernel.setup_header.expect("a bzImage has a setup header");
        let (version, addr_max) = (hdr.version, hdr.initrd_addr_max);
        let limit = if version >= 0x0203 && addr_max != 0 {
            u64::from(addr_max)
        } else {
            0x37ff_ffff
        };
        assert!(
            size == 0 || addr + size - 1 <= limit,
            "initrd {addr:#x}+{size:#x} above initrd_addr_max {limit:#x}"
        );
        // The kernel decompresses itself into init_size bytes from its
        // load address (1 MiB for this non-relocatable image): an initrd
        // there would be overwritten before it is read.
        let claimed = layout::HIMEM_START + u64::from(hdr.init_size);
        assert!(
            size == 0 || addr >= claimed,
            "initrd at {addr:#x} inside the {claimed:#x} bytes the kernel decompresses into"
        );
    }
    let mut back = vec![0u8; case.initrd.len()];
    mem.read_slice(&mut back, GuestAddress(addr))
        .expect("reading the initrd back");
    assert!(back == case.initrd, "the guest sees other initrd bytes");
}
