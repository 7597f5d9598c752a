//! PCI configuration mechanism #1 (ports 0xcf8-0xcff) with a host bridge
//! alone on bus 0 and nothing behind it.
//!
//! Why a VMM without PCI devices answers here at all: a Linux guest that
//! finds no configuration mechanism prints "PCI: Fatal: No config space
//! access function found" at error level, so even a `quiet` boot writes it
//! to the serial console, one port exit per character and another for the
//! line status before it (about a hundred exits). A latching address
//! register and a host bridge at 00:00.0 make the kernel's type 1 check
//! succeed at its first look (the bridge's class code ends its sanity
//! check) and print nothing. The ACPI tables name no PCI root bridge, so the
//! kernel scans no bus: the guest sees a PCI machine with an empty bus.
//!
//! The bridge is read-only: writes to its configuration space are ignored,
//! and every other device and bus reads as absent (all ones).

/// Configuration address register (32-bit).
mod persist;

pub const CONFIG_ADDRESS_PORT: u16 = 0xcf8;
/// Configuration data window (0xcfc-0xcff).
pub const CONFIG_DATA_PORT: u16 = 0xcfc;
/// The address register's enable bit.
const ENABLE: u32 = 1 << 31;
/// The bits of the address register that latch (enable, bus, device,
/// function, dword-aligned register).
const ADDRESS_MASK: u32 = 0x80ff_fffc;
/// The host bridge's vendor and device: Red Hat's generic host bridge of
/// virtual machines (1b36:0008), which no early quirk of Linux matches.
const VENDOR_ID: u16 = 0x1b36;
const DEVICE_ID: u16 = 0x0008;
/// Class code: bridge (06), host bridge (00), no programming interface.
const CLASS_HOST_BRIDGE: u32 = 0x06_0000;

/// Whether `port` belongs to the configuration mechanism.
pub fn owns(port: u16) -> bool {
    (CONFIG_ADDRESS_PORT..CONFIG_DATA_PORT + 4).contains(&port)
}

/// The configuration address register and the host bridge behind it.
#[derive(Debug, Default)]
pub struct PciConfig {
    address: u32,
}

impl PciConfig {
    /// Port read of `data.len()` bytes at `port` (one of [`owns`]'s).
    pub fn read(&self, port: u16, data: &mut [u8]) {
        data.fill(0xff);
        if port == CONFIG_ADDRESS_PORT && data.len() == 4 {
            data.copy_from_slice(&self.address.to_le_bytes());
            return;
        }
        let Some(offset) = port.checked_sub(CONFIG_DATA_PORT) else {
            // Byte and word reads of the address register see nothing
            // latched (so the guest finds no configuration mechanism #2).
            return;
        };
        if self.address & ENABLE == 0 {
            return;
        }
        let dword = host_bridge_dword(self.address & !ENABLE);
        let bytes = dword.to_le_bytes();
        let start = usize::from(offset);
        let end = (start + data.len()).min(4);
        data[..end - start].copy_from_slice(&bytes[start..end]);
    }

    /// Port write at `port` (one of [`owns`]'s): only a 32-bit write of the
    /// address register does anything.
    pub fn write(&mut self, port: u16, data: &[u8]) {
        if port == CONFIG_ADDRESS_PORT {
            if let Ok(word) = <[u8; 4]>::try_from(data) {
                self.address = u32::from_le_bytes(word) & ADDRESS_MASK;
            }
        }
    }
}

/// The configuration dword at `address` (bus, device, function and register
/// as the address register holds them, without the enable bit): the host
/// bridge's at 00:00.0, all ones elsewhere.
fn host_bridge_dword(address: u32) -> u32 {
    let bus_dev_fn = address >> 8;
    if bus_dev_fn != 0 {
        return u32::MAX;
    }
    match address & 0xfc {
        // Vendor and device.
        0x00 => u32::from(DEVICE_ID) << 16 | u32::from(VENDOR_ID),
        // Class code (bits 31-8) and revision 0.
        0x08 => CLASS_HOST_BRIDGE << 8,
        // Command, status, cache line, latency, header type 0 (one
        // function), BIST, BARs, capabilities, interrupt: all zero.
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(c: &PciConfig, port: u16, len: usize) -> u32 {
        let mut d = vec![0u8; len];
        c.read(port, &mut d);
        d.iter().rev().fold(0, |acc, b| acc << 8 | u32::from(*b))
    }

    #[test]
    fn address_register_latches_like_linux_type1_check_expects() {
        let mut c = PciConfig::default();
        // pci_check_type1: write 0x80000000, read it back.
        c.write(CONFIG_ADDRESS_PORT, &0x8000_0000u32.to_le_bytes());
        assert_eq!(read(&c, CONFIG_ADDRESS_PORT, 4), 0x8000_0000);
        // Reserved low bits do not latch.
        c.write(CONFIG_ADDRESS_PORT, &0x8000_0003u32.to_le_bytes());
        assert_eq!(read(&c, CONFIG_ADDRESS_PORT, 4), 0x8000_0000);
        // pci_check_type2: byte writes, then byte reads must not read 0.
        c.write(0xcfb, &[0]);
        c.write(CONFIG_ADDRESS_PORT, &[0]);
        assert_eq!(read(&c, CONFIG_ADDRESS_PORT, 1), 0xff);
        assert_eq!(read(&c, 0xcfa, 1), 0xff);
    }

    #[test]
    fn host_bridge_alone_on_bus_zero() {
        let mut c = PciConfig::default();
        let at = |c: &mut PciConfig, bus: u32, dev: u32, func: u32, reg: u32| {
            let a = ENABLE | bus << 16 | dev << 11 | func << 8 | reg;
            c.write(CONFIG_ADDRESS_PORT, &a.to_le_bytes());
        };
        at(&mut c, 0, 0, 0, 0);
        assert_eq!(read(&c, CONFIG_DATA_PORT, 4), 0x0008_1b36);
        assert_eq!(read(&c, CONFIG_DATA_PORT, 2), 0x1b36);
        assert_eq!(read(&c, CONFIG_DATA_PORT + 2, 2), 0x0008);
        at(&mut c, 0, 0, 0, 0x08);
        // PCI_CLASS_DEVICE (0x0a, word): host bridge.
        assert_eq!(read(&c, CONFIG_DATA_PORT + 2, 2), 0x0600);
        at(&mut c, 0, 0, 0, 0x0c);
        assert_eq!(read(&c, CONFIG_DATA_PORT + 2, 1), 0, "header type 0");
        // Writes to the data window are ignored.
        c.write(CONFIG_DATA_PORT, &[0xff, 0xff, 0xff, 0xff]);
        at(&mut c, 0, 0, 0, 0x04);
        assert_eq!(read(&c, CONFIG_DATA_PORT, 4), 0);
        for (bus, dev, func) in [(0, 1, 0), (0, 0, 1), (0, 31, 7), (1, 0, 0), (255, 0, 0)] {
            at(&mut c, bus, dev, func, 0);
            assert_eq!(
                read(&c, CONFIG_DATA_PORT, 4),
                u32::MAX,
                "{bus}:{dev}.{func}"
            );
        }
        // Without the enable bit nothing answers.
        c.write(CONFIG_ADDRESS_PORT, &0u32.to_le_bytes());
        assert_eq!(read(&c, CONFIG_DATA_PORT, 4), u32::MAX);
    }

    #[test]
    fn owns_only_its_eight_ports() {
        assert!(owns(0xcf8) && owns(0xcff));
        assert!(!owns(0xcf7) && !owns(0xd00));
    }
}
