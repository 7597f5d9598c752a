//! Exits that reach the VMM, counted per 100 µs of the VMM's clock, per
//! vCPU: afterwards, any interval of the timeline (an initcall) can be
//! given the port and MMIO exits the guest made in it. Each vCPU thread
//! keeps its own counters (no sharing, no atomics); they are merged once
//! the threads have stopped.

use kvm_ioctls::VcpuExit;

/// Width of one slot.
pub const SLOT_NS: u64 = 100_000;
/// Slots beyond this (an hour) are not counted.
const MAX_SLOTS: usize = 36_000_000;

/// Exit counts per slot: port I/O and MMIO exits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExitSlots {
    io: Vec<u32>,
    mmio: Vec<u32>,
}

/// Exits counted in an interval (partial slots pro rata).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExitCounts {
    pub io: u64,
    pub mmio: u64,
}

impl ExitSlots {
    /// Counts `exit`, which the VMM saw at `t_ns` (since VMM start).
    pub fn count(&mut self, t_ns: u64, exit: &VcpuExit<'_>) {
        let io = match exit {
            VcpuExit::IoIn(..) | VcpuExit::IoOut(..) => true,
            VcpuExit::MmioRead(..) | VcpuExit::MmioWrite(..) => false,
            _ => return,
        };
        let slot = (t_ns / SLOT_NS) as usize;
        if slot >= MAX_SLOTS {
            return;
        }
        let v = if io { &mut self.io } else { &mut self.mmio };
        if v.len() <= slot {
            v.resize(slot + 1, 0);
        }
        v[slot] = v[slot].saturating_add(1);
    }

    /// Adds another vCPU's counts.
    pub fn merge(&mut self, other: &ExitSlots) {
        for (mine, theirs) in [(&mut self.io, &other.io), (&mut self.mmio, &other.mmio)] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m = m.saturating_add(*t);
            }
        }
    }

    /// The exits in `start_ns..end_ns`; a slot the interval covers in part
    /// counts in proportion (an interval inside one slot gets its share).
    pub fn between(&self, start_ns: u64, end_ns: u64) -> ExitCounts {
        ExitCounts {
            io: share(&self.io, start_ns, end_ns),
            mmio: share(&self.mmio, start_ns, end_ns),
        }
    }
}

fn share(slots: &[u32], start_ns: u64, end_ns: u64) -> u64 {
    if end_ns <= start_ns {
        return 0;
    }
    let first = (start_ns / SLOT_NS) as usize;
    let last = ((end_ns - 1) / SLOT_NS) as usize;
    let mut total = 0.0f64;
    for (i, &c) in slots.iter().enumerate().take(last + 1).skip(first) {
        let lo = (i as u64 * SLOT_NS).max(start_ns);
        let hi = ((i as u64 + 1) * SLOT_NS).min(end_ns);
        total += f64::from(c) * (hi - lo) as f64 / SLOT_NS as f64;
    }
    total.round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_slot_and_shares_partial_slots() {
        let mut a = ExitSlots::default();
        for t in [0, 10, 99_999, 150_000, 250_000] {
            a.count(t, &VcpuExit::IoOut(0x3f8, &[0]));
        }
        a.count(120_000, &VcpuExit::Hlt);
        let mut data = [0u8; 4];
        let mut b = ExitSlots::default();
        b.count(260_000, &VcpuExit::MmioRead(0xd000_0000, &mut data));
        b.count(260_000, &VcpuExit::IoIn(0x3fd, &mut [0u8]));
        a.merge(&b);
        assert_eq!(a.between(0, 300_000), ExitCounts { io: 6, mmio: 1 });
        assert_eq!(a.between(0, 100_000).io, 3);
        // Half of slot 1 (one exit) and half of slot 2 (two): 0.5 + 1.
        assert_eq!(a.between(150_000, 250_000).io, 2);
        assert_eq!(a.between(5, 5).io, 0);
        assert_eq!(a.between(10_000_000, 20_000_000).io, 0);
    }
}
