//! `compare` (two samples, every shared metric, in plain words) and `check`
//! (a current benchmark against a baseline, pass or fail, in text, JSON or
//! JUnit XML).
//!
//! Times are noisy: a time regression needs a significant test (p < alpha)
//! *and* a change beyond the threshold. Counts (exits per reason, page
//! faults) barely move between runs of the same boot: a count regression is
//! median growth beyond the threshold, no test needed, so count checks stay
//! reliable on noisy machines and with three runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::doc::{BenchDoc, ConfigKind};
use crate::error::BenchError;
use crate::metrics::{self, MetricKind};
use crate::provenance::Provenance;
use crate::stats::{self, Summary, TestKind, TestResult};

/// The values of one configuration of one bench file.
#[derive(Debug, Clone)]
pub struct Sample {
    pub path: PathBuf,
    pub label: String,
    pub kind: ConfigKind,
    /// Successful measured runs.
    pub runs: usize,
    pub values: BTreeMap<String, Vec<f64>>,
    /// The round of each value of `values` (same order), which pairs the
    /// runs of two configurations of one interleaved bench file.
    pub rounds: BTreeMap<String, Vec<u32>>,
    /// The bench file's `--meta` notes and git revision.
    pub provenance: Provenance,
}

impl Sample {
    /// Configuration `label` (or the only one) of `doc`, read from `path`.
    pub fn from_doc(doc: &BenchDoc, path: &Path, label: Option<&str>) -> Result<Self, BenchError> {
        let c = doc.config(label, path)?;
        let runs = c.measured().count();
        if runs == 0 {
            return Err(BenchError::NoRuns {
                path: path.into(),
                label: c.label.clone(),
            });
        }
        let by_round = c.samples_by_round();
        Ok(Self {
            path: path.into(),
            label: c.label.clone(),
            kind: c.kind,
            runs,
            values: by_round
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|(_, x)| *x).collect()))
                .collect(),
            rounds: by_round
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().map(|(r, _)| r).collect()))
                .collect(),
            provenance: doc.provenance.clone(),
        })
    }

    /// The values of `metric` of the rounds both samples ran it in, in
    /// round order (a round whose run failed on one side is left out).
    fn paired(&self, other: &Self, metric: &str) -> (Vec<f64>, Vec<f64>) {
        let by_round = |s: &Self| -> BTreeMap<u32, f64> {
            let values = s.values.get(metric).map(Vec::as_slice).unwrap_or(&[]);
            let rounds = s.rounds.get(metric).map(Vec::as_slice).unwrap_or(&[]);
            rounds.iter().copied().zip(values.iter().copied()).collect()
        };
        let (mine, theirs) = (by_round(self), by_round(other));
        mine.iter()
            .filter_map(|(r, a)| theirs.get(r).map(|b| (*a, *b)))
            .unzip()
    }

    fn has_phases(&self) -> bool {
        self.values.keys().any(|k| k.starts_with("phase:"))
    }

    /// The VMM's phases: a profiler's attach before the VMM is not one of
    /// them (a profiled run compares with an unprofiled one).
    fn phases(&self) -> BTreeSet<&str> {
        self.values
            .keys()
            .filter(|k| k.starts_with("phase:") && *k != PROFILER_ATTACH)
            .map(String::as_str)
            .collect()
    }

    fn missing(&self, metric: &str) -> BenchError {
        BenchError::MissingMetric {
            metric: metric.into(),
            path: self.path.clone(),
            label: self.label.clone(),
            available: self.values.keys().cloned().collect(),
        }
    }

    fn all_zero(&self, metric: &str) -> bool {
        self.values
            .get(metric)
            .is_none_or(|v| v.iter().all(|x| *x == 0.0))
    }
}

/// Phases in boot order; others after them by name.
const PHASE_ORDER: [&str; 5] = [
    "vmm setup",
    "firmware/boot loader",
    "kernel",
    "userspace",
    "vmm teardown",
];

/// Sort key that lists metrics the way people read a boot: totals first,
/// then phases in boot order, console marks, exits, faults, the rest.
pub fn order_key(name: &str) -> (u8, usize, String) {
    let group = match name {
        "time_to_userspace" => 0,
        "wall" => 1,
        _ if name.starts_with("phase:") => 2,
        _ if name.starts_with("console:") => 3,
        "exits:total" => 4,
        _ if name.starts_with("exits:") => 5,
        "exit-reason:total" => 6,
        _ if name.starts_with("exit-reason:") => 7,
        _ if name.starts_with("faults:") => 8,
        _ => 9,
    };
    let pos = name
        .strip_prefix("phase:")
        .and_then(|p| PHASE_ORDER.iter().position(|q| *q == p))
        .unwrap_or(PHASE_ORDER.len());
    (group, pos, name.to_string())
}

