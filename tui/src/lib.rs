//! bootscope's live terminal UI: draws the [`Profile`] a [`ProfileSource`]
//! hands it (the profiler's collector, bootscope's own VMM, a replay of a
//! saved profile), refreshed every `refresh`, until the user quits.
//!
//! The profiler knows nothing of terminals; this crate only draws what it
//! produces. Layout: [`app`] (state, keys), [`ui`] (drawing, one function per
//! pane), [`event`] (input thread and tick), [`term`] (raw mode, alternate
//! screen and their restoration), [`theme`] (colours and symbols from the
//! environment), [`replay`] (a saved profile as a source), [`browse`] (a
//! saved profile browsed with time scrubbing; [`guest_log`] its guest
//! kernel log in the console pane). Keys and panes are
//! described in docs/tui.md.
//!
//! ```no_run
//! use bootscope_tui::{run_live, ReplaySource, TuiOptions};
//! let saved = bootscope_model::profile::Profile::read("profile.json".as_ref())?;
//! let mut source = ReplaySource::realtime(saved, 1.0);
//! let last = run_live(&mut source, TuiOptions::default())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use bootscope_model::profile::Profile;

pub mod app;
pub mod browse;
pub mod event;
pub mod guest_log;
pub mod initcalls;
pub mod replay;
mod run;
pub mod term;
pub mod theme;
pub mod ui;
pub mod units;

pub use app::App;
pub use browse::{run_browse, Browser};
pub use initcalls::Initcalls;
pub use replay::ReplaySource;
pub use theme::{ColorMode, Theme};

/// What the CLI says when `--tui` is given without a terminal.
pub const NOT_A_TERMINAL: &str =
    "--tui needs a terminal on standard output; use --output FILE to save the profile instead";

/// Where the TUI's profiles come from.
pub trait ProfileSource {
    /// The profile so far (called every refresh while live, and once more
    /// when [`finished`](ProfileSource::finished) turns true).
    fn snapshot(&mut self) -> Profile;
    /// True once the target ended (or profiling stopped): the TUI takes one
    /// last snapshot and holds it on screen until the user quits.
    fn finished(&mut self) -> bool;
    /// What is profiled, for the status line.
    fn title(&self) -> String;
    /// A text pane under the charts (a guest console, a command's output):
    /// its title and up to `max_lines` last lines. None: no such pane.
    fn console(&mut self, _max_lines: usize) -> Option<Console> {
        None
    }
    /// The kernel's initcalls, asked once the source has finished (they
    /// are known only after the guest stopped). None: none to show.
    fn initcalls(&mut self) -> Option<Initcalls> {
        None
    }
    /// A systemd guest's units, asked once the source has finished. None:
    /// none to show.
    fn units(&mut self) -> Option<units::Units> {
        None
    }
}

/// The text pane's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Console {
    pub title: String,
    pub lines: Vec<String>,
}

/// How the TUI runs.
#[derive(Clone, Debug)]
pub struct TuiOptions {
    /// Time between snapshots (and redraws).
    pub refresh: Duration,
    /// Colours and symbols.
    pub theme: Theme,
    /// Where `e` writes snapshots.
    pub snapshot_dir: PathBuf,
}

impl Default for TuiOptions {
    /// 100 ms, the theme the environment asks for, snapshots in the
    /// current directory.
    fn default() -> Self {
        Self {
            refresh: Duration::from_millis(100),
            theme: Theme::detect(),
            snapshot_dir: PathBuf::from("."),
        }
    }
}

