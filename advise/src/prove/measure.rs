//! The A/B benches of `--prove` and their verdicts: one interleaved bench
//! per fix, then one of the accepted fixes together, all within the
//! budget, stopping cleanly on SIGINT/SIGTERM with what was measured.
//!
//! Each bench runs in blocks of two rounds (ABBA: original and fix, then fix
//! and original) and is judged by the paired signed-rank test on the rounds'
//! times to userspace, so a load that drifts over the bench hits both sides
//! of a round alike. After each block the bench stops early when its
//! outcome is settled: a boot with the fix failed or missed the userspace
//! mark, or even the best remaining rounds (all faster with the fix, by
//! more than any so far) could no longer make the saving significant. A
//! stop of the second kind never turns an acceptance into a rejection (the
//! full bench would have rejected too), so the test's level is unchanged.

use std::time::{Duration, Instant};

use bootscope_bench::compare::compare_metric;
use bootscope_bench::doc::{BenchDoc, ConfigResult};
use bootscope_bench::runner::Progress;
use bootscope_bench::{stats, BenchError, BenchPlan, ConfigPlan};

use super::options::{Budget, TEST};
use super::outcome::{CheckBoot, FixResult, NotTried, ProveReport, Verdict};
use super::plan::{measured_to, words, ProvePlan, Trial};
use crate::error::AdviseError;
use crate::evaluate::{human_ns, ConcreteChange};
use crate::target::ProveTarget;

/// Rounds per block between the checks for an early stop (one ABBA).
const BLOCK: u32 = 2;

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

/// What an A/B bench gave.
enum Measured {
    /// The runs of every block, rounds numbered through.
    Doc(Box<BenchDoc>),
    /// The VMM refused the fix's command (exit status 2), in words.
    Refused(String),
    /// Stopped before any boot finished.
    Nothing,
}

/// Appends one block's runs to the bench so far, numbering its rounds and
/// runs after those already there.
fn merge(into: &mut Option<BenchDoc>, mut block: BenchDoc, rounds_before: u32) {
    let Some(doc) = into else {
        *into = Some(block);
        return;
    };
    let runs_before = doc.configs.iter().map(|c| c.runs.len()).sum::<usize>() as u32;
    for c in &mut block.configs {
        for r in &mut c.runs {
            r.round += rounds_before;
            r.index += runs_before;
        }
        if let Some(d) = doc.configs.iter_mut().find(|d| d.label == c.label) {
            d.runs.append(&mut c.runs);
        }
    }
    doc.settings.runs += block.settings.runs;
    if block.interrupted_by.is_some() {
        doc.interrupted_by = block.interrupted_by;
    }
}

/// The values of `metric` of the rounds where both sides have one, in
/// round order: `(without, with)`.
fn paired(base: &ConfigResult, new: &ConfigResult, metric: &str) -> (Vec<f64>, Vec<f64>) {
    base.paired_with(new, metric)
}

/// Whether `remaining` more pairs could still make the fix significantly
/// faster at `level`: the best case, every one of them faster with the fix
/// by more than any pair so far, put through the test itself.
pub(crate) fn still_reachable(base: &[f64], new: &[f64], remaining: u32, level: f64) -> bool {
    let largest = base
        .iter()
        .zip(new)
        .map(|(x, y)| (y - x).abs())
        .fold(0.0_f64, f64::max);
    let mut a = base.to_vec();
    let mut b = new.to_vec();
    for j in 0..remaining {
        a.push(0.0);
        b.push(-(largest + 1.0 + f64::from(j)));
    }
    if a.is_empty() {
        return true;
    }
    let (Ok(t), sa, sb) = (
        stats::test(TEST, &a, &b),
        a.iter().sum::<f64>(),
        b.iter().sum::<f64>(),
    ) else {
        return true;
    };
    t.p_value < level && sb < sa
}

