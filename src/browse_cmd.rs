//! `bootscope tui FILE.json`: browse a saved profile or boot timeline in
//! the terminal UI, with time scrubbing (`tui/src/browse.rs`).

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Args;

use bootscope_model::document::{read_document, DocKind, DocumentError};
use bootscope_profiler::export::{self, InputKind, TIMELINE_SCHEMA_NAME};
use bootscope_tui::units::Units;
use bootscope_tui::{Browser, Initcalls, TuiOptions};

use crate::common::{usage, Failure};

#[derive(Args)]
#[command(after_help = "Examples:
  bootscope tui profile.json
  bootscope tui boot.json                          # a run's timeline (--initcalls: its initcalls)
  bootscope tui run.profile.json --timeline boot.json

Keys: space play/pause, left/right step through the samples, n/N next/this
phase, 1-9 jump to a phase, Home/End, +/- speed, x exit sites, i initcalls,
? help, q quit (docs/tui.md).")]
pub struct BrowseArgs {
    /// A profile (`profile --output`, `run --output`) or a boot timeline
    /// (`run --timeline`).
    #[arg(value_name = "FILE.json")]
    input: PathBuf,
    /// The boot timeline of the same run (`run --initcalls --timeline`):
    /// its initcalls are shown under `kernel` (`i`).
    #[arg(long, value_name = "TIMELINE.json")]
    timeline: Option<PathBuf>,
    /// How fast `space` plays the boot: 1 is its own pace, 10 ten times
    /// as fast.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    speed: f64,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 256.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a speed: give a number above 0 and at most 256 (1 plays at the boot's own pace)"
        )),
    }
}

/// The initcalls of a boot timeline, read from `path` by model's one
/// document reader ([`read_document`]: a bounded stream, the kind decided
/// on its head).
fn timeline_initcalls(path: &Path) -> Result<Option<Initcalls>, Failure> {
    Ok(initcalls_of(read_timeline(path)?.initcalls.as_ref()))
}

/// Initcalls as the TUI shows them.
fn initcalls_of(ic: Option<&bootscope_model::initcalls::InitcallsDoc>) -> Option<Initcalls> {
    Initcalls::from_json(&serde_json::to_value(ic?).ok()?)
}

/// The boot timeline at `path`.
fn read_timeline(path: &Path) -> Result<bootscope_model::timeline::Timeline, Failure> {
    let timeline = match read_document(path, &[DocKind::Timeline]) {
        Ok(doc) => doc.into_timeline().ok_or_else(|| not_a_timeline(path))?,
        Err(DocumentError::Schema { .. }) => return Err(not_a_timeline(path)),
        Err(DocumentError::Read(e)) => {
            return Err(usage(anyhow!(
                "{e}; give a boot timeline (bootscope run --timeline FILE)"
            )))
        }
        Err(e) => {
            return Err(usage(anyhow!(
                "{}: {e}; --timeline takes the file of `bootscope run --timeline`",
                path.display()
            )))
        }
    };
    Ok(timeline)
}

fn not_a_timeline(path: &Path) -> Failure {
    usage(anyhow!(
        "{} is not a boot timeline (its \"schema\" is not \"{TIMELINE_SCHEMA_NAME}\"); --timeline takes the file of `bootscope run --timeline`",
        path.display()
    ))
}

pub fn run(args: BrowseArgs) -> Result<i32, Failure> {
    let bad_input = |e: &dyn std::fmt::Display| usage(anyhow!("{e}"));
    let (profile, kind) = export::read_input(&args.input).map_err(|e| bad_input(&e))?;
    // A profile of another VMM carries the initcalls read from its guest.
    let (mut initcalls, units) = match kind {
        InputKind::Timeline => {
            let t = read_timeline(&args.input)?;
            (
                initcalls_of(t.initcalls.as_ref()),
                t.units.as_ref().and_then(Units::from_doc),
            )
        }
        InputKind::Profile => (
            initcalls_of(
                profile
                    .guest_read
                    .as_ref()
                    .and_then(|g| g.initcalls.as_ref()),
            ),
            None,
        ),
    };
    if let Some(t) = &args.timeline {
        initcalls = timeline_initcalls(t)?;
        if initcalls.is_none() {
            return Err(usage(anyhow!(
                "{} has no initcalls: record them with `bootscope run --initcalls --timeline FILE`, or leave --timeline out",
                t.display()
            )));
        }
    }
    if !bootscope_tui::term::stdout_is_terminal() {
        return Err(usage(anyhow!(
            "bootscope tui needs a terminal on standard output; `bootscope export` prints a profile as text"
        )));
    }
    // The file's name: a long path would push the position off the
    // status line.
    let name = args.input.file_name().map_or_else(
        || args.input.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let title = format!(
        "{name} ({} {})",
        if profile.target.name.is_empty() {
            "target"
        } else {
            &profile.target.name
        },
        profile.target.pid
    );
    let mut browser = Browser::new(profile, initcalls, args.speed).with_units(units);
    bootscope_tui::run_browse(&mut browser, title, TuiOptions::default())
        .map_err(|e| anyhow!("the TUI failed: {e}"))?;
    Ok(0)
}
