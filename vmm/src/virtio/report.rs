//! What each virtio device did during a run: the timeline's `devices`
//! (docs/timeline-schema.md).

pub use bootscope_model::devices::{DiskDoc, IoCounts, PhaseIo, VirtioDeviceDoc};
pub use bootscope_model::hist::Log2Hist;

/// Adds each device's register window to the guest's regions (named
/// `virtio-blk0 (MMIO)`, ...), so exits and faults there are named by
/// device.
pub fn add_regions(regions: &mut Vec<crate::layout::GuestRegion>, devices: &[VirtioDeviceDoc]) {
    for d in devices {
        regions.push(crate::layout::GuestRegion {
            name: format!("{} (MMIO)", d.name),
            start: d.mmio_start,
            end: d.mmio_end,
        });
    }
    regions.sort_by_key(|g| (g.start, std::cmp::Reverse(g.end)));
}
