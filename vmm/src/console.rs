//! The guest console: where serial output goes, and the milestones matched in
//! it (libguestfs boot-analysis style: a timestamp per matching line).

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use regex::Regex;

use crate::timeline::{vmm_marks, MarkSource, Recorder};

/// The patterns matched by default: the kernel banner, the initramfs
/// unpacked (the kernel frees the initrd then), the end of kernel init,
/// and the hand-over to the init process.
pub const DEFAULT_PATTERNS: &[(&str, &str)] = &[
    ("kernel banner", r"Linux version \S+"),
    ("initrd freed", r"Freeing initrd memory"),
    ("free initmem", r"Freeing unused kernel"),
    ("run init", r"Run \S+ as init process"),
];

/// Longest console line kept for matching; longer lines are cut, not lost.
const MAX_LINE: usize = 4096;

/// A named regular expression matched against each console line.
#[derive(Clone, Debug)]
pub struct MilestonePattern {
    pub name: String,
    pub regex: Regex,
}

/// Error for a `--serial-pattern` argument.
#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    /// `--serial-pattern {0:?}` must be NAME=REGEX (for example
    /// "udev=Starting udev")
    #[error("--serial-pattern {0:?} must be NAME=REGEX (for example \"udev=Starting udev\")")]
    Syntax(String),
    /// The regular expression does not compile.
    #[error("--serial-pattern {name:?}: invalid regular expression: {source}")]
    Regex {
        name: String,
        #[source]
        source: regex::Error,
    },
}

impl MilestonePattern {
    pub fn new(name: &str, regex: &str) -> Result<Self, PatternError> {
        Ok(Self {
            name: name.to_string(),
            regex: Regex::new(regex).map_err(|source| PatternError::Regex {
                name: name.to_string(),
                source,
            })?,
        })
    }

    /// Parses `NAME=REGEX`.
    pub fn parse(spec: &str) -> Result<Self, PatternError> {
        let (name, re) = spec
            .split_once('=')
            .filter(|(n, r)| !n.trim().is_empty() && !r.is_empty())
            .ok_or_else(|| PatternError::Syntax(spec.to_string()))?;
        Self::new(name.trim(), re)
    }

    pub fn defaults() -> Vec<Self> {
        DEFAULT_PATTERNS
            .iter()
            .map(|(n, r)| Self::new(n, r).expect("built-in patterns compile"))
            .collect()
    }
}

/// Merges user patterns into the defaults: a user pattern with a default's
/// name replaces it.
pub fn merge_patterns(user: Vec<MilestonePattern>, keep_defaults: bool) -> Vec<MilestonePattern> {
    let mut out: Vec<MilestonePattern> = if keep_defaults {
        MilestonePattern::defaults()
    } else {
        Vec::new()
    };
    for p in user {
        out.retain(|d| d.name != p.name);
        out.push(p);
    }
    out
}

/// A pattern that matched a console line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    pub name: String,
    /// The line's printk timestamp (`[    5.284232] ...`), in
    /// nanoseconds on the guest kernel's clock: when the kernel logged it,
    /// which a slow console shows later.
    pub guest_ns: Option<u64>,
}

impl PartialEq<&str> for Hit {
    fn eq(&self, other: &&str) -> bool {
        self.name == *other
    }
}

/// The printk timestamp a kernel console line starts with, in
/// nanoseconds: `[ SECONDS.MICROSECONDS]` (read as a console log's are:
/// [`crate::kernel_log::console_log`]).
pub fn printk_ns(line: &str) -> Option<u64> {
    let inner = line.strip_prefix('[')?.split_once(']')?.0;
    let frac = inner.split_once('.')?.1;
    if frac.len() != 6 {
        return None;
    }
    crate::kernel_log::console_log::stamp_ns(inner).flatten()
}

/// Splits console bytes into lines and reports the first match of each
/// pattern.
#[derive(Debug)]
pub struct LineMatcher {
    patterns: Vec<(MilestonePattern, bool)>,
    line: Vec<u8>,
}

impl LineMatcher {
    pub fn new(patterns: Vec<MilestonePattern>) -> Self {
        Self {
            patterns: patterns.into_iter().map(|p| (p, false)).collect(),
            line: Vec::new(),
        }
    }

