//! The kernel's initcalls as the phase pane shows them under `kernel`: level
//! groups in the order they ran, each with its initcalls, durations and
//! exits. Read from the `initcalls` object of a boot timeline
//! (docs/timeline-schema.md): `bootscope run --initcalls` has it once the
//! guest has stopped, so the TUI gets it with the final data.

use serde_json::Value;

/// One initcall.
#[derive(Clone, Debug, PartialEq)]
pub struct InitcallRow {
    pub name: String,
    /// Timeline time (ns since VMM start).
    pub start_ns: u64,
    pub duration_ns: u64,
    /// What it returned (0 is success).
    pub ret: i64,
    /// Its exits ([`Initcalls::exits_label`] says which).
    pub exits: Option<u64>,
}

/// One initcall level: its span and its initcalls in the order they ran.
#[derive(Clone, Debug, PartialEq)]
pub struct InitcallGroup {
    pub level: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub exits: Option<u64>,
    pub calls: Vec<InitcallRow>,
}

impl InitcallGroup {
    /// Its initcalls' own time, summed.
    pub fn calls_ns(&self) -> u64 {
        self.calls.iter().map(|c| c.duration_ns).sum()
    }
}

/// Every initcall of a boot, by level.
#[derive(Clone, Debug, PartialEq)]
pub struct Initcalls {
    pub groups: Vec<InitcallGroup>,
    /// What the exit figures count: `exits` (every exit the profiler
    /// counted in the span) or `io exits` (the port I/O exits the VMM
    /// counted, without the profiler).
    pub exits_label: &'static str,
    /// Half the width of the interval the guest's clock was aligned within.
    pub clock_error_ns: Option<u64>,
}

impl Initcalls {
    /// The initcalls of a boot timeline document (its `initcalls` object),
    /// or of that object itself. None: no initcall in it (none recorded,
    /// or `error` says why).
    pub fn from_json(doc: &Value) -> Option<Initcalls> {
        let ic = match doc.get("initcalls") {
            Some(v) if v.is_object() => v,
            _ => doc,
        };
        let calls = ic.get("initcalls")?.as_array()?;
        if calls.is_empty() {
            return None;
        }
        let u = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
        // The profiler's exits where it counted or sampled them.
        let profiled = |v: &Value| {
            ["counted", "sampled"]
                .iter()
                .find_map(|k| v.get(*k).and_then(|c| u(c, "exits")))
        };
        let with_profile = calls.iter().any(|c| profiled(c).is_some());
        let exits = |v: &Value| {
            if with_profile {
                profiled(v)
            } else {
                u(v, "io_exits")
            }
        };
        let mut groups: Vec<InitcallGroup> = Vec::new();
        if let Some(levels) = ic.get("levels").and_then(Value::as_array) {
            for l in levels {
                groups.push(InitcallGroup {
                    level: l.get("level")?.as_str()?.to_string(),
                    start_ns: u(l, "start_ns")?,
                    end_ns: u(l, "end_ns")?,
                    exits: exits(l),
                    calls: Vec::new(),
                });
            }
        }
        for c in calls {
            let level = c.get("level").and_then(Value::as_str).unwrap_or("");
            let row = InitcallRow {
                name: c.get("name")?.as_str()?.to_string(),
                start_ns: u(c, "start_ns")?,
                duration_ns: u(c, "duration_ns")?,
                ret: c.get("ret").and_then(Value::as_i64).unwrap_or(0),
                exits: exits(c),
            };
            let end = row.start_ns + row.duration_ns;
            match groups.iter_mut().find(|g| g.level == level) {
                Some(g) => g.calls.push(row),
                // A level the document did not list: its span from its calls.
                None => groups.push(InitcallGroup {
                    level: level.to_string(),
                    start_ns: row.start_ns,
                    end_ns: end,
                    exits: None,
                    calls: vec![row],
                }),
            }
        }
        for g in &mut groups {
            g.calls.sort_by_key(|c| c.start_ns);
            if let (Some(first), Some(last)) = (
                g.calls.iter().map(|c| c.start_ns).min(),
                g.calls.iter().map(|c| c.start_ns + c.duration_ns).max(),
            ) {
                g.start_ns = g.start_ns.min(first);
                g.end_ns = g.end_ns.max(last);
            }
        }
        groups.retain(|g| !g.calls.is_empty());
        groups.sort_by_key(|g| g.start_ns);
        Some(Initcalls {
            groups,
            exits_label: if with_profile { "exits" } else { "io exits" },
            clock_error_ns: ic.get("clock").and_then(|c| u(c, "error_ns")),
        })
    }

    /// How many initcalls there are.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.calls.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_group_their_initcalls_with_the_profilers_exits() {
        let doc = serde_json::json!({ "initcalls": {
            "clock": { "offset_ns": 5, "error_ns": 300000, "anchors": 9 },
            "levels": [
                { "level": "device", "start_ns": 100, "end_ns": 400, "duration_ns": 300,
                  "initcalls": 2, "initcalls_ns": 250, "io_exits": 7,
                  "counted": { "exits": 20, "guest_faults": 0, "host_faults": 0 } },
                { "level": "core", "start_ns": 10, "end_ns": 50, "duration_ns": 40,
                  "initcalls": 1, "initcalls_ns": 40, "io_exits": 1 }
            ],
            "initcalls": [
                { "name": "b_init", "level": "device", "start_ns": 300, "duration_ns": 100,
                  "ret": -19, "guest_start_ns": 1, "io_exits": 2,
                  "counted": { "exits": 5, "guest_faults": 1, "host_faults": 0 } },
                { "name": "a_init", "level": "device", "start_ns": 100, "duration_ns": 150,
                  "ret": 0, "guest_start_ns": 1, "io_exits": 5,
                  "sampled": { "exits": 15, "guest_faults": 0, "host_faults": 0 } },
                { "name": "c_init", "level": "core", "start_ns": 10, "duration_ns": 40,
                  "ret": 0, "guest_start_ns": 1, "io_exits": 1 }
            ]
        }});
        let ic = Initcalls::from_json(&doc).unwrap();
        assert_eq!(ic.exits_label, "exits");
        assert_eq!(ic.clock_error_ns, Some(300_000));
        assert_eq!(ic.len(), 3);
        // In the order they ran; initcalls too.
        let levels: Vec<&str> = ic.groups.iter().map(|g| g.level.as_str()).collect();
        assert_eq!(levels, ["core", "device"]);
        let device = &ic.groups[1];
        assert_eq!(device.calls[0].name, "a_init");
        assert_eq!(device.calls[0].exits, Some(15));
        assert_eq!(device.calls[1].ret, -19);
        assert_eq!(device.exits, Some(20));
        assert_eq!(device.calls_ns(), 250);
        // Without the profiler: the VMM's port I/O exits.
        let mut plain = doc.clone();
        for c in plain["initcalls"]["initcalls"].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("counted");
            c.as_object_mut().unwrap().remove("sampled");
        }
        let ic = Initcalls::from_json(&plain["initcalls"]).unwrap();
        assert_eq!(ic.exits_label, "io exits");
        assert_eq!(ic.groups[1].calls[0].exits, Some(5));
        assert_eq!(ic.groups[1].exits, Some(7));
        // None recorded.
        let none = serde_json::json!({ "initcalls": { "error": "no VMCOREINFO", "levels": [], "initcalls": [] } });
        assert!(Initcalls::from_json(&none).is_none());
        assert!(Initcalls::from_json(&serde_json::json!({})).is_none());
    }
}
