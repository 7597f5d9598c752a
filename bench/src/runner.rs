//! Runs the boots of a benchmark: each as its own process (`bootscope run
//! ... --timeline FILE`, or any other command), timed from spawn to exit,
//! its standard output watched for console patterns, its timeline (and
//! profile, with `--profile`) read afterwards.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use regex::Regex;

use crate::doc::{BenchDoc, ConfigKind, ConfigResult, Machine, RunRecord, Settings};
use crate::error::BenchError;
use crate::metrics;
use bootscope_model::bench::StormRecord;

/// Console lines timed by default: the kernel banner and the start of init
/// (the kernel prints the latter at info level: not with `quiet`).
pub const DEFAULT_CONSOLE_PATTERNS: [&str; 2] = [
    r"kernel banner=Linux version \S+",
    r"run init=Run \S+ as init process",
];

/// Lines of a failed run's standard error kept for its error message.
const STDERR_TAIL_LINES: usize = 12;

/// How long the output readers may lag behind the process's exit (a
/// grandchild that keeps the pipe open must not stall the benchmark).
const READER_GRACE: Duration = Duration::from_secs(5);

/// A console milestone: the first line of standard output it matches.
#[derive(Debug, Clone)]
pub struct ConsolePattern {
    pub name: String,
    pub regex: Regex,
}

impl ConsolePattern {
    /// Parses `NAME=REGEX`.
    pub fn parse(spec: &str) -> Result<Self, BenchError> {
        let (name, re) = spec.split_once('=').ok_or_else(|| {
            BenchError::Usage(format!(
                "console pattern {spec:?}: write NAME=REGEX (for example \"init=Run /init\")"
            ))
        })?;
        if name.trim().is_empty() {
            return Err(BenchError::Usage(format!(
                "console pattern {spec:?} has an empty NAME"
            )));
        }
        let regex = Regex::new(re).map_err(|e| {
            BenchError::Usage(format!(
                "console pattern {spec:?}: bad regular expression: {e}"
            ))
        })?;
        Ok(Self {
            name: name.trim().into(),
            regex,
        })
    }

    /// Back to `NAME=REGEX`.
    pub fn spec(&self) -> String {
        format!("{}={}", self.name, self.regex.as_str())
    }
}

/// What one configuration runs.
#[derive(Debug, Clone)]
pub enum Side {
    /// `bootscope run ARGS`.
    Bootscope(Vec<OsString>),
    /// Any command: program and arguments.
    Command(Vec<OsString>),
}

/// A configuration to benchmark.
#[derive(Debug, Clone)]
pub struct ConfigPlan {
    pub label: String,
    pub side: Side,
}

/// Everything a benchmark needs.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// The bootscope executable (the running one).
    pub exe: PathBuf,
    /// One or two configurations.
    pub configs: Vec<ConfigPlan>,
    pub runs: u32,
    pub warmup: u32,
    /// Profile every run for exit reasons and faults: `bootscope run
    /// --output` where `run` profiles itself, else (and for other commands)
    /// wrapped in `bootscope profile`.
    pub profile: bool,
    /// This `bootscope run` profiles itself unless told `--no-profile`, and
    /// writes that profile with `--output`. Runs get `--no-profile` unless
    /// `profile` is set, so a benchmark measures the boot alone.
    pub run_profiles_itself: bool,
    pub console_patterns: Vec<ConsolePattern>,
    /// A run still going after this long is killed and counted as failed.
    pub run_timeout: Duration,
    /// Directory for the runs' timelines and profiles.
    pub work_dir: PathBuf,
    pub machine: Machine,
    /// Set from elsewhere (a signal handler) to stop: the run under way is
    /// stopped (SIGTERM, SIGKILL after a grace period) and left out, and
    /// `run` returns the runs that finished.
    pub stop: Option<Arc<AtomicBool>>,
    /// `--parallel N`: each round boots N VMs of a configuration at once
    /// (a storm, [`crate::storm`]), after one alone when N > 1.
    pub parallel: Option<u32>,
}

/// One configuration's runs of one round, and its storm (`--parallel`).
type RoundRuns = (Vec<RunRecord>, Option<StormRecord>);

