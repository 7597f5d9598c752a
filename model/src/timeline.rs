//! The boot timeline document (`bootscope run --timeline`,
//! docs/timeline-schema.md) as its readers see it: typed, with the fields
//! readers use, tolerant of fields it does not name. The VMM writes it
//! (`bootscope_vmm::timeline::TimelineDoc`); the constants below follow
//! the VMM's, which an end-to-end test checks.
//!
//! [`Timeline::parse`] checks the schema name and version and reads what
//! is there; [`Timeline::parse_complete`] also requires complete marks and
//! phases and names the first field that is missing or wrong.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::mark::MarkSource;

/// The timeline's `schema` field.
pub const TIMELINE_SCHEMA_NAME: &str = "bootscope.timeline";
/// The timeline version the VMM writes (2 added the `units` object).
pub const TIMELINE_SCHEMA_VERSION: u32 = 2;
/// The oldest version this reader reads (version 2 only added to 1).
pub const TIMELINE_SCHEMA_MIN_VERSION: u32 = 1;

/// Why a JSON document is not a readable timeline.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimelineError {
    /// Not a timeline at all.
    #[error("its \"schema\" field is {found}, not \"{TIMELINE_SCHEMA_NAME}\"")]
    NotATimeline { found: String },
    /// A timeline of another version.
    #[error(
        "it is a version {found} timeline; this bootscope reads versions {TIMELINE_SCHEMA_MIN_VERSION} to {TIMELINE_SCHEMA_VERSION}"
    )]
    Version { found: u64 },
    /// A field is missing or has the wrong type or value.
    #[error("field {field} {problem}")]
    Field { field: String, problem: String },
}

/// A boot timeline.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Timeline {
    pub schema: String,
    pub version: u64,
    /// The VMM's name and version (`bootscope 0.1.0`).
    pub vmm: String,
    /// `vmx`, `svm`, `pvm` or `none`.
    pub host_kvm: String,
    pub guest: Option<TimelineGuest>,
    pub outcome: Option<TimelineOutcome>,
    pub marks: Vec<TimelineMark>,
    pub phases: Vec<TimelinePhase>,
    /// KVM's own statistics, summed over vCPUs; None when absent or null.
    pub kvm_stats: Option<BTreeMap<String, u64>>,
    /// The guest memory set-up (`run --prealloc`).
    pub memory: Option<TimelineMemory>,
    /// The kernel's initcalls (`run --initcalls`).
    pub initcalls: Option<TimelineInitcalls>,
    /// What the VMM process cost the host in memory at the first
    /// userspace mark (or the end of a `--stop-after` set-up).
    pub host_memory: Option<crate::smaps::MemorySample>,
    /// A systemd guest's units (version 2).
    pub units: Option<crate::units::UnitsDoc>,
}

/// The `guest` object.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelineGuest {
    pub kernel: String,
    pub kernel_format: String,
    pub vcpus: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// The kernel command line the guest booted with.
    pub cmdline: String,
    /// The initrd file, when one was given.
    pub initrd: Option<String>,
    /// The initrd's pages are the file's page cache (`--map-initrd`).
    pub initrd_mapped_from_file: Option<bool>,
    /// How a bzImage was decompressed and entered.
    pub kernel_boot: Option<TimelineKernelBoot>,
}

/// The `guest.kernel_boot` object (bzImage kernels only).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelineKernelBoot {
    /// `host` or `guest`.
    pub decompressed_by: String,
    pub compression: String,
    pub kaslr: Option<bool>,
    pub decompress_ns: Option<u64>,
}

/// The `initcalls` object (`run --initcalls`, docs/initcalls.md).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelineInitcalls {
    pub method: String,
    /// Why no initcall was recorded.
    pub error: Option<String>,
    pub initcalls: Vec<TimelineInitcall>,
}

/// One of `initcalls.initcalls[]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelineInitcall {
    pub name: String,
    pub level: String,
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Its return value (negative: an errno, e.g. -19 ENODEV).
    pub ret: i64,
    /// Port I/O exits the VMM counted in its span.
    pub io_exits: Option<u64>,
}

/// The `outcome` object: how the run ended.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelineOutcome {
    pub reason: String,
    pub clean: Option<bool>,
    pub detail: String,
}

/// One of `marks[]`: an instant.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelineMark {
    pub name: String,
    pub source: MarkSource,
    pub t_ns: u64,
    /// The byte written, for port and MMIO marks.
    pub value: Option<u64>,
    /// The vCPU that wrote it.
    pub vcpu: Option<u32>,
}

