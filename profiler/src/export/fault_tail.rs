//! A restore's page-fault tail (`fault_tail`) in the exports: Prometheus
//! counters and a service-time histogram, Chrome trace counters (the
//! fault-rate curve), and a pprof profile of the faults by guest exit site
//! (or by guest-physical region where no site is known).

use bootscope_model::fault_tail::{FaultTail, KINDS};
use bootscope_model::prometheus::{seconds, Text};
use serde_json::{json, Value};

use super::pprof::{Msg, Strings};
use crate::profile::Profile;

/// The tail's Prometheus families (always declared; samples when the
/// profile has a tail).
pub fn prometheus(out: &mut Text, p: &Profile) {
    let t = p.fault_tail.as_ref();
    out.family(
        "bootscope_fault_tail_guest_faults_total",
        "counter",
        "Guest faults KVM served from a restore's first KVM_RUN to the guest's next mark, by what their service took on the host.",
    );
    for k in t.iter().flat_map(|t| &t.by_kind) {
        out.sample(
            "bootscope_fault_tail_guest_faults_total",
            &[("kind", &k.kind)],
            &k.count.to_string(),
        );
    }
    out.family(
        "bootscope_fault_tail_host_faults_total",
        "counter",
        "Host page faults of the VM's threads in the restore window (the kernel's own counters), minor or major, in guest fault service or not.",
    );
    if let Some(t) = t {
        let h = &t.host;
        for (ty, during, n) in [
            ("minor", "guest_fault", h.minor_in_guest_faults),
            ("major", "guest_fault", h.major_in_guest_faults),
            ("minor", "other", h.minor_other),
            ("major", "other", h.major_other),
        ] {
            out.sample(
                "bootscope_fault_tail_host_faults_total",
                &[("type", ty), ("during", during)],
                &n.to_string(),
            );
        }
    }
    service_histogram(out, t);
    out.family(
        "bootscope_fault_tail_working_set_bytes",
        "gauge",
        "Distinct guest memory faulted in the restore window.",
    );
    out.family(
        "bootscope_fault_tail_window_seconds",
        "gauge",
        "The restore window: first KVM_RUN to the guest's next mark.",
    );
    if let Some(t) = t {
        out.sample(
            "bootscope_fault_tail_working_set_bytes",
            &[],
            &t.working_set.bytes.to_string(),
        );
        if let Some(d) = t.window.duration_ns() {
            out.sample("bootscope_fault_tail_window_seconds", &[], &seconds(d));
        }
    }
}

fn service_histogram(out: &mut Text, t: Option<&FaultTail>) {
    const NAME: &str = "bootscope_fault_tail_service_seconds";
    out.family(
        NAME,
        "histogram",
        "Service time of a restore's guest faults (the fault's start to KVM mapping the page), by kind.",
    );
    for k in t.iter().flat_map(|t| &t.by_kind) {
        let mut cumulative = 0u64;
        for b in &k.hist {
            cumulative += b.count;
            out.sample(
                &format!("{NAME}_bucket"),
                &[("kind", &k.kind), ("le", &seconds(b.hi_ns))],
                &cumulative.to_string(),
            );
        }
        let bucket = format!("{NAME}_bucket");
        out.sample(
            &bucket,
            &[("kind", &k.kind), ("le", "+Inf")],
            &cumulative.to_string(),
        );
        out.sample(
            &format!("{NAME}_sum"),
            &[("kind", &k.kind)],
            &seconds(k.wait_ns),
        );
        out.sample(
            &format!("{NAME}_count"),
            &[("kind", &k.kind)],
            &cumulative.to_string(),
        );
    }
}

/// The fault-rate curve as Chrome trace counter events ("guest faults",
/// per millisecond by kind), on the profile's clock; a zero closes every
/// run of buckets.
pub fn chrome_counters(p: &Profile, pid: u32, events: &mut Vec<Value>) {
    let Some(t) = &p.fault_tail else { return };
    let Some(start) = t.window.start_ns else {
        return;
    };
    let us = |ns: u64| ns as f64 / 1000.0;
    let per_ms = |n: u64| n as f64 * 1_000_000.0 / t.bucket_ns.max(1) as f64;
    let zero: serde_json::Map<String, Value> = KINDS
        .iter()
        .map(|k| ((*k).to_string(), 0.0.into()))
        .collect();
    let mut next = None;
    for b in &t.curve {
        if next.is_some_and(|n| n != b.t_ns) {
            events.push(
                json!({ "ph": "C", "name": "guest faults per ms", "cat": "fault_tail",
                "pid": pid, "ts": us(start + next.unwrap_or(0)), "args": zero }),
            );
        }
        let args: serde_json::Map<String, Value> = KINDS
            .iter()
            .zip(b.counts)
            .map(|(k, n)| ((*k).to_string(), per_ms(n).into()))
            .collect();
        events.push(
            json!({ "ph": "C", "name": "guest faults per ms", "cat": "fault_tail",
            "pid": pid, "ts": us(start + b.t_ns), "args": args }),
        );
        next = Some(b.t_ns + t.bucket_ns);
    }
    if let Some(n) = next {
        events.push(
            json!({ "ph": "C", "name": "guest faults per ms", "cat": "fault_tail",
            "pid": pid, "ts": us(start + n), "args": zero }),
        );
    }
}

