//! Exporters: a [`Profile`] as pretty JSON, CSV tables, Prometheus text
//! exposition or a Chrome Trace Event file for Perfetto. Documented in
//! docs/export.md.
//!
//! The input is a profile or a VMM boot timeline (`bootscope run
//! --timeline`); a timeline becomes a profile with marks and phases only
//! ([`profile_from_timeline`]), so every format renders from one type.

mod chrome;
mod csv;
mod fault_tail;
mod pprof;
mod prometheus;
mod timeline;

#[cfg(test)]
mod fixture;

use std::path::Path;
use std::str::FromStr;

use serde::Deserialize as _;

use bootscope_model::document::{kind_of, DocKind, DocumentError};

use crate::profile::{Profile, PROFILE_SCHEMA_NAME, PROFILE_SCHEMA_VERSION};

pub use chrome::{to_chrome_trace, PHASES_TID};
pub use csv::to_csv;
pub use pprof::to_pprof;
pub use prometheus::to_prometheus;
pub use timeline::{
    profile_from_timeline, TimelineError, TIMELINE_SCHEMA_NAME, TIMELINE_SCHEMA_VERSION,
    UNIT_PHASE_PREFIX,
};

/// Names accepted by [`Format::parse`], as the CLI's `--format` spells them.
pub const FORMAT_NAMES: [&str; 6] = [
    "json",
    "csv",
    "prometheus",
    "chrome-trace",
    "folded",
    "pprof",
];
/// Names accepted for the CSV `--table`.
/// (`fault-tail` is pprof's: `--format pprof --table fault-tail`).
pub const CSV_TABLE_NAMES: [&str; 8] = [
    "exits",
    "latency",
    "phases",
    "threads",
    "exit-sites",
    "npf-ranges",
    "guest-log",
    "fault-tail",
];

/// One of the CSV tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CsvTable {
    /// Exit-reason histogram:
    /// `reason,code,count,share_percent,latency_total_ns,latency_mean_ns`.
    #[default]
    Exits,
    /// Exit latency buckets: `reason,lo_ns,hi_ns,count`.
    Latency,
    /// Boot phases: `phase,start_ms,end_ms,duration_ms`.
    Phases,
    /// Threads: `tid,name,role,cpus,nodes,pages_allocated,pages_local,pages_remote`.
    Threads,
    /// Exit sites: `reason,vcpu,phase,rip,function,offset,count,share_percent,latency_total_ns,latency_mean_ns`.
    ExitSites,
    /// Nested page faults by guest-physical range:
    /// `gpa_start,gpa_end,phase,label,count,latency_total_ns,latency_mean_ns`.
    NpfRanges,
    /// The guest kernel's log read from its memory (`bootscope profile`
    /// of another VMM): `guest_ts_ns,t_ns,text` (`t_ns` on the profile's
    /// clock where the console anchored it, else empty; the text with
    /// control characters escaped, one record a row).
    GuestLog,
}

impl FromStr for CsvTable {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "exits" => Ok(Self::Exits),
            "latency" => Ok(Self::Latency),
            "phases" => Ok(Self::Phases),
            "threads" => Ok(Self::Threads),
            "exit-sites" => Ok(Self::ExitSites),
            "npf-ranges" => Ok(Self::NpfRanges),
            "guest-log" => Ok(Self::GuestLog),
            _ => Err(FormatError::UnknownTable(s.to_string())),
        }
    }
}

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The normalized profile, pretty-printed.
    Json,
    /// One CSV table.
    Csv(CsvTable),
    /// Prometheus text exposition format 0.0.4.
    Prometheus,
    /// Chrome Trace Event JSON (object form), for ui.perfetto.dev.
    ChromeTrace,
    /// `exits.sites` alone, as JSON (`--format json --table exit-sites`).
    ExitSitesJson,
    /// `reason;function count` lines of the exit sites (flame graphs).
    Folded,
    /// The exit sites as a gzipped pprof profile.
    Pprof,
    /// A restore's fault tail as a gzipped pprof profile (`--format pprof
    /// --table fault-tail`).
    FaultTailPprof,
}

