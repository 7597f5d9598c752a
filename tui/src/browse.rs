//! Browsing a saved profile (`bootscope tui FILE.json`): the live TUI's
//! panes over the recorded samples, at a position on the profile's clock
//! that the user moves. The position steps from one stop to the next (the
//! samples, the phases' starts, the start and the end), jumps to a phase,
//! or plays at a chosen speed; every pane shows the profile as it was at
//! that moment ([`profile_at`], exit sites by the phase they were made in,
//! initcalls started by then; the guest kernel's log read from its
//! memory, logged by then, in the console pane).
//!
//! [`Browser`] is the pure state (keys, position, what the panes get),
//! unit-tested without a terminal; [`run_browse`] is its event loop.

use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use bootscope_model::profile::Profile;
use bootscope_model::sites::ExitSites;

use crate::app::{is_initcall_phase, App, ReplayStatus};
use crate::initcalls::{InitcallGroup, Initcalls};
use crate::replay::profile_at;
use crate::run::{self, Driver};
use crate::{TuiError, TuiOptions};

/// Slowest and fastest play speeds (`-`, `+` halve and double).
const MIN_SPEED: f64 = 1.0 / 64.0;
const MAX_SPEED: f64 = 256.0;

/// What a key did to the replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrowseKey {
    /// The position, play state or speed changed: the panes need the
    /// profile at the new position.
    Moved,
    /// Not a replay key: the panes' own handling applies.
    Unhandled,
}

/// A saved profile and the position it is looked at.
#[derive(Clone, Debug)]
pub struct Browser {
    profile: Profile,
    initcalls: Option<Initcalls>,
    /// A systemd guest's units (`u`): a profile's own, or a timeline's.
    units: Option<crate::units::Units>,
    /// Positions the arrows step through, in time order.
    stops: Vec<u64>,
    /// Starts of the boot phases (initcall spans left out), in time order.
    phase_starts: Vec<(String, u64)>,
    t_ns: u64,
    playing: bool,
    speed: f64,
}

impl Browser {
    /// Looks at `profile` (and the boot's initcalls, when known) from its
    /// end, paused.
    pub fn new(profile: Profile, initcalls: Option<Initcalls>, speed: f64) -> Self {
        let end = profile.duration_ns;
        let mut phase_starts: Vec<(String, u64)> = profile
            .phases
            .iter()
            .filter(|p| !is_initcall_phase(&p.name))
            .map(|p| (p.name.clone(), p.start_ns.min(end)))
            .collect();
        phase_starts.sort_by_key(|p| p.1);
        let mut stops: Vec<u64> = profile
            .samples
            .iter()
            .map(|s| s.t_ns.min(end))
            .chain(phase_starts.iter().map(|p| p.1))
            .chain([0, end])
            .collect();
        stops.sort_unstable();
        stops.dedup();
        let speed = if speed.is_finite() && speed > 0.0 {
            speed.clamp(MIN_SPEED, MAX_SPEED)
        } else {
            1.0
        };
        let units = profile
            .units
            .as_ref()
            .and_then(crate::units::Units::from_doc);
        Self {
            profile,
            initcalls,
            units,
            stops,
            phase_starts,
            t_ns: end,
            playing: false,
            speed,
        }
    }

    /// Shows `units` (a boot timeline's) where the profile has none.
    pub fn with_units(mut self, units: Option<crate::units::Units>) -> Self {
        if self.units.is_none() {
            self.units = units;
        }
        self
    }

    pub fn t_ns(&self) -> u64 {
        self.t_ns
    }

    pub fn end_ns(&self) -> u64 {
        self.profile.duration_ns
    }

    pub fn playing(&self) -> bool {
        self.playing
    }

    /// Moves to `t_ns` (clamped to the profile).
    pub fn seek(&mut self, t_ns: u64) {
        self.t_ns = t_ns.min(self.end_ns());
    }

    /// The next stop after the position (the end when none is).
    fn next_stop(&self) -> u64 {
        let i = self.stops.partition_point(|&s| s <= self.t_ns);
        self.stops.get(i).copied().unwrap_or(self.end_ns())
    }

