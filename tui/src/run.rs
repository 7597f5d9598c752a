//! The one event loop of the TUI, live or browsing: draw when something
//! changed, wait for a key, a resize or the driver's next update, and
//! hand keys to the driver first, then to the [`App`]. The terminal is
//! restored on every way out (the guard's drop), panics included.

use std::path::Path;
use std::time::Instant;

use crossterm::event::KeyEvent;

use crate::app::{Action, App};
use crate::{event, term, ui, write_snapshot, TuiError};

/// What the loop drives the [`App`] with: a live source or a browser.
pub(crate) trait Driver {
    /// Brings `app` up to date at `now`: whether it changed, and when to
    /// come back at the latest.
    fn update(&mut self, app: &mut App, now: Instant) -> (bool, Instant);

    /// A key the driver takes before the app sees it (true: taken, the
    /// app changed).
    fn on_key(&mut self, _app: &mut App, _key: KeyEvent) -> bool {
        false
    }
}

/// Runs `driver` over `app` in the terminal until the user quits (q,
/// Ctrl-C, SIGTERM or SIGINT) or the input closes; snapshots (`s`) go to
/// `snapshot_dir`.
pub(crate) fn run(
    app: &mut App,
    driver: &mut dyn Driver,
    snapshot_dir: &Path,
) -> Result<(), TuiError> {
    let mut guard = term::enter()?;
    let events = event::Events::start().map_err(|source| TuiError::Terminal {
        what: "cannot start reading the terminal",
        source,
    })?;
    let mut dirty = true;
    while !term::quit_requested() {
        let (changed, deadline) = driver.update(app, Instant::now());
        if changed || dirty {
            guard
                .terminal
                .draw(|f| ui::draw(f, app))
                .map_err(|source| TuiError::Terminal {
                    what: "cannot draw on the terminal",
                    source,
                })?;
            dirty = false;
        }
        match events.next(deadline) {
            event::Event::Key(k) => {
                dirty = true;
                if driver.on_key(app, k) {
                    continue;
                }
                match app.on_key(k) {
                    Action::Quit => break,
                    Action::WriteSnapshot => {
                        app.message = Some(match write_snapshot(&app.profile, snapshot_dir) {
                            Ok(p) => format!("snapshot written to {}", p.display()),
                            Err(e) => format!("snapshot not written: {e}"),
                        });
                    }
                    Action::Redraw | Action::None => {}
                }
            }
            event::Event::Resize => {
                guard
                    .terminal
                    .autoresize()
                    .map_err(|source| TuiError::Terminal {
                        what: "cannot follow the terminal's new size",
                        source,
                    })?;
                dirty = true;
            }
            event::Event::Tick => {}
            event::Event::InputClosed(_) => break,
        }
    }
    drop(events);
    drop(guard);
    Ok(())
}