impl Format {
    /// The formats every profile renders in, sites or not (the others
    /// render the exit sites).
    pub const EVERY_PROFILE: [Format; 7] = [
        Format::Json,
        Format::Csv(CsvTable::Exits),
        Format::Csv(CsvTable::Latency),
        Format::Csv(CsvTable::Phases),
        Format::Csv(CsvTable::Threads),
        Format::Prometheus,
        Format::ChromeTrace,
    ];
}

/// A format or table name that does not exist, or a table without CSV.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Unknown `--format`.
    #[error("unknown format {0:?}; use one of json, csv, prometheus, chrome-trace, folded, pprof")]
    UnknownFormat(String),
    /// Unknown `--table`.
    #[error("unknown CSV table {0:?}; use one of exits, latency, phases, threads, exit-sites, npf-ranges, guest-log")]
    UnknownTable(String),
    /// `--table` given with a format that has no tables.
    #[error("--table only applies to --format csv (and --format json with --table exit-sites, --format pprof with --table fault-tail); the {0} format has a single form")]
    TableWithoutCsv(String),
}

impl Format {
    /// The format named `name` (one of [`FORMAT_NAMES`]), with the CSV table
    /// `table` (default `exits`); a table with another format is an error.
    pub fn parse(name: &str, table: Option<&str>) -> Result<Self, FormatError> {
        let format = match name {
            "json" if table == Some("exit-sites") => return Ok(Self::ExitSitesJson),
            "pprof" if table == Some("fault-tail") => return Ok(Self::FaultTailPprof),
            "json" => Self::Json,
            "csv" => Self::Csv(
                table
                    .map(CsvTable::from_str)
                    .transpose()?
                    .unwrap_or_default(),
            ),
            "prometheus" => Self::Prometheus,
            "chrome-trace" => Self::ChromeTrace,
            "folded" => Self::Folded,
            "pprof" => Self::Pprof,
            _ => return Err(FormatError::UnknownFormat(name.to_string())),
        };
        if table.is_some() && !matches!(format, Self::Csv(_)) {
            return Err(FormatError::TableWithoutCsv(name.to_string()));
        }
        Ok(format)
    }
}

/// What an input file was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A profile (`bootscope.profile`).
    Profile,
    /// A VMM boot timeline (`bootscope.timeline`), converted.
    Timeline,
}

/// Errors reading an export input. Each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file cannot be opened, or is beyond the input limits
    /// ([`bootscope_model::input`]).
    #[error("{0}; give the path of a profile (bootscope profile --output FILE) or of a boot timeline (bootscope run --timeline FILE)")]
    Limits(#[from] bootscope_model::input::InputError),
    /// The file cannot be read.
    #[error("cannot read {path}: {source}; give the path of a profile (bootscope profile --output FILE) or of a boot timeline (bootscope run --timeline FILE)")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON at all.
    #[error("{path} is not JSON ({detail}); export reads a bootscope profile or boot timeline, which are JSON files")]
    NotJson { path: String, detail: String },
    /// JSON, but neither a profile nor a timeline.
    #[error("{path} is neither a bootscope profile nor a boot timeline: its \"schema\" field is {found}, expected \"{PROFILE_SCHEMA_NAME}\" or \"{TIMELINE_SCHEMA_NAME}\"")]
    UnknownSchema { path: String, found: String },
    /// A profile or timeline of a version this build does not read.
    #[error("{path} is a version {found} {kind}; this bootscope reads version {supported}: export it with the bootscope that wrote it, or record it again with this one")]
    Version {
        path: String,
        kind: &'static str,
        found: u64,
        supported: u32,
    },
    /// The right schema and version, but fields are missing or wrong.
    #[error("{path} is not a valid {kind}: {detail}; was it edited by hand or cut short?")]
    Malformed {
        path: String,
        kind: &'static str,
        detail: String,
    },
}

