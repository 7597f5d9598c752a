//! The TUI's state: the latest profile, the one before it (rates are the
//! differences between the two), and what the user chose (pause, vCPU,
//! sort, selected exit reason, help). Everything here is pure: key handling
//! and the derived rows are unit-tested without a terminal.

use std::collections::{BTreeMap, VecDeque};

use bootscope_model::profile::{ExitReasonStat, PhaseSpan, Profile, ThreadProfile};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::initcalls::Initcalls;
use crate::theme::Theme;

/// How many fault-rate points the TUI keeps when the profile has no samples
/// of its own.
const HISTORY_POINTS: usize = 240;
/// Rows PgDn and PgUp move the phase pane by.
pub const PHASE_PAGE: usize = 8;

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

/// Order of the initcalls under each level when `kernel` is expanded (`o`
/// switches).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitcallOrder {
    /// The slowest of each level first ([`SLOWEST_PER_LEVEL`] of them, the
    /// rest summed in one row).
    #[default]
    Slowest,
    /// Every initcall, in the order they ran.
    Time,
}

impl InitcallOrder {
    pub fn label(self) -> &'static str {
        match self {
            InitcallOrder::Slowest => "slowest first",
            InitcallOrder::Time => "time order",
        }
    }
}

/// Initcalls listed per level, slowest first.
pub const SLOWEST_PER_LEVEL: usize = 5;

/// One row of the phase pane.
#[derive(Clone, Debug, PartialEq)]
pub enum PhaseRow {
    /// A boot phase; `index` is its place among the phases (its colour).
    Phase {
        index: usize,
        name: String,
        start_ns: u64,
        end_ns: u64,
        running: bool,
        /// `kernel` with initcalls to show: whether they are shown.
        initcalls: Option<bool>,
    },
    /// An initcall level under `kernel`.
    Level {
        level: String,
        calls: usize,
        start_ns: u64,
        end_ns: u64,
        exits: Option<u64>,
    },
    /// An initcall under its level.
    Call {
        name: String,
        start_ns: u64,
        duration_ns: u64,
        ret: i64,
        exits: Option<u64>,
    },
    /// The initcalls of a level not listed (slowest first): how many, their
    /// time and exits.
    More {
        calls: usize,
        duration_ns: u64,
        exits: Option<u64>,
    },
}

/// Whether a profile phase is an initcall or level that a timeline
/// converted to a profile carries (`initcall: NAME`, `initcalls: LEVEL`):
/// the pane shows those under `kernel` instead.
pub fn is_initcall_phase(name: &str) -> bool {
    name.starts_with("initcall: ")
        || name.starts_with("initcalls: ")
        || name.starts_with(bootscope_model::profile::UNIT_PHASE_PREFIX)
}

