//! The A/B benches of `--prove` and their verdicts: one interleaved bench
//! per fix, then one of the accepted fixes together, all within the
//! budget, stopping cleanly on SIGINT/SIGTERM with what was measured.

use std::time::{Duration, Instant};

use bootscope_bench::compare::compare_metric;
use bootscope_bench::doc::{BenchDoc, ConfigResult};
use bootscope_bench::runner::Progress;
use bootscope_bench::{BenchError, BenchPlan, ConfigPlan, TestKind};

use crate::error::AdviseError;
use crate::evaluate::{human_ns, ConcreteChange};
use crate::prove::{
    words, Budget, CheckBoot, FixResult, NotTried, ProvePlan, ProveReport, Trial, Verdict,
};
use crate::target::ProveTarget;

/// The statistical test: Welch's, bench's default for unpaired times.
const TEST: TestKind = TestKind::Welch;

/// Labels of the two sides.
const ORIGINAL: &str = "original";
const WITH_FIX: &str = "with fix";

/// What one A/B bench is about.
struct Subject<'a> {
    /// `fix 2/4: kernel command line: quiet`, for progress lines.
    name: String,
    changes: Vec<&'a ConcreteChange>,
    rules: Vec<&'static str>,
    estimate_ns: Option<u64>,
    phase: String,
}

