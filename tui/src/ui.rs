//! Drawing: a pure function of the [`App`] and the frame's area. One
//! function per pane, so each can be rendered (and snapshot-tested) alone.
//!
//! ```text
//! +- Boot phases ----------------++- Exit reasons -------------------------+
//! +- Exit latency ---------------++- Page faults --------------------------+
//! +- Preallocation threads -----------------------++- NUMA locality -------+
//! +- Console (when the source has one) ------------------------------------+
//!  status: state | target | sources | lost events | elapsed
//!  keys, or the last message
//! ```

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;

use bootscope_profiler::profile::{HistBucket, Profile};

use crate::app::App;
use crate::theme::Theme;

/// Below this size only a message is drawn.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 16;

/// Draws the whole screen.
pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "terminal too small ({}x{}): bootscope needs at least {MIN_WIDTH}x{MIN_HEIGHT}; q quits",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(msg), area);
        return;
    }
    let console_rows = match (&app.console, area.height) {
        (None, _) => 0,
        (Some(_), h) if h >= 34 => 7,
        (Some(_), h) if h >= 24 => 5,
        (Some(_), _) => 0,
    };
    let [body, console, status] = Layout::vertical([
        Constraint::Min(0),
        Constraint::Length(console_rows),
        Constraint::Length(2),
    ])
    .areas(area);
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Percentage(34),
        Constraint::Percentage(28),
        Constraint::Percentage(38),
    ])
    .areas(body);
    let [phases, exits] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(top);
    let [latency, faults] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(middle);
    let [threads, numa] =
        Layout::horizontal([Constraint::Percentage(68), Constraint::Percentage(32)]).areas(bottom);
    draw_phases(f, phases, app);
    draw_exits(f, exits, app);
    draw_latency(f, latency, app);
    draw_faults(f, faults, app);
    draw_threads(f, threads, app);
    draw_numa(f, numa, app);
    if console_rows > 0 {
        draw_console(f, console, app);
    }
    draw_status(f, status, app);
    if app.show_help {
        draw_help(f, area, app);
    }
}

fn block<'a>(theme: &Theme, title: impl Into<Line<'a>>) -> Block<'a> {
    Block::bordered()
        .border_set(theme.border_set())
        .title(title.into().style(theme.title()))
}

/// `s` cut to `n` characters, marking the cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    if n == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(n - 1).collect();
    out.push('~');
    out
}

/// 1234567 -> "1,234,567".
pub fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Events per second, short.
pub fn fmt_rate(r: f64) -> String {
    if !(r.is_finite() && r > 0.0) {
        "0/s".into()
    } else if r < 10.0 {
        format!("{r:.1}/s")
    } else {
        format!("{}/s", fmt_count(r.round() as u64))
    }
}

/// A duration in milliseconds (one decimal below 10 s).
pub fn fmt_ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 10_000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{} ms", fmt_count(ms.round() as u64))
    }
}

/// A short duration for histogram labels: 512ns, 2us, 16ms, 1s.
pub fn fmt_ns_short(ns: u64, ascii: bool) -> String {
    let us = if ascii { "us" } else { "µs" };
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{}{us}", ns / 1_000)
    } else if ns < 1_000_000_000 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}s", ns / 1_000_000_000)
    }
}

/// Bytes in binary units.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v < 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.0} {}", UNITS[u])
    }
}