/// One metric compared between a base and a new sample.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub metric: String,
    pub kind: MetricKind,
    pub base: Summary,
    pub new: Summary,
    /// `mean` or `median`: what `change_pct` compares.
    pub center: &'static str,
    /// (new - base) / base in percent; positive = slower or more.
    pub change_pct: f64,
    /// The test, when both sides had enough runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test: Option<TestResult>,
    /// Why there is no test.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_test: Option<String>,
    /// p < alpha.
    pub significant: bool,
    /// The factor new/base with its 1 - alpha confidence interval
    /// ([`stats::ratio_interval`]): how large the change can be, which a
    /// "not significant" alone does not say. Absent for counts, values
    /// that are not positive, or too few runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<stats::RatioInterval>,
}

impl Comparison {
    /// The base and new values compared.
    pub fn centers(&self) -> (f64, f64) {
        if self.center == "mean" {
            (self.base.mean, self.new.mean)
        } else {
            (self.base.median, self.new.median)
        }
    }

    /// "kernel phase 12.3 % faster, p = 0.004".
    pub fn words(&self) -> String {
        let name = metrics::display_name(&self.metric);
        let (b, n) = self.centers();
        let change = if b == n {
            "unchanged".to_string()
        } else if b == 0.0 {
            format!("from 0 to {}", format_value(self.kind, n))
        } else {
            let pct = self.change_pct.abs();
            let word = match (self.kind, self.change_pct < 0.0) {
                (MetricKind::Time, true) => "faster",
                (MetricKind::Time, false) => "slower",
                (MetricKind::Count, true) => "fewer",
                (MetricKind::Count, false) => "more",
            };
            format!("{} % {word}", format_pct(pct))
        };
        match &self.test {
            Some(t) => format!("{name} {change}, p {}", format_p(t.p_value)),
            None => format!("{name} {change}"),
        }
    }
}

/// Percentages: one decimal, two below 1 %.
pub fn format_pct(p: f64) -> String {
    if p.is_infinite() {
        "∞".into()
    } else if p < 1.0 {
        format!("{p:.2}")
    } else {
        format!("{p:.1}")
    }
}

/// 0.99 -> "99", 0.995 -> "99.5".
pub fn format_confidence(c: f64) -> String {
    let pct = c * 100.0;
    if (pct - pct.round()).abs() < 1e-9 {
        format!("{pct:.0}")
    } else {
        format!("{pct:.1}")
    }
}

