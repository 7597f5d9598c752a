//! The boot phases pane, under `kernel` its initcalls (`i`), under
//! `userspace` a systemd guest's units (`u`).

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
        draw_waiting(f, area, app);
        return;
    }
    // The span of the phase expanded into its initcalls or units.
    let open = rows.iter().find_map(|r| match r {
        PhaseRow::Phase {
            name,
            start_ns,
            end_ns,
            initcalls: Some(true),
            ..
        } => Some((name.as_str(), *start_ns, *end_ns)),
        _ => None,
    });
    let kernel = open.map(|(_, a, b)| (a, b));
    let visible = area.height.saturating_sub(2) as usize;
    let (skip, title) = title_and_skip(app, &rows, open.map(|o| o.0), visible, total);
    let b = block(t, title);
    let width = b.inner(area).width as usize;
    let expanded = kernel.is_some();
    let with_exits = open.is_some_and(|o| o.0 == "kernel");
    let name_w = rows
        .iter()
        .map(|r| label(r, t).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(6, if expanded { 24 } else { 16 });
    let exits_w = if with_exits { 8 } else { 0 };
    let cols = Columns {
        theme: t,
        axis: kernel.unwrap_or((0, total)),
        name_w,
        exits_w,
        bar_w: width.saturating_sub(2 + name_w + 1 + 1 + DUR_W + exits_w),
    };
    let lines = rows.iter().skip(skip).map(|r| cols.line(r)).collect();
    inner_lines(f, area, b, lines);
}

/// Width of the duration column.
const DUR_W: usize = 11;

/// The pane before any phase has started.
fn draw_waiting(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let lines = vec![
        Line::from("waiting for boot phase marks"),
        Line::styled(
            format!(
                "{} marks so far; port 0x80/0xf4 writes, console milestones and the VMM's own marks open phases",
                app.profile.marks.len()
            ),
            t.dim(),
        ),
    ];
    f.render_widget(
        Paragraph::new(lines)
            .block(block(t, " Boot phases "))
            .wrap(ratatui::widgets::Wrap { trim: true }),
        area,
    );
}

/// The rows to skip and the pane's title: with the initcalls shown, the
/// user's scroll (never past the last page), their count, order and which
/// exits; else the newest phases that fit, the boot's length and a hint
/// when there are initcalls to show.
fn title_and_skip(
    app: &App,
    rows: &[PhaseRow],
    expanded: Option<&str>,
    visible: usize,
    total: u64,
) -> (usize, String) {
    let t = &app.theme;
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
    if let (Some("userspace"), Some(units)) = (expanded, &app.units) {
        let title = format!(
            " {} units {} others {}{shown} ",
            fmt_count(units.len() as u64),
            t.dot(),
            app.initcall_order.label(),
        );
        return (skip, title);
    }
    match &app.initcalls {
        Some(ic) if expanded.is_some() => {
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
        ic => {
            let skip = rows.len().saturating_sub(visible);
            let mut hint = match ic {
                Some(ic) => format!(" {} i: {} initcalls", t.dot(), fmt_count(ic.len() as u64)),
                None => String::new(),
            };
            if let Some(units) = &app.units {
                hint.push_str(&format!(
                    " {} u: {} units",
                    t.dot(),
                    fmt_count(units.len() as u64)
                ));
            }
            (
                skip,
                format!(" Boot phases {} {}{hint} ", t.dot(), fmt_ms(total)),
            )
        }
    }
}

/// The pane's columns: marker, name, bar on the time axis, duration and,
/// with the initcalls shown, exits.
struct Columns<'a> {
    theme: &'a Theme,
    /// The bar's time axis: the whole boot, or the kernel's span.
    axis: (u64, u64),
    name_w: usize,
    exits_w: usize,
    bar_w: usize,
}

/// What a row draws: its span, bar and text styles, duration and exits.
struct RowParts {
    start: u64,
    end: u64,
    bar: Style,
    text: Style,
    duration: String,
    exits: Option<u64>,
}

