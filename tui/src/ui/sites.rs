//! The exit sites pane (`x` swaps it with the latency pane): the guest
//! functions that made the selected reason's exits, most first.

use std::collections::BTreeMap;

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use bootscope_model::sites::ExitSites;

use super::format::fmt_count;
use super::{block, cut, inner_lines};
use crate::app::App;

/// The selected reason's exits per guest function on `vcpu` (None: all),
/// most first, then by name.
pub(super) fn top_functions(
    sites: &ExitSites,
    reason: &str,
    vcpu: Option<u32>,
) -> Vec<(String, u64)> {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for s in &sites.sites {
        if s.reason == reason && vcpu.is_none_or(|v| v == s.vcpu) {
            *by.entry(s.function_name()).or_default() += s.count;
        }
    }
    let mut v: Vec<(String, u64)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// Exit sites of the selected reason: one bar per guest function with its
/// count and share of the reason.
pub fn draw_sites(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let stat = app.selected_reason_stat();
    let arrows = if t.ascii { "up/down" } else { "↑↓" };
    let title = match stat {
        Some(s) => format!(" Exit sites {} {} [{arrows}] ", t.dot(), s.reason),
        None => " Exit sites ".to_string(),
    };
    let b = block(t, title);
    let inner = b.inner(area);
    let note = |lines: Vec<Line<'static>>| {
        Paragraph::new(lines)
            .block(b.clone())
            .wrap(ratatui::widgets::Wrap { trim: true })
    };
    let Some(sites) = &app.profile.exits.sites else {
        f.render_widget(
            note(vec![
                Line::from("exit sites not collected"),
                Line::styled(
                    "run or profile with --exit-sites (VMX/SVM hosts); x shows the latency again",
                    t.dim(),
                ),
            ]),
            area,
        );
        return;
    };
    let Some(s) = stat else {
        f.render_widget(note(vec![Line::from("no exits counted yet")]), area);
        return;
    };
    let rows = top_functions(sites, &s.reason, app.vcpu);
    let total: u64 = rows.iter().map(|r| r.1).sum();
    let how = match &sites.symbols {
        Some(i) if i.kaslr_offset.is_some() => "named",
        Some(_) => "slide unknown: addresses",
        None => "not named yet: addresses",
    };
    let mut lines = vec![Line::styled(
        format!(
            "{} exits at {} functions {} {how}",
            fmt_count(total),
            fmt_count(rows.len() as u64),
            t.dot()
        ),
        t.dim(),
    )];
    let count_w = 10;
    let share_w = 7;
    let width = inner.width as usize;
    let name_w = rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, (width / 2).max(8));
    let bar_w = width.saturating_sub(name_w + 1 + 1 + count_w + share_w);
    let max = rows.first().map_or(1, |r| r.1).max(1);
    let room = (inner.height as usize).saturating_sub(1);
    for (name, n) in rows.iter().take(room) {
        let share = 100.0 * *n as f64 / total.max(1) as f64;
        lines.push(Line::from(vec![
            Span::raw(format!("{:<name_w$} ", cut(name, name_w))),
            Span::styled(
                format!("{:<bar_w$}", t.bar_text(*n as f64 / max as f64, bar_w)),
                t.bar(),
            ),
            Span::raw(format!(" {:>count_w$}", fmt_count(*n))),
            Span::styled(format!(" {share:>5.1}%"), t.dim()),
        ]));
    }
    inner_lines(f, area, b, lines);
}
