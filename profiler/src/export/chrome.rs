//! Chrome Trace Event JSON (object form), as ui.perfetto.dev and
//! chrome://tracing open it.
//!
//! One process (the target's pid, or 1): a "boot phases" track with the
//! phases as complete slices and the marks as process-wide instants, one
//! track per thread with a slice for its lifetime, and counter tracks for
//! exits by reason and page faults; with the guest kernel's log read from
//! its memory (`bootscope profile` of another VMM) on the profile's clock,
//! a "guest kernel log" track with each record as an instant. Times are
//! microseconds (floats, so nanoseconds survive).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::csv::ms;
use crate::profile::{PhaseSpan, Profile};

/// Thread id of the "boot phases" track (and base of its extra lanes).
/// Above Linux's largest pid (2^22), so it never collides with a real thread.
pub const PHASES_TID: u32 = 1_000_000_000;

/// Thread id of the "guest kernel log" track, just below the phases'.
pub const GUEST_LOG_TID: u32 = PHASES_TID - 1;

/// Nanoseconds to the trace's microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn metadata(name: &str, pid: u32, tid: Option<u32>, args: Value) -> Value {
    let mut e = json!({ "ph": "M", "name": name, "pid": pid, "args": args });
    if let Some(tid) = tid {
        e["tid"] = tid.into();
    }
    e
}

/// Lanes so that slices on one track either nest or do not touch: a phase
/// overlapping another without nesting in it goes to the next lane.
fn lanes(phases: &[PhaseSpan]) -> Vec<usize> {
    let mut placed: Vec<Vec<(u64, u64)>> = Vec::new();
    phases
        .iter()
        .map(|ph| {
            let (a, b) = (ph.start_ns, ph.end_ns.max(ph.start_ns));
            let fits = |lane: &Vec<(u64, u64)>| {
                lane.iter().all(|&(s, e)| {
                    let disjoint = b <= s || a >= e;
                    let nested = (a >= s && b <= e) || (s >= a && e <= b);
                    disjoint || nested
                })
            };
            let lane = match placed.iter().position(fits) {
                Some(i) => i,
                None => {
                    placed.push(Vec::new());
                    placed.len() - 1
                }
            };
            placed[lane].push((a, b));
            lane
        })
        .collect()
}

/// Counter events from cumulative samples: every series appears in every
/// event, a reason not yet seen counting 0 and one missing later keeping
/// its last value.
fn sample_counters(p: &Profile, pid: u32, events: &mut Vec<Value>) {
    let reasons: BTreeSet<&str> = p
        .samples
        .iter()
        .flat_map(|s| s.exits_by_reason.keys())
        .collect();
    let mut last: BTreeMap<&str, u64> = reasons.iter().map(|r| (*r, 0)).collect();
    for s in &p.samples {
        for (r, n) in s.exits_by_reason.iter() {
            last.insert(r, n);
        }
        let ts = us(s.t_ns);
        if !last.is_empty() {
            let args: Map<String, Value> = last
                .iter()
                .map(|(r, n)| ((*r).to_string(), (*n).into()))
                .collect();
            events.push(json!({
                "ph": "C", "name": "VM exits", "cat": "exits", "pid": pid, "ts": ts, "args": args
            }));
        }
        events.push(json!({
            "ph": "C", "name": "VM exits total", "cat": "exits", "pid": pid, "ts": ts,
            "args": { "exits": s.exits_total }
        }));
        events.push(json!({
            "ph": "C", "name": "page faults", "cat": "faults", "pid": pid, "ts": ts,
            "args": { "guest": s.guest_faults, "host": s.host_faults }
        }));
    }
}

/// Without samples, the totals by reason: zero at the start, the totals at
/// the end of the profile.
fn total_counters(p: &Profile, pid: u32, end_ns: u64, events: &mut Vec<Value>) {
    let mut totals: BTreeMap<&String, u64> = BTreeMap::new();
    for r in &p.exits.by_reason {
        *totals.entry(&r.reason).or_default() += r.count;
    }
    if totals.is_empty() {
        return;
    }
    let zero: Map<String, Value> = totals.keys().map(|r| ((*r).clone(), 0.into())).collect();
    let end: Map<String, Value> = totals
        .iter()
        .map(|(r, n)| ((*r).clone(), (*n).into()))
        .collect();
    events.push(json!({
        "ph": "C", "name": "VM exits", "cat": "exits", "pid": pid, "ts": 0.0, "args": zero
    }));
    events.push(json!({
        "ph": "C", "name": "VM exits", "cat": "exits", "pid": pid, "ts": us(end_ns), "args": end
    }));
}

