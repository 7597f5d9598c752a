//! The SVG writer and the layout, scales and number formats the plots
//! share.

use std::fmt::Write as _;

pub(super) const WIDTH: f64 = 1180.0;
pub(super) const LEFT: f64 = 260.0;
pub(super) const PLOT_W: f64 = 560.0;
pub(super) const ROW_H: f64 = 22.0;
pub(super) const BAR_H: f64 = 14.0;
pub(super) const FONT: f64 = 12.0;
/// Rough width of a character of the 12 px sans-serif font, for placing
/// labels.
pub(super) const CHAR_W: f64 = 6.8;

pub(super) const PHASE_COLORS: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
pub(super) const CONFIG_COLORS: [&str; 2] = ["#4e79a7", "#f28e2b"];

/// 12345678 -> "12,345,678".
pub fn group_digits(v: f64) -> String {
    let out = bootscope_model::human::group_digit_text(&format!("{:.0}", v.abs()));
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Milliseconds with sensible precision.
pub(super) fn ms(ns: f64) -> String {
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
pub(super) fn tick_label(t_ns: f64, step_ns: f64) -> String {
    let step = step_ns / 1e6;
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{:.decimals$} ms", t_ns / 1e6)
}

/// A step of 1, 2 or 5 times a power of ten giving at most `max_ticks`.
pub(super) fn nice_step(range: f64, max_ticks: f64) -> f64 {
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
pub(super) struct Svg {
    pub(super) body: String,
    pub(super) y: f64,
}

impl Svg {
    pub(super) fn new() -> Self {
        Self {
            body: String::new(),
            y: 20.0,
        }
    }

    pub(super) fn text(&mut self, x: f64, y: f64, s: &str, extra: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" {extra}>{}</text>"#,
            esc(s)
        );
    }

    pub(super) fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{fill}"><title>{}</title></rect>"#,
            w.max(1.0),
            esc(title)
        );
    }

    pub(super) fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, style: &str) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {style}/>"#
        );
    }

    pub(super) fn heading(&mut self, s: &str, size: f64) {
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

    pub(super) fn note(&mut self, s: &str) {
        self.y += FONT + 4.0;
        let y = self.y;
        self.text(16.0, y, &fit(s, WIDTH - 32.0), r##"fill="#555""##);
    }

    /// A millisecond axis over [0, max_ns] at the current height, with grid
    /// lines `grid_h` tall below it.
    pub(super) fn time_axis(&mut self, lo_ns: f64, hi_ns: f64, grid_h: f64) -> Scale {
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

    pub(super) fn finish(self, title: &str) -> String {
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
pub(super) struct Scale {
    pub(super) lo: f64,
    pub(super) hi: f64,
}

impl Scale {
    pub(super) fn x(&self, v: f64) -> f64 {
        LEFT + (v - self.lo) / (self.hi - self.lo) * PLOT_W
    }
}

pub(super) fn esc(s: &str) -> String {
    crate::compare::xml_escape(s)
}

/// Cuts long labels to fit the label column.
pub(super) fn fit(s: &str, width: f64) -> String {
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
pub(super) fn bar_label(svg: &mut Svg, x0: f64, x1: f64, y: f64, s: &str) {
    let w = s.chars().count() as f64 * CHAR_W;
    if x1 + 6.0 + w <= WIDTH - 8.0 {
        svg.text(x1 + 6.0, y, s, "");
    } else {
        svg.text(x0 - 6.0, y, s, r#"text-anchor="end""#);
    }
}
