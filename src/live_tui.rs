//! The live terminal UI of `bootscope run --tui` and `bootscope profile
//! --tui`: the adapters that hand the TUI (`tui/`) its profiles while the
//! VM runs or the profiled process is followed.
//!
//! - `profile --tui`: the collector's snapshots; a launched command's
//!   standard input is /dev/null and its output goes to a file in a
//!   temporary directory, tailed in the console pane, so it neither reads
//!   the keys nor writes over the screen.
//! - `run --tui`: the VM runs on a thread of its own. With the eBPF
//!   collector on this process (`run` starts one where BPF works) the TUI
//!   shows its snapshots; without it, the profiler's procfs profile of
//!   this process (the VMM's own marks, `/proc/self`, KVM's exit count). A console on standard output goes to a file instead,
//!   tailed in the console pane.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use bootscope_profiler::guest_symbols::SymbolTable;
use bootscope_profiler::launch::HeldCommand;
use bootscope_profiler::procfs::ProcfsProfile;
use bootscope_profiler::profile::{Mark, Profile};
use bootscope_profiler::Collector;
use bootscope_tui::{Console, ProfileSource, TuiOptions};
use bootscope_vmm::kernel_log::InitcallsDoc;
use bootscope_vmm::timeline::{vmm_marks, Recorder};
use bootscope_vmm::vm::{self, RunReport, VmConfig, VmError};

/// The `--refresh-ms` default.
pub const DEFAULT_REFRESH_MS: u64 = 100;

/// True when `--tui` cannot run: standard output is not a terminal.
pub fn no_terminal(tui: bool) -> bool {
    tui && !bootscope_tui::term::stdout_is_terminal()
}

fn options(refresh_ms: u64) -> TuiOptions {
    TuiOptions {
        refresh: Duration::from_millis(refresh_ms.max(10)),
        ..TuiOptions::default()
    }
}

/// A private directory for what the TUI keeps off the screen: made once
/// per process with an unpredictable name and mode 0700 (so nobody else can
/// plant a link in it), and kept afterwards for a look at the logs.
fn scratch_dir() -> Result<PathBuf> {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(d) = DIR.get() {
        return Ok(d.clone());
    }
    let dir = bootscope_model::output::private_temp_dir("bootscope-tui-")
        .context("cannot create a private directory under the temporary directory")?
        .keep();
    Ok(DIR.get_or_init(|| dir).clone())
}

/// A console line for the TUI's console pane: its terminal escape
/// sequences (a guest's colours, cursor moves, titles) taken out, a tab as
/// a space, a carriage return dropped, and any other control character
/// shown escaped by the text rule (`bootscope_model::text::printable`).
fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                // CSI: parameters up to a final byte in @..~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: up to BEL or ESC \.
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\x07' || (c == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\t' => out.push(' '),
            '\r' => {}
            c if c.is_control() => {
                out.push_str(&bootscope_model::text::printable(
                    c.encode_utf8(&mut [0; 4]),
                ));
            }
            c => out.push(c),
        }
    }
    out
}

/// The last `n` lines of a text file (reads at most its last 16 KiB).
fn tail_lines(path: &Path, n: usize) -> Vec<String> {
    const WINDOW: u64 = 16 * 1024;
    let Ok(mut f) = File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(WINDOW);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::new();
    if f.take(WINDOW).read_to_end(&mut buf).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<String> = text
        .lines()
        // A partial first line of the window is not shown.
        .skip(usize::from(start > 0))
        .map(printable)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let keep = lines.len().saturating_sub(n);
    lines.drain(..keep);
    lines
}

// ---- bootscope profile --tui -------------------------------------------

/// Where a launched command's output goes under `--tui`.
pub fn command_log() -> Result<PathBuf> {
    Ok(scratch_dir()?.join("command.log"))
}

