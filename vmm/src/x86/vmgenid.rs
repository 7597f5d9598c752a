//! The DSDT's VM generation ID device and the generic event device that
//! notifies it, as QEMU and Firecracker describe theirs (Microsoft's
//! "Virtual Machine Generation ID" paper; Linux's `drivers/virt/vmgenid.c`):
//!
//! - `Device (VGEN)`: `_HID` `VMGENCTR`, `_CID` `VM_GEN_COUNTER` (the two
//!   ids Linux's driver matches), and `ADDR`, a package of the ID's
//!   guest-physical address (low, high 32 bits) at
//!   [`layout::VMGENID_START`]: 16 bytes the VMM writes;
//! - `Device (GED_)`: `_HID` `ACPI0013`, the hardware-reduced generic event
//!   device, with the edge-triggered interrupt [`layout::GED_IRQ`]; its
//!   `_EVT` method does `Notify (VGEN, 0x80)`, on which the guest reads the
//!   ID again and, when it changed, reseeds its random number generator
//!   (Linux's `add_vmfork_randomness`).

use acpi_tables::{aml, Aml};

use crate::layout;

/// The `_HID` of the VM generation ID device.
pub const VMGENID_HID: &str = "VMGENCTR";
/// Its `_CID`.
pub const VMGENID_CID: &str = "VM_GEN_COUNTER";
/// The generic event device's `_HID`.
pub const GED_HID: &str = "ACPI0013";
/// The notification that says "the generation ID changed".
pub const NOTIFY_CHANGED: u8 = 0x80;

/// `Device (VGEN)` and `Device (GED_)`, encoded, for the DSDT's `\_SB`.
pub fn devices() -> Vec<u8> {
    let hid: aml::AmlStr = VMGENID_HID;
    let cid: aml::AmlStr = VMGENID_CID;
    let low = (layout::VMGENID_START & 0xffff_ffff) as u32;
    let high = (layout::VMGENID_START >> 32) as u32;
    let addr = aml::Package::new(vec![&low, &high]);
    let vgen_names = [
        aml::Name::new("_HID".into(), &hid),
        aml::Name::new("_CID".into(), &cid),
        aml::Name::new("ADDR".into(), &addr),
    ];
    let vgen = aml::Device::new(
        "VGEN".into(),
        vgen_names.iter().map(|n| n as &dyn Aml).collect(),
    );
    let ged_hid: aml::AmlStr = GED_HID;
    let irq = aml::Interrupt::new(true, true, false, false, layout::GED_IRQ);
    let crs = aml::ResourceTemplate::new(vec![&irq]);
    let vgen_path = aml::Path::new("VGEN");
    let notify = aml::Notify::new(&vgen_path, &NOTIFY_CHANGED);
    let evt = aml::Method::new("_EVT".into(), 1, true, vec![&notify]);
    let ged_hid_name = aml::Name::new("_HID".into(), &ged_hid);
    let ged_uid = aml::Name::new("_UID".into(), &aml::ZERO);
    let ged_crs = aml::Name::new("_CRS".into(), &crs);
    let ged = aml::Device::new("GED_".into(), vec![&ged_hid_name, &ged_uid, &ged_crs, &evt]);
    let mut out = Vec::new();
    vgen.to_aml_bytes(&mut out);
    ged.to_aml_bytes(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    #[test]
    fn vgen_points_at_the_id_and_the_ged_notifies_it() {
        let b = devices();
        assert!(find(&b, b"VGEN").is_some());
        assert!(find(&b, b"_HID\x0dVMGENCTR\0").is_some());
        assert!(find(&b, b"_CID\x0dVM_GEN_COUNTER\0").is_some());
        // ADDR: Package (2) { DWordConst 0x000ff000, Zero }.
        let at = find(&b, b"ADDR").expect("ADDR");
        let pkg = &b[at + 4..at + 16];
        assert_eq!(pkg[0], 0x12, "a package");
        let low = (layout::VMGENID_START as u32).to_le_bytes();
        assert!(find(pkg, &low).is_some(), "{pkg:x?}");
        assert!(find(&b, b"_HID\x0dACPI0013\0").is_some());
        // Notify (VGEN, 0x80): NotifyOp 0x86, the name, BytePrefix 0x80.
        assert!(find(&b, b"\x86VGEN\x0a\x80").is_some(), "{b:x?}");
        // The interrupt descriptor names GED_IRQ.
        assert!(find(&b, &[0x89, 0x06, 0x00]).is_some());
        assert!(find(&b, &layout::GED_IRQ.to_le_bytes()).is_some());
    }
}
