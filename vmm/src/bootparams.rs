//! The information a kernel receives at entry: the e820 memory map, the Linux
//! zero page (`boot_params`) and the PVH `hvm_start_info`.

use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, setup_header};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout;
use crate::loader::{LoadedInitrd, LoadedKernel};

/// e820 type of usable RAM.
pub const E820_RAM: u32 = 1;
/// e820 type of reserved memory.
pub const E820_RESERVED: u32 = 2;
/// Loader id "undefined" in `type_of_loader`.
const LOADER_TYPE_UNDEFINED: u8 = 0xff;
/// Magic of `hvm_start_info`.
pub const PVH_START_MAGIC: u32 = 0x336e_c578;
/// Boot sector signature.
const BOOT_FLAG: u16 = 0xaa55;
const HDRS_MAGIC: u32 = 0x5372_6448;
/// The 64-bit entry expects the kernel aligned to 16 MiB unless the image
/// says otherwise.
const DEFAULT_KERNEL_ALIGNMENT: u32 = 0x100_0000;

/// One memory map entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryMapEntry {
    pub addr: u64,
    pub size: u64,
    pub kind: u32,
}

/// The guest's memory map: low RAM below the EBDA, high RAM from 1 MiB to the
/// MMIO gap, and RAM above 4 GiB for what does not fit below the gap.
pub fn memory_map(memory_bytes: u64) -> Vec<MemoryMapEntry> {
    let mut map = vec![
        MemoryMapEntry {
            addr: 0,
            size: layout::EBDA_START,
            kind: E820_RAM,
        },
        MemoryMapEntry {
            addr: layout::EBDA_START,
            size: layout::LOW_MEMORY_END - layout::EBDA_START,
            kind: E820_RESERVED,
        },
    ];
    let low_end = memory_bytes.min(layout::MMIO_GAP_START);
    if low_end > layout::HIMEM_START {
        map.push(MemoryMapEntry {
            addr: layout::HIMEM_START,
            size: low_end - layout::HIMEM_START,
            kind: E820_RAM,
        });
    }
    if memory_bytes > layout::MMIO_GAP_START {
        map.push(MemoryMapEntry {
            addr: layout::MMIO_GAP_END,
            size: memory_bytes - layout::MMIO_GAP_START,
            kind: E820_RAM,
        });
    }
    map
}

/// The guest RAM ranges to allocate (address, size).
pub fn ram_ranges(memory_bytes: u64) -> Vec<(GuestAddress, usize)> {
    let low = memory_bytes.min(layout::MMIO_GAP_START);
    let mut v = vec![(GuestAddress(0), low as usize)];
    if memory_bytes > layout::MMIO_GAP_START {
        v.push((
            GuestAddress(layout::MMIO_GAP_END),
            (memory_bytes - layout::MMIO_GAP_START) as usize,
        ));
    }
    v
}

/// Builds the zero page for the 64-bit Linux boot protocol.
pub fn build_zero_page(
    kernel: &LoadedKernel,
    initrd: Option<&LoadedInitrd>,
    cmdline_len: usize,
    memory_bytes: u64,
    rsdp: Option<u64>,
) -> boot_params {
    let mut params = boot_params::default();
    let mut hdr = kernel.setup_header.unwrap_or_else(|| setup_header {
        boot_flag: BOOT_FLAG,
        header: HDRS_MAGIC,
        kernel_alignment: DEFAULT_KERNEL_ALIGNMENT,
        ..Default::default()
    });
    hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
    hdr.cmd_line_ptr = layout::CMDLINE_START as u32;
    hdr.cmdline_size = cmdline_len as u32 + 1;
    if let Some(initrd) = initrd {
        hdr.ramdisk_image = initrd.addr as u32;
        hdr.ramdisk_size = initrd.size as u32;
    }
    params.hdr = hdr;
    // Boot protocol 2.14+: the kernel takes the RSDP from here instead of
    // scanning the BIOS area (older kernels ignore it and scan).
    params.acpi_rsdp_addr = rsdp.unwrap_or(0);
    let map = memory_map(memory_bytes);
    for (i, e) in map.iter().enumerate().take(params.e820_table.len()) {
        params.e820_table[i] = boot_e820_entry {
            addr: e.addr,
            size: e.size,
            r#type: e.kind,
        };
    }
    params.e820_entries = map.len().min(params.e820_table.len()) as u8;
    params
}

