//! The PCI configuration mechanism's state in a snapshot: the address
//! register the guest last wrote.

use super::PciConfig;

impl PciConfig {
    pub fn save_state(&self) -> u32 {
        self.address
    }

    pub fn restore_state(&mut self, address: u32) {
        self.address = address;
    }
}