    /// The last stop before the position (0 when none is).
    fn previous_stop(&self) -> u64 {
        let i = self.stops.partition_point(|&s| s < self.t_ns);
        i.checked_sub(1).map_or(0, |i| self.stops[i])
    }

    /// Index of the phase the position is in (the last one started by it).
    fn phase_index(&self) -> Option<usize> {
        let n = self.phase_starts.partition_point(|p| p.1 <= self.t_ns);
        n.checked_sub(1)
    }

    fn next_phase(&self) -> u64 {
        self.phase_starts
            .iter()
            .map(|p| p.1)
            .find(|&s| s > self.t_ns)
            .unwrap_or(self.end_ns())
    }

    /// The start of the phase the position is in, or of the one before
    /// when the position is at a phase's start.
    fn previous_phase(&self) -> u64 {
        self.phase_starts
            .iter()
            .rev()
            .map(|p| p.1)
            .find(|&s| s < self.t_ns)
            .unwrap_or(0)
    }

    /// Handles a replay key: play and pause, stepping, jumps, speed.
    pub fn on_key(&mut self, key: KeyEvent) -> BrowseKey {
        if key.kind == KeyEventKind::Release || key.modifiers.contains(KeyModifiers::CONTROL) {
            return BrowseKey::Unhandled;
        }
        let end = self.end_ns();
        match key.code {
            KeyCode::Char(' ') | KeyCode::Char('p') => {
                // Play from the start once at the end.
                if !self.playing && self.t_ns >= end {
                    self.t_ns = 0;
                }
                self.playing = !self.playing && end > 0;
            }
            KeyCode::Right | KeyCode::Char('.') => self.step(self.next_stop()),
            KeyCode::Left | KeyCode::Char(',') => self.step(self.previous_stop()),
            KeyCode::Home | KeyCode::Char('g') => self.step(0),
            KeyCode::End | KeyCode::Char('G') => self.step(end),
            KeyCode::Char('n') => self.step(self.next_phase()),
            KeyCode::Char('N') => self.step(self.previous_phase()),
            KeyCode::Char(c @ '1'..='9') => {
                let i = c as usize - '1' as usize;
                match self.phase_starts.get(i) {
                    Some(p) => self.step(p.1),
                    None => return BrowseKey::Unhandled,
                }
            }
            KeyCode::Char('+') | KeyCode::Char('=') => {
                self.speed = (self.speed * 2.0).min(MAX_SPEED)
            }
            KeyCode::Char('-') => self.speed = (self.speed / 2.0).max(MIN_SPEED),
            _ => return BrowseKey::Unhandled,
        }
        BrowseKey::Moved
    }

    /// A jump: it pauses playing.
    fn step(&mut self, t_ns: u64) {
        self.playing = false;
        self.seek(t_ns);
    }

    /// Advances a playing replay by `wall` times the speed; stops at the
    /// end. True if the position moved.
    pub fn advance(&mut self, wall: Duration) -> bool {
        if !self.playing {
            return false;
        }
        let by = (wall.as_nanos() as f64 * self.speed).min(u64::MAX as f64) as u64;
        let before = self.t_ns;
        self.seek(self.t_ns.saturating_add(by.max(1)));
        if self.t_ns >= self.end_ns() {
            self.playing = false;
        }
        self.t_ns != before
    }

    /// Where the replay stands.
    pub fn status(&self) -> ReplayStatus {
        let samples = &self.profile.samples;
        ReplayStatus {
            t_ns: self.t_ns,
            end_ns: self.end_ns(),
            playing: self.playing,
            speed: self.speed,
            samples_seen: samples.iter().filter(|s| s.t_ns <= self.t_ns).count(),
            samples: samples.len(),
            phase: self.phase_index().map(|i| self.phase_starts[i].0.clone()),
        }
    }

    /// The profile as it was at the position.
    pub fn profile_now(&self) -> Profile {
        self.profile_at(self.t_ns)
    }

