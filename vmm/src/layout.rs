//! Every guest-physical address the VMM uses, in one place.
//!
//! The low-memory layout follows the conventions Linux expects of a boot
//! loader (zero page below 0x10000, command line below the EBDA, MP table in
//! the EBDA) and leaves the classic PC hole 0xa0000-0xfffff alone.

/// Global descriptor table.
pub const GDT_START: u64 = 0x500;
/// Interrupt descriptor table (empty: the kernel installs its own).
pub const IDT_START: u64 = 0x520;
/// PVH `hvm_start_info`, followed by its memory map.
pub const PVH_INFO_START: u64 = 0x6000;
/// PVH memory map entries (after the 56-byte start info).
pub const PVH_MEMMAP_START: u64 = PVH_INFO_START + 0x40;
/// The Linux zero page (`struct boot_params`).
pub const ZERO_PAGE_START: u64 = 0x7000;
/// Initial stack pointer for the boot vCPU.
pub const BOOT_STACK_POINTER: u64 = 0x8ff0;
/// Level 4 page map of the identity page tables.
pub const PML4_START: u64 = 0x9000;
/// Page directory pointer table.
pub const PDPTE_START: u64 = 0xa000;
/// First of four page directories (2 MiB pages, identity map of 4 GiB).
pub const PDE_START: u64 = 0xb000;
/// Kernel command line.
pub const CMDLINE_START: u64 = 0x20000;
/// Largest command line we place (the bzImage header may ask for less).
pub const CMDLINE_MAX_SIZE: usize = 0x10000;
/// Start of the extended BIOS data area, where the MP table lives.
pub const EBDA_START: u64 = 0x9fc00;
/// End of usable low memory (start of the VGA/BIOS hole).
pub const LOW_MEMORY_END: u64 = 0xa0000;
/// Where the ACPI RSDP goes (the start of the BIOS read-only area the
/// kernel scans); the other tables follow it.
pub const ACPI_RSDP_START: u64 = 0xe_0000;
/// End of the area the ACPI tables may use (the VM generation ID's page
/// follows).
pub const ACPI_TABLES_END: u64 = VMGENID_START;
/// The VM generation ID (16 bytes) the DSDT's `VGEN` device points at
/// (`ADDR`): the last page of the BIOS area, not RAM in the guest's
/// memory map, like the ACPI tables before it.
pub const VMGENID_START: u64 = 0xf_f000;
/// Where high memory (and the protected-mode kernel) starts.
pub const HIMEM_START: u64 = 0x10_0000;
/// Start of the 32-bit MMIO gap below 4 GiB: guest RAM is split around it.
pub const MMIO_GAP_START: u64 = 0xc000_0000;
/// End of the 32-bit MMIO gap.
pub const MMIO_GAP_END: u64 = 0x1_0000_0000;
/// Firecracker's boot-timer device: the guest writes 123 here.
pub const BOOT_TIMER_MMIO: u64 = 0xd000_0000;
/// The first virtio-mmio register window (after the boot timer's page);
/// device `n` is at `VIRTIO_MMIO_START + n * VIRTIO_MMIO_SIZE`.
pub const VIRTIO_MMIO_START: u64 = BOOT_TIMER_MMIO + 0x1000;
/// One virtio-mmio register window (registers and config space).
pub const VIRTIO_MMIO_SIZE: u64 = 0x1000;
/// Device `n`'s interrupt is I/O APIC pin `VIRTIO_IRQ_BASE + n` (edge
/// triggered, through an irqfd), up to the last pin.
pub const VIRTIO_IRQ_BASE: u32 = 5;
/// The I/O APIC's last pin.
pub const IOAPIC_LAST_PIN: u32 = 23;
/// The ACPI generic event device's interrupt (I/O APIC pin, edge
/// triggered): raised after a restore, its `_EVT` notifies the VM
/// generation ID device.
pub const GED_IRQ: u32 = IOAPIC_LAST_PIN;
/// Most virtio devices a guest gets (one interrupt line each, below the
/// generic event device's).
pub const VIRTIO_MAX_DEVICES: usize = (GED_IRQ - VIRTIO_IRQ_BASE) as usize;
/// Value a guest writes to the boot timer to say "userspace started".
pub const BOOT_TIMER_MAGIC: u8 = 123;
/// Local APIC default base.
pub const APIC_DEFAULT_BASE: u64 = 0xfee0_0000;
/// I/O APIC default base.
pub const IOAPIC_DEFAULT_BASE: u64 = 0xfec0_0000;
/// Identity map page used by KVM on Intel (must not overlap RAM in use).
pub const KVM_IDENTITY_MAP_START: u64 = 0xfffb_c000;
/// Task state segment pages used by KVM on Intel (3 pages after the map).
pub const KVM_TSS_START: u64 = KVM_IDENTITY_MAP_START + 0x1000;

/// COM1 base port.
pub const SERIAL_PORT_BASE: u16 = 0x3f8;
/// COM1 interrupt line.
pub const SERIAL_IRQ: u32 = 4;
/// i8042 keyboard controller data and command ports.
pub const I8042_DATA_PORT: u16 = 0x60;
pub const I8042_COMMAND_PORT: u16 = 0x64;
/// Debug port used for POST codes (Cloud Hypervisor's boot markers).
pub const DEBUG_PORT: u16 = 0x80;
/// qemu-boot-time's marker port.
pub const BOOT_TIME_PORT: u16 = 0xf4;
/// The chipset's reset control register (PIIX/ICH `RCR`), byte wide: Linux
/// resets through it with `reboot=pci` (and after the ACPI and i8042
/// attempts fail with the default `reboot=`).
pub const RESET_CONTROL_PORT: u16 = 0xcf9;
/// `RST_CPU` in the reset control register: writing it set resets.
pub const RESET_CONTROL_RST_CPU: u8 = 0x04;
/// `SYS_RST` (hard rather than soft reset): the only bit the register keeps.
pub const RESET_CONTROL_SYS_RST: u8 = 0x02;