/// Runs `spawn` with standard input on /dev/null and standard output and
/// error on `log`, so the child it forks inherits those; ours are put
/// back before returning. Call it while bootscope has no other thread that
/// writes to them.
pub fn with_child_stdio<T>(log: Option<&Path>, spawn: impl FnOnce() -> T) -> Result<T> {
    let Some(log) = log else {
        return Ok(spawn());
    };
    let null = File::open("/dev/null").context("cannot open /dev/null")?;
    let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let targets = [
        (libc::STDIN_FILENO, null.as_raw_fd()),
        (libc::STDOUT_FILENO, out.as_raw_fd()),
        (libc::STDERR_FILENO, out.as_raw_fd()),
    ];
    let mut saved = Vec::new();
    for (fd, _) in targets {
        // SAFETY: dup of one of the standard descriptors; returns a new
        // descriptor (closed below) or -1.
        let copy = unsafe { libc::dup(fd) };
        if copy < 0 {
            let e = std::io::Error::last_os_error();
            for (_, c) in saved {
                // SAFETY: `c` is a descriptor dup returned above.
                unsafe { libc::close(c) };
            }
            return Err(anyhow::Error::new(e).context("cannot save the standard descriptors"));
        }
        saved.push((fd, copy));
    }
    for (fd, to) in targets {
        // SAFETY: both descriptors are open (`to` is owned by a File that
        // lives to the end of this function).
        unsafe { libc::dup2(to, fd) };
    }
    let result = spawn();
    for (fd, copy) in saved {
        // SAFETY: `copy` is the saved original of `fd`, open until closed
        // here, right after it is put back.
        unsafe {
            libc::dup2(copy, fd);
            libc::close(copy);
        }
    }
    Ok(result)
}

/// `bootscope profile --tui`: the collector, and the launched command or
/// the followed pid.
struct ProfileCmdSource<'a> {
    collector: &'a Collector,
    held: Option<&'a mut HeldCommand>,
    started: Instant,
    duration: Option<Duration>,
    title: String,
    log: Option<PathBuf>,
    exit_code: Option<i32>,
}

impl ProfileSource for ProfileCmdSource<'_> {
    fn snapshot(&mut self) -> Profile {
        let mut p = self.collector.snapshot();
        if p.target.exit_code.is_none() {
            p.target.exit_code = self.exit_code;
        }
        p
    }

    fn finished(&mut self) -> bool {
        if self.duration.is_some_and(|d| self.started.elapsed() >= d) {
            return true;
        }
        match self.held.as_deref_mut() {
            Some(h) => match h.try_wait() {
                Ok(Some(s)) => {
                    use std::os::unix::process::ExitStatusExt;
                    self.exit_code =
                        Some(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)));
                    true
                }
                Ok(None) => false,
                Err(_) => true,
            },
            None => self.collector.target_ended(),
        }
    }

    fn title(&self) -> String {
        self.title.clone()
    }

    fn console(&mut self, max_lines: usize) -> Option<Console> {
        let log = self.log.as_ref()?;
        Some(Console {
            title: format!("Command output: {}", log.display()),
            lines: tail_lines(log, max_lines),
        })
    }
}

