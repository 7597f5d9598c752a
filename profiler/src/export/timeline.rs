//! A VMM boot timeline (`bootscope run --timeline`, docs/timeline-schema.md)
//! as a [`Profile`].
//!
//! The profiler does not depend on the VMM crate, so the document is read
//! field by field from JSON; the schema constants below must follow the
//! VMM's (`bootscope_vmm::timeline`), which an end-to-end test checks.

use serde_json::{Map, Value};

use crate::profile::{DataSource, Mark, MarkSource, PhaseSpan, Profile};

/// The timeline's `schema` field.
pub const TIMELINE_SCHEMA_NAME: &str = "bootscope.timeline";
/// The timeline version this converter reads.
pub const TIMELINE_SCHEMA_VERSION: u32 = 1;

/// Why a JSON document cannot be converted.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimelineError {
    /// Not a timeline at all.
    #[error("its \"schema\" field is {found}, not \"{TIMELINE_SCHEMA_NAME}\"")]
    NotATimeline { found: String },
    /// A timeline of another version.
    #[error(
        "it is a version {found} timeline; this bootscope reads version {TIMELINE_SCHEMA_VERSION}"
    )]
    Version { found: u64 },
    /// A field is missing or has the wrong type or value.
    #[error("field {field} {problem}")]
    Field { field: String, problem: String },
}

fn field_error(field: impl Into<String>, problem: &str) -> TimelineError {
    TimelineError::Field {
        field: field.into(),
        problem: problem.to_string(),
    }
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, TimelineError> {
    v.as_object()
        .ok_or_else(|| field_error(field, "is not a JSON object"))
}

fn required<'a>(
    obj: &'a Map<String, Value>,
    at: &str,
    key: &str,
) -> Result<&'a Value, TimelineError> {
    obj.get(key)
        .ok_or_else(|| field_error(format!("{at}{key}"), "is missing"))
}

fn string(obj: &Map<String, Value>, at: &str, key: &str) -> Result<String, TimelineError> {
    required(obj, at, key)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| field_error(format!("{at}{key}"), "is not a string"))
}

fn unsigned(obj: &Map<String, Value>, at: &str, key: &str) -> Result<u64, TimelineError> {
    let v = obj
        .get(key)
        .ok_or_else(|| field_error(format!("{at}{key}"), "is missing"))?;
    v.as_u64()
        .ok_or_else(|| field_error(format!("{at}{key}"), "is not a non-negative integer"))
}

/// A mark's `source`: one of [`MarkSource`]'s names.
fn mark_source(obj: &Map<String, Value>, at: &str) -> Result<MarkSource, TimelineError> {
    let name = string(obj, at, "source")?;
    serde_json::from_value(Value::String(name)).map_err(|_| {
        field_error(
            format!("{at}source"),
            "is not vmm, debug_port, boot_timer, boot_time_port or serial",
        )
    })
}

