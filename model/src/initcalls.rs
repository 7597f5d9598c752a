//! The `initcalls` section of a timeline (`bootscope run --initcalls`,
//! docs/initcalls.md): the kernel's initcalls and their levels on the
//! timeline's clock, as the VMM writes them and every reader reads them,
//! and the attribution of a profiler's counts to them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The `initcalls` section of the timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InitcallsDoc {
    /// How they were recorded.
    pub method: String,
    /// The kernel's release, from VMCOREINFO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_release: Option<String>,
    /// Log records read, the first sequence number kept (above 0: the ring
    /// wrapped and older records were lost) and the text ring's size.
    pub log_records: u64,
    pub log_first_seq: u64,
    pub log_bytes: u64,
    /// Host time spent finding and reading the log at shutdown (and, for
    /// the tracepoints, loading the kernel's symbols and types).
    pub read_ns: u64,
    /// The trace method: where the kernel's symbols and types came from,
    /// the events read and those the kernel overwrote (its trace buffer
    /// was too small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_events: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_overrun: Option<u64>,
    /// The trace method with `initcall_debug` also on the command line:
    /// the traced durations against the kernel's own figures in its log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_durations: Option<DurationCheck>,
    /// How guest times map onto the timeline; absent without a console line
    /// to anchor them (`start_ns` is then the guest time itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockAlignment>,
    /// Width of the profiler's time slots the `counted` counts come from
    /// (their resolution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_ns: Option<u64>,
    /// Where the profiler's slot map filled up: its counts are complete
    /// before this time only, and what ends later has `sampled` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_complete_until_ns: Option<u64>,
    /// Median spacing of the profiler's samples the `sampled` counts come
    /// from: an initcall much shorter gets a share of its neighbours'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_spacing_ns: Option<u64>,
    /// Why nothing was recorded, when nothing was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub levels: Vec<InitcallLevel>,
    pub initcalls: Vec<Initcall>,
}

/// One initcall on the timeline's clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Initcall {
    pub name: String,
    pub level: String,
    /// Nanoseconds since VMM start (the guest time plus the alignment
    /// offset; uncertain by the alignment's `error_ns`).
    pub start_ns: u64,
    pub duration_ns: u64,
    /// What it returned (0 is success, negative an errno).
    pub ret: i64,
    /// The guest's own timestamp of its start (`ts_nsec`).
    pub guest_start_ns: u64,
    /// With the tracepoints and `initcall_debug` both on: the kernel's own
    /// measure of it (`after N usecs`), to compare (`kernel_durations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_duration_ns: Option<u64>,
    /// Port I/O and MMIO exits the guest made during it (counted by the
    /// VMM per 100 µs; see docs/initcalls.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_exits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmio_exits: Option<u64>,
    /// What the profiler counted during it (`run --initcalls` profiled):
    /// every exit by reason and the page faults, exact to its time slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<SampledCounts>,
    /// What a profiler's sampled counters grew by during it, at the
    /// samples' resolution: only where `counted` is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<SampledCounts>,
}

impl Initcall {
    /// The profiler's counts during it, exact or else sampled.
    pub fn profiled(&self) -> Option<&SampledCounts> {
        self.counted.as_ref().or(self.sampled.as_ref())
    }
}

/// Counts of an interval of the timeline from a source outside the VMM
/// (a profiler's per-slot counts): the VMM only asks for intervals.
pub trait IntervalCounts {
    /// Width of the slots the counts are kept in (their resolution).
    fn slot_ns(&self) -> u64;
    /// From this time on (the timeline's clock) the counts may be
    /// incomplete; None: complete throughout.
    fn complete_until_ns(&self) -> Option<u64>;
    /// What was counted in `start_ns..end_ns`.
    fn between(&self, start_ns: u64, end_ns: u64) -> SampledCounts;
}

/// Counters of the host's view of the guest (every exit by reason, page
/// faults), as a profiler samples them: cumulative at a sample, a growth
/// over an interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SampledCounts {
    pub exits: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exits_by_reason: BTreeMap<String, u64>,
    pub guest_faults: u64,
    pub host_faults: u64,
}

/// One initcall level: from its first initcall's start to its last one's
/// end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InitcallLevel {
    pub level: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    pub initcalls: u32,
    /// The initcalls' own time summed (the rest of the span is the kernel
    /// between them).
    pub initcalls_ns: u64,
    /// Port I/O and MMIO exits in the level's span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_exits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmio_exits: Option<u64>,
    /// What the profiler counted in the level's span (exact to its slots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<SampledCounts>,
    /// What the profiler's sampled counters grew by in the level's span,
    /// where `counted` is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<SampledCounts>,
}