    /// Whether the last sample by `t_ns` is too old to tell the exits.
    fn stale(&self, t_ns: u64) -> bool {
        let last = self.profile.samples.iter().rfind(|s| s.t_ns <= t_ns);
        last.is_none_or(|s| t_ns - s.t_ns > STALE_SAMPLE_NS)
    }

    fn profile_at(&self, t_ns: u64) -> Profile {
        let mut p = profile_at(&self.profile, t_ns);
        if t_ns < self.end_ns() {
            if let Some(s) = &self.profile.exits.sites {
                p.exits.sites = Some(sites_at(s, &self.profile, t_ns));
            }
            // Samples far apart (a loaded machine) say little of the
            // exits in between: the exits per phase say more.
            if self.stale(t_ns) {
                exits_by_phase_at(&mut p, &self.profile, t_ns);
            }
        }
        p
    }

    /// The profile the rates are taken against: the one at the sample
    /// before the last one recorded by the position, its time set so that
    /// the interval is the samples' own; where the samples are too old,
    /// the one a second before the position.
    fn previous_profile(&self) -> Option<Profile> {
        if self.stale(self.t_ns) {
            // Exits from the phases: against the profile a second before.
            let before = self.t_ns.checked_sub(STALE_SAMPLE_NS)?;
            return Some(self.profile_at(before));
        }
        let samples = &self.profile.samples;
        let k = samples.partition_point(|s| s.t_ns <= self.t_ns);
        let (before, last) = (samples.get(k.checked_sub(2)?)?, samples.get(k - 1)?);
        let mut p = profile_at(&self.profile, before.t_ns);
        p.duration_ns = self
            .t_ns
            .saturating_sub(last.t_ns.saturating_sub(before.t_ns));
        Some(p)
    }

    /// The boot's initcalls started by the position, cut at it.
    pub fn initcalls_now(&self) -> Option<Initcalls> {
        let ic = self.initcalls.as_ref()?;
        let t = self.t_ns;
        let groups: Vec<InitcallGroup> = ic
            .groups
            .iter()
            .filter(|g| g.start_ns <= t)
            .map(|g| {
                let mut g = g.clone();
                g.calls.retain(|c| c.start_ns <= t);
                for c in &mut g.calls {
                    let cut = c.duration_ns.min(t - c.start_ns);
                    c.exits = c.exits.map(|e| share(e, cut, c.duration_ns));
                    c.duration_ns = cut;
                }
                let end = g.end_ns.min(t);
                g.exits = g
                    .exits
                    .map(|e| share(e, end - g.start_ns, g.end_ns - g.start_ns));
                g.end_ns = end;
                g
            })
            .filter(|g| !g.calls.is_empty())
            .collect();
        Some(Initcalls {
            groups,
            ..ic.clone()
        })
    }

    /// Hands the panes the profile at the position.
    pub fn show(&self, app: &mut App) {
        app.profile = self.profile_now();
        app.previous = self.previous_profile();
        app.finished = self.t_ns >= self.end_ns();
        app.paused = false;
        app.initcalls = self.initcalls_now();
        app.units.clone_from(&self.units);
        app.console = crate::guest_log::console_at(&self.profile, self.t_ns);
        app.replay = Some(self.status());
    }
}

/// A sample older than this leaves the exit counts to the exits per phase.
const STALE_SAMPLE_NS: u64 = 1_000_000_000;

/// How much of phase `name` had passed at `t_ns`: 1 once it ended, 0 before
/// it began (a phase the profile has no span for: the profile's share).
fn phase_share(p: &Profile, name: &str, t_ns: u64) -> f64 {
    let Some(span) = p.phases.iter().find(|s| s.name == name) else {
        return t_ns as f64 / p.duration_ns.max(1) as f64;
    };
    if t_ns >= span.end_ns {
        1.0
    } else if t_ns < span.start_ns {
        0.0
    } else {
        (t_ns - span.start_ns) as f64 / span.end_ns.saturating_sub(span.start_ns).max(1) as f64
    }
}

