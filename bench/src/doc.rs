//! The bench document (`bootscope bench --output`): schema
//! `bootscope.bench`, version 2 (version 1 files, without storms, are
//! read too), described in docs/bench-schema.md. It
//! keeps every run's raw values, so `compare` and `check` can run their
//! tests on them, and a summary per metric for people.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::metrics::{self, MetricKind};
use crate::provenance::Provenance;
use crate::schema::{check_schema_versions, head};
use crate::stats::{self, Summary};

/// Schema name of the bench document.
pub const SCHEMA: &str = "bootscope.bench";
/// Its version; an incompatible change bumps it. Version 2 added storms
/// (`bench --parallel N`), whose runs are not all alike; version 1 files
/// are still read.
pub const VERSION: u32 = 2;
/// The oldest version read.
pub const OLDEST_VERSION: u32 = 1;

const HINT: &str = "give a file written by `bootscope bench --output FILE`";

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
    pub storms: Vec<crate::storm::StormRecord>,
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

    /// Recomputes [`Self::summary`] from the runs.
    pub fn summarize(&mut self) {
        self.summary = self
            .samples()
            .into_iter()
            .filter_map(|(name, values)| {
                let kind = metrics::kind(&name);
                stats::summarize(&values).map(|s| {
                    (
                        name,
                        MetricSummary {
                            kind,
                            unit: kind.unit().into(),
                            stats: s,
                        },
                    )
                })
            })
            .collect();
    }

    /// Failed measured runs.
    pub fn failures(&self) -> usize {
        self.runs.iter().filter(|r| !r.ok && !r.warmup).count()
    }
}

impl BenchDoc {
    /// Reads and checks a bench file: JSON, schema, version, shape.
    pub fn read(path: &Path) -> Result<Self, BenchError> {
        let bytes = bootscope_model::input::read_input(path)?;
        Self::parse(&bytes, path)
    }