/// Writes the zero page to guest memory.
pub fn write_zero_page(
    mem: &GuestMemoryMmap,
    params: &boot_params,
) -> Result<(), vm_memory::GuestMemoryError> {
    mem.write_obj(*params, GuestAddress(layout::ZERO_PAGE_START))
}

/// Serialises `hvm_start_info` and its memory map (PVH boot ABI, version 1).
pub fn pvh_start_info_bytes(
    initrd: Option<&LoadedInitrd>,
    memory_bytes: u64,
    rsdp: Option<u64>,
) -> (Vec<u8>, Vec<u8>) {
    let map = memory_map(memory_bytes);
    let mut info = Vec::with_capacity(56);
    info.extend_from_slice(&PVH_START_MAGIC.to_le_bytes());
    info.extend_from_slice(&1u32.to_le_bytes()); // version
    info.extend_from_slice(&0u32.to_le_bytes()); // flags
    let nr_modules: u32 = u32::from(initrd.is_some());
    info.extend_from_slice(&nr_modules.to_le_bytes());
    let modlist_paddr = if initrd.is_some() {
        layout::PVH_MEMMAP_START + 24 * map.len() as u64
    } else {
        0
    };
    info.extend_from_slice(&modlist_paddr.to_le_bytes());
    info.extend_from_slice(&layout::CMDLINE_START.to_le_bytes());
    info.extend_from_slice(&rsdp.unwrap_or(0).to_le_bytes()); // rsdp_paddr (0: no ACPI)
    info.extend_from_slice(&layout::PVH_MEMMAP_START.to_le_bytes());
    info.extend_from_slice(&(map.len() as u32).to_le_bytes());
    info.extend_from_slice(&0u32.to_le_bytes());
    let mut tail = Vec::new();
    for e in &map {
        tail.extend_from_slice(&e.addr.to_le_bytes());
        tail.extend_from_slice(&e.size.to_le_bytes());
        tail.extend_from_slice(&e.kind.to_le_bytes());
        tail.extend_from_slice(&0u32.to_le_bytes());
    }
    if let Some(initrd) = initrd {
        tail.extend_from_slice(&initrd.addr.to_le_bytes());
        tail.extend_from_slice(&initrd.size.to_le_bytes());
        tail.extend_from_slice(&0u64.to_le_bytes());
        tail.extend_from_slice(&0u64.to_le_bytes());
    }
    (info, tail)
}

