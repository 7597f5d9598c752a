//! The profiled command's console, read for boot milestones: the kernel's
//! banner and the start of init (the patterns of bootscope's own VMM, plus
//! firmware banners), recorded as `serial:` marks when they are read, so
//! a profile of QEMU or another VMM has kernel and userspace phases that
//! match the guest's own console.
//!
//! Where the console is: a file the command names (QEMU's `-serial
//! file:PATH`, Cloud Hypervisor's `--serial file=PATH`), tailed; else the
//! command's standard output, passed through bootscope on a pipe; under
//! `--tui`, the log the command's output goes to.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use bootscope_model::mark::MarkSource;
use bootscope_profiler::Collector;
use bootscope_vmm::console::{Hit, LineMatcher, MilestonePattern};

/// How often a console file is read for new lines: a milestone's time is
/// when it was read, up to this much after the guest wrote it.
pub const FILE_POLL: Duration = Duration::from_millis(20);

/// How long the reader may take to read the last output of a command that
/// has ended, before the profile is finished.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Firmware banners on a serial console (SeaBIOS, OVMF), beside the VMM's
/// default patterns.
const FIRMWARE_PATTERNS: &[(&str, &str)] = &[(
    "firmware banner",
    r"SeaBIOS \(version|UEFI firmware|BdsDxe:|^qboot",
)];

/// The patterns looked for: the VMM's defaults and the firmware banners.
pub fn patterns() -> Vec<MilestonePattern> {
    let mut p = MilestonePattern::defaults();
    p.extend(
        FIRMWARE_PATTERNS
            .iter()
            .map(|(n, r)| MilestonePattern::new(n, r).expect("built-in patterns compile")),
    );
    p
}

/// A console file named on the command line: QEMU's `-serial file:PATH`
/// (also `--serial`), Cloud Hypervisor's `--serial file=PATH`. Both
/// truncate the file when they open it.
pub fn named_console_file(command: &[String]) -> Option<PathBuf> {
    let args = command.get(1..).unwrap_or_default();
    for (_, v) in bootscope_model::argv::flag_values(args, &["-serial", "--serial"]) {
        // QEMU's file backend takes the rest as the path; Cloud
        // Hypervisor's option may go on after a comma.
        let path = v
            .strip_prefix("file:")
            .or_else(|| v.strip_prefix("file=").and_then(|p| p.split(',').next()));
        if let Some(p) = path.filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
    }
    None
}

/// Where the marks go while profiling lasts: taken away (None) before the
/// collector is finished, so a late console line adds nothing.
pub type MarkSlot = Arc<Mutex<Option<Arc<Collector>>>>;

fn record(slot: &MarkSlot, hits: Vec<Hit>, at: Instant) {
    if hits.is_empty() {
        return;
    }
    let guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = guard.as_ref() {
        for h in hits {
            let name = format!("serial: {}", h.name);
            c.add_mark_at(&name, MarkSource::Serial, h.guest_ns, at);
        }
    }
}

/// Which console of a launched command is read, decided before it is
/// launched (a pipe must be its standard output from the start).
pub enum ConsolePlan {
    /// Nothing to read (a followed `--pid`).
    Nothing,
    /// A file: the one the command names, or the `--tui` log (`fresh`).
    File { path: PathBuf, fresh: bool },
    /// The command's standard output, on this pipe.
    Pipe { read: OwnedFd, write: OwnedFd },
}

impl ConsolePlan {
    /// The plan for `command` (none with `--pid`); `log`: where `--tui`
    /// sends the command's output.
    pub fn new(command: &[String], pid: bool, log: Option<&Path>) -> std::io::Result<Self> {
        if pid {
            return Ok(Self::Nothing);
        }
        if let Some(path) = named_console_file(command) {
            return Ok(Self::File { path, fresh: false });
        }
        if let Some(log) = log {
            return Ok(Self::File {
                path: log.to_path_buf(),
                fresh: true,
            });
        }
        let (read, write) = stdout_pipe()?;
        Ok(Self::Pipe { read, write })
    }