/// "= 0.004", "= 0.21", "< 0.001".
pub fn format_p(p: f64) -> String {
    if p < 0.001 {
        return "< 0.001".into();
    }
    let digits = (1 - p.log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{p:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("= {s}")
}

/// A value in its unit: milliseconds for times, a count otherwise.
pub fn format_value(kind: MetricKind, v: f64) -> String {
    match kind {
        MetricKind::Time => format!("{:.1} ms", v / 1e6),
        MetricKind::Count if v.fract() == 0.0 => format!("{v:.0}"),
        MetricKind::Count => format!("{v:.1}"),
    }
}

/// Compares one metric (for a paired test, `base[i]` pairs with `new[i]`).
pub fn compare_metric(
    metric: &str,
    base: &[f64],
    new: &[f64],
    test: TestKind,
    alpha: f64,
) -> Option<Comparison> {
    let kind = metrics::kind(metric);
    let (bs, ns) = (stats::summarize(base)?, stats::summarize(new)?);
    let center = match (kind, test) {
        (MetricKind::Time, TestKind::Welch) => "mean",
        _ => "median",
    };
    let (b, n) = if center == "mean" {
        (bs.mean, ns.mean)
    } else {
        (bs.median, ns.median)
    };
    let change_pct = if b == n {
        0.0
    } else if b == 0.0 {
        f64::INFINITY
    } else {
        (n - b) / b * 100.0
    };
    let (test_result, no_test) = match stats::test(test, base, new) {
        Ok(r) => (Some(r), None),
        Err(few) => (
            None,
            Some(format!(
                "{} needs {} runs per side (have {} and {})",
                test.title(),
                few.need,
                few.a,
                few.b
            )),
        ),
    };
    let ratio = match kind {
        MetricKind::Time if test.paired() => stats::paired_ratio_interval(base, new, 1.0 - alpha),
        MetricKind::Time => stats::ratio_interval(base, new, 1.0 - alpha),
        MetricKind::Count => None,
    };
    Some(Comparison {
        ratio,
        metric: metric.into(),
        kind,
        base: bs,
        new: ns,
        center,
        change_pct,
        significant: test_result.is_some_and(|t| t.p_value < alpha),
        test: test_result,
        no_test,
    })
}

/// The metrics two samples are compared on: `explicit` ones (each must be
/// in both), else every shared one that is not zero in both (except the
/// `kvm:*` statistics), after checking that both booted through the same
/// phases.
pub fn select_metrics(
    base: &Sample,
    new: &Sample,
    explicit: &[String],
) -> Result<Vec<String>, BenchError> {
    if !explicit.is_empty() {
        for m in explicit {
            if !base.values.contains_key(m) {
                return Err(base.missing(m));
            }
            if !new.values.contains_key(m) {
                return Err(new.missing(m));
            }
        }
        return Ok(explicit.to_vec());
    }
    check_phases(base, new)?;
    let mut shared: Vec<String> = base
        .values
        .keys()
        .filter(|k| new.values.contains_key(*k))
        .filter(|k| !(base.all_zero(k) && new.all_zero(k)))
        // KVM's other statistics (fpu_reload, req_event, ...) are there to
        // be named with --metric, not to crowd every report.
        .filter(|k| !k.starts_with("kvm:"))
        .cloned()
        .collect();
    if shared.is_empty() {
        return Err(BenchError::NothingInCommon {
            a_path: base.path.clone(),
            b_path: new.path.clone(),
        });
    }
    shared.sort_by_key(|k| order_key(k));
    Ok(shared)
}

/// Both samples with phases must have the same phases.
/// The phase of a profiler attaching before the VMM (`bootscope run`
/// profiling itself).
const PROFILER_ATTACH: &str = "phase:profiler attach";

fn check_phases(base: &Sample, new: &Sample) -> Result<(), BenchError> {
    if !(base.has_phases() && new.has_phases()) {
        return Ok(());
    }
    let (pa, pb) = (base.phases(), new.phases());
    if pa == pb {
        return Ok(());
    }
    let strip = |v: Vec<&&str>| -> Vec<String> {
        v.into_iter()
            .map(|s| s.trim_start_matches("phase:").to_string())
            .collect()
    };
    Err(BenchError::PhaseMismatch {
        a_path: base.path.clone(),
        only_a: strip(pa.difference(&pb).collect()),
        b_path: new.path.clone(),
        only_b: strip(pb.difference(&pa).collect()),
    })
}

/// What `bootscope compare` prints and writes.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    pub schema: &'static str,
    pub version: u32,
    pub base: SampleInfo,
    pub new: SampleInfo,
    pub test: TestKind,
    pub alpha: f64,
    pub metrics: Vec<Comparison>,
}

/// Which sample a report speaks of.
#[derive(Debug, Clone, Serialize)]
pub struct SampleInfo {
    pub path: PathBuf,
    pub label: String,
    pub runs: usize,
    #[serde(flatten)]
    pub provenance: Provenance,
}

impl From<&Sample> for SampleInfo {
    fn from(s: &Sample) -> Self {
        Self {
            path: s.path.clone(),
            label: s.label.clone(),
            runs: s.runs,
            provenance: s.provenance.clone(),
        }
    }
}

/// Compares every selected metric of two samples.
pub fn compare(
    base: &Sample,
    new: &Sample,
    explicit: &[String],
    test: TestKind,
    alpha: f64,
) -> Result<CompareReport, BenchError> {
    if test.paired() && (base.path != new.path || base.label == new.label) {
        return Err(BenchError::Usage(
            "--test wilcoxon: the paired test compares the runs of each round of one bench file \
             (bootscope bench --label A --label B ..., run interleaved); give that one file, \
             or use --test mann-whitney for two files"
                .into(),
        ));
    }
    let selected = select_metrics(base, new, explicit)?;
    let metrics = selected
        .iter()
        .filter_map(|m| {
            if test.paired() {
                let (b, n) = base.paired(new, m);
                compare_metric(m, &b, &n, test, alpha)
            } else {
                compare_metric(m, &base.values[m], &new.values[m], test, alpha)
            }
        })
        .collect();
    Ok(CompareReport {
        schema: "bootscope.compare",
        version: 1,
        base: base.into(),
        new: new.into(),
        test,
        alpha,
        metrics,
    })
}

fn describe(s: &SampleInfo) -> String {
    format!("{} in {} ({} runs)", s.label, s.path.display(), s.runs)
}

/// The `--meta` notes and git revision of each side, one line each, where
/// either has any.
fn provenance_lines(s: &mut String, sides: [(&str, &SampleInfo); 2]) {
    if sides.iter().all(|(_, i)| i.provenance.text().is_none()) {
        return;
    }
    for (name, info) in sides {
        let text = info.provenance.text();
        let _ = writeln!(
            s,
            "  {name:<9} {}",
            text.as_deref().unwrap_or("(no git revision or notes)")
        );
    }
}

impl CompareReport {
    /// The plain-words report.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "bootscope compare: {} -> {}",
            describe(&self.base),
            describe(&self.new)
        );
        provenance_lines(&mut s, [("base:", &self.base), ("new:", &self.new)]);
        let _ = writeln!(
            s,
            "times: {} on {}s, significant below p = {}; counts: medians",
            self.test.title(),
            if self.test == TestKind::Welch {
                "mean"
            } else {
                "median"
            },
            self.alpha
        );
        let _ = writeln!(s);
        let width = self
            .metrics
            .iter()
            .map(|c| c.words().chars().count())
            .max()
            .unwrap_or(0);
        for c in &self.metrics {
            let (b, n) = c.centers();
            let verdict = match (&c.test, c.significant) {
                (None, _) => c.no_test.clone().unwrap_or_default(),
                (Some(_), true) => "significant".into(),
                (Some(_), false) => "not significant".into(),
            };
            let mut ratio = if b != 0.0 {
                format!(", ratio {:.3}", n / b)
            } else {
                String::new()
            };
            if let Some(r) = &c.ratio {
                let _ = write!(
                    ratio,
                    ", estimate {:.3}, {} % interval {:.3}..{:.3}",
                    r.estimate,
                    format_confidence(r.confidence),
                    r.low,
                    r.high
                );
            }
            let _ = writeln!(
                s,
                "  {:<width$}  ({} -> {}{ratio}; {verdict})",
                c.words(),
                format_value(c.kind, b),
                format_value(c.kind, n),
            );
        }
        s
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

/// A metric to check, with its own threshold if given (`NAME=PCT`).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSpec {
    pub name: String,
    pub max_regression_pct: Option<f64>,
}

