//! Intel MultiProcessor Specification 1.4 table, so the kernel finds every
//! vCPU and the I/O APIC without ACPI.

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout;

const MPC_SIGNATURE: &[u8; 4] = b"PCMP";
const MPF_SIGNATURE: &[u8; 4] = b"_MP_";
const MP_PROCESSOR: u8 = 0;
const MP_BUS: u8 = 1;
const MP_IOAPIC: u8 = 2;
const MP_INTSRC: u8 = 3;
const MP_LINTSRC: u8 = 4;
const CPU_ENABLED: u8 = 1;
const CPU_BOOTPROCESSOR: u8 = 2;
const APIC_VERSION: u8 = 0x14;
const IOAPIC_VERSION: u8 = 0x11;
const MP_IRQ_INT: u8 = 0;
const MP_IRQ_NMI: u8 = 1;
const MP_IRQ_EXTINT: u8 = 3;
/// Interrupt pins of the in-kernel I/O APIC.
const IOAPIC_PINS: u8 = 24;
const MPF_SIZE: usize = 16;
const MPC_HEADER_SIZE: usize = 44;
const PROCESSOR_SIZE: usize = 20;
const SMALL_ENTRY_SIZE: usize = 8;

/// Most vCPUs whose table fits in the 1 KiB EBDA.
pub const MAX_VCPUS: u32 = 32;

/// Errors building the MP table.
#[derive(Debug, thiserror::Error)]
pub enum MpTableError {
    /// Too many vCPUs for the table's space.
    #[error("{0} vCPUs do not fit in the MP table; at most {MAX_VCPUS} are supported")]
    TooManyVcpus(u32),
    /// Guest memory write failed.
    #[error("cannot write the MP table to guest memory: {0}")]
    GuestWrite(#[source] vm_memory::GuestMemoryError),
}

/// Byte sum, wrapping: a table whose bytes sum to 0 checks out (MP, ACPI).
pub(crate) fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b))
}

