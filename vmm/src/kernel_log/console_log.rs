//! The fallback for a VMM whose guest memory bootscope cannot read
//! (`bootscope initcalls CONSOLE-LOG`, e.g. after `profile -- qemu ...`):
//! `initcall_debug` lines printed on the guest's console, with their printk
//! timestamps. This costs the guest two console lines per initcall (the
//! command line must carry `initcall_debug ignore_loglevel`): thousands of
//! serial port exits the in-memory method avoids.

use super::ringbuffer::LogRecord;

/// What the method field says for console parsing.
pub const METHOD_CONSOLE: &str =
    "initcall_debug lines printed on the guest console (costs two console lines per initcall); \
     guest clock only";

/// The latest timestamp accepted: about 292 years, so that any time plus
/// any duration (each at most this) fits in 64 bits, and a time fits the
/// signed offsets of the alignment.
pub const MAX_TIMESTAMP_NS: u64 = i64::MAX as u64;

/// A console line whose timestamp is out of range.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: the printk timestamp [{stamp}] is out of range (at most {} seconds); is this a kernel console log?", MAX_TIMESTAMP_NS / 1_000_000_000)]
pub struct BadTimestamp {
    pub line: usize,
    pub stamp: String,
}

/// `SECONDS.MICROSECONDS` in nanoseconds; Some(None) for a number too
/// large; None for no timestamp.
pub(crate) fn stamp_ns(stamp: &str) -> Option<Option<u64>> {
    let (s, us) = stamp.trim().split_once('.')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(s) || !digits(us) {
        return None;
    }
    let ns = s
        .parse::<u64>()
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .zip(us.parse::<u64>().ok().and_then(|u| u.checked_mul(1000)))
        .and_then(|(a, b)| a.checked_add(b))
        .filter(|&ns| ns <= MAX_TIMESTAMP_NS);
    Some(ns)
}

/// The timestamped lines of a console log (`[    1.234567] text`) as log
/// records; lines without a timestamp are skipped, and a timestamp out of
/// range ([`MAX_TIMESTAMP_NS`]) is an error naming its line.
pub fn records(console: &str) -> Result<Vec<LogRecord>, BadTimestamp> {
    let mut out = Vec::new();
    for (n, l) in console.lines().enumerate() {
        // A console may prefix lines with carriage returns or escapes.
        let Some(at) = l.find('[') else { continue };
        let Some((stamp, text)) = l[at + 1..].split_once("] ") else {
            continue;
        };
        let ts_nsec = match stamp_ns(stamp) {
            None => continue,
            Some(None) => {
                return Err(BadTimestamp {
                    line: n + 1,
                    stamp: stamp.trim().chars().take(40).collect(),
                })
            }
            Some(Some(ns)) => ns,
        };
        out.push(LogRecord {
            seq: out.len() as u64,
            ts_nsec,
            caller_id: 0,
            text: text.trim_end_matches('\r').to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamped_lines_become_records() {
        let log = "SeaBIOS\r\n[    0.000000] Linux version 6.1\r\n\
[    0.412000] calling  pci_subsys_init+0x0/0x7a @ 1\n\
no stamp here\n\
[    0.413500] initcall pci_subsys_init+0x0/0x7a returned 0 after 1500 usecs\n";
        let r = records(log).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[1].ts_nsec, 412_000_000);
        assert_eq!(r[2].seq, 2);
        let calls = super::super::initcalls::parse(&r);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "pci_subsys_init");
        assert_eq!(calls[0].duration_ns, 1_500_000);
    }

    #[test]
    fn timestamps_out_of_range_are_an_error_not_a_wrapped_time() {
        let log = "[    1.000000] fine\n[18446744073.709552] calling  x+0x0/0x1 @ 1\n";
        let e = records(log).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = records("[99999999999999999999999.000000] x\n").unwrap_err();
        assert_eq!(e.line, 1);
        // The largest accepted time.
        let r = records("[9223372036.854775] x\n").unwrap();
        assert_eq!(r[0].ts_nsec, 9_223_372_036_854_775_000);
        // Not timestamps at all: skipped.
        assert!(records("[ -1.5] x\n[1.x] y\n[abc] z\n").unwrap().is_empty());
    }
}
