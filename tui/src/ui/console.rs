//! The console pane: the source's text (a guest console, a command's
//! output).

use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::block;
use crate::app::App;

/// The last lines of a console (guest serial, launched command output).
pub fn draw_console(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let Some(c) = &app.console else {
        return;
    };
    let b = block(t, format!(" {} ", c.title));
    let room = b.inner(area).height as usize;
    let lines: Vec<Line> = c.lines[c.lines.len().saturating_sub(room)..]
        .iter()
        .map(|l| Line::raw(l.clone()))
        .collect();
    f.render_widget(Paragraph::new(lines).block(b), area);
}