/// The counters at `t_ns`, linearly between the samples around it (`samples`
/// sorted by time, cumulative).
fn counters_at(samples: &[(u64, SampledCounts)], t_ns: u64) -> SampledCounts {
    let after = samples.partition_point(|(t, _)| *t <= t_ns);
    let (Some((t0, c0)), Some((t1, c1))) = (
        after.checked_sub(1).and_then(|i| samples.get(i)),
        samples.get(after),
    ) else {
        // Outside the samples: the nearest one.
        return samples
            .get(after.min(samples.len().saturating_sub(1)))
            .map(|(_, c)| c.clone())
            .unwrap_or_default();
    };
    let f = (t_ns - t0) as f64 / (t1 - t0).max(1) as f64;
    let lerp = |a: u64, b: u64| a + (b.saturating_sub(a) as f64 * f).round() as u64;
    SampledCounts {
        exits: lerp(c0.exits, c1.exits),
        exits_by_reason: c1
            .exits_by_reason
            .iter()
            .map(|(k, &b)| {
                (
                    k.clone(),
                    lerp(c0.exits_by_reason.get(k).copied().unwrap_or(0), b),
                )
            })
            .collect(),
        guest_faults: lerp(c0.guest_faults, c1.guest_faults),
        host_faults: lerp(c0.host_faults, c1.host_faults),
    }
}

fn growth(samples: &[(u64, SampledCounts)], start: u64, end: u64) -> SampledCounts {
    let (a, b) = (counters_at(samples, start), counters_at(samples, end));
    SampledCounts {
        exits: b.exits.saturating_sub(a.exits),
        exits_by_reason: b
            .exits_by_reason
            .iter()
            .map(|(k, &v)| {
                let before = a.exits_by_reason.get(k).copied().unwrap_or(0);
                (k.clone(), v.saturating_sub(before))
            })
            .filter(|(_, v)| *v > 0)
            .collect(),
        guest_faults: b.guest_faults.saturating_sub(a.guest_faults),
        host_faults: b.host_faults.saturating_sub(a.host_faults),
    }
}

impl InitcallsDoc {
    /// Gives each initcall and level what a profiler counted during it
    /// (`counted`), where its counts are complete: those that end before
    /// [`IntervalCounts::complete_until_ns`].
    pub fn attribute_counts(&mut self, counts: &dyn IntervalCounts) {
        if self.initcalls.is_empty() {
            return;
        }
        let until = counts.complete_until_ns().unwrap_or(u64::MAX);
        self.slot_ns = Some(counts.slot_ns());
        self.slots_complete_until_ns = counts.complete_until_ns();
        for c in &mut self.initcalls {
            let end = c.start_ns + c.duration_ns;
            if end <= until {
                c.counted = Some(counts.between(c.start_ns, end));
            }
        }
        for l in &mut self.levels {
            if l.end_ns <= until {
                l.counted = Some(counts.between(l.start_ns, l.end_ns));
            }
        }
    }

    /// Gives each initcall and level without `counted` what a profiler's
    /// cumulative counters (`samples`: time on the timeline's clock,
    /// counters) grew by during it, interpolating between samples.
    pub fn attribute_samples(&mut self, samples: &mut [(u64, SampledCounts)]) {
        samples.sort_by_key(|(t, _)| *t);
        if samples.len() < 2 || self.initcalls.is_empty() {
            return;
        }
        let mut filled = false;
        for c in self.initcalls.iter_mut().filter(|c| c.counted.is_none()) {
            c.sampled = Some(growth(samples, c.start_ns, c.start_ns + c.duration_ns));
            filled = true;
        }
        for l in self.levels.iter_mut().filter(|l| l.counted.is_none()) {
            l.sampled = Some(growth(samples, l.start_ns, l.end_ns));
            filled = true;
        }
        if filled {
            let mut spacing: Vec<u64> = samples.windows(2).map(|w| w[1].0 - w[0].0).collect();
            spacing.sort_unstable();
            self.sample_spacing_ns = Some(spacing[spacing.len() / 2]);
        }
    }
}

/// Traced durations against the kernel's own (`initcall_debug`'s `after N
/// usecs`, `ktime_get()` around the call) for the same initcalls of the
/// same boot, matched by name in order. Only those that started after the
/// kernel switched to a fine clocksource count: before that `ktime_get()`
/// advances by whole jiffies (its figures are 0 or multiples of 4 ms at
/// HZ=250) while the trace clock does not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DurationCheck {
    /// Guest time of the switch (`clocksource: Switched to clocksource
    /// ...` in the log); those before it are not compared.
    #[serde(default)]
    pub from_guest_ns: u64,
    /// Matched but started before the switch (not compared).
    #[serde(default)]
    pub coarse: u64,
    pub compared: u64,
    /// Those within 10 % or 50 µs of the kernel's figure.
    pub agree: u64,
    /// The largest difference: initcall, traced and kernel durations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst: Option<(String, u64, u64)>,
}

/// How guest log times map onto the timeline's clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClockAlignment {
    /// Timeline nanoseconds = guest `ts_nsec` + `offset_ns`.
    pub offset_ns: i64,
    /// The true offset is within `offset_ns ± error_ns`.
    pub error_ns: u64,
    /// Console lines matched to log records.
    pub anchors: usize,
    /// Lines that gave the lower bound (record stored after a line).
    pub lower_anchors: usize,
}
