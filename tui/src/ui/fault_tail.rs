//! A restore's fault tail in the page faults pane: the guest half shows
//! the fault-rate curve of the window (per millisecond bucket) instead of
//! the sampled rate, live and in replay (up to the time shown).

use bootscope_model::fault_tail::FaultTail;

use super::format::fmt_count;

/// The curve's buckets from the window's start to `now_ns` (on the
/// profile's clock; empty buckets are 0) and a line saying what it is.
pub(super) fn tail_series(t: &FaultTail, now_ns: u64) -> (String, Vec<u64>) {
    let Some(start) = t.window.start_ns else {
        return ("restore: no guest fault yet".into(), Vec::new());
    };
    let width = t.bucket_ns.max(1);
    let upto = t.window.end_ns.unwrap_or(now_ns).min(now_ns);
    let n = (upto.saturating_sub(start) / width + 1).min(100_000) as usize;
    let mut data = vec![0u64; n];
    let mut faults = 0;
    for b in t.curve.iter().filter(|b| start + b.t_ns <= upto) {
        if let Some(slot) = data.get_mut((b.t_ns / width) as usize) {
            *slot += b.total();
            faults += b.total();
        }
    }
    let peak = data.iter().copied().max().unwrap_or(0);
    let state = if t.window.end_ns.is_some_and(|e| e <= now_ns) {
        "to the guest's mark"
    } else {
        "so far"
    };
    (
        format!(
            "restore tail {state}: {} faults, peak {}/ms",
            fmt_count(faults),
            fmt_count(peak * 1_000_000 / width)
        ),
        data,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::fault_tail::{TailBucket, TailWindow};

    #[test]
    fn the_curve_is_cut_at_the_time_shown() {
        let t = FaultTail {
            window: TailWindow {
                start_ns: Some(5_000_000),
                end_ns: Some(9_000_000),
                ..Default::default()
            },
            bucket_ns: 1_000_000,
            curve: vec![
                TailBucket {
                    t_ns: 0,
                    counts: [1, 2, 0, 0, 0],
                },
                TailBucket {
                    t_ns: 2_000_000,
                    counts: [0, 7, 0, 0, 0],
                },
            ],
            ..Default::default()
        };
        let (line, data) = tail_series(&t, 6_500_000);
        assert_eq!(data, [3, 0]);
        assert!(line.contains("so far: 3 faults, peak 3/ms"), "{line}");
        let (line, data) = tail_series(&t, 20_000_000);
        assert_eq!(data, [3, 0, 7, 0, 0]);
        assert!(
            line.contains("to the guest's mark: 10 faults, peak 7/ms"),
            "{line}"
        );
        let empty = FaultTail::default();
        assert!(tail_series(&empty, 1).1.is_empty());
    }
}
