//! The exit reason rows and the thread rows of the [`App`], in the order
//! the user chose ([`SortMode`], `s`).

use std::collections::BTreeMap;

use bootscope_model::profile::{ExitReasonStat, Profile, ThreadProfile};

use super::App;

/// Order of the exit reasons and thread rows (`s` cycles).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortMode {
    /// Largest total first (exits; pages touched for threads).
    #[default]
    Total,
    /// Largest current rate first.
    Rate,
    /// By name.
    Name,
}

impl SortMode {
    pub fn next(self) -> Self {
        match self {
            SortMode::Total => SortMode::Rate,
            SortMode::Rate => SortMode::Name,
            SortMode::Name => SortMode::Total,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            SortMode::Total => "total",
            SortMode::Rate => "rate",
            SortMode::Name => "name",
        }
    }
}

/// One row of the exit reason chart.
#[derive(Clone, Debug, PartialEq)]
pub struct ExitRow {
    pub reason: String,
    pub count: u64,
    /// Per second: between the last two snapshots while live, over the
    /// whole profile once the target ended.
    pub rate: f64,
}

impl App {
    /// Exit counts by reason for the chosen vCPU (or all).
    fn exit_counts(p: &Profile, vcpu: Option<u32>) -> BTreeMap<String, u64> {
        match vcpu {
            None => p
                .exits
                .by_reason
                .iter()
                .map(|r| (r.reason.clone(), r.count))
                .collect(),
            Some(v) => {
                let mut out = BTreeMap::new();
                for x in p.exits.by_vcpu.iter().filter(|x| x.vcpu == v) {
                    for (r, n) in &x.by_reason {
                        *out.entry(r.clone()).or_default() += n;
                    }
                }
                out
            }
        }
    }

    /// The exit reason rows, sorted.
    pub fn exit_rows(&self) -> Vec<ExitRow> {
        let now = Self::exit_counts(&self.profile, self.vcpu);
        let before = self
            .previous
            .as_ref()
            .map(|p| Self::exit_counts(p, self.vcpu))
            .unwrap_or_default();
        let mut rows: Vec<ExitRow> = now
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(reason, count)| {
                let prev = before.get(&reason).copied().unwrap_or(0);
                let rate = self.rate(count, |_| prev);
                ExitRow {
                    reason,
                    count,
                    rate,
                }
            })
            .collect();
        match self.sort {
            SortMode::Total => {
                rows.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.reason.cmp(&b.reason)))
            }
            SortMode::Rate => rows.sort_by(|a, b| {
                b.rate
                    .total_cmp(&a.rate)
                    .then_with(|| b.count.cmp(&a.count))
                    .then_with(|| a.reason.cmp(&b.reason))
            }),
            SortMode::Name => rows.sort_by(|a, b| a.reason.cmp(&b.reason)),
        }
        rows
    }

    /// Total exits for the chosen vCPU (or all) and their rate.
    pub fn exit_total(&self) -> (u64, f64) {
        match self.vcpu {
            None => {
                let total = self.profile.exits.total;
                (total, self.rate(total, |p| p.exits.total))
            }
            Some(v) => {
                let sum = |p: &Profile| Self::exit_counts(p, Some(v)).values().sum::<u64>();
                let total = sum(&self.profile);
                (total, self.rate(total, sum))
            }
        }
    }

    /// The reason whose latency histogram is shown.
    pub fn selected_reason_stat(&self) -> Option<&ExitReasonStat> {
        let rows = self.exit_rows();
        let name = rows.get(self.selected_index(&rows))?.reason.clone();
        self.profile
            .exits
            .by_reason
            .iter()
            .find(|r| r.reason == name)
    }

    /// Whether the profile has run-queue waits (`--collect sched`).
    pub fn has_waits(&self) -> bool {
        self.profile
            .threads
            .iter()
            .any(|t| t.runqueue_wait.is_some())
    }

    /// The threads of the threads pane and whether they are the
    /// preallocation threads (with the vCPU threads when the profile has
    /// run-queue waits; else every thread is listed).
    pub fn thread_rows(&self) -> (Vec<&ThreadProfile>, bool) {
        let waits = self.has_waits();
        let prealloc: Vec<&ThreadProfile> = self
            .profile
            .threads
            .iter()
            .filter(|t| t.role == "prealloc" || (waits && t.role == "vcpu"))
            .collect();
        let is_prealloc = !prealloc.is_empty();
        let mut rows = if is_prealloc {
            prealloc
        } else {
            self.profile.threads.iter().collect()
        };
        let prev_pages = |tid: u32| {
            self.previous
                .as_ref()
                .and_then(|p| p.threads.iter().find(|t| t.tid == tid))
                .map(|t| t.pages_allocated)
                .unwrap_or(0)
        };
        match self.sort {
            SortMode::Total => rows.sort_by(|a, b| {
                b.pages_allocated
                    .cmp(&a.pages_allocated)
                    .then(b.run_ns.cmp(&a.run_ns))
                    .then(a.tid.cmp(&b.tid))
            }),
            SortMode::Rate => rows.sort_by(|a, b| {
                let ra = a.pages_allocated.saturating_sub(prev_pages(a.tid));
                let rb = b.pages_allocated.saturating_sub(prev_pages(b.tid));
                rb.cmp(&ra)
                    .then(b.pages_allocated.cmp(&a.pages_allocated))
                    .then(a.tid.cmp(&b.tid))
            }),
            SortMode::Name => rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.tid.cmp(&b.tid))),
        }
        (rows, is_prealloc)
    }
}