/// One of `phases[]`: an interval between two marks.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelinePhase {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
}

/// The `memory` object, as far as readers other than the VMM use it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TimelineMemory {
    /// Time spent preallocating guest memory.
    pub elapsed_ns: Option<u64>,
}

/// What a field must hold, for [`Timeline::parse_complete`]'s messages.
#[derive(Clone, Copy)]
enum Expect {
    /// A string, required.
    Text,
    /// A mark source name, required.
    Source,
    /// A non-negative integer, required.
    Count,
    /// A non-negative integer or null, optional.
    OptionalCount,
}

const MARK_FIELDS: [(&str, Expect); 4] = [
    ("name", Expect::Text),
    ("source", Expect::Source),
    ("t_ns", Expect::Count),
    ("value", Expect::OptionalCount),
];

const PHASE_FIELDS: [(&str, Expect); 3] = [
    ("name", Expect::Text),
    ("start_ns", Expect::Count),
    ("end_ns", Expect::Count),
];

fn field_error(field: impl Into<String>, problem: impl Into<String>) -> TimelineError {
    TimelineError::Field {
        field: field.into(),
        problem: problem.into(),
    }
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, TimelineError> {
    v.as_object()
        .ok_or_else(|| field_error(field, "is not a JSON object"))
}

/// Checks the fields `expected` of the object `v` (named `at`).
fn check_fields(v: &Value, at: &str, expected: &[(&str, Expect)]) -> Result<(), TimelineError> {
    let obj = object(v, at)?;
    for &(key, expect) in expected {
        let field = format!("{at}.{key}");
        let value = obj.get(key);
        let ok = match (expect, value) {
            (Expect::OptionalCount, None | Some(Value::Null)) => true,
            (_, None) => return Err(field_error(field, "is missing")),
            (Expect::Text, Some(v)) => v.is_string(),
            (Expect::Source, Some(v)) => MarkSource::deserialize(v).is_ok(),
            (Expect::Count | Expect::OptionalCount, Some(v)) => v.is_u64(),
        };
        if !ok {
            let problem = match expect {
                Expect::Text => "is not a string",
                Expect::Source if value.is_some_and(Value::is_string) => {
                    "is not vmm, debug_port, boot_timer, boot_time_port, serial or guest_clock"
                }
                Expect::Source => "is not a string",
                Expect::Count | Expect::OptionalCount => "is not a non-negative integer",
            };
            return Err(field_error(field, problem));
        }
    }
    Ok(())
}

/// Checks that `root[key]` is an array of complete elements.
fn check_array(
    root: &Map<String, Value>,
    key: &str,
    expected: &[(&str, Expect)],
) -> Result<(), TimelineError> {
    let items = root
        .get(key)
        .ok_or_else(|| field_error(key, "is missing"))?
        .as_array()
        .ok_or_else(|| field_error(key, "is not an array"))?;
    for (i, item) in items.iter().enumerate() {
        check_fields(item, &format!("{key}[{i}]"), expected)?;
    }
    Ok(())
}

/// The document as an object, after checking its schema name and version.
fn check_schema(doc: &Value) -> Result<&Map<String, Value>, TimelineError> {
    let root = object(doc, "(document)")?;
    match root.get("schema") {
        Some(Value::String(s)) if s == TIMELINE_SCHEMA_NAME => {}
        other => {
            return Err(TimelineError::NotATimeline {
                found: other.map_or_else(|| "missing".to_string(), Value::to_string),
            })
        }
    }
    let found = root.get("version").and_then(Value::as_u64).unwrap_or(0);
    if !(u64::from(TIMELINE_SCHEMA_MIN_VERSION)..=u64::from(TIMELINE_SCHEMA_VERSION))
        .contains(&found)
    {
        return Err(TimelineError::Version { found });
    }
    Ok(root)
}

impl Timeline {
    /// Reads a timeline after checking its schema name and version.
    /// Fields it names must have their documented types; any may be
    /// absent.
    pub fn parse(doc: &Value) -> Result<Self, TimelineError> {
        check_schema(doc)?;
        Self::deserialize(doc).map_err(|e| field_error("(document)", e.to_string()))
    }

    /// As [`Timeline::parse`], and marks and phases must be complete:
    /// name, source and time; name, start and end with end >= start.
    /// KVM statistics, when present, must be counts.
    pub fn parse_complete(doc: &Value) -> Result<Self, TimelineError> {
        let root = check_schema(doc)?;
        check_array(root, "marks", &MARK_FIELDS)?;
        check_array(root, "phases", &PHASE_FIELDS)?;
        match root.get("kvm_stats") {
            None | Some(Value::Null) => {}
            Some(v) => {
                for (key, count) in object(v, "kvm_stats")? {
                    if !count.is_u64() {
                        let field = format!("kvm_stats.{key}");
                        return Err(field_error(field, "is not a non-negative integer"));
                    }
                }
            }
        }
        let timeline = Self::parse(doc)?;
        for (i, ph) in timeline.phases.iter().enumerate() {
            if ph.end_ns < ph.start_ns {
                return Err(field_error(
                    format!("phases[{i}].end_ns"),
                    format!("({}) is before start_ns ({})", ph.end_ns, ph.start_ns),
                ));
            }
        }
        Ok(timeline)
    }

    /// The phase called `name`.
    pub fn phase(&self, name: &str) -> Option<&TimelinePhase> {
        self.phases.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> Value {
        json!({"schema": "bootscope.timeline", "version": 1, "marks": [], "phases": []})
    }

    #[test]
    fn reads_what_is_there() {
        let t = Timeline::parse(&json!({
            "schema": "bootscope.timeline", "version": 1, "future": [1, 2],
            "guest": {"kernel": "/k", "vcpus": 2},
            "outcome": {"reason": "guest_halt", "clean": true},
            "marks": [{"name": "m", "source": "debug_port", "t_ns": 5, "value": 96, "vcpu": 0}],
            "phases": [{"name": "kernel", "start_ns": 1, "end_ns": 5, "duration_ns": 4}],
            "kvm_stats": {"exits": 3},
            "memory": {"elapsed_ns": 7, "regions": []}
        }))
        .unwrap();
        assert_eq!(t.guest.as_ref().unwrap().vcpus, Some(2));
        assert_eq!(t.outcome.as_ref().unwrap().clean, Some(true));
        assert_eq!(t.marks[0].source, MarkSource::DebugPort);
        assert_eq!(t.marks[0].value, Some(96));
        assert_eq!(t.phase("kernel").unwrap().duration_ns, 4);
        assert_eq!(t.kvm_stats.as_ref().unwrap()["exits"], 3);
        assert_eq!(t.memory.as_ref().unwrap().elapsed_ns, Some(7));
        assert!(t.initcalls.is_none());
        let t = Timeline::parse(&json!({
            "schema": "bootscope.timeline", "version": 1,
            "guest": {"cmdline": "console=ttyS0", "initrd": "/i.cpio",
                      "kernel_boot": {"decompressed_by": "host", "compression": "xz"}},
            "initcalls": {"method": "m", "initcalls": [
                {"name": "i8042_init", "level": "device", "start_ns": 3, "duration_ns": 9,
                 "ret": -19, "io_exits": 2}]}
        }))
        .unwrap();
        let g = t.guest.unwrap();
        assert_eq!(
            (g.cmdline.as_str(), g.initrd.as_deref()),
            ("console=ttyS0", Some("/i.cpio"))
        );
        assert_eq!(g.kernel_boot.unwrap().decompressed_by, "host");
        let i = &t.initcalls.unwrap().initcalls[0];
        assert_eq!(
            (i.name.as_str(), i.ret, i.io_exits),
            ("i8042_init", -19, Some(2))
        );
        assert!(Timeline::parse_complete(&minimal())
            .unwrap()
            .marks
            .is_empty());
    }

    #[test]
    fn names_what_it_cannot_read() {
        let err = |v: Value| Timeline::parse_complete(&v).unwrap_err().to_string();
        assert_eq!(
            Timeline::parse(&json!({"schema": "bootscope.timeline", "version": 3})),
            Err(TimelineError::Version { found: 3 })
        );
        let mut v = minimal();
        v["marks"] = json!([{"name": "a", "source": "port", "t_ns": 1}]);
        assert!(err(v).contains("marks[0].source is not vmm, debug_port"));
        let mut v = minimal();
        v["phases"] = json!([{"name": "a", "start_ns": 1}]);
        assert_eq!(err(v), "field phases[0].end_ns is missing");
        let mut v = minimal();
        v["guest"] = json!({"vcpus": "two"});
        assert!(err(v).starts_with("field (document) invalid type"));
    }
}
