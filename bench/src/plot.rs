//! SVG plots, written by hand so any browser or image viewer shows them:
//!
//! * a boot (timeline or profile): one row per phase and per mark on a
//!   millisecond axis, in the manner of `systemd-analyze plot`, then the
//!   exits per reason as horizontal bars;
//! * a benchmark: the median boot of each configuration as stacked phases,
//!   a box plot per time metric (quartiles, min-max whiskers, median line,
//!   mean dot), and the median exits per reason of each configuration.

use std::fmt::Write as _;
use std::path::Path;

use bootscope_model::timeline::{Timeline, TimelineGuest};

use crate::compare::order_key;
use crate::doc::{check_schema, BenchDoc, ConfigResult};
use crate::error::BenchError;
use crate::metrics::{self, MetricKind};

const WIDTH: f64 = 1180.0;
const LEFT: f64 = 260.0;
const PLOT_W: f64 = 560.0;
const ROW_H: f64 = 22.0;
const BAR_H: f64 = 14.0;
const FONT: f64 = 12.0;
/// Rough width of a character of the 12 px sans-serif font, for placing
/// labels.
const CHAR_W: f64 = 6.8;

const PHASE_COLORS: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
const CONFIG_COLORS: [&str; 2] = ["#4e79a7", "#f28e2b"];

/// Renders `bytes` (a timeline, profile or bench document read from
/// `path`) as an SVG document.
pub fn render(bytes: &[u8], path: &Path) -> Result<String, BenchError> {
    const HINT: &str = "give a bench file (bootscope bench --output), a timeline \
                        (bootscope run --timeline) or a profile (bootscope profile --output)";
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| BenchError::NotJson {
            path: path.into(),
            hint: HINT,
            source,
        })?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some("bootscope.bench") => Ok(bench_svg(&BenchDoc::parse(bytes, path)?, path)),
        Some("bootscope.timeline") => {
            check_schema(&value, path, "bootscope.timeline", 1, HINT)?;
            let timeline = Timeline::parse(&value).map_err(|e| BenchError::Malformed {
                path: path.into(),
                schema: "bootscope.timeline",
                detail: e.to_string(),
            })?;
            Ok(boot_svg(&Boot::from_timeline(&timeline), path))
        }
        Some("bootscope.profile") => {
            crate::doc::check_schema_versions(&value, path, "bootscope.profile", 1, 2, HINT)?;
            Ok(boot_svg(&Boot::from_profile(&value), path))
        }
        other => Err(BenchError::WrongSchema {
            path: path.into(),
            found: other.unwrap_or("(none)").into(),
            expected: "bootscope.bench, bootscope.timeline or bootscope.profile".into(),
            hint: HINT,
        }),
    }
}

/// A boot, from either document.
struct Boot {
    title: String,
    subtitle: String,
    /// The profiled command line.
    command: Option<String>,
    phases: Vec<(String, f64, f64)>,
    marks: Vec<(String, f64)>,
    exits_title: String,
    exits: Vec<(String, f64)>,
}

impl Boot {
    fn from_timeline(t: &Timeline) -> Self {
        let mut phases: Vec<(String, f64, f64)> = t
            .phases
            .iter()
            .map(|p| (p.name.clone(), p.start_ns as f64, p.end_ns as f64))
            .collect();
        // A systemd guest's critical chain to its workload, under `userspace`
        // (deepest first: the order the units became active).
        if let Some(units) = &t.units {
            for link in units.critical_chain.iter().rev() {
                let start = link.active_ns.saturating_sub(link.duration_ns);
                phases.push((
                    format!("chain: {}", link.name),
                    start as f64,
                    link.active_ns as f64,
                ));
            }
        }
        let stats = t.kvm_stats.clone().unwrap_or_default();
        let mut exits: Vec<(String, f64)> = stats
            .iter()
            .filter(|(k, v)| k.ends_with("_exits") && **v > 0)
            .map(|(k, v)| (k.clone(), *v as f64))
            .collect();
        let total = stats.get("exits").map(|&t| t as f64);
        let mut exits_title = "KVM exits by reason (KVM's own statistics)".to_string();
        if let Some(t) = total {
            let named: f64 = exits.iter().map(|e| e.1).sum();
            if t > named {
                exits.push(("other (no KVM counter)".into(), t - named));
            }
            let _ = write!(exits_title, ", {} in all", group_digits(t));
        }
        let no_guest = TimelineGuest::default();
        let g = t.guest.as_ref().unwrap_or(&no_guest);
        let marks = by_time(
            t.marks
                .iter()
                .map(|m| (m.name.clone(), m.t_ns as f64))
                .collect(),
        );
        fn or<'s>(s: &'s str, absent: &'s str) -> &'s str {
            if s.is_empty() {
                absent
            } else {
                s
            }
        }
        Self {
            title: format!("Boot timeline: {}", or(&g.kernel, "(kernel)")),
            subtitle: format!(
                "host KVM {} · {} vCPU(s) · {} MiB · outcome: {}",
                or(&t.host_kvm, "?"),
                g.vcpus.unwrap_or(0),
                g.memory_bytes.unwrap_or(0) >> 20,
                or(t.outcome.as_ref().map_or("", |o| &o.detail), "?")
            ),
            command: None,
            phases,
            marks,
            exits_title,
            exits,
        }
    }

