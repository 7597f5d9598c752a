//! The lines a followed guest wrote to its serial port (phases.bpf.c's
//! `BS_EV_SERIAL_LINE`), each with the times of its first and last bytes
//! on the profile's clock. A kernel's console line carries its log
//! record's timestamp (`[    1.234567] ...`), so these lines put the
//! guest kernel's clock on the profile's as exactly as bootscope's own
//! VMM does with the bytes it sees (`bootscope_vmm::kernel_log::align`).

use crate::bpf::BsEvent;

use super::Collector;

/// Lines kept per profile: a guest printing without end cannot grow the
/// profile's memory without bound (a boot's console has a few thousand).
pub(super) const MAX_SERIAL_LINES: usize = 100_000;

/// One line the guest wrote to its serial port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SerialLine {
    /// The process whose guest wrote it.
    pub tgid: u32,
    /// Its first byte, on the profile's clock (ns).
    pub first_byte_ns: u64,
    /// Its last byte (the `\n`), on the profile's clock (ns).
    pub last_byte_ns: u64,
    /// Its length in bytes, the `\n` included.
    pub len: u64,
    /// Its first bytes (at most 16; the rest is not kept).
    pub prefix: Vec<u8>,
}

impl SerialLine {
    /// The line an event stands for; `to_t` maps the programs' clock
    /// (CLOCK_MONOTONIC) to the profile's.
    pub(super) fn from_event(e: &BsEvent, to_t: impl Fn(u64) -> u64) -> Self {
        let len = e.arg1;
        let kept = (len as usize).min(e.comm.len());
        SerialLine {
            tgid: e.tgid,
            first_byte_ns: to_t(e.arg0),
            last_byte_ns: to_t(e.ts_ns),
            len,
            prefix: e.comm[..kept].to_vec(),
        }
    }
}

impl Collector {
    /// The serial lines the guest of process `tgid` wrote so far, in order
    /// (none unless [`super::CollectorConfig::serial_port`] was set), and
    /// how many were not kept (beyond [`MAX_SERIAL_LINES`]).
    pub fn serial_lines(&self, tgid: u32) -> (Vec<SerialLine>, u64) {
        let st = self.lock();
        let lines = st
            .log
            .serial_lines
            .iter()
            .filter(|l| l.tgid == tgid)
            .cloned()
            .collect();
        (lines, st.log.serial_lines_dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_keeps_its_times_and_at_most_its_first_16_bytes() {
        let mut e = BsEvent {
            kind: crate::bpf::event_kind::SERIAL_LINE,
            tgid: 7,
            ts_ns: 5_000,
            arg0: 3_000,
            arg1: 40,
            ..BsEvent::default()
        };
        for (i, b) in b"[    1.234567] L".iter().enumerate() {
            e.comm[i] = *b;
        }
        let l = SerialLine::from_event(&e, |t| t - 1_000);
        assert_eq!((l.first_byte_ns, l.last_byte_ns, l.len), (2_000, 4_000, 40));
        assert_eq!(l.prefix, b"[    1.234567] L");
        // A short line keeps only its own bytes.
        e.arg1 = 3;
        let l = SerialLine::from_event(&e, |t| t);
        assert_eq!(l.prefix, b"[  ");
    }
}