/// One lane per thread: its name, and its life as one event with its CPUs,
/// nodes and pages.
fn thread_events(p: &Profile, pid: u32, meta: &mut Vec<Value>, events: &mut Vec<Value>) {
    for t in &p.threads {
        let name = if t.name.is_empty() {
            format!("thread {}", t.tid)
        } else {
            t.name.clone()
        };
        meta.push(metadata(
            "thread_name",
            pid,
            Some(t.tid),
            json!({ "name": name }),
        ));
        let cpus: Vec<Value> = t
            .cpus
            .iter()
            .map(|c| json!({ "cpu": c.cpu, "node": c.node, "run_ms": ms(c.run_ns) }))
            .collect();
        events.push(json!({
            "ph": "X", "name": name, "cat": "thread", "pid": pid, "tid": t.tid,
            "ts": us(t.start_ns), "dur": us(t.end_ns.saturating_sub(t.start_ns)),
            "args": {
                "tid": t.tid, "role": t.role, "cpus": cpus, "nodes": t.nodes,
                "pages_allocated": t.pages_allocated, "pages_local": t.pages_local,
                "pages_remote": t.pages_remote
            }
        }));
    }
}

/// The boot phases, each on a lane of its own where they overlap (a
/// thread each, named and sorted first), and the marks on the first lane.
fn phase_events(p: &Profile, pid: u32, meta: &mut Vec<Value>, events: &mut Vec<Value>) {
    let phase_lanes = lanes(&p.phases);
    let lane_count = phase_lanes.iter().max().map_or(1, |m| m + 1);
    for lane in 0..lane_count {
        let tid = PHASES_TID + lane as u32;
        let name = if lane == 0 {
            "boot phases".to_string()
        } else {
            format!("boot phases (overlapping, {})", lane + 1)
        };
        meta.push(metadata(
            "thread_name",
            pid,
            Some(tid),
            json!({ "name": name }),
        ));
        meta.push(metadata(
            "thread_sort_index",
            pid,
            Some(tid),
            json!({ "sort_index": -10 + lane as i64 }),
        ));
    }
    for (ph, lane) in p.phases.iter().zip(&phase_lanes) {
        let dur_ns = ph.end_ns.saturating_sub(ph.start_ns);
        events.push(json!({
            "ph": "X", "name": ph.name, "cat": "phase", "pid": pid,
            "tid": PHASES_TID + *lane as u32,
            "ts": us(ph.start_ns), "dur": us(dur_ns),
            "args": { "start_ms": ms(ph.start_ns), "duration_ms": ms(dur_ns) }
        }));
    }
    for m in &p.marks {
        let mut args = json!({ "source": m.source, "t_ms": ms(m.t_ns) });
        if let Some(v) = m.value {
            args["value"] = v.into();
        }
        events.push(json!({
            "ph": "i", "s": "p", "name": m.name, "cat": "mark", "pid": pid, "tid": PHASES_TID,
            "ts": us(m.t_ns), "args": args
        }));
    }
}

/// The guest kernel's log on its own track, a record an instant at its
/// time on the profile's clock: named by its first line, its whole text
/// in `args`, both made printable (`bootscope_model::text`: the guest
/// chose them). Without the clock, nothing: the records' count and why
/// go to `otherData` ([`guest_log_note`]).
fn guest_log_events(p: &Profile, pid: u32, meta: &mut Vec<Value>, events: &mut Vec<Value>) {
    use bootscope_model::text::{printable, printable_keeping};
    let Some(g) = &p.guest_read else {
        return;
    };
    let (Some(log), Some(clock)) = (&g.kernel_log, g.log_clock()) else {
        return;
    };
    meta.push(metadata(
        "thread_name",
        pid,
        Some(GUEST_LOG_TID),
        json!({ "name": "guest kernel log" }),
    ));
    meta.push(metadata(
        "thread_sort_index",
        pid,
        Some(GUEST_LOG_TID),
        json!({ "sort_index": -11 }),
    ));
    for r in &log.records {
        let Some(t) = r.profile_ns(clock) else {
            continue;
        };
        let first = r.text.lines().next().unwrap_or("");
        events.push(json!({
            "ph": "i", "s": "t", "name": printable(first), "cat": "guest_log", "pid": pid,
            "tid": GUEST_LOG_TID, "ts": us(t),
            "args": { "guest_ts_ms": ms(r.ts_ns), "text": printable_keeping(&r.text, &['\n']) }
        }));
    }
}

