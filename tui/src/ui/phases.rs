//! The boot phases pane, and under `kernel` its initcalls (`i`).

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::format::{fmt_count, fmt_ms};
use super::{block, cut, inner_lines};
use crate::app::{App, PhaseRow};
use crate::theme::Theme;

/// Boot phase timeline: one bar per phase on a common time axis, the
/// running phase highlighted. With `kernel` expanded the axis is the kernel
/// phase's span, and under it come its initcall levels, each with its
/// initcalls (slowest first or in time order), their durations and exits.
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
    let rows = app.phase_rows();
    if rows.is_empty() {
        let b = block(t, " Boot phases ");
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
    let kernel = rows.iter().find_map(|r| match r {
        PhaseRow::Phase {
            name,
            start_ns,
            end_ns,
            initcalls: Some(true),
            ..
        } if name == "kernel" => Some((*start_ns, *end_ns)),
        _ => None,
    });
    let visible = area.height.saturating_sub(2) as usize;
    let (skip, title) = match (&app.initcalls, kernel) {
        (Some(ic), Some(_)) => {
            // Scrolled by the user, never past the last page.
            let skip = app.phase_scroll.min(rows.len().saturating_sub(visible));
            let shown = if rows.len() > visible {
                format!(
                    " {} {}-{}/{}",
                    t.dot(),
                    skip + 1,
                    (skip + visible).min(rows.len()),
                    rows.len()
                )
            } else {
                String::new()
            };
            let title = format!(
                " {} initcalls {} {} {} {}{shown} ",
                fmt_count(ic.len() as u64),
                t.dot(),
                app.initcall_order.label(),
                t.dot(),
                ic.exits_label,
            );
            (skip, title)
        }
        (ic, _) => {
            // The newest phases matter most: keep the last ones.
            let skip = rows.len().saturating_sub(visible);
            let hint = match ic {
                Some(ic) => format!(" {} i: {} initcalls", t.dot(), fmt_count(ic.len() as u64)),
                None => String::new(),
            };
            (
                skip,
                format!(" Boot phases {} {}{hint} ", t.dot(), fmt_ms(total)),
            )
        }
    };
    let b = block(t, title);
    let inner = b.inner(area);
    let width = inner.width as usize;
    let (axis0, axis1) = kernel.unwrap_or((0, total));
    let expanded = kernel.is_some();
    let name_w = rows
        .iter()
        .map(|r| label(r, t).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(6, if expanded { 24 } else { 16 });
    let dur_w = 11;
    let exits_w = if expanded { 8 } else { 0 };
    let bar_w = width.saturating_sub(2 + name_w + 1 + 1 + dur_w + exits_w);
    let bar = |start: u64, end: u64| -> (usize, usize, usize) {
        let span = axis1.saturating_sub(axis0).max(1) as f64;
        let pos = |ns: u64| (ns.clamp(axis0, axis1) - axis0) as f64 / span * bar_w as f64;
        let a = (pos(start).floor() as usize).min(bar_w.saturating_sub(1));
        let e = (pos(end).ceil() as usize).clamp(a + 1, bar_w.max(a + 1));
        (a, e - a, bar_w.saturating_sub(e))
    };
    let (fill, gap) = t.timeline_symbols();
    let mut lines = Vec::new();
    for row in rows.iter().skip(skip) {
        let name = label(row, t);
        let (start, end, style, name_style, dur_text, exits) = match row {
            PhaseRow::Phase {
                index,
                start_ns,
                end_ns,
                running,
                ..
            } => {
                let dur = end_ns.saturating_sub(*start_ns);
                let style = if *running {
                    t.phase(*index).add_modifier(Modifier::BOLD)
                } else {
                    t.phase(*index)
                };
                let name_style = if *running {
                    t.highlight()
                } else {
                    Style::new()
                };
                let dur_text = if *running {
                    format!("{}+", fmt_ms(dur))
                } else {
                    fmt_ms(dur)
                };
                (*start_ns, *end_ns, style, name_style, dur_text, None)
            }
            PhaseRow::Level {
                start_ns,
                end_ns,
                exits,
                ..
            } => (
                *start_ns,
                *end_ns,
                t.bar(),
                t.title(),
                fmt_span(end_ns.saturating_sub(*start_ns), t),
                *exits,
            ),
            PhaseRow::Call {
                start_ns,
                duration_ns,
                ret,
                exits,
                ..
            } => (
                *start_ns,
                start_ns + duration_ns,
                if *ret < 0 { t.bad() } else { t.bar() },
                Style::new(),
                fmt_span(*duration_ns, t),
                *exits,
            ),
            PhaseRow::More {
                duration_ns, exits, ..
            } => (0, 0, t.dim(), t.dim(), fmt_span(*duration_ns, t), *exits),
        };
        let marker = match row {
            PhaseRow::Phase { running: true, .. } => format!("{} ", t.marker()),
            _ => "  ".to_string(),
        };
        let mut spans = vec![
            Span::styled(marker, t.warn()),
            Span::styled(format!("{:<name_w$}", cut(&name, name_w)), name_style),
            Span::raw(" "),
        ];
        // A phase outside the kernel's span (the axis when expanded) has
        // no bar.
        let outside = end < axis0 || start > axis1 || (end == axis0 && start < end);
        if matches!(row, PhaseRow::More { .. }) || outside {
            spans.push(Span::raw(" ".repeat(bar_w)));
        } else {
            let (a, len, after) = bar(start, end);
            spans.extend([
                Span::raw(gap.repeat(a)),
                Span::styled(fill.repeat(len), style),
                Span::raw(gap.repeat(after)),
            ]);
        }
        spans.push(Span::raw(" "));
        spans.push(Span::styled(format!("{dur_text:>dur_w$}"), name_style));
        if expanded {
            let e = exits.map_or(String::new(), fmt_count);
            spans.push(Span::styled(
                format!("{:>exits_w$}", e),
                if matches!(row, PhaseRow::Level { .. }) {
                    t.title()
                } else {
                    Style::new()
                },
            ));
        }
        lines.push(Line::from(spans));
    }
    inner_lines(f, area, b, lines);
}

/// An initcall's or level's duration: microseconds below a millisecond
/// (the kernel measures initcalls in microseconds).
fn fmt_span(ns: u64, t: &Theme) -> String {
    if ns < 1_000_000 {
        format!(
            "{} {}",
            ns / 1_000,
            if t.marker() == ">" { "us" } else { "µs" }
        )
    } else {
        fmt_ms(ns)
    }
}

/// A row's name column: phases as they are (`kernel` marked as expandable
/// or expanded), levels indented with their count, initcalls further in.
fn label(row: &PhaseRow, t: &Theme) -> String {
    let ascii = t.marker() == ">";
    match row {
        PhaseRow::Phase {
            name, initcalls, ..
        } => match (initcalls, ascii) {
            (Some(true), false) => format!("{name} ▾"),
            (Some(true), true) => format!("{name} -"),
            (Some(false), false) => format!("{name} ▸"),
            (Some(false), true) => format!("{name} +"),
            (None, _) => name.clone(),
        },
        PhaseRow::Level { level, calls, .. } => format!(" {level} ({calls})"),
        PhaseRow::Call { name, ret, .. } if *ret < 0 => format!("   {name} ({ret})"),
        PhaseRow::Call { name, .. } => format!("   {name}"),
        PhaseRow::More { calls, .. } => format!("   {calls} more"),
    }
}
