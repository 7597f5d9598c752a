//! Replaying a saved profile as if it were being recorded: at time t the
//! replay shows the marks and phases up to t, the counters of the last
//! sample before t, and the threads started by then. Used by tests and to
//! look at a profile after the fact.

use std::time::Instant;

use bootscope_model::profile::{HistBucket, Profile, Sample};

use crate::ProfileSource;

/// How replay time advances.
#[derive(Clone, Copy, Debug)]
enum ReplayClock {
    /// By a fixed step at every snapshot (deterministic, for tests).
    Step { step_ns: u64, now_ns: u64 },
    /// With the wall clock, `speed` times as fast.
    Wall { start: Instant, speed: f64 },
}

/// A [`ProfileSource`] over a saved profile.
#[derive(Clone, Debug)]
pub struct ReplaySource {
    profile: Profile,
    clock: ReplayClock,
    title: String,
}

impl ReplaySource {
    /// Replays `profile` in real time times `speed`.
    pub fn realtime(profile: Profile, speed: f64) -> Self {
        Self {
            title: replay_title(&profile),
            profile,
            clock: ReplayClock::Wall {
                start: Instant::now(),
                speed: if speed > 0.0 { speed } else { 1.0 },
            },
        }
    }

    /// Replays `profile`, advancing `step_ns` at each snapshot.
    pub fn stepped(profile: Profile, step_ns: u64) -> Self {
        Self {
            title: replay_title(&profile),
            profile,
            clock: ReplayClock::Step {
                step_ns: step_ns.max(1),
                now_ns: 0,
            },
        }
    }

    fn now_ns(&self) -> u64 {
        match self.clock {
            ReplayClock::Step { now_ns, .. } => now_ns,
            ReplayClock::Wall { start, speed } => {
                (start.elapsed().as_nanos() as f64 * speed).min(u64::MAX as f64) as u64
            }
        }
    }
}

fn replay_title(p: &Profile) -> String {
    format!("replay of pid {} ({})", p.target.pid, p.target.name)
}

impl ProfileSource for ReplaySource {
    fn snapshot(&mut self) -> Profile {
        if let ReplayClock::Step { step_ns, now_ns } = &mut self.clock {
            *now_ns = now_ns.saturating_add(*step_ns);
        }
        profile_at(&self.profile, self.now_ns())
    }

    fn finished(&mut self) -> bool {
        self.now_ns() >= self.profile.duration_ns
    }

    fn title(&self) -> String {
        self.title.clone()
    }
}

fn scale(n: u64, frac: f64) -> u64 {
    (n as f64 * frac).round() as u64
}

fn scale_hist(h: &[HistBucket], frac: f64) -> Vec<HistBucket> {
    h.iter()
        .map(|b| HistBucket {
            count: scale(b.count, frac),
            ..b.clone()
        })
        .collect()
}

/// The most samples a replayed profile keeps (the last ones by its time):
/// what the panes draw (the fault rates of the last samples, one per
/// column), so a profile of a million samples is not copied at every frame.
pub const PANE_SAMPLES: usize = 4096;

/// The last [`PANE_SAMPLES`] of `samples`.
fn tail<'a>(samples: impl DoubleEndedIterator<Item = &'a Sample>) -> Vec<Sample> {
    let mut last: Vec<Sample> = samples.rev().take(PANE_SAMPLES).cloned().collect();
    last.reverse();
    last
}

