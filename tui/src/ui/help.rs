//! The keys help, drawn over the panes.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use ratatui::Frame;

use super::block;
use crate::app::App;

/// The key help, over everything else.
pub fn draw_help(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let text = [
        ("q, Ctrl-C", "quit (the final state stays until q)"),
        ("p, space", "pause or resume refreshing"),
        ("v", "cycle the exit chart: all vCPUs, vCPU 0, 1, ..."),
        ("s", "sort: total, rate, name"),
        (
            "up/down, k/j",
            "select the exit reason for the histogram or sites",
        ),
        (
            "x",
            "exit latency or exit sites (guest functions) of that reason",
        ),
        ("i", "kernel's initcalls (from run --initcalls, at the end)"),
        ("u", "a systemd guest's units under userspace (at the end)"),
        ("o", "initcalls, units: slowest first or in time order"),
        ("PgDn/PgUp", "scroll the phase pane (also ] and [)"),
        ("e", "write the profile to ./bootscope-snapshot-<time>.json"),
        ("?, h", "show or hide this help"),
    ];
    let replay = [
        ("space, p", "play the replay from here, or pause it"),
        (
            "left/right",
            "step to the previous or next sample (also , and .)",
        ),
        (
            "n, N",
            "jump to the next phase, or back to this one's start",
        ),
        ("1-9", "jump to the start of phase 1-9"),
        (
            "Home/End",
            "the start or the end of the profile (also g and G)",
        ),
        ("+, -", "play twice or half as fast"),
    ];
    let text: Vec<(&str, &str)> = if app.replay.is_some() {
        // Replay keys in place of pause and snapshot's live meaning.
        replay
            .iter()
            .chain(text.iter().filter(|(k, _)| !k.starts_with('p')))
            .copied()
            .collect()
    } else {
        text.to_vec()
    };
    let w = (area.width.saturating_sub(4)).min(72);
    let h = (text.len() as u16 + 6).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let mut lines: Vec<Line> = text
        .iter()
        .map(|(k, d)| {
            Line::from(vec![
                Span::styled(
                    format!("  {k:<14} "),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(*d),
            ])
        })
        .collect();
    lines.push(Line::raw(""));
    let (rates1, rates2) = if app.replay.is_some() {
        (
            "  Rates are differences between the last two samples; at the end",
            "  they are averages over the whole profile. Docs: docs/tui.md",
        )
    } else {
        (
            "  Rates are differences between consecutive snapshots; once the target",
            "  ends they are averages over the whole profile. Docs: docs/tui.md",
        )
    };
    lines.push(Line::styled(rates1, t.dim()));
    lines.push(Line::styled(rates2, t.dim()));
    f.render_widget(Clear, popup);
    f.render_widget(Paragraph::new(lines).block(block(t, " Keys ")), popup);
}