impl MetricSpec {
    /// Parses `NAME` or `NAME=PCT`.
    pub fn parse(s: &str) -> Result<Self, BenchError> {
        let (name, pct) = match s.rsplit_once('=') {
            Some((n, p)) => {
                let pct: f64 = p.trim().trim_end_matches('%').parse().map_err(|_| {
                    BenchError::Usage(format!(
                        "--metric {s:?}: after = give the allowed regression in percent (NAME=25)"
                    ))
                })?;
                if !(pct >= 0.0 && pct.is_finite()) {
                    return Err(BenchError::Usage(format!(
                        "--metric {s:?}: the percentage must be 0 or more"
                    )));
                }
                (n, Some(pct))
            }
            None => (s, None),
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(BenchError::Usage(format!(
                "--metric {s:?}: empty metric name"
            )));
        }
        Ok(Self {
            name: name.into(),
            max_regression_pct: pct,
        })
    }
}

/// Options of `bootscope check`.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Empty: time to userspace, every phase and exits:total.
    pub metrics: Vec<MetricSpec>,
    pub max_regression_pct: f64,
    pub alpha: f64,
    pub test: TestKind,
}

/// One checked metric.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub metric: String,
    pub kind: MetricKind,
    /// `pass` or `regression`.
    pub status: &'static str,
    pub max_regression_pct: f64,
    pub comparison: Comparison,
    /// One line for people.
    pub message: String,
}

/// What `bootscope check` reports.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub schema: &'static str,
    pub version: u32,
    pub baseline: SampleInfo,
    pub current: SampleInfo,
    pub test: TestKind,
    pub alpha: f64,
    pub max_regression_pct: f64,
    /// `pass` or `regression`.
    pub verdict: &'static str,
    pub regressions: usize,
    pub results: Vec<CheckResult>,
}

