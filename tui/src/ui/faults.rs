//! The page faults pane.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};
use ratatui::Frame;

use super::format::{fmt_count, fmt_rate};
use super::{block, short_source};
use crate::app::App;

/// Page fault rates: guest side and host side, as sparklines.
pub fn draw_faults(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let pf = &app.profile.page_faults;
    let b = block(t, " Page faults per second ");
    let inner = b.inner(area);
    f.render_widget(b, area);
    let (mut guest, host) = app.fault_rates();
    // A restore's tail: the guest half shows the window's curve.
    let tail = app
        .profile
        .fault_tail
        .as_ref()
        .map(|tail| super::fault_tail::tail_series(tail, app.profile.duration_ns));
    let mut guest_detail = if pf.guest_source.is_empty() {
        "no guest fault source fired".to_string()
    } else {
        short_source(&pf.guest_source).to_string()
    };
    if let Some((line, data)) = tail {
        guest_detail = line;
        guest = data;
    }
    let halves: [Rect; 2] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(inner);
    let series = [
        (
            "guest",
            pf.guest_total,
            app.rate(pf.guest_total, |p| p.page_faults.guest_total),
            guest_detail,
            guest,
            t.guest(),
        ),
        (
            "host ",
            pf.host_total,
            app.rate(pf.host_total, |p| p.page_faults.host_total),
            format!(
                "user {} {} kernel {}",
                fmt_count(pf.host_user),
                t.dot(),
                fmt_count(pf.host_kernel)
            ),
            host,
            t.host(),
        ),
    ];
    for (half, (name, total, rate, detail, data, style)) in halves.iter().zip(series) {
        if half.height == 0 {
            continue;
        }
        let [label, spark] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(*half);
        f.render_widget(
            Paragraph::new(Line::from(vec![
                Span::styled(format!("{name} "), style.add_modifier(Modifier::BOLD)),
                Span::raw(format!("{:>9} ", fmt_rate(rate))),
                Span::raw(format!("total {} ", fmt_count(total))),
                Span::styled(detail, t.dim()),
            ])),
            label,
        );
        if spark.height == 0 {
            continue;
        }
        if data.is_empty() {
            f.render_widget(
                Paragraph::new(Line::styled("no samples yet", t.dim())),
                spark,
            );
            continue;
        }
        let w = spark.width as usize;
        let tail = &data[data.len().saturating_sub(w)..];
        f.render_widget(
            Sparkline::default()
                .data(tail)
                .bar_set(t.sparkline_set())
                .style(style),
            spark,
        );
    }
}
