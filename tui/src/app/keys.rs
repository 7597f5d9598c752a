//! What each key does to the [`App`]: the keys of the live TUI's panes
//! (docs/tui.md), the same while browsing a saved profile.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{App, InitcallOrder};

/// Rows PgDn and PgUp move the phase pane by.
pub const PHASE_PAGE: usize = 8;

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

impl App {
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
                self.toggle_initcalls();
                Action::Redraw
            }
            KeyCode::Char('u') => {
                self.toggle_units();
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

    /// `kernel` expanded into its initcalls or folded (`i`), when there
    /// are initcalls.
    fn toggle_initcalls(&mut self) {
        match &self.initcalls {
            Some(_) => {
                self.expand_kernel = !self.expand_kernel;
                self.phase_scroll = 0;
            }
            None => {
                self.message =
                    Some("no initcalls: they come with the final data of `run --initcalls`".into())
            }
        }
    }

    /// `userspace` expanded into its units or folded (`u`), when there are
    /// units.
    fn toggle_units(&mut self) {
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
}