impl ProvePlan {
    /// One block of `rounds` interleaved rounds (bench's runner).
    fn block(
        &self,
        s: &Subject,
        check: &CheckBoot,
        rounds: u32,
        first_boot: usize,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Result<BenchDoc, String>, AdviseError> {
        let dir = self.work_dir.join(format!("ab-{}", next_bench()));
        let plan = BenchPlan {
            exe: self.exe.clone(),
            configs: vec![
                ConfigPlan {
                    label: ORIGINAL.into(),
                    side: self.side(&[], check),
                },
                ConfigPlan {
                    label: WITH_FIX.into(),
                    side: self.side(&s.changes, check),
                },
            ],
            runs: rounds,
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
        let metric = self.metric(check);
        let to = measured_to(&metric);
        let total = 2 * self.opts.runs as usize;
        let result = plan.run(|p: &Progress| {
            let r = p.run;
            let what = if r.ok {
                r.metrics.get(&metric).map_or_else(
                    || format!("ok, never reached {to}"),
                    |v| format!("ok, {} to {to}", human_ns(*v)),
                )
            } else {
                format!("failed: {}", r.error.as_deref().unwrap_or("?"))
            };
            progress(&format!(
                "{}: boot {}/{total} ({}): {what}",
                s.name,
                first_boot + p.done,
                p.label
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

    /// Boots one A/B bench, block by block, until its rounds are done or
    /// its outcome is settled; `Err` only for a failure of the machinery
    /// itself (a refusal of the VMM is a verdict).
    fn bench(
        &self,
        s: &Subject,
        check: &CheckBoot,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Measured, AdviseError> {
        let mut doc: Option<BenchDoc> = None;
        let mut rounds = 0;
        while rounds < self.opts.runs && !self.stopped() {
            let n = BLOCK.min(self.opts.runs - rounds);
            match self.block(s, check, n, 2 * rounds as usize, progress)? {
                Ok(block) => merge(&mut doc, block, rounds),
                Err(refused) => return Ok(Measured::Refused(refused)),
            }
            rounds += n;
            let Some(d) = &doc else { break };
            if rounds < self.opts.runs {
                if let Some(why) = self.settled(d, check, self.opts.runs - rounds) {
                    progress(&format!(
                        "{}: stopped after {rounds} of {} rounds: {why}",
                        s.name, self.opts.runs
                    ));
                    break;
                }
            }
        }
        Ok(doc.map_or(Measured::Nothing, |d| Measured::Doc(Box::new(d))))
    }

    /// Why a bench need not go on with `remaining` rounds left, if so.
    fn settled(&self, doc: &BenchDoc, check: &CheckBoot, remaining: u32) -> Option<String> {
        let (base, new) = (config(doc, ORIGINAL)?, config(doc, WITH_FIX)?);
        if let Some(why) = self.broken(new, check) {
            return Some(why);
        }
        let (b, n) = paired(base, new, &self.metric(check));
        (!still_reachable(&b, &n, remaining, self.opts.level)).then(|| {
            format!(
                "even {remaining} more rounds all faster with it could not reach p below {}",
                crate::prove::options::level(self.opts.level)
            )
        })
    }

    /// Why the fix breaks the boot, if a boot with it failed or did not
    /// reach the original's userspace mark.
    fn broken(&self, new: &ConfigResult, check: &CheckBoot) -> Option<String> {
        if let Some(bad) = new.runs.iter().find(|run| !run.ok) {
            return Some(format!(
                "a boot with it failed: {}",
                bad.error.as_deref().unwrap_or("?")
            ));
        }
        let metric = self.metric(check);
        let wrong_mark = new.runs.iter().find(|run| match self.target {
            // The workload's mark: where its userspace phase opens may
            // move (`quiet` hides the console line that places systemd's
            // journal on the timeline), the mark must be there.
            ProveTarget::Bootscope { .. } if check.workload_mark.is_some() => {
                !run.metrics.contains_key(&metric)
            }
            ProveTarget::Bootscope { .. } => {
                run.userspace_mark.as_deref() != Some(check.userspace_mark.as_str())
            }
            ProveTarget::Template { .. } => !run.metrics.contains_key(&metric),
        })?;
        let (which, mark) = match &check.workload_mark {
            Some(m) => ("workload's", m),
            None => ("userspace", &check.userspace_mark),
        };
        Some(format!(
            "a boot with it did not reach the {which} mark {mark:?} ({})",
            wrong_mark.userspace_mark.as_deref().map_or_else(
                || "it reached no userspace mark".into(),
                |m| format!("its userspace phase opened at {m:?}")
            )
        ))
    }

    /// The verdict of one A/B bench.
    fn judge(&self, s: &Subject, check: &CheckBoot, measured: Measured) -> FixResult {
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
            rounds: 0,
            command: words(&self.target.argv(&s.changes)),
        };
        let doc = match measured {
            Measured::Doc(d) => *d,
            Measured::Refused(refused) => {
                r.verdict = Verdict::CouldNotBeTried;
                r.detail = refused;
                return r;
            }
            Measured::Nothing => {
                r.detail = "no boot finished".into();
                return r;
            }
        };
        // Rounds with a boot that finished (an interrupted block plans more).
        r.rounds = doc
            .configs
            .iter()
            .flat_map(|c| c.runs.iter().map(|run| run.round + 1))
            .max()
            .unwrap_or(0);
        let (Some(base), Some(new)) = (config(&doc, ORIGINAL), config(&doc, WITH_FIX)) else {
            r.detail = "no boot finished".into();
            return r;
        };
        r.ok_runs = (base.measured().count(), new.measured().count());
        if let Some(why) = self.broken(new, check) {
            r.verdict = Verdict::BreaksBoot;
            r.detail = why;
            return r;
        }
        let level = self.opts.level;
        let compare = |m: &str| {
            let (x, y) = paired(base, new, m);
            compare_metric(m, &x, &y, TEST, level)
        };
        let metric = self.metric(check);
        r.phase = compare(&format!("phase:{}", s.phase));
        r.exits = base
            .samples()
            .keys()
            .filter(|k| k.starts_with("exits:"))
            .filter_map(|k| compare(k))
            .collect();
        let Some(cmp) = compare(&metric) else {
            r.detail = format!(
                "too few successful boots ({} without, {} with)",
                r.ok_runs.0, r.ok_runs.1
            );
            return r;
        };
        (r.verdict, r.detail) = verdict(&cmp, level);
        if r.rounds < self.opts.runs {
            r.detail = if self.stopped() {
                format!(
                    "{}; interrupted after {} of {} rounds",
                    r.detail, r.rounds, self.opts.runs
                )
            } else {
                format!(
                    "{}; stopped after {} of {} rounds: no saving could reach p below {} any more",
                    r.detail,
                    r.rounds,
                    self.opts.runs,
                    crate::prove::options::level(level)
                )
            };
        }
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
            "{}: up to {} boots, interleaved",
            s.name,
            2 * self.opts.runs
        ));
        let measured = self.bench(s, check, progress)?;
        *boots += match &measured {
            Measured::Doc(d) => d.configs.iter().map(|c| c.runs.len() as u32).sum(),
            Measured::Refused(_) => 1,
            Measured::Nothing => 0,
        };
        let r = self.judge(s, check, measured);
        progress(&format!("{}: {}: {}", s.name, r.verdict.word(), r.detail));
        Ok(r)
    }

    /// With `--together-first` and two trials or more, all of them benched
    /// together: accepted, that set is the proven line whatever the single
    /// fixes show after it.
    fn together_first(
        &self,
        trials: &[Trial],
        check: &CheckBoot,
        boots: &mut u32,
        started: Instant,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Option<FixResult>, AdviseError> {
        if !self.opts.together_first
            || trials.len() < 2
            || self.stopped()
            || !self.affordable(*boots, started, check)
        {
            return Ok(None);
        }
        let s = Subject {
            name: format!("all {} fixes together", trials.len()),
            changes: trials.iter().map(|t| &t.change).collect(),
            rules: trials.iter().map(|t| t.rule).collect(),
            estimate_ns: None,
            phase: combined_phase(trials),
        };
        Ok(Some(self.measure(&s, check, boots, progress)?))
    }

    /// Measures each trial (with `--together-first`, all of them together
    /// first), then the accepted ones together.
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
        let mut together = self.together_first(&trials, &check, &mut boots, started, progress)?;
        let together_proven = together
            .as_ref()
            .is_some_and(|t| t.verdict == Verdict::Accepted);
        // Accepted, the set is the combination; else it is reported apart.
        let mut combined = if together_proven {
            together.take()
        } else {
            None
        };
        for (i, t) in trials.iter().enumerate() {
            if self.stopped() || !self.affordable(boots, started, &check) {
                not_tried.push(NotTried {
                    rule: t.rule,
                    change: t.change.clone(),
                    reason: match (self.stopped(), together.is_some() || together_proven) {
                        (true, _) => "interrupted".into(),
                        (false, false) => "beyond the --budget".into(),
                        (false, true) => {
                            "alone: beyond the --budget (measured in the set of all together)"
                                .into()
                        }
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
        if together_proven {
            // The set proven first is the combination.
        } else if accepted.len() == 1 {
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
        // The combination's changes: the set proven first, the one accepted
        // fix, or the accepted ones benched together.
        let final_changes: Vec<&ConcreteChange> = match &combined {
            Some(c) if c.verdict == Verdict::Accepted => c.changes.iter().collect(),
            _ => Vec::new(),
        };
        let final_argv = self.target.argv(&final_changes);
        let final_cmdline = self.target.cmdline_with(&final_changes);
        Ok(ProveReport {
            metric: self.metric(&check),
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
            together,
            combined_first: together_proven,
            combined,
            final_command: words(&final_argv),
            final_cmdline,
            interrupted_by: None,
        })
    }
}

/// The phase a set of fixes acts on: theirs when they agree, else the
/// boot as a whole (`kernel` and `userspace` together are the time to the
/// workload's mark).
fn combined_phase(trials: &[Trial]) -> String {
    match trials.first() {
        Some(t) if trials.iter().all(|u| u.phase == t.phase) => t.phase.clone(),
        _ => "kernel".into(),
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
                "change {:+.1} %, p {} (not below {})",
                cmp.change_pct,
                p(t.p_value),
                crate::prove::options::level(level)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bench_stops_once_no_saving_can_be_significant() {
        // Two rounds both faster with the fix: four more can still make it.
        assert!(still_reachable(&[10.0, 11.0], &[6.0, 7.0], 4, 0.05));
        // One round slower with the fix: of 6 rounds, the best case is 5
        // faster and the slower one the smallest, p = 0.0625.
        assert!(!still_reachable(&[10.0, 11.0], &[6.0, 11.5], 4, 0.05));
        // ... which 8 rounds can still overcome (p = 0.016).
        assert!(still_reachable(&[10.0, 11.0], &[6.0, 11.5], 6, 0.05));
        // Both slower, and too few rounds left to outweigh them.
        assert!(!still_reachable(&[10.0, 11.0], &[12.0, 13.0], 4, 0.05));
        // Nothing measured: anything is possible with enough rounds.
        assert!(still_reachable(&[], &[], 6, 0.05));
        assert!(!still_reachable(&[], &[], 5, 0.05));
        // The rounds are all done: the test itself decides.
        assert!(still_reachable(
            &[10.0; 6],
            &[5.0, 6.0, 7.0, 5.5, 6.5, 7.5],
            0,
            0.05
        ));
    }

    use bootscope_bench::doc::RunRecord;

    fn run(round: u32, index: u32, ttu: u64) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "index": index, "round": round, "warmup": false, "ok": true,
            "metrics": {"time_to_userspace": ttu}
        }))
        .unwrap()
    }

    fn doc(runs: u32, a: Vec<RunRecord>, b: Vec<RunRecord>) -> BenchDoc {
        let config = |label: &str, runs| serde_json::json!({"label": label, "kind": "bootscope", "command": [], "runs": runs});
        serde_json::from_value(serde_json::json!({
            "schema": "bootscope.bench", "version": 2, "created": "", "bootscope": "",
            "machine": {"hostname": "", "kernel_release": "", "cpu_model": "", "cpus": 1,
                        "memory_bytes": 0, "host_kvm": "svm"},
            "settings": {"runs": runs, "warmup": 0, "interleaved": true, "profile": false},
            "configs": [config(ORIGINAL, serde_json::to_value(a).unwrap()),
                        config(WITH_FIX, serde_json::to_value(b).unwrap())]
        }))
        .unwrap()
    }

    /// A disk boot's run: its userspace phase opened at `opened`, its
    /// workload's marker at `marker` (none: never reached).
    fn disk_run(round: u32, index: u32, opened: &str, marker: Option<u64>) -> RunRecord {
        let mut metrics = serde_json::json!({"time_to_userspace": 4_000, "phase:userspace": 9_000});
        if let Some(t) = marker {
            metrics["mark:port 0x80: userspace 0x60"] = t.into();
        }
        serde_json::from_value(serde_json::json!({
            "index": index, "round": round, "warmup": false, "ok": true,
            "userspace_mark": opened, "metrics": metrics
        }))
        .unwrap()
    }

    #[test]
    fn a_userspace_fix_is_judged_by_the_time_to_the_workloads_mark() {
        let plan = super::super::plan::tests::plan(&["--disk", "d.raw"]);
        let check =
            super::super::plan::tests::check("systemd: started", Some("port 0x80: userspace 0x60"));
        let mask = ConcreteChange::KernelArgs("systemd.mask=e2scrub_reap.service".into());
        let subject = Subject {
            name: "fix 1/1".into(),
            changes: vec![&mask],
            rules: vec!["slow-unit-on-chain"],
            estimate_ns: None,
            phase: "userspace".into(),
        };
        // Systemd's start (time to userspace) is the same on both sides;
        // the workload's marker comes sooner with the fix, whose boots
        // open their userspace phase elsewhere (the journal not placed):
        // no broken boot, the saving is measured to the marker.
        let base: Vec<RunRecord> = (0..6)
            .map(|i| disk_run(i, 2 * i, "systemd: started", Some(10_000 + u64::from(i))))
            .collect();
        let new: Vec<RunRecord> = (0..6)
            .map(|i| {
                disk_run(
                    i,
                    2 * i + 1,
                    "port 0x80: userspace 0x60",
                    Some(8_000 + u64::from(i)),
                )
            })
            .collect();
        let r = plan.judge(
            &subject,
            &check,
            Measured::Doc(Box::new(doc(6, base.clone(), new))),
        );
        assert_eq!(r.verdict, Verdict::Accepted, "{}", r.detail);
        let cmp = r.time_to_userspace.unwrap();
        assert_eq!(cmp.metric, "mark:port 0x80: userspace 0x60");
        assert!(cmp.change_pct < -19.0, "{}", cmp.change_pct);
        // A boot with the fix that never reaches the marker breaks the boot.
        let mut new: Vec<RunRecord> = (0..6)
            .map(|i| disk_run(i, 2 * i + 1, "systemd: started", Some(8_000)))
            .collect();
        new[3] = disk_run(3, 7, "systemd: started", None);
        let r = plan.judge(&subject, &check, Measured::Doc(Box::new(doc(6, base, new))));
        assert_eq!(r.verdict, Verdict::BreaksBoot, "{}", r.detail);
        assert!(
            r.detail
                .contains("workload's mark \"port 0x80: userspace 0x60\""),
            "{}",
            r.detail
        );
    }

    #[test]
    fn blocks_merge_with_their_rounds_numbered_through() {
        let mut merged = None;
        merge(
            &mut merged,
            doc(
                2,
                vec![run(0, 0, 10), run(1, 3, 11)],
                vec![run(0, 1, 6), run(1, 2, 7)],
            ),
            0,
        );
        merge(
            &mut merged,
            doc(
                2,
                vec![run(0, 0, 12), run(1, 3, 13)],
                vec![run(0, 1, 8), run(1, 2, 9)],
            ),
            2,
        );
        let merged = merged.unwrap();
        assert_eq!(merged.settings.runs, 4);
        let (base, new) = (
            config(&merged, ORIGINAL).unwrap(),
            config(&merged, WITH_FIX).unwrap(),
        );
        let rounds: Vec<u32> = base.runs.iter().map(|r| r.round).collect();
        assert_eq!(rounds, [0, 1, 2, 3]);
        let indices: Vec<u32> = new.runs.iter().map(|r| r.index).collect();
        assert_eq!(indices, [1, 2, 5, 6]);
        assert_eq!(
            paired(base, new, "time_to_userspace"),
            (vec![10.0, 11.0, 12.0, 13.0], vec![6.0, 7.0, 8.0, 9.0])
        );
    }
}
