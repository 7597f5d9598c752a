//! Minimal hardware-reduced ACPI tables (built with rust-vmm's
//! `acpi_tables`): RSDP, XSDT, FADT, MADT and a small DSDT.
//!
//! Why a boot profiler's VMM carries ACPI at all: without it a Linux guest
//! assumes a PC with an i8042 keyboard controller and polls it for half a
//! second (about 10,000 port exits), and can only "power off" by halting.
//! These tables tell it the truth about this machine:
//!
//! - FADT `IAPC_BOOT_ARCH` without the 8042 and VGA bits: the kernel skips
//!   the keyboard controller probe and VGA ("i8042: PNP: No PS/2 controller
//!   found" is not even printed);
//! - hardware-reduced ACPI (no PM1 blocks, no SCI, no FACS) with a sleep
//!   control register at [`SLEEP_CONTROL_PORT`]: `poweroff` writes S5 there
//!   and the VMM stops at once, and a reset register at [`RESET_PORT`] for
//!   `reboot` (the default command line still says `reboot=k`);
//! - a DSDT naming COM1 with its interrupt (a hardware-reduced guest maps
//!   no ISA interrupt by itself) and the CMOS RTC;
//! - MADT with one local APIC per vCPU and the in-kernel I/O APIC, the same
//!   topology as the MP table (kept for `acpi=off` guests);
//! - with two or more guest NUMA nodes (`--numa`), SRAT (each node's vCPUs
//!   and guest-physical memory) and SLIT (distance 10 within a node, 20
//!   between two), so the guest kernel sees the nodes the VMM built.
//!
//! The tables live in the BIOS area at [`layout::ACPI_RSDP_START`] where a kernel scans
//! for the RSDP; the zero page (`acpi_rsdp_addr`) and PVH start info
//! (`rsdp_paddr`) also point at it, so no scan is needed.

use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};
use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::slit::SLIT;
use acpi_tables::srat::MemoryAffinity;
use acpi_tables::xsdt::XSDT;
use acpi_tables::{aml, Aml};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout;
use crate::virtio::MmioWindow;

use layout::ACPI_RSDP_START as RSDP_START;

/// Sleep control register (one byte, write): SLP_TYP in bits 2-4, SLP_EN in
/// bit 5.
pub const SLEEP_CONTROL_PORT: u16 = 0x600;
/// Sleep status register (one byte): the guest clears WAK_STS here before
/// sleeping; reads as 0.
pub const SLEEP_STATUS_PORT: u16 = 0x601;
/// Reset register (one byte, write [`RESET_VALUE`]).
pub const RESET_PORT: u16 = 0x602;
/// What the guest writes to [`RESET_PORT`] to reset.
pub const RESET_VALUE: u8 = 0x1;
/// The S5 (soft off) sleep type the DSDT advertises.
pub const S5_SLEEP_TYPE: u8 = 5;
/// SLP_EN in the sleep control register.
const SLEEP_ENABLE: u8 = 1 << 5;
/// FADT IAPC_BOOT_ARCH: VGA not present.
const IAPC_VGA_NOT_PRESENT: u16 = 1 << 2;
/// MADT flag: the machine has dual 8259 PICs (KVM's in-kernel irqchip does).
const MADT_PCAT_COMPAT: u32 = 1;
/// The OEM fields of every table.
const OEM_ID: [u8; 6] = *b"BTSCPE";
const OEM_TABLE_ID: [u8; 8] = *b"BOOTSCPE";
const OEM_REVISION: u32 = 1;

/// What a byte written to the sleep control register asks for.
pub fn sleep_request(value: u8) -> Option<u8> {
    (value & SLEEP_ENABLE != 0).then_some((value >> 2) & 0x7)
}