/// Builds the floating pointer and configuration table placed at `base`.
pub fn build(vcpus: u32, base: u64) -> Result<Vec<u8>, MpTableError> {
    if vcpus == 0 || vcpus > MAX_VCPUS {
        return Err(MpTableError::TooManyVcpus(vcpus));
    }
    let ioapic_id = vcpus as u8;
    let table_addr = base + MPF_SIZE as u64;

    let mut entries = Vec::new();
    for cpu in 0..vcpus {
        let mut e = [0u8; PROCESSOR_SIZE];
        e[0] = MP_PROCESSOR;
        e[1] = cpu as u8;
        e[2] = APIC_VERSION;
        e[3] = CPU_ENABLED | if cpu == 0 { CPU_BOOTPROCESSOR } else { 0 };
        // CPU signature (family 6) and feature flags (FPU, APIC).
        e[4..8].copy_from_slice(&0x600u32.to_le_bytes());
        e[8..12].copy_from_slice(&0x201u32.to_le_bytes());
        entries.extend_from_slice(&e);
    }
    let mut bus = [0u8; SMALL_ENTRY_SIZE];
    bus[0] = MP_BUS;
    bus[1] = 0;
    bus[2..8].copy_from_slice(b"ISA   ");
    entries.extend_from_slice(&bus);
    let mut ioapic = [0u8; SMALL_ENTRY_SIZE];
    ioapic[0] = MP_IOAPIC;
    ioapic[1] = ioapic_id;
    ioapic[2] = IOAPIC_VERSION;
    ioapic[3] = CPU_ENABLED;
    ioapic[4..8].copy_from_slice(&(layout::IOAPIC_DEFAULT_BASE as u32).to_le_bytes());
    entries.extend_from_slice(&ioapic);
    for pin in 0..IOAPIC_PINS {
        // type, irq type, flags (conforming), source bus, source irq,
        // destination I/O APIC, destination pin
        entries.extend_from_slice(&[MP_INTSRC, MP_IRQ_INT, 0, 0, 0, pin, ioapic_id, pin]);
    }
    // LINT0 = ExtINT, LINT1 = NMI, to all local APICs.
    entries.extend_from_slice(&[MP_LINTSRC, MP_IRQ_EXTINT, 0, 0, 0, 0, 0xff, 0]);
    entries.extend_from_slice(&[MP_LINTSRC, MP_IRQ_NMI, 0, 0, 0, 0, 0xff, 1]);
    let entry_count = vcpus as usize + 2 + IOAPIC_PINS as usize + 2;

    let mut header = [0u8; MPC_HEADER_SIZE];
    header[0..4].copy_from_slice(MPC_SIGNATURE);
    let length = (MPC_HEADER_SIZE + entries.len()) as u16;
    header[4..6].copy_from_slice(&length.to_le_bytes());
    header[6] = 4; // spec revision 1.4
    header[8..16].copy_from_slice(b"BOOTSCOP");
    header[16..28].copy_from_slice(b"MICROVM     ");
    header[34..36].copy_from_slice(&(entry_count as u16).to_le_bytes());
    header[36..40].copy_from_slice(&(layout::APIC_DEFAULT_BASE as u32).to_le_bytes());
    let mut table = header.to_vec();
    table.extend_from_slice(&entries);
    table[7] = 0u8.wrapping_sub(checksum(&table));

    let mut mpf = [0u8; MPF_SIZE];
    mpf[0..4].copy_from_slice(MPF_SIGNATURE);
    mpf[4..8].copy_from_slice(&(table_addr as u32).to_le_bytes());
    mpf[8] = 1; // length in 16-byte units
    mpf[9] = 4; // spec revision
    mpf[10] = 0u8.wrapping_sub(checksum(&mpf));

    let mut out = mpf.to_vec();
    out.extend_from_slice(&table);
    let space = (layout::LOW_MEMORY_END - base) as usize;
    if out.len() > space {
        return Err(MpTableError::TooManyVcpus(vcpus));
    }
    Ok(out)
}

/// Writes the table at the start of the EBDA.
pub fn setup(mem: &GuestMemoryMmap, vcpus: u32) -> Result<(), MpTableError> {
    let bytes = build(vcpus, layout::EBDA_START)?;
    mem.write_slice(&bytes, GuestAddress(layout::EBDA_START))
        .map_err(MpTableError::GuestWrite)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_and_counts() {
        for n in [1, 2, 8, MAX_VCPUS] {
            let t = build(n, layout::EBDA_START).unwrap();
            assert_eq!(&t[0..4], b"_MP_");
            assert_eq!(checksum(&t[0..16]), 0, "floating pointer checksum");
            let addr = u32::from_le_bytes(t[4..8].try_into().unwrap()) as u64;
            assert_eq!(addr, layout::EBDA_START + 16);
            let table = &t[16..];
            assert_eq!(&table[0..4], b"PCMP");
            let len = u16::from_le_bytes([table[4], table[5]]) as usize;
            assert_eq!(len, table.len());
            assert_eq!(checksum(table), 0, "table checksum");
            let count = u16::from_le_bytes([table[34], table[35]]) as u32;
            assert_eq!(count, n + 2 + 24 + 2);
            // Exactly one boot processor, and n processor entries.
            let procs: Vec<&[u8]> = table[44..44 + 20 * n as usize].chunks(20).collect();
            assert!(procs.iter().all(|p| p[0] == MP_PROCESSOR));
            assert_eq!(
                procs
                    .iter()
                    .filter(|p| p[3] & CPU_BOOTPROCESSOR != 0)
                    .count(),
                1
            );
            assert_eq!(
                procs.iter().map(|p| p[1] as u32).collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn rejects_zero_and_too_many() {
        assert!(build(0, layout::EBDA_START).is_err());
        assert!(build(MAX_VCPUS + 1, layout::EBDA_START).is_err());
    }
}