impl Columns<'_> {
    fn line(&self, row: &PhaseRow) -> Line<'static> {
        let t = self.theme;
        let (name_w, bar_w, exits_w) = (self.name_w, self.bar_w, self.exits_w);
        let parts = row_parts(row, t);
        let marker = match row {
            PhaseRow::Phase { running: true, .. } => format!("{} ", t.marker()),
            _ => "  ".to_string(),
        };
        let mut spans = vec![
            Span::styled(marker, t.warn()),
            Span::styled(
                format!("{:<name_w$}", cut(&label(row, t), name_w)),
                parts.text,
            ),
            Span::raw(" "),
        ];
        // A phase outside the axis (the kernel's span, when expanded) has
        // no bar, nor has the row of a level's other initcalls.
        let (axis0, axis1) = self.axis;
        let outside = parts.end < axis0
            || parts.start > axis1
            || (parts.end == axis0 && parts.start < parts.end);
        if matches!(row, PhaseRow::More { .. }) || outside {
            spans.push(Span::raw(" ".repeat(bar_w)));
        } else {
            let (fill, gap) = t.timeline_symbols();
            let span = axis1.saturating_sub(axis0).max(1) as f64;
            let pos = |ns: u64| (ns.clamp(axis0, axis1) - axis0) as f64 / span * bar_w as f64;
            let a = (pos(parts.start).floor() as usize).min(bar_w.saturating_sub(1));
            let e = (pos(parts.end).ceil() as usize).clamp(a + 1, bar_w.max(a + 1));
            spans.extend([
                Span::raw(gap.repeat(a)),
                Span::styled(fill.repeat(e - a), parts.bar),
                Span::raw(gap.repeat(bar_w.saturating_sub(e))),
            ]);
        }
        spans.push(Span::raw(" "));
        spans.push(Span::styled(
            format!("{:>DUR_W$}", parts.duration),
            parts.text,
        ));
        if exits_w > 0 {
            let e = parts.exits.map_or(String::new(), fmt_count);
            let style = match row {
                PhaseRow::Level { .. } => t.title(),
                _ => Style::new(),
            };
            spans.push(Span::styled(format!("{e:>exits_w$}"), style));
        }
        Line::from(spans)
    }
}

/// The span, styles, duration and exits of one row.
fn row_parts(row: &PhaseRow, t: &Theme) -> RowParts {
    match row {
        PhaseRow::Phase {
            index,
            start_ns,
            end_ns,
            running,
            ..
        } => {
            let dur = end_ns.saturating_sub(*start_ns);
            RowParts {
                start: *start_ns,
                end: *end_ns,
                bar: if *running {
                    t.phase(*index).add_modifier(Modifier::BOLD)
                } else {
                    t.phase(*index)
                },
                text: if *running {
                    t.highlight()
                } else {
                    Style::new()
                },
                duration: if *running {
                    format!("{}+", fmt_ms(dur))
                } else {
                    fmt_ms(dur)
                },
                exits: None,
            }
        }
        PhaseRow::Level {
            start_ns,
            end_ns,
            exits,
            ..
        } => RowParts {
            start: *start_ns,
            end: *end_ns,
            bar: t.bar(),
            text: t.title(),
            duration: fmt_span(end_ns.saturating_sub(*start_ns), t),
            exits: *exits,
        },
        PhaseRow::Call {
            start_ns,
            duration_ns,
            ret,
            exits,
            ..
        } => RowParts {
            start: *start_ns,
            end: start_ns + duration_ns,
            bar: if *ret < 0 { t.bad() } else { t.bar() },
            text: Style::new(),
            duration: fmt_span(*duration_ns, t),
            exits: *exits,
        },
        PhaseRow::More {
            duration_ns, exits, ..
        } => RowParts {
            start: 0,
            end: 0,
            bar: t.dim(),
            text: t.dim(),
            duration: fmt_span(*duration_ns, t),
            exits: *exits,
        },
    }
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
