//! The guest's serial lines (their bytes timed by eBPF as the guest wrote
//! them, `bootscope_profiler::collector::SerialLine`) as the console lines
//! the VMM's own alignment reads (`bootscope_vmm::kernel_log::align`): a
//! kernel console line starts with its log record's timestamp
//! (`[   26.302124] `), and the record read from guest memory gives the
//! rest of its text. The eBPF program keeps only a line's first 16 bytes:
//! the timestamp and the first character of the text, which together pick
//! the record; a line that matches no record, or more than one, is left
//! out (it anchors nothing).

use std::collections::HashMap;

use bootscope_profiler::collector::SerialLine;
use bootscope_vmm::console::ConsoleLine;
use bootscope_vmm::kernel_log::ringbuffer::LogRecord;

/// `[   26.302124] X` → (26302124 µs, b'X'): a console line's timestamp
/// and the first byte of its text (None: no timestamp, or no text kept).
fn stamp(prefix: &[u8]) -> Option<(u64, u8)> {
    let rest = prefix.strip_prefix(b"[")?;
    let close = rest.iter().position(|&b| b == b']')?;
    let inside = std::str::from_utf8(&rest[..close]).ok()?.trim();
    let (s, us) = inside.split_once('.')?;
    if us.len() != 6 || !us.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let micros = s.parse::<u64>().ok()?.checked_mul(1_000_000)? + us.parse::<u64>().ok()?;
    let first = *rest.get(close + 1..)?.strip_prefix(b" ")?.first()?;
    Some((micros, first))
}

/// The console lines of `lines` that name exactly one of `records`, with
/// that record's first line as their text.
pub fn console_lines(lines: &[SerialLine], records: &[LogRecord]) -> Vec<ConsoleLine> {
    let mut by_stamp: HashMap<(u64, u8), Vec<&LogRecord>> = HashMap::new();
    for r in records {
        let first = r.text.lines().next().unwrap_or("");
        if let Some(&b) = first.as_bytes().first() {
            by_stamp.entry((r.ts_nsec / 1000, b)).or_default().push(r);
        }
    }
    lines
        .iter()
        .filter_map(|l| {
            let (us, first) = stamp(&l.prefix)?;
            let [record] = by_stamp.get(&(us, first))?.as_slice() else {
                return None;
            };
            let text = record.text.lines().next().unwrap_or("");
            Some(ConsoleLine {
                text: format!("[{:5}.{:06}] {text}", us / 1_000_000, us % 1_000_000),
                first_byte_ns: l.first_byte_ns,
                last_byte_ns: l.last_byte_ns,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, ts_ns: u64, text: &str) -> LogRecord {
        LogRecord {
            seq,
            ts_nsec: ts_ns,
            caller_id: 1,
            text: text.into(),
        }
    }

    fn line(prefix: &str, first: u64, last: u64) -> SerialLine {
        SerialLine {
            tgid: 1,
            first_byte_ns: first,
            last_byte_ns: last,
            len: 60,
            prefix: prefix.as_bytes()[..prefix.len().min(16)].to_vec(),
        }
    }

    #[test]
    fn stamps_are_read_from_the_first_16_bytes() {
        assert_eq!(stamp(b"[   26.302124] w"), Some((26_302_124, b'w')));
        assert_eq!(stamp(b"[12345.000001] x"), Some((12_345_000_001, b'x')));
        assert_eq!(stamp(b"[    0.000000] L"), Some((0, b'L')));
        // No text kept, no timestamp, a malformed one.
        assert_eq!(stamp(b"[   26.302124]"), None);
        assert_eq!(stamp(b"bootscope-guest:"), None);
        assert_eq!(stamp(b"[   26.30212] ab"), None);
        assert_eq!(stamp(b"[ 2a.302124] ab"), None);
        assert_eq!(stamp(b"["), None);
    }

    #[test]
    fn a_line_takes_the_text_of_the_one_record_it_names() {
        let records = [
            rec(0, 26_302_124_500, "Run /init as init process"),
            rec(1, 26_302_124_900, "  with arguments:"),
            rec(2, 27_000_000_000, "alpha one"),
            rec(3, 27_000_000_400, "also two"),
            rec(4, 28_000_000_000, "multi\nline"),
        ];
        let lines = [
            line("[   26.302124] Run /init as init process", 10, 20),
            // Two records share this stamp and first letter: ambiguous.
            line("[   27.000000] a", 30, 40),
            line("bootscope-guest: hello", 50, 60),
            line("[   28.000000] multi", 70, 80),
            // A stamp no record has (the log wrapped).
            line("[    1.000000] gone", 90, 95),
        ];
        let out = console_lines(&lines, &records);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].text, "[   26.302124] Run /init as init process");
        assert_eq!((out[0].first_byte_ns, out[0].last_byte_ns), (10, 20));
        assert_eq!(out[1].text, "[   28.000000] multi");
    }

    #[test]
    fn the_lines_align_the_log_as_the_vmms_own_console_does() {
        // True offset 1 ms: each line written 2 µs after its record was
        // stored, for 30 µs; the next record stored 5 µs after.
        let records = [
            rec(0, 10_000_000_000, "Linux version 6.1"),
            rec(1, 10_000_037_000, "Command line: x"),
            rec(2, 10_000_080_000, "next"),
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
        let console = console_lines(&lines, &records);
        let a = bootscope_vmm::kernel_log::align::align(&records, &console, 0).unwrap();
        assert_eq!((a.offset_ns, a.error_ns), (998_500, 3_500));
    }
}
