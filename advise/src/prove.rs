//! `advise --prove`: every fix that can be tried is measured against the
//! original boot in an interleaved A/B bench ([`bootscope_bench::BenchPlan`],
//! its runner and statistics), accepted only when the boot still reaches
//! the same userspace mark with a clean outcome and is significantly
//! faster to userspace; the accepted fixes are then combined and the
//! combination measured against the original.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bootscope_bench::compare::Comparison;
use bootscope_bench::doc::Machine;
use bootscope_bench::runner::{self, DEFAULT_CONSOLE_PATTERNS};
use bootscope_bench::{ConsolePattern, Side, TestKind};
use serde::Serialize;

use crate::error::AdviseError;
use crate::evaluate::{Advice, ConcreteChange, Triable};
use crate::rules::Risk;
use crate::target::ProveTarget;

/// The console pattern that marks userspace in another VMM's boot.
pub const MARKER_NAME: &str = "userspace";

/// How much `--prove` may spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// At most this many boots, the check boot included.
    Boots(u32),
    /// No new A/B bench starts once it could not end within this time.
    Time(Duration),
}

impl Budget {
    /// `N` boots, or a duration: `90s`, `15m`, `2h`.
    pub fn parse(s: &str) -> Result<Self, AdviseError> {
        let bad = || {
            AdviseError::Usage(format!(
                "--budget {s:?}: give a number of boots (e.g. 40) or a duration (90s, 15m, 2h) above 0"
            ))
        };
        let s = s.trim();
        if let Ok(n) = s.parse::<u32>() {
            return if n == 0 {
                Err(bad())
            } else {
                Ok(Self::Boots(n))
            };
        }
        let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
        let n: u64 = num.parse().map_err(|_| bad())?;
        let secs = match unit {
            "s" => n,
            "m" | "min" => n * 60,
            "h" => n * 3600,
            _ => return Err(bad()),
        };
        if secs == 0 {
            return Err(bad());
        }
        Ok(Self::Time(Duration::from_secs(secs)))
    }
}

/// `--prove`'s settings.
#[derive(Clone, Debug)]
pub struct ProveOptions {
    pub budget: Option<Budget>,
    /// Measured boots per side of each A/B bench.
    pub runs: u32,
    pub max_fixes: usize,
    /// Significance level of the test (and 1 - confidence of the ratio's
    /// interval).
    pub level: f64,
    pub allow_unsafe: bool,
    pub run_timeout: Duration,
    /// Another VMM's userspace console line (`--marker`).
    pub marker: ConsolePattern,
    /// The kinds of fix to try (`--kinds`); the others are listed as not
    /// tried.
    pub kinds: Vec<FixKind>,
}

/// A kind of fix `--prove` can try.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FixKind {
    /// Kernel command-line words.
    Kernel,
    /// `bootscope run` options.
    Run,
}

impl FixKind {
    /// Both kinds, the default.
    pub const ALL: [Self; 2] = [Self::Kernel, Self::Run];

    fn of(change: &ConcreteChange) -> Option<Self> {
        match change {
            ConcreteChange::KernelArgs(_) => Some(Self::Kernel),
            ConcreteChange::RunFlags(_) => Some(Self::Run),
            ConcreteChange::Advice(_) => None,
        }
    }
}

impl ProveOptions {
    /// Checks the settings before any boot.
    pub fn validate(&self) -> Result<(), AdviseError> {
        if !(self.level > 0.0 && self.level < 0.5) {
            return Err(AdviseError::Usage(format!(
                "--level {}: give a significance level between 0 and 0.5, e.g. 0.05",
                self.level
            )));
        }
        let least = crate::measure::least_runs(self.level);
        if self.runs < least {
            let p = bootscope_bench::stats::min_attainable_p(
                crate::measure::TEST,
                self.runs as usize,
                self.runs as usize,
            );
            return Err(AdviseError::Usage(format!(
                "--runs {}: the paired test on {} rounds can never give p below {} (its smallest p is {p:.3}, every round faster); give --runs {least} or more, or a larger --level",
                self.runs, self.runs, self.level
            )));
        }
        if self.max_fixes == 0 {
            return Err(AdviseError::Usage("--max-fixes must be at least 1".into()));
        }
        if let Some(Budget::Boots(n)) = self.budget {
            let one = 1 + 2 * self.runs;
            if n < one {
                return Err(AdviseError::Usage(format!(
                    "--budget {n} boots cannot hold the check boot and one A/B bench of 2 x {} boots ({one}); give at least {one}, or fewer --runs",
                    self.runs
                )));
            }
        }
        Ok(())
    }
}