    /// Runs `spawn` (which forks the command) with the pipe as standard
    /// output, if the plan has one.
    pub fn spawn<T>(&self, spawn: impl FnOnce() -> T) -> std::io::Result<T> {
        match self {
            Self::Pipe { write, .. } => with_stdout_on(write, spawn),
            _ => Ok(spawn()),
        }
    }

    /// Starts reading, the marks going to `slot`'s collector. The pipe's
    /// write end is closed here: the command holds its own copy.
    pub fn start(self, slot: &MarkSlot) -> std::io::Result<Option<ConsoleReader>> {
        match self {
            Self::Nothing => Ok(None),
            Self::File { path, fresh } => {
                ConsoleReader::tail_file(&path, fresh, slot.clone()).map(Some)
            }
            Self::Pipe { read, write } => {
                drop(write);
                ConsoleReader::pass_through(read, slot.clone()).map(Some)
            }
        }
    }
}

/// The collector back from the slot, once the console reader can no
/// longer add to it; `drain`: a reader to let take in the command's last
/// output first ([`ConsoleReader::drain`]).
pub fn take_collector(
    collector: Arc<Collector>,
    slot: &MarkSlot,
    drain: Option<&ConsoleReader>,
) -> anyhow::Result<Collector> {
    if let Some(r) = drain {
        r.drain(DRAIN_GRACE);
    }
    drop(slot.lock().unwrap_or_else(|e| e.into_inner()).take());
    Arc::try_unwrap(collector)
        .map_err(|_| anyhow::anyhow!("the profile is still in use by the console reader"))
}