/// A descriptive string field: absent or of another type reads as empty.
fn text(obj: &Map<String, Value>, key: &str) -> String {
    obj.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Converts a boot timeline document to a profile of bootscope's own VMM
/// (`target.kind` `self`, data source and `exits.source` `vmm`): its marks
/// and phases, and KVM's own exit count (`kvm_stats.exits`) as
/// `exits.kvm_stats_exits`. A timeline
/// has no per-reason exits, threads, faults or NUMA data, so those stay
/// empty and `exits.total` stays 0.
///
/// The schema name and version are checked; marks and phases must be
/// complete (name, source, time; name, start, end with end >= start).
pub fn profile_from_timeline(doc: &Value) -> Result<Profile, TimelineError> {
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
    if found != u64::from(TIMELINE_SCHEMA_VERSION) {
        return Err(TimelineError::Version { found });
    }

    let mut p = Profile::new();
    p.target.kind = "self".into();
    // `vmm` reads "bootscope 0.1.0": the process is bootscope itself.
    p.target.name = text(root, "vmm")
        .split_whitespace()
        .next()
        .unwrap_or("bootscope")
        .to_string();
    p.host.kvm = text(root, "host_kvm");

    let marks = required(root, "", "marks")?
        .as_array()
        .ok_or_else(|| field_error("marks", "is not an array"))?;
    for (i, m) in marks.iter().enumerate() {
        let at = format!("marks[{i}].");
        let m = object(m, &format!("marks[{i}]"))?;
        let value = match m.get("value") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                field_error(format!("{at}value"), "is not a non-negative integer")
            })?),
        };
        p.marks.push(Mark {
            name: string(m, &at, "name")?,
            source: mark_source(m, &at)?,
            t_ns: unsigned(m, &at, "t_ns")?,
            value,
            tgid: None,
        });
    }

    let phases = required(root, "", "phases")?
        .as_array()
        .ok_or_else(|| field_error("phases", "is not an array"))?;
    for (i, ph) in phases.iter().enumerate() {
        let at = format!("phases[{i}].");
        let ph = object(ph, &format!("phases[{i}]"))?;
        let span = PhaseSpan {
            name: string(ph, &at, "name")?,
            start_ns: unsigned(ph, &at, "start_ns")?,
            end_ns: unsigned(ph, &at, "end_ns")?,
        };
        if span.end_ns < span.start_ns {
            return Err(field_error(
                format!("{at}end_ns"),
                &format!("({}) is before start_ns ({})", span.end_ns, span.start_ns),
            ));
        }
        p.phases.push(span);
    }
    initcall_phases(root, &mut p)?;

    let kvm_stats = match root.get("kvm_stats") {
        None | Some(Value::Null) => Map::new(),
        Some(v) => object(v, "kvm_stats")?.clone(),
    };
    let kvm_exits = match kvm_stats.get("exits") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| field_error("kvm_stats.exits", "is not a non-negative integer"))?,
        ),
    };
    // The only exit figure is KVM's own count, which the VMM read.
    p.exits.source = "vmm".into();
    p.exits.isa = "unknown".into();
    p.exits.kvm_stats_exits = kvm_exits;

    let guest = root.get("guest").and_then(Value::as_object);
    let outcome = root.get("outcome").and_then(Value::as_object);
    if let Some(clean) = outcome
        .and_then(|o| o.get("clean"))
        .and_then(Value::as_bool)
    {
        // `bootscope run` exits 0 exactly when the guest stopped cleanly.
        p.target.exit_code = Some(if clean { 0 } else { 1 });
    }
    let mut detail = String::from("boot timeline");
    if let Some(g) = guest {
        let kernel = text(g, "kernel");
        if !kernel.is_empty() {
            detail.push_str(&format!(" of {kernel}"));
            let format = text(g, "kernel_format");
            if !format.is_empty() {
                detail.push_str(&format!(" ({format})"));
            }
        }
        if let Some(n) = g.get("vcpus").and_then(Value::as_u64) {
            detail.push_str(&format!(", {n} vCPU"));
        }
        if let Some(b) = g.get("memory_bytes").and_then(Value::as_u64) {
            detail.push_str(&format!(", {} MiB", b >> 20));
        }
    }
    if let Some(o) = outcome {
        let reason = text(o, "reason");
        if !reason.is_empty() {
            detail.push_str(&format!("; outcome {reason}"));
        }
    }
    p.sources.push(DataSource {
        name: "vmm".into(),
        status: "attached".into(),
        detail,
        events: p.marks.len() as u64,
        ..Default::default()
    });
    p.sources.push(match kvm_exits {
        Some(n) => DataSource {
            name: "kvm_stats".into(),
            status: "attached".into(),
            detail: "KVM_GET_STATS_FD, summed over vCPUs at guest shutdown".into(),
            events: n,
            ..Default::default()
        },
        None => DataSource {
            name: "kvm_stats".into(),
            status: "missing".into(),
            detail: "the timeline has no KVM exit count (kernel without binary statistics)".into(),
            events: 0,
            ..Default::default()
        },
    });

    p.duration_ns = p
        .marks
        .iter()
        .map(|m| m.t_ns)
        .chain(p.phases.iter().map(|ph| ph.end_ns))
        .max()
        .unwrap_or(0);
    Ok(p)
}

