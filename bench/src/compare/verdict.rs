//! `check`'s verdicts: each metric passes or is a regression, by the
//! rules in the module documentation of [`compare`](super).

use std::fmt::Write as _;

use serde::Serialize;

use super::comparison::{compare_metric, Comparison, SampleInfo};
use super::format::{format_p, format_pct, format_value};
use super::{check_phases, is_profiler_phase, order_key, Sample};
use crate::error::BenchError;
use crate::metrics::{self, MetricKind};
use crate::stats::{self, TestKind};

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
    check_options(opts)?;
    let specs: Vec<MetricSpec> = if opts.metrics.is_empty() {
        default_specs(baseline, current)?
    } else {
        opts.metrics.clone()
    };
    let mut results = Vec::new();
    for spec in &specs {
        let m = &spec.name;
        let base = baseline.values.get(m).ok_or_else(|| baseline.missing(m))?;
        let cur = current.values.get(m).ok_or_else(|| current.missing(m))?;
        if metrics::kind(m) == MetricKind::Time {
            check_enough_runs(m, base, cur, opts)?;
        }
        results.extend(check_metric(spec, base, cur, opts));
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

/// Refuses options `check` cannot work with.
fn check_options(opts: &CheckOptions) -> Result<(), BenchError> {
    if !(opts.alpha > 0.0 && opts.alpha < 1.0) {
        return Err(BenchError::Usage(format!(
            "--alpha {}: give a significance level between 0 and 1 (for example 0.01)",
            super::format::format_level(opts.alpha)
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
    Ok(())
}

/// What is checked when no metric is named: time to userspace, every phase
/// and exits:total (and of storms the p99 time to userspace and the
/// makespan), after checking both booted through the same phases.
fn default_specs(baseline: &Sample, current: &Sample) -> Result<Vec<MetricSpec>, BenchError> {
    check_phases(baseline, current)?;
    let mut names: Vec<String> = baseline
        .values
        .keys()
        .filter(|k| {
            *k == "time_to_userspace"
                || *k == "exits:total"
                || k.starts_with("phase:")
                || *k == "storm:time_to_userspace:p99"
                || *k == "storm:makespan"
        })
        // Checked where both have it.
        .filter(|k| !is_profiler_phase(k) || current.values.contains_key(*k))
        .cloned()
        .collect();
    if names.is_empty() {
        // A command's benchmark has neither: its wall time then.
        names.push("wall".into());
    }
    names.sort_by_key(|k| order_key(k));
    Ok(names
        .into_iter()
        .map(|name| MetricSpec {
            name,
            max_regression_pct: None,
        })
        .collect())
}

/// A time metric needs enough runs for the test to find a regression at
/// all; the error says how many.
fn check_enough_runs(
    m: &str,
    base: &[f64],
    cur: &[f64],
    opts: &CheckOptions,
) -> Result<(), BenchError> {
    let need = opts.test.min_runs();
    if base.len() < need || cur.len() < need {
        return Err(BenchError::TooFewRuns {
            metric: m.to_string(),
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
            metric: m.to_string(),
            detail: format!(
                "with {} and {} runs the smallest p {} can give is {}, not below --alpha {}: \
                 it could never find a regression. Use --runs {enough} or more on both sides, \
                 --test welch, or a larger --alpha",
                base.len(),
                cur.len(),
                opts.test.title(),
                format_p(floor).trim_start_matches("= "),
                super::format::format_level(opts.alpha)
            ),
        });
    }
    Ok(())
}

/// The verdict on one metric (none when a side has no values).
fn check_metric(
    spec: &MetricSpec,
    base: &[f64],
    cur: &[f64],
    opts: &CheckOptions,
) -> Option<CheckResult> {
    let m = &spec.name;
    let kind = metrics::kind(m);
    let c = compare_metric(m, base, cur, opts.test, opts.alpha)?;
    let limit = spec.max_regression_pct.unwrap_or(opts.max_regression_pct);
    let beyond = c.change_pct > limit;
    let regression = match kind {
        MetricKind::Count | MetricKind::Bytes => beyond,
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
        let _ = write!(
            message,
            "; not significant at alpha {}",
            super::format::format_level(opts.alpha)
        );
    }
    Some(CheckResult {
        metric: m.clone(),
        kind,
        status: if regression { "regression" } else { "pass" },
        max_regression_pct: limit,
        comparison: c,
        message,
    })
}