// The boot structures must not overlap each other.
const _: () = assert!(PVH_MEMMAP_START + 0x400 <= ZERO_PAGE_START);
const _: () = assert!(ZERO_PAGE_START + 0x1000 <= BOOT_STACK_POINTER);
const _: () = assert!(BOOT_STACK_POINTER < PML4_START);
const _: () = assert!(PDE_START + 4 * 0x1000 <= CMDLINE_START);
const _: () = assert!(CMDLINE_START + CMDLINE_MAX_SIZE as u64 <= EBDA_START);
// The virtio windows lie in the MMIO gap, clear of the I/O APIC, and their
// interrupts clear of COM1's.
const _: () = assert!(
    VIRTIO_MMIO_START + VIRTIO_MAX_DEVICES as u64 * VIRTIO_MMIO_SIZE <= IOAPIC_DEFAULT_BASE
);
const _: () = assert!(VIRTIO_IRQ_BASE > SERIAL_IRQ);
const _: () = assert!(VMGENID_START + 0x1000 <= HIMEM_START);

pub use bootscope_model::timeline::GuestRegion;

/// What the VMM put where, for [`guest_regions`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Placement {
    /// The kernel's memory while it boots: its image, and for a bzImage
    /// that decompresses itself the `init_size` bytes it decompresses into.
    pub kernel: (u64, u64),
    pub initrd: Option<(u64, u64)>,
    /// Bytes of the command line with its NUL.
    pub cmdline_bytes: u64,
    pub acpi: bool,
    pub memory_bytes: u64,
}

/// Every region of guest-physical memory the VMM placed something in, the
/// guest RAM around them, the MMIO gap and the devices in it, in address
/// order. What the guest later does with its RAM (its own page tables, a
/// kernel that moves itself) is not known here: that is `RAM`.
pub fn guest_regions(p: &Placement) -> Vec<GuestRegion> {
    let r = |name: &str, start: u64, end: u64| GuestRegion {
        name: name.into(),
        start,
        end,
    };
    let mut v = vec![
        r("boot GDT and IDT", GDT_START, IDT_START + 8),
        r(
            "boot parameters (PVH start info, zero page)",
            PVH_INFO_START,
            ZERO_PAGE_START + 0x1000,
        ),
        r("boot stack", ZERO_PAGE_START + 0x1000, PML4_START),
        r("boot page tables", PML4_START, PDE_START + 4 * 0x1000),
        r(
            "command line",
            CMDLINE_START,
            CMDLINE_START + p.cmdline_bytes.max(1),
        ),
        r("MP table", EBDA_START, LOW_MEMORY_END),
    ];
    if p.acpi {
        v.push(r("ACPI tables", ACPI_RSDP_START, ACPI_TABLES_END));
    }
    v.push(r("kernel image", p.kernel.0, p.kernel.1));
    if let Some((a, size)) = p.initrd.filter(|i| i.1 > 0) {
        v.push(r("initrd", a, a + size));
    }
    let low_end = p.memory_bytes.min(MMIO_GAP_START);
    v.push(r("RAM", 0, low_end));
    if p.memory_bytes > MMIO_GAP_START {
        v.push(r(
            "RAM",
            MMIO_GAP_END,
            MMIO_GAP_END + p.memory_bytes - MMIO_GAP_START,
        ));
    }
    v.extend([
        r(
            "boot timer (MMIO)",
            BOOT_TIMER_MMIO,
            BOOT_TIMER_MMIO + 0x1000,
        ),
        r(
            "I/O APIC (MMIO)",
            IOAPIC_DEFAULT_BASE,
            IOAPIC_DEFAULT_BASE + 0x1000,
        ),
        r(
            "local APIC (MMIO)",
            APIC_DEFAULT_BASE,
            APIC_DEFAULT_BASE + 0x1000,
        ),
        r("MMIO gap", MMIO_GAP_START, MMIO_GAP_END),
    ]);
    v.sort_by_key(|g| (g.start, std::cmp::Reverse(g.end)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_in_order_and_inside_ram() {
        let v = guest_regions(&Placement {
            kernel: (0x100_0000, 0x300_0000),
            initrd: Some((0x800_0000, 0x10_0000)),
            cmdline_bytes: 100,
            acpi: true,
            memory_bytes: 256 << 20,
        });
        let names: Vec<&str> = v.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names[0], "RAM");
        assert!(names.contains(&"ACPI tables") && names.contains(&"initrd"));
        assert!(v.windows(2).all(|w| w[0].start <= w[1].start));
        let cmd = v.iter().find(|g| g.name == "command line").unwrap();
        assert_eq!((cmd.start, cmd.end), (CMDLINE_START, CMDLINE_START + 100));
        // Every boot structure lies in the first RAM block, before the
        // kernel.
        for g in v
            .iter()
            .filter(|g| g.name.starts_with("boot") && !g.name.contains("MMIO"))
        {
            assert!(g.end <= 0x100_0000 && g.start < g.end, "{g:?}");
        }
    }
}