/// A console being read on a thread of its own.
pub struct ConsoleReader {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ConsoleReader {
    /// Tails `path` from now on. Unless `fresh` (bootscope made it for
    /// this run), what it holds now is an earlier run's, read only once
    /// the command has truncated or replaced it (a new inode, another
    /// modification time, a smaller size), from its start.
    pub fn tail_file(path: &Path, fresh: bool, slot: MarkSlot) -> std::io::Result<Self> {
        let before = if fresh { None } else { FileState::of(path) };
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (path.to_path_buf(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("bootscope-console".into())
            .spawn(move || tail(&p, before, &s, &slot))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Reads `read_end` (the command's standard output) to its end,
    /// passing every byte on to bootscope's standard output as it comes.
    pub fn pass_through(read_end: OwnedFd, slot: MarkSlot) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("bootscope-console".into())
            .spawn(move || pass_through(read_end, &slot))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Lets the reader take in what the command wrote before it ended (a
    /// file's tail reads once more and stops; a pipe is read to its end)
    /// while the marks can still go to the profile: waits up to `grace`.
    pub fn drain(&self, grace: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        let Some(t) = self.thread.as_ref() else {
            return;
        };
        let deadline = Instant::now() + grace;
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops a file's tail (after one last read) or waits up to `grace`
    /// for a pipe's end (its writers gone); a pipe something still holds
    /// open is left to the reading thread.
    pub fn finish(mut self, grace: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        let Some(t) = self.thread.take() else { return };
        let deadline = Instant::now() + grace;
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
}

/// A pipe for the command's standard output: (read end, write end).
pub fn stdout_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and owned by
    // nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Runs `spawn` with standard output on `write_end`, so the child it forks
/// writes there; ours is put back before returning. Call it while
/// bootscope has no other thread writing to standard output.
pub fn with_stdout_on<T>(write_end: &OwnedFd, spawn: impl FnOnce() -> T) -> std::io::Result<T> {
    let _ = std::io::stdout().flush();
    // SAFETY: dup of standard output; -1 on failure, checked.
    let saved = unsafe { libc::dup(libc::STDOUT_FILENO) };
    if saved < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: saved was just returned by dup and is owned here.
    let saved = unsafe { OwnedFd::from_raw_fd(saved) };
    // SAFETY: both descriptors are open for the call. dup2's copy is not
    // close-on-exec, so the child keeps it as its standard output.
    if unsafe { libc::dup2(write_end.as_raw_fd(), libc::STDOUT_FILENO) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let result = spawn();
    // SAFETY: saved is the original standard output, open until dropped.
    unsafe { libc::dup2(saved.as_raw_fd(), libc::STDOUT_FILENO) };
    Ok(result)
}

fn pass_through(read_end: OwnedFd, slot: &MarkSlot) {
    let mut file = File::from(read_end);
    let mut matcher = LineMatcher::new(patterns());
    let mut buf = [0u8; 8192];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let at = Instant::now();
        // Standard output closed (a pipe's reader gone) or full loses the
        // copy, not the reading: the command must not block on a full
        // pipe (src/stdout.rs: a full one is reported at the end).
        crate::stdout::pass_on(&buf[..n]);
        record(slot, matcher.feed(&buf[..n]), at);
    }
    record(slot, matcher.flush(), Instant::now());
}

/// What a console file was like when profiling began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileState {
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileState {
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Self {
            ino: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
        })
    }
}

/// Where to start reading a console file that is `now`, given what it was
/// (`before`): None while it still holds only the earlier run's bytes.
fn start_offset(before: Option<FileState>, now: FileState) -> Option<u64> {
    let Some(b) = before else { return Some(0) };
    let rewritten = now.ino != b.ino || now.modified != b.modified || now.len < b.len;
    rewritten.then_some(0)
}

fn tail(path: &Path, before: Option<FileState>, stop: &AtomicBool, slot: &MarkSlot) {
    let mut matcher = LineMatcher::new(patterns());
    let mut reading: Option<(File, u64)> = None;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let last = stop.load(Ordering::SeqCst);
        if reading.is_none() {
            if let Some(offset) = FileState::of(path).and_then(|n| start_offset(before, n)) {
                reading = File::open(path).ok().map(|f| (f, offset));
            }
        }
        if let Some((f, offset)) = reading.as_mut() {
            // A file truncated again under us is read from its start.
            if f.metadata().is_ok_and(|m| m.len() < *offset) {
                *offset = 0;
            }
            if f.seek(SeekFrom::Start(*offset)).is_ok() {
                loop {
                    match f.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            *offset += n as u64;
                            record(slot, matcher.feed(&buf[..n]), Instant::now());
                        }
                    }
                }
            }
        }
        if last {
            record(slot, matcher.flush(), Instant::now());
            return;
        }
        std::thread::sleep(FILE_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn console_files_named_on_the_command_line() {
        let f = |s| named_console_file(&cmd(s));
        assert_eq!(
            f("qemu -M microvm -serial file:/tmp/c.log -m 1G"),
            Some(PathBuf::from("/tmp/c.log"))
        );
        assert_eq!(
            f("cloud-hypervisor --serial file=/tmp/s,x=1"),
            Some(PathBuf::from("/tmp/s"))
        );
        assert_eq!(f("qemu -serial=file:/x"), Some(PathBuf::from("/x")));
        assert_eq!(f("qemu -serial stdio"), None);
        assert_eq!(f("qemu -serial file:"), None);
        assert_eq!(f("qemu -serial"), None);
        // The program's own name is not an option.
        assert_eq!(f("-serial file:/x"), None);
    }

    #[test]
    fn an_earlier_runs_file_is_not_read_until_rewritten() {
        let t = SystemTime::UNIX_EPOCH;
        let st = |ino, len, s| FileState {
            ino,
            len,
            modified: Some(t + Duration::from_secs(s)),
        };
        assert_eq!(start_offset(None, st(1, 5, 0)), Some(0));
        let old = Some(st(1, 100, 10));
        assert_eq!(start_offset(old, st(1, 100, 10)), None);
        assert_eq!(start_offset(old, st(1, 100, 11)), Some(0));
        assert_eq!(start_offset(old, st(1, 3, 10)), Some(0));
        assert_eq!(start_offset(old, st(2, 100, 10)), Some(0));
    }

    #[test]
    fn patterns_find_the_milestones() {
        let mut m = LineMatcher::new(patterns());
        let hits = m.feed(
            b"SeaBIOS (version 1.16.2-debian-1.16.2-1)\n\
              [    0.000000] Linux version 6.1.0-40-amd64 (debian-kernel@lists.debian.org)\n\
              [    1.2] Run /init as init process\n",
        );
        assert_eq!(hits, ["firmware banner", "kernel banner", "run init"]);
    }
}
