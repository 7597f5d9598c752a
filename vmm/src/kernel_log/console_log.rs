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

/// The timestamped lines of a console log (`[    1.234567] text`) as log
/// records; lines without a timestamp are skipped.
pub fn records(console: &str) -> Vec<LogRecord> {
    console
        .lines()
        .filter_map(|l| {
            // A console may prefix lines with carriage returns or escapes.
            let at = l.find('[')?;
            let rest = &l[at + 1..];
            let (stamp, text) = rest.split_once("] ")?;
            let (s, us) = stamp.trim().split_once('.')?;
            let ns = s.parse::<u64>().ok()? * 1_000_000_000 + us.parse::<u64>().ok()? * 1000;
            Some((ns, text.trim_end_matches('\r').to_string()))
        })
        .enumerate()
        .map(|(i, (ts_nsec, text))| LogRecord {
            seq: i as u64,
            ts_nsec,
            caller_id: 0,
            text,
        })
        .collect()
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
        let r = records(log);
        assert_eq!(r.len(), 3);
        assert_eq!(r[1].ts_nsec, 412_000_000);
        assert_eq!(r[2].seq, 2);
        let calls = super::super::initcalls::parse(&r);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "pci_subsys_init");
        assert_eq!(calls[0].duration_ns, 1_500_000);
    }
}
