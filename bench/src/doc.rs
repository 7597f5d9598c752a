//! Reading and checking the bench document (`bootscope bench --output`;
//! its types are the model's, [`bootscope_model::bench`], described in
//! docs/bench-schema.md), and the summary of a configuration's runs.

use std::path::Path;

pub use bootscope_model::bench::{
    BenchDoc, ConfigKind, ConfigResult, Machine, MetricSummary, RunRecord, Settings,
    OLDEST_VERSION, SCHEMA, VERSION,
};

use crate::error::BenchError;
use crate::metrics;
use crate::stats;

const HINT: &str = "give a file written by `bootscope bench --output FILE`";

/// Reads and checks a bench file: JSON, schema, version, shape. The file
/// is read as a bounded stream by the model's document reader
/// ([`crate::schema::read_bench`]).
pub fn read(path: &Path) -> Result<BenchDoc, BenchError> {
    checked(crate::schema::read_bench(path, HINT)?, path)
}

/// [`read`] on bytes already read; `path` is for messages. The document is
/// read straight into its types (its `schema` and `version` checked first,
/// on a skim, by the model's document reader): no JSON tree of the whole
/// file is built, which would take several times the file's size.
pub fn parse(bytes: &[u8], path: &Path) -> Result<BenchDoc, BenchError> {
    checked(crate::schema::parse_bench(bytes, path, HINT)?, path)
}

/// Checks the shape of a bench document read from `path`: it holds a
/// configuration.
pub fn checked(doc: BenchDoc, path: &Path) -> Result<BenchDoc, BenchError> {
    if doc.configs.is_empty() {
        return Err(BenchError::Malformed {
            path: path.into(),
            schema: SCHEMA,
            detail: "no configurations".into(),
        });
    }
    Ok(doc)
}

/// The configuration `label` of `doc` (read from `path`), or the only one
/// when `label` is `None`.
pub fn config<'d>(
    doc: &'d BenchDoc,
    label: Option<&str>,
    path: &Path,
) -> Result<&'d ConfigResult, BenchError> {
    match label {
        Some(l) => {
            doc.configs
                .iter()
                .find(|c| c.label == l)
                .ok_or_else(|| BenchError::NoSuchConfig {
                    path: path.into(),
                    label: l.into(),
                    labels: doc.labels(),
                })
        }
        None if doc.configs.len() == 1 => Ok(&doc.configs[0]),
        None => Err(BenchError::AmbiguousConfig {
            path: path.into(),
            labels: doc.labels(),
        }),
    }
}

/// Recomputes a configuration's `summary` from its runs.
pub fn summarize(c: &mut ConfigResult) {
    c.summary = c
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::provenance::Provenance;

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
        summarize(&mut c);
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
        let back = parse(&doc.to_json(), Path::new("x.json")).unwrap();
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
        let storm = |round: u32, ok: bool| bootscope_model::bench::StormRecord {
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
        summarize(c);
        let samples = c.samples_by_round();
        assert_eq!(samples["solo:phase:kernel"], [(1 << 32, 10.0)]);
        // Storm VMs pair by round and position.
        assert_eq!(
            samples["phase:kernel"],
            [(2 << 32, 12.0), ((2 << 32) + 1, 14.0)]
        );
        // A storm with a failed VM is left out.
        assert_eq!(samples["storm:makespan"], [(2 << 32, 22.0)]);
        let back = parse(&doc.to_json(), Path::new("x.json")).unwrap();
        assert_eq!(back.configs[0].storms.len(), 2);
        assert!(back.configs[0].runs[1].solo);
        // A version 1 file is still read.
        let mut v: serde_json::Value = serde_json::from_slice(&sample_doc().to_json()).unwrap();
        v["version"] = 1.into();
        parse(v.to_string().as_bytes(), Path::new("v1.json")).unwrap();
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
        let back = parse(&doc.to_json(), Path::new("x.json")).unwrap();
        assert_eq!(back.provenance, doc.provenance);
    }

    #[test]
    fn bad_files_are_named_and_explained() {
        let p = Path::new("base.json");
        let e = parse(b"{not json", p).unwrap_err().to_string();
        assert!(e.starts_with("base.json is not JSON"), "{e}");
        let e = parse(br#"{"schema":"bootscope.timeline","version":1}"#, p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("schema \"bootscope.timeline\", expected bootscope.bench"),
            "{e}"
        );
        let e = parse(br#"{"schema":"bootscope.bench","version":7}"#, p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("version 7, this bootscope reads version 2"),
            "{e}"
        );
        let e = parse(br#"{"schema":"bootscope.bench","version":1}"#, p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("malformed bootscope.bench file"), "{e}");
    }

    #[test]
    fn choosing_a_configuration() {
        let mut doc = sample_doc();
        let p = Path::new("f.json");
        assert_eq!(config(&doc, None, p).unwrap().label, "a");
        let mut b = doc.configs[0].clone();
        b.label = "b".into();
        doc.configs.push(b);
        let e = config(&doc, None, p).unwrap_err().to_string();
        assert!(e.contains("holds 2 configurations (a, b)"), "{e}");
        assert_eq!(config(&doc, Some("b"), p).unwrap().label, "b");
        assert!(config(&doc, Some("c"), p).is_err());
    }
}