/// The tables, each with its guest-physical address.
#[derive(Debug)]
pub struct Tables {
    pub rsdp: Vec<u8>,
    pub tables: Vec<(&'static str, u64, Vec<u8>)>,
}

fn bytes(t: &dyn Aml) -> Vec<u8> {
    let mut v = Vec::new();
    t.to_aml_bytes(&mut v);
    v
}

fn fix_checksum(table: &mut [u8]) {
    table[9] = 0;
    table[9] = 0u8.wrapping_sub(super::mptable::checksum(table));
}

fn io_register(port: u16) -> GAS {
    GAS::new(
        AddressSpace::SystemIo,
        8,
        0,
        AccessSize::ByteAccess,
        port.into(),
    )
}

/// The ACPI id Linux's virtio-mmio driver matches (`LNRO0005`).
pub const VIRTIO_MMIO_HID: &str = "LNRO0005";

/// `Device (Vnnn)` for each virtio-mmio device: `_HID` `LNRO0005`, and
/// `_CRS` with its window (Memory32Fixed) and its edge-triggered,
/// active-high interrupt, as Firecracker describes its devices on x86
/// (the kernel has no command-line virtio-mmio devices).
fn virtio_devices(slots: &[MmioWindow]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let mem = aml::Memory32Fixed::new(true, slot.base as u32, slot.size as u32);
        let irq = aml::Interrupt::new(true, true, false, false, slot.irq);
        let crs = aml::ResourceTemplate::new(vec![&mem, &irq]);
        let hid: aml::AmlStr = VIRTIO_MMIO_HID;
        let uid = i as u32;
        let names = [
            aml::Name::new("_HID".into(), &hid),
            aml::Name::new("_UID".into(), &uid),
            aml::Name::new("_CCA".into(), &aml::ONE),
            aml::Name::new("_CRS".into(), &crs),
        ];
        let dev = aml::Device::new(
            format!("V{i:03X}").as_str().into(),
            names.iter().map(|n| n as &dyn Aml).collect(),
        );
        dev.to_aml_bytes(&mut out);
    }
    out
}

fn dsdt(virtio: &[MmioWindow]) -> Vec<u8> {
    let mut dsdt = Sdt::new(*b"DSDT", 36, 6, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    // A hardware-reduced guest has no legacy PIC and maps no ISA interrupt
    // by itself: COM1's IRQ must be named here, or the UART's transmit
    // interrupt never arrives and userspace console output is lost (the
    // kernel's own messages are polled out and would still show).
    let com1_io = aml::IO::new(layout::SERIAL_PORT_BASE, layout::SERIAL_PORT_BASE, 1, 8);
    let com1_irq = aml::Interrupt::new(true, true, false, false, layout::SERIAL_IRQ);
    let com1_crs = aml::ResourceTemplate::new(vec![&com1_io, &com1_irq]);
    let com1_hid = aml::EISAName::new("PNP0501");
    let com1_names = [
        aml::Name::new("_HID".into(), &com1_hid),
        aml::Name::new("_UID".into(), &aml::ZERO),
        aml::Name::new("_CRS".into(), &com1_crs),
    ];
    let com1 = aml::Device::new(
        "COM1".into(),
        com1_names.iter().map(|n| n as &dyn Aml).collect(),
    );
    // The CMOS RTC, without an interrupt (it raises none).
    let rtc_io = aml::IO::new(crate::rtc::INDEX_PORT, crate::rtc::INDEX_PORT, 1, 2);
    let rtc_crs = aml::ResourceTemplate::new(vec![&rtc_io]);
    let rtc_hid = aml::EISAName::new("PNP0B00");
    let rtc_names = [
        aml::Name::new("_HID".into(), &rtc_hid),
        aml::Name::new("_CRS".into(), &rtc_crs),
    ];
    let rtc = aml::Device::new(
        "RTC_".into(),
        rtc_names.iter().map(|n| n as &dyn Aml).collect(),
    );
    let virtio = RawAml(virtio_devices(virtio));
    let vmgenid = RawAml(super::vmgenid::devices());
    let sb = aml::Scope::new("\\_SB_".into(), vec![&com1, &rtc, &virtio, &vmgenid]);
    // Name (_S5, Package () { 5, 0, 0, 0 }): SLP_TYPa, SLP_TYPb, reserved.
    let s5 = aml::Name::new(
        "_S5_".into(),
        &aml::Package::new(vec![&S5_SLEEP_TYPE, &aml::ZERO, &aml::ZERO, &aml::ZERO]),
    );
    dsdt.append_slice(&bytes(&sb));
    dsdt.append_slice(&bytes(&s5));
    dsdt.as_slice().to_vec()
}

/// AML already encoded.
struct RawAml(Vec<u8>);

impl Aml for RawAml {
    fn to_aml_bytes(&self, sink: &mut dyn acpi_tables::AmlSink) {
        sink.vec(&self.0);
    }
}

fn fadt(dsdt_addr: u64) -> Vec<u8> {
    let mut b = FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION)
        .dsdt_64(dsdt_addr)
        .flag(Flags::HwReducedAcpi)
        .flag(Flags::ResetRegSup);
    b.iapc_boot_arch = IAPC_VGA_NOT_PRESENT.into();
    b.century = crate::rtc::CENTURY_REG;
    b.sleep_control_reg = io_register(SLEEP_CONTROL_PORT);
    b.sleep_status_reg = io_register(SLEEP_STATUS_PORT);
    b.reset_reg = io_register(RESET_PORT);
    b.reset_value = RESET_VALUE;
    bytes(&b.finalize())
}