/// CPU numbers as a list with ranges: 0-3,6.
pub fn fmt_cpu_list(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", v[i], v[j])
        } else if j == i + 1 {
            format!("{},{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

/// A source name without its `tracepoint:` prefix.
fn short_source(s: &str) -> &str {
    s.strip_prefix("tracepoint:").unwrap_or(s)
}

fn inner_lines(f: &mut Frame, area: Rect, block: Block, lines: Vec<Line>) {
    f.render_widget(Paragraph::new(lines).block(block), area);
}

/// Boot phase timeline: one bar per phase on a common time axis, the
/// running phase highlighted.
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
    let title = if p.phases.is_empty() {
        " Boot phases ".to_string()
    } else {
        format!(" Boot phases {} {} ", t.dot(), fmt_ms(total))
    };
    let b = block(t, title);
    let inner = b.inner(area);
    if p.phases.is_empty() {
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
    let width = inner.width as usize;
    let name_w = p
        .phases
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(6, 16);
    let dur_w = 11;
    let bar_w = width.saturating_sub(2 + name_w + 1 + 1 + dur_w);
    let current = app.current_phase();
    let rows = inner.height as usize;
    // The newest phases matter most: keep the last ones when they do not fit.
    let skip = p.phases.len().saturating_sub(rows);
    let (fill, gap) = t.timeline_symbols();
    let mut lines = Vec::new();
    for (i, s) in p.phases.iter().enumerate().skip(skip) {
        let running = current == Some(i);
        let a = ((s.start_ns as f64 / total as f64) * bar_w as f64).floor() as usize;
        let e = ((s.end_ns as f64 / total as f64) * bar_w as f64).ceil() as usize;
        let a = a.min(bar_w.saturating_sub(1));
        let e = e.clamp(a + 1, bar_w.max(a + 1));
        let len = e - a;
        let after = bar_w.saturating_sub(e);
        let dur = s.end_ns.saturating_sub(s.start_ns);
        let dur_text = if running {
            format!("{}+", fmt_ms(dur))
        } else {
            fmt_ms(dur)
        };
        let name_style = if running { t.highlight() } else { Style::new() };
        lines.push(Line::from(vec![
            Span::styled(
                if running {
                    format!("{} ", t.marker())
                } else {
                    "  ".to_string()
                },
                t.warn(),
            ),
            Span::styled(format!("{:<name_w$}", cut(&s.name, name_w)), name_style),
            Span::raw(" "),
            Span::raw(gap.repeat(a)),
            Span::styled(
                fill.repeat(len),
                if running {
                    t.phase(i).add_modifier(Modifier::BOLD)
                } else {
                    t.phase(i)
                },
            ),
            Span::raw(gap.repeat(after)),
            Span::raw(" "),
            Span::styled(format!("{dur_text:>dur_w$}"), name_style),
        ]));
    }
    inner_lines(f, area, b, lines);
}

/// Exit reasons: bars of the top reasons with totals and rates, for all
/// vCPUs or the one `v` selected.
pub fn draw_exits(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let e = &app.profile.exits;
    let scope = match app.vcpu {
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
    };
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

/// The histogram buckets worth showing: from the first to the last
/// non-empty one, cut to `room` around the fullest.
fn visible_buckets(hist: &[HistBucket], room: usize) -> &[HistBucket] {
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
        let lines = if app.profile.exits.total > 0 {
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
        };
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

/// Page fault rates: guest side and host side, as sparklines.
pub fn draw_faults(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let pf = &app.profile.page_faults;
    let b = block(t, " Page faults per second ");
    let inner = b.inner(area);
    f.render_widget(b, area);
    let (guest, host) = app.fault_rates();
    let halves: [Rect; 2] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(inner);
    let series = [
        (
            "guest",
            pf.guest_total,
            app.rate(pf.guest_total, |p| p.page_faults.guest_total),
            if pf.guest_source.is_empty() {
                "no guest fault source fired".to_string()
            } else {
                short_source(&pf.guest_source).to_string()
            },
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

/// Preallocation threads (or every thread when there are none): where they
/// ran and what they touched.
pub fn draw_threads(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let (rows, prealloc) = app.thread_rows();
    let all = app.profile.threads.len();
    let room = (area.height as usize).saturating_sub(3);
    let more = rows.len().saturating_sub(room);
    let mut title = if prealloc {
        format!(" Preallocation threads ({} of {all})", rows.len())
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
    let keep = |i: usize| !narrow || (i != 2 && i != 6);
    let name_w: usize = if narrow { 12 } else { 16 };
    let header = Row::new(
        [
            "TID", "NAME", "ROLE", "CPUS", "NODE", "PAGES", "MEMORY", "LOCAL",
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
        .map(|th| {
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
        })
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
    ]
    .into_iter()
    .enumerate()
    .filter(|(i, _)| keep(*i))
    .map(|(_, w)| w)
    .collect();
    f.render_widget(Table::new(body, widths).header(header).block(b), area);
}

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

/// The last lines of a console (guest serial, launched command output).
pub fn draw_console(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let Some(c) = &app.console else {
        return;
    };
    let b = block(t, format!(" {} ", c.title));
    let room = b.inner(area).height as usize;
    let lines: Vec<Line> = c.lines[c.lines.len().saturating_sub(room)..]
        .iter()
        .map(|l| Line::raw(l.clone()))
        .collect();
    f.render_widget(Paragraph::new(lines).block(b), area);
}

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

/// Two lines: state, target, sources, lost events, elapsed time; then the
/// keys or the last message.
pub fn draw_status(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let p = &app.profile;
    let sep = || Span::styled(" | ", t.dim());
    let state = if app.finished {
        match p.target.exit_code {
            Some(c) => format!(" ENDED (exit {c}) "),
            None => " ENDED ".to_string(),
        }
    } else if app.paused {
        " PAUSED ".to_string()
    } else {
        " LIVE ".to_string()
    };
    let lost = p.lost_events + p.map_overflows;
    let mut line1 = vec![
        Span::styled(
            state,
            if app.finished || app.paused {
                t.warn().add_modifier(Modifier::REVERSED)
            } else {
                t.good().add_modifier(Modifier::REVERSED)
            },
        ),
        Span::raw(" "),
        Span::styled(app.title.clone(), Style::new().add_modifier(Modifier::BOLD)),
        sep(),
        Span::raw(format!("{:.1} s", p.duration_ns as f64 / 1e9)),
    ];
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
    let keys = if app.finished {
        "target ended: q quit  v vCPU  s sort  e snapshot  ? help"
    } else {
        "q quit  p pause  v vCPU  s sort  e snapshot  ? help"
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

/// The key help, over everything else.
pub fn draw_help(f: &mut Frame, area: Rect, app: &App) {
    let t = &app.theme;
    let text = [
        ("q, Ctrl-C", "quit (the final state stays until q)"),
        ("p, space", "pause or resume refreshing"),
        ("v", "cycle the exit chart: all vCPUs, vCPU 0, 1, ..."),
        ("s", "sort: total, rate, name"),
        ("up/down, k/j", "select the exit reason for the histogram"),
        ("e", "write the profile to ./bootscope-snapshot-<time>.json"),
        ("?, h", "show or hide this help"),
    ];
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
                    format!("  {k:<14}"),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(*d),
            ])
        })
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "  Rates are differences between consecutive snapshots; once the target",
        t.dim(),
    ));
    lines.push(Line::styled(
        "  ends they are averages over the whole profile. Docs: docs/tui.md",
        t.dim(),
    ));
    f.render_widget(Clear, popup);
    f.render_widget(Paragraph::new(lines).block(block(t, " Keys ")), popup);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_count(0), "0");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(1000), "1,000");
        assert_eq!(fmt_count(1234567), "1,234,567");
        assert_eq!(fmt_rate(0.0), "0/s");
        assert_eq!(fmt_rate(2.54), "2.5/s");
        assert_eq!(fmt_rate(1234.4), "1,234/s");
        assert_eq!(fmt_ms(12_345_678), "12.3 ms");
        assert_eq!(fmt_ms(12_345_000_000), "12,345 ms");
        assert_eq!(fmt_ns_short(512, false), "512ns");
        assert_eq!(fmt_ns_short(2048, true), "2us");
        assert_eq!(fmt_ns_short(4_194_304, false), "4ms");
        assert_eq!(fmt_bytes(1 << 30), "1.0 GiB");
        assert_eq!(fmt_bytes(512 << 20), "512 MiB");
        assert_eq!(fmt_bytes(100), "100 B");
        assert_eq!(fmt_cpu_list(&[3, 0, 1, 2, 6, 8, 9]), "0-3,6,8,9");
        assert_eq!(fmt_cpu_list(&[]), "");
        assert_eq!(cut("touch_pages_long_name", 8), "touch_p~");
        assert_eq!(cut("abc", 8), "abc");
    }

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
