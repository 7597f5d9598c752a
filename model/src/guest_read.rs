//! The profile's `guest_read` section: what `bootscope profile` read, read
//! only, out of the traced VMM's guest memory (docs/profile-schema.md):
//! the VM's memory slots, each pass of reading, the guest's boot
//! parameters (command line, e820 map), the kernel's log, its initcalls
//! and modules, and every part that could not be had with the reason.

use serde::{Deserialize, Serialize};

use crate::initcalls::InitcallsDoc;

/// Everything read from the traced VM's memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestRead {
    /// The process whose memory holds the guest (the VMM).
    pub pid: u32,
    /// Guest-physical to VMM-virtual: the VM's memory slots.
    pub memory_map: GuestMemoryMap,
    /// Each time the memory was read, in order.
    pub passes: Vec<ReadPass>,
    /// The kernel's boot parameters (`struct boot_params`) as found in
    /// guest RAM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_params: Option<BootParamsRead>,
    /// The kernel's log (its printk ring buffer), from the last pass that
    /// read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_log: Option<KernelLogRead>,
    /// The initcalls, from the kernel's trace ring buffer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initcalls: Option<InitcallsDoc>,
    /// The loaded modules (they name exit sites in module text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<ModulesRead>,
    /// The parts that could not be had, each with why.
    pub missing: Vec<MissingPart>,
}

/// How guest-physical addresses map to the VMM's virtual addresses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestMemoryMap {
    /// `ioctl`: the VMM's `KVM_SET_USER_MEMORY_REGION(2)` calls, seen by
    /// eBPF; `inferred`: from `/proc/PID/maps` and the guest kernel's own
    /// page tables; `none`: not learned (`detail` says why).
    pub source: String,
    /// How it was learned, or why not.
    pub detail: String,
    pub slots: Vec<MemorySlot>,
}

/// One memory slot of the VM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemorySlot {
    /// KVM's slot number (address space in the upper 16 bits); inferred
    /// slots are numbered in address order.
    pub slot: u32,
    /// `KVM_MEM_LOG_DIRTY_PAGES` 1, `KVM_MEM_READONLY` 2,
    /// `KVM_MEM_GUEST_MEMFD` 4.
    pub flags: u32,
    /// First guest-physical address.
    pub gpa: u64,
    pub size: u64,
    /// The VMM's virtual address of `gpa`.
    pub hva: u64,
    /// `ram`, `rom` (read-only to the guest: firmware, option ROMs) or
    /// `device` (memory a device backs: a file or device mapping not in
    /// the VMM's anonymous or shared RAM).
    pub kind: String,
    /// The VMM's mapping there (`/proc/PID/maps` path or `[anon]`).
    pub backing: String,
}

impl MemorySlot {
    /// The VMM address of `gpa`, when this slot holds `len` bytes there.
    pub fn hva_of(&self, gpa: u64, len: u64) -> Option<u64> {
        let off = gpa.checked_sub(self.gpa)?;
        (off.checked_add(len)? <= self.size).then(|| self.hva + off)
    }
}

/// One reading of guest memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadPass {
    /// `userspace` (the guest reached userspace, read while it ran),
    /// `shutdown` (the guest ended it, read with the VMM held) or `end`
    /// (profiling stopped with the VMM still running).
    pub at: String,
    /// When the pass started (ns since profiling start).
    pub t_ns: u64,
    /// How long the VMM was held stopped (SIGSTOP to SIGCONT), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_ns: Option<u64>,
    /// What made the kernel hold it (the guest's reset or power-off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_at: Option<String>,
    /// How long the reading took.
    pub read_ns: u64,
    /// Bytes of guest memory read.
    pub bytes_read: u64,
    /// Reads refused or out of the slots.
    pub failed_reads: u64,
    /// Why the pass read nothing useful, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The kernel's `struct boot_params` found in guest RAM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BootParamsRead {
    /// Where it was found (guest-physical).
    pub gpa: u64,
    /// The kernel's command line (`cmd_line_ptr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// The firmware's or VMM's memory map as the kernel got it.
    pub e820: Vec<E820Entry>,
}

/// One e820 entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct E820Entry {
    pub addr: u64,
    pub size: u64,
    /// The e820 type number (1 RAM, 2 reserved, 3 ACPI, 4 NVS, ...).
    pub kind: u32,
    /// Its name (`RAM`, `reserved`, `ACPI data`, `ACPI NVS`, `unusable`,
    /// `persistent`, or `type N`).
    pub name: String,
}

/// The e820 type name.
pub fn e820_name(kind: u32) -> String {
    match kind {
        1 => "RAM".into(),
        2 => "reserved".into(),
        3 => "ACPI data".into(),
        4 => "ACPI NVS".into(),
        5 => "unusable".into(),
        7 | 12 => "persistent".into(),
        n => format!("type {n}"),
    }
}