    /// Feeds bytes; returns the names of patterns that matched a line
    /// completed by these bytes (each pattern fires once).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Hit> {
        let mut hits = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                self.finish_line(&mut hits);
            } else if self.line.len() < MAX_LINE {
                self.line.push(b);
            }
        }
        hits
    }

    /// Matches a final line that had no newline.
    pub fn flush(&mut self) -> Vec<Hit> {
        let mut hits = Vec::new();
        if !self.line.is_empty() {
            self.finish_line(&mut hits);
        }
        hits
    }

    fn finish_line(&mut self, hits: &mut Vec<Hit>) {
        let text = String::from_utf8_lossy(&self.line);
        for (p, fired) in self.patterns.iter_mut() {
            if !*fired && p.regex.is_match(&text) {
                *fired = true;
                hits.push(Hit {
                    name: p.name.clone(),
                    guest_ns: printk_ns(&text),
                });
            }
        }
        self.line.clear();
    }
}

/// Guest states recognised from the console that change how the run ends.
#[derive(Debug, Default)]
pub struct ConsoleEvents {
    /// The kernel halted ("reboot: System halted" / "reboot: Power down"):
    /// without ACPI a `poweroff` ends in a halt loop with interrupts off, which
    /// never exits to the VMM.
    pub halted: AtomicBool,
    /// The halt line was "reboot: Power down" (with ACPI the power-off
    /// register write follows it).
    pub power_down: AtomicBool,
    /// When the halt line was seen.
    pub halted_at: Mutex<Option<std::time::Instant>>,
    /// The kernel announced a restart ("reboot: Restarting system"): a
    /// triple fault after it is the reset it asked for (`reboot=t`), not a
    /// crash.
    pub restarting: AtomicBool,
    /// The kernel panicked ("Kernel panic - not syncing").
    pub panicked: AtomicBool,
    /// The panic line, for the report.
    pub panic_line: Mutex<Option<String>>,
    /// The first error writing the console out (a full disk, `/dev/full`);
    /// the guest keeps running, its console bytes are lost.
    pub write_error: Mutex<Option<io::Error>>,
    /// Console bytes that could not be written out.
    pub lost_bytes: std::sync::atomic::AtomicU64,
    /// Keep every line with its host times in `lines` (to align the guest's
    /// clock to the VMM's); off, nothing is kept.
    pub keep_lines: AtomicBool,
    /// The lines kept, at most [`MAX_KEPT_LINES`].
    pub lines: Mutex<Vec<ConsoleLine>>,
}

/// Most console lines kept for clock alignment.
pub const MAX_KEPT_LINES: usize = 100_000;

/// One console line and when the VMM saw its first and last bytes
/// (nanoseconds since VMM start).
#[derive(Clone, Debug, PartialEq)]
pub struct ConsoleLine {
    pub text: String,
    pub first_byte_ns: u64,
    pub last_byte_ns: u64,
}

impl ConsoleEvents {
    /// The console output that was lost, if any: the first error and how
    /// many bytes were dropped.
    pub fn write_failure(&self) -> Option<String> {
        let e = self.write_error.lock().unwrap_or_else(|e| e.into_inner());
        e.as_ref().map(|e| {
            format!(
                "{e} ({} bytes of guest console output lost)",
                self.lost_bytes.load(Ordering::SeqCst)
            )
        })
    }
}

/// Lines that say the kernel halted.
const HALT_PATTERN: &str = r"reboot: (System halted|Power down)";
/// The kernel's panic banner.
const PANIC_PATTERN: &str = r"Kernel panic - not syncing";
/// The kernel's last line before it resets the machine (`reboot`,
/// `kernel_restart()`), with or without a restart command.
const RESTART_PATTERN: &str = r"reboot: Restarting system";

/// The serial device's output: forwards bytes to the user's chosen sink and
/// timestamps the first byte and every milestone.
pub struct ConsoleSink {
    out: Box<dyn Write + Send>,
    matcher: LineMatcher,
    recorder: Arc<Recorder>,
    seen_first_byte: bool,
    events: Arc<ConsoleEvents>,
    state_line: Vec<u8>,
    /// When the first byte of `state_line` arrived.
    state_line_start_ns: u64,
    halt_re: Regex,
    panic_re: Regex,
    restart_re: Regex,
}

