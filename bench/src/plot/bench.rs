//! A benchmark: the median boot of each configuration as stacked phases, a
//! box plot per time metric, the median exits per reason.

use std::fmt::Write as _;
use std::path::Path;

use crate::compare::order_key;
use crate::doc::{BenchDoc, ConfigResult};
use crate::metrics::{self, MetricKind};

use super::svg::*;

pub(super) fn bench_svg(doc: &BenchDoc, path: &Path) -> String {
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
pub(super) fn median_of(c: &ConfigResult, metric: &str) -> Option<f64> {
    c.summary.get(metric).map(|s| s.stats.median)
}

pub(super) fn phases_in_order(doc: &BenchDoc) -> Vec<String> {
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
pub(super) fn median_timelines(svg: &mut Svg, doc: &BenchDoc) {
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
pub(super) fn box_plots(svg: &mut Svg, doc: &BenchDoc) {
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
            box_row(svg, &scale, y, color, name, &doc.configs[i].label, &s.stats);
        }
        svg.y += h + 20.0;
    }
}

/// One configuration's box, whiskers, median and mean on a metric's row.
fn box_row(
    svg: &mut Svg,
    scale: &Scale,
    y: f64,
    color: &str,
    name: &str,
    label: &str,
    st: &bootscope_model::bench::Summary,
) {
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
            label,
            ms(st.median),
            ms(st.mean),
            ms(st.sd),
        ),
        &format!(r#"fill="{color}""#),
    );
}

/// Median exits per reason, one bar per configuration.
pub(super) fn bench_exits(svg: &mut Svg, doc: &BenchDoc) {
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
