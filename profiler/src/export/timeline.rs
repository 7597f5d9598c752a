//! A VMM boot timeline as a profile: the model's conversion
//! ([`bootscope_model::timeline_profile`]), tested here on the exporters'
//! fixture.

pub use bootscope_model::profile::UNIT_PHASE_PREFIX;
pub use bootscope_model::timeline::{TimelineError, TIMELINE_SCHEMA_NAME, TIMELINE_SCHEMA_VERSION};
pub use bootscope_model::timeline_profile::profile_from_timeline;

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::fixture::TIMELINE_EXAMPLE;
    use super::*;
    use crate::profile::PhaseSpan;

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
        v["version"] = 4.into();
        assert_eq!(err(v), TimelineError::Version { found: 4 });

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