/// `otherData`'s word on the guest kernel's log: how many records were
/// read, and whether they are on the track.
fn guest_log_note(p: &Profile) -> Option<String> {
    let g = p.guest_read.as_ref()?;
    let log = g.kernel_log.as_ref()?;
    let n = log.records.len();
    Some(match g.log_clock() {
        Some(c) => format!(
            "{n} records read from guest memory at {}, on the \"guest kernel log\" track (the guest's clock placed within {} us by {} console lines)",
            log.at,
            c.error_ns / 1000,
            c.anchors
        ),
        None => format!(
            "{n} records read from guest memory at {}, not on the trace: no console line placed the guest's clock on the profile's (profile --initcalls does); export --format csv --table guest-log lists them",
            log.at
        ),
    })
}

/// The trace's `otherData`: the profile's schema, target, host and totals,
/// as text.
fn other_data(p: &Profile) -> Map<String, Value> {
    let mut other = Map::new();
    let mut put = |k: &str, v: String| {
        other.insert(k.to_string(), Value::String(v));
    };
    put("schema", format!("{} v{}", p.schema, p.version));
    put(
        "target",
        format!("{} {} (pid {})", p.target.kind, p.target.name, p.target.pid),
    );
    put("host_kvm", p.host.kvm.clone());
    put("duration_ms", ms(p.duration_ns));
    put("exits_total", p.exits.total.to_string());
    if let Some(n) = p.exits.kvm_stats_exits {
        put("kvm_stats_exits", n.to_string());
    }
    put("lost_events", p.lost_events.to_string());
    if let Some(note) = guest_log_note(p) {
        put("guest_kernel_log", note);
    }
    other
}