/// Checks `current` against `baseline`.
pub fn check(
    baseline: &Sample,
    current: &Sample,
    opts: &CheckOptions,
) -> Result<CheckReport, BenchError> {
    if !(opts.alpha > 0.0 && opts.alpha < 1.0) {
        return Err(BenchError::Usage(format!(
            "--alpha {}: give a significance level between 0 and 1 (for example 0.01)",
            opts.alpha
        )));
    }
    if opts.test.paired() {
        return Err(BenchError::Usage(
            "--test wilcoxon: check compares with a baseline recorded apart, whose runs pair \
             with none of the current file's; use welch or mann-whitney"
                .into(),
        ));
    }
    if !(opts.max_regression_pct >= 0.0 && opts.max_regression_pct.is_finite()) {
        return Err(BenchError::Usage(
            "--max-regression: give a percentage, 0 or more".into(),
        ));
    }
    let specs: Vec<MetricSpec> = if opts.metrics.is_empty() {
        check_phases(baseline, current)?;
        let mut names: Vec<String> = baseline
            .values
            .keys()
            .filter(|k| *k == "time_to_userspace" || *k == "exits:total" || k.starts_with("phase:"))
            // Checked where both have it.
            .filter(|k| *k != PROFILER_ATTACH || current.values.contains_key(*k))
            .cloned()
            .collect();
        if names.is_empty() {
            // A command's benchmark has neither: its wall time then.
            names.push("wall".into());
        }
        names.sort_by_key(|k| order_key(k));
        names
            .into_iter()
            .map(|name| MetricSpec {
                name,
                max_regression_pct: None,
            })
            .collect()
    } else {
        opts.metrics.clone()
    };
    let mut results = Vec::new();
    for spec in &specs {
        let m = &spec.name;
        let base = baseline.values.get(m).ok_or_else(|| baseline.missing(m))?;
        let cur = current.values.get(m).ok_or_else(|| current.missing(m))?;
        let kind = metrics::kind(m);
        if kind == MetricKind::Time {
            let need = opts.test.min_runs();
            if base.len() < need || cur.len() < need {
                return Err(BenchError::TooFewRuns {
                    metric: m.clone(),
                    detail: format!(
                        "{} needs at least {need} successful runs on each side; the baseline has {}, \
                         the current file {}: rerun bootscope bench with --runs {} or more (5 or more \
                         give a useful test), or check counts instead (--metric exits:total)",
                        opts.test.title(),
                        base.len(),
                        cur.len(),
                        need.max(5)
                    ),
                });
            }
            let floor = stats::min_attainable_p(opts.test, base.len(), cur.len());
            if floor >= opts.alpha {
                let mut enough = base.len().min(cur.len());
                while stats::min_attainable_p(opts.test, enough, enough) >= opts.alpha {
                    enough += 1;
                }
                return Err(BenchError::TooFewRuns {
                    metric: m.clone(),
                    detail: format!(
                        "with {} and {} runs the smallest p {} can give is {}, not below --alpha {}: \
                         it could never find a regression. Use --runs {enough} or more on both sides, \
                         --test welch, or a larger --alpha",
                        base.len(),
                        cur.len(),
                        opts.test.title(),
                        format_p(floor).trim_start_matches("= "),
                        opts.alpha
                    ),
                });
            }
        }
        let Some(c) = compare_metric(m, base, cur, opts.test, opts.alpha) else {
            continue;
        };
        let limit = spec.max_regression_pct.unwrap_or(opts.max_regression_pct);
        let beyond = c.change_pct > limit;
        let regression = match kind {
            MetricKind::Count => beyond,
            MetricKind::Time => beyond && c.significant,
        };
        let (b, n) = c.centers();
        let mut message = format!(
            "{} ({} -> {}, limit +{} %)",
            c.words(),
            format_value(kind, b),
            format_value(kind, n),
            format_pct(limit)
        );
        if kind == MetricKind::Time && beyond && !c.significant {
            let _ = write!(message, "; not significant at alpha {}", opts.alpha);
        }
        results.push(CheckResult {
            metric: m.clone(),
            kind,
            status: if regression { "regression" } else { "pass" },
            max_regression_pct: limit,
            comparison: c,
            message,
        });
    }
    let regressions = results.iter().filter(|r| r.status == "regression").count();
    Ok(CheckReport {
        schema: "bootscope.check",
        version: 1,
        baseline: baseline.into(),
        current: current.into(),
        test: opts.test,
        alpha: opts.alpha,
        max_regression_pct: opts.max_regression_pct,
        verdict: if regressions > 0 {
            "regression"
        } else {
            "pass"
        },
        regressions,
        results,
    })
}

impl CheckReport {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "bootscope check: {} against baseline {}",
            describe(&self.current),
            describe(&self.baseline)
        );
        provenance_lines(
            &mut s,
            [("current:", &self.current), ("baseline:", &self.baseline)],
        );
        let _ = writeln!(
            s,
            "a regression: counts whose median grew beyond the limit; times that grew beyond it \
             with {} p < {}",
            self.test.title(),
            self.alpha
        );
        let _ = writeln!(s);
        for r in &self.results {
            let tag = if r.status == "regression" {
                "FAIL"
            } else {
                "ok  "
            };
            let _ = writeln!(s, "  {tag}  {}", r.message);
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "result: {} ({} of {} metrics regressed)",
            if self.regressions > 0 {
                "REGRESSION"
            } else {
                "pass"
            },
            self.regressions,
            self.results.len()
        );
        s
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// JUnit XML: one test case per metric, a `<failure>` per regression.
    pub fn junit(&self) -> String {
        let mut s = String::new();
        let n = self.results.len();
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r#"<testsuites name="bootscope check" tests="{n}" failures="{}" errors="0">"#,
            self.regressions
        );
        let _ = writeln!(
            s,
            r#"  <testsuite name="bootscope check {}" tests="{n}" failures="{}" errors="0" skipped="0">"#,
            xml_escape(&self.current.label),
            self.regressions
        );
        let _ = writeln!(s, "    <properties>");
        for (k, v) in [
            ("baseline", self.baseline.path.display().to_string()),
            ("current", self.current.path.display().to_string()),
            ("test", self.test.title().to_string()),
            ("alpha", self.alpha.to_string()),
            ("max_regression_pct", self.max_regression_pct.to_string()),
        ] {
            let _ = writeln!(
                s,
                r#"      <property name="{k}" value="{}"/>"#,
                xml_escape(&v)
            );
        }
        let _ = writeln!(s, "    </properties>");
        for r in &self.results {
            let class = match r.kind {
                MetricKind::Time => "bootscope.check.time",
                MetricKind::Count => "bootscope.check.count",
            };
            let name = xml_escape(&r.metric);
            if r.status == "regression" {
                let _ = writeln!(
                    s,
                    r#"    <testcase classname="{class}" name="{name}" time="0">"#
                );
                let _ = writeln!(
                    s,
                    r#"      <failure type="regression" message="{}">{}</failure>"#,
                    xml_escape(&r.message),
                    xml_escape(&r.message)
                );
                let _ = writeln!(s, "    </testcase>");
            } else {
                let _ = writeln!(
                    s,
                    r#"    <testcase classname="{class}" name="{name}" time="0"/>"#
                );
            }
        }
        let _ = writeln!(
            s,
            "    <system-out>{}</system-out>",
            xml_escape(&self.text())
        );
        let _ = writeln!(s, "  </testsuite>");
        let _ = writeln!(s, "</testsuites>");
        s
    }
}