/// The guest kernel's log read from memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelLogRead {
    /// The kernel's release (VMCOREINFO's `OSRELEASE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os_release: Option<String>,
    /// Which pass it is from (`userspace`, `shutdown`, `end`).
    pub at: String,
    /// The sequence number of the oldest record still in the ring (the
    /// ones before were overwritten).
    pub first_seq: u64,
    pub records: Vec<KernelLogLine>,
}

/// One record of the kernel's log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelLogLine {
    /// The guest's clock (printk's `ts_nsec`).
    pub ts_ns: u64,
    pub text: String,
}

impl KernelLogLine {
    /// Its time on the profile's clock under `clock` (None: before the
    /// profile's start, which a record cannot be unless `clock` is wrong).
    pub fn profile_ns(&self, clock: &crate::initcalls::ClockAlignment) -> Option<u64> {
        u64::try_from(i128::from(self.ts_ns) + i128::from(clock.offset_ns)).ok()
    }
}

/// The kernel's loaded modules, as read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModulesRead {
    /// Each module's text (its symbols are not serialized).
    pub modules: Vec<crate::modules::GuestModule>,
    /// What was left out (an unreadable module, a list cut short).
    pub warnings: Vec<String>,
}

/// A part of the section that could not be had.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MissingPart {
    /// `memory_map`, `boot_params`, `kernel_log`, `initcalls`, `modules`,
    /// `shutdown`, ...
    pub part: String,
    pub why: String,
}

impl GuestRead {
    /// Names `part` as missing with `why` (once per part).
    pub fn missing(&mut self, part: &str, why: impl Into<String>) {
        if self.missing.iter().all(|m| m.part != part) {
            self.missing.push(MissingPart {
                part: part.into(),
                why: why.into(),
            });
        }
    }

    /// Forgets that `part` was missing (a later pass had it).
    pub fn found(&mut self, part: &str) {
        self.missing.retain(|m| m.part != part);
    }

    /// How the guest's clock (its log's `ts_ns`) maps onto the profile's:
    /// the console lines anchored it (`profile --initcalls`, which
    /// follows them to place the initcalls). None: the log stays on the
    /// guest's clock alone.
    pub fn log_clock(&self) -> Option<&crate::initcalls::ClockAlignment> {
        self.initcalls.as_ref()?.clock.as_ref()
    }

    /// The slot holding guest-physical `gpa`.
    pub fn slot_at(&self, gpa: u64) -> Option<&MemorySlot> {
        self.memory_map
            .slots
            .iter()
            .find(|s| s.hva_of(gpa, 1).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_translate_only_inside_themselves_and_parts_are_named_once() {
        let s = MemorySlot {
            gpa: 0x10_0000,
            size: 0x1000,
            hva: 0x7f00_0000_0000,
            ..MemorySlot::default()
        };
        assert_eq!(s.hva_of(0x10_0010, 16), Some(0x7f00_0000_0010));
        assert_eq!(s.hva_of(0x10_0ff0, 16), Some(0x7f00_0000_0ff0));
        assert_eq!(s.hva_of(0x10_0ff1, 16), None);
        assert_eq!(s.hva_of(0xf_ffff, 1), None);
        assert_eq!(s.hva_of(0x10_0000, u64::MAX), None);
        let mut g = GuestRead::default();
        g.memory_map.slots.push(s);
        assert!(g.slot_at(0x10_0800).is_some());
        assert!(g.slot_at(0x10_1000).is_none());
        g.missing("kernel_log", "no VMCOREINFO");
        g.missing("kernel_log", "again");
        assert_eq!(g.missing.len(), 1);
        assert_eq!(g.missing[0].why, "no VMCOREINFO");
        g.found("kernel_log");
        assert!(g.missing.is_empty());
        assert_eq!(e820_name(1), "RAM");
        assert_eq!(e820_name(20), "type 20");
        assert!(g.log_clock().is_none());
        g.initcalls = Some(InitcallsDoc {
            clock: Some(crate::initcalls::ClockAlignment {
                offset_ns: -2_000,
                ..Default::default()
            }),
            ..Default::default()
        });
        let clock = g.log_clock().unwrap().clone();
        let line = |ts_ns| KernelLogLine {
            ts_ns,
            text: String::new(),
        };
        assert_eq!(line(5_000).profile_ns(&clock), Some(3_000));
        assert_eq!(line(1_000).profile_ns(&clock), None);
        g.initcalls = None;
        let v = serde_json::to_value(&g).unwrap();
        assert!(v.get("kernel_log").is_none());
        let back: GuestRead = serde_json::from_value(v).unwrap();
        assert_eq!(back, g);
    }
}
