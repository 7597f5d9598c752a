//! Runs the boots of a benchmark: each as its own process (`bootscope run
//! ... --timeline FILE`, or any other command), timed from spawn to exit,
//! its standard output watched for console patterns, its timeline (and
//! profile, with `--profile`) read afterwards.
//!
//! Here the plan and its rounds; `once.rs` one run (its command line and
//! its record), `process.rs` the process it runs (spawn, console, stop).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use regex::Regex;

use crate::doc::{BenchDoc, ConfigKind, ConfigResult, Machine, RunRecord, Settings};
use crate::error::BenchError;
use bootscope_model::bench::StormRecord;

/// Console lines timed by default: the kernel banner and the start of init
/// (the kernel prints the latter at info level: not with `quiet`).
pub const DEFAULT_CONSOLE_PATTERNS: [&str; 2] = [
    r"kernel banner=Linux version \S+",
    r"run init=Run \S+ as init process",
];

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
}

mod once;
mod process;
mod time;
mod words;
pub use process::{execute, group_memory, Execution, USERSPACE_PATTERN};
pub use time::rfc3339_utc;
pub use words::shell_words;

#[cfg(test)]
mod tests;
