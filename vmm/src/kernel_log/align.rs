//! The guest's clock on the VMM's: printk timestamps (`local_clock()`,
//! kvm-clock based) mapped to nanoseconds since VMM start, with a stated
//! error.
//!
//! Each console line `[    1.234567] text` is one record of the log whose
//! `ts_nsec` is known exactly, and the VMM timestamps the line's first and
//! last bytes as the guest writes them to the serial port. With
//! `host = guest + offset`:
//! - the record is stored before its line is written, so
//!   `offset <= first_byte - ts` for every line (upper bound);
//! - the record stored next is stored after the line was written (the
//!   console prints synchronously, interrupts off, from the printing
//!   context), so `offset >= last_byte - ts_next` (lower bound). Records
//!   stored while an earlier burst was still being printed break that
//!   assumption; they show as a lower bound above the upper one and are
//!   dropped. The guest runs only after the first `KVM_RUN`, which bounds
//!   the offset from below too.
//!
//! The offset reported is the middle of the tightest interval, its error
//! half the interval's width.

use std::collections::HashMap;

use super::ringbuffer::LogRecord;
use super::ClockAlignment;
use crate::console::ConsoleLine;

/// `[    1.234567] text` → (microseconds, text).
fn split_console_line(line: &str) -> Option<(u64, &str)> {
    let rest = line.trim_end_matches('\r').strip_prefix('[')?;
    let (stamp, text) = rest.split_once("] ")?;
    let (s, us) = stamp.trim().split_once('.')?;
    if us.len() != 6 {
        return None;
    }
    Some((
        s.parse::<u64>().ok()? * 1_000_000 + us.parse::<u64>().ok()?,
        text,
    ))
}

/// Aligns the log to the console lines' host times; `first_run_ns` is the
/// VMM's first `KVM_RUN`. None without a single matching line.
pub fn align(
    records: &[LogRecord],
    lines: &[ConsoleLine],
    first_run_ns: u64,
) -> Option<ClockAlignment> {
    let mut by_key: HashMap<(u64, &str), usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        let first = r.text.lines().next().unwrap_or("");
        by_key.entry((r.ts_nsec / 1000, first)).or_insert(i);
    }
    let mut upper = i128::MAX;
    let mut anchors = 0;
    let mut pairs = Vec::new();
    for l in lines {
        let Some((us, text)) = split_console_line(&l.text) else {
            continue;
        };
        let Some(&i) = by_key.get(&(us, text)) else {
            continue;
        };
        anchors += 1;
        let ts = i128::from(records[i].ts_nsec);
        upper = upper.min(i128::from(l.first_byte_ns) - ts);
        if let Some(next) = records.get(i + 1) {
            if next.seq == records[i].seq + 1 && next.ts_nsec > records[i].ts_nsec {
                pairs.push(i128::from(l.last_byte_ns) - i128::from(next.ts_nsec));
            }
        }
    }
    if anchors == 0 {
        return None;
    }
    let min_ts = records.iter().map(|r| r.ts_nsec).min().unwrap_or(0);
    let mut lower = i128::from(first_run_ns) - i128::from(min_ts);
    let mut lower_anchors = 0;
    for p in pairs.into_iter().filter(|&p| p <= upper) {
        lower_anchors += 1;
        lower = lower.max(p);
    }
    let lower = lower.min(upper);
    Some(ClockAlignment {
        offset_ns: ((upper + lower) / 2) as i64,
        error_ns: ((upper - lower) / 2 + (upper - lower) % 2) as u64,
        anchors,
        lower_anchors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, ts: u64, text: &str) -> LogRecord {
        LogRecord {
            seq,
            ts_nsec: ts,
            caller_id: 1,
            text: text.into(),
        }
    }

    fn line(text: &str, first: u64, last: u64) -> ConsoleLine {
        ConsoleLine {
            text: text.into(),
            first_byte_ns: first,
            last_byte_ns: last,
        }
    }

    #[test]
    fn bounds_from_both_sides() {
        // True offset 1_000_000; console writes 2 µs after storing, a line
        // takes 30 µs, the next record is stored 5 µs after the line.
        let recs = [
            rec(0, 10_000_000_000, "Linux version 6.1"),
            rec(1, 10_000_037_000, "Command line: x"),
            rec(2, 10_000_080_000, "debug, not on the console"),
        ];
        let lines = [
            line(
                "[   10.000000] Linux version 6.1",
                10_001_002_000,
                10_001_032_000,
            ),
            line(
                "[   10.000037] Command line: x",
                10_001_039_000,
                10_001_069_000,
            ),
        ];
        let a = align(&recs, &lines, 500).unwrap();
        // upper = 1_002_000, lower = max(11_032_000-10_037_000, 11_069_000-10_080_000)
        //       = 995_000 → offset 998_500 ± 3_500.
        assert_eq!(a.anchors, 2);
        assert_eq!(a.lower_anchors, 2);
        assert_eq!(a.offset_ns, 998_500);
        assert_eq!(a.error_ns, 3_500);
        assert!((a.offset_ns - 1_000_000).unsigned_abs() <= a.error_ns);
    }

    #[test]
    fn a_burst_does_not_give_a_false_lower_bound() {
        // Both records stored before the console ran (a buffered burst).
        let recs = [rec(0, 1_000, "a"), rec(1, 2_000, "b")];
        let lines = [
            line("[    0.000001] a", 900_000, 950_000),
            line("[    0.000002] b", 960_000, 990_000),
        ];
        let a = align(&recs, &lines, 100).unwrap();
        // Upper bound 899_000 from "a"; the pair bound 948_000 is dropped.
        assert_eq!(a.lower_anchors, 0);
        // The lower bound is then the first KVM_RUN: 100 - 1_000.
        assert_eq!(a.offset_ns, (899_000 - 900) / 2);
    }

    #[test]
    fn no_matching_line_no_alignment() {
        let recs = [rec(0, 1_000, "a")];
        assert!(align(&recs, &[line("no stamp", 1, 2)], 0).is_none());
        assert!(align(&recs, &[line("[    0.000005] a", 1, 2)], 0).is_none());
        assert_eq!(split_console_line("[    1.5] x"), None);
    }
}