/// A fix to try.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub rule: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub change: ConcreteChange,
    pub risk: Risk,
    pub estimate_ns: Option<u64>,
    /// The phase its finding's time is spent in.
    pub phase: String,
}

/// A fix not tried, and why.
#[derive(Clone, Debug, Serialize)]
pub struct NotTried {
    pub rule: &'static str,
    pub change: ConcreteChange,
    pub reason: String,
}

/// The fixes to try (in the findings' rank order, each change once), and
/// those left out with the reason.
pub fn trials(
    advice: &Advice,
    opts: &ProveOptions,
    target: &ProveTarget,
) -> (Vec<Trial>, Vec<NotTried>) {
    let mut tried = Vec::new();
    let mut left = Vec::new();
    let mut seen = BTreeSet::new();
    for f in &advice.findings {
        for c in &f.fixes {
            if !seen.insert(format!("{:?}", c.change)) {
                continue;
            }
            let reason = match (c.triable, target) {
                (Triable::No, _) => Some("advice: cannot be tried automatically".to_string()),
                (Triable::NeedsAllowUnsafe, _) if !opts.allow_unsafe => {
                    Some("weakens security: tried only with --allow-unsafe".into())
                }
                (Triable::BootscopeOnly, _) | (_, ProveTarget::Template { .. })
                    if matches!(c.change, ConcreteChange::RunFlags(_)) =>
                {
                    Some(
                        "a bootscope run option: the template changes only the kernel command line"
                            .into(),
                    )
                }
                _ if FixKind::of(&c.change).is_some_and(|k| !opts.kinds.contains(&k)) => {
                    Some("not among the --kinds to try".into())
                }
                _ if tried.len() >= opts.max_fixes => {
                    Some(format!("beyond --max-fixes {}", opts.max_fixes))
                }
                _ => None,
            };
            match reason {
                Some(reason) => left.push(NotTried {
                    rule: f.rule,
                    change: c.change.clone(),
                    reason,
                }),
                None => tried.push(Trial {
                    rule: f.rule,
                    subject: f.subject.clone(),
                    change: c.change.clone(),
                    risk: c.risk,
                    estimate_ns: c.estimate_ns,
                    phase: f.phase.clone(),
                }),
            }
        }
    }
    (tried, left)
}

/// What became of a fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Reaches the same userspace mark cleanly and significantly sooner.
    Accepted,
    /// Boots as before, but no significant saving.
    NotSignificant,
    /// Significantly slower.
    Slower,
    /// A boot with it failed, or did not reach the same userspace mark.
    BreaksBoot,
    /// The VMM refused it (bad usage, exit status 2).
    CouldNotBeTried,
    /// Too few boots finished (interrupted, or the original failed).
    Incomplete,
}

/// One fix's (or the combination's) measurement.
#[derive(Clone, Debug, Serialize)]
pub struct FixResult {
    /// The changes measured (one, or all accepted ones).
    pub changes: Vec<ConcreteChange>,
    pub rules: Vec<&'static str>,
    pub verdict: Verdict,
    /// Why, in words.
    pub detail: String,
    /// The estimate the finding gave, for comparison with the measurement.
    pub estimate_ns: Option<u64>,
    /// Time to userspace, with the fix against without (ratio, interval, p).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_userspace: Option<Comparison>,
    /// The phase the finding's time is spent in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Comparison>,
    /// Exit counts (KVM's statistics), medians.
    pub exits: Vec<Comparison>,
    /// Successful measured boots: without, with.
    pub ok_runs: (usize, usize),
    /// Rounds booted (a round boots each side once): `--runs`, or fewer
    /// when the bench stopped early (its outcome settled) or was
    /// interrupted.
    pub rounds: u32,
    /// The command line (bootscope: `run` arguments) with the change.
    pub command: Vec<String>,
}