/// Reads a profile or a boot timeline, converts a timeline, and normalizes
/// the result (see [`normalize`]). The file is read as a stream
/// ([`bootscope_model::input::document`]): a profile straight into its
/// types, after its `schema` and `version` were checked.
pub fn read_input(path: &Path) -> Result<(Profile, InputKind), InputError> {
    use bootscope_model::input::document::{JsonStream, StreamError};
    let p = path.display().to_string();
    let from_document = |kind: &'static str| {
        let p = p.clone();
        move |e: StreamError| match e {
            StreamError::Input(e) => InputError::Limits(e),
            StreamError::NotJson { detail, .. } => InputError::NotJson { path: p, detail },
            StreamError::Fields { detail, .. } => InputError::Malformed {
                path: p,
                kind,
                detail,
            },
        }
    };
    let doc = JsonStream::open(path).map_err(from_document("document"))?;
    // Which document it is is model's one decision (`kind_of`), on the
    // head the stream read; a head without both fields is decided on the
    // fields of the whole document.
    let null = serde_json::Value::Null;
    let decided = match (doc.schema_value(), doc.version_value()) {
        (schema, version) if (schema.is_some() && version.is_some()) || doc.head_is_whole() => {
            Some(decide(schema, version.unwrap_or(&null)))
        }
        _ => None,
    };
    let (mut profile, kind) = match decided {
        Some(Ok(DocKind::Profile)) => {
            const KIND: &str = "profile";
            let profile: Profile = doc.parse().map_err(from_document(KIND))?;
            profile
                .check_schema()
                .map_err(|e| profile_error(e, KIND).with_path(p.clone()))?;
            (profile, InputKind::Profile)
        }
        Some(Err(e)) => return Err(e.with_path(p)),
        // A timeline (small), or a document whose head did not tell.
        _ => {
            let v: serde_json::Value = doc.parse().map_err(from_document("document"))?;
            input_from_value(&v).map_err(|e| e.with_path(p))?
        }
    };
    normalize(&mut profile);
    Ok((profile, kind))
}

/// The documents `export` reads.
const INPUT_KINDS: [DocKind; 2] = [DocKind::Profile, DocKind::Timeline];

/// Which of [`INPUT_KINDS`] a document with these `schema` and `version`
/// fields is ([`kind_of`]), its refusal in `export`'s words.
fn decide(
    schema: Option<&serde_json::Value>,
    version: &serde_json::Value,
) -> Result<DocKind, ValueError> {
    let null = serde_json::Value::Null;
    kind_of(schema.unwrap_or(&null), version, &INPUT_KINDS).map_err(|e| {
        let kind_name = |k: DocKind| match k {
            DocKind::Timeline => "boot timeline",
            other => other.name(),
        };
        match e {
            DocumentError::NoVersion { kind } => ValueError::Version {
                kind: kind_name(kind),
                found: 0,
                supported: kind.versions().1,
            },
            DocumentError::Version { kind, found } => ValueError::Version {
                kind: kind_name(kind),
                found,
                supported: kind.versions().1,
            },
            _ => ValueError::UnknownSchema(
                schema.map_or_else(|| "missing".to_string(), ToString::to_string),
            ),
        }
    })
}

fn profile_error(e: bootscope_model::profile::ProfileError, kind: &'static str) -> ValueError {
    use bootscope_model::profile::ProfileError;
    match e {
        ProfileError::NotAProfile { found } => ValueError::UnknownSchema(found),
        ProfileError::Version { found } => ValueError::Version {
            kind,
            found,
            supported: PROFILE_SCHEMA_VERSION,
        },
        ProfileError::Field(detail) => ValueError::Malformed { kind, detail },
    }
}

/// [`InputError`] before the path is known.
enum ValueError {
    UnknownSchema(String),
    Version {
        kind: &'static str,
        found: u64,
        supported: u32,
    },
    Malformed {
        kind: &'static str,
        detail: String,
    },
}

impl ValueError {
    fn with_path(self, path: String) -> InputError {
        match self {
            Self::UnknownSchema(found) => InputError::UnknownSchema { path, found },
            Self::Version {
                kind,
                found,
                supported,
            } => InputError::Version {
                path,
                kind,
                found,
                supported,
            },
            Self::Malformed { kind, detail } => InputError::Malformed { path, kind, detail },
        }
    }
}

fn input_from_value(v: &serde_json::Value) -> Result<(Profile, InputKind), ValueError> {
    let null = serde_json::Value::Null;
    match decide(v.get("schema"), v.get("version").unwrap_or(&null))? {
        DocKind::Timeline => {
            const KIND: &str = "boot timeline";
            let profile = profile_from_timeline(v).map_err(|e| match e {
                TimelineError::Version { found } => ValueError::Version {
                    kind: KIND,
                    found,
                    supported: TIMELINE_SCHEMA_VERSION,
                },
                other => ValueError::Malformed {
                    kind: KIND,
                    detail: other.to_string(),
                },
            })?;
            Ok((profile, InputKind::Timeline))
        }
        _ => {
            let profile = Profile::deserialize(v).map_err(|e| ValueError::Malformed {
                kind: "profile",
                detail: e.to_string(),
            })?;
            Ok((profile, InputKind::Profile))
        }
    }
}

