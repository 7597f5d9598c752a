//! The bench document (`bootscope bench --output`): schema
//! `bootscope.bench`, version 2 (version 1 files, without storms, are
//! read too), described in docs/bench-schema.md. `bench` fills it, and
//! `compare`, `check`, `plot`, `advise` and the exporter's `--push` read
//! it. It keeps every run's raw values, so comparisons can run their
//! tests on them, and a summary per metric for people.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Schema name of the bench document.
pub const SCHEMA: &str = "bootscope.bench";
/// Its version; an incompatible change bumps it. Version 2 added storms
/// (`bench --parallel N`), whose runs are not all alike; version 1 files
/// are still read.
pub const VERSION: u32 = 2;
/// The oldest version read.
pub const OLDEST_VERSION: u32 = 1;

/// A whole benchmark: where and when it ran, how, and every run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchDoc {
    pub schema: String,
    pub version: u32,
    /// UTC time the benchmark started, RFC 3339.
    pub created: String,
    /// The bootscope that ran it (`bootscope 0.1.0`).
    pub bootscope: String,
    pub machine: Machine,
    pub settings: Settings,
    /// What was measured: `--meta` notes and the git revision (top-level
    /// `meta` and `git`, both optional).
    #[serde(flatten)]
    pub provenance: Provenance,
    /// One entry per configuration: one, or two when interleaved.
    pub configs: Vec<ConfigResult>,
    /// `SIGINT` or `SIGTERM` when the benchmark was interrupted: the
    /// document then holds the runs that finished before it (the run under
    /// way was stopped and left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
}

/// The machine the runs happened on (inside the lab: the lab machine).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub kernel_release: String,
    pub cpu_model: String,
    pub cpus: u32,
    pub memory_bytes: u64,
    /// `vmx`, `svm`, `pvm` or `none` (`bootscope doctor`).
    pub host_kvm: String,
}

/// How the benchmark was run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// Measured runs per configuration.
    pub runs: u32,
    /// Warm-up runs per configuration, left out of the statistics.
    pub warmup: u32,
    /// Runs of the configurations alternate (ABBA: a b, b a, a b, ...).
    pub interleaved: bool,
    /// Every run was wrapped in `bootscope profile`.
    pub profile: bool,
    /// Console patterns timed on each run's standard output, `NAME=REGEX`.
    #[serde(default)]
    pub console_patterns: Vec<String>,
    /// `bench --parallel N`: every round boots N VMs of a configuration at
    /// once (a storm), after one VM alone when N > 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
}

/// What a configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigKind {
    /// `bootscope run ARGS --timeline ...`: phases and KVM statistics.
    Bootscope,
    /// Any other command (another VMM): wall time and console marks.
    Command,
}

/// One configuration: its runs and their summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigResult {
    pub label: String,
    pub kind: ConfigKind,
    /// For `bootscope`, the arguments after `run`; for `command`, the
    /// command line.
    pub command: Vec<String>,
    /// Every run, warm-ups included, in the order they ran.
    pub runs: Vec<RunRecord>,
    /// `bench --parallel N`: every storm, in the order they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storms: Vec<StormRecord>,
    /// Per metric over the successful measured runs.
    #[serde(default)]
    pub summary: BTreeMap<String, MetricSummary>,
}

/// One run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Position in the whole benchmark (0 = first process started).
    pub index: u32,
    /// Round (0-based; warm-up rounds first).
    pub round: u32,
    pub warmup: bool,
    /// Its position in the round's storm (`bench --parallel N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<u32>,
    /// The VM booted alone before the round's storm: its metrics are the
    /// storm's single-VM figures (`solo:NAME`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub solo: bool,
    /// Exit status 0 and, for bootscope, a timeline with a clean outcome.
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The timeline's `outcome.reason`, for bootscope runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Why the run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The mark that opened the timeline's `userspace` phase, for
    /// bootscope runs that reached userspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userspace_mark: Option<String>,
    /// Metric name to value: nanoseconds for times, plain counts otherwise
    /// (see docs/bench-schema.md for the names).
    pub metrics: BTreeMap<String, u64>,
}

/// Summary of one metric in one configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetricSummary {
    pub kind: MetricKind,
    /// `ns` for times, `count` for counts.
    pub unit: String,
    #[serde(flatten)]
    pub stats: Summary,
}

/// Whether a metric is a duration or a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    /// Nanoseconds: noisy, compared with a significance test.
    Time,
    /// Events: nearly deterministic, compared by medians.
    Count,
    /// Host memory in bytes (RSS, PSS, USS): compared by medians, like
    /// counts.
    Bytes,
}

impl MetricKind {
    pub fn unit(self) -> &'static str {
        match self {
            Self::Time => "ns",
            Self::Count => "count",
            Self::Bytes => "bytes",
        }
    }
}

/// Mean, spread and five-number summary of one metric's values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for n = 1.
    pub sd: f64,
    pub min: f64,
    /// First quartile (linear interpolation between order statistics).
    pub q1: f64,
    pub median: f64,
    /// Third quartile.
    pub q3: f64,
    pub max: f64,
}

/// One storm: N VMs of one configuration started at once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StormRecord {
    /// Round (0-based; warm-up rounds first).
    pub round: u32,
    pub warmup: bool,
    /// VMs started at once.
    pub vms: u32,
    /// Every VM succeeded: only such storms enter the statistics.
    pub ok: bool,
    /// VMs that failed.
    pub failed: u32,
    /// The first spawn to the last exit, nanoseconds.
    pub makespan_ns: u64,
    /// Successful VMs per second of makespan.
    pub boots_per_second: f64,
    /// `storm:makespan` and `storm:METRIC:STAT` (see the module's
    /// description), over the successful VMs.
    pub metrics: BTreeMap<String, u64>,
}