/// The initcall levels (`initcalls: LEVEL`) and initcalls (`initcall:
/// NAME`) of a `run --initcalls` timeline, as phases nested in `kernel`.
fn initcall_phases(root: &Map<String, Value>, p: &mut Profile) -> Result<(), TimelineError> {
    let Some(ic) = root.get("initcalls").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let ic = object(ic, "initcalls")?;
    for (list, prefix, key, dur) in [
        ("levels", "initcalls: ", "level", "duration_ns"),
        ("initcalls", "initcall: ", "name", "duration_ns"),
    ] {
        let Some(items) = ic.get(list) else { continue };
        let items = items
            .as_array()
            .ok_or_else(|| field_error(format!("initcalls.{list}"), "is not an array"))?;
        for (i, item) in items.iter().enumerate() {
            let at = format!("initcalls.{list}[{i}].");
            let item = object(item, &format!("initcalls.{list}[{i}]"))?;
            let start_ns = unsigned(item, &at, "start_ns")?;
            p.phases.push(PhaseSpan {
                name: format!("{prefix}{}", string(item, &at, key)?),
                start_ns,
                end_ns: start_ns.saturating_add(unsigned(item, &at, dur)?),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::TIMELINE_EXAMPLE;
    use super::*;

    fn example() -> Value {
        serde_json::from_str(TIMELINE_EXAMPLE).unwrap()
    }

    #[test]
    fn converts_the_documented_example() {
        let p = profile_from_timeline(&example()).unwrap();
        assert_eq!(p.schema, "bootscope.profile");
        assert_eq!(p.version, 1);
        assert_eq!(p.target.kind, "self");
        assert_eq!(p.target.name, "bootscope");
        assert_eq!(p.target.exit_code, Some(0));
        assert_eq!(p.host.kvm, "svm");
        assert_eq!(p.marks.len(), 2);
        assert_eq!(p.marks[0].name, "vmm: process start");
        assert_eq!(p.marks[0].source, MarkSource::Vmm);
        assert_eq!(p.marks[0].value, None);
        assert_eq!(p.marks[1].source, MarkSource::DebugPort);
        assert_eq!(p.marks[1].t_ns, 812_345_678);
        assert_eq!(p.marks[1].value, Some(96));
        assert_eq!(
            p.phases,
            vec![PhaseSpan {
                name: "kernel".into(),
                start_ns: 4_100_000,
                end_ns: 812_345_678,
            }]
        );
        assert_eq!(p.exits.kvm_stats_exits, Some(21191));
        assert_eq!(p.exits.total, 0);
        assert_eq!(p.exits.source, "vmm");
        assert!(p.exits.by_reason.is_empty());
        assert_eq!(p.duration_ns, 812_345_678);
        let vmm = p.sources.iter().find(|s| s.name == "vmm").unwrap();
        assert_eq!(vmm.status, "attached");
        assert_eq!(vmm.events, 2);
        assert!(vmm.detail.contains("/boot/vmlinuz-6.1.0-56-amd64"));
        assert!(vmm.detail.contains("guest_halt"));
        let stats = p.sources.iter().find(|s| s.name == "kvm_stats").unwrap();
        assert_eq!((stats.status.as_str(), stats.events), ("attached", 21191));
        // The result is a valid profile document.
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["schema"], "bootscope.profile");
    }

    #[test]
    fn empty_kvm_stats_and_unclean_outcome() {
        let mut v = example();
        v["kvm_stats"] = serde_json::json!({});
        v["outcome"]["clean"] = Value::Bool(false);
        let p = profile_from_timeline(&v).unwrap();
        assert_eq!(p.exits.kvm_stats_exits, None);
        assert_eq!(p.target.exit_code, Some(1));
        let stats = p.sources.iter().find(|s| s.name == "kvm_stats").unwrap();
        assert_eq!(stats.status, "missing");
    }

    #[test]
    fn initcalls_become_nested_phases() {
        let mut doc = example();
        doc["initcalls"] = serde_json::json!({
            "method": "m",
            "levels": [{ "level": "device", "start_ns": 100, "end_ns": 300, "duration_ns": 200 }],
            "initcalls": [{ "name": "serial8250_init", "level": "device", "start_ns": 120,
                            "duration_ns": 30, "ret": 0, "guest_start_ns": 5 }]
        });
        let p = profile_from_timeline(&doc).unwrap();
        let find = |n: &str| p.phases.iter().find(|ph| ph.name == n).cloned();
        let level = find("initcalls: device").unwrap();
        assert_eq!((level.start_ns, level.end_ns), (100, 300));
        let call = find("initcall: serial8250_init").unwrap();
        assert_eq!((call.start_ns, call.end_ns), (120, 150));
        doc["initcalls"]["initcalls"][0]["start_ns"] = serde_json::json!("soon");
        let e = profile_from_timeline(&doc).unwrap_err();
        assert!(
            e.to_string().contains("initcalls.initcalls[0].start_ns"),
            "{e}"
        );
    }

    #[test]
    fn minimal_timeline_converts() {
        let v = serde_json::json!({
            "schema": "bootscope.timeline", "version": 1, "marks": [], "phases": []
        });
        let p = profile_from_timeline(&v).unwrap();
        assert!(p.marks.is_empty() && p.phases.is_empty());
        assert_eq!(p.duration_ns, 0);
        assert_eq!(p.target.name, "bootscope");
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        let err = |v: Value| profile_from_timeline(&v).unwrap_err();
        assert_eq!(
            err(serde_json::json!({"schema": "bootscope.profile", "version": 1})),
            TimelineError::NotATimeline {
                found: "\"bootscope.profile\"".into()
            }
        );
        assert_eq!(
            err(serde_json::json!([])),
            TimelineError::Field {
                field: "(document)".into(),
                problem: "is not a JSON object".into()
            }
        );
        let mut v = example();
        v["version"] = 2.into();
        assert_eq!(err(v), TimelineError::Version { found: 2 });

        let cases: [(&str, Value, &str); 6] = [
            ("marks", Value::Null, "field marks is not an array"),
            (
                "marks",
                serde_json::json!([{"name": "a", "source": "vmm", "t_ns": -1}]),
                "marks[0].t_ns is not a non-negative integer",
            ),
            (
                "marks",
                serde_json::json!([{"source": "vmm", "t_ns": 1}]),
                "marks[0].name is missing",
            ),
            (
                "marks",
                serde_json::json!([{"name": "a", "source": "vmm", "t_ns": 1, "value": "x"}]),
                "marks[0].value is not a non-negative integer",
            ),
            (
                "phases",
                serde_json::json!([{"name": "k", "start_ns": 5, "end_ns": 4}]),
                "phases[0].end_ns (4) is before start_ns (5)",
            ),
            (
                "kvm_stats",
                serde_json::json!({"exits": "many"}),
                "kvm_stats.exits is not a non-negative integer",
            ),
        ];
        for (key, value, message) in cases {
            let mut v = example();
            v[key] = value;
            let e = err(v).to_string();
            assert!(e.contains(message), "{key}: {e}");
        }
        let mut v = example();
        v.as_object_mut().unwrap().remove("phases");
        assert_eq!(err(v).to_string(), "field phases is missing");
    }
}