/// Puts a profile in its canonical order, so that exports of equal profiles
/// are equal: marks, phases and samples by time, exit reasons by count
/// (largest first, then name), threads by first appearance, histogram
/// buckets by lower bound, sources and per-vCPU lists by name and number.
/// Values are never changed.
pub fn normalize(p: &mut Profile) {
    p.sources.sort_by(|a, b| a.name.cmp(&b.name));
    p.exits
        .by_reason
        .sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.reason.cmp(&b.reason)));
    for r in &mut p.exits.by_reason {
        r.latency_hist.sort_by_key(|b| (b.lo_ns, b.hi_ns));
    }
    p.exits.by_vcpu.sort_by_key(|v| v.vcpu);
    p.page_faults
        .host_latency_hist
        .sort_by_key(|b| (b.lo_ns, b.hi_ns));
    p.page_faults.by_thread.sort_by_key(|t| t.tid);
    p.threads.sort_by_key(|t| (t.start_ns, t.tid));
    for t in &mut p.threads {
        t.cpus.sort_by_key(|c| c.cpu);
        t.nodes.sort_unstable();
        t.nodes.dedup();
    }
    p.numa.by_node.sort_by_key(|n| n.node);
    p.host.numa_nodes.sort_by_key(|n| n.id);
    p.marks.sort_by_key(|m| m.t_ns);
    p.phases.sort_by_key(|ph| (ph.start_ns, ph.end_ns));
    p.samples.sort_by_key(|s| s.t_ns);
}

/// Renders a profile in `format`. Every format is text and ends with a
/// newline.
pub fn render(profile: &Profile, format: Format) -> String {
    match format {
        Format::Json => {
            // A Profile has only string map keys and integers: it always
            // serializes.
            let mut s = serde_json::to_string_pretty(profile).expect("a Profile serializes");
            s.push('\n');
            s
        }
        Format::Csv(table) => to_csv(profile, table),
        Format::Prometheus => to_prometheus(profile),
        Format::ChromeTrace => to_chrome_trace(profile),
        Format::ExitSitesJson => {
            let sites = profile.exits.sites.clone().unwrap_or_default();
            let mut s = serde_json::to_string_pretty(&sites).expect("exit sites serialize");
            s.push('\n');
            s
        }
        Format::Folded => profile
            .exits
            .sites
            .as_ref()
            .map(|s| s.folded())
            .unwrap_or_default(),
        Format::Pprof | Format::FaultTailPprof => String::new(),
    }
}