/// Exit counts at `t_ns` from the saved exits per phase (those of ended
/// phases in full, the running one's in proportion): per reason with its
/// latency, the total, per vCPU and KVM's count in the same proportion.
fn exits_by_phase_at(out: &mut Profile, saved: &Profile, t_ns: u64) {
    if saved.exits.by_phase.is_empty() {
        return;
    }
    let scale = |n: u64, f: f64| (n as f64 * f).round() as u64;
    let mut by_reason: std::collections::BTreeMap<&str, f64> = Default::default();
    for ph in &saved.exits.by_phase {
        let f = phase_share(saved, &ph.phase, t_ns);
        for (r, n) in &ph.by_reason {
            *by_reason.entry(r).or_default() += *n as f64 * f;
        }
    }
    out.exits.by_reason = saved.exits.by_reason.clone();
    for r in &mut out.exits.by_reason {
        let now = by_reason.get(r.reason.as_str()).copied().unwrap_or(0.0);
        let f = now / r.count.max(1) as f64;
        r.count = now.round() as u64;
        r.latency_total_ns = r.latency_total_ns.map(|v| scale(v, f));
        for b in &mut r.latency_hist {
            b.count = scale(b.count, f);
        }
    }
    let total: f64 = by_reason.values().sum();
    let f = total / saved.exits.total.max(1) as f64;
    out.exits.total = total.round() as u64;
    out.exits.by_vcpu = saved.exits.by_vcpu.clone();
    for v in &mut out.exits.by_vcpu {
        for n in v.by_reason.values_mut() {
            *n = scale(*n, f);
        }
    }
    out.exits.kvm_stats_exits = saved.exits.kvm_stats_exits.map(|n| scale(n, f));
}

/// `n` times `part / whole` (all of `n` when `whole` is 0).
fn share(n: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return n;
    }
    (n as f64 * part as f64 / whole as f64).round() as u64
}

/// Exit sites as they stood at `t_ns`: those of phases that had ended in
/// full, those of the phase running then in proportion to how much of it
/// had passed, none of later phases (sites are recorded by phase, not by
/// time).
fn sites_at(sites: &ExitSites, p: &Profile, t_ns: u64) -> ExitSites {
    let share = |phase: &str| phase_share(p, phase, t_ns);
    let scale = |n: u64, f: f64| (n as f64 * f).round() as u64;
    let mut out = sites.clone();
    out.sites.retain_mut(|s| {
        let f = share(&s.phase);
        s.count = scale(s.count, f);
        s.timed = scale(s.timed, f);
        s.latency_total_ns = scale(s.latency_total_ns, f);
        s.count > 0
    });
    out.npf_ranges.retain_mut(|r| {
        let f = share(&r.phase);
        r.count = scale(r.count, f);
        r.timed = scale(r.timed, f);
        r.latency_total_ns = scale(r.latency_total_ns, f);
        r.count > 0
    });
    out
}

/// The browser as the event loop's driver: the position moves while it
/// plays, and the browsing keys move it.
struct Browsing<'a> {
    browser: &'a mut Browser,
    refresh: Duration,
    last_tick: Instant,
}

impl Driver for Browsing<'_> {
    fn update(&mut self, app: &mut App, now: Instant) -> (bool, Instant) {
        let browser = &mut *self.browser;
        let mut changed = false;
        if browser.advance(now - self.last_tick) {
            browser.show(app);
            changed = true;
        } else if app
            .replay
            .as_ref()
            .is_some_and(|r| r.playing != browser.playing())
        {
            // Reached the end.
            app.replay = Some(browser.status());
            changed = true;
        }
        self.last_tick = now;
        (changed, Instant::now() + self.refresh)
    }

    fn on_key(&mut self, app: &mut App, key: KeyEvent) -> bool {
        if self.browser.on_key(key) != BrowseKey::Moved {
            return false;
        }
        app.message = None;
        self.browser.show(app);
        true
    }
}

