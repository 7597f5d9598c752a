//! The boot phases pane.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::format::fmt_ms;
use super::{block, cut, inner_lines};
use crate::app::App;

/// Boot phase timeline: one bar per phase on a common time axis, the
/// running phase highlighted.
pub fn draw_phases(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let p = &app.profile;
    let total = p
        .phases
        .iter()
        .map(|s| s.end_ns)
        .max()
        .unwrap_or(0)
        .max(p.duration_ns)
        .max(1);
    let title = if p.phases.is_empty() {
        " Boot phases ".to_string()
    } else {
        format!(" Boot phases {} {} ", t.dot(), fmt_ms(total))
    };
    let b = block(t, title);
    let inner = b.inner(area);
    if p.phases.is_empty() {
        let mut lines = vec![Line::from("waiting for boot phase marks")];
        lines.push(Line::styled(
            format!(
                "{} marks so far; port 0x80/0xf4 writes, console milestones and the VMM's own marks open phases",
                p.marks.len()
            ),
            t.dim(),
        ));
        f.render_widget(
            Paragraph::new(lines)
                .block(b)
                .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let width = inner.width as usize;
    let name_w = p
        .phases
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(6, 16);
    let dur_w = 11;
    let bar_w = width.saturating_sub(2 + name_w + 1 + 1 + dur_w);
    let current = app.current_phase();
    let rows = inner.height as usize;
    // The newest phases matter most: keep the last ones when they do not fit.
    let skip = p.phases.len().saturating_sub(rows);
    let (fill, gap) = t.timeline_symbols();
    let mut lines = Vec::new();
    for (i, s) in p.phases.iter().enumerate().skip(skip) {
        let running = current == Some(i);
        let a = ((s.start_ns as f64 / total as f64) * bar_w as f64).floor() as usize;
        let e = ((s.end_ns as f64 / total as f64) * bar_w as f64).ceil() as usize;
        let a = a.min(bar_w.saturating_sub(1));
        let e = e.clamp(a + 1, bar_w.max(a + 1));
        let len = e - a;
        let after = bar_w.saturating_sub(e);
        let dur = s.end_ns.saturating_sub(s.start_ns);
        let dur_text = if running {
            format!("{}+", fmt_ms(dur))
        } else {
            fmt_ms(dur)
        };
        let name_style = if running { t.highlight() } else { Style::new() };
        lines.push(Line::from(vec![
            Span::styled(
                if running {
                    format!("{} ", t.marker())
                } else {
                    "  ".to_string()
                },
                t.warn(),
            ),
            Span::styled(format!("{:<name_w$}", cut(&s.name, name_w)), name_style),
            Span::raw(" "),
            Span::raw(gap.repeat(a)),
            Span::styled(
                fill.repeat(len),
                if running {
                    t.phase(i).add_modifier(Modifier::BOLD)
                } else {
                    t.phase(i)
                },
            ),
            Span::raw(gap.repeat(after)),
            Span::raw(" "),
            Span::styled(format!("{dur_text:>dur_w$}"), name_style),
        ]));
    }
    inner_lines(f, area, b, lines);
}
