//! The statistics of a comparison: one metric's centres, change, test and
//! ratio interval, and every selected metric of two samples.

use std::path::PathBuf;

use serde::Serialize;

use super::{select_metrics, Sample};
use crate::error::BenchError;
use crate::metrics::{self, MetricKind};
use crate::stats::{self, Summary, TestKind, TestResult};

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
        MetricKind::Count | MetricKind::Bytes => None,
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
    pub provenance: crate::provenance::Provenance,
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
