//! The exit reasons pane.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::format::{fmt_count, fmt_rate};
use super::{block, cut, inner_lines, short_source};
use crate::app::App;

/// Exit reasons: bars of the top reasons with totals and rates, for all
/// vCPUs or the one `v` selected.
pub fn draw_exits(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let e = &app.profile.exits;
    let scope = vcpu_scope(app);
    let b = block(
        t,
        format!(
            " Exit reasons {d} {scope} {d} sort: {} ",
            app.sort.label(),
            d = t.dot()
        ),
    );
    let inner = b.inner(area);
    let rows = app.exit_rows();
    let (total, rate) = app.exit_total();
    let head = exits_head(app, total, rate);
    let mut lines = vec![Line::from(head)];
    if rows.is_empty() {
        lines.push(Line::from(if app.vcpu.is_some() {
            "no exits on this vCPU yet"
        } else if total > 0 {
            "only the total is known: its source does not tell reasons"
        } else {
            "no exits counted yet"
        }));
        if e.source.is_empty() {
            lines.push(Line::styled(
                "no exit source attached (eBPF profiling needs root, BTF and tracefs)",
                t.dim(),
            ));
        }
        f.render_widget(
            Paragraph::new(lines)
                .block(b)
                .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let width = inner.width as usize;
    let reason_w = rows
        .iter()
        .map(|r| r.reason.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(4, 22);
    let count_w = 11;
    let rate_w = 10;
    let bar_w = width.saturating_sub(2 + reason_w + 1 + 1 + count_w + rate_w);
    let rate_head = if app.finished { "avg/s" } else { "/s" };
    lines.push(Line::styled(
        format!(
            "  {:<reason_w$} {:bar_w$} {:>count_w$}{:>rate_w$}",
            "reason", "", "count", rate_head
        ),
        t.dim(),
    ));
    let max = rows.iter().map(|r| r.count).max().unwrap_or(1).max(1);
    let selected = app.selected_index(&rows);
    let room = (inner.height as usize).saturating_sub(2);
    // Keep the selected row in view.
    let first = selected.saturating_sub(room.saturating_sub(1));
    for (i, r) in rows.iter().enumerate().skip(first).take(room) {
        let sel = i == selected;
        let bar = t.bar_text(r.count as f64 / max as f64, bar_w);
        let style = if sel { t.highlight() } else { Style::new() };
        lines.push(Line::from(vec![
            Span::styled(
                if sel {
                    format!("{} ", t.marker())
                } else {
                    "  ".into()
                },
                style,
            ),
            Span::styled(format!("{:<reason_w$}", cut(&r.reason, reason_w)), style),
            Span::raw(" "),
            Span::styled(format!("{bar:<bar_w$}"), t.bar()),
            Span::raw(" "),
            Span::styled(format!("{:>count_w$}", fmt_count(r.count)), style),
            Span::styled(format!("{:>rate_w$}", fmt_rate(r.rate)), style),
        ]));
    }
    inner_lines(f, area, b, lines);
}

/// Whose exits are shown: every vCPU's or one's.
fn vcpu_scope(app: &App) -> String {
    let e = &app.profile.exits;
    match app.vcpu {
        None => "all vCPUs".to_string(),
        Some(v) => {
            let tid = e
                .by_vcpu
                .iter()
                .find(|x| x.vcpu == v)
                .map(|x| x.tid)
                .unwrap_or(0);
            if tid > 0 {
                format!("vCPU {v} (tid {tid})")
            } else {
                format!("vCPU {v}")
            }
        }
    }
}

/// The pane's first line: the total, its rate, where it comes from and
/// KVM's own count.
fn exits_head(app: &App, total: u64, rate: f64) -> Vec<Span<'static>> {
    let t = &app.theme;
    let e = &app.profile.exits;
    let mut head = vec![
        Span::raw(format!("total {} ", fmt_count(total))),
        Span::raw(format!("({}) ", fmt_rate(rate))),
    ];
    if !e.source.is_empty() {
        let fallback = e.isa == "userspace";
        head.push(Span::styled(
            format!(
                "from {}{}",
                short_source(&e.source),
                if fallback { " (fallback)" } else { "" }
            ),
            if fallback { t.warn() } else { t.dim() },
        ));
    }
    if let Some(k) = e.kvm_stats_exits {
        head.push(Span::styled(
            format!(" {} KVM: {}", t.dot(), fmt_count(k)),
            t.dim(),
        ));
    }
    head
}
