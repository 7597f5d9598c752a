//! What each virtio device did during a run: the timeline's `devices`
//! (docs/timeline-schema.md).

pub use bootscope_model::devices::{DiskDoc, IoCounts, LatencyBucket, PhaseIo, VirtioDeviceDoc};

/// A log2 histogram of nanoseconds: bucket `k` counts values below
/// `2^k` (and at least `2^(k-1)`).
#[derive(Clone, Debug)]
pub struct Log2Hist {
    counts: [u64; 64],
}

impl Default for Log2Hist {
    fn default() -> Self {
        Self { counts: [0; 64] }
    }
}

impl Log2Hist {
    pub fn add(&mut self, ns: u64) {
        let k = (64 - ns.leading_zeros()) as usize;
        self.counts[k.min(63)] += 1;
    }

    /// The buckets that counted anything.
    pub fn buckets(&self) -> Vec<LatencyBucket> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(k, &count)| LatencyBucket {
                le_ns: if k >= 63 { u64::MAX } else { 1u64 << k },
                count,
            })
            .collect()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets() {
        let mut h = Log2Hist::default();
        for ns in [0, 1, 2, 3, 4, 1000, 1023, 1024] {
            h.add(ns);
        }
        let b = h.buckets();
        let count = |le: u64| b.iter().find(|x| x.le_ns == le).map_or(0, |x| x.count);
        assert_eq!(count(1), 1, "0");
        assert_eq!(count(2), 1, "1");
        assert_eq!(count(4), 2, "2 and 3");
        assert_eq!(count(8), 1, "4");
        assert_eq!(count(1024), 2, "1000 and 1023");
        assert_eq!(count(2048), 1, "1024");
        assert_eq!(b.iter().map(|x| x.count).sum::<u64>(), 8);
    }
}
