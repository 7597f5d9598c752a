//! The lab machine's heartbeat line: the beats that say it still runs, and
//! the kicks that keep it from freezing.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{LabError, Result};

/// How often the host sends a byte down the heartbeat line.
pub(super) const KICK_EVERY: Duration = Duration::from_millis(500);

/// The lab machine's third serial port, as two FIFOs QEMU's `pipe` chardev
/// opens (`PATH.in` is what the port receives, `PATH.out` what it sends).
///
/// Out of the lab machine come its heartbeat bytes. Into it the host sends
/// a byte every [`KICK_EVERY`]: a receive interrupt. QEMU 7.2's emulator can
/// lose the wake-up of an interrupt that arrives while a nested guest is
/// being entered (it updates the CPU's pending-interrupt bits without a
/// lock), and a CPU that lost it never takes its pending timer interrupt
/// again: the lab machine freezes. Any later interrupt sets the bits anew,
/// so the kicks turn such a freeze into a pause of at most half a second.
pub(super) struct HeartbeatLine {
    to_lab: fs::File,
    from_lab: fs::File,
    beats: u64,
}

impl HeartbeatLine {
    /// Makes fresh FIFOs at `PATH.in` and `PATH.out` and opens both ends
    /// the host uses, non-blocking (read-write, so neither open waits for
    /// QEMU).
    pub(super) fn create(path: &Path) -> Result<Self> {
        let open = |suffix: &str| -> Result<fs::File> {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            let fifo = PathBuf::from(name);
            let _ = fs::remove_file(&fifo);
            let c = std::ffi::CString::new(fifo.as_os_str().as_bytes())
                .map_err(|_| LabError::io("create", &fifo, io::ErrorKind::InvalidInput.into()))?;
            // SAFETY: mkfifo reads a NUL-terminated path that outlives the
            // call.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return Err(LabError::io("create", &fifo, io::Error::last_os_error()));
            }
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
                .map_err(|e| LabError::io("open", &fifo, e))
        };
        Ok(HeartbeatLine {
            to_lab: open(".in")?,
            from_lab: open(".out")?,
            beats: 0,
        })
    }

    /// Sends one byte into the lab machine (dropped if the FIFO is full:
    /// the machine is not reading, and the next kick comes soon).
    pub(super) fn kick(&mut self) {
        let _ = self.to_lab.write(b"k");
    }

    /// Takes what the lab machine sent; returns all beats so far.
    pub(super) fn beats(&mut self) -> u64 {
        let mut buf = [0u8; 256];
        while let Ok(n @ 1..) = self.from_lab.read(&mut buf) {
            self.beats += n as u64;
        }
        self.beats
    }
}

/// Tracks the heartbeat: frozen once it has started beating and then
/// not beaten for `freeze_after`. Before the first beat (the lab kernel still
/// booting) only the timeout applies.
pub(super) struct HeartbeatWatch {
    len: u64,
    changed: Instant,
}

impl HeartbeatWatch {
    pub(super) fn new(now: Instant) -> Self {
        HeartbeatWatch {
            len: 0,
            changed: now,
        }
    }

    /// Feeds the file's current length; returns how long it has been
    /// silent once that exceeds `limit`.
    pub(super) fn check(&mut self, len: u64, now: Instant, limit: Duration) -> Option<Duration> {
        if len != self.len {
            self.len = len;
            self.changed = now;
            return None;
        }
        let silent = now.saturating_duration_since(self.changed);
        (self.len > 0 && silent >= limit).then_some(silent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_silence_counts_only_after_the_first_beat() {
        let t0 = Instant::now();
        let limit = Duration::from_secs(60);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut w = HeartbeatWatch::new(t0);
        // The lab kernel boots: no beat yet, however long.
        assert_eq!(w.check(0, at(100), limit), None);
        // Beating: never silent long.
        assert_eq!(w.check(1, at(101), limit), None);
        assert_eq!(w.check(1, at(150), limit), None);
        assert_eq!(w.check(2, at(152), limit), None);
        // Silent for the limit: frozen, and for how long.
        assert_eq!(w.check(2, at(211), limit), None);
        assert_eq!(w.check(2, at(212), limit), Some(Duration::from_secs(60)));
        // A beat resets it.
        assert_eq!(w.check(3, at(213), limit), None);
        assert_eq!(w.check(3, at(272), limit), None);
    }
}
