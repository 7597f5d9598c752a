//! `compare` (two samples, every shared metric, in plain words) and `check`
//! (a current benchmark against a baseline, pass or fail, in text, JSON or
//! JUnit XML).
//!
//! Times are noisy: a time regression needs a significant test (p < alpha)
//! *and* a change beyond the threshold. Counts (exits per reason, page
//! faults) barely move between runs of the same boot: a count regression is
//! median growth beyond the threshold, no test needed, so count checks stay
//! reliable on noisy machines and with three runs.
//!
//! * [`comparison`]: the statistics of one metric and of two samples.
//! * [`verdict`]: `check`'s pass or regression per metric.
//! * [`render`]: the reports as text, JSON and JUnit XML.
//! * [`format`]: the number and text formats the reports share.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::doc::{BenchDoc, ConfigKind};
use crate::error::BenchError;
use crate::provenance::Provenance;

pub mod comparison;
pub mod format;
pub mod render;
pub mod verdict;

pub use comparison::{compare, compare_metric, CompareReport, Comparison, SampleInfo};
pub use format::{format_confidence, format_p, format_pct, format_value, xml_escape};
pub use verdict::{check, CheckOptions, CheckReport, CheckResult, MetricSpec};

/// The values of one configuration of one bench file.
#[derive(Debug, Clone)]
pub struct Sample {
    pub path: PathBuf,
    pub label: String,
    pub kind: ConfigKind,
    /// Successful measured runs.
    pub runs: usize,
    pub values: BTreeMap<String, Vec<f64>>,
    /// The pairing key of each value of `values` (same order): its round,
    /// and in a storm the VM's position in it
    /// ([`crate::doc::ConfigResult::samples_by_round`]), which pairs the
    /// runs of two configurations of one interleaved bench file.
    pub rounds: BTreeMap<String, Vec<u64>>,
    /// The bench file's `--meta` notes and git revision.
    pub provenance: Provenance,
}

impl Sample {
    /// Configuration `label` (or the only one) of `doc`, read from `path`.
    pub fn from_doc(doc: &BenchDoc, path: &Path, label: Option<&str>) -> Result<Self, BenchError> {
        let c = crate::doc::config(doc, label, path)?;
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
        let keyed = |s: &Self| -> Vec<(u64, f64)> {
            let values = s.values.get(metric).map(Vec::as_slice).unwrap_or(&[]);
            let rounds = s.rounds.get(metric).map(Vec::as_slice).unwrap_or(&[]);
            rounds.iter().copied().zip(values.iter().copied()).collect()
        };
        bootscope_model::bench::pair_by_round(&keyed(self), &keyed(other))
    }

    fn has_phases(&self) -> bool {
        self.values.keys().any(|k| k.starts_with("phase:"))
    }

    /// The VMM's phases: a profiler's attach before the VMM is not one of
    /// them (a profiled run compares with an unprofiled one).
    fn phases(&self) -> BTreeSet<&str> {
        self.values
            .keys()
            .filter(|k| k.starts_with("phase:") && !is_profiler_phase(k))
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

/// The phases of a profiler attaching (`bootscope run` profiling itself):
/// before the VMM starts, and the VMM's wait for the guest programs before
/// its first KVM_RUN.
const PROFILER_PHASES: [&str; 2] = ["phase:profiler attach", "phase:profiler guest attach"];

/// One of [`PROFILER_PHASES`].
fn is_profiler_phase(metric: &str) -> bool {
    PROFILER_PHASES.contains(&metric)
}

/// Both samples with phases must have the same phases.
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

#[cfg(test)]
mod tests;