/// The check boot: the original boots, reaching userspace.
#[derive(Clone, Debug, Serialize)]
pub struct CheckBoot {
    pub wall_ns: u64,
    /// The userspace mark (bootscope) or console pattern it reached.
    pub userspace_mark: String,
    /// Its timeline and profile (bootscope), for the evidence.
    #[serde(skip)]
    pub documents: Vec<PathBuf>,
}

/// Everything `--prove` measured.
#[derive(Clone, Debug, Serialize)]
pub struct ProveReport {
    /// `time_to_userspace` (bootscope) or `console:userspace`.
    pub metric: String,
    pub test: TestKind,
    pub level: f64,
    pub runs_per_side: u32,
    pub budget: Option<Budget>,
    /// Boots started, the check boot included.
    pub boots: u32,
    pub original_command: Vec<String>,
    pub original_cmdline: String,
    pub check: CheckBoot,
    pub fixes: Vec<FixResult>,
    pub not_tried: Vec<NotTried>,
    /// The accepted fixes together against the original (measured when
    /// two or more were accepted; with one it is that fix's result).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub combined: Option<FixResult>,
    /// The command line with the accepted (and, combined, still
    /// accepted) fixes.
    pub final_command: Vec<String>,
    pub final_cmdline: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
}

/// What `--prove` runs with.
pub struct ProvePlan {
    /// The bootscope executable.
    pub exe: PathBuf,
    pub target: ProveTarget,
    pub opts: ProveOptions,
    pub machine: Machine,
    /// Private directory for the runs' files.
    pub work_dir: PathBuf,
    pub stop: Arc<AtomicBool>,
    /// This bootscope's `run` profiles itself (has `--no-profile`).
    pub run_profiles_itself: bool,
    /// Set by the check boot when the guest marks userspace itself (port
    /// 0x80, port 0xf4, the boot timer): every boot then runs with
    /// `--no-default-patterns`, so that time to userspace ends at that
    /// mark on both sides, not at a console line a fix such as `quiet`
    /// hides.
    pub guest_marks_userspace: AtomicBool,
}

/// The guest's own userspace mark in a timeline, when it wrote one.
fn guest_userspace_mark(timeline: &serde_json::Value) -> Option<String> {
    let t = bootscope_model::timeline::Timeline::parse(timeline).ok()?;
    t.marks
        .iter()
        .find(|m| {
            m.name.starts_with("port 0x80: userspace")
                || m.name.starts_with("port 0xf4: ") && m.value == Some(7)
                || m.name.starts_with("boot timer:")
        })
        .map(|m| m.name.clone())
}

