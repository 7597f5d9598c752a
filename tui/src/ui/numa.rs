//! The NUMA locality pane.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::format::{fmt_bytes, fmt_count};
use super::{block, inner_lines, short_source};
use crate::app::App;

/// NUMA locality: per node, the share of its pages allocated by a thread
/// running on it (local) against the rest (remote).
pub fn draw_numa(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let n = &app.profile.numa;
    let b = block(t, " NUMA locality ");
    let inner = b.inner(area);
    if n.by_node.is_empty() {
        let why = if n.source.is_empty() {
            "kmem:mm_page_alloc is not attached".to_string()
        } else {
            format!("no pages allocated yet ({})", short_source(&n.source))
        };
        f.render_widget(
            Paragraph::new(vec![
                Line::from("no page placement data"),
                Line::styled(why, t.dim()),
            ])
            .block(b)
            .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let (full, empty) = t.gauge_symbols();
    let gauge_w = (inner.width as usize).saturating_sub(7 + 5);
    let mut lines = Vec::new();
    for node in &n.by_node {
        let placed = node.pages_local + node.pages_remote;
        let frac = if placed > 0 {
            node.pages_local as f64 / placed as f64
        } else {
            0.0
        };
        let filled = ((frac * gauge_w as f64).round() as usize).min(gauge_w);
        lines.push(Line::from(vec![
            Span::raw(format!("node {:<2}", node.node)),
            Span::styled(full.repeat(filled), t.good()),
            Span::styled(empty.repeat(gauge_w - filled), t.bad()),
            Span::raw(if placed > 0 {
                format!("{:>4.0}%", frac * 100.0)
            } else {
                "   -".to_string()
            }),
        ]));
    }
    let page = n.page_size.max(1);
    lines.push(Line::from(vec![
        Span::styled("local ", t.good()),
        Span::raw(format!(
            "{} ({})",
            fmt_count(n.pages_local),
            fmt_bytes(n.pages_local * page)
        )),
    ]));
    lines.push(Line::from(vec![
        Span::styled("remote ", t.bad()),
        Span::raw(format!(
            "{} ({})",
            fmt_count(n.pages_remote),
            fmt_bytes(n.pages_remote * page)
        )),
    ]));
    if n.pages_unknown_node > 0 {
        lines.push(Line::styled(
            format!("unknown node {}", fmt_count(n.pages_unknown_node)),
            t.dim(),
        ));
    }
    let nodes = app.profile.host.numa_nodes.len();
    if nodes > 0 {
        lines.push(Line::styled(
            format!(
                "{nodes} host node{}{}",
                if nodes == 1 { "" } else { "s" },
                if nodes == 1 {
                    ": every page is local"
                } else {
                    ""
                }
            ),
            t.dim(),
        ));
    }
    inner_lines(f, area, b, lines);
}
