//! Drawing: a pure function of the [`App`] and the frame's area. This file
//! lays the panes out; each pane is drawn by its own module (one function,
//! so each can be rendered and snapshot-tested alone), and
//! [`format`](mod@format) holds the number formats they share.
//!
//! ```text
//! +- Boot phases ----------------++- Exit reasons -------------------------+
//! +- Exit latency (x: sites) ----++- Page faults --------------------------+
//! +- Preallocation threads -----------------------++- NUMA locality -------+
//! +- Console (when the source has one) ------------------------------------+
//!  status: state | target | sources | lost events | elapsed
//!  keys, or the last message
//! ```

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use crate::app::App;
use crate::theme::Theme;

mod console;
mod exits;
mod fault_tail;
mod faults;
pub mod format;
mod help;
mod latency;
mod numa;
mod phases;
mod sites;
mod status;
mod threads;

pub use console::draw_console;
pub use exits::draw_exits;
pub use faults::draw_faults;
pub use format::{fmt_bytes, fmt_count, fmt_cpu_list, fmt_ms, fmt_ns_short, fmt_rate};
pub use help::draw_help;
pub use latency::draw_latency;
pub use numa::draw_numa;
pub use phases::draw_phases;
pub use sites::draw_sites;
pub use status::draw_status;
pub use threads::draw_threads;

/// Below this size only a message is drawn.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 16;

/// Draws the whole screen.
pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "terminal too small ({}x{}): bootscope needs at least {MIN_WIDTH}x{MIN_HEIGHT}; q quits",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(msg), area);
        return;
    }
    let console_rows = match (&app.console, area.height) {
        (None, _) => 0,
        (Some(_), h) if h >= 34 => 7,
        (Some(_), h) if h >= 24 => 5,
        (Some(_), _) => 0,
    };
    let [body, console, status] = Layout::vertical([
        Constraint::Min(0),
        Constraint::Length(console_rows),
        Constraint::Length(2),
    ])
    .areas(area);
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Percentage(34),
        Constraint::Percentage(28),
        Constraint::Percentage(38),
    ])
    .areas(body);
    let [phases, exits] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(top);
    let [latency, faults] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(middle);
    let [threads, numa] =
        Layout::horizontal([Constraint::Percentage(68), Constraint::Percentage(32)]).areas(bottom);
    draw_phases(f, phases, app);
    draw_exits(f, exits, app);
    if app.show_sites {
        draw_sites(f, latency, app);
    } else {
        draw_latency(f, latency, app);
    }
    draw_faults(f, faults, app);
    draw_threads(f, threads, app);
    draw_numa(f, numa, app);
    if console_rows > 0 {
        draw_console(f, console, app);
    }
    draw_status(f, status, app);
    if app.show_help {
        draw_help(f, area, app);
    }
    no_control_characters(f.buffer_mut());
}

/// The last guard of the text rule: names reach the panes through [`cut`]
/// (control characters shown escaped); a cell that would still send one
/// to the terminal shows U+FFFD instead.
fn no_control_characters(buf: &mut Buffer) {
    for cell in &mut buf.content {
        if cell.symbol().chars().any(char::is_control) {
            cell.set_symbol("\u{fffd}");
        }
    }
}

fn block<'a>(theme: &Theme, title: impl Into<Line<'a>>) -> Block<'a> {
    Block::bordered()
        .border_set(theme.border_set())
        .title(title.into().style(theme.title()))
}

/// `s` with its control characters shown escaped (the text rule:
/// thread, phase, unit and function names come from the target or the
/// guest), cut to `n` characters, marking the cut.
fn cut(s: &str, n: usize) -> String {
    let s = bootscope_model::text::printable(s);
    if s.chars().count() <= n {
        return s.into_owned();
    }
    if n == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(n - 1).collect();
    out.push('~');
    out
}

/// A source name without its `tracepoint:` prefix.
fn short_source(s: &str) -> &str {
    s.strip_prefix("tracepoint:").unwrap_or(s)
}

fn inner_lines(f: &mut Frame, area: Rect, block: Block, lines: Vec<Line>) {
    f.render_widget(Paragraph::new(lines).block(block), area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_marks_the_cut() {
        assert_eq!(cut("touch_pages_long_name", 8), "touch_p~");
        assert_eq!(cut("abc", 8), "abc");
        assert_eq!(cut("\u{1b}]0;PWN\u{7}", 40), "\\e]0;PWN\\u{07}");
    }
}
