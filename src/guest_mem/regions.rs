//! What another VMM's guest-physical ranges hold, for labelling its nested
//! page faults: the VM's memory slots (address space 0: address space 1 is
//! SMM's view of the same memory), the x86 devices at fixed addresses
//! that no slot backs (the local and I/O APICs, the HPET), and the device
//! windows of the VMM when they are fixed (QEMU microvm's generic event
//! device and virtio-mmio transports, Firecracker's virtio-mmio
//! transports); the rest of the 32-bit MMIO hole is the `MMIO gap`.

use bootscope_model::guest_read::GuestRead;
use bootscope_model::sites::GuestRegion;
use bootscope_model::vmm::VmmKind;

const GIB4: u64 = 1 << 32;
/// The most RAM VMMs place below 4 GiB (QEMU i440fx's 3.5 GiB).
const LOW_RAM_MAX: u64 = 0xe000_0000;

/// Devices at the same guest-physical address on every x86 VM.
const X86_DEVICES: &[(&str, u64, u64)] = &[
    ("I/O APIC (MMIO)", 0xfec0_0000, 0x1000),
    ("HPET (MMIO)", 0xfed0_0000, 0x1000),
    ("local APIC (MMIO)", 0xfee0_0000, 0x1000),
];

/// QEMU microvm's fixed windows (hw/i386/microvm.c).
const MICROVM: &[(&str, u64, u64)] = &[
    ("ACPI generic event device (MMIO)", 0xfea0_0000, 0x300),
    ("virtio-mmio (MMIO)", 0xfeb0_0000, 0x1_0000),
];

/// Firecracker's virtio-mmio transports (x86_64: from 0xd0000000, one
/// page each).
const FIRECRACKER: &[(&str, u64, u64)] = &[("virtio-mmio (MMIO)", 0xd000_0000, 0x10_0000)];

/// The regions of `read`'s VM for `vmm`.
pub fn npf_regions(read: &GuestRead, vmm: VmmKind) -> Vec<GuestRegion> {
    let slots = &read.memory_map.slots;
    let primary: Vec<_> = slots.iter().filter(|s| s.slot >> 16 == 0).collect();
    let mut out: Vec<GuestRegion> = slots
        .iter()
        .filter(|s| {
            s.slot >> 16 == 0
                || !primary
                    .iter()
                    .any(|p| p.gpa < s.gpa + s.size && s.gpa < p.gpa + p.size)
        })
        .map(|s| GuestRegion {
            name: format!("{} ({})", s.kind, s.backing),
            start: s.gpa,
            end: s.gpa.saturating_add(s.size),
        })
        .collect();
    if out.is_empty() {
        return out;
    }
    let fixed: &[(&str, u64, u64)] = match vmm {
        VmmKind::Qemu => MICROVM,
        VmmKind::Firecracker => FIRECRACKER,
        _ => &[],
    };
    let backed = |a: u64, n: u64| out.iter().any(|r| r.start < a + n && a < r.end);
    let devices: Vec<GuestRegion> = X86_DEVICES
        .iter()
        .chain(fixed)
        .filter(|(_, a, n)| !backed(*a, *n))
        .map(|&(name, a, n)| GuestRegion {
            name: name.into(),
            start: a,
            end: a + n,
        })
        .collect();
    // The hole below 4 GiB, from the end of the RAM under it (the
    // firmware's slots just below 4 GiB are in it).
    let low_end = out
        .iter()
        .filter(|r| r.end <= LOW_RAM_MAX)
        .map(|r| r.end)
        .max()
        .unwrap_or(0);
    out.extend(devices);
    out.push(GuestRegion {
        name: "MMIO gap".into(),
        start: low_end,
        end: GIB4,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::guest_read::{GuestMemoryMap, MemorySlot};
    use bootscope_model::sites::region_label;

    fn slot(slot: u32, gpa: u64, size: u64) -> MemorySlot {
        MemorySlot {
            slot,
            gpa,
            size,
            kind: "ram".into(),
            backing: "[anon]".into(),
            ..MemorySlot::default()
        }
    }

    /// QEMU microvm's slots as the lab's profile caught them: RAM in
    /// three slots and the firmware's, each again in SMM's address space.
    fn microvm() -> GuestRead {
        let mut slots = Vec::new();
        for space in [0u32, 1 << 16] {
            slots.push(slot(space, 0, 0xf0000));
            slots.push(slot(space + 1, 0xf0000, 0x10000));
            slots.push(slot(space + 2, 0x100000, 0x1000_0000 - 0x100000));
            slots.push(slot(space + 3, 0xffff0000, 0x10000));
        }
        GuestRead {
            memory_map: GuestMemoryMap {
                source: "ioctl".into(),
                slots,
                ..GuestMemoryMap::default()
            },
            ..GuestRead::default()
        }
    }

    #[test]
    fn qemu_microvm_ranges_are_named_by_what_is_there() {
        let r = npf_regions(&microvm(), VmmKind::Qemu);
        let label = |a: u64| region_label(&r, a, a + (2 << 20));
        assert_eq!(label(0), "ram ([anon])");
        assert_eq!(
            label(0xfea0_0000),
            "ACPI generic event device (MMIO), virtio-mmio (MMIO), MMIO gap"
        );
        assert_eq!(label(0xfec0_0000), "I/O APIC (MMIO), HPET (MMIO), MMIO gap");
        assert_eq!(label(0xfee0_0000), "local APIC (MMIO), MMIO gap");
        assert_eq!(label(0x2000_0000), "MMIO gap");
        // The firmware's slot below 4 GiB, in the gap.
        assert_eq!(label(0xffe0_0000), "ram ([anon]), MMIO gap");
    }

    #[test]
    fn no_slots_no_regions() {
        assert!(npf_regions(&GuestRead::default(), VmmKind::Qemu).is_empty());
    }
}
