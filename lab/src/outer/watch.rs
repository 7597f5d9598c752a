//! Running QEMU: its console copied live, its stderr forwarded, and the
//! wait for its end, bounded by the timeout and the heartbeat.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::heartbeat::{HeartbeatLine, HeartbeatWatch, KICK_EVERY};
use super::terminal::{forward_keys, RawMode};
use crate::{LabError, Result};

/// Lines of QEMU's stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 20;

/// QEMU warns once per CPU feature that TCG cannot emulate; the `EPYC`
/// model lists several. They are harmless, so they are not forwarded.
const HARMLESS_QEMU_WARNING: &str = "TCG doesn't support requested feature";

/// Kills and reaps QEMU when dropped unless it was reaped already, so no
/// error path (or panic) leaves an emulator running.
struct ChildGuard {
    child: Child,
    reaped: bool,
}

impl ChildGuard {
    fn kill(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.reaped = true;
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What `run_qemu` waits for: the timeout, and the heartbeat line whose
/// beats say the lab machine still runs.
pub(super) struct Watch {
    /// Set to stop: QEMU is killed and the run ends as interrupted.
    pub(super) stop: Option<Arc<AtomicBool>>,
    pub(super) timeout: Duration,
    pub(super) heartbeat: HeartbeatLine,
    pub(super) freeze_after: Duration,
    /// The program has the console as its terminal: the host terminal is
    /// in raw mode while QEMU runs and its keys go to QEMU's input.
    pub(super) terminal: bool,
}

/// Starts QEMU, copies its stdout to `console` live, forwards its stderr
/// (minus harmless warnings) to ours, and waits up to the timeout, or until
/// the lab machine's heartbeat stops.
pub(super) fn run_qemu(
    cmd: &mut Command,
    qemu: &Path,
    mut watch: Watch,
    console: &mut (dyn Write + Send),
) -> Result<(ExitStatus, Duration, Vec<String>)> {
    let timeout = watch.timeout;
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            LabError::QemuMissing {
                qemu: qemu.to_path_buf(),
            }
        } else {
            LabError::QemuSpawn {
                qemu: qemu.to_path_buf(),
                source,
            }
        }
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let stdin = child.stdin.take();
    let mut guard = ChildGuard {
        child,
        reaped: false,
    };
    // Declared before the threads, so dropped after they end: the
    // terminal is put back once nothing writes to it any more.
    let raw = match (watch.terminal, &stdin) {
        (true, Some(_)) => Some(RawMode::enter()?),
        _ => None,
    };
    let keys_done = AtomicBool::new(false);
    let detached = AtomicBool::new(false);

    let result = std::thread::scope(|scope| {
        let copier = stdout.map(|out| scope.spawn(move || copy_live(out, console)));
        let errors = stderr.map(|err| scope.spawn(move || forward_stderr(err)));
        let keys = stdin.filter(|_| raw.is_some()).map(|input| {
            let (done, detached) = (&keys_done, &detached);
            scope.spawn(move || forward_keys(input, done, detached))
        });
        let deadline = start + timeout;
        let mut beat = HeartbeatWatch::new(start);
        let mut next_beat_check = start;
        let waited = loop {
            match guard.child.try_wait() {
                Ok(Some(status)) => {
                    guard.reaped = true;
                    break Ok(status);
                }
                Ok(None) if Instant::now() >= deadline => break Err(LabError::Timeout { timeout }),
                Ok(None)
                    if detached.load(Ordering::SeqCst)
                        || watch
                            .stop
                            .as_ref()
                            .is_some_and(|s| s.load(Ordering::SeqCst)) =>
                {
                    break Err(LabError::Interrupted)
                }
                Ok(None) => {
                    let now = Instant::now();
                    if now >= next_beat_check {
                        next_beat_check = now + KICK_EVERY;
                        watch.heartbeat.kick();
                        let beats = watch.heartbeat.beats();
                        if let Some(silent) = beat.check(beats, now, watch.freeze_after) {
                            break Err(LabError::Frozen { silent });
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => break Err(LabError::io("wait for", qemu, e)),
            }
        };
        let elapsed = start.elapsed();
        // On errors QEMU still runs: stop it so its pipes close and the
        // copying threads finish.
        guard.kill();
        keys_done.store(true, Ordering::SeqCst);
        if let Some(keys) = keys {
            let _ = keys.join();
        }
        if let Some(copier) = copier {
            let _ = copier.join();
        }
        let tail = errors.and_then(|h| h.join().ok()).unwrap_or_default();
        waited.map(|status| (status, elapsed, tail))
    });
    drop(raw);
    result
}

/// Copies QEMU's stdout (the guest console) to `console`, flushing after
/// every read so output appears as the guest produces it.
fn copy_live(mut from: impl Read, console: &mut (dyn Write + Send)) {
    let mut buf = [0u8; 4096];
    let mut filter = ConsoleFilter::default();
    let mut out = Vec::with_capacity(buf.len());
    let mut console_ok = true;
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.clear();
                filter.feed(&buf[..n], &mut out);
                // Keep draining the pipe even if the console went away, so
                // QEMU never blocks on a full pipe.
                if console_ok && !out.is_empty() {
                    console_ok = console
                        .write_all(&out)
                        .and_then(|_| console.flush())
                        .is_ok();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    out.clear();
    filter.finish(&mut out);
    if console_ok && !out.is_empty() {
        let _ = console.write_all(&out).and_then(|_| console.flush());
    }
}

/// Drops the kernel's own `[ 2.85] reboot: Power down` line, which every
/// lab run ends with and which says nothing about the program.
///
/// Lines starting with `[` (kernel messages) are held until complete so
/// they can be recognised; everything else passes through at once.
#[derive(Default)]
struct ConsoleFilter {
    /// Whether the last byte passed on was inside a line (not a newline).
    mid_line: bool,
    /// A kernel-message-looking line being collected.
    held: Vec<u8>,
    /// Whether `held` is in use.
    holding: bool,
}

impl ConsoleFilter {
    /// Longest line held back; longer ones cannot be the power-off message.
    const MAX_HELD: usize = 160;

    fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        for &b in data {
            if self.holding {
                self.held.push(b);
                if b == b'\n' {
                    if !is_power_off_line(&self.held) {
                        out.extend_from_slice(&self.held);
                    }
                    self.held.clear();
                    self.holding = false;
                    self.mid_line = false;
                } else if self.held.len() > Self::MAX_HELD {
                    out.append(&mut self.held);
                    self.holding = false;
                    self.mid_line = true;
                }
                continue;
            }
            if !self.mid_line && b == b'[' {
                self.holding = true;
                self.held.push(b);
                continue;
            }
            out.push(b);
            self.mid_line = b != b'\n';
        }
    }

    /// Emits a held partial line at the end of the stream, unless it is the
    /// power-off message cut short of its newline.
    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.holding && !is_power_off_line(&self.held) {
            out.append(&mut self.held);
        }
        self.held.clear();
        self.holding = false;
    }
}

/// `[ <seconds>] reboot: Power down` with optional CR/LF.
fn is_power_off_line(line: &[u8]) -> bool {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\r', '\n']);
    let Some(rest) = text.strip_prefix('[') else {
        return false;
    };
    let Some((stamp, message)) = rest.split_once(']') else {
        return false;
    };
    let stamp = stamp.trim();
    !stamp.is_empty()
        && stamp.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && message.trim() == "reboot: Power down"
}

/// Forwards QEMU's stderr to ours and returns its last lines.
fn forward_stderr(from: impl Read) -> Vec<String> {
    let mut tail: Vec<String> = Vec::new();
    let mut reader = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        if text.contains(HARMLESS_QEMU_WARNING) {
            continue;
        }
        let _ = io::stderr().write_all(&line);
        if tail.len() == STDERR_TAIL_LINES {
            tail.remove(0);
        }
        tail.push(text.trim_end().to_string());
    }
    tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_off_line_is_filtered() {
        let input: &[u8] = b"lab: ready\n[    1.5] kvm: something\r\nout [x]\n[    2.863273] reboot: Power down\r\n";
        // Any split into chunks gives the same result.
        for split in 0..input.len() {
            let mut f = ConsoleFilter::default();
            let mut out = Vec::new();
            f.feed(&input[..split], &mut out);
            f.feed(&input[split..], &mut out);
            f.finish(&mut out);
            assert_eq!(
                out, b"lab: ready\n[    1.5] kvm: something\r\nout [x]\n",
                "split {split}"
            );
        }
        let mut f = ConsoleFilter::default();
        let mut out = Vec::new();
        f.feed(b"[    6.2] reboot: Power down", &mut out);
        f.finish(&mut out);
        assert!(out.is_empty());
        let mut f = ConsoleFilter::default();
        f.feed(b"[partial", &mut out);
        f.finish(&mut out);
        assert_eq!(out, b"[partial");
    }
}