/// The tail's faults as a gzipped pprof profile (`export --format pprof
/// --table fault-tail`): sample types `faults` and `wait` (ns); one sample
/// per exit site (its function under "fault tail"), or per guest-physical
/// region when the profile has no sites (PVM hosts, exit sites off).
pub fn to_pprof(p: &Profile) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Msg::default();
    for (kind, unit) in [("faults", "count"), ("wait", "nanoseconds")] {
        let mut vt = Msg::default();
        vt.uint(1, strings.id(kind)).uint(2, strings.id(unit));
        out.bytes(1, &vt.0);
    }
    let mut frames: Vec<String> = vec!["fault tail".into()];
    if let Some(t) = &p.fault_tail {
        let places = if t.sites.is_empty() {
            &t.regions
        } else {
            &t.sites
        };
        for w in places {
            let name = match (&w.label, w.rip, w.gpa) {
                (Some(l), _, _) => l.clone(),
                (None, Some(rip), _) => format!("{rip:#x}"),
                (None, None, Some(gpa)) => format!("gpa {gpa:#x}"),
                _ => "unknown".into(),
            };
            frames.push(name);
            let mut m = Msg::default();
            m.packed(1, &[frames.len() as u64, 1])
                .packed(2, &[w.faults, w.wait_ns]);
            out.bytes(2, &m.0);
        }
    }
    super::pprof::finish(out, &frames, &mut strings, "faults")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::fault_tail::{TailBucket, TailKind, TailWhere, TailWindow};
    use bootscope_model::hist::HistBucket;

    fn profile() -> Profile {
        let mut p = Profile::new();
        p.fault_tail = Some(FaultTail {
            window: TailWindow {
                start_ns: Some(10_000_000),
                end_ns: Some(15_000_000),
                ..Default::default()
            },
            bucket_ns: 1_000_000,
            by_kind: vec![TailKind {
                kind: "minor_anon".into(),
                count: 3,
                wait_ns: 9_000,
                hist: vec![
                    HistBucket {
                        lo_ns: 2048,
                        hi_ns: 4096,
                        count: 2,
                    },
                    HistBucket {
                        lo_ns: 4096,
                        hi_ns: 8192,
                        count: 1,
                    },
                ],
            }],
            curve: vec![
                TailBucket {
                    t_ns: 0,
                    counts: [1, 2, 0, 0, 0],
                },
                TailBucket {
                    t_ns: 3_000_000,
                    counts: [0, 1, 0, 0, 0],
                },
            ],
            regions: vec![TailWhere {
                gpa: Some(0x20_0000),
                faults: 4,
                host_faults: 3,
                wait_ns: 9_000,
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    #[test]
    fn prometheus_has_the_histogram_and_counts() {
        let mut out = Text::default();
        prometheus(&mut out, &profile());
        let text = out.finish();
        assert!(
            text.contains("bootscope_fault_tail_guest_faults_total{kind=\"minor_anon\"} 3"),
            "{text}"
        );
        assert!(
            text.contains(
                "bootscope_fault_tail_service_seconds_bucket{kind=\"minor_anon\",le=\"+Inf\"} 3"
            ),
            "{text}"
        );
        assert!(
            text.contains("bootscope_fault_tail_window_seconds 0.005"),
            "{text}"
        );
        // Families are declared without a tail too.
        let mut empty = Text::default();
        prometheus(&mut empty, &Profile::new());
        assert!(empty
            .finish()
            .contains("# TYPE bootscope_fault_tail_service_seconds histogram"));
    }

    #[test]
    fn the_curve_becomes_counters_closed_by_zeros() {
        let mut ev = Vec::new();
        chrome_counters(&profile(), 7, &mut ev);
        let ts: Vec<f64> = ev.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
        // Bucket 0, its end (a gap follows), bucket 3, its end.
        assert_eq!(ts, [10_000.0, 11_000.0, 13_000.0, 14_000.0]);
        assert_eq!(ev[0]["args"]["minor_anon"], 2.0);
        assert_eq!(ev[1]["args"]["minor_anon"], 0.0);
        let mut none = Vec::new();
        chrome_counters(&Profile::new(), 7, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn pprof_is_gzipped_with_the_regions() {
        let gz = to_pprof(&profile());
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(text.contains("gpa 0x200000") && text.contains("fault tail"));
    }
}
