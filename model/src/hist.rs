//! The log2 histogram every document carries (the profile's exit
//! latencies and run-queue waits, the timeline's disk latencies): slot `i`
//! counts values in `[2^i, 2^(i+1))`, slot 0 also counts 0, the last slot
//! everything from `2^(HIST_SLOTS-1)` up. The slot math is the one the BPF
//! side uses (bpf/common.bpf.h `bs_hist_slot`), so the profiler's slots
//! and the VMM's fill the same buckets. In a document a bucket is
//! `{lo_ns, hi_ns, count}` ([`HistBucket`]).

use serde::{Deserialize, Deserializer, Serialize};

/// Slots per histogram (`BS_HIST_SLOTS`).
pub const HIST_SLOTS: usize = 32;

/// A log2 histogram bucket: `count` values in `[lo_ns, hi_ns)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistBucket {
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

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
/// 2^(i+1))`, the last slot everything from `2^(HIST_SLOTS-1)` up
/// (`hi` = `u64::MAX`).
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

/// A log2 histogram of nanoseconds being filled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log2Hist {
    slots: [u64; HIST_SLOTS],
}

impl Log2Hist {
    /// Counts one value.
    pub fn add(&mut self, ns: u64) {
        let s = &mut self.slots[slot(ns)];
        *s = s.saturating_add(1);
    }

    /// The slots, as the BPF side keeps them.
    pub fn slots(&self) -> &[u64; HIST_SLOTS] {
        &self.slots
    }

    /// The buckets that counted anything.
    pub fn buckets(&self) -> Vec<HistBucket> {
        buckets(&self.slots)
    }
}

/// Reads a list of buckets in the document's shape, or in the shape
/// version 2 timelines wrote for `disk.latency` (`{le_ns, count}`: values
/// below `le_ns` and at least half of it; `le_ns` 1 counted zeros), so old
/// documents still read.
pub fn deserialize_buckets<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<HistBucket>, D::Error> {
    #[derive(Deserialize)]
    struct Either {
        lo_ns: Option<u64>,
        hi_ns: Option<u64>,
        le_ns: Option<u64>,
        count: u64,
    }
    let raw: Vec<Either> = Vec::deserialize(d)?;
    raw.into_iter()
        .map(|b| match (b.lo_ns, b.hi_ns, b.le_ns) {
            (Some(lo_ns), Some(hi_ns), _) => Ok(HistBucket {
                lo_ns,
                hi_ns,
                count: b.count,
            }),
            (None, None, Some(le)) => {
                let lo_ns = match le {
                    0 | 1 => 0,
                    u64::MAX => 1 << 62,
                    le => le / 2,
                };
                Ok(HistBucket {
                    lo_ns,
                    hi_ns: le,
                    count: b.count,
                })
            }
            _ => Err(serde::de::Error::custom(
                "a histogram bucket needs lo_ns and hi_ns (or le_ns)",
            )),
        })
        .collect()
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

    #[test]
    fn a_histogram_fills_the_slots_the_bpf_side_does() {
        let mut h = Log2Hist::default();
        for ns in [0, 1, 2, 3, 4, 1000, 1023, 1024, u64::MAX] {
            h.add(ns);
        }
        let b = h.buckets();
        let count = |lo: u64| b.iter().find(|x| x.lo_ns == lo).map_or(0, |x| x.count);
        assert_eq!(count(0), 2, "0 and 1");
        assert_eq!(count(2), 2, "2 and 3");
        assert_eq!(count(4), 1, "4");
        assert_eq!(count(512), 2, "1000 and 1023");
        assert_eq!(count(1024), 1, "1024");
        assert_eq!(count(1 << 31), 1, "the open last bucket");
        assert_eq!(b.iter().map(|x| x.count).sum::<u64>(), 9);
        assert_eq!(h.slots()[9], 2);
    }

    #[test]
    fn both_bucket_shapes_read() {
        #[derive(Deserialize)]
        struct Doc {
            #[serde(deserialize_with = "deserialize_buckets")]
            h: Vec<HistBucket>,
        }
        let new: Doc =
            serde_json::from_str(r#"{"h":[{"lo_ns":1024,"hi_ns":2048,"count":3}]}"#).unwrap();
        assert_eq!(
            new.h,
            [HistBucket {
                lo_ns: 1024,
                hi_ns: 2048,
                count: 3
            }]
        );
        let old: Doc = serde_json::from_str(
            r#"{"h":[{"le_ns":1,"count":1},{"le_ns":4,"count":2},{"le_ns":18446744073709551615,"count":1}]}"#,
        )
        .unwrap();
        assert_eq!(
            old.h,
            [
                HistBucket {
                    lo_ns: 0,
                    hi_ns: 1,
                    count: 1
                },
                HistBucket {
                    lo_ns: 2,
                    hi_ns: 4,
                    count: 2
                },
                HistBucket {
                    lo_ns: 1 << 62,
                    hi_ns: u64::MAX,
                    count: 1
                },
            ]
        );
        assert!(serde_json::from_str::<Doc>(r#"{"h":[{"count":1}]}"#).is_err());
    }
}
