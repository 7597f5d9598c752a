//! Holding a traced VMM stopped (SIGSTOP) for the milliseconds a read of
//! its guest memory takes, and continuing it (SIGCONT) always: when the
//! hold is dropped (success, error, a panic's unwinding, bootscope winding
//! down on SIGINT/SIGTERM), and, when bootscope itself is killed or exits
//! at once, by a [`Watchdog`]: a small shell process, started before any
//! hold, that continues every process it was told of as soon as its pipe
//! from bootscope closes, however bootscope ended.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The watchdog's script: collects pids (or `-PGID`) one per line until
/// its input closes, then continues them all; a `done` line (bootscope
/// ended normally, having continued every process it held) ends it
/// without continuing anything, so that a process stopped by someone else
/// stays stopped. It ignores the terminal's and bootscope's signals (its
/// own process group).
const SCRIPT: &str = "trap '' INT TERM HUP; p=; while read -r x; do \
                      [ \"$x\" = done ] && exit 0; p=\"$p $x\"; done; \
                      for x in $p; do kill -CONT $x 2>/dev/null; done; exit 0";

/// Continues the processes it was told of when bootscope ends.
pub struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts it; Err: no `/bin/sh` to run it.
    pub fn start() -> std::io::Result<Self> {
        let mut child = Command::new("/bin/sh")
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Self { child, stdin })
    }

    /// Ends it without continuing anything: bootscope continued every
    /// process it held itself.
    pub fn release(mut self) {
        self.watch("done");
    }

    /// Tells it of `pid` (`-PGID` for a process group).
    pub fn watch(&mut self, target: &str) -> bool {
        self.stdin
            .as_mut()
            .is_some_and(|s| writeln!(s, "{target}").and_then(|_| s.flush()).is_ok())
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A process held stopped; continued when dropped.
pub struct Held {
    pid: u32,
    since: Instant,
}

/// The state letter of `pid` (`R`, `S`, `T`, ...), if it exists.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn signal(pid: u32, sig: i32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) takes plain integers.
    unsafe { libc::kill(p, sig) == 0 }
}

impl Held {
    /// Stops `pid` and waits (up to 100 ms) until it is stopped.
    #[cfg(test)]
    pub fn stop(pid: u32) -> Result<Self, String> {
        if !signal(pid, libc::SIGSTOP) {
            return Err(format!(
                "cannot stop process {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        let held = Self::adopt(pid, Instant::now());
        held.wait_stopped();
        Ok(held)
    }

    /// Takes over `pid`, stopped (or being stopped) by the kernel since
    /// `since`.
    pub fn adopt(pid: u32, since: Instant) -> Self {
        Self { pid, since }
    }

    /// Waits until the process has stopped: at most 2 s (on a loaded host
    /// a stop can take more than a scheduling round; a read that starts
    /// before it is only a read of a running guest, which the readers
    /// validate).
    pub fn wait_stopped(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !matches!(state(self.pid), Some('T') | None) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// How long it has been held.
    pub fn held_ns(&self) -> u64 {
        self.since.elapsed().as_nanos() as u64
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        signal(self.pid, libc::SIGCONT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    fn wait_state(pid: u32, want: char) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if state(pid) == Some(want) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn a_hold_stops_and_its_drop_continues() {
        let mut c = sleeper();
        let pid = c.id();
        {
            let h = Held::stop(pid).unwrap();
            assert!(wait_state(pid, 'T'), "stopped: {:?}", state(pid));
            assert!(h.held_ns() > 0);
        }
        assert!(wait_state(pid, 'S'), "continued: {:?}", state(pid));
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(Held::stop(u32::MAX).is_err());
    }

    #[test]
    fn the_watchdog_continues_what_it_watched_once_its_pipe_closes() {
        let mut c = sleeper();
        let pid = c.id();
        let mut w = Watchdog::start().unwrap();
        assert!(w.watch(&pid.to_string()));
        // A hold whose drop never runs (bootscope killed while holding).
        std::mem::forget(Held::stop(pid).unwrap());
        assert!(wait_state(pid, 'T'), "stopped: {:?}", state(pid));
        drop(w);
        assert!(wait_state(pid, 'S'), "continued: {:?}", state(pid));
        c.kill().unwrap();
        c.wait().unwrap();
    }

    #[test]
    fn a_released_watchdog_leaves_a_process_someone_else_stopped_as_it_is() {
        let mut c = sleeper();
        let pid = c.id();
        let mut w = Watchdog::start().unwrap();
        assert!(w.watch(&pid.to_string()));
        // Stopped by another (the user's Ctrl-Z, a debugger), not held.
        assert!(signal(pid, libc::SIGSTOP));
        assert!(wait_state(pid, 'T'));
        w.release();
        // The watchdog has exited (release waits for it): nothing more
        // will continue the process.
        assert_eq!(state(pid), Some('T'));
        signal(pid, libc::SIGCONT);
        c.kill().unwrap();
        c.wait().unwrap();
    }
}