/// A copy of `p` without its samples (which can be most of it).
fn without_samples(p: &Profile) -> Profile {
    let Profile {
        schema,
        version,
        target,
        host,
        duration_ns,
        sources,
        exits,
        page_faults,
        threads,
        numa,
        marks,
        phases,
        samples: _,
        lost_events,
        map_overflows,
        startup,
        collector,
        time_slots,
        guest_read,
        units,
        fault_tail,
    } = p;
    Profile {
        schema: schema.clone(),
        version: *version,
        target: target.clone(),
        host: host.clone(),
        duration_ns: *duration_ns,
        sources: sources.clone(),
        exits: exits.clone(),
        page_faults: page_faults.clone(),
        threads: threads.clone(),
        numa: numa.clone(),
        marks: marks.clone(),
        phases: phases.clone(),
        samples: Vec::new(),
        lost_events: *lost_events,
        map_overflows: *map_overflows,
        startup: startup.clone(),
        collector: collector.clone(),
        time_slots: time_slots.clone(),
        guest_read: guest_read.clone(),
        units: units.clone(),
        fault_tail: fault_tail.clone(),
    }
}

/// The profile as it looked `t_ns` after profiling started (as far as the
/// saved data tells): counters from the last sample by then, totals that
/// samples do not hold scaled by the share of exits seen. Of the samples
/// by then, the last [`PANE_SAMPLES`] are kept.
pub fn profile_at(p: &Profile, t_ns: u64) -> Profile {
    let mut out = without_samples(p);
    out.samples = if t_ns >= p.duration_ns {
        tail(p.samples.iter())
    } else {
        tail(p.samples.iter().filter(|s| s.t_ns <= t_ns))
    };
    if t_ns >= p.duration_ns {
        return out;
    }
    out.duration_ns = t_ns;
    out.target.ended_ns = None;
    out.target.exit_code = None;
    out.marks.retain(|m| m.t_ns <= t_ns);
    out.phases.retain(|s| s.start_ns <= t_ns);
    for s in &mut out.phases {
        s.end_ns = s.end_ns.min(t_ns);
    }
    let time_frac = t_ns as f64 / p.duration_ns.max(1) as f64;
    let last = out.samples.last().cloned();
    // Share of the exits seen by t: from the samples when they have any.
    let exit_frac = match &last {
        Some(s) if p.exits.total > 0 => s.exits_total as f64 / p.exits.total as f64,
        Some(_) => 0.0,
        None => time_frac,
    };
    out.exits.total = scale(p.exits.total, exit_frac);
    for r in &mut out.exits.by_reason {
        r.count = match &last {
            Some(s) if s.exits_by_reason.contains_key(&r.reason) => s.exits_by_reason[&*r.reason],
            _ => scale(r.count, exit_frac),
        };
        r.latency_total_ns = r.latency_total_ns.map(|v| scale(v, exit_frac));
        r.latency_hist = scale_hist(&r.latency_hist, exit_frac);
    }
    for v in &mut out.exits.by_vcpu {
        for n in v.by_reason.values_mut() {
            *n = scale(*n, exit_frac);
        }
    }
    out.exits.kvm_stats_exits = p.exits.kvm_stats_exits.map(|v| scale(v, exit_frac));
    let (guest, host) = match &last {
        Some(s) => (s.guest_faults, s.host_faults),
        None => (
            scale(p.page_faults.guest_total, time_frac),
            scale(p.page_faults.host_total, time_frac),
        ),
    };
    let host_frac = if p.page_faults.host_total > 0 {
        host as f64 / p.page_faults.host_total as f64
    } else {
        0.0
    };
    out.page_faults.guest_total = guest;
    out.page_faults.host_total = host;
    out.page_faults.host_user = scale(p.page_faults.host_user, host_frac);
    out.page_faults.host_kernel = scale(p.page_faults.host_kernel, host_frac);
    threads_and_numa_at(&mut out, p, t_ns, time_frac);
    out
}