fn madt(vcpus: u32) -> Vec<u8> {
    let mut m = MADT::new(
        OEM_ID,
        OEM_TABLE_ID,
        OEM_REVISION,
        LocalInterruptController::Address(layout::APIC_DEFAULT_BASE as u32),
    );
    for cpu in 0..vcpus {
        m.add_structure(ProcessorLocalApic::new(
            cpu as u8,
            cpu as u8,
            EnabledStatus::Enabled,
        ));
    }
    // The I/O APIC id follows the CPUs', as in the MP table.
    m.add_structure(IoApic::new(
        vcpus as u8,
        layout::IOAPIC_DEFAULT_BASE as u32,
        0,
    ));
    let mut v = bytes(&m);
    v[40..44].copy_from_slice(&MADT_PCAT_COMPAT.to_le_bytes());
    fix_checksum(&mut v);
    v
}

/// One guest NUMA node: its proximity domain, vCPUs and guest-physical
/// memory ranges (start, length).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaNode {
    /// Guest node number (the proximity domain).
    pub id: u32,
    /// Its vCPUs (their APIC ids are their indexes).
    pub cpus: Vec<u32>,
    /// Its memory.
    pub ranges: Vec<(u64, u64)>,
}

/// SRAT structure type of a processor's local APIC affinity.
const SRAT_LAPIC_AFFINITY: u8 = 0;
/// Its length.
const SRAT_LAPIC_AFFINITY_LEN: u8 = 16;
/// Affinity structure flag: enabled.
const SRAT_ENABLED: u32 = 1;
/// Distance within a node and between two (the ACPI convention: 10 local).
const LOCAL_DISTANCE: u8 = 10;
const REMOTE_DISTANCE: u8 = 20;

/// SRAT (revision 3): a local APIC affinity per vCPU (written here: the
/// `acpi_tables` crate builds that structure only for RISC-V) and a memory
/// affinity per range (the crate's).
fn srat(nodes: &[NumaNode]) -> Vec<u8> {
    // Header, then 4 reserved bytes that must be 1 and 8 reserved bytes.
    let mut t = Sdt::new(*b"SRAT", 36, 3, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    t.append_slice(&1u32.to_le_bytes());
    t.append_slice(&0u64.to_le_bytes());
    for node in nodes {
        let domain = node.id.to_le_bytes();
        for &cpu in &node.cpus {
            let mut st = [0u8; SRAT_LAPIC_AFFINITY_LEN as usize];
            st[0] = SRAT_LAPIC_AFFINITY;
            st[1] = SRAT_LAPIC_AFFINITY_LEN;
            st[2] = domain[0];
            st[3] = cpu as u8;
            st[4..8].copy_from_slice(&SRAT_ENABLED.to_le_bytes());
            // st[8]: local SAPIC EID (none); 9..12: domain bits 8-31;
            // 12..16: clock domain 0.
            st[9..12].copy_from_slice(&domain[1..4]);
            t.append_slice(&st);
        }
        for &(start, len) in &node.ranges {
            t.append_slice(&bytes(&MemoryAffinity::new(node.id, start, len).enabled()));
        }
    }
    t.as_slice().to_vec()
}

/// SLIT over proximity domains 0..=highest node id.
fn slit(nodes: &[NumaNode]) -> Vec<u8> {
    let localities = nodes.iter().map(|n| n.id + 1).max().unwrap_or(1);
    let mut t = SLIT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION, localities);
    for a in 0..localities as usize {
        for b in 0..localities as usize {
            let d = if a == b {
                LOCAL_DISTANCE
            } else {
                REMOTE_DISTANCE
            };
            t.set_distance(a, b, d);
        }
    }
    bytes(&t)
}

