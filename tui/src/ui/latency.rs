//! The exit latency pane: a log2 histogram of exit handling times.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use bootscope_model::profile::HistBucket;

use super::format::{fmt_count, fmt_ns_short};
use super::{block, inner_lines};
use crate::app::App;

/// The histogram buckets worth showing: from the first to the last
/// non-empty one, cut to `room` around the fullest.
pub(super) fn visible_buckets(hist: &[HistBucket], room: usize) -> &[HistBucket] {
    let Some(first) = hist.iter().position(|b| b.count > 0) else {
        return &[];
    };
    let last = hist.iter().rposition(|b| b.count > 0).unwrap_or(first);
    let used = &hist[first..=last];
    if used.len() <= room || room == 0 {
        return if room == 0 { &[] } else { used };
    }
    let peak = used
        .iter()
        .enumerate()
        .max_by_key(|(_, b)| b.count)
        .map(|(i, _)| i)
        .unwrap_or(0);
    let start = peak.saturating_sub(room / 2).min(used.len() - room);
    &used[start..start + room]
}

/// Exit latency histogram of the selected reason.
pub fn draw_latency(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let stat = app.selected_reason_stat();
    let title = match stat {
        Some(s) => format!(" Exit latency {} {} [↑↓] ", t.dot(), s.reason),
        None => " Exit latency ".to_string(),
    };
    let title = if t.ascii {
        title.replace("↑↓", "up/down")
    } else {
        title
    };
    let b = block(t, title);
    let inner = b.inner(area);
    let Some(s) = stat else {
        let lines = no_reason_lines(app);
        f.render_widget(
            Paragraph::new(lines)
                .block(b)
                .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    };
    let hist_total: u64 = s.latency_hist.iter().map(|b| b.count).sum();
    if hist_total == 0 {
        let why = if app.profile.exits.isa == "userspace" {
            "the exit view is the PVM fallback (kvm_userspace_exit): it counts exits to the VMM but cannot time them"
        } else {
            "no kvm_entry followed these exits yet"
        };
        f.render_widget(
            Paragraph::new(vec![
                Line::from(format!("no latency measured for {}", s.reason)),
                Line::styled(why, t.dim()),
            ])
            .block(b)
            .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let mut lines = Vec::new();
    let avg = s
        .latency_total_ns
        .map(|ns| ns as f64 / hist_total.max(1) as f64);
    lines.push(Line::styled(
        match avg {
            Some(a) => format!(
                "{} exits timed, mean {}",
                fmt_count(hist_total),
                fmt_ns_short(a.round() as u64, t.ascii)
            ),
            None => format!("{} exits timed", fmt_count(hist_total)),
        },
        t.dim(),
    ));
    let room = (inner.height as usize).saturating_sub(1);
    let buckets = visible_buckets(&s.latency_hist, room);
    let label_w = 13;
    let count_w = 10;
    let bar_w = (inner.width as usize).saturating_sub(label_w + 1 + count_w + 1);
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    for bk in buckets {
        let label = format!(
            "{}-{}",
            fmt_ns_short(bk.lo_ns, t.ascii),
            fmt_ns_short(bk.hi_ns, t.ascii)
        );
        lines.push(Line::from(vec![
            Span::raw(format!("{label:>label_w$} ")),
            Span::styled(
                format!(
                    "{:<bar_w$}",
                    t.bar_text(bk.count as f64 / max as f64, bar_w)
                ),
                t.bar(),
            ),
            Span::raw(format!(" {:>count_w$}", fmt_count(bk.count))),
        ]));
    }
    inner_lines(f, area, b, lines);
}

/// What the pane says when no reason is selected: why none is.
fn no_reason_lines(app: &App) -> Vec<Line<'static>> {
    let t = &app.theme;
    if app.profile.exits.total > 0 {
        vec![
            Line::from("no exit reasons known"),
            Line::styled(
                "latency is measured per reason by the eBPF exit tracepoints",
                t.dim(),
            ),
        ]
    } else {
        vec![
            Line::from("no exits counted yet"),
            Line::styled(
                "select a reason in the exit chart with the arrow keys",
                t.dim(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use bootscope_model::profile::HistBucket;

    use super::*;

    #[test]
    fn histogram_window_keeps_the_peak() {
        let hist: Vec<HistBucket> = (0..20)
            .map(|i| HistBucket {
                lo_ns: 1 << i,
                hi_ns: 2 << i,
                count: if (3..15).contains(&i) {
                    1 + (i == 12) as u64 * 100
                } else {
                    0
                },
            })
            .collect();
        assert_eq!(visible_buckets(&hist, 100).len(), 12);
        let w = visible_buckets(&hist, 4);
        assert_eq!(w.len(), 4);
        assert!(w.iter().any(|b| b.count == 101));
        assert!(visible_buckets(&[], 4).is_empty());
        assert!(visible_buckets(&hist, 0).is_empty());
    }
}
