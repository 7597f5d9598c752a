//! Where a boot mark came from, and the names of the marks the guest's port
//! writes make. The VMM's timeline and the profiler's profile name them
//! alike, so a profile and a timeline of one boot line up.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who produced a mark. Serialized (and [`MarkSource::as_str`]) as `vmm`,
/// `debug_port`, `boot_timer`, `boot_time_port`, `serial` or `guest_clock`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkSource {
    /// The VMM itself.
    #[default]
    Vmm,
    /// A guest write to I/O port 0x80.
    DebugPort,
    /// A guest write of 123 to the boot-timer MMIO address.
    BootTimer,
    /// A guest write to I/O port 0xf4 (qemu-boot-time).
    BootTimePort,
    /// A console line that matched a milestone pattern.
    Serial,
    /// A guest event timed by the guest's own clock and aligned to the
    /// VMM's (systemd's start and start-up end, from its units' record).
    GuestClock,
}

impl MarkSource {
    /// The name in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkSource::Vmm => "vmm",
            MarkSource::DebugPort => "debug_port",
            MarkSource::BootTimer => "boot_timer",
            MarkSource::BootTimePort => "boot_time_port",
            MarkSource::Serial => "serial",
            MarkSource::GuestClock => "guest_clock",
        }
    }

    /// A guest's write to a marker port (0x80 or 0xf4): the marks a guest
    /// can make without end, so the profiler bounds how many it keeps.
    pub fn is_port(self) -> bool {
        matches!(self, MarkSource::DebugPort | MarkSource::BootTimePort)
    }
}

impl fmt::Display for MarkSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The boot stage a debug-port (0x80) value stands for, after Cloud
/// Hypervisor's ranges: `firmware`, `bootloader`, `kernel`, `userspace`,
/// or `custom` (0x80-0xff).
pub fn debug_port_range(value: u8) -> &'static str {
    match value {
        0x00..=0x1f => "firmware",
        0x20..=0x3f => "bootloader",
        0x40..=0x5f => "kernel",
        0x60..=0x7f => "userspace",
        _ => "custom",
    }
}

/// Name of the mark for a debug-port (0x80) value: `port 0x80: kernel 0x40`.
pub fn debug_port_mark_name(value: u8) -> String {
    format!("port 0x80: {} 0x{value:02x}", debug_port_range(value))
}

/// Name of the mark for a qemu-boot-time port 0xf4 value:
/// `port 0xf4: linux_start_kernel (6)`.
pub fn boot_time_port_mark_name(value: u8) -> String {
    let what = match value {
        1 => "fw_start",
        2 => "fw_end",
        3 => "bootloader_start",
        4 => "bootloader_end",
        5 => "linux_start_boot",
        6 => "linux_start_kernel",
        7 => "linux_start_user",
        _ => "unknown",
    };
    format!("port 0xf4: {what} ({value})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mark_names() {
        assert_eq!(debug_port_mark_name(0x05), "port 0x80: firmware 0x05");
        assert_eq!(debug_port_mark_name(0x40), "port 0x80: kernel 0x40");
        assert_eq!(debug_port_mark_name(0x41), "port 0x80: kernel 0x41");
        assert_eq!(debug_port_mark_name(0x7f), "port 0x80: userspace 0x7f");
        assert_eq!(debug_port_mark_name(0x80), "port 0x80: custom 0x80");
        assert_eq!(debug_port_mark_name(0x90), "port 0x80: custom 0x90");
        assert_eq!(
            boot_time_port_mark_name(6),
            "port 0xf4: linux_start_kernel (6)"
        );
        assert_eq!(boot_time_port_mark_name(9), "port 0xf4: unknown (9)");
    }

    #[test]
    fn sources_are_named_as_in_documents() {
        for s in [
            MarkSource::Vmm,
            MarkSource::DebugPort,
            MarkSource::BootTimer,
            MarkSource::BootTimePort,
            MarkSource::Serial,
        ] {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<MarkSource>(&json).unwrap(), s);
        }
    }
}