/// Builds the tables for `vcpus` vCPUs (at most the MP table's limit, which
/// also keeps APIC ids in one byte) and, with two or more `nodes`, their
/// NUMA topology.
pub fn build(vcpus: u32, nodes: &[NumaNode]) -> Tables {
    build_with(vcpus, nodes, &[])
}

/// [`build`], with the virtio-mmio devices in the DSDT.
pub fn build_with(vcpus: u32, nodes: &[NumaNode], virtio: &[MmioWindow]) -> Tables {
    let align = |a: u64| a.next_multiple_of(16);
    let numa = nodes.len() > 1;
    let xsdt_addr = align(RSDP_START + Rsdp::len() as u64);
    // The XSDT lists FADT and MADT (the DSDT hangs off the FADT), and SRAT
    // and SLIT with NUMA.
    let entries = if numa { 4 } else { 2 };
    let xsdt_len = 36 + entries * 8;
    let dsdt_addr = align(xsdt_addr + xsdt_len);
    let dsdt = dsdt(virtio);
    let fadt_addr = align(dsdt_addr + dsdt.len() as u64);
    let fadt = fadt(dsdt_addr);
    let madt_addr = align(fadt_addr + fadt.len() as u64);
    let madt = madt(vcpus);
    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    xsdt.add_entry(fadt_addr);
    xsdt.add_entry(madt_addr);
    let mut numa_tables = Vec::new();
    if numa {
        let srat_addr = align(madt_addr + madt.len() as u64);
        let srat = srat(nodes);
        let slit_addr = align(srat_addr + srat.len() as u64);
        xsdt.add_entry(srat_addr);
        xsdt.add_entry(slit_addr);
        numa_tables.push(("SRAT", srat_addr, srat));
        numa_tables.push(("SLIT", slit_addr, slit(nodes)));
    }
    let xsdt = bytes(&xsdt);
    debug_assert_eq!(xsdt.len() as u64, xsdt_len);
    let mut tables = vec![
        ("XSDT", xsdt_addr, xsdt),
        ("DSDT", dsdt_addr, dsdt),
        ("FACP", fadt_addr, fadt),
        ("APIC", madt_addr, madt),
    ];
    tables.extend(numa_tables);
    Tables {
        rsdp: bytes(&Rsdp::new(OEM_ID, xsdt_addr)),
        tables,
    }
}