/// Errors of the TUI.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// Standard output is not a terminal.
    #[error("{NOT_A_TERMINAL}")]
    NotATerminal,
    /// The terminal could not be set up, drawn on or read.
    #[error("{what}: {source}")]
    Terminal {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Share of one core the snapshots may take (CPU time of the thread that
/// takes them): a large profile makes each snapshot expensive (the
/// collector reads its maps entry by entry), and the TUI then takes them
/// less often than `refresh` rather than cost more.
pub const SNAPSHOT_BUDGET: f64 = 0.01;
/// The longest the budget may stretch the interval between snapshots.
const MAX_INTERVAL: Duration = Duration::from_secs(2);

/// Paces snapshots: every `refresh`, or less often when they cost more
/// than [`SNAPSHOT_BUDGET`] of a core at that rate.
#[derive(Clone, Debug)]
pub struct Pacer {
    refresh: Duration,
    /// Smoothed cost of one snapshot, in seconds.
    cost: f64,
}

impl Pacer {
    pub fn new(refresh: Duration) -> Self {
        Self { refresh, cost: 0.0 }
    }

    /// Records what one snapshot took.
    pub fn record(&mut self, took: Duration) {
        let t = took.as_secs_f64();
        self.cost = if self.cost == 0.0 {
            t
        } else {
            0.7 * self.cost + 0.3 * t
        };
    }

    /// The time from one snapshot to the next.
    pub fn interval(&self) -> Duration {
        // A cost that is not a sane number of seconds waits the longest.
        let budgeted =
            Duration::try_from_secs_f64(self.cost / SNAPSHOT_BUDGET).unwrap_or(MAX_INTERVAL);
        budgeted.min(MAX_INTERVAL).max(self.refresh)
    }

    /// The interval, when the budget stretched it beyond `refresh`.
    pub fn stretched(&self) -> Option<Duration> {
        let i = self.interval();
        (i > self.refresh).then_some(i)
    }
}

/// Lines of console kept for the console pane.
const CONSOLE_LINES: usize = 8;
/// When nothing changes any more (target ended), look at the keys and the
/// terminal size this often.
const IDLE_TICK: Duration = Duration::from_millis(250);

/// The live source as the event loop's driver: a snapshot every
/// (paced) refresh until the source finishes, then the keys alone.
struct Live<'a> {
    source: &'a mut dyn ProfileSource,
    pacer: Pacer,
    next_poll: Instant,
}

impl run::Driver for Live<'_> {
    fn update(&mut self, app: &mut App, now: Instant) -> (bool, Instant) {
        if now < self.next_poll {
            return (false, self.next_poll);
        }
        let mut changed = false;
        if !app.finished {
            let source = &mut *self.source;
            if source.finished() {
                app.finish(source.snapshot());
                app.initcalls = source.initcalls();
                app.units = source.units();
                changed = true;
            } else if !app.paused {
                // CPU time, not wall time: waiting for the collector's
                // lock costs nothing.
                let t = bootscope_model::proc::thread_cpu_time();
                let p = source.snapshot();
                self.pacer
                    .record(bootscope_model::proc::thread_cpu_time().saturating_sub(t));
                app.update(p);
                app.stretched_refresh = self.pacer.stretched();
                changed = true;
            }
            let console = source.console(CONSOLE_LINES);
            if console != app.console {
                app.console = console;
                changed = true;
            }
        }
        let every = if app.finished {
            IDLE_TICK
        } else {
            self.pacer.interval()
        };
        // Keep the cadence, but never try to catch up on missed ticks.
        self.next_poll = (self.next_poll + every).max(now);
        (changed, self.next_poll)
    }
}

/// Runs the TUI over `source` until the user quits (q, Ctrl-C, SIGTERM or
/// SIGINT); returns the last profile it showed. The terminal is restored on
/// every way out, panics included.
pub fn run_live(source: &mut dyn ProfileSource, opts: TuiOptions) -> Result<Profile, TuiError> {
    let refresh = opts.refresh.max(Duration::from_millis(10));
    let mut app = App::new(source.title(), opts.theme);
    let mut live = Live {
        source,
        pacer: Pacer::new(refresh),
        next_poll: Instant::now(),
    };
    run::run(&mut app, &mut live, &opts.snapshot_dir)?;
    Ok(app.profile)
}

/// Writes `profile` as `bootscope-snapshot-<unix time>.json` in `dir`
/// (through the workspace's one output writer: a temporary file and a
/// rename, so no reader sees half of it); returns its path. A second snapshot within the same second gets a
/// `-N` suffix.
pub fn write_snapshot(profile: &Profile, dir: &Path) -> std::io::Result<PathBuf> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let json = serde_json::to_vec_pretty(profile).map_err(std::io::Error::other)?;
    let mut path = dir.join(format!("bootscope-snapshot-{secs}.json"));
    let mut n = 1;
    // Anything already there, a link included, is left alone.
    while std::fs::symlink_metadata(&path).is_ok() {
        n += 1;
        path = dir.join(format!("bootscope-snapshot-{secs}-{n}.json"));
    }
    bootscope_model::output::write_file(&path, &json).map_err(std::io::Error::other)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_are_whole_profiles_with_distinct_names() {
        let dir = std::env::temp_dir().join(format!("bootscope-tui-snap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = Profile::new();
        p.duration_ns = 42;
        let a = write_snapshot(&p, &dir).unwrap();
        let b = write_snapshot(&p, &dir).unwrap();
        assert_ne!(a, b);
        assert!(a
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("bootscope-snapshot-"));
        assert_eq!(Profile::read(&a).unwrap(), p);
        assert_eq!(Profile::read(&b).unwrap(), p);
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "no temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pacer_keeps_snapshots_within_budget() {
        let ms = Duration::from_millis;
        let mut p = Pacer::new(ms(100));
        assert_eq!(p.interval(), ms(100));
        p.record(Duration::from_micros(300));
        assert_eq!(p.interval(), ms(100), "cheap snapshots: as asked");
        assert_eq!(p.stretched(), None);
        for _ in 0..30 {
            p.record(ms(4));
        }
        let i = p.interval();
        assert!(i > ms(390) && i <= ms(400), "{i:?}");
        assert_eq!(p.stretched(), Some(i));
        for _ in 0..30 {
            p.record(ms(500));
        }
        assert_eq!(p.interval(), MAX_INTERVAL);
    }

    #[test]
    fn not_a_terminal_says_what_to_do() {
        assert!(TuiError::NotATerminal.to_string().contains("--output FILE"));
    }
}
