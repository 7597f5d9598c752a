//! log2 histograms: the slot math the BPF side uses (bpf/common.bpf.h
//! `bs_hist_slot`), mirrored here so the buckets can be labelled and tested.

use crate::profile::HistBucket;

/// Slots per histogram (`BS_HIST_SLOTS`).
pub const HIST_SLOTS: usize = 32;

/// floor(log2(v)), and 0 for 0: `bs_log2`.
pub fn log2(v: u64) -> u32 {
    if v == 0 {
        0
    } else {
        63 - v.leading_zeros()
    }
}

/// The slot a value lands in: log2, clamped to the last slot.
pub fn slot(ns: u64) -> usize {
    (log2(ns) as usize).min(HIST_SLOTS - 1)
}

/// `[lo, hi)` of a slot: slot 0 holds 0 and 1, slot i holds `[2^i,
/// 2^(i+1))`, the last slot everything from `2^(HIST_SLOTS-1)` up.
pub fn bounds(slot: usize) -> (u64, u64) {
    let lo = if slot == 0 { 0 } else { 1u64 << slot };
    let hi = if slot + 1 >= HIST_SLOTS {
        u64::MAX
    } else {
        1u64 << (slot + 1)
    };
    (lo, hi)
}

/// The non-empty buckets of a slot array.
pub fn buckets(slots: &[u64]) -> Vec<HistBucket> {
    slots
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &count)| {
            let (lo_ns, hi_ns) = bounds(i);
            HistBucket {
                lo_ns,
                hi_ns,
                count,
            }
        })
        .collect()
}

/// Adds one slot array into another of the same length.
pub fn add_slots(into: &mut [u64], from: &[u64]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a = a.saturating_add(*b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free log2 of bits.bpf.h, transcribed, to check that the
    /// Rust mirror agrees with what runs in the kernel.
    fn bpf_log2(mut v: u64) -> u32 {
        let mut r = u32::from(v > 0xFFFF_FFFF) << 5;
        v >>= r;
        let mut shift = u32::from(v > 0xFFFF) << 4;
        v >>= shift;
        r |= shift;
        shift = u32::from(v > 0xFF) << 3;
        v >>= shift;
        r |= shift;
        shift = u32::from(v > 0xF) << 2;
        v >>= shift;
        r |= shift;
        shift = u32::from(v > 0x3) << 1;
        v >>= shift;
        r |= shift;
        r | (v >> 1) as u32
    }

    #[test]
    fn log2_matches_the_bpf_version() {
        let mut values = vec![0u64, 1, 2, 3, 4, 5, 7, 8, 1023, 1024, 1025, u64::MAX];
        for i in 0..64 {
            values.extend([1u64 << i, (1u64 << i).wrapping_sub(1), (1u64 << i) + 1]);
        }
        for v in values {
            assert_eq!(log2(v), bpf_log2(v), "log2({v})");
        }
    }

    #[test]
    fn slots_clamp_and_bound() {
        assert_eq!(slot(0), 0);
        assert_eq!(slot(1), 0);
        assert_eq!(slot(2), 1);
        assert_eq!(slot(3), 1);
        assert_eq!(slot(1000), 9);
        assert_eq!(slot(1 << 31), 31);
        assert_eq!(slot(u64::MAX), 31);
        for v in [0u64, 1, 2, 3, 999, 1 << 20, (1 << 31) - 1, 1 << 31, 1 << 40] {
            let (lo, hi) = bounds(slot(v));
            assert!(lo <= v && v < hi, "{v} not in [{lo}, {hi})");
        }
        assert_eq!(bounds(0), (0, 2));
        assert_eq!(bounds(10), (1024, 2048));
        assert_eq!(bounds(31), (1 << 31, u64::MAX));
    }

    #[test]
    fn buckets_skip_empty_slots() {
        let mut s = [0u64; HIST_SLOTS];
        s[0] = 2;
        s[10] = 5;
        let b = buckets(&s);
        assert_eq!(b.len(), 2);
        assert_eq!((b[1].lo_ns, b[1].hi_ns, b[1].count), (1024, 2048, 5));
        let mut t = [1u64; HIST_SLOTS];
        add_slots(&mut t, &s);
        assert_eq!(t[10], 6);
    }
}
