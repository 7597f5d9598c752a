//! The event log: the marks the ring buffer and the VMM deliver, and the
//! boot phase each followed process is in by them.

use std::collections::HashMap;

use bootscope_model::mark::boot_time_port_mark_name;

use crate::bpf::{self, BsEvent};
use crate::phases::{self, PhaseNames};
use crate::profile::{Mark, MarkSource};

/// Port marks kept per profile: a guest alternating marker values forever
/// cannot grow the profile without bound. The VMM's own marks, console
/// milestones and the boot timer are few and always kept.
pub(super) const MAX_MARKS: usize = 10_000;

/// Marks, and each process's phase.
#[derive(Default)]
pub(super) struct EventLog {
    pub(super) marks: Vec<Mark>,
    pub(super) phase_names: PhaseNames,
    /// Each process's phase index, and how far its boot has got by its
    /// marks.
    pub(super) current_phase: HashMap<u32, (u32, phases::PhaseTracker)>,
    /// Events read from the ring buffer.
    pub(super) ring_events: u64,
    /// Marks the VMM added itself.
    pub(super) vmm_marks: u64,
    /// The port of the boot-time marker protocol.
    pub(super) boot_time_port: u16,
    /// Port marks not kept (beyond [`MAX_MARKS`]).
    pub(super) marks_dropped: u64,
    /// Port marks kept so far (at most [`MAX_MARKS`]).
    pub(super) port_marks: usize,
    /// The guests' serial lines (at most
    /// [`super::serial::MAX_SERIAL_LINES`]).
    pub(super) serial_lines: Vec<super::serial::SerialLine>,
    /// Serial lines not kept.
    pub(super) serial_lines_dropped: u64,
}

impl EventLog {
    pub(super) fn new(boot_time_port: u16) -> Self {
        EventLog {
            boot_time_port,
            ..Default::default()
        }
    }

    /// Keeps a mark (a port mark only while fewer than [`MAX_MARKS`] are
    /// kept); when it opens a new phase for its process (`default_tgid`
    /// if the mark names none), returns the process and the phase's index.
    pub(super) fn record(&mut self, mark: Mark, default_tgid: u32) -> Option<(u32, u32)> {
        if mark.source.is_port() {
            if self.port_marks >= MAX_MARKS {
                self.marks_dropped += 1;
                return None;
            }
            self.port_marks += 1;
        }
        let tgid = mark.tgid.unwrap_or(default_tgid);
        let current = self.current_phase.entry(tgid).or_default();
        let opened = current
            .1
            .open(&mark)
            .map(|name| self.phase_names.index(&name));
        let changed = opened.filter(|&idx| current.0 != idx);
        if let Some(idx) = changed {
            current.0 = idx;
        }
        self.marks.push(mark);
        changed.map(|idx| (tgid, idx))
    }

    /// Keeps a serial line while fewer than the most are kept.
    pub(super) fn push_serial_line(&mut self, line: super::serial::SerialLine) {
        if self.serial_lines.len() >= super::serial::MAX_SERIAL_LINES {
            self.serial_lines_dropped += 1;
        } else {
            self.serial_lines.push(line);
        }
    }

    /// The boot rank process `tgid`'s boot reached by its marks.
    pub(super) fn reached(&self, tgid: u32) -> Option<u8> {
        self.current_phase.get(&tgid).and_then(|c| c.1.reached())
    }

    /// The mark a port write event (`MARK`) stands for, at `t_ns`.
    pub(super) fn port_mark(&self, e: &BsEvent, t_ns: u64) -> Mark {
        let (port, value) = (e.arg0 & 0xffff, e.arg0 >> 32);
        let guest_rip = (e.arg0 & bpf::MARK_RIP_KNOWN != 0).then_some(e.arg1);
        if e.arg0 & bpf::MARK_KERNEL_FIRST != 0 {
            return phases::first_kernel_pio_mark(port as u16, t_ns, e.tgid, e.arg1);
        }
        let (name, source) = if port == u64::from(self.boot_time_port) {
            (
                boot_time_port_mark_name(value as u8),
                MarkSource::BootTimePort,
            )
        } else {
            (
                phases::debug_port_write_name(value as u8, guest_rip),
                MarkSource::DebugPort,
            )
        };
        Mark {
            name,
            source,
            t_ns,
            value: Some(value),
            tgid: Some(e.tgid),
            guest_rip,
        }
    }

    /// Drops the phases and marks of processes `tgids`.
    pub(super) fn forget(&mut self, tgids: &[u32]) {
        for t in tgids {
            self.current_phase.remove(t);
        }
        let mut port_dropped = 0;
        self.marks.retain(|m| {
            let keep = m.tgid.is_none_or(|t| !tgids.contains(&t));
            if !keep && m.source.is_port() {
                port_dropped += 1;
            }
            keep
        });
        // Room again for the port marks of the VMs still followed (an
        // exporter follows VMs for days).
        self.port_marks = self.port_marks.saturating_sub(port_dropped);
    }

    /// The marks in time order.
    pub(super) fn sorted_marks(&self) -> Vec<Mark> {
        let mut marks = self.marks.clone();
        marks.sort_by_key(|m| m.t_ns);
        marks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port_mark(tgid: u32, value: u64) -> Mark {
        Mark {
            name: format!("port 0x80: 0x{value:x}"),
            source: MarkSource::DebugPort,
            t_ns: value,
            value: Some(value),
            tgid: Some(tgid),
            guest_rip: None,
        }
    }

    /// A forgotten VM's port marks make room for those of the VMs after it.
    #[test]
    fn forgetting_a_vm_frees_its_port_marks_room() {
        let mut log = EventLog::new(0xf4);
        for i in 0..MAX_MARKS as u64 {
            log.record(port_mark(1, i), 1);
        }
        log.record(port_mark(2, 1), 2);
        assert_eq!((log.marks.len(), log.marks_dropped), (MAX_MARKS, 1));
        log.forget(&[1]);
        assert!(log.marks.is_empty());
        log.record(port_mark(2, 2), 2);
        assert_eq!(log.marks.len(), 1);
        assert_eq!(log.port_marks, 1);
    }
}