impl ConsoleSink {
    pub fn new(
        out: Box<dyn Write + Send>,
        patterns: Vec<MilestonePattern>,
        recorder: Arc<Recorder>,
    ) -> Self {
        Self {
            out,
            matcher: LineMatcher::new(patterns),
            recorder,
            seen_first_byte: false,
            events: Arc::new(ConsoleEvents::default()),
            state_line: Vec::new(),
            state_line_start_ns: 0,
            halt_re: Regex::new(HALT_PATTERN).expect("built-in pattern compiles"),
            panic_re: Regex::new(PANIC_PATTERN).expect("built-in pattern compiles"),
            restart_re: Regex::new(RESTART_PATTERN).expect("built-in pattern compiles"),
        }
    }

    /// Halt and panic flags, shared with the VMM's run loop.
    pub fn events(&self) -> Arc<ConsoleEvents> {
        self.events.clone()
    }

    fn watch_state(&mut self, buf: &[u8]) {
        let keep = self.events.keep_lines.load(Ordering::Relaxed);
        let now = if keep {
            self.recorder.clock().now_ns()
        } else {
            0
        };
        for &b in buf {
            if b != b'\n' {
                if self.state_line.is_empty() {
                    self.state_line_start_ns = now;
                }
                if self.state_line.len() < MAX_LINE {
                    self.state_line.push(b);
                }
                continue;
            }
            let line = String::from_utf8_lossy(&self.state_line).into_owned();
            if keep {
                self.keep_line(&line, now);
            }
            if self.panic_re.is_match(&line) && !self.events.panicked.swap(true, Ordering::SeqCst) {
                let text = line.trim().to_string();
                *self
                    .events
                    .panic_line
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(text);
                self.recorder.guest(
                    "serial: kernel panic".into(),
                    MarkSource::Serial,
                    None,
                    None,
                );
            }
            if self.restart_re.is_match(&line) {
                self.events.restarting.store(true, Ordering::SeqCst);
            }
            if self.halt_re.is_match(&line) && !self.events.halted.load(Ordering::SeqCst) {
                self.events
                    .power_down
                    .store(line.contains("Power down"), Ordering::SeqCst);
                *self
                    .events
                    .halted_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
                self.events.halted.store(true, Ordering::SeqCst);
                self.recorder.guest(
                    "serial: kernel halted".into(),
                    MarkSource::Serial,
                    None,
                    None,
                );
            }
            self.state_line.clear();
        }
    }

    fn keep_line(&self, line: &str, now: u64) {
        let mut lines = self.events.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() < MAX_KEPT_LINES {
            lines.push(ConsoleLine {
                text: line.trim_end_matches('\r').to_string(),
                first_byte_ns: self.state_line_start_ns,
                last_byte_ns: now,
            });
        }
    }

    fn record(&self, hits: Vec<Hit>) {
        for h in hits {
            self.recorder.guest(
                format!("serial: {}", h.name),
                MarkSource::Serial,
                h.guest_ns,
                None,
            );
        }
    }

    /// Matches whatever is left in the line buffer (at shutdown).
    pub fn finish(&mut self) {
        let hits = self.matcher.flush();
        self.record(hits);
        let _ = Write::flush(self);
    }

    /// Keeps the first write error. A reader that went away (a closed pipe,
    /// `| head`) is not one: the console was not wanted any more.
    fn note_write_error(&self, e: io::Error, bytes: usize) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return;
        }
        self.events
            .lost_bytes
            .fetch_add(bytes as u64, Ordering::SeqCst);
        let mut first = self
            .events
            .write_error
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(e);
        }
    }
}

/// The console sink shared by every device that writes the guest's
/// console (the serial port, a virtio console).
#[derive(Clone)]
pub struct SharedConsole(pub Arc<Mutex<ConsoleSink>>);

impl SharedConsole {
    pub fn new(sink: ConsoleSink) -> Self {
        Self(Arc::new(Mutex::new(sink)))
    }

    /// Locks the sink; a panicked writer leaves it usable.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, ConsoleSink> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Write for SharedConsole {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.lock().flush()
    }
}