/// Arguments as strings, for reports.
pub(crate) fn words(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

impl ProvePlan {
    pub(crate) fn metric(&self) -> &'static str {
        match self.target {
            ProveTarget::Bootscope { .. } => "time_to_userspace",
            ProveTarget::Template { .. } => "console:userspace",
        }
    }

    pub(crate) fn side(&self, changes: &[&ConcreteChange]) -> Side {
        let mut argv = self.target.argv(changes);
        if self.guest_marks_userspace.load(Ordering::SeqCst)
            && !argv.iter().any(|a| a == "--no-default-patterns")
        {
            argv.push("--no-default-patterns".into());
        }
        match self.target {
            ProveTarget::Bootscope { .. } => Side::Bootscope(argv),
            ProveTarget::Template { .. } => Side::Command(argv),
        }
    }

    pub(crate) fn patterns(&self) -> Result<Vec<ConsolePattern>, AdviseError> {
        let mut p = DEFAULT_CONSOLE_PATTERNS
            .iter()
            .map(|s| ConsolePattern::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        if matches!(self.target, ProveTarget::Template { .. }) {
            p.push(self.opts.marker.clone());
        }
        Ok(p)
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The check boot's command line, and the documents it writes.
    fn check_argv(&self, record: bool) -> (Vec<OsString>, Vec<PathBuf>) {
        let timeline = self.work_dir.join("check.timeline.json");
        let profile = self.work_dir.join("check.profile.json");
        let mut argv: Vec<OsString> = Vec::new();
        let mut documents = Vec::new();
        match &self.target {
            ProveTarget::Bootscope { .. } => {
                argv.extend([self.exe.clone().into_os_string(), "run".into()]);
                argv.extend(self.target.argv(&[]));
                argv.extend([
                    "--no-summary".into(),
                    "--timeline".into(),
                    timeline.clone().into(),
                ]);
                documents.push(timeline.clone());
                if record {
                    if self.run_profiles_itself {
                        argv.extend(["--output".into(), profile.clone().into()]);
                        if matches!(self.machine.host_kvm.as_str(), "vmx" | "svm") {
                            argv.push("--exit-sites".into());
                        }
                        documents.push(profile.clone());
                    }
                    if !argv.iter().any(|a| a == "--initcalls") {
                        argv.push("--initcalls".into());
                    }
                } else if self.run_profiles_itself {
                    argv.push("--no-profile".into());
                }
            }
            ProveTarget::Template { .. } => {
                if record {
                    argv.extend([
                        self.exe.clone().into_os_string(),
                        "profile".into(),
                        "--no-summary".into(),
                        "--output".into(),
                        profile.clone().into(),
                        "--".into(),
                    ]);
                    documents.push(profile.clone());
                }
                argv.extend(self.target.argv(&[]));
            }
        }
        (argv, documents)
    }

    /// Boots the original once (bench's runner): it must end cleanly and
    /// reach userspace, else [`AdviseError::DoesNotBoot`]. With `record`,
    /// a bootscope boot also writes its timeline and profile with exit
    /// sites (VMX/SVM) and initcalls, and another VMM's boot runs under
    /// `bootscope profile`: the evidence when no document was given.
    pub fn check_boot(&self, record: bool) -> Result<CheckBoot, AdviseError> {
        let (argv, documents) = self.check_argv(record);
        let timeline = self.work_dir.join("check.timeline.json");
        let out = runner::execute(
            &argv,
            &self.patterns()?,
            self.opts.run_timeout,
            Some(&self.stop),
        )?;
        let cmd = runner::shell_words(&argv);
        let fail = |why: String| {
            let tail = out.stderr_tail.trim();
            AdviseError::DoesNotBoot(format!(
                "{cmd}: {why}{}",
                if tail.is_empty() {
                    String::new()
                } else {
                    format!("; its standard error ends: {tail}")
                }
            ))
        };
        if out.timed_out {
            return Err(fail(format!(
                "still running after {} s (--run-timeout)",
                self.opts.run_timeout.as_secs()
            )));
        }
        if out.exit_code != Some(0) {
            return Err(fail(match out.exit_code {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".into(),
            }));
        }
        let mark = match &self.target {
            ProveTarget::Bootscope { .. } => {
                let bytes =
                    std::fs::read(&timeline).map_err(|e| fail(format!("no timeline ({e})")))?;
                let v: serde_json::Value = serde_json::from_slice(&bytes)
                    .map_err(|e| fail(format!("an unreadable timeline ({e})")))?;
                let facts = bootscope_bench::metrics::from_timeline(&v, &timeline)
                    .map_err(|e| fail(e.to_string()))?;
                if !facts.clean {
                    return Err(fail(format!("unclean end: {}", facts.detail)));
                }
                if let Some(own) = guest_userspace_mark(&v) {
                    self.guest_marks_userspace.store(true, Ordering::SeqCst);
                    return Ok(CheckBoot {
                        wall_ns: u64::try_from(out.wall.as_nanos()).unwrap_or(u64::MAX),
                        userspace_mark: own,
                        documents,
                    });
                }
                facts.userspace_mark.ok_or_else(|| {
                    fail("it never reached userspace (no userspace mark in its timeline)".into())
                })?
            }
            ProveTarget::Template { .. } => {
                if !out.console.contains_key(MARKER_NAME) {
                    return Err(fail(format!(
                        "its console never printed the userspace line {:?} (--marker)",
                        self.opts.marker.regex.as_str()
                    )));
                }
                format!("console: {}", self.opts.marker.regex.as_str())
            }
        };
        Ok(CheckBoot {
            wall_ns: u64::try_from(out.wall.as_nanos()).unwrap_or(u64::MAX),
            userspace_mark: mark,
            documents,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::advise;
    use crate::evidence::Evidence;

    #[test]
    fn budgets() {
        assert_eq!(Budget::parse("40").unwrap(), Budget::Boots(40));
        assert_eq!(
            Budget::parse("15m").unwrap(),
            Budget::Time(Duration::from_secs(900))
        );
        assert_eq!(
            Budget::parse("2h").unwrap(),
            Budget::Time(Duration::from_secs(7200))
        );
        for bad in ["0", "0s", "-3", "5 parsecs", "m", ""] {
            assert!(Budget::parse(bad).unwrap_err().is_bad_input(), "{bad}");
        }
    }

    #[test]
    fn the_guests_own_userspace_mark() {
        let t = |marks: serde_json::Value| serde_json::json!({"schema": "bootscope.timeline", "version": 1, "marks": marks, "phases": []});
        let marks = serde_json::json!([
            {"name": "serial: run init", "source": "serial", "t_ns": 5},
            {"name": "port 0x80: userspace 0x60", "source": "debug_port", "t_ns": 9, "value": 96}
        ]);
        assert_eq!(
            guest_userspace_mark(&t(marks)).as_deref(),
            Some("port 0x80: userspace 0x60")
        );
        let marks =
            serde_json::json!([{"name": "serial: run init", "source": "serial", "t_ns": 5}]);
        assert_eq!(guest_userspace_mark(&t(marks)), None);
    }

    #[test]
    fn trials_leave_out_advice_unsafe_and_run_options_of_a_template() {
        let ev = Evidence::read(&[std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/lab-sites-loud.profile.json"
        ))])
        .unwrap();
        let advice = advise(&ev);
        let opts = ProveOptions {
            budget: None,
            runs: 2,
            max_fixes: 4,
            level: 0.05,
            allow_unsafe: false,
            run_timeout: Duration::from_secs(1),
            marker: ConsolePattern::parse("userspace=x").unwrap(),
            kinds: FixKind::ALL.to_vec(),
        };
        let template = ProveTarget::template("qemu -append {cmdline}", String::new()).unwrap();
        let (tried, left) = trials(&advice, &opts, &template);
        let tried: Vec<_> = tried.iter().map(|t| t.change.describe()).collect();
        assert_eq!(tried, ["kernel command line: quiet"]);
        let reasons: Vec<_> = left
            .iter()
            .map(|n| (n.change.describe(), n.reason.as_str()))
            .collect();
        assert!(
            reasons.contains(&(
                "bootscope run --console virtio".into(),
                "a bootscope run option: the template changes only the kernel command line"
            )),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|(c, r)| c.contains("mitigations=off") && r.contains("--allow-unsafe")),
            "{reasons:?}"
        );
        let only_run = ProveOptions {
            kinds: vec![FixKind::Run],
            ..opts.clone()
        };
        let bootscope = ProveTarget::Bootscope {
            args: Vec::new(),
            default_cmdline: String::new(),
        };
        let (tried, left) = trials(&advice, &only_run, &bootscope);
        let tried: Vec<_> = tried.iter().map(|t| t.change.describe()).collect();
        assert_eq!(tried, ["bootscope run --console virtio"]);
        assert!(
            left.iter()
                .any(|n| n.change.describe() == "kernel command line: quiet"
                    && n.reason == "not among the --kinds to try"),
            "{left:?}"
        );
        let opts = ProveOptions {
            allow_unsafe: true,
            max_fixes: 1,
            ..opts
        };
        let (tried, left) = trials(&advice, &opts, &template);
        assert_eq!(tried.len(), 1);
        assert!(
            left.iter().any(|n| n.reason == "beyond --max-fixes 1"),
            "{left:?}"
        );
    }
}