/// The threads started by `t_ns`, their pages and run time in proportion
/// to how much of their life has passed; the NUMA totals follow the
/// threads' pages when threads allocated any (else the share of time).
fn threads_and_numa_at(out: &mut Profile, p: &Profile, t_ns: u64, time_frac: f64) {
    out.threads.retain(|th| th.start_ns <= t_ns);
    let all_pages: u64 = p.threads.iter().map(|th| th.pages_allocated).sum();
    let mut pages_now = 0u64;
    for th in &mut out.threads {
        let life = th.end_ns.saturating_sub(th.start_ns).max(1);
        let frac = (t_ns.saturating_sub(th.start_ns) as f64 / life as f64).min(1.0);
        th.end_ns = th.end_ns.min(t_ns);
        th.exit_code = None;
        th.pages_allocated = scale(th.pages_allocated, frac);
        th.pages_local = scale(th.pages_local, frac);
        th.pages_remote = scale(th.pages_remote, frac);
        th.bytes_allocated = scale(th.bytes_allocated, frac);
        th.run_ns = scale(th.run_ns, frac);
        for c in &mut th.cpus {
            c.run_ns = scale(c.run_ns, frac);
        }
        for n in &mut th.pages_by_node {
            n.pages = scale(n.pages, frac);
        }
        pages_now += th.pages_allocated;
    }
    // NUMA totals follow the threads' pages when threads allocated any.
    let numa_frac = if all_pages > 0 {
        pages_now as f64 / all_pages as f64
    } else {
        time_frac
    };
    let n = &mut out.numa;
    n.pages_local = scale(n.pages_local, numa_frac);
    n.pages_remote = scale(n.pages_remote, numa_frac);
    n.pages_allocated = scale(n.pages_allocated, numa_frac);
    n.bytes_allocated = scale(n.bytes_allocated, numa_frac);
    n.pages_unknown_node = scale(n.pages_unknown_node, numa_frac);
    for node in &mut n.by_node {
        node.pages_local = scale(node.pages_local, numa_frac);
        node.pages_remote = scale(node.pages_remote, numa_frac);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::profile::{PhaseSpan, Sample, ThreadProfile};

    fn saved() -> Profile {
        let mut p = Profile::new();
        p.duration_ns = 1_000;
        p.exits.total = 100;
        p.target.exit_code = Some(0);
        p.target.ended_ns = Some(1_000);
        p.phases = vec![
            PhaseSpan {
                name: "a".into(),
                start_ns: 0,
                end_ns: 400,
            },
            PhaseSpan {
                name: "b".into(),
                start_ns: 400,
                end_ns: 1_000,
            },
        ];
        p.samples = vec![
            Sample {
                t_ns: 200,
                exits_total: 10,
                guest_faults: 5,
                ..Default::default()
            },
            Sample {
                t_ns: 600,
                exits_total: 60,
                guest_faults: 30,
                ..Default::default()
            },
        ];
        p.threads = vec![ThreadProfile {
            tid: 1,
            name: "touch_pages".into(),
            start_ns: 500,
            end_ns: 900,
            pages_allocated: 400,
            ..Default::default()
        }];
        p
    }

    #[test]
    fn partial_profiles_grow_to_the_saved_one() {
        let p = saved();
        let a = profile_at(&p, 300);
        assert_eq!(a.phases.len(), 1);
        assert_eq!(a.phases[0].end_ns, 300);
        assert_eq!(a.exits.total, 10);
        assert_eq!(a.page_faults.guest_total, 5);
        assert!(a.threads.is_empty());
        assert_eq!(a.target.exit_code, None);
        let b = profile_at(&p, 700);
        assert_eq!(b.phases.len(), 2);
        assert_eq!(b.exits.total, 60);
        assert_eq!(b.threads[0].pages_allocated, 200);
        assert_eq!(profile_at(&p, 1_000), p);
    }

    #[test]
    fn stepped_replay_finishes() {
        let mut r = ReplaySource::stepped(saved(), 400);
        assert!(!r.finished());
        assert_eq!(r.snapshot().duration_ns, 400);
        assert_eq!(r.snapshot().duration_ns, 800);
        assert!(!r.finished());
        assert_eq!(r.snapshot(), saved());
        assert!(r.finished());
        assert_eq!(r.title(), "replay of pid 0 ()");
    }
}