    fn from_profile(v: &serde_json::Value) -> Self {
        let phases = v["phases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["name"].as_str()?.to_string(),
                    p["start_ns"].as_f64()?,
                    p["end_ns"].as_f64()?,
                ))
            })
            .collect();
        let exits = v["exits"]["by_reason"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r["reason"].as_str()?.to_string(), r["count"].as_f64()?)))
            .collect();
        let t = &v["target"];
        Self {
            title: format!(
                "Profile: pid {} ({})",
                t["pid"],
                t["name"].as_str().unwrap_or("?")
            ),
            subtitle: format!(
                "host KVM {} · {} CPUs · host page faults {} · guest page faults {}",
                v["host"]["kvm"].as_str().unwrap_or("?"),
                v["host"]["cpus"],
                v["page_faults"]["host_total"],
                v["page_faults"]["guest_total"],
            ),
            command: t["command"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .filter_map(|a| a.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .filter(|c| !c.is_empty()),
            phases,
            marks: marks(v),
            exits_title: format!(
                "Exits by reason ({}), {} in all",
                v["exits"]["source"].as_str().unwrap_or("?"),
                group_digits(v["exits"]["total"].as_f64().unwrap_or(0.0))
            ),
            exits,
        }
    }
}

fn marks(v: &serde_json::Value) -> Vec<(String, f64)> {
    by_time(
        v["marks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| Some((m["name"].as_str()?.to_string(), m["t_ns"].as_f64()?)))
            .collect(),
    )
}

/// Marks sorted by their time.
fn by_time(mut marks: Vec<(String, f64)>) -> Vec<(String, f64)> {
    marks.sort_by(|a, b| a.1.total_cmp(&b.1));
    marks
}

/// 12345678 -> "12,345,678".
pub fn group_digits(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Milliseconds with sensible precision.
fn ms(ns: f64) -> String {
    let v = ns / 1e6;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 1.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.3} ms")
    }
}

/// An axis tick in milliseconds, with as many decimals as the step needs.
fn tick_label(t_ns: f64, step_ns: f64) -> String {
    let step = step_ns / 1e6;
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{:.decimals$} ms", t_ns / 1e6)
}

