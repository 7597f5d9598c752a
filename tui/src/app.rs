//! The TUI's state: the latest profile, the one before it (rates are the
//! differences between the two), and what the user chose (pause, vCPU,
//! sort, selected exit reason, help). Everything here is pure: key handling
//! and the derived rows are unit-tested without a terminal.
//!
//! This file holds [`App`] itself, its snapshots, rates and fault-rate
//! history; beside it:
//! - `keys.rs`: what each key does ([`App::on_key`], [`Action`]);
//! - `rows.rs`: the exit reason and thread rows, sorted ([`SortMode`],
//!   [`ExitRow`]);
//! - `phase_rows.rs`: the phase pane's rows, the initcalls and units under
//!   their phases ([`PhaseRow`], [`InitcallOrder`]).

use std::collections::VecDeque;

use bootscope_model::profile::Profile;

use crate::initcalls::Initcalls;
use crate::theme::Theme;

mod keys;
mod phase_rows;
mod rows;

pub use keys::{Action, PHASE_PAGE};
pub use phase_rows::{is_initcall_phase, InitcallOrder, PhaseRow, SLOWEST_PER_LEVEL};
pub use rows::{ExitRow, SortMode};

/// How many fault-rate points the TUI keeps when the profile has no samples
/// of its own.
const HISTORY_POINTS: usize = 240;

/// One point of the fault-rate history (cumulative counts).
#[derive(Clone, Copy, Debug, PartialEq)]
struct FaultPoint {
    t_ns: u64,
    guest: u64,
    host: u64,
}

/// Where the replay stands, for the status line and the help.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayStatus {
    /// The position, on the profile's clock.
    pub t_ns: u64,
    /// The profile's end.
    pub end_ns: u64,
    pub playing: bool,
    pub speed: f64,
    /// Samples recorded by the position, of how many.
    pub samples_seen: usize,
    pub samples: usize,
    /// The phase the position is in.
    pub phase: Option<String>,
}

/// Everything the UI draws from.
#[derive(Clone, Debug)]
pub struct App {
    /// What is profiled (the source's title).
    pub title: String,
    /// The latest profile.
    pub profile: Profile,
    /// The profile before it, for rates.
    pub previous: Option<Profile>,
    pub paused: bool,
    /// The target ended (or profiling stopped): the profile is final.
    pub finished: bool,
    /// None: all vCPUs.
    pub vcpu: Option<u32>,
    pub sort: SortMode,
    /// The exit reason whose latency histogram is shown (None: the first).
    pub selected_reason: Option<String>,
    /// The latency pane shows the selected reason's exit sites instead.
    pub show_sites: bool,
    pub show_help: bool,
    /// A message for the status line (a snapshot's path, an error).
    pub message: Option<String>,
    /// A note from the source (where a console or a command's output goes).
    pub note: Option<String>,
    /// The console pane, when the source has one.
    pub console: Option<crate::Console>,
    pub theme: Theme,
    /// The time between snapshots, when their cost made the TUI take them
    /// less often than asked.
    pub stretched_refresh: Option<std::time::Duration>,
    /// The kernel's initcalls, once the source has them (after the guest
    /// stopped, `run --initcalls`).
    pub initcalls: Option<Initcalls>,
    /// `kernel` expanded into its initcalls (`i`).
    pub expand_kernel: bool,
    /// A systemd guest's units, once the source has them (after the guest
    /// stopped, from the record on its disk).
    pub units: Option<crate::units::Units>,
    /// `userspace` expanded into its units (`u`).
    pub expand_userspace: bool,
    pub initcall_order: InitcallOrder,
    /// First row of the phase pane shown (PgDn/PgUp), when its rows do not
    /// fit.
    pub phase_scroll: usize,
    /// Browsing a saved profile (`bootscope tui`): where the replay stands.
    pub replay: Option<ReplayStatus>,
    history: VecDeque<FaultPoint>,
}