/// Reported after every run.
pub struct Progress<'a> {
    /// Runs finished so far, this one included.
    pub done: usize,
    pub total: usize,
    pub label: &'a str,
    pub run: &'a RunRecord,
    /// The storm this run ended, after its last VM's run (`--parallel`).
    pub storm: Option<&'a StormRecord>,
    /// Warm-up rounds, then measured rounds.
    pub rounds: u32,
    pub warmup_rounds: u32,
}

impl BenchPlan {
    /// Checks the plan before anything runs.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.runs == 0 {
            return Err(BenchError::Usage("--runs must be at least 1".into()));
        }
        self.validate_parallel()?;
        if self.configs.is_empty() || self.configs.len() > 2 {
            return Err(BenchError::Usage(
                "give one configuration, or two to interleave (--vs / --vs-command)".into(),
            ));
        }
        let mut labels: Vec<&str> = self.configs.iter().map(|c| c.label.as_str()).collect();
        labels.dedup();
        if labels.len() != self.configs.len() {
            return Err(BenchError::Usage(format!(
                "the two configurations need different labels, not both {:?}",
                labels[0]
            )));
        }
        for c in &self.configs {
            match &c.side {
                Side::Bootscope(args) => {
                    for a in args {
                        let s = a.to_string_lossy();
                        let owned = ["--timeline", "--output", "-o"]
                            .into_iter()
                            .find(|f| s == *f || s.starts_with(&format!("{f}=")));
                        if let Some(flag) = owned {
                            return Err(BenchError::Usage(format!(
                                "configuration {}: leave out {flag}: bench gives every run its own \
                                 timeline (and profile, with bench --profile); bench --output \
                                 writes the results",
                                c.label
                            )));
                        }
                    }
                }
                Side::Command(argv) if argv.is_empty() => {
                    return Err(BenchError::Usage(format!(
                        "configuration {}: --vs-command needs a program to run",
                        c.label
                    )))
                }
                Side::Command(_) => {}
            }
        }
        Ok(())
    }

    /// Runs the benchmark: `warmup` rounds, then `runs` rounds; with two
    /// configurations each round runs both, alternating which goes first.
    pub fn run(&self, mut progress: impl FnMut(&Progress)) -> Result<BenchDoc, BenchError> {
        self.validate()?;
        std::fs::create_dir_all(&self.work_dir).map_err(|source| BenchError::Write {
            path: self.work_dir.clone(),
            source,
        })?;
        let created = rfc3339_utc(SystemTime::now());
        let mut results: Vec<ConfigResult> = self
            .configs
            .iter()
            .map(|c| ConfigResult {
                label: c.label.clone(),
                kind: match c.side {
                    Side::Bootscope(_) => ConfigKind::Bootscope,
                    Side::Command(_) => ConfigKind::Command,
                },
                command: match &c.side {
                    Side::Bootscope(a) | Side::Command(a) => {
                        a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
                    }
                },
                runs: Vec::new(),
                storms: Vec::new(),
                summary: BTreeMap::new(),
            })
            .collect();
        let rounds = self.warmup + self.runs;
        let total = rounds as usize * self.configs.len() * self.runs_per_round() as usize;
        let mut index = 0u32;
        for round in 0..rounds {
            let order: Vec<usize> = if self.configs.len() == 2 && round % 2 == 1 {
                vec![1, 0]
            } else {
                (0..self.configs.len()).collect()
            };
            for ci in order {
                if self.stopped() {
                    break;
                }
                let warmup = round < self.warmup;
                let Some((records, mut storm)) =
                    self.round_of(&self.configs[ci], index, round, warmup)?
                else {
                    break;
                };
                let last = records.len();
                for (i, record) in records.into_iter().enumerate() {
                    index += 1;
                    results[ci].runs.push(record);
                    let storm_done = if i + 1 == last {
                        storm.take().map(|s| {
                            results[ci].storms.push(s);
                            results[ci].storms.len() - 1
                        })
                    } else {
                        None
                    };
                    let c = &results[ci];
                    progress(&Progress {
                        done: index as usize,
                        total,
                        label: &self.configs[ci].label,
                        run: c.runs.last().expect("just pushed"),
                        storm: storm_done.map(|i| &c.storms[i]),
                        rounds,
                        warmup_rounds: self.warmup,
                    });
                }
            }
        }
        for r in &mut results {
            crate::doc::summarize(r);
        }
        Ok(BenchDoc {
            schema: crate::doc::SCHEMA.into(),
            version: crate::doc::VERSION,
            created,
            bootscope: format!("bootscope {}", env!("CARGO_PKG_VERSION")),
            machine: self.machine.clone(),
            settings: Settings {
                runs: self.runs,
                warmup: self.warmup,
                interleaved: self.configs.len() == 2,
                profile: self.profile,
                console_patterns: self.console_patterns.iter().map(|p| p.spec()).collect(),
                parallel: self.parallel,
            },
            provenance: Default::default(),
            configs: results,
            interrupted_by: None,
        })
    }

    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
    }

    /// One configuration's runs of one round: one run; with `--parallel N`
    /// the VM alone (N > 1) and the storm. `None` once stopped (the run
    /// under way is left out).
    fn round_of(
        &self,
        config: &ConfigPlan,
        index: u32,
        round: u32,
        warmup: bool,
    ) -> Result<Option<RoundRuns>, BenchError> {
        let mut records = Vec::new();
        if self.parallel.is_none_or(|n| n > 1) {
            let mut record = self.run_once(config, index, round, warmup)?;
            record.solo = self.parallel.is_some();
            if self.stopped() {
                return Ok(None);
            }
            records.push(record);
        }
        let mut storm = None;
        if let Some(n) = self.parallel {
            let first = index + records.len() as u32;
            let (vms, s) = self.run_storm(config, n, first, round, warmup)?;
            if self.stopped() {
                return Ok(None);
            }
            records.extend(vms);
            storm = Some(s);
        }
        Ok(Some((records, storm)))
    }

    /// Processes per configuration and round: one, or with `--parallel N`
    /// the storm's N and the VM alone before it (N > 1).
    fn runs_per_round(&self) -> u32 {
        match self.parallel {
            None | Some(0 | 1) => 1,
            Some(n) => n + 1,
        }
    }

    /// The command line of one run, and where its timeline and profile go.
    /// A `bootscope run` is given `--no-profile` unless the bench profiles
    /// every run (`bench --profile`) or the run's own arguments say
    /// `--profile`; a profiled run writes its profile to the work directory.
    fn argv(
        &self,
        config: &ConfigPlan,
        index: u32,
    ) -> (Vec<OsString>, Option<PathBuf>, Option<PathBuf>) {
        let mut argv: Vec<OsString> = Vec::new();
        let mut timeline = None;
        let mut profile = None;
        let self_profiled = self.run_profiles_itself && matches!(config.side, Side::Bootscope(_));
        if self.profile && !self_profiled {
            let p = self.work_dir.join(format!("profile-{index}.json"));
            argv.extend([
                self.exe.clone().into_os_string(),
                "profile".into(),
                "--no-summary".into(),
                "--output".into(),
                p.clone().into_os_string(),
                "--".into(),
            ]);
            profile = Some(p);
        }
        match &config.side {
            Side::Bootscope(args) => {
                let t = self.work_dir.join(format!("timeline-{index}.json"));
                argv.push(self.exe.clone().into_os_string());
                argv.push("run".into());
                argv.extend(args.iter().cloned());
                argv.push("--timeline".into());
                argv.push(t.clone().into_os_string());
                if !args.iter().any(|a| a == OsStr::new("--no-summary")) {
                    argv.push("--no-summary".into());
                }
                // `run --profile` asks for this configuration alone to be
                // profiled (one side of a with/without-profiler comparison).
                let wants_profile = args.iter().any(|a| a == OsStr::new("--profile"));
                if self_profiled && (self.profile || wants_profile) {
                    let p = self.work_dir.join(format!("profile-{index}.json"));
                    argv.push("--output".into());
                    argv.push(p.clone().into_os_string());
                    profile = Some(p);
                } else if self_profiled && !args.iter().any(|a| a == OsStr::new("--no-profile")) {
                    argv.push("--no-profile".into());
                }
                timeline = Some(t);
            }
            Side::Command(cmd) => argv.extend(cmd.iter().cloned()),
        }
        (argv, timeline, profile)
    }

    pub(crate) fn run_once(
        &self,
        config: &ConfigPlan,
        index: u32,
        round: u32,
        warmup: bool,
    ) -> Result<RunRecord, BenchError> {
        let (argv, timeline, profile) = self.argv(config, index);
        for f in timeline.iter().chain(profile.iter()) {
            let _ = std::fs::remove_file(f);
        }
        let out = execute(
            &argv,
            &self.console_patterns,
            self.run_timeout,
            self.stop.as_deref(),
        )?;
        let mut record = RunRecord {
            index,
            round,
            warmup,
            vm: None,
            solo: false,
            ok: out.exit_code == Some(0),
            exit_code: out.exit_code,
            outcome: None,
            error: None,
            userspace_mark: None,
            metrics: BTreeMap::new(),
        };
        record.metrics.insert("wall".into(), duration_ns(out.wall));
        for (name, t) in &out.console {
            record
                .metrics
                .insert(format!("console:{name}"), duration_ns(*t));
        }
        // Another command's memory, read by bench at its userspace line
        // (bootscope's VMM reads its own, into its timeline).
        if let (Side::Command(_), Some(m)) = (&config.side, &out.memory) {
            record.metrics.extend(metrics::memory_metrics(m));
        }
        // Bad input is the same on every run: the first refusal ends the
        // benchmark. (Another command's status 2 may mean anything.)
        if out.exit_code == Some(2) && matches!(config.side, Side::Bootscope(_)) {
            return Err(BenchError::RunRefused {
                command: shell_words(&argv),
                stderr: out.stderr_tail,
            });
        }
        let mut problems = Vec::new();
        if out.timed_out {
            problems.push(format!(
                "still running after {} s (--run-timeout): killed",
                self.run_timeout.as_secs_f64()
            ));
        } else if out.exit_code != Some(0) {
            problems.push(match out.exit_code {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".into(),
            });
        }
        if let Some(t) = &timeline {
            match read_timeline(t) {
                Ok(t) => {
                    let facts = metrics::from_timeline(&t);
                    record.metrics.extend(facts.metrics);
                    record.outcome = Some(facts.outcome);
                    record.userspace_mark = facts.userspace_mark;
                    if !facts.clean {
                        record.ok = false;
                        problems.push(format!("unclean guest end: {}", facts.detail));
                    }
                }
                Err(e) => {
                    record.ok = false;
                    problems.push(e);
                }
            }
        }
        if let Some(p) = &profile {
            match read_profile(p) {
                Ok(profile) => record.metrics.extend(metrics::from_profile(&profile)),
                Err(e) => {
                    record.ok = false;
                    problems.push(format!("no profile: {e}"));
                }
            }
        }
        for f in timeline.iter().chain(profile.iter()) {
            let _ = std::fs::remove_file(f);
        }
        if !problems.is_empty() {
            let mut msg = problems.join("; ");
            if !out.stderr_tail.trim().is_empty() {
                msg.push_str("; stderr: ");
                msg.push_str(out.stderr_tail.trim());
            }
            record.error = Some(msg);
        }
        Ok(record)
    }
}

/// Reads the timeline a run wrote; the problem in words where it cannot.
fn read_timeline(path: &Path) -> Result<bootscope_model::timeline::Timeline, String> {
    crate::schema::read_timeline(path, metrics::TIMELINE_HINT).map_err(|e| match e {
        BenchError::Input(_) | BenchError::Document { .. } => format!("no timeline: {e}"),
        e => e.to_string(),
    })
}

/// Reads the profile a run wrote (`bench --profile`).
fn read_profile(path: &Path) -> Result<bootscope_model::profile::Profile, BenchError> {
    const HINT: &str = "give a file written by `bootscope profile --output FILE`";
    crate::schema::read_profile(path, HINT)
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

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

mod time;
mod words;
pub use time::rfc3339_utc;
pub use words::shell_words;

#[cfg(test)]
mod tests;
