//! Telling, on a PVM host, a guest that runs natively from one that KVM
//! emulates instruction by instruction (a stock kernel, which would never
//! finish booting there).

use std::time::{Duration, Instant};

/// On a PVM host, this many emulated instructions while the guest is still
/// booting means it is not a PVM guest and will not finish.
pub const PVM_EMULATION_LIMIT: u64 = 200_000;
/// How long a guest may run on a PVM host before the emulation check.
pub const PVM_GRACE: Duration = Duration::from_millis(300);
/// Emulated instructions per second above which, sustained over a window,
/// the guest is running through PVM's emulator rather than natively (a stock
/// kernel emulates ~200,000/s; a PVM guest only its port I/O).
pub const PVM_EMULATION_RATE: u64 = 50_000;
/// Window over which the emulation rate is measured.
pub const PVM_WINDOW: Duration = Duration::from_secs(1);

/// Decides, from KVM's `insn_emulation` statistic, whether a guest on a PVM
/// host is being emulated instruction by instruction. Fast path: the total
/// passing [`PVM_EMULATION_LIMIT`] early; slow path (a loaded machine
/// emulates more slowly): a sustained rate of [`PVM_EMULATION_RATE`] over any
/// [`PVM_WINDOW`].
#[derive(Debug)]
pub struct EmulationWatch {
    started: Instant,
    window_start: Instant,
    window_count: u64,
}

impl EmulationWatch {
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            window_start: started,
            window_count: 0,
        }
    }

    /// Feeds the current total; true when the guest is being emulated.
    pub fn guest_is_emulated(&mut self, now: Instant, emulated: u64) -> bool {
        if emulated >= PVM_EMULATION_LIMIT && now.duration_since(self.started) < PVM_WINDOW * 5 {
            return true;
        }
        let dt = now.duration_since(self.window_start);
        if dt >= PVM_WINDOW {
            let rate = emulated.saturating_sub(self.window_count) as f64 / dt.as_secs_f64();
            self.window_start = now;
            self.window_count = emulated;
            return rate >= PVM_EMULATION_RATE as f64;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulation_watch_fast_path() {
        let t0 = Instant::now();
        let mut w = EmulationWatch::new(t0);
        assert!(!w.guest_is_emulated(t0 + Duration::from_millis(300), 1_000));
        assert!(w.guest_is_emulated(t0 + Duration::from_millis(400), PVM_EMULATION_LIMIT));
    }

    #[test]
    fn emulation_watch_sustained_rate_on_a_slow_machine() {
        let t0 = Instant::now();
        let mut w = EmulationWatch::new(t0);
        // 60,000/s: slow, but never idle: caught after a window.
        assert!(!w.guest_is_emulated(t0 + Duration::from_millis(500), 30_000));
        assert!(w.guest_is_emulated(t0 + Duration::from_millis(1000), 60_000));
    }

    #[test]
    fn emulation_watch_ignores_port_io_of_a_native_guest() {
        let t0 = Instant::now();
        let mut w = EmulationWatch::new(t0);
        let mut total = 0;
        for s in 1..=60 {
            total += 5_000; // a chatty console: 5,000 emulated I/O per second
            assert!(!w.guest_is_emulated(t0 + Duration::from_secs(s), total));
        }
    }
}
