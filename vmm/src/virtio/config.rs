//! Which virtio devices a guest gets ([`VirtioConfig`]), and the one order
//! they take: each device's slot ([`VirtioSlot`]) gives its register
//! window and interrupt line, its name on the timeline and the option that
//! asked for it. The check stage counts them, the devices stage builds them
//! slot by slot and the ACPI tables describe the same windows.

use super::block::DiskSpec;
use super::bus::MmioWindow;

/// The virtio devices of a run, in slot order: the disks, the rng, the
/// console.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VirtioConfig {
    /// virtio-blk disks (`--disk`), in order (the guest's `vda`, `vdb`,
    /// ...).
    pub disks: Vec<DiskSpec>,
    /// A virtio-rng device (`--rng`).
    pub rng: bool,
    /// A virtio console writing into the console sink (`--console
    /// virtio`).
    pub console: bool,
}

/// One virtio device's place on the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtioSlot {
    /// The `n`th disk.
    Disk(usize),
    Rng,
    Console,
}

impl VirtioSlot {
    /// As the timeline and the guest's regions name the device
    /// (`virtio-blk0`, `virtio-rng`, `virtio-console`).
    pub fn name(self) -> String {
        match self {
            VirtioSlot::Disk(n) => format!("virtio-blk{n}"),
            VirtioSlot::Rng => "virtio-rng".into(),
            VirtioSlot::Console => "virtio-console".into(),
        }
    }

    /// The `run` option that asks for the device.
    pub fn option(self) -> &'static str {
        match self {
            VirtioSlot::Disk(_) => "--disk",
            VirtioSlot::Rng => "--rng",
            VirtioSlot::Console => "--console virtio",
        }
    }
}

impl VirtioConfig {
    /// The devices in slot order: disks, then the rng, then the console.
    pub fn slots(&self) -> Vec<VirtioSlot> {
        let mut v: Vec<VirtioSlot> = (0..self.disks.len()).map(VirtioSlot::Disk).collect();
        if self.rng {
            v.push(VirtioSlot::Rng);
        }
        if self.console {
            v.push(VirtioSlot::Console);
        }
        v
    }

    /// How many devices the guest gets.
    pub fn count(&self) -> usize {
        self.disks.len() + usize::from(self.rng) + usize::from(self.console)
    }

    /// Each device's register window and interrupt line, in slot order.
    pub fn windows(&self) -> Vec<MmioWindow> {
        (0..self.count()).map(MmioWindow::of_slot).collect()
    }

    /// The options that asked for the devices, each once
    /// (`--disk, --rng`), for a message.
    pub fn options(&self) -> String {
        let mut what: Vec<&str> = self.slots().into_iter().map(VirtioSlot::option).collect();
        what.dedup();
        what.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(path: &str) -> DiskSpec {
        DiskSpec {
            path: path.into(),
            readonly: false,
        }
    }

    #[test]
    fn slots_windows_and_names_follow_one_order() {
        let c = VirtioConfig {
            disks: vec![disk("a"), disk("b")],
            rng: true,
            console: true,
        };
        let slots = c.slots();
        assert_eq!(
            slots,
            [
                VirtioSlot::Disk(0),
                VirtioSlot::Disk(1),
                VirtioSlot::Rng,
                VirtioSlot::Console
            ]
        );
        assert_eq!(c.count(), slots.len());
        let names: Vec<String> = slots.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            ["virtio-blk0", "virtio-blk1", "virtio-rng", "virtio-console"]
        );
        let w = c.windows();
        assert_eq!(w.len(), 4);
        assert_eq!((w[0].base, w[0].irq), (crate::layout::VIRTIO_MMIO_START, 5));
        assert_eq!(w[3].base, w[0].base + 3 * crate::layout::VIRTIO_MMIO_SIZE);
        assert_eq!(w[3].irq, 8);
        assert_eq!(c.options(), "--disk, --rng, --console virtio");
    }

    #[test]
    fn no_devices_no_slots() {
        let c = VirtioConfig::default();
        assert!(c.slots().is_empty() && c.windows().is_empty());
        assert_eq!((c.count(), c.options().as_str()), (0, ""));
    }
}