/// The export as bytes: [`render`]'s text, or pprof's gzipped protobuf.
pub fn render_bytes(profile: &Profile, format: Format) -> Vec<u8> {
    match format {
        Format::Pprof => to_pprof(profile),
        Format::FaultTailPprof => fault_tail::to_pprof(profile),
        other => render(profile, other).into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "bootscope-export-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn formats_parse() {
        assert_eq!(Format::parse("json", None), Ok(Format::Json));
        assert_eq!(Format::parse("csv", None), Ok(Format::Csv(CsvTable::Exits)));
        assert_eq!(
            Format::parse("csv", Some("threads")),
            Ok(Format::Csv(CsvTable::Threads))
        );
        assert_eq!(Format::parse("chrome-trace", None), Ok(Format::ChromeTrace));
        assert_eq!(Format::parse("prometheus", None), Ok(Format::Prometheus));
        assert!(matches!(
            Format::parse("xml", None),
            Err(FormatError::UnknownFormat(_))
        ));
        assert!(matches!(
            Format::parse("csv", Some("bogus")),
            Err(FormatError::UnknownTable(_))
        ));
        assert!(matches!(
            Format::parse("json", Some("phases")),
            Err(FormatError::TableWithoutCsv(_))
        ));
        for n in FORMAT_NAMES {
            assert!(Format::parse(n, None).is_ok(), "{n}");
        }
        for t in CSV_TABLE_NAMES.iter().filter(|t| **t != "fault-tail") {
            assert!(Format::parse("csv", Some(t)).is_ok(), "{t}");
        }
        assert_eq!(
            Format::parse("pprof", Some("fault-tail")),
            Ok(Format::FaultTailPprof)
        );
    }

    #[test]
    fn json_round_trips_normalized() {
        let mut p = fixture::profile();
        p.marks.reverse();
        p.exits.by_reason.reverse();
        let out = render(&p, Format::Json);
        assert!(out.ends_with("}\n"));
        let back: Profile = serde_json::from_str(&out).unwrap();
        assert_eq!(back, p);

        let d = scratch("json");
        let f = d.join("p.json");
        std::fs::write(&f, &out).unwrap();
        let (read, kind) = read_input(&f).unwrap();
        assert_eq!(kind, InputKind::Profile);
        let mut expected = p.clone();
        normalize(&mut expected);
        assert_eq!(read, expected);
        assert!(read.marks.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        assert!(read
            .exits
            .by_reason
            .windows(2)
            .all(|w| w[0].count >= w[1].count));
        // Normalizing twice changes nothing.
        let mut again = read.clone();
        normalize(&mut again);
        assert_eq!(again, read);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn empty_profile_renders_in_every_format() {
        let p = Profile::new();
        for f in Format::EVERY_PROFILE {
            let out = render(&p, f);
            assert!(out.ends_with('\n'), "{f:?}: {out}");
            assert!(!out.trim().is_empty(), "{f:?}");
        }
    }

    #[test]
    fn bad_inputs_name_the_file() {
        let d = scratch("bad");
        let missing = d.join("missing.json");
        let e = read_input(&missing).unwrap_err();
        assert!(matches!(e, InputError::Limits(_)), "{e}");
        assert!(e.to_string().contains("missing.json"), "{e}");
        assert!(e.to_string().contains("bootscope run --timeline"), "{e}");

        let cases: [(&str, &str, &[&str]); 6] = [
            ("text.json", "hello\n", &["is not JSON"]),
            ("empty.json", "", &["is not JSON"]),
            (
                "other.json",
                r#"{"schema":"something.else","version":1}"#,
                &["neither a bootscope profile", "\"something.else\""],
            ),
            (
                "noschema.json",
                r#"[1,2,3]"#,
                &["is not JSON", "first byte is '['"],
            ),
            (
                "v9.json",
                r#"{"schema":"bootscope.profile","version":9}"#,
                &["version 9 profile", "reads version 2"],
            ),
            (
                "tv4.json",
                r#"{"schema":"bootscope.timeline","version":4}"#,
                &["version 4 boot timeline", "reads version 3"],
            ),
        ];
        for (name, text, needles) in cases {
            let f = d.join(name);
            std::fs::write(&f, text).unwrap();
            let e = read_input(&f).unwrap_err().to_string();
            assert!(e.contains(name), "{name}: {e}");
            for n in needles {
                assert!(e.contains(n), "{name}: {e} lacks {n}");
            }
        }

        let f = d.join("broken-profile.json");
        std::fs::write(
            &f,
            r#"{"schema":"bootscope.profile","version":1,"marks":3}"#,
        )
        .unwrap();
        let e = read_input(&f).unwrap_err();
        assert!(matches!(e, InputError::Malformed { .. }), "{e}");
        assert!(e.to_string().contains("broken-profile.json"));

        let f = d.join("broken-timeline.json");
        std::fs::write(
            &f,
            r#"{"schema":"bootscope.timeline","version":1,"marks":[{"name":"x","source":"vmm"}],"phases":[]}"#,
        )
        .unwrap();
        let e = read_input(&f).unwrap_err().to_string();
        assert!(e.contains("broken-timeline.json"), "{e}");
        assert!(e.contains("marks[0].t_ns"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn timeline_file_is_converted() {
        let d = scratch("timeline");
        let f = d.join("t.json");
        std::fs::write(&f, fixture::TIMELINE_EXAMPLE).unwrap();
        let (p, kind) = read_input(&f).unwrap();
        assert_eq!(kind, InputKind::Timeline);
        assert_eq!(p.exits.kvm_stats_exits, Some(21191));
        for format in [Format::ChromeTrace, Format::Prometheus] {
            assert!(render(&p, format).contains("kernel"));
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