/// Renders the trace: metadata events first, then the others by time, one
/// event per line.
pub fn to_chrome_trace(p: &Profile) -> String {
    let pid = if p.target.pid == 0 { 1 } else { p.target.pid };
    let process_name = if p.target.name.is_empty() {
        "bootscope profile".to_string()
    } else {
        p.target.name.clone()
    };
    let mut meta = vec![metadata(
        "process_name",
        pid,
        None,
        json!({ "name": process_name }),
    )];
    let mut events = Vec::new();

    phase_events(p, pid, &mut meta, &mut events);
    thread_events(p, pid, &mut meta, &mut events);
    guest_log_events(p, pid, &mut meta, &mut events);

    if p.samples.is_empty() {
        let end_ns = p
            .phases
            .iter()
            .map(|ph| ph.end_ns)
            .chain(p.marks.iter().map(|m| m.t_ns))
            .chain([p.duration_ns])
            .max()
            .unwrap_or(0);
        total_counters(p, pid, end_ns, &mut events);
    } else {
        sample_counters(p, pid, &mut events);
    }

    super::fault_tail::chrome_counters(p, pid, &mut events);

    // Stable: equal times keep the order above (a phase before its marks).
    events.sort_by(|a, b| {
        a["ts"]
            .as_f64()
            .partial_cmp(&b["ts"].as_f64())
            .unwrap_or(std::cmp::Ordering::Equal)
    });

    let other = other_data(p);
    let mut out = String::from("{\"displayTimeUnit\":\"ms\",\n\"otherData\":");
    out.push_str(&Value::Object(other).to_string());
    out.push_str(",\n\"traceEvents\":[");
    for (i, e) in meta.iter().chain(&events).enumerate() {
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        out.push_str(&e.to_string());
    }
    out.push_str("\n]}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, AWKWARD_REASON};
    use super::*;

    /// Parses the trace and checks the structure every viewer relies on.
    /// Returns the events.
    fn check(text: &str) -> Vec<Value> {
        let doc: Value = serde_json::from_str(text).expect("the trace is JSON");
        assert_eq!(doc["displayTimeUnit"], "ms");
        for (k, v) in doc["otherData"].as_object().unwrap() {
            assert!(v.is_string(), "otherData.{k} is not a string");
        }
        let events = doc["traceEvents"].as_array().unwrap().clone();
        let mut named_threads = BTreeSet::new();
        let mut named_process = false;
        for e in &events {
            let ph = e["ph"].as_str().expect("ph");
            assert!(e["name"].is_string(), "{e}");
            assert!(e["pid"].is_u64(), "{e}");
            match ph {
                "M" => {
                    match e["name"].as_str().unwrap() {
                        "process_name" => named_process = true,
                        "thread_name" => {
                            named_threads.insert(e["tid"].as_u64().unwrap());
                        }
                        "thread_sort_index" => {}
                        other => panic!("unexpected metadata {other}"),
                    }
                    assert!(e["args"].is_object(), "{e}");
                }
                "X" => {
                    assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
                    assert!(e["dur"].as_f64().expect("X has dur") >= 0.0, "{e}");
                    assert!(e["tid"].is_u64(), "{e}");
                }
                "i" => {
                    // Process-wide (marks), or on a thread's track.
                    assert!(e["s"] == "p" || e["tid"].is_u64(), "{e}");
                    assert!(e["ts"].as_f64().unwrap() >= 0.0);
                }
                "C" => {
                    assert!(e["ts"].as_f64().unwrap() >= 0.0);
                    let args = e["args"].as_object().unwrap();
                    assert!(!args.is_empty());
                    assert!(args.values().all(Value::is_number), "{e}");
                }
                other => panic!("unexpected phase {other}"),
            }
        }
        assert!(named_process, "no process_name");
        for e in &events {
            if e["ph"] == "X" || (e["ph"] == "i" && e["s"] == "t") {
                let tid = e["tid"].as_u64().unwrap();
                assert!(
                    named_threads.contains(&tid),
                    "track {tid} has no thread_name"
                );
            }
        }
        // Slices on one track nest or are disjoint.
        let mut by_track: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
        for e in events.iter().filter(|e| e["ph"] == "X") {
            let ts = e["ts"].as_f64().unwrap();
            by_track
                .entry(e["tid"].as_u64().unwrap())
                .or_default()
                .push((ts, ts + e["dur"].as_f64().unwrap()));
        }
        for (tid, spans) in by_track {
            for (i, &(a, b)) in spans.iter().enumerate() {
                for &(s, e) in &spans[i + 1..] {
                    let ok = b <= s || a >= e || (a >= s && b <= e) || (s >= a && e <= b);
                    assert!(ok, "track {tid}: [{a},{b}) and [{s},{e}) cross");
                }
            }
        }
        events
    }

    fn find<'a>(events: &'a [Value], ph: &str, name: &str) -> Vec<&'a Value> {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .collect()
    }

    #[test]
    fn fixture_trace() {
        let p = fixture::profile();
        let events = check(&to_chrome_trace(&p));
        let proc_name = find(&events, "M", "process_name");
        assert_eq!(proc_name[0]["pid"], 4242);
        assert_eq!(proc_name[0]["args"]["name"], "qemu-system-x86");

        let track = events
            .iter()
            .find(|e| e["name"] == "thread_name" && e["args"]["name"] == "boot phases")
            .unwrap();
        assert_eq!(track["tid"], PHASES_TID);

        let kernel = find(&events, "X", "kernel");
        assert_eq!(kernel.len(), 1);
        assert_eq!(kernel[0]["ts"], 80_000.0);
        assert_eq!(kernel[0]["dur"], 720_000.0);
        assert_eq!(kernel[0]["tid"], PHASES_TID);

        let mark = find(&events, "i", "port 0x80: kernel 0x40");
        assert_eq!(mark[0]["ts"], 80_000.0);
        assert_eq!(mark[0]["args"]["value"], 64);
        assert_eq!(mark[0]["args"]["source"], "debug_port");

        let prealloc = find(&events, "X", "touch_pages");
        assert_eq!(prealloc[0]["tid"], 4243);
        assert_eq!(prealloc[0]["ts"], 10_000.0);
        assert_eq!(prealloc[0]["dur"], 50_000.0);
        assert_eq!(prealloc[0]["args"]["pages_remote"], 31072);
        assert_eq!(prealloc[0]["args"]["cpus"][1]["node"], 1);
        assert_eq!(prealloc[0]["args"]["nodes"], json!([0, 1]));
        let vcpu = find(&events, "X", "CPU 0/KVM, \"main\"");
        assert_eq!(vcpu[0]["args"]["role"], "vcpu");

        let exits = find(&events, "C", "VM exits");
        assert_eq!(exits.len(), 3);
        // Every series in every event; a reason is 0 before it appears.
        for e in &exits {
            assert_eq!(e["args"].as_object().unwrap().len(), 4, "{e}");
        }
        assert_eq!(exits[0]["args"][AWKWARD_REASON], 0);
        assert_eq!(exits[2]["args"][AWKWARD_REASON], 25);
        assert_eq!(exits[2]["args"]["io"], 600);
        assert_eq!(exits[2]["ts"], 900_000.0);
        let faults = find(&events, "C", "page faults");
        assert_eq!(faults[1]["args"]["host"], 4900);
        assert_eq!(
            find(&events, "C", "VM exits total")[2]["args"]["exits"],
            1000
        );
    }

    #[test]
    fn totals_when_there_are_no_samples() {
        let mut p = fixture::profile();
        p.samples.clear();
        let events = check(&to_chrome_trace(&p));
        let exits = find(&events, "C", "VM exits");
        assert_eq!(exits.len(), 2);
        assert_eq!(exits[0]["ts"], 0.0);
        assert_eq!(exits[0]["args"]["io"], 0);
        assert_eq!(exits[1]["ts"], 900_000.0);
        assert_eq!(exits[1]["args"]["io"], 600);
        assert_eq!(exits[1]["args"][AWKWARD_REASON], 25);
        assert!(find(&events, "C", "page faults").is_empty());
    }

    #[test]
    fn guest_log_on_its_track_at_the_profiles_time_made_printable() {
        let text = to_chrome_trace(&fixture::with_guest_log(true));
        assert!(!text.contains('\u{1b}') && !text.contains("\\u001b"));
        let events = check(&text);
        let log: Vec<&Value> = events.iter().filter(|e| e["cat"] == "guest_log").collect();
        assert_eq!(log.len(), 4);
        assert!(log.iter().all(|e| e["tid"] == GUEST_LOG_TID));
        let names = find(&events, "M", "thread_name");
        assert!(names
            .iter()
            .any(|e| e["tid"] == GUEST_LOG_TID && e["args"]["name"] == "guest kernel log"));
        // Guest time + 1 ms, in microseconds.
        let evil = log
            .iter()
            .find(|e| e["args"]["guest_ts_ms"] == "150.000000");
        let evil = evil.expect("the record at 150 ms");
        assert_eq!(evil["ts"], 151_000.0);
        assert_eq!(evil["name"], "evil \\e[2J, cleared");
        let init = find(&events, "i", "Run /init as init process");
        assert_eq!(
            init[0]["args"]["text"],
            "Run /init as init process\n  with arguments:"
        );
        let doc: Value = serde_json::from_str(&text).unwrap();
        let note = doc["otherData"]["guest_kernel_log"].as_str().unwrap();
        assert!(
            note.starts_with("4 records") && note.contains("40 console lines"),
            "{note}"
        );

        // Off the clock: no track, the count and why in otherData.
        let text = to_chrome_trace(&fixture::with_guest_log(false));
        let events = check(&text);
        assert!(events.iter().all(|e| e["cat"] != "guest_log"));
        let doc: Value = serde_json::from_str(&text).unwrap();
        let note = doc["otherData"]["guest_kernel_log"].as_str().unwrap();
        assert!(
            note.contains("not on the trace") && note.contains("guest-log"),
            "{note}"
        );
        // Without a guest read, no word on it.
        let doc: Value = serde_json::from_str(&to_chrome_trace(&fixture::profile())).unwrap();
        assert!(doc["otherData"].get("guest_kernel_log").is_none());
    }

    #[test]
    fn empty_profile_is_a_valid_trace() {
        let events = check(&to_chrome_trace(&Profile::new()));
        let proc_name = find(&events, "M", "process_name");
        assert_eq!(proc_name[0]["pid"], 1);
        assert!(events.iter().all(|e| e["ph"] == "M"));
    }

    #[test]
    fn overlapping_phases_get_their_own_lane() {
        let mut p = Profile::new();
        let span = |name: &str, start_ns, end_ns| PhaseSpan {
            name: name.into(),
            start_ns,
            end_ns,
        };
        p.phases = vec![
            span("a", 0, 100),
            span("inside a", 10, 20),
            span("crosses a", 50, 150),
            span("after", 150, 200),
            span("backwards", 300, 250),
        ];
        assert_eq!(lanes(&p.phases), [0, 0, 1, 0, 0]);
        let events = check(&to_chrome_trace(&p));
        assert_eq!(find(&events, "X", "crosses a")[0]["tid"], PHASES_TID + 1);
        assert_eq!(find(&events, "X", "backwards")[0]["dur"], 0.0);
        assert!(events
            .iter()
            .any(|e| e["args"]["name"] == "boot phases (overlapping, 2)"));
    }

    #[test]
    fn converted_timeline_trace() {
        let v: Value = serde_json::from_str(fixture::TIMELINE_EXAMPLE).unwrap();
        let p = super::super::profile_from_timeline(&v).unwrap();
        let text = to_chrome_trace(&p);
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["otherData"]["kvm_stats_exits"], "21191");
        let events = check(&text);
        assert_eq!(find(&events, "X", "kernel").len(), 1);
        assert_eq!(find(&events, "i", "vmm: process start").len(), 1);
        assert_eq!(
            find(&events, "M", "process_name")[0]["args"]["name"],
            "bootscope"
        );
    }
}
