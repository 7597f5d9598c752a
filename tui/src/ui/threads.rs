//! The preallocation threads pane.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use bootscope_model::profile::ThreadProfile;

use super::format::{fmt_bytes, fmt_count, fmt_cpu_list, fmt_ms};
use super::{block, cut};
use crate::app::App;

/// Preallocation threads (or every thread when there are none): where they
/// ran and what they touched; with run-queue waits (`--collect sched`) the
/// vCPU threads too, and how long each waited for a host CPU.
pub fn draw_threads(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let (rows, prealloc) = app.thread_rows();
    let room = (area.height as usize).saturating_sub(3);
    let more = rows.len().saturating_sub(room);
    let title = threads_title(app, rows.len(), prealloc, more);
    let b = block(t, title);
    if rows.is_empty() {
        f.render_widget(
            Paragraph::new(vec![
                Line::from("no threads seen yet"),
                Line::styled(
                    "threads appear as the target creates them (QEMU's touch_pages, bootscope's prealloc-*, vCPUs)",
                    t.dim(),
                ),
            ])
            .block(b)
            .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    // Narrow panes drop the role and memory columns (2 and 6) and shrink
    // the rest, so the numbers stay whole.
    let narrow = area.width < 76;
    let waits = app.has_waits();
    let keep = |i: usize| (!narrow || (i != 2 && i != 6)) && (waits || i != 8);
    let name_w: usize = if narrow { 12 } else { 16 };
    let header = Row::new(
        [
            "TID", "NAME", "ROLE", "CPUS", "NODE", "PAGES", "MEMORY", "LOCAL", "CPU WAIT",
        ]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, h)| Cell::from(h)),
    )
    .style(t.dim().add_modifier(Modifier::BOLD));
    let body: Vec<Row> = rows
        .iter()
        .take(room)
        .map(|th| thread_row(th, app, name_w, keep))
        .collect();
    let widths: Vec<Constraint> = [
        Constraint::Length(if narrow { 7 } else { 8 }),
        Constraint::Length(name_w as u16),
        Constraint::Length(8),
        Constraint::Min(4),
        Constraint::Length(4),
        Constraint::Length(11),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(10),
    ]
    .into_iter()
    .enumerate()
    .filter(|(i, _)| keep(*i))
    .map(|(_, w)| w)
    .collect();
    f.render_widget(Table::new(body, widths).header(header).block(b), area);
}

/// The pane's title: which threads, how they are sorted, how many more
/// there are than rows.
fn threads_title(app: &App, shown: usize, prealloc: bool, more: usize) -> String {
    let t = &app.theme;
    let all = app.profile.threads.len();
    let mut title = if prealloc && app.has_waits() {
        format!(" Preallocation and vCPU threads ({shown} of {all})")
    } else if prealloc {
        format!(" Preallocation threads ({shown} of {all})")
    } else if all > 0 {
        format!(" Threads ({all}; no preallocation threads)")
    } else {
        " Threads".to_string()
    };
    title.push_str(&format!(" {} sort: {}", t.dot(), app.sort.label()));
    if more > 0 {
        title.push_str(&format!(" {} {more} more", t.dot()));
    }
    title.push(' ');
    title
}

/// One thread's row; `keep` says which columns the pane's width allows.
fn thread_row<'a>(
    th: &ThreadProfile,
    app: &App,
    name_w: usize,
    keep: impl Fn(usize) -> bool,
) -> Row<'a> {
    let t = &app.theme;
    let cpus: Vec<u32> = th
        .cpus
        .iter()
        .filter(|c| c.run_ns > 0)
        .map(|c| c.cpu)
        .collect();
    let nodes: Vec<String> = th.nodes.iter().map(|n| n.to_string()).collect();
    let placed = th.pages_local + th.pages_remote;
    let local = if placed > 0 {
        let pct = th.pages_local as f64 * 100.0 / placed as f64;
        Cell::from(format!("{pct:.0}%")).style(if pct >= 99.5 { t.good() } else { t.bad() })
    } else {
        Cell::from("-")
    };
    let ended = th.exit_code.is_some() || th.end_ns < app.profile.duration_ns;
    let cells = vec![
        Cell::from(th.tid.to_string()),
        Cell::from(cut(&th.name, name_w)),
        Cell::from(th.role.clone()),
        Cell::from(if cpus.is_empty() {
            "-".to_string()
        } else {
            fmt_cpu_list(&cpus)
        }),
        Cell::from(if nodes.is_empty() {
            "-".to_string()
        } else {
            nodes.join(",")
        }),
        Cell::from(fmt_count(th.pages_allocated)),
        Cell::from(if th.bytes_allocated > 0 {
            fmt_bytes(th.bytes_allocated)
        } else {
            "-".to_string()
        }),
        local,
        Cell::from(match &th.runqueue_wait {
            Some(w) if w.total_ns > 0 => fmt_ms(w.total_ns),
            _ => "-".to_string(),
        }),
    ];
    Row::new(
        cells
            .into_iter()
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, c)| c),
    )
    .style(if ended && !app.finished {
        t.dim()
    } else {
        Style::new()
    })
}