    /// [`Self::read`] on bytes already read; `path` is for messages. The
    /// document is read straight into its types (its `schema` and
    /// `version` checked first, by [`head`]): no JSON tree of the whole
    /// file is built, which would take several times the file's size.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, BenchError> {
        let value = head(bytes).map_err(|source| BenchError::NotJson {
            path: path.into(),
            hint: HINT,
            source,
        })?;
        check_schema_versions(&value, path, SCHEMA, OLDEST_VERSION, VERSION, HINT)?;
        let doc: BenchDoc = serde_json::from_slice(bytes).map_err(|e| BenchError::Malformed {
            path: path.into(),
            schema: SCHEMA,
            detail: e.to_string(),
        })?;
        if doc.configs.is_empty() {
            return Err(BenchError::Malformed {
                path: path.into(),
                schema: SCHEMA,
                detail: "no configurations".into(),
            });
        }
        Ok(doc)
    }

    /// The labels of the configurations.
    pub fn labels(&self) -> Vec<String> {
        self.configs.iter().map(|c| c.label.clone()).collect()
    }

    /// The configuration `label`, or the only one when `label` is `None`.
    pub fn config(&self, label: Option<&str>, path: &Path) -> Result<&ConfigResult, BenchError> {
        match label {
            Some(l) => {
                self.configs
                    .iter()
                    .find(|c| c.label == l)
                    .ok_or_else(|| BenchError::NoSuchConfig {
                        path: path.into(),
                        label: l.into(),
                        labels: self.labels(),
                    })
            }
            None if self.configs.len() == 1 => Ok(&self.configs[0]),
            None => Err(BenchError::AmbiguousConfig {
                path: path.into(),
                labels: self.labels(),
            }),
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        // A document of plain data always serializes.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample_doc() -> BenchDoc {
        let run = |i: u32, warmup: bool, kernel: u64, io: u64| RunRecord {
            index: i,
            round: i,
            warmup,
            vm: None,
            solo: false,
            ok: true,
            exit_code: Some(0),
            outcome: Some("guest_halt".into()),
            error: None,
            userspace_mark: None,
            metrics: [
                ("phase:kernel".to_string(), kernel),
                ("exits:io_exits".to_string(), io),
            ]
            .into_iter()
            .collect(),
        };
        let mut c = ConfigResult {
            label: "a".into(),
            kind: ConfigKind::Bootscope,
            command: vec!["--kernel".into(), "k".into()],
            runs: vec![
                run(0, true, 99, 1),
                run(1, false, 10, 100),
                run(2, false, 12, 102),
            ],
            storms: Vec::new(),
            summary: BTreeMap::new(),
        };
        c.summarize();
        BenchDoc {
            schema: SCHEMA.into(),
            version: VERSION,
            created: "2026-01-01T00:00:00Z".into(),
            bootscope: "bootscope 0.1.0".into(),
            machine: Machine::default(),
            settings: Settings {
                runs: 2,
                warmup: 1,
                interleaved: false,
                profile: false,
                console_patterns: Vec::new(),
                parallel: None,
            },
            provenance: Provenance::default(),
            configs: vec![c],
            interrupted_by: None,
        }
    }

    #[test]
    fn round_trip_and_summary_skip_warmups() {
        let doc = sample_doc();
        let s = &doc.configs[0].summary["phase:kernel"];
        assert_eq!(s.stats.n, 2);
        assert_eq!(s.stats.mean, 11.0);
        assert_eq!(s.unit, "ns");
        assert_eq!(doc.configs[0].summary["exits:io_exits"].unit, "count");
        let back = BenchDoc::parse(&doc.to_json(), Path::new("x.json")).unwrap();
        assert_eq!(back.configs[0].runs.len(), 3);
        // Without notes or a revision the file has neither field.
        let v: serde_json::Value = serde_json::from_slice(&doc.to_json()).unwrap();
        assert!(v.get("meta").is_none() && v.get("git").is_none(), "{v}");
    }

    #[test]
    fn storm_samples() {
        let mut doc = sample_doc();
        let c = &mut doc.configs[0];
        c.runs[1].solo = true;
        c.runs[2].vm = Some(0);
        let mut third = c.runs[2].clone();
        third.vm = Some(1);
        third.metrics.insert("phase:kernel".into(), 14);
        c.runs.push(third);
        let storm = |round: u32, ok: bool| crate::storm::StormRecord {
            round,
            warmup: false,
            vms: 2,
            ok,
            failed: u32::from(!ok),
            makespan_ns: 20,
            boots_per_second: 1e8,
            metrics: [("storm:makespan".to_string(), 20 + u64::from(round))]
                .into_iter()
                .collect(),
        };
        c.storms = vec![storm(2, true), storm(3, false)];
        c.summarize();
        let samples = c.samples_by_round();
        assert_eq!(samples["solo:phase:kernel"], [(1 << 32, 10.0)]);
        // Storm VMs pair by round and position.
        assert_eq!(
            samples["phase:kernel"],
            [(2 << 32, 12.0), ((2 << 32) + 1, 14.0)]
        );
        // A storm with a failed VM is left out.
        assert_eq!(samples["storm:makespan"], [(2 << 32, 22.0)]);
        let back = BenchDoc::parse(&doc.to_json(), Path::new("x.json")).unwrap();
        assert_eq!(back.configs[0].storms.len(), 2);
        assert!(back.configs[0].runs[1].solo);
        // A version 1 file is still read.
        let mut v: serde_json::Value = serde_json::from_slice(&sample_doc().to_json()).unwrap();
        v["version"] = 1.into();
        BenchDoc::parse(v.to_string().as_bytes(), Path::new("v1.json")).unwrap();
    }

    #[test]
    fn notes_and_revision_round_trip() {
        let mut doc = sample_doc();
        doc.provenance.meta.insert("kernel".into(), "6.1".into());
        doc.provenance.git = Some(crate::provenance::GitRevision {
            commit: "abc".into(),
            dirty: false,
        });
        let v: serde_json::Value = serde_json::from_slice(&doc.to_json()).unwrap();
        assert_eq!(v["meta"]["kernel"], "6.1");
        assert_eq!(v["git"]["commit"], "abc");
        assert_eq!(v["git"]["dirty"], false);
        let back = BenchDoc::parse(&doc.to_json(), Path::new("x.json")).unwrap();
        assert_eq!(back.provenance, doc.provenance);
    }

    #[test]
    fn bad_files_are_named_and_explained() {
        let p = Path::new("base.json");
        let e = BenchDoc::parse(b"{not json", p).unwrap_err().to_string();
        assert!(e.starts_with("base.json is not JSON"), "{e}");
        let e = BenchDoc::parse(br#"{"schema":"bootscope.timeline","version":1}"#, p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("schema \"bootscope.timeline\", expected bootscope.bench"),
            "{e}"
        );
        let e = BenchDoc::parse(br#"{"schema":"bootscope.bench","version":7}"#, p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("version 7, this bootscope reads version 2"),
            "{e}"
        );
        let e = BenchDoc::parse(br#"{"schema":"bootscope.bench","version":1}"#, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("malformed bootscope.bench file"), "{e}");
    }

    #[test]
    fn choosing_a_configuration() {
        let mut doc = sample_doc();
        let p = Path::new("f.json");
        assert_eq!(doc.config(None, p).unwrap().label, "a");
        let mut b = doc.configs[0].clone();
        b.label = "b".into();
        doc.configs.push(b);
        let e = doc.config(None, p).unwrap_err().to_string();
        assert!(e.contains("holds 2 configurations (a, b)"), "{e}");
        assert_eq!(doc.config(Some("b"), p).unwrap().label, "b");
        assert!(doc.config(Some("c"), p).is_err());
    }
}