/// Writes the tables into guest memory; returns the RSDP's address.
pub fn setup(
    mem: &GuestMemoryMmap,
    vcpus: u32,
    nodes: &[NumaNode],
    virtio: &[MmioWindow],
) -> Result<u64, vm_memory::GuestMemoryError> {
    let t = build_with(vcpus, nodes, virtio);
    mem.write_slice(&t.rsdp, GuestAddress(RSDP_START))?;
    for (_, addr, bytes) in &t.tables {
        mem.write_slice(bytes, GuestAddress(*addr))?;
    }
    Ok(RSDP_START)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::mptable::checksum;

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    /// Every table has its signature, length and checksum, and they follow
    /// each other without overlapping inside the BIOS area.
    fn check_layout(t: &Tables) {
        let mut end = RSDP_START + t.rsdp.len() as u64;
        for (sig, addr, bytes) in &t.tables {
            assert_eq!(&bytes[0..4], sig.as_bytes());
            assert_eq!(u32_at(bytes, 4) as usize, bytes.len(), "{sig} length");
            assert_eq!(checksum(bytes), 0, "{sig} checksum");
            assert!(*addr >= end, "{sig} overlaps the table before it");
            end = addr + bytes.len() as u64;
        }
        assert!(end <= layout::ACPI_TABLES_END);
    }

    /// The addresses the XSDT lists.
    fn xsdt_entries(t: &Tables) -> Vec<u64> {
        let xsdt = &t.tables.iter().find(|(n, _, _)| *n == "XSDT").unwrap().2;
        (36..xsdt.len())
            .step_by(8)
            .map(|o| u64_at(xsdt, o))
            .collect()
    }

    #[test]
    fn tables_are_consistent_and_fit_the_bios_area() {
        let t = build(4, &[]);
        // RSDP: signature, both checksums, revision 2, XSDT address.
        assert_eq!(&t.rsdp[0..8], b"RSD PTR ");
        assert_eq!(checksum(&t.rsdp[0..20]), 0);
        assert_eq!(checksum(&t.rsdp), 0);
        assert_eq!(t.rsdp[15], 2);
        let xsdt_addr = u64_at(&t.rsdp, 24);
        let by_sig = |s: &str| t.tables.iter().find(|(n, _, _)| *n == s).unwrap();
        assert_eq!(by_sig("XSDT").1, xsdt_addr);
        check_layout(&t);
        // XSDT lists FADT and MADT.
        assert_eq!(xsdt_entries(&t), vec![by_sig("FACP").1, by_sig("APIC").1]);
    }

    #[test]
    fn two_nodes_get_srat_and_slit() {
        let nodes = [
            NumaNode {
                id: 0,
                cpus: vec![0, 2],
                ranges: vec![(0, 0x8000_0000)],
            },
            NumaNode {
                id: 1,
                cpus: vec![1, 3],
                ranges: vec![(0x8000_0000, 0x4000_0000), (0x1_0000_0000, 0x4000_0000)],
            },
        ];
        let t = build(4, &nodes);
        let by_sig = |s: &str| t.tables.iter().find(|(n, _, _)| *n == s).unwrap();
        check_layout(&t);
        assert_eq!(
            xsdt_entries(&t),
            ["FACP", "APIC", "SRAT", "SLIT"]
                .map(|s| by_sig(s).1)
                .to_vec()
        );
        // SRAT: 12 reserved bytes (the first dword 1), then structures.
        let srat = &by_sig("SRAT").2;
        assert_eq!(u32_at(srat, 36), 1);
        let mut cpus = Vec::new();
        let mut mem = Vec::new();
        let mut o = 48;
        while o < srat.len() {
            let (kind, len) = (srat[o], srat[o + 1] as usize);
            match kind {
                0 => {
                    assert_eq!(len, 16);
                    assert_eq!(u32_at(srat, o + 4) & 1, 1, "enabled");
                    // Domain: byte 2, bytes 9..12 high.
                    let domain = u32::from(srat[o + 2])
                        | u32::from_le_bytes([0, srat[o + 9], srat[o + 10], srat[o + 11]]);
                    cpus.push((srat[o + 3], domain));
                }
                1 => {
                    assert_eq!(len, 40);
                    assert_eq!(u32_at(srat, o + 28) & 1, 1, "enabled");
                    mem.push((
                        u32_at(srat, o + 2),
                        u64_at(srat, o + 8),
                        u64_at(srat, o + 16),
                    ));
                }
                other => panic!("unexpected SRAT structure {other}"),
            }
            o += len;
        }
        assert_eq!(o, srat.len());
        assert_eq!(cpus, vec![(0, 0), (2, 0), (1, 1), (3, 1)]);
        assert_eq!(
            mem,
            vec![
                (0, 0, 0x8000_0000),
                (1, 0x8000_0000, 0x4000_0000),
                (1, 0x1_0000_0000, 0x4000_0000)
            ]
        );
        // SLIT: 2 localities, 10 on the diagonal, 20 elsewhere.
        let slit = &by_sig("SLIT").2;
        assert_eq!(u64_at(slit, 36), 2);
        assert_eq!(&slit[44..48], &[10, 20, 20, 10]);
        // One node: no NUMA tables.
        assert_eq!(build(2, &nodes[..1]).tables.len(), 4);
    }

    #[test]
    fn fadt_says_hardware_reduced_without_8042_and_points_at_the_dsdt() {
        let t = build(1, &[]);
        let f = &t.tables.iter().find(|(n, _, _)| *n == "FACP").unwrap().2;
        let dsdt_addr = t.tables.iter().find(|(n, _, _)| *n == "DSDT").unwrap().1;
        assert_eq!(f.len(), 276, "ACPI 6.x FADT");
        let flags = u32_at(f, 112);
        assert_ne!(flags & (1 << 20), 0, "HW_REDUCED_ACPI");
        assert_ne!(flags & (1 << 10), 0, "RESET_REG_SUP");
        let boot_arch = u16::from_le_bytes([f[109], f[110]]);
        assert_eq!(boot_arch & 0b10, 0, "8042 must be absent");
        assert_ne!(boot_arch & 0b100, 0, "VGA not present");
        assert_eq!(u64_at(f, 140), dsdt_addr, "X_DSDT");
        assert_eq!(f[108], crate::rtc::CENTURY_REG, "CENTURY");
        // Reset register: system I/O, 8 bits, at RESET_PORT, value.
        assert_eq!(f[116], 1);
        assert_eq!(u64_at(f, 120), u64::from(RESET_PORT));
        assert_eq!(f[128], RESET_VALUE);
        // Sleep control and status registers (offsets 244 and 256).
        assert_eq!((f[244], f[245]), (1, 8));
        assert_eq!(u64_at(f, 248), u64::from(SLEEP_CONTROL_PORT));
        assert_eq!(u64_at(f, 260), u64::from(SLEEP_STATUS_PORT));
    }

    #[test]
    fn madt_lists_every_vcpu_and_the_ioapic() {
        let t = build(3, &[]);
        let m = &t.tables.iter().find(|(n, _, _)| *n == "APIC").unwrap().2;
        assert_eq!(u32_at(m, 36), layout::APIC_DEFAULT_BASE as u32);
        assert_eq!(u32_at(m, 40), MADT_PCAT_COMPAT);
        let mut off = 44;
        let mut lapics = Vec::new();
        let mut ioapics = Vec::new();
        while off < m.len() {
            let (kind, len) = (m[off], m[off + 1] as usize);
            match kind {
                0 => lapics.push((m[off + 2], m[off + 3], u32_at(m, off + 4))),
                1 => ioapics.push((m[off + 2], u32_at(m, off + 4), u32_at(m, off + 8))),
                other => panic!("unexpected MADT entry type {other}"),
            }
            off += len;
        }
        assert_eq!(off, m.len());
        assert_eq!(lapics, vec![(0, 0, 1), (1, 1, 1), (2, 2, 1)]);
        assert_eq!(ioapics, vec![(3, layout::IOAPIC_DEFAULT_BASE as u32, 0)]);
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    #[test]
    fn dsdt_carries_the_s5_package_com1_and_the_rtc() {
        let t = build(1, &[]);
        let d = &t.tables.iter().find(|(n, _, _)| *n == "DSDT").unwrap().2;
        // NameOp "_S5_" PackageOp PkgLength NumElements(4) BytePrefix 5 0 0 0
        let at = find(d, b"_S5_").expect("_S5_ named");
        assert_eq!(d[at - 1], 0x08, "NameOp");
        assert_eq!(d[at + 4], 0x12, "PackageOp");
        assert_eq!(d[at + 6], 4, "four elements");
        assert_eq!(&d[at + 7..at + 9], &[0x0a, S5_SLEEP_TYPE], "BytePrefix 5");
        // \_SB_ scope with COM1 (PNP0501) and RTC_ (PNP0B00).
        assert!(find(d, b"\\_SB_").is_some());
        let com1 = find(d, b"COM1").expect("COM1 device");
        let rtc = find(d, b"RTC_").expect("RTC_ device");
        // EISA ids: PNP0501 is 0x0105d041, PNP0B00 0x000bd041 (little endian).
        assert!(find(&d[com1..rtc], &[0x0c, 0x41, 0xd0, 0x05, 0x01]).is_some());
        assert!(find(&d[rtc..], &[0x0c, 0x41, 0xd0, 0x0b, 0x00]).is_some());
        // COM1's resources: I/O 0x3f8, 8 ports; the extended interrupt
        // descriptor (0x89) for IRQ 4, edge triggered, active high.
        assert!(find(
            &d[com1..rtc],
            &[0x47, 0x01, 0xf8, 0x03, 0xf8, 0x03, 0x01, 0x08]
        )
        .is_some());
        let irq = find(&d[com1..rtc], &[0x89]).expect("interrupt descriptor") + com1;
        assert_eq!(d[irq + 3] & 0b11, 0b11, "consumer, edge triggered");
        assert_eq!(d[irq + 3] & 0b100, 0, "active high");
        assert_eq!(u32_at(d, irq + 5), layout::SERIAL_IRQ);
        // The RTC: I/O 0x70, 2 ports, and no interrupt.
        assert!(find(&d[rtc..], &[0x47, 0x01, 0x70, 0x00, 0x70, 0x00, 0x01, 0x02]).is_some());
        // (The VM generation ID's devices follow it; the GED has one.)
        let vgen = find(d, b"VGEN").expect("VGEN device");
        assert!(rtc < vgen && vgen < at);
        assert!(find(&d[rtc..vgen], &[0x89]).is_none());
    }

    #[test]
    fn dsdt_describes_each_virtio_device_with_its_window_and_interrupt() {
        let slots = [
            MmioWindow {
                base: 0xd000_1000,
                size: 0x1000,
                irq: 5,
            },
            MmioWindow {
                base: 0xd000_2000,
                size: 0x1000,
                irq: 6,
            },
        ];
        let t = build_with(1, &[], &slots);
        check_layout(&t);
        let d = &t.tables.iter().find(|(n, _, _)| *n == "DSDT").unwrap().2;
        let v0 = find(d, b"V000").expect("device V000");
        let v1 = find(d, b"V001").expect("device V001");
        assert!(find(&build(1, &[]).tables[1].2, b"LNRO0005").is_none());
        for (i, (at, end)) in [(v0, v1), (v1, d.len())].into_iter().enumerate() {
            let dev = &d[at..end];
            // _HID "LNRO0005" as a string.
            assert!(find(dev, b"_HID\x0dLNRO0005\0").is_some(), "device {i}");
            // Memory32Fixed (0x86), read-write, base, length.
            let m = find(dev, &[0x86, 0x09, 0x00, 0x01]).expect("Memory32Fixed");
            assert_eq!(u32_at(dev, m + 4), slots[i].base as u32);
            assert_eq!(u32_at(dev, m + 8), 0x1000);
            // Extended interrupt: consumer, edge, active high, its line.
            let irq = find(dev, &[0x89, 0x06, 0x00]).expect("interrupt");
            assert_eq!(dev[irq + 3], 0b11);
            assert_eq!(u32_at(dev, irq + 5), slots[i].irq);
        }
    }

    #[test]
    fn sleep_control_decoding() {
        assert_eq!(sleep_request((S5_SLEEP_TYPE << 2) | SLEEP_ENABLE), Some(5));
        assert_eq!(sleep_request(S5_SLEEP_TYPE << 2), None, "SLP_EN clear");
        assert_eq!(sleep_request(SLEEP_ENABLE), Some(0));
    }
}