/// What a key asks the event loop to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    /// Redraw: the state changed.
    Redraw,
    Quit,
    /// Write the current profile to a JSON file.
    WriteSnapshot,
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

    /// Handles one key.
    pub fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        // Raw mode delivers Ctrl-C as a key instead of SIGINT.
        if key.modifiers.contains(KeyModifiers::CONTROL)
            && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C'))
        {
            return Action::Quit;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => Action::Quit,
            KeyCode::Esc if self.show_help => {
                self.show_help = false;
                Action::Redraw
            }
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => {
                self.show_help = !self.show_help;
                Action::Redraw
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                if !self.finished {
                    self.paused = !self.paused;
                }
                Action::Redraw
            }
            KeyCode::Char('v') => {
                self.cycle_vcpu();
                Action::Redraw
            }
            KeyCode::Char('s') => {
                self.sort = self.sort.next();
                Action::Redraw
            }
            KeyCode::Char('e') => Action::WriteSnapshot,
            KeyCode::Char('i') => {
                match &self.initcalls {
                    Some(_) => {
                        self.expand_kernel = !self.expand_kernel;
                        self.phase_scroll = 0;
                    }
                    None => {
                        self.message = Some(
                            "no initcalls: they come with the final data of `run --initcalls`"
                                .into(),
                        )
                    }
                }
                Action::Redraw
            }
            KeyCode::Char('u') => {
                match &self.units {
                    Some(_) => {
                        self.expand_userspace = !self.expand_userspace;
                        self.phase_scroll = 0;
                    }
                    None => {
                        self.message = Some(
                            "no units: they come with the final data of a run whose disk holds a systemd guest's record (docs/guest.md)"
                                .into(),
                        )
                    }
                }
                Action::Redraw
            }
            KeyCode::Char('o') => {
                self.initcall_order = match self.initcall_order {
                    InitcallOrder::Slowest => InitcallOrder::Time,
                    InitcallOrder::Time => InitcallOrder::Slowest,
                };
                self.phase_scroll = 0;
                Action::Redraw
            }
            KeyCode::PageDown | KeyCode::Char(']') => {
                self.phase_scroll = self.phase_scroll.saturating_add(PHASE_PAGE);
                Action::Redraw
            }
            KeyCode::PageUp | KeyCode::Char('[') => {
                self.phase_scroll = self.phase_scroll.saturating_sub(PHASE_PAGE);
                Action::Redraw
            }
            KeyCode::Char('x') => {
                self.show_sites = !self.show_sites;
                Action::Redraw
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.move_selection(1);
                Action::Redraw
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.move_selection(-1);
                Action::Redraw
            }
            _ => Action::None,
        }
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

    fn move_selection(&mut self, delta: i64) {
        let rows = self.exit_rows();
        if rows.is_empty() {
            return;
        }
        let cur = self.selected_index(&rows) as i64;
        let next = (cur + delta).clamp(0, rows.len() as i64 - 1) as usize;
        self.selected_reason = Some(rows[next].reason.clone());
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

    /// Index of the phase running now: the last one (initcall spans left
    /// out), while the target runs and nothing has ended it.
    pub fn current_phase(&self) -> Option<usize> {
        if self.finished || self.profile.target.ended_ns.is_some() {
            return None;
        }
        // The initcall spans a timeline carries are not boot phases.
        let last = self
            .profile
            .phases
            .iter()
            .rposition(|p| !is_initcall_phase(&p.name))?;
        let p: &PhaseSpan = &self.profile.phases[last];
        (p.end_ns >= self.profile.duration_ns).then_some(last)
    }

    /// The phase pane's rows: the boot phases and, with `kernel` expanded,
    /// its initcall levels (in the order they ran), each with its initcalls
    /// in [`App::initcall_order`].
    pub fn phase_rows(&self) -> Vec<PhaseRow> {
        let current = self.current_phase();
        let mut rows = Vec::new();
        for (index, s) in self.profile.phases.iter().enumerate() {
            if is_initcall_phase(&s.name) {
                continue;
            }
            let has_initcalls = s.name == "kernel" && self.initcalls.is_some();
            let has_units = s.name == "userspace" && self.units.is_some();
            let expandable = if has_units {
                Some(self.expand_userspace)
            } else {
                has_initcalls.then_some(self.expand_kernel)
            };
            rows.push(PhaseRow::Phase {
                index,
                name: s.name.clone(),
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                running: current == Some(index),
                initcalls: expandable,
            });
            if has_initcalls && self.expand_kernel {
                self.initcall_rows(&mut rows);
            }
            if has_units && self.expand_userspace {
                self.unit_rows(&mut rows);
            }
        }
        rows
    }

    /// The units under `userspace`: the critical chain (deepest first, the
    /// order they became active), then the other units in
    /// [`App::initcall_order`] (slowest first: the first
    /// [`SLOWEST_PER_LEVEL`] * 2, the rest summed).
    fn unit_rows(&self, rows: &mut Vec<PhaseRow>) {
        let Some(units) = &self.units else { return };
        let call = |u: &crate::units::UnitRow| PhaseRow::Call {
            name: u.name.clone(),
            start_ns: u.start_ns,
            duration_ns: u.duration_ns,
            ret: 0,
            exits: None,
        };
        let span = |list: &[crate::units::UnitRow]| {
            let start = list.iter().map(|u| u.start_ns).min().unwrap_or(0);
            let end = list
                .iter()
                .map(|u| u.start_ns + u.duration_ns)
                .max()
                .unwrap_or(0);
            (start, end)
        };
        let (start_ns, end_ns) = span(&units.chain);
        rows.push(PhaseRow::Level {
            level: format!("chain to {}", units.target),
            calls: units.chain.len(),
            start_ns,
            end_ns,
            exits: None,
        });
        rows.extend(units.chain.iter().rev().map(call));
        let (start_ns, end_ns) = span(&units.others);
        rows.push(PhaseRow::Level {
            level: "other units".into(),
            calls: units.others.len(),
            start_ns,
            end_ns,
            exits: None,
        });
        let mut others: Vec<_> = units.others.iter().collect();
        let shown = match self.initcall_order {
            InitcallOrder::Time => others.len(),
            InitcallOrder::Slowest => {
                others.sort_by_key(|u| std::cmp::Reverse(u.duration_ns));
                (2 * SLOWEST_PER_LEVEL).min(others.len())
            }
        };
        rows.extend(others[..shown].iter().map(|u| call(u)));
        let rest = &others[shown..];
        if !rest.is_empty() {
            rows.push(PhaseRow::More {
                calls: rest.len(),
                duration_ns: rest.iter().map(|u| u.duration_ns).sum(),
                exits: None,
            });
        }
    }

    fn initcall_rows(&self, rows: &mut Vec<PhaseRow>) {
        let Some(ic) = &self.initcalls else {
            return;
        };
        for g in &ic.groups {
            rows.push(PhaseRow::Level {
                level: g.level.clone(),
                calls: g.calls.len(),
                start_ns: g.start_ns,
                end_ns: g.end_ns,
                exits: g.exits,
            });
            let mut calls: Vec<_> = g.calls.iter().collect();
            let shown = match self.initcall_order {
                InitcallOrder::Time => calls.len(),
                InitcallOrder::Slowest => {
                    calls.sort_by(|a, b| {
                        b.duration_ns
                            .cmp(&a.duration_ns)
                            .then(a.start_ns.cmp(&b.start_ns))
                    });
                    SLOWEST_PER_LEVEL.min(calls.len())
                }
            };
            for c in &calls[..shown] {
                rows.push(PhaseRow::Call {
                    name: c.name.clone(),
                    start_ns: c.start_ns,
                    duration_ns: c.duration_ns,
                    ret: c.ret,
                    exits: c.exits,
                });
            }
            let rest = &calls[shown..];
            if !rest.is_empty() {
                let exits = rest.iter().map(|c| c.exits).sum::<Option<u64>>();
                rows.push(PhaseRow::More {
                    calls: rest.len(),
                    duration_ns: rest.iter().map(|c| c.duration_ns).sum(),
                    exits,
                });
            }
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
