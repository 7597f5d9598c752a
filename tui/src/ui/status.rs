//! The status line: state, target, event sources, lost events, elapsed
//! time, and the keys or the last message.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use bootscope_model::profile::Profile;

use super::format::fmt_count;
use crate::app::{App, ReplayStatus};
use crate::theme::Theme;

/// How the data sources stand: attached count, fallbacks and the missing.
fn sources_spans<'a>(p: &Profile, t: &Theme) -> Vec<Span<'a>> {
    let count = |st: &str| p.sources.iter().filter(|s| s.status == st).count();
    let names = |st: &str| -> Vec<String> {
        p.sources
            .iter()
            .filter(|s| s.status == st)
            .map(|s| s.name.rsplit(':').next().unwrap_or(&s.name).to_string())
            .collect()
    };
    let mut out = vec![Span::raw(format!("sources {} attached", count("attached")))];
    let fallback = names("fallback");
    if !fallback.is_empty() {
        out.push(Span::styled(
            format!(", fallback: {}", fallback.join(", ")),
            t.warn(),
        ));
    }
    let failed = count("failed");
    if failed > 0 {
        out.push(Span::styled(format!(", {failed} failed"), t.bad()));
    }
    let missing = count("missing");
    if missing > 0 {
        out.push(Span::styled(format!(", {missing} missing"), t.dim()));
    }
    out
}

/// A replay's position: of how long, at which speed, in which phase,
/// samples seen.
fn replay_position(r: &ReplayStatus) -> String {
    let mut out = format!(" of {:.1} s", r.end_ns as f64 / 1e9);
    if r.playing {
        out.push_str(&format!(" x{}", r.speed));
    }
    if let Some(ph) = &r.phase {
        out.push_str(&format!(" | {ph}"));
    }
    out.push_str(&format!(" | sample {}/{}", r.samples_seen, r.samples));
    out
}

/// Two lines: state, target, sources, lost events, elapsed time; then the
/// keys or the last message.
pub fn draw_status(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let p = &app.profile;
    let sep = || Span::styled(" | ", t.dim());
    let state = state_label(app);
    let lost = p.lost_events + p.map_overflows;
    let mut line1 = vec![
        Span::styled(
            state,
            if app.replay.is_some() {
                t.title().add_modifier(Modifier::REVERSED)
            } else if app.finished || app.paused {
                t.warn().add_modifier(Modifier::REVERSED)
            } else {
                t.good().add_modifier(Modifier::REVERSED)
            },
        ),
        Span::raw(" "),
        Span::styled(
            bootscope_model::text::printable(&app.title).into_owned(),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        sep(),
        Span::raw(format!("{:.1} s", p.duration_ns as f64 / 1e9)),
    ];
    if let Some(r) = &app.replay {
        line1.push(Span::raw(replay_position(r)));
    }
    if let Some(r) = app.stretched_refresh.filter(|_| !app.finished) {
        line1.push(Span::styled(
            format!(" (refresh {} ms: large profile)", r.as_millis()),
            t.dim(),
        ));
    }
    line1.extend([
        sep(),
        Span::styled(
            if p.map_overflows > 0 {
                format!(
                    "lost events {} (+{} map full)",
                    fmt_count(p.lost_events),
                    fmt_count(p.map_overflows)
                )
            } else {
                format!("lost events {}", fmt_count(p.lost_events))
            },
            if lost > 0 { t.warn() } else { Style::new() },
        ),
        sep(),
    ]);
    // With --bpf-stats: what the eBPF programs have cost so far.
    let (runs, run_ns) = p
        .timed_sources()
        .fold((0u64, 0u64), |(r, n), (_, a, b)| (r + a, n + b));
    if runs > 0 {
        line1.push(Span::raw(format!(
            "eBPF {:.1} ms in {} runs",
            run_ns as f64 / 1e6,
            fmt_count(runs)
        )));
        line1.push(sep());
    }
    line1.extend(sources_spans(p, t));
    if let Some(n) = &app.note {
        line1.push(sep());
        line1.push(Span::styled(n.clone(), t.dim()));
    }
    let replay_keys =
        format!(
        "q quit  space play  {} step  n/N phase  1-9 jump  +/- speed  x sites  i initcalls  ? help",
        if t.ascii { "left/right" } else { "\u{2190}\u{2192}" }
    );
    let keys = if app.replay.is_some() {
        replay_keys.as_str()
    } else if app.finished {
        "target ended: q quit  v vCPU  s sort  x sites  e snapshot  ? help"
    } else {
        "q quit  p pause  v vCPU  s sort  x sites  e snapshot  ? help"
    };
    let mut line2 = Vec::new();
    if let Some(m) = &app.message {
        line2.push(Span::styled(m.clone(), t.warn()));
        line2.push(sep());
    }
    line2.push(Span::styled(keys, t.dim()));
    f.render_widget(
        Paragraph::new(vec![Line::from(line1), Line::from(line2)]),
        area,
    );
}

/// The state the status line starts with: replaying, ended, paused or live.
fn state_label(app: &App) -> String {
    let t = &app.theme;
    let p = &app.profile;
    if let Some(r) = &app.replay {
        let play = match (r.playing, t.ascii) {
            (true, false) => "▶",
            (true, true) => ">",
            (false, false) => "‖",
            (false, true) => "||",
        };
        format!(" REPLAY {play} ")
    } else if app.finished {
        match p.target.exit_code {
            Some(c) => format!(" ENDED (exit {c}) "),
            None => " ENDED ".to_string(),
        }
    } else if app.paused {
        " PAUSED ".to_string()
    } else {
        " LIVE ".to_string()
    }
}
