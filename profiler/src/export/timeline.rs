//! A VMM boot timeline (`bootscope run --timeline`, docs/timeline-schema.md)
//! as a [`Profile`]. The document is read with
//! [`bootscope_model::timeline`], whose schema constants follow the VMM's
//! (`bootscope_vmm::timeline`), which an end-to-end test checks.

use bootscope_model::timeline::Timeline;
pub use bootscope_model::timeline::{TimelineError, TIMELINE_SCHEMA_NAME, TIMELINE_SCHEMA_VERSION};
use serde_json::Value;

use crate::profile::{DataSource, Mark, PhaseSpan, Profile};

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
    let t = Timeline::parse_complete(doc)?;
    let mut p = Profile::new();
    p.target.kind = "self".into();
    // `vmm` reads "bootscope 0.1.0": the process is bootscope itself.
    p.target.name = t
        .vmm
        .split_whitespace()
        .next()
        .unwrap_or("bootscope")
        .to_string();
    p.host.kvm = t.host_kvm.clone();
    p.marks = t
        .marks
        .iter()
        .map(|m| Mark {
            name: m.name.clone(),
            source: m.source,
            t_ns: m.t_ns,
            value: m.value,
            tgid: None,
            guest_rip: None,
        })
        .collect();
    p.phases = t
        .phases
        .iter()
        .map(|ph| PhaseSpan {
            name: ph.name.clone(),
            start_ns: ph.start_ns,
            end_ns: ph.end_ns,
        })
        .collect();
    if let Some(root) = doc.as_object() {
        initcall_phases(root, &mut p)?;
    }
    unit_phases(&t, &mut p);
    let kvm_exits = t.kvm_stats.as_ref().and_then(|s| s.get("exits").copied());
    // The only exit figure is KVM's own count, which the VMM read.
    p.exits.source = "vmm".into();
    p.exits.isa = "unknown".into();
    p.exits.kvm_stats_exits = kvm_exits;

    if let Some(clean) = t.outcome.as_ref().and_then(|o| o.clean) {
        // `bootscope run` exits 0 exactly when the guest stopped cleanly.
        p.target.exit_code = Some(if clean { 0 } else { 1 });
    }
    let mut detail = String::from("boot timeline");
    if let Some(g) = &t.guest {
        if !g.kernel.is_empty() {
            detail.push_str(&format!(" of {}", g.kernel));
            if !g.kernel_format.is_empty() {
                detail.push_str(&format!(" ({})", g.kernel_format));
            }
        }
        if let Some(n) = g.vcpus {
            detail.push_str(&format!(", {n} vCPU"));
        }
        if let Some(b) = g.memory_bytes {
            detail.push_str(&format!(", {} MiB", b >> 20));
        }
    }
    if let Some(o) = t.outcome.as_ref().filter(|o| !o.reason.is_empty()) {
        detail.push_str(&format!("; outcome {}", o.reason));
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

/// A level of the timeline's `initcalls` object.
#[derive(serde::Deserialize)]
struct LevelSpan {
    level: String,
    start_ns: u64,
    duration_ns: u64,
}

/// An initcall of the timeline's `initcalls` object.
#[derive(serde::Deserialize)]
struct CallSpan {
    name: String,
    start_ns: u64,
    duration_ns: u64,
}

/// Item `i` of the array `list` of the `initcalls` object, typed; an error
/// names the item.
fn initcall_item<T: serde::de::DeserializeOwned>(
    ic: &Value,
    list: &str,
) -> Result<Vec<T>, TimelineError> {
    let Some(items) = ic.get(list).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let items = items.as_array().ok_or_else(|| TimelineError::Field {
        field: format!("initcalls.{list}"),
        problem: "is not an array".into(),
    })?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            T::deserialize(item).map_err(|e| TimelineError::Field {
                field: format!("initcalls.{list}[{i}]"),
                problem: format!("is malformed: {e}"),
            })
        })
        .collect()
}

/// The initcall levels (`initcalls: LEVEL`) and initcalls (`initcall:
/// NAME`) of a `run --initcalls` timeline, as phases nested in `kernel`.
fn initcall_phases(
    root: &serde_json::Map<String, Value>,
    p: &mut Profile,
) -> Result<(), TimelineError> {
    let Some(ic) = root.get("initcalls").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let levels: Vec<LevelSpan> = initcall_item(ic, "levels")?;
    let calls: Vec<CallSpan> = initcall_item(ic, "initcalls")?;
    let levels = levels
        .into_iter()
        .map(|l| (format!("initcalls: {}", l.level), l.start_ns, l.duration_ns));
    let calls = calls
        .into_iter()
        .map(|c| (format!("initcall: {}", c.name), c.start_ns, c.duration_ns));
    for (name, start_ns, duration_ns) in levels.chain(calls) {
        p.phases.push(PhaseSpan {
            name,
            start_ns,
            end_ns: start_ns.saturating_add(duration_ns),
        });
    }
    Ok(())
}

/// The units of a systemd guest (`unit: NAME`, from leaving inactive to
/// active), as phases nested in `userspace`.
fn unit_phases(t: &Timeline, p: &mut Profile) {
    let Some(units) = &t.units else { return };
    for u in &units.units {
        p.phases.push(PhaseSpan {
            name: format!("{UNIT_PHASE_PREFIX}{}", u.name),
            start_ns: u.start_ns,
            end_ns: u.start_ns.saturating_add(u.duration_ns),
        });
    }
}

/// The prefix of the phases [`profile_from_timeline`] makes of a systemd
/// guest's units.
pub use bootscope_model::profile::UNIT_PHASE_PREFIX;

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
        assert_eq!(p.version, crate::profile::PROFILE_SCHEMA_VERSION);
        assert_eq!(p.target.kind, "self");
        assert_eq!(p.target.name, "bootscope");
        assert_eq!(p.target.exit_code, Some(0));
        assert_eq!(p.host.kvm, "svm");
        assert_eq!(p.marks.len(), 2);
        assert_eq!(p.marks[0].name, "vmm: process start");
        assert_eq!(p.marks[0].source, bootscope_model::mark::MarkSource::Vmm);
        assert_eq!(p.marks[0].value, None);
        assert_eq!(
            p.marks[1].source,
            bootscope_model::mark::MarkSource::DebugPort
        );
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
    fn units_become_nested_phases() {
        let mut doc = example();
        doc["units"] = serde_json::json!({
            "source": "test",
            "units": [{ "name": "systemd-udevd.service", "start_ns": 500, "duration_ns": 40,
                        "state": "active", "guest_start_us": 1, "guest_active_us": 2 }],
            "critical_chain": []
        });
        let p = profile_from_timeline(&doc).unwrap();
        let u = p
            .phases
            .iter()
            .find(|ph| ph.name == "unit: systemd-udevd.service")
            .unwrap();
        assert_eq!((u.start_ns, u.end_ns), (500, 540));
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
        assert!(e.to_string().contains("\"soon\""), "{e}");
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
        v["version"] = 3.into();
        assert_eq!(err(v), TimelineError::Version { found: 3 });

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