impl App {
    pub fn new(title: impl Into<String>, theme: Theme) -> Self {
        Self {
            title: title.into(),
            profile: Profile::new(),
            previous: None,
            paused: false,
            finished: false,
            vcpu: None,
            sort: SortMode::default(),
            selected_reason: None,
            show_sites: false,
            show_help: false,
            message: None,
            note: None,
            console: None,
            theme,
            stretched_refresh: None,
            initcalls: None,
            expand_kernel: false,
            units: None,
            expand_userspace: false,
            initcall_order: InitcallOrder::default(),
            phase_scroll: 0,
            replay: None,
            history: VecDeque::new(),
        }
    }

    /// Takes a new snapshot; the current one becomes the previous one.
    pub fn update(&mut self, profile: Profile) {
        let point = FaultPoint {
            t_ns: profile.duration_ns,
            guest: profile.page_faults.guest_total,
            host: profile.page_faults.host_total,
        };
        // A snapshot at the same instant carries no rate information.
        if self
            .history
            .back()
            .is_none_or(|last| point.t_ns > last.t_ns)
        {
            self.history.push_back(point);
            while self.history.len() > HISTORY_POINTS {
                self.history.pop_front();
            }
        }
        let old = std::mem::replace(&mut self.profile, profile);
        if old.duration_ns < self.profile.duration_ns {
            self.previous = Some(old);
        }
    }

    /// Takes the final snapshot: from now on the screen holds still.
    pub fn finish(&mut self, profile: Profile) {
        self.update(profile);
        self.finished = true;
        self.paused = false;
    }

    /// All vCPUs, then each vCPU the profile knows, then all again.
    pub fn cycle_vcpu(&mut self) {
        let vcpus = self.vcpus();
        self.vcpu = match self.vcpu {
            None => vcpus.first().copied(),
            Some(v) => vcpus.iter().copied().find(|&x| x > v),
        };
    }

    /// vCPU indices with exits in the profile.
    pub fn vcpus(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.profile.exits.by_vcpu.iter().map(|x| x.vcpu).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Index of the selected reason among `rows` (the first if none is).
    pub fn selected_index(&self, rows: &[ExitRow]) -> usize {
        self.selected_reason
            .as_ref()
            .and_then(|r| rows.iter().position(|x| &x.reason == r))
            .unwrap_or(0)
    }

    /// Seconds between the previous snapshot and the current one, if
    /// rates can be computed.
    fn rate_interval(&self) -> Option<(f64, &Profile)> {
        let prev = self.previous.as_ref()?;
        let dt = self.profile.duration_ns.checked_sub(prev.duration_ns)?;
        (dt > 0).then(|| (dt as f64 / 1e9, prev))
    }

    /// Rate of a cumulative counter: since the previous snapshot while
    /// live, over the whole profile once finished.
    pub fn rate(&self, now: u64, before: impl FnOnce(&Profile) -> u64) -> f64 {
        if self.finished {
            let secs = self.profile.duration_ns as f64 / 1e9;
            return if secs > 0.0 { now as f64 / secs } else { 0.0 };
        }
        match self.rate_interval() {
            Some((secs, prev)) => now.saturating_sub(before(prev)) as f64 / secs,
            None => 0.0,
        }
    }

    /// Guest-side and host-side fault rates per second, oldest first: from
    /// the profile's samples when it has them, else from the snapshots the
    /// TUI has seen.
    pub fn fault_rates(&self) -> (Vec<u64>, Vec<u64>) {
        let points: Vec<FaultPoint> = if self.profile.samples.len() >= 2 {
            self.profile
                .samples
                .iter()
                .map(|s| FaultPoint {
                    t_ns: s.t_ns,
                    guest: s.guest_faults,
                    host: s.host_faults,
                })
                .collect()
        } else {
            self.history.iter().copied().collect()
        };
        let mut guest = Vec::new();
        let mut host = Vec::new();
        for w in points.windows(2) {
            let dt = w[1].t_ns.saturating_sub(w[0].t_ns);
            if dt == 0 {
                continue;
            }
            let per_sec = |a: u64, b: u64| (b.saturating_sub(a) as f64 * 1e9 / dt as f64) as u64;
            guest.push(per_sec(w[0].guest, w[1].guest));
            host.push(per_sec(w[0].host, w[1].host));
        }
        (guest, host)
    }
}

#[cfg(test)]
mod tests;