/// Writes the PVH start info and what follows it.
pub fn write_pvh_start_info(
    mem: &GuestMemoryMmap,
    initrd: Option<&LoadedInitrd>,
    memory_bytes: u64,
    rsdp: Option<u64>,
) -> Result<(), vm_memory::GuestMemoryError> {
    let (info, tail) = pvh_start_info_bytes(initrd, memory_bytes, rsdp);
    mem.write_slice(&info, GuestAddress(layout::PVH_INFO_START))?;
    mem.write_slice(&tail, GuestAddress(layout::PVH_MEMMAP_START))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::{EntryMode, KernelFormat};

    fn kernel(hdr: Option<setup_header>) -> LoadedKernel {
        LoadedKernel {
            format: KernelFormat::BzImage,
            entry: GuestAddress(0x100200),
            mode: EntryMode::Linux64,
            start: 0x100000,
            end: 0x200000,
            setup_header: hdr,
            cmdline_max: 2047,
            mapped_from_file: 0,
            boot: None,
        }
    }

    #[test]
    fn memory_map_small_guest() {
        let m = memory_map(256 << 20);
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[0],
            MemoryMapEntry {
                addr: 0,
                size: 0x9fc00,
                kind: E820_RAM
            }
        );
        assert_eq!(m[1].kind, E820_RESERVED);
        assert_eq!(
            m[2],
            MemoryMapEntry {
                addr: 0x100000,
                size: (256 << 20) - 0x100000,
                kind: E820_RAM
            }
        );
    }

    #[test]
    fn memory_map_splits_around_mmio_gap() {
        let mem = 4u64 << 30;
        let m = memory_map(mem);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].addr + m[2].size, layout::MMIO_GAP_START);
        assert_eq!(m[3].addr, 1 << 32);
        let ram: u64 = m
            .iter()
            .filter(|e| e.kind == E820_RAM)
            .map(|e| e.size)
            .sum();
        // Everything but the 1 MiB ISA hole region is RAM.
        assert_eq!(ram, mem - (layout::HIMEM_START - layout::EBDA_START));
        let ranges = ram_ranges(mem);
        assert_eq!(ranges.iter().map(|r| r.1 as u64).sum::<u64>(), mem);
    }

    #[test]
    fn zero_page_fields() {
        let image_hdr = setup_header {
            boot_flag: 0xaa55,
            header: HDRS_MAGIC,
            version: 0x020f,
            cmdline_size: 2047,
            ..Default::default()
        };
        let initrd = LoadedInitrd {
            addr: 0x7f00000,
            size: 0x12345,
            ..Default::default()
        };
        let p = build_zero_page(
            &kernel(Some(image_hdr)),
            Some(&initrd),
            30,
            128 << 20,
            Some(0xe_0000),
        );
        let hdr = p.hdr;
        assert_eq!({ hdr.type_of_loader }, 0xff);
        assert_eq!({ hdr.cmd_line_ptr }, layout::CMDLINE_START as u32);
        assert_eq!({ hdr.cmdline_size }, 31);
        assert_eq!({ hdr.ramdisk_image }, 0x7f00000);
        assert_eq!({ hdr.ramdisk_size }, 0x12345);
        assert_eq!({ hdr.version }, 0x020f);
        assert_eq!({ p.acpi_rsdp_addr }, 0xe_0000);
        assert_eq!({ p.e820_entries }, 3);
        let e = p.e820_table[2];
        assert_eq!(
            ({ e.addr }, { e.size }, { e.r#type }),
            (0x100000, (128 << 20) - 0x100000, 1)
        );
    }

    #[test]
    fn zero_page_for_elf_has_magic() {
        let p = build_zero_page(&kernel(None), None, 0, 64 << 20, None);
        let hdr = p.hdr;
        assert_eq!({ hdr.boot_flag }, 0xaa55);
        assert_eq!({ hdr.header }, HDRS_MAGIC);
        assert_eq!({ hdr.ramdisk_image }, 0);
        assert_eq!({ p.acpi_rsdp_addr }, 0, "no ACPI tables, no RSDP");
    }

    #[test]
    fn pvh_start_info_layout() {
        let initrd = LoadedInitrd {
            addr: 0x3000000,
            size: 4096,
            ..Default::default()
        };
        let (info, tail) = pvh_start_info_bytes(Some(&initrd), 64 << 20, Some(0xe_0000));
        assert_eq!(info.len(), 56);
        assert_eq!(
            u32::from_le_bytes(info[0..4].try_into().unwrap()),
            PVH_START_MAGIC
        );
        assert_eq!(u32::from_le_bytes(info[12..16].try_into().unwrap()), 1);
        assert_eq!(
            u64::from_le_bytes(info[24..32].try_into().unwrap()),
            layout::CMDLINE_START
        );
        assert_eq!(
            u64::from_le_bytes(info[40..48].try_into().unwrap()),
            layout::PVH_MEMMAP_START
        );
        assert_eq!(u32::from_le_bytes(info[48..52].try_into().unwrap()), 3);
        assert_eq!(
            u64::from_le_bytes(info[32..40].try_into().unwrap()),
            0xe_0000,
            "rsdp_paddr"
        );
        // 3 memmap entries then one module entry.
        assert_eq!(tail.len(), 3 * 24 + 32);
        let modlist = u64::from_le_bytes(info[16..24].try_into().unwrap());
        let off = (modlist - layout::PVH_MEMMAP_START) as usize;
        assert_eq!(
            u64::from_le_bytes(tail[off..off + 8].try_into().unwrap()),
            0x3000000
        );
        assert!(layout::PVH_MEMMAP_START + tail.len() as u64 <= layout::ZERO_PAGE_START);
    }
}
