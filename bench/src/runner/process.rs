//! One process of a benchmark run: spawned in its own process group,
//! timed from spawn to exit, its standard output watched for console
//! patterns, the tail of its standard error kept, stopped on a timeout or a
//! signal.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::ConsolePattern;
use crate::error::BenchError;

/// Lines of a failed run's standard error kept for its error message.
const STDERR_TAIL_LINES: usize = 12;

/// How long the output readers may lag behind the process's exit (a
/// grandchild that keeps the pipe open must not stall the benchmark).
const READER_GRACE: Duration = Duration::from_secs(5);

/// What running one process gave.
#[derive(Debug, Default)]
pub struct Execution {
    /// Exit status; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// Spawn to exit.
    pub wall: Duration,
    /// Spawn to the first line of standard output matching each pattern.
    pub console: BTreeMap<String, Duration>,
    pub timed_out: bool,
    /// The last lines of standard error.
    pub stderr_tail: String,
    /// The memory of the run's processes (its process group, summed) when
    /// its console first matched the pattern named `userspace`.
    pub memory: Option<bootscope_model::smaps::MemoryUse>,
}

/// How long a stopped run has between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long what a run left running in its process group has between
/// SIGTERM and SIGKILL.
const GROUP_GRACE: Duration = Duration::from_secs(1);

/// What the console reader saw: when each pattern first matched, and the
/// memory of the run's processes at the userspace pattern.
type ConsoleSeen = (
    BTreeMap<String, Duration>,
    Option<bootscope_model::smaps::MemoryUse>,
);

/// Reads the child's standard output on a thread, noting when each
/// pattern first matched (from `start`), and at the first match of the
/// [`USERSPACE_PATTERN`] the memory of process group `pgid`; the receiver
/// gets them at its end.
fn read_console(
    stdout: Option<std::process::ChildStdout>,
    patterns: &[ConsolePattern],
    start: Instant,
    pgid: u32,
) -> Result<mpsc::Receiver<ConsoleSeen>, BenchError> {
    let (console_tx, console_rx) = mpsc::channel();
    let pats = patterns.to_vec();
    std::thread::Builder::new()
        .name("bench-stdout".into())
        .spawn(move || {
            let mut seen = BTreeMap::new();
            let mut memory = None;
            if let Some(out) = stdout {
                let mut reader = BufReader::new(out);
                let mut line = Vec::new();
                while reader
                    .read_until(b'\n', &mut line)
                    .map(|n| n > 0)
                    .unwrap_or(false)
                {
                    let at = start.elapsed();
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end_matches(['\n', '\r']);
                    for p in &pats {
                        if !seen.contains_key(&p.name) && p.regex.is_match(text) {
                            seen.insert(p.name.clone(), at);
                            if p.name == USERSPACE_PATTERN {
                                memory = group_memory(pgid);
                            }
                        }
                    }
                    line.clear();
                }
            }
            let _ = console_tx.send((seen, memory));
        })
        .map_err(|source| BenchError::Spawn {
            program: "a reader thread".into(),
            source,
        })?;
    Ok(console_rx)
}

/// Reads the child's standard error on a thread; the receiver gets its
/// last lines at its end.
fn read_stderr_tail(
    stderr: Option<std::process::ChildStderr>,
) -> Result<mpsc::Receiver<String>, BenchError> {
    let (err_tx, err_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("bench-stderr".into())
        .spawn(move || {
            let mut text = String::new();
            if let Some(mut err) = stderr {
                let mut buf = Vec::new();
                let _ = err.read_to_end(&mut buf);
                text = String::from_utf8_lossy(&buf).into_owned();
            }
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].join("\n");
            let _ = err_tx.send(tail);
        })
        .map_err(|source| BenchError::Spawn {
            program: "a reader thread".into(),
            source,
        })?;
    Ok(err_rx)
}

/// Runs `argv` with standard input closed, timing it and watching its
/// standard output for `patterns`. Once `stop` is set the process gets
/// SIGTERM (SIGKILL after [`STOP_GRACE`]) and is waited for.
pub fn execute(
    argv: &[OsString],
    patterns: &[ConsolePattern],
    timeout: Duration,
    stop: Option<&AtomicBool>,
) -> Result<Execution, BenchError> {
    let program = argv
        .first()
        .ok_or_else(|| BenchError::Usage("empty command".into()))?;
    let mut cmd = Command::new(program);
    // A process group of its own: a stopped or overstaying run is ended
    // with everything it started (a script's QEMU), and what it leaves
    // behind when it exits is ended too.
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| BenchError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    })?;
    let pid = child.id();
    let listed = bootscope_model::proc::ListedGroup::new(pid);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();

    let console_rx = read_console(stdout, patterns, start, pid)?;
    let err_rx = read_stderr_tail(stderr)?;
    let (exit_tx, exit_rx) = mpsc::channel::<(std::io::Result<ExitStatus>, Instant)>();
    std::thread::Builder::new()
        .name("bench-wait".into())
        .spawn(move || {
            let status = child.wait();
            let _ = exit_tx.send((status, Instant::now()));
        })
        .map_err(|source| BenchError::Spawn {
            program: "a waiter thread".into(),
            source,
        })?;
    let mut timed_out = false;
    let mut stopping: Option<Instant> = None;
    let (status, ended) = loop {
        match exit_rx.recv_timeout(Duration::from_millis(50)) {
            Ok(r) => break r,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break (
                    Err(std::io::Error::other("waiter vanished")),
                    Instant::now(),
                )
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !timed_out && start.elapsed() >= timeout {
            timed_out = true;
            signal_group(pid, libc::SIGKILL);
        }
        match stopping {
            None if stop.is_some_and(|s| s.load(Ordering::SeqCst)) => {
                stopping = Some(Instant::now());
                signal_group(pid, libc::SIGTERM);
            }
            Some(at) if at.elapsed() >= STOP_GRACE => signal_group(pid, libc::SIGKILL),
            _ => {}
        }
    };
    // Nothing of the run outlives it.
    bootscope_model::proc::end_group(pid, GROUP_GRACE);
    drop(listed);
    let status = status.map_err(|source| BenchError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    })?;
    let wall = ended.duration_since(start);
    // A line read after the exit was written before it: the reader thread
    // merely woke up late.
    let (console, memory) = console_rx.recv_timeout(READER_GRACE).unwrap_or_default();
    let console = console
        .into_iter()
        .map(|(name, t): (String, Duration)| (name, t.min(wall)))
        .collect();
    let stderr_tail = err_rx.recv_timeout(READER_GRACE).unwrap_or_default();
    Ok(Execution {
        exit_code: status.code(),
        wall,
        console,
        timed_out,
        stderr_tail,
        memory,
    })
}

/// Sends `sig` to a run that overstayed or is being stopped: to its whole
/// process group, whose leader (our child) has not been reaped yet (the
/// waiter thread is still blocked in wait), so the number names no other
/// group.
fn signal_group(pgid: u32, sig: libc::c_int) {
    bootscope_model::proc::signal_group(pgid, sig);
}

/// The console pattern whose first match is the userspace moment of a
/// command's boot: bench then reads the memory of its processes.
pub const USERSPACE_PATTERN: &str = "userspace";

/// The memory of process group `pgid`'s live processes, summed; `None`
/// when none could be read.
pub fn group_memory(pgid: u32) -> Option<bootscope_model::smaps::MemoryUse> {
    use bootscope_model::smaps::MemoryUse;
    bootscope_model::proc::group_members(pgid)
        .into_iter()
        .filter_map(|pid| MemoryUse::of_pid(pid).ok())
        .reduce(MemoryUse::plus)
}