/// Shows the TUI while `bootscope profile` runs. Returns true when the
/// target ended (or `--duration` elapsed) before the user quit, false when
/// the user quit first (the caller then stops a launched command as on
/// Ctrl-C).
pub fn profile_live(
    collector: &Collector,
    held: Option<&mut HeldCommand>,
    started: Instant,
    duration: Option<Duration>,
    command: &[String],
    log: Option<&Path>,
    refresh_ms: u64,
) -> Result<bool> {
    let pid = collector.target_pid();
    let title = if command.is_empty() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        format!("pid {pid} ({})", comm.trim())
    } else {
        let name = Path::new(&command[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("{name} (pid {pid})")
    };
    let mut source = ProfileCmdSource {
        collector,
        held,
        started,
        duration,
        title,
        log: log.map(Path::to_path_buf),
        exit_code: None,
    };
    bootscope_tui::run_live(&mut source, options(refresh_ms)).context("the TUI failed")?;
    let ended = source.finished();
    if let Some(l) = log {
        eprintln!("bootscope: the command's output is in {}", l.display());
    }
    Ok(ended)
}

// ---- bootscope run --tui -----------------------------------------------

/// Where the guest console goes under `--tui`.
pub struct TuiConsole {
    /// The `--serial` value to use: a file instead of stdout under `--tui`.
    pub serial: String,
    /// The console was moved off standard output.
    pub redirected: bool,
}

impl TuiConsole {
    /// `--serial stdout` becomes a file in a temporary directory under
    /// `--tui`; anything else stays.
    pub fn new(tui: bool, serial: &str) -> Result<Self> {
        if tui && matches!(serial, "stdout" | "-") {
            let path = scratch_dir()?.join("console.log");
            return Ok(Self {
                serial: path.display().to_string(),
                redirected: true,
            });
        }
        Ok(Self {
            serial: serial.to_string(),
            redirected: false,
        })
    }

    fn file(&self) -> Option<PathBuf> {
        (!matches!(self.serial.as_str(), "stdout" | "-" | "null"))
            .then(|| PathBuf::from(&self.serial))
    }
}

/// `bootscope run --tui`: the VM thread, and the collector or the procfs
/// profile.
struct RunSource<'a> {
    recorder: Arc<Recorder>,
    /// Names the exit sites of every snapshot (`run --tui --exit-sites`).
    symbols: Option<&'a SymbolTable>,
    collector: Option<Arc<Collector>>,
    procfs: Option<ProcfsProfile>,
    vm: JoinHandle<Result<RunReport, VmError>>,
    title: String,
    console: Option<PathBuf>,
    redirected: bool,
    /// The run's initcalls (`--initcalls`), left here by the VM thread
    /// when the guest stopped.
    initcalls: Arc<Mutex<Option<InitcallsDoc>>>,
    /// A systemd guest's units, read by the VM thread when the guest
    /// stopped (docs/guest.md).
    units: Arc<Mutex<Option<bootscope_model::units::UnitsDoc>>>,
}

impl ProfileSource for RunSource<'_> {
    fn snapshot(&mut self) -> Profile {
        match (&self.collector, &mut self.procfs) {
            (Some(c), _) => {
                let mut p = c.snapshot();
                if let (Some(t), Some(sites)) = (self.symbols, p.exits.sites.as_mut()) {
                    t.annotate(sites);
                }
                p
            }
            (None, Some(p)) => {
                let now = self.recorder.clock().now_ns();
                let pid = std::process::id();
                let marks = self
                    .recorder
                    .snapshot()
                    .into_iter()
                    .map(|m| Mark {
                        source: m.source,
                        name: m.name,
                        t_ns: m.t_ns,
                        value: m.value,
                        tgid: Some(pid),
                        guest_rip: None,
                    })
                    .collect();
                p.build(
                    now,
                    marks,
                    "the eBPF profiler is not running (not root, --no-profile, or it could not start)",
                )
            }
            (None, None) => Profile::new(),
        }
    }

    fn finished(&mut self) -> bool {
        self.vm.is_finished()
    }

    fn title(&self) -> String {
        self.title.clone()
    }

    fn console(&mut self, max_lines: usize) -> Option<Console> {
        let path = self.console.as_ref()?;
        Some(Console {
            title: format!(
                "Guest console{}: {}",
                if self.redirected {
                    " (moved off the screen)"
                } else {
                    ""
                },
                path.display()
            ),
            lines: tail_lines(path, max_lines),
        })
    }

    /// The initcalls with what the profiler counted in each (or, without
    /// it, the port I/O exits the VMM counted), as the timeline will have
    /// them.
    fn initcalls(&mut self) -> Option<bootscope_tui::Initcalls> {
        let mut doc = self
            .initcalls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        if let Some(c) = &self.collector {
            let samples = c.snapshot().samples;
            bootscope_profiler::initcalls::attribute(&mut doc, c.time_slots().as_ref(), &samples);
        }
        bootscope_tui::Initcalls::from_json(&serde_json::to_value(&doc).ok()?)
    }

    fn units(&mut self) -> Option<bootscope_tui::units::Units> {
        let doc = self
            .units
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        bootscope_tui::units::Units::from_doc(&doc)
    }
}