/// Browses `browser` in the terminal until the user quits (q, Ctrl-C,
/// SIGTERM or SIGINT). The terminal is restored on every way out.
pub fn run_browse(browser: &mut Browser, title: String, opts: TuiOptions) -> Result<(), TuiError> {
    let mut app = App::new(title, opts.theme);
    browser.show(&mut app);
    let mut browsing = Browsing {
        browser,
        refresh: opts.refresh.max(Duration::from_millis(10)),
        last_tick: Instant::now(),
    };
    run::run(&mut app, &mut browsing, &opts.snapshot_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::initcalls::InitcallRow;
    use crate::theme::Theme;
    use bootscope_model::profile::{PhaseSpan, Sample};
    use bootscope_model::sites::ExitSite;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn span(name: &str, start_ns: u64, end_ns: u64) -> PhaseSpan {
        PhaseSpan {
            name: name.into(),
            start_ns,
            end_ns,
        }
    }

    /// Phases a 0-400, b 400-1000; samples at 200 and 600 (10 and 60
    /// exits of 100); io sites in a and b.
    fn saved() -> Profile {
        let mut p = Profile::new();
        p.duration_ns = 1_000;
        p.exits.total = 100;
        p.phases = vec![
            span("a", 0, 400),
            span("initcall: x", 100, 150),
            span("b", 400, 1_000),
        ];
        p.samples = [(200, 10), (600, 60)]
            .into_iter()
            .map(|(t_ns, exits_total)| Sample {
                t_ns,
                exits_total,
                ..Default::default()
            })
            .collect();
        let site = |phase: &str, count| ExitSite {
            reason: "io".into(),
            phase: phase.into(),
            rip: Some(0xffff_ffff_8100_0000),
            count,
            ..Default::default()
        };
        p.exits.sites = Some(ExitSites {
            sites: vec![site("a", 40), site("b", 60)],
            ..Default::default()
        });
        p
    }

    fn initcalls() -> Initcalls {
        let call = |name: &str, start_ns, duration_ns| InitcallRow {
            name: name.into(),
            start_ns,
            duration_ns,
            ret: 0,
            exits: None,
        };
        Initcalls {
            groups: vec![InitcallGroup {
                level: "core".into(),
                start_ns: 100,
                end_ns: 300,
                exits: None,
                calls: vec![call("c1", 100, 50), call("c2", 200, 100)],
            }],
            exits_label: "exits",
            clock_error_ns: None,
        }
    }

    #[test]
    fn steps_through_samples_and_phase_starts() {
        let mut b = Browser::new(saved(), None, 1.0);
        // Opens at the end: the whole profile.
        assert_eq!(b.t_ns(), 1_000);
        assert_eq!(b.profile_now(), saved());
        b.on_key(key(KeyCode::Home));
        assert_eq!(b.t_ns(), 0);
        // Stops: 0, 200 (sample), 400 (phase b), 600 (sample), 1000 (end);
        // the initcall span at 100 is not a phase.
        let mut seen = Vec::new();
        for _ in 0..5 {
            b.on_key(key(KeyCode::Right));
            seen.push(b.t_ns());
        }
        assert_eq!(seen, [200, 400, 600, 1_000, 1_000]);
        b.on_key(key(KeyCode::Left));
        assert_eq!(b.t_ns(), 600);
        b.on_key(key(KeyCode::Char('N')));
        assert_eq!(b.t_ns(), 400, "back to this phase's start");
        b.on_key(key(KeyCode::Char('N')));
        assert_eq!(b.t_ns(), 0, "then the one before");
        b.on_key(key(KeyCode::Char('n')));
        assert_eq!(b.t_ns(), 400);
        b.on_key(key(KeyCode::Char('1')));
        assert_eq!(b.t_ns(), 0);
        b.on_key(key(KeyCode::Char('2')));
        assert_eq!(b.t_ns(), 400);
        assert_eq!(b.status().phase.as_deref(), Some("b"));
        // No third phase: the key is not the replay's.
        assert_eq!(b.on_key(key(KeyCode::Char('3'))), BrowseKey::Unhandled);
        assert_eq!(b.on_key(key(KeyCode::Char('x'))), BrowseKey::Unhandled);
        b.on_key(key(KeyCode::End));
        assert_eq!(b.t_ns(), 1_000);
    }

    #[test]
    fn plays_at_its_speed_and_stops_at_the_end() {
        let mut b = Browser::new(saved(), None, 1.0);
        // Play at the end starts over.
        b.on_key(key(KeyCode::Char(' ')));
        assert!(b.playing());
        assert_eq!(b.t_ns(), 0);
        assert!(b.advance(Duration::from_nanos(300)));
        assert_eq!(b.t_ns(), 300);
        b.on_key(key(KeyCode::Char('+')));
        assert!(b.advance(Duration::from_nanos(100)));
        assert_eq!(b.t_ns(), 500);
        assert_eq!(b.status().speed, 2.0);
        // Pause holds the position.
        b.on_key(key(KeyCode::Char('p')));
        assert!(!b.advance(Duration::from_nanos(100)));
        assert_eq!(b.t_ns(), 500);
        b.on_key(key(KeyCode::Char(' ')));
        assert!(b.advance(Duration::from_secs(1)));
        assert_eq!(b.t_ns(), 1_000);
        assert!(!b.playing(), "stops at the end");
        // A step pauses.
        b.on_key(key(KeyCode::Char(' ')));
        b.on_key(key(KeyCode::Right));
        assert!(!b.playing());
        // Speeds stay within bounds.
        for _ in 0..40 {
            b.on_key(key(KeyCode::Char('-')));
        }
        assert_eq!(b.status().speed, MIN_SPEED);
        assert_eq!(Browser::new(saved(), None, f64::NAN).status().speed, 1.0);
    }

    #[test]
    fn a_timelines_units_are_shown_where_the_profile_has_none() {
        let row = |name: &str| crate::units::UnitRow {
            name: name.into(),
            start_ns: 10,
            duration_ns: 5,
            failed: false,
        };
        let units = crate::units::Units {
            target: "workload.service".into(),
            chain: vec![row("workload.service")],
            others: vec![row("cron.service")],
        };
        let b = Browser::new(saved(), None, 1.0).with_units(Some(units.clone()));
        let mut app = App::new("t", Theme::plain());
        b.show(&mut app);
        assert_eq!(app.units, Some(units));
        let mut app = App::new("t", Theme::plain());
        Browser::new(saved(), None, 1.0).show(&mut app);
        assert_eq!(app.units, None);
    }

    #[test]
    fn panes_get_the_profile_at_the_position() {
        let mut b = Browser::new(saved(), Some(initcalls()), 1.0);
        let mut app = App::new("t", Theme::plain());
        b.seek(200);
        b.show(&mut app);
        assert!(!app.finished);
        assert_eq!(app.profile.exits.total, 10);
        assert_eq!(app.current_phase(), Some(0), "a is running");
        // Sites: half of phase a has passed, b has not begun.
        let sites = app.profile.exits.sites.as_ref().unwrap();
        assert_eq!(sites.sites.len(), 1);
        assert_eq!(sites.sites[0].count, 20);
        // Initcalls: c1 ended, c2 cut at the position.
        let ic = app.initcalls.as_ref().unwrap();
        let calls: Vec<(&str, u64)> = ic.groups[0]
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.duration_ns))
            .collect();
        assert_eq!(calls, [("c1", 50), ("c2", 0)]);
        assert_eq!(app.replay.as_ref().unwrap().samples_seen, 1);
        // At 600: rates between the samples at 200 and 600.
        b.seek(600);
        b.show(&mut app);
        assert_eq!(app.profile.exits.total, 60);
        let prev = app.previous.as_ref().unwrap();
        assert_eq!(prev.exits.total, 10);
        assert_eq!(app.profile.duration_ns - prev.duration_ns, 400);
        assert_eq!(app.exit_total().1, 50.0 / 400e-9);
        assert_eq!(app.profile.exits.sites.as_ref().unwrap().sites[1].count, 20);
        // At the end: the saved profile, finished.
        b.seek(1_000);
        b.show(&mut app);
        assert!(app.finished);
        assert_eq!(app.profile, saved());
        assert_eq!(app.initcalls, Some(initcalls()));
        let r = app.replay.as_ref().unwrap();
        assert_eq!((r.samples_seen, r.samples), (2, 2));
    }
}
