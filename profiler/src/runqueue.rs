//! Run-queue waits in words: for each boot phase, how long the phase took
//! and how long the target's threads waited for a host CPU in it
//! (`threads[].runqueue_wait`, `--collect sched`).

use crate::collector::vcpu_from_thread_name;
use crate::profile::{Profile, ThreadProfile};
use bootscope_model::human::ms;

/// How a thread is named in the text: `vCPU N` for a vCPU thread, else its
/// name and thread id.
pub fn thread_label(t: &ThreadProfile) -> String {
    match vcpu_from_thread_name(&t.name) {
        Some(n) => format!("vCPU {n}"),
        None if t.name.is_empty() => format!("thread {}", t.tid),
        None => format!("{} ({})", t.name, t.tid),
    }
}

/// The threads that waited in `phase`, longest wait first: (label, ns).
fn waits_in(p: &Profile, phase: &str) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = p
        .threads
        .iter()
        .filter_map(|t| {
            let w = t.runqueue_wait.as_ref()?;
            let ns: u64 = w
                .by_phase
                .iter()
                .filter(|x| x.phase == phase)
                .map(|x| x.total_ns)
                .sum();
            (ns > 0).then(|| (thread_label(t), ns))
        })
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// One line per phase with waits ("kernel phase 800.0 ms, of which vCPU 0
/// waited 300.0 ms for a host CPU, ..."), phases in time order, then the
/// phases that have waits but no span (before the first mark); empty when
/// no thread has waits (the sched collector was off).
pub fn phase_wait_lines(p: &Profile) -> Vec<String> {
    if !p.threads.iter().any(|t| t.runqueue_wait.is_some()) {
        return Vec::new();
    }
    let mut named: Vec<(String, Option<u64>)> = p
        .phases
        .iter()
        .map(|s| (s.name.clone(), Some(s.end_ns.saturating_sub(s.start_ns))))
        .collect();
    for t in &p.threads {
        for w in t.runqueue_wait.iter().flat_map(|w| &w.by_phase) {
            if !named.iter().any(|(n, _)| *n == w.phase) {
                named.push((w.phase.clone(), None));
            }
        }
    }
    let mut lines = Vec::new();
    for (phase, span) in named {
        let waits = waits_in(p, &phase);
        let Some(((first, first_ns), rest)) = waits.split_first() else {
            continue;
        };
        let head = match span {
            Some(ns) => format!("{phase} phase {}, of which", ms(ns)),
            None => format!("{phase}:"),
        };
        let mut line = format!("{head} {first} waited {} for a host CPU", ms(*first_ns));
        for (label, ns) in rest.iter().take(3) {
            line.push_str(&format!(", {label} {}", ms(*ns)));
        }
        if rest.len() > 3 {
            line.push_str(&format!(", {} more threads", rest.len() - 3));
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{PhaseSpan, PhaseWait, RunqueueWait};

    fn thread(tid: u32, name: &str, waits: &[(&str, u64)]) -> ThreadProfile {
        ThreadProfile {
            tid,
            name: name.into(),
            runqueue_wait: Some(RunqueueWait {
                total_ns: waits.iter().map(|w| w.1).sum(),
                count: waits.len() as u64,
                hist: Vec::new(),
                by_phase: waits
                    .iter()
                    .map(|&(phase, total_ns)| PhaseWait {
                        phase: phase.into(),
                        total_ns,
                        count: 1,
                        hist: Vec::new(),
                    })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn each_phase_says_who_waited_how_long() {
        let mut p = Profile::new();
        p.phases = vec![
            PhaseSpan {
                name: "kernel".into(),
                start_ns: 100_000_000,
                end_ns: 900_000_000,
            },
            PhaseSpan {
                name: "userspace".into(),
                start_ns: 900_000_000,
                end_ns: 950_000_000,
            },
        ];
        p.threads = vec![
            thread(
                11,
                "vcpu0",
                &[("kernel", 300_000_000), ("before first mark", 5)],
            ),
            thread(12, "prealloc 0", &[("kernel", 2_000_000)]),
            thread(13, "main", &[]),
        ];
        let lines = phase_wait_lines(&p);
        assert_eq!(
            lines,
            [
                "kernel phase 800.0 ms, of which vCPU 0 waited 300.0 ms for a host CPU, \
                 prealloc 0 (12) 2.0 ms",
                "before first mark: vCPU 0 waited 0.0 ms for a host CPU",
            ]
        );
        // Nothing without the collector.
        p.threads.iter_mut().for_each(|t| t.runqueue_wait = None);
        assert!(phase_wait_lines(&p).is_empty());
    }
}