/// Runs the VM on its own thread under the TUI; returns what `vm::run`
/// returned. If the user quits first, the guest is stopped.
pub fn run_vm(
    mut cfg: VmConfig,
    recorder: &Arc<Recorder>,
    collector: Option<Arc<Collector>>,
    console: &TuiConsole,
    refresh_ms: u64,
    symbols: Option<&SymbolTable>,
    units_probe: Option<&bootscope_vmm::units::RecordProbe>,
) -> Result<Result<RunReport, VmError>> {
    let kernel = cfg
        .kernel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "no kernel".into());
    let procfs = collector
        .is_none()
        .then(|| ProcfsProfile::new(crate::common::command_line()));
    let vm_recorder = recorder.clone();
    let initcalls = Arc::new(Mutex::new(None));
    let vm_initcalls = initcalls.clone();
    let units = Arc::new(Mutex::new(None));
    let vm_units = units.clone();
    let units_probe = units_probe.cloned();
    let tool = cfg.host_tool.clone();
    let stop = cfg
        .stop
        .get_or_insert_with(|| Arc::new(std::sync::atomic::AtomicBool::new(false)))
        .clone();
    let vm = std::thread::Builder::new()
        .name("bootscope-vm".into())
        .spawn(move || {
            let report = vm::run(cfg, vm_recorder.clone());
            // The VMM is done now, however long the final screen stays.
            vm_recorder.vmm_once(vmm_marks::VMM_EXIT);
            if let Ok(r) = &report {
                *vm_initcalls.lock().unwrap_or_else(|e| e.into_inner()) =
                    r.timeline.initcalls.clone();
                // The units as the run's timeline will have them.
                if let Some(probe) = units_probe {
                    let mut doc = r.timeline.clone();
                    doc.marks = vm_recorder.snapshot();
                    probe.after_boot(&mut doc, tool.as_ref());
                    *vm_units.lock().unwrap_or_else(|e| e.into_inner()) = doc.units;
                }
            }
            report
        })
        .context("cannot start the VM thread")?;
    let mut source = RunSource {
        recorder: recorder.clone(),
        symbols,
        collector,
        procfs,
        vm,
        title: format!("bootscope run {kernel} (pid {})", std::process::id()),
        console: console.file(),
        redirected: console.redirected,
        initcalls,
        units,
    };
    let shown = bootscope_tui::run_live(&mut source, options(refresh_ms));
    // The collector must have one owner again before the run finishes it.
    let RunSource { vm, collector, .. } = source;
    drop(collector);
    if !vm.is_finished() {
        eprintln!("bootscope: stopping the guest (quit before it ended)");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    let report = vm
        .join()
        .map_err(|_| anyhow::anyhow!("the VM thread panicked"))?;
    shown.context("the TUI failed")?;
    if console.redirected {
        eprintln!("bootscope: the guest console is in {}", console.serial);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_files() {
        let dir = std::env::temp_dir().join(format!("bootscope-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("log");
        std::fs::write(&p, "a\r\nb\n\n\x1b[2Jc\nd").unwrap();
        assert_eq!(tail_lines(&p, 2), ["c", "d"].map(String::from));
        assert_eq!(tail_lines(&p, 9), ["a", "b", "c", "d"].map(String::from));
        let big: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&p, big).unwrap();
        assert_eq!(tail_lines(&p, 1), ["line 4999"]);
        assert!(tail_lines(&dir.join("none"), 3).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn escape_sequences_are_dropped() {
        assert_eq!(
            printable("q\x1b[K\x1b[Dqu\x1b[K\x1b[D\x1b[Dquit\x1b[K"),
            "qququit"
        );
        assert_eq!(printable("\x1b]0;title\x07ok\x1b]2;t\x1b\\!"), "ok!");
        assert_eq!(printable("\x1b[1;31mred\x1b[0m\tx"), "red x");
        assert_eq!(printable("plain µs"), "plain µs");
        assert_eq!(printable("a\x07b\x08c\r"), "a\\u{07}b\\u{08}c");
    }

    #[test]
    fn console_moves_off_stdout_only_under_tui() {
        let c = TuiConsole::new(false, "stdout").unwrap();
        assert_eq!((c.serial.as_str(), c.redirected), ("stdout", false));
        assert!(c.file().is_none());
        let c = TuiConsole::new(true, "null").unwrap();
        assert!(c.file().is_none() && !c.redirected);
        let c = TuiConsole::new(true, "/tmp/x.log").unwrap();
        assert_eq!(c.file(), Some(PathBuf::from("/tmp/x.log")));
        let c = TuiConsole::new(true, "-").unwrap();
        assert!(c.redirected && c.serial.ends_with("console.log"));
    }
}
