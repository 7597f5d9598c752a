//! One run of a benchmark: its command line (where its timeline and
//! profile go), the process run, and its record from what it wrote.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{execute, shell_words, BenchPlan, ConfigPlan, Side};
use crate::doc::RunRecord;
use crate::error::BenchError;
use crate::metrics;

impl BenchPlan {
    /// The command line of one run, and where its timeline and profile go.
    /// A `bootscope run` is given `--no-profile` unless the bench profiles
    /// every run (`bench --profile`) or the run's own arguments say
    /// `--profile`; a profiled run writes its profile to the work directory.
    pub(super) fn argv(
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