/// A step of 1, 2 or 5 times a power of ten giving at most `max_ticks`.
fn nice_step(range: f64, max_ticks: f64) -> f64 {
    if range <= 0.0 || !range.is_finite() {
        return 1.0;
    }
    let raw = range / max_ticks;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// A tiny SVG writer.
struct Svg {
    body: String,
    y: f64,
}

impl Svg {
    fn new() -> Self {
        Self {
            body: String::new(),
            y: 20.0,
        }
    }

    fn text(&mut self, x: f64, y: f64, s: &str, extra: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" {extra}>{}</text>"#,
            esc(s)
        );
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{fill}"><title>{}</title></rect>"#,
            w.max(1.0),
            esc(title)
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, style: &str) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {style}/>"#
        );
    }

    fn heading(&mut self, s: &str, size: f64) {
        self.y += size + 8.0;
        let y = self.y;
        self.text(
            16.0,
            y,
            s,
            &format!(r#"font-size="{size}" font-weight="bold""#),
        );
        self.y += 6.0;
    }

    fn note(&mut self, s: &str) {
        self.y += FONT + 4.0;
        let y = self.y;
        self.text(16.0, y, &fit(s, WIDTH - 32.0), r##"fill="#555""##);
    }

    /// A millisecond axis over [0, max_ns] at the current height, with grid
    /// lines `grid_h` tall below it.
    fn time_axis(&mut self, lo_ns: f64, hi_ns: f64, grid_h: f64) -> Scale {
        let scale = Scale {
            lo: lo_ns,
            hi: hi_ns.max(lo_ns + 1.0),
        };
        self.y += 18.0;
        let y = self.y;
        let step = nice_step((scale.hi - scale.lo) / 1e6, 8.0) * 1e6;
        let mut t = (scale.lo / step).ceil() * step;
        while t <= scale.hi + step * 1e-9 {
            let x = scale.x(t);
            self.line(x, y, x, y + grid_h, r##"stroke="#ddd""##);
            self.text(
                x,
                y - 4.0,
                &tick_label(t, step),
                r#"text-anchor="middle" font-size="11""#,
            );
            t += step;
        }
        self.line(LEFT, y, LEFT + PLOT_W, y, r##"stroke="#888""##);
        self.y += 4.0;
        scale
    }

    fn finish(self, title: &str) -> String {
        let height = self.y + 24.0;
        format!(
            r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="{FONT}">
<title>{}</title>
<rect width="100%" height="100%" fill="#fff"/>
{}</svg>
"##,
            esc(title),
            self.body
        )
    }
}

/// Maps a value range onto the plot area.
#[derive(Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
}

impl Scale {
    fn x(&self, v: f64) -> f64 {
        LEFT + (v - self.lo) / (self.hi - self.lo) * PLOT_W
    }
}

fn esc(s: &str) -> String {
    crate::compare::xml_escape(s)
}

/// Cuts long labels to fit the label column.
fn fit(s: &str, width: f64) -> String {
    let max = (width / CHAR_W) as usize;
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A label beside a bar: right of it, or left of its start when there is
/// no room on the right.
fn bar_label(svg: &mut Svg, x0: f64, x1: f64, y: f64, s: &str) {
    let w = s.chars().count() as f64 * CHAR_W;
    if x1 + 6.0 + w <= WIDTH - 8.0 {
        svg.text(x1 + 6.0, y, s, "");
    } else {
        svg.text(x0 - 6.0, y, s, r#"text-anchor="end""#);
    }
}

fn boot_svg(b: &Boot, path: &Path) -> String {
    let mut svg = Svg::new();
    svg.heading(&b.title, 16.0);
    svg.note(&b.subtitle);
    if let Some(c) = &b.command {
        svg.note(&format!("command: {c}"));
    }
    svg.note(&format!("from {}", path.display()));
    let end = b
        .phases
        .iter()
        .map(|p| p.2)
        .chain(b.marks.iter().map(|m| m.1))
        .fold(0.0, f64::max);
    let total = b.phases.iter().map(|p| p.2).fold(0.0, f64::max);
    svg.heading("Phases and marks", 14.0);
    let rows = (b.phases.len() + b.marks.len()) as f64;
    let scale = svg.time_axis(0.0, end, rows * ROW_H + 4.0);
    for (i, (name, start, stop)) in b.phases.iter().enumerate() {
        let y = svg.y;
        let color = PHASE_COLORS[i % PHASE_COLORS.len()];
        svg.text(
            LEFT - 8.0,
            y + BAR_H - 2.0,
            &fit(name, LEFT - 16.0),
            r#"text-anchor="end" font-weight="bold""#,
        );
        let (x0, x1) = (scale.x(*start), scale.x(*stop));
        let d = stop - start;
        let share = if total > 0.0 { d / total * 100.0 } else { 0.0 };
        svg.rect(
            x0,
            y + 2.0,
            x1 - x0,
            BAR_H,
            color,
            &format!("{name}: {} to {}", ms(*start), ms(*stop)),
        );
        bar_label(
            &mut svg,
            x0,
            x1.max(x0 + 1.0),
            y + BAR_H - 2.0,
            &format!("{} ({share:.1} %)", ms(d)),
        );
        svg.y += ROW_H;
    }
    for (name, t) in &b.marks {
        let y = svg.y;
        svg.text(
            LEFT - 8.0,
            y + BAR_H - 2.0,
            &fit(name, LEFT - 16.0),
            r##"text-anchor="end" fill="#333""##,
        );
        let x = scale.x(*t);
        let mid = y + 2.0 + BAR_H / 2.0;
        let _ = writeln!(
            svg.body,
            r##"<path d="M{x:.1},{:.1} l5,{:.1} l-5,{:.1} l-5,{:.1} z" fill="#333"><title>{}</title></path>"##,
            mid - 6.0,
            6.0,
            6.0,
            -6.0,
            esc(&format!("{name} at {}", ms(*t)))
        );
        bar_label(&mut svg, x - 6.0, x + 4.0, y + BAR_H - 2.0, &ms(*t));
        svg.y += ROW_H;
    }
    if b.phases.is_empty() && b.marks.is_empty() {
        svg.note("(no phases or marks in this file)");
    }
    exit_bars(&mut svg, &b.exits_title, &b.exits);
    svg.finish(&b.title)
}

/// Horizontal bars, largest first.
fn exit_bars(svg: &mut Svg, title: &str, exits: &[(String, f64)]) {
    svg.y += 10.0;
    svg.heading(title, 14.0);
    let mut sorted: Vec<&(String, f64)> = exits.iter().collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    if sorted.is_empty() {
        svg.note("(no exit counts in this file)");
        return;
    }
    let max = sorted[0].1.max(1.0);
    svg.y += 6.0;
    for (name, count) in sorted {
        let y = svg.y;
        svg.text(
            LEFT - 8.0,
            y + BAR_H - 2.0,
            &fit(name, LEFT - 16.0),
            r#"text-anchor="end""#,
        );
        let w = count / max * PLOT_W;
        svg.rect(
            LEFT,
            y + 2.0,
            w,
            BAR_H,
            "#59a14f",
            &format!("{name}: {}", group_digits(*count)),
        );
        svg.text(
            LEFT + w.max(1.0) + 6.0,
            y + BAR_H - 2.0,
            &group_digits(*count),
            "",
        );
        svg.y += ROW_H;
    }
}

fn bench_svg(doc: &BenchDoc, path: &Path) -> String {
    let mut svg = Svg::new();
    let title = format!(
        "Benchmark: {} run(s) + {} warm-up per configuration{}",
        doc.settings.runs,
        doc.settings.warmup,
        if doc.settings.interleaved {
            ", interleaved"
        } else {
            ""
        }
    );
    svg.heading(&title, 16.0);
    let m = &doc.machine;
    svg.note(&format!(
        "{} · {} · {} CPUs · {} GiB · kernel {} · host KVM {} · {}",
        doc.created,
        if m.cpu_model.is_empty() {
            "?"
        } else {
            &m.cpu_model
        },
        m.cpus,
        m.memory_bytes >> 30,
        m.kernel_release,
        m.host_kvm,
        path.display()
    ));
    for (i, c) in doc.configs.iter().enumerate() {
        svg.y += FONT + 6.0;
        let y = svg.y;
        svg.rect(16.0, y - 10.0, 12.0, 12.0, CONFIG_COLORS[i % 2], &c.label);
        let cmd = c.command.join(" ");
        svg.text(
            34.0,
            y,
            &fit(
                &format!(
                    "{} ({}, {} ok, {} failed): {}",
                    c.label,
                    match c.kind {
                        crate::doc::ConfigKind::Bootscope => "bootscope run",
                        crate::doc::ConfigKind::Command => "command",
                    },
                    c.measured().count(),
                    c.failures(),
                    cmd
                ),
                WIDTH - 50.0,
            ),
            "",
        );
    }
    median_timelines(&mut svg, doc);
    box_plots(&mut svg, doc);
    bench_exits(&mut svg, doc);
    svg.finish(&title)
}

/// Median of a metric in a configuration.
fn median_of(c: &ConfigResult, metric: &str) -> Option<f64> {
    c.summary.get(metric).map(|s| s.stats.median)
}

fn phases_in_order(doc: &BenchDoc) -> Vec<String> {
    let mut names: Vec<String> = doc
        .configs
        .iter()
        .flat_map(|c| c.summary.keys())
        .filter(|k| k.starts_with("phase:"))
        .cloned()
        .collect();
    names.sort_by_key(|k| order_key(k));
    names.dedup();
    names
}

/// Each configuration's median boot: its phases' medians end to end.
fn median_timelines(svg: &mut Svg, doc: &BenchDoc) {
    let phases = phases_in_order(doc);
    let totals: Vec<f64> = doc
        .configs
        .iter()
        .map(|c| {
            let sum: f64 = phases.iter().filter_map(|p| median_of(c, p)).sum();
            sum.max(median_of(c, "wall").unwrap_or(0.0))
        })
        .collect();
    let end = totals.iter().cloned().fold(0.0, f64::max);
    if end <= 0.0 {
        return;
    }
    svg.y += 10.0;
    svg.heading(
        "Median boot (phases end to end; wall time as a thin bar)",
        14.0,
    );
    let scale = svg.time_axis(0.0, end, doc.configs.len() as f64 * (ROW_H * 2.0) + 4.0);
    for (i, c) in doc.configs.iter().enumerate() {
        let y = svg.y;
        svg.text(
            LEFT - 8.0,
            y + BAR_H - 2.0,
            &fit(&c.label, LEFT - 16.0),
            r#"text-anchor="end" font-weight="bold""#,
        );
        let mut t = 0.0;
        for (pi, p) in phases.iter().enumerate() {
            let Some(d) = median_of(c, p) else { continue };
            let (x0, x1) = (scale.x(t), scale.x(t + d));
            let name = p.trim_start_matches("phase:");
            svg.rect(
                x0,
                y + 2.0,
                x1 - x0,
                BAR_H,
                PHASE_COLORS[pi % PHASE_COLORS.len()],
                &format!("{name}: median {}", ms(d)),
            );
            let label = format!("{name} {}", ms(d));
            if x1 - x0 > label.chars().count() as f64 * CHAR_W + 6.0 {
                svg.text(x0 + 3.0, y + BAR_H - 2.0, &label, r##"fill="#fff""##);
            }
            t += d;
        }
        if let Some(w) = median_of(c, "wall") {
            let x1 = scale.x(w);
            svg.rect(
                LEFT,
                y + BAR_H + 5.0,
                x1 - LEFT,
                4.0,
                CONFIG_COLORS[i % 2],
                &format!("wall: median {}", ms(w)),
            );
            bar_label(svg, LEFT, x1, y + BAR_H + 10.0, &format!("wall {}", ms(w)));
        } else if t > 0.0 {
            bar_label(svg, LEFT, scale.x(t), y + BAR_H - 2.0, &ms(t));
        }
        svg.y += ROW_H * 2.0;
    }
    // A legend of the phases that are too narrow to carry their names.
    let mut x = LEFT;
    let y = svg.y + 2.0;
    for (pi, p) in phases.iter().enumerate() {
        let name = p.trim_start_matches("phase:");
        let w = name.chars().count() as f64 * CHAR_W + 26.0;
        if x + w > WIDTH - 10.0 {
            break;
        }
        svg.rect(
            x,
            y,
            10.0,
            10.0,
            PHASE_COLORS[pi % PHASE_COLORS.len()],
            name,
        );
        svg.text(x + 14.0, y + 9.5, name, r#"font-size="11""#);
        x += w;
    }
    svg.y += 18.0;
}

/// One row per time metric, each on its own scale.
fn box_plots(svg: &mut Svg, doc: &BenchDoc) {
    let mut names: Vec<String> = doc
        .configs
        .iter()
        .flat_map(|c| c.summary.keys())
        .filter(|k| metrics::kind(k) == MetricKind::Time)
        .cloned()
        .collect();
    names.sort_by_key(|k| order_key(k));
    names.dedup();
    if names.is_empty() {
        return;
    }
    svg.y += 10.0;
    svg.heading(
        "Times per run: box = quartiles, whiskers = min to max, line = median, dot = mean",
        14.0,
    );
    svg.note("each row has its own scale, from its smallest to its largest value");
    svg.y += 8.0;
    let n = doc.configs.len() as f64;
    for name in &names {
        let per: Vec<Option<&crate::doc::MetricSummary>> =
            doc.configs.iter().map(|c| c.summary.get(name)).collect();
        let lo = per
            .iter()
            .flatten()
            .map(|s| s.stats.min)
            .fold(f64::INFINITY, f64::min);
        let hi = per
            .iter()
            .flatten()
            .map(|s| s.stats.max)
            .fold(f64::NEG_INFINITY, f64::max);
        let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.001).max(1.0);
        let scale = Scale {
            lo: lo - pad,
            hi: hi + pad,
        };
        let top = svg.y;
        let h = n * ROW_H;
        svg.text(
            LEFT - 8.0,
            top + h / 2.0 + 4.0,
            &fit(&metrics::display_name(name), LEFT - 16.0),
            r#"text-anchor="end" font-weight="bold""#,
        );
        svg.rect(LEFT, top, PLOT_W, h, "#f6f6f6", name);
        svg.text(
            LEFT,
            top + h + 11.0,
            &ms(lo),
            r##"font-size="10" fill="#555""##,
        );
        svg.text(
            LEFT + PLOT_W,
            top + h + 11.0,
            &ms(hi),
            r##"font-size="10" fill="#555" text-anchor="end""##,
        );
        for (i, s) in per.iter().enumerate() {
            let y = top + i as f64 * ROW_H + ROW_H / 2.0;
            let color = CONFIG_COLORS[i % 2];
            let Some(s) = s else {
                svg.text(LEFT + 6.0, y + 4.0, "(not measured)", r##"fill="#888""##);
                continue;
            };
            let st = &s.stats;
            let style = format!(r#"stroke="{color}" stroke-width="1.5""#);
            svg.line(scale.x(st.min), y, scale.x(st.q1), y, &style);
            svg.line(scale.x(st.q3), y, scale.x(st.max), y, &style);
            svg.line(scale.x(st.min), y - 5.0, scale.x(st.min), y + 5.0, &style);
            svg.line(scale.x(st.max), y - 5.0, scale.x(st.max), y + 5.0, &style);
            let (bx0, bx1) = (scale.x(st.q1), scale.x(st.q3));
            let _ = writeln!(
                svg.body,
                r#"<rect x="{bx0:.1}" y="{:.1}" width="{:.1}" height="12" fill="{color}" fill-opacity="0.35" stroke="{color}"><title>{}</title></rect>"#,
                y - 6.0,
                (bx1 - bx0).max(1.0),
                esc(&format!("{name}: q1 {} q3 {}", ms(st.q1), ms(st.q3)))
            );
            let xm = scale.x(st.median);
            svg.line(
                xm,
                y - 7.0,
                xm,
                y + 7.0,
                &format!(r#"stroke="{color}" stroke-width="2.5""#),
            );
            let _ = writeln!(
                svg.body,
                r##"<circle cx="{:.1}" cy="{y:.1}" r="3" fill="#222"/>"##,
                scale.x(st.mean)
            );
            svg.text(
                LEFT + PLOT_W + 10.0,
                y + 4.0,
                &format!(
                    "{}: median {}, mean {} ± {}",
                    doc.configs[i].label,
                    ms(st.median),
                    ms(st.mean),
                    ms(st.sd),
                ),
                &format!(r#"fill="{color}""#),
            );
        }
        svg.y += h + 20.0;
    }
}

/// Median exits per reason, one bar per configuration.
fn bench_exits(svg: &mut Svg, doc: &BenchDoc) {
    let mut names: Vec<String> = doc
        .configs
        .iter()
        .flat_map(|c| c.summary.iter())
        .filter(|(k, s)| metrics::is_exit_count(k) && s.stats.median > 0.0)
        .map(|(k, _)| k.clone())
        .collect();
    names.sort_by_key(|k| order_key(k));
    names.dedup();
    let max = names
        .iter()
        .flat_map(|n| doc.configs.iter().filter_map(move |c| median_of(c, n)))
        .fold(0.0, f64::max);
    svg.y += 10.0;
    let totals: Vec<String> = doc
        .configs
        .iter()
        .filter_map(|c| {
            median_of(c, "exits:total").map(|t| format!("{} {}", c.label, group_digits(t)))
        })
        .collect();
    let mut title = "Exits per reason (medians)".to_string();
    if !totals.is_empty() {
        let _ = write!(title, "; all exits: {}", totals.join(", "));
    }
    svg.heading(&title, 14.0);
    if names.is_empty() || max <= 0.0 {
        svg.note("(no exit counts: the runs were commands without KVM statistics, or none exited)");
        return;
    }
    svg.y += 6.0;
    for name in &names {
        let top = svg.y;
        let rows = doc.configs.len() as f64;
        svg.text(
            LEFT - 8.0,
            top + rows * (BAR_H + 2.0) / 2.0 + 6.0,
            &fit(&metrics::display_name(name), LEFT - 16.0),
            r#"text-anchor="end""#,
        );
        for (i, c) in doc.configs.iter().enumerate() {
            let y = top + i as f64 * (BAR_H + 2.0);
            let v = median_of(c, name).unwrap_or(0.0);
            let w = v / max * PLOT_W;
            svg.rect(
                LEFT,
                y,
                w,
                BAR_H,
                CONFIG_COLORS[i % 2],
                &format!("{}: {name} median {}", c.label, group_digits(v)),
            );
            svg.text(
                LEFT + w.max(1.0) + 6.0,
                y + BAR_H - 3.0,
                &format!("{} ({})", group_digits(v), c.label),
                r#"font-size="11""#,
            );
        }
        svg.y += rows * (BAR_H + 2.0) + 8.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_digits() {
        assert_eq!(nice_step(100.0, 8.0), 20.0);
        assert_eq!(nice_step(15_000.0, 8.0), 2000.0);
        assert_eq!(nice_step(0.9, 8.0), 0.2);
        assert_eq!(group_digits(1234567.0), "1,234,567");
        assert_eq!(group_digits(12.0), "12");
        assert_eq!(fit("abcdef", CHAR_W * 4.0), "abc…");
        assert_eq!(tick_label(0.0, 100e6), "0 ms");
        assert_eq!(tick_label(2.5e5, 5e4), "0.25 ms");
    }

    #[test]
    fn timeline_plot_has_rows_and_bars() {
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 1, "host_kvm": "svm",
            "guest": {"kernel": "/boot/vmlinuz", "vcpus": 1, "memory_bytes": 268435456},
            "outcome": {"detail": "halted <cleanly>"},
            "marks": [{"name": "vmm: process start", "t_ns": 0},
                      {"name": "serial: kernel banner", "t_ns": 5000000}],
            "phases": [{"name": "kernel", "start_ns": 1000000, "end_ns": 90000000, "duration_ns": 89000000}],
            "kvm_stats": {"exits": 100, "io_exits": 60, "halt_exits": 10}
        });
        let svg = render(t.to_string().as_bytes(), Path::new("t.json")).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains(">kernel</text>"));
        assert!(svg.contains("serial: kernel banner"));
        assert!(svg.contains("halted &lt;cleanly&gt;"));
        assert!(svg.contains("other (no KVM counter)"));
        assert!(svg.contains(">60</text>"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn a_systemd_guest_s_critical_chain_is_drawn_under_userspace() {
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 2,
            "marks": [], "phases": [{"name": "userspace", "start_ns": 0, "end_ns": 9000000, "duration_ns": 9000000}],
            "units": {"source": "t", "units": [], "chain_target": "w.service", "critical_chain": [
                {"name": "w.service", "active_ns": 8000000, "duration_ns": 0},
                {"name": "multi-user.target", "active_ns": 7000000, "duration_ns": 0},
                {"name": "slow.service", "active_ns": 6000000, "duration_ns": 4000000}]}
        });
        let svg = render(t.to_string().as_bytes(), Path::new("t.json")).unwrap();
        let at = |s: &str| svg.find(s).unwrap_or_else(|| panic!("{s} missing"));
        assert!(at(">chain: slow.service<") < at(">chain: w.service<"));
        assert!(
            svg.contains("chain: slow.service: 2.0 ms to 6.0 ms"),
            "{svg}"
        );
    }

    #[test]
    fn plot_refuses_other_files() {
        let e = render(br#"{"schema":"x","version":1}"#, Path::new("x.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected bootscope.bench, bootscope.timeline or bootscope.profile"),
            "{e}"
        );
        let e = render(
            br#"{"schema":"bootscope.timeline","version":9}"#,
            Path::new("x.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("version 9"), "{e}");
    }
}