/// Escapes text for XML attributes and content; drops the control
/// characters XML 1.0 forbids.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(path: &str, values: &[(&str, &[f64])]) -> Sample {
        Sample {
            path: path.into(),
            label: "a".into(),
            kind: ConfigKind::Bootscope,
            runs: values.first().map(|v| v.1.len()).unwrap_or(0),
            values: values
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
            rounds: values
                .iter()
                .map(|(k, v)| (k.to_string(), (0..v.len() as u32).collect()))
                .collect(),
            provenance: Provenance::default(),
        }
    }

    const MS: f64 = 1e6;

    #[test]
    fn plain_words() {
        let c = compare_metric(
            "phase:kernel",
            &[100.0 * MS, 101.0 * MS, 99.0 * MS, 100.0 * MS],
            &[88.0 * MS, 87.5 * MS, 88.5 * MS, 87.0 * MS],
            TestKind::Welch,
            0.01,
        )
        .unwrap();
        assert!(c.significant);
        assert!(
            c.words()
                .starts_with("kernel phase 12.2 % faster, p < 0.001"),
            "{}",
            c.words()
        );
        let c = compare_metric(
            "exits:io_exits",
            &[100.0; 3],
            &[150.0; 3],
            TestKind::Welch,
            0.01,
        )
        .unwrap();
        assert_eq!(c.words(), "io_exits 50.0 % more, p < 0.001");
        let c =
            compare_metric("exits:io_exits", &[100.0], &[100.0], TestKind::Welch, 0.01).unwrap();
        assert_eq!(c.words(), "io_exits unchanged");
        assert!(c.no_test.unwrap().contains("needs 2 runs per side"));
        assert_eq!(format_p(0.004), "= 0.004");
        assert_eq!(format_p(0.0123), "= 0.012");
        assert_eq!(format_p(0.21), "= 0.21");
        assert_eq!(format_p(1.0), "= 1");
        assert_eq!(format_p(0.0004), "< 0.001");
    }

    #[test]
    fn times_carry_the_ratio_interval() {
        let base: Vec<f64> = (0..12).map(|i| (100.0 + i as f64) * MS).collect();
        let new: Vec<f64> = base.iter().map(|v| v * 1.05).collect();
        let c = compare_metric("phase:kernel", &base, &new, TestKind::MannWhitney, 0.01).unwrap();
        let r = c.ratio.unwrap();
        assert_eq!(r.confidence, 0.99);
        assert!(r.low < 1.05 && 1.05 < r.high && r.low > 0.9, "{r:?}");
        // Counts, and too few runs, have none.
        let c = compare_metric("exits:io_exits", &base, &new, TestKind::Welch, 0.01).unwrap();
        assert!(c.ratio.is_none());
        let c =
            compare_metric("phase:kernel", &base[..3], &new[..3], TestKind::Welch, 0.01).unwrap();
        assert!(c.ratio.is_none());
        assert_eq!(format_confidence(0.99), "99");
        assert_eq!(format_confidence(0.995), "99.5");
    }

    #[test]
    fn paired_compare_sees_through_drift() {
        // The machine drifts from round to round (1.0 to 2.9 s); the new
        // side is 2 % slower in every round. Unpaired, the drift hides it.
        let base: Vec<f64> = (0..20).map(|r| (1.0 + 0.1 * r as f64) * 1e9).collect();
        let new: Vec<f64> = base.iter().map(|v| v * 1.02).collect();
        let mut a = sample("one.json", &[("time_to_userspace", &base)]);
        let mut b = sample("one.json", &[("time_to_userspace", &new)]);
        b.label = "b".into();
        let unpaired = compare(&a, &b, &[], TestKind::MannWhitney, 0.01).unwrap();
        assert!(!unpaired.metrics[0].significant);
        let paired = compare(&a, &b, &[], TestKind::Wilcoxon, 0.01).unwrap();
        let c = &paired.metrics[0];
        assert!(c.significant, "{c:?}");
        let r = c.ratio.unwrap();
        assert!((r.estimate - 1.02).abs() < 1e-9 && (r.low - 1.02).abs() < 1e-9);
        // Pairs are made by round: a round whose run failed on one side
        // (round 3 missing from the new side) leaves that round out.
        let rounds: Vec<u32> = (0..20).filter(|r| *r != 3).collect();
        b.values.insert(
            "time_to_userspace".into(),
            rounds.iter().map(|r| new[*r as usize]).collect(),
        );
        b.rounds.insert("time_to_userspace".into(), rounds);
        let c = &compare(&a, &b, &[], TestKind::Wilcoxon, 0.01)
            .unwrap()
            .metrics[0];
        assert_eq!((c.base.n, c.new.n), (19, 19));
        assert!((c.ratio.unwrap().high - 1.02).abs() < 1e-9);
        // Two files, or one configuration against itself: no pairs.
        let mut other = b.clone();
        other.path = "other.json".into();
        let e = compare(&a, &other, &[], TestKind::Wilcoxon, 0.01).unwrap_err();
        assert!(e.to_string().contains("one bench file"), "{e}");
        a.label = "b".into();
        assert!(compare(&a, &b, &[], TestKind::Wilcoxon, 0.01).is_err());
        // check's baseline is recorded apart.
        let opts = CheckOptions {
            metrics: vec![],
            max_regression_pct: 5.0,
            alpha: 0.01,
            test: TestKind::Wilcoxon,
        };
        let e = check(&a, &b, &opts).unwrap_err().to_string();
        assert!(e.contains("welch or mann-whitney"), "{e}");
    }

    #[test]
    fn phase_mismatch_is_an_error() {
        let a = sample(
            "a.json",
            &[
                ("phase:kernel", &[1.0, 2.0]),
                ("phase:userspace", &[1.0, 2.0]),
            ],
        );
        let b = sample(
            "b.json",
            &[
                ("phase:kernel", &[1.0, 2.0]),
                ("phase:vmm setup", &[1.0, 2.0]),
            ],
        );
        let e = compare(&a, &b, &[], TestKind::Welch, 0.01)
            .unwrap_err()
            .to_string();
        assert!(e.contains("only in a.json: userspace"), "{e}");
        assert!(e.contains("only in b.json: vmm setup"), "{e}");
        // Chosen metrics present in both still compare.
        let r = compare(&a, &b, &["phase:kernel".into()], TestKind::Welch, 0.01).unwrap();
        assert_eq!(r.metrics.len(), 1);
        let e = compare(&a, &b, &["phase:userspace".into()], TestKind::Welch, 0.01)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"phase:userspace\" is not in b.json"), "{e}");
    }

    #[test]
    fn compare_orders_and_skips_zero_metrics() {
        let a = sample(
            "a.json",
            &[
                ("kvm:hypercalls", &[0.0, 0.0]),
                ("exits:total", &[10.0, 10.0]),
                ("phase:userspace", &[1.0, 2.0]),
                ("phase:kernel", &[1.0, 2.0]),
                ("time_to_userspace", &[3.0, 4.0]),
            ],
        );
        let r = compare(&a, &a.clone(), &[], TestKind::MannWhitney, 0.05).unwrap();
        let names: Vec<&str> = r.metrics.iter().map(|c| c.metric.as_str()).collect();
        assert_eq!(
            names,
            [
                "time_to_userspace",
                "phase:kernel",
                "phase:userspace",
                "exits:total"
            ]
        );
        assert!(r.text().contains("kernel phase unchanged"), "{}", r.text());
    }

    fn opts(metrics: &[&str], pct: f64) -> CheckOptions {
        CheckOptions {
            metrics: metrics
                .iter()
                .map(|m| MetricSpec::parse(m).unwrap())
                .collect(),
            max_regression_pct: pct,
            alpha: 0.01,
            test: TestKind::Welch,
        }
    }

    #[test]
    fn count_checks() {
        let base = sample("base.json", &[("exits:io_exits", &[1000.0, 1010.0, 990.0])]);
        let same = sample("cur.json", &[("exits:io_exits", &[1005.0, 1001.0, 998.0])]);
        let r = check(&base, &same, &opts(&["exits:io_exits"], 25.0)).unwrap();
        assert_eq!(r.verdict, "pass");
        let doubled = sample("cur.json", &[("exits:io_exits", &[2000.0, 2010.0, 1990.0])]);
        let r = check(&base, &doubled, &opts(&["exits:io_exits"], 25.0)).unwrap();
        assert_eq!((r.verdict, r.regressions), ("regression", 1));
        assert!(
            r.text().contains("FAIL  io_exits 100.0 % more"),
            "{}",
            r.text()
        );
        // A metric's own limit overrides --max-regression.
        let r = check(&base, &doubled, &opts(&["exits:io_exits=150"], 25.0)).unwrap();
        assert_eq!(r.verdict, "pass");
        // Fewer exits is never a regression.
        let r = check(&doubled, &base, &opts(&["exits:io_exits"], 0.0)).unwrap();
        assert_eq!(r.verdict, "pass");
    }

    #[test]
    fn time_checks_need_significance_and_size() {
        let base = sample(
            "base.json",
            &[("phase:kernel", &[100.0, 130.0, 70.0, 101.0])],
        );
        // 30 % slower on average but very noisy: not significant.
        let noisy = sample(
            "cur.json",
            &[("phase:kernel", &[180.0, 90.0, 120.0, 130.0])],
        );
        let r = check(&base, &noisy, &opts(&["phase:kernel"], 10.0)).unwrap();
        assert_eq!(r.verdict, "pass");
        assert!(
            r.results[0].message.contains("not significant"),
            "{}",
            r.results[0].message
        );
        let base = sample(
            "base.json",
            &[("phase:kernel", &[100.0, 101.0, 99.0, 100.5])],
        );
        let slow = sample(
            "cur.json",
            &[("phase:kernel", &[130.0, 131.0, 129.0, 130.5])],
        );
        let r = check(&base, &slow, &opts(&["phase:kernel"], 10.0)).unwrap();
        assert_eq!(r.verdict, "regression");
        // Significant but within the limit.
        let r = check(&base, &slow, &opts(&["phase:kernel"], 40.0)).unwrap();
        assert_eq!(r.verdict, "pass");
        // One run: no test possible.
        let one = sample("cur.json", &[("phase:kernel", &[130.0])]);
        let e = check(&base, &one, &opts(&["phase:kernel"], 10.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs at least 2 successful runs"), "{e}");
        // Three against three can never reach alpha 0.01 with Mann-Whitney.
        let mut o = opts(&["phase:kernel"], 10.0);
        o.test = TestKind::MannWhitney;
        let three = sample("cur.json", &[("phase:kernel", &[130.0, 131.0, 129.0])]);
        let e = check(&three, &three, &o).unwrap_err().to_string();
        assert!(
            e.contains("smallest p Mann-Whitney U can give is 0.1"),
            "{e}"
        );
        assert!(e.contains("--runs 5 or more"), "{e}");
    }

    #[test]
    fn default_check_metrics_and_missing_ones() {
        let base = sample(
            "base.json",
            &[
                ("time_to_userspace", &[10.0, 11.0]),
                ("phase:kernel", &[5.0, 6.0]),
                ("exits:total", &[100.0, 100.0]),
                ("exits:io_exits", &[50.0, 50.0]),
            ],
        );
        let r = check(&base, &base.clone(), &opts(&[], 20.0)).unwrap();
        let names: Vec<&str> = r.results.iter().map(|c| c.metric.as_str()).collect();
        assert_eq!(names, ["time_to_userspace", "phase:kernel", "exits:total"]);
        let cur = sample("cur.json", &[("time_to_userspace", &[10.0, 11.0])]);
        let e = check(&base, &cur, &opts(&["exits:io_exits"], 20.0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("metric \"exits:io_exits\" is not in cur.json"),
            "{e}"
        );
        assert!(e.contains("it has: time_to_userspace"), "{e}");
        // A profiled baseline against an unprofiled run: the profiler's
        // attach is no VMM phase, so the phases still match, and it is
        // not checked where the run lacks it.
        let profiled = sample(
            "profiled.json",
            &[
                ("time_to_userspace", &[10.0, 11.0]),
                ("phase:kernel", &[5.0, 6.0]),
                ("phase:profiler attach", &[3.0, 3.0]),
            ],
        );
        let bare = sample(
            "bare.json",
            &[
                ("time_to_userspace", &[10.0, 11.0]),
                ("phase:kernel", &[5.0, 6.0]),
            ],
        );
        let r = check(&profiled, &bare, &opts(&[], 20.0)).unwrap();
        let names: Vec<&str> = r.results.iter().map(|c| c.metric.as_str()).collect();
        assert_eq!(names, ["time_to_userspace", "phase:kernel"]);
        let r = check(&profiled, &profiled.clone(), &opts(&[], 20.0)).unwrap();
        assert_eq!(r.results.len(), 3);
    }

    #[test]
    fn junit_is_well_formed() {
        let base = sample("base<1>.json", &[("exits:io_exits", &[1000.0, 1000.0])]);
        let cur = sample("cur.json", &[("exits:io_exits", &[3000.0, 3000.0])]);
        let r = check(&base, &cur, &opts(&["exits:io_exits"], 25.0)).unwrap();
        let x = r.junit();
        assert!(x.starts_with("<?xml"));
        assert!(x.contains(r#"<testsuites name="bootscope check" tests="1" failures="1""#));
        assert!(x.contains(r#"<failure type="regression" message="io_exits 200.0 % more"#));
        assert!(x.contains("base&lt;1&gt;.json"));
        assert_eq!(x.matches("<testcase").count(), 1);
        assert_eq!(x.matches("</testcase>").count(), 1);
        assert_eq!(xml_escape("a\u{1}&\"'"), "a&amp;&quot;&apos;");
    }

    #[test]
    fn metric_specs() {
        assert_eq!(
            MetricSpec::parse("exits:io_exits=30").unwrap(),
            MetricSpec {
                name: "exits:io_exits".into(),
                max_regression_pct: Some(30.0)
            }
        );
        assert_eq!(
            MetricSpec::parse("phase:firmware/boot loader")
                .unwrap()
                .max_regression_pct,
            None
        );
        assert!(MetricSpec::parse("x=lots").is_err());
        assert!(MetricSpec::parse("x=-5").is_err());
        assert!(MetricSpec::parse("=5").is_err());
    }
}