impl ProvePlan {
    /// Boots one A/B bench; `Err` only for a failure of the machinery
    /// itself (a refusal of the VMM is a verdict).
    fn bench(
        &self,
        s: &Subject,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Result<BenchDoc, String>, AdviseError> {
        let dir = self.work_dir.join(format!("ab-{}", next_bench()));
        let plan = BenchPlan {
            exe: self.exe.clone(),
            configs: vec![
                ConfigPlan {
                    label: ORIGINAL.into(),
                    side: self.side(&[]),
                },
                ConfigPlan {
                    label: WITH_FIX.into(),
                    side: self.side(&s.changes),
                },
            ],
            runs: self.opts.runs,
            warmup: 0,
            profile: false,
            run_profiles_itself: self.run_profiles_itself,
            console_patterns: self.patterns()?,
            run_timeout: self.opts.run_timeout,
            work_dir: dir.clone(),
            machine: self.machine.clone(),
            stop: Some(self.stop.clone()),
            parallel: None,
        };
        let metric = self.metric();
        let result = plan.run(|p: &Progress| {
            let r = p.run;
            let what = if r.ok {
                r.metrics.get(metric).map_or_else(
                    || "ok, no userspace mark".into(),
                    |v| format!("ok, {} to userspace", human_ns(*v)),
                )
            } else {
                format!("failed: {}", r.error.as_deref().unwrap_or("?"))
            };
            progress(&format!(
                "{}: boot {}/{} ({}): {what}",
                s.name, p.done, p.total, p.label
            ));
        });
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Ok(doc) => Ok(Ok(doc)),
            Err(BenchError::RunRefused { command, stderr }) => {
                // Its error line, not the usage text after it.
                let why = stderr
                    .lines()
                    .map(str::trim)
                    .find(|l| l.starts_with("error:"))
                    .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
                    .unwrap_or_default()
                    .to_string();
                Ok(Err(format!(
                    "the VMM refused `{command}` (exit status 2): {why}"
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The verdict of one A/B bench.
    fn judge(&self, s: &Subject, check: &CheckBoot, doc: Result<BenchDoc, String>) -> FixResult {
        let mut r = FixResult {
            changes: s.changes.iter().map(|c| (*c).clone()).collect(),
            rules: s.rules.clone(),
            verdict: Verdict::Incomplete,
            detail: String::new(),
            estimate_ns: s.estimate_ns,
            time_to_userspace: None,
            phase: None,
            exits: Vec::new(),
            ok_runs: (0, 0),
            command: words(&self.target.argv(&s.changes)),
        };
        let doc = match doc {
            Ok(d) => d,
            Err(refused) => {
                r.verdict = Verdict::CouldNotBeTried;
                r.detail = refused;
                return r;
            }
        };
        let (Some(base), Some(new)) = (config(&doc, ORIGINAL), config(&doc, WITH_FIX)) else {
            r.detail = "no boot finished".into();
            return r;
        };
        r.ok_runs = (base.measured().count(), new.measured().count());
        let metric = self.metric();
        if let Some(bad) = new.runs.iter().find(|run| !run.ok) {
            r.verdict = Verdict::BreaksBoot;
            r.detail = format!(
                "a boot with it failed: {}",
                bad.error.as_deref().unwrap_or("?")
            );
            return r;
        }
        let wrong_mark = new.runs.iter().find(|run| match self.target {
            ProveTarget::Bootscope { .. } => {
                run.userspace_mark.as_deref() != Some(check.userspace_mark.as_str())
            }
            ProveTarget::Template { .. } => !run.metrics.contains_key(metric),
        });
        if let Some(run) = wrong_mark {
            r.verdict = Verdict::BreaksBoot;
            r.detail = format!(
                "a boot with it did not reach the userspace mark {:?} (it reached {})",
                check.userspace_mark,
                run.userspace_mark
                    .as_deref()
                    .map_or_else(|| "none".into(), |m| format!("{m:?}"))
            );
            return r;
        }
        let (b, n) = (base.samples(), new.samples());
        let values = |m: &str| {
            (
                b.get(m).cloned().unwrap_or_default(),
                n.get(m).cloned().unwrap_or_default(),
            )
        };
        let (bt, nt) = values(metric);
        let cmp = compare_metric(metric, &bt, &nt, TEST, self.opts.level);
        let phase = format!("phase:{}", s.phase);
        let (bp, np) = values(&phase);
        r.phase = compare_metric(&phase, &bp, &np, TEST, self.opts.level);
        r.exits = b
            .keys()
            .filter(|k| k.starts_with("exits:"))
            .filter_map(|k| {
                let (x, y) = values(k);
                compare_metric(k, &x, &y, TEST, self.opts.level)
            })
            .collect();
        let Some(cmp) = cmp else {
            r.detail = format!(
                "too few successful boots ({} without, {} with)",
                r.ok_runs.0, r.ok_runs.1
            );
            return r;
        };
        (r.verdict, r.detail) = verdict(&cmp, self.opts.level);
        r.time_to_userspace = Some(cmp);
        r
    }

    /// Whether the budget allows one more A/B bench.
    fn affordable(&self, boots: u32, started: Instant, check: &CheckBoot) -> bool {
        let per_ab = 2 * self.opts.runs;
        match self.opts.budget {
            None => true,
            Some(Budget::Boots(n)) => boots + per_ab <= n,
            Some(Budget::Time(d)) => {
                let one = Duration::from_nanos(check.wall_ns) * per_ab;
                started.elapsed() + one <= d
            }
        }
    }

    /// One A/B bench and its verdict, with progress; counts its boots.
    fn measure(
        &self,
        s: &Subject,
        check: &CheckBoot,
        boots: &mut u32,
        progress: &mut dyn FnMut(&str),
    ) -> Result<FixResult, AdviseError> {
        progress(&format!(
            "{}: {} boots, interleaved",
            s.name,
            2 * self.opts.runs
        ));
        let doc = self.bench(s, progress)?;
        *boots += doc
            .as_ref()
            .map_or(1, |d| d.configs.iter().map(|c| c.runs.len() as u32).sum());
        let r = self.judge(s, check, doc);
        progress(&format!("{}: {:?}: {}", s.name, r.verdict, r.detail));
        Ok(r)
    }

    /// Measures each trial, then the accepted ones together.
    pub fn prove(
        &self,
        check: CheckBoot,
        trials: Vec<Trial>,
        mut not_tried: Vec<NotTried>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ProveReport, AdviseError> {
        let started = Instant::now();
        let mut boots = 1u32;
        let mut fixes = Vec::new();
        let count = trials.len();
        for (i, t) in trials.iter().enumerate() {
            if self.stopped() || !self.affordable(boots, started, &check) {
                not_tried.push(NotTried {
                    rule: t.rule,
                    change: t.change.clone(),
                    reason: if self.stopped() {
                        "interrupted".into()
                    } else {
                        "beyond the --budget".into()
                    },
                });
                continue;
            }
            let s = Subject {
                name: format!("fix {}/{count} ({})", i + 1, t.change.describe()),
                changes: vec![&t.change],
                rules: vec![t.rule],
                estimate_ns: t.estimate_ns,
                phase: t.phase.clone(),
            };
            let r = self.measure(&s, &check, &mut boots, progress)?;
            fixes.push(r);
        }
        let accepted: Vec<&ConcreteChange> = fixes
            .iter()
            .filter(|f| f.verdict == Verdict::Accepted)
            .flat_map(|f| f.changes.iter())
            .collect();
        let mut combined = None;
        if accepted.len() == 1 {
            combined = fixes
                .iter()
                .find(|f| f.verdict == Verdict::Accepted)
                .cloned();
        } else if accepted.len() > 1 && !self.stopped() && self.affordable(boots, started, &check) {
            let s = Subject {
                name: format!("combined ({} fixes)", accepted.len()),
                changes: accepted.clone(),
                rules: fixes
                    .iter()
                    .filter(|f| f.verdict == Verdict::Accepted)
                    .flat_map(|f| f.rules.clone())
                    .collect(),
                estimate_ns: None,
                phase: "kernel".into(),
            };
            combined = Some(self.measure(&s, &check, &mut boots, progress)?);
        }
        let final_changes: Vec<&ConcreteChange> = match &combined {
            Some(c) if c.verdict == Verdict::Accepted => accepted,
            _ => Vec::new(),
        };
        let final_argv = self.target.argv(&final_changes);
        let final_cmdline = final_changes
            .iter()
            .fold(self.target.cmdline(), |acc, c| match c {
                ConcreteChange::KernelArgs(a) => format!("{} {a}", acc.trim_end()),
                _ => acc,
            });
        Ok(ProveReport {
            metric: self.metric().into(),
            test: TEST,
            level: self.opts.level,
            runs_per_side: self.opts.runs,
            budget: self.opts.budget,
            boots,
            original_command: words(&self.target.argv(&[])),
            original_cmdline: self.target.cmdline(),
            check,
            fixes,
            not_tried,
            combined,
            final_command: words(&final_argv),
            final_cmdline,
            interrupted_by: None,
        })
    }
}

/// A fix's verdict from its comparison of time to userspace.
fn verdict(cmp: &bootscope_bench::compare::Comparison, level: f64) -> (Verdict, String) {
    match (&cmp.test, cmp.significant, cmp.change_pct < 0.0) {
        (None, _, _) => (Verdict::Incomplete, cmp.no_test.clone().unwrap_or_default()),
        (Some(t), true, true) => (
            Verdict::Accepted,
            format!("{} sooner, p {}", pct(cmp.change_pct), p(t.p_value)),
        ),
        (Some(t), true, false) => (
            Verdict::Slower,
            format!("{} later, p {}", pct(cmp.change_pct), p(t.p_value)),
        ),
        (Some(t), false, _) => (
            Verdict::NotSignificant,
            format!(
                "change {:+.1} %, p {} (not below {level})",
                cmp.change_pct,
                p(t.p_value)
            ),
        ),
    }
}

fn config<'a>(doc: &'a BenchDoc, label: &str) -> Option<&'a ConfigResult> {
    doc.configs.iter().find(|c| c.label == label)
}

fn pct(change: f64) -> String {
    format!("{:.1} %", change.abs())
}

fn p(v: f64) -> String {
    bootscope_bench::compare::format_p(v)
}

/// Numbers the A/B benches' work directories.
fn next_bench() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}