/// A git revision: the commit checked out and whether tracked files
/// differed from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitRevision {
    /// The full commit id of `HEAD`.
    pub commit: String,
    /// Tracked files had changes not committed (untracked files do not
    /// count).
    pub dirty: bool,
}

/// The notes and revision of one benchmark; both are optional in the
/// bench document, so files without them read as before.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// `bench --meta KEY=VALUE`, by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
    /// The git revision of the directory `bench` was started in, when it
    /// is in a git work tree and git is installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitRevision>,
}

impl Provenance {
    /// One line for people (`git 1a2b3c4d5e6f, uncommitted changes; meta
    /// kernel=6.1`), or None when there is nothing to say.
    pub fn text(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(g) = &self.git {
            let short: String = g.commit.chars().take(12).collect();
            parts.push(if g.dirty {
                format!("git {short}, uncommitted changes")
            } else {
                format!("git {short}")
            });
        }
        if !self.meta.is_empty() {
            let kv: Vec<String> = self.meta.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.push(format!("meta {}", kv.join(", ")));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

impl ConfigResult {
    /// The successful measured runs.
    pub fn measured(&self) -> impl Iterator<Item = &RunRecord> {
        self.runs.iter().filter(|r| r.ok && !r.warmup)
    }

    /// Values of each metric over the successful measured runs.
    pub fn samples(&self) -> BTreeMap<String, Vec<f64>> {
        self.samples_by_round()
            .into_iter()
            .map(|(name, v)| (name, v.into_iter().map(|(_, x)| x).collect()))
            .collect()
    }

    /// Values of each metric over the successful measured runs, each with
    /// the key that pairs it with the same run of another configuration:
    /// its round, and within a storm its position (`round << 32 | vm`).
    /// A solo run's metrics are named `solo:NAME`; a storm's own metrics
    /// (`storm:...`) come from its storms with every VM successful.
    pub fn samples_by_round(&self) -> BTreeMap<String, Vec<(u64, f64)>> {
        let mut out: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
        for run in self.measured() {
            let key = u64::from(run.round) << 32 | u64::from(run.vm.unwrap_or(0));
            for (name, v) in &run.metrics {
                let name = if run.solo {
                    format!("solo:{name}")
                } else {
                    name.clone()
                };
                out.entry(name).or_default().push((key, *v as f64));
            }
        }
        for storm in self.storms.iter().filter(|s| s.ok && !s.warmup) {
            for (name, v) in &storm.metrics {
                out.entry(name.clone())
                    .or_default()
                    .push((u64::from(storm.round) << 32, *v as f64));
            }
        }
        out
    }

    /// The values of `metric` of the rounds both `self` and `other` have
    /// one in, in round order: `(self's, other's)` ([`pair_by_round`] of
    /// their [`ConfigResult::samples_by_round`]).
    pub fn paired_with(&self, other: &Self, metric: &str) -> (Vec<f64>, Vec<f64>) {
        let values = |c: &Self| c.samples_by_round().remove(metric).unwrap_or_default();
        pair_by_round(&values(self), &values(other))
    }

    /// Failed measured runs.
    pub fn failures(&self) -> usize {
        self.runs.iter().filter(|r| !r.ok && !r.warmup).count()
    }
}

/// Pairs the values of one metric of two configurations by their keys
/// (the round, and in a storm the VM's position, as
/// [`ConfigResult::samples_by_round`] gives them): the values of the keys
/// both have, in key order, `(a's, b's)`. A round whose run failed on one
/// side is left out.
pub fn pair_by_round(a: &[(u64, f64)], b: &[(u64, f64)]) -> (Vec<f64>, Vec<f64>) {
    let theirs: BTreeMap<u64, f64> = b.iter().copied().collect();
    let mine: BTreeMap<u64, f64> = a.iter().copied().collect();
    mine.iter()
        .filter_map(|(r, x)| theirs.get(r).map(|y| (*x, *y)))
        .unzip()
}

impl BenchDoc {
    /// The labels of the configurations.
    pub fn labels(&self) -> Vec<String> {
        self.configs.iter().map(|c| c.label.clone()).collect()
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        // A document of plain data always serializes.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }
}

impl Machine {
    /// Describes this machine; `host_kvm` comes from the caller (it knows
    /// how to tell VMX, SVM and PVM apart).
    pub fn detect(host_kvm: &str) -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(0);
        let memory_bytes = crate::proc::meminfo("MemTotal").unwrap_or(0);
        Self {
            hostname: read("/proc/sys/kernel/hostname").trim().into(),
            kernel_release: read("/proc/sys/kernel/osrelease").trim().into(),
            cpu_model,
            cpus,
            memory_bytes,
            host_kvm: host_kvm.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_pair_by_round_and_vm() {
        let storm = |round: u64, vm: u64| round << 32 | vm;
        let a = [(0, 1.0), (1, 2.0), (3, 4.0), (storm(4, 1), 5.0)];
        let b = [
            (3, 40.0),
            (0, 10.0),
            (2, 30.0),
            (storm(4, 1), 50.0),
            (storm(4, 2), 60.0),
        ];
        let (x, y) = pair_by_round(&a, &b);
        assert_eq!(x, [1.0, 4.0, 5.0]);
        assert_eq!(y, [10.0, 40.0, 50.0]);
        assert_eq!(pair_by_round(&a, &[]), (vec![], vec![]));
    }
}