impl Write for ConsoleSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.seen_first_byte && !buf.is_empty() {
            self.seen_first_byte = true;
            self.recorder.vmm_once(vmm_marks::FIRST_SERIAL_BYTE);
        }
        let hits = self.matcher.feed(buf);
        self.record(hits);
        self.watch_state(buf);
        // A console that cannot be written must not stop the guest: the
        // bytes are dropped, the milestones still recorded, and the error
        // kept for the report.
        let res = self.out.write_all(buf).and_then(|()| {
            if buf.contains(&b'\n') {
                self.out.flush()
            } else {
                Ok(())
            }
        });
        if let Err(e) = res {
            self.note_write_error(e, buf.len());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Err(e) = self.out.flush() {
            self.note_write_error(e, 0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_write_errors_are_kept() {
        let recorder = Arc::new(Recorder::new(crate::timeline::Clock::start()));
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut sink = ConsoleSink::new(Box::new(full), Vec::new(), recorder.clone());
        assert_eq!(sink.write(b"hello\n").unwrap(), 6);
        sink.write_all(b"more").unwrap();
        sink.finish();
        let failure = sink.events().write_failure().expect("an error");
        assert!(failure.contains("No space left"), "{failure}");
        assert!(failure.contains("10 bytes"), "{failure}");
        // A reader that went away is not a loss to report.
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut sink = ConsoleSink::new(Box::new(Closed), Vec::new(), recorder);
        sink.write_all(b"x\n").unwrap();
        assert!(sink.events().write_failure().is_none());
    }

    #[test]
    fn default_patterns_match_real_kernel_lines() {
        let mut m = LineMatcher::new(MilestonePattern::defaults());
        let log = b"[    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org)\n\
[    1.100] Freeing initrd memory: 30444K\n\
[    1.234] Freeing unused kernel image (initmem) memory: 2800K\n\
[    1.300] Run /init as init process\n";
        let hits = m.feed(log);
        assert_eq!(
            hits,
            ["kernel banner", "initrd freed", "free initmem", "run init"]
        );
    }

    #[test]
    fn a_kernel_lines_printk_stamp_goes_with_its_hit() {
        assert_eq!(
            printk_ns("[    5.284232] Freeing initrd memory"),
            Some(5_284_232_000)
        );
        assert_eq!(printk_ns("[12345.000001] x"), Some(12_345_000_001_000));
        for not in [
            "Run /init",
            "[ 5.28] x",
            "[    x.284232] x",
            "[    5.284232 x",
            "[.123456] x",
        ] {
            assert_eq!(printk_ns(not), None, "{not}");
        }
        let mut m = LineMatcher::new(MilestonePattern::defaults());
        let hits =
            m.feed(b"[    5.284232] Freeing initrd memory: 30444K\nRun /init as init process\n");
        assert_eq!(hits[0].guest_ns, Some(5_284_232_000));
        assert_eq!(hits[1].guest_ns, None);
    }

    #[test]
    fn each_pattern_fires_once_and_lines_may_be_split() {
        let mut m = LineMatcher::new(MilestonePattern::defaults());
        assert!(m.feed(b"Run /ini").is_empty());
        assert_eq!(m.feed(b"t as init process\r\n"), ["run init"]);
        assert!(m.feed(b"Run /init as init process\n").is_empty());
    }

    #[test]
    fn unterminated_last_line_matches_on_flush() {
        let mut m = LineMatcher::new(vec![MilestonePattern::parse("done=^bye").unwrap()]);
        assert!(m.feed(b"bye").is_empty());
        assert_eq!(m.flush(), ["done"]);
    }

    #[test]
    fn parse_rejects_bad_specs() {
        assert!(matches!(
            MilestonePattern::parse("nothing"),
            Err(PatternError::Syntax(_))
        ));
        assert!(matches!(
            MilestonePattern::parse("=x"),
            Err(PatternError::Syntax(_))
        ));
        assert!(matches!(
            MilestonePattern::parse("bad=("),
            Err(PatternError::Regex { .. })
        ));
    }

    #[test]
    fn user_pattern_replaces_default_of_same_name() {
        let p = merge_patterns(
            vec![MilestonePattern::parse("run init=^INIT").unwrap()],
            true,
        );
        assert_eq!(p.len(), DEFAULT_PATTERNS.len());
        assert_eq!(p.last().unwrap().regex.as_str(), "^INIT");
        assert_eq!(merge_patterns(vec![], false).len(), 0);
    }
}
