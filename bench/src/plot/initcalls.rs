//! A timeline's initcalls (`run --initcalls`) nested under `kernel`, in
//! the manner of the kernel's bootgraph.pl: on an axis over the kernel
//! phase, one row per initcall level (in the order the levels ran) with
//! each of its initcalls drawn where and as long as it ran, and under each
//! level a labelled row for each of its slowest initcalls.

use bootscope_model::initcalls::{Initcall, InitcallsDoc};

use super::svg::*;

/// Slow initcalls labelled per level.
pub(super) const LABELLED_PER_LEVEL: usize = 3;
/// An initcall is labelled only if it took at least this share of the
/// axis's span.
const LABEL_MIN_SHARE: f64 = 0.01;
/// Indentation per nesting depth of the row labels.
const INDENT: f64 = 14.0;
const LEVEL_SPAN_COLOR: &str = "#dfe6ee";
const FAILED_COLOR: &str = "#d62728";

/// One initcall (docs/timeline-schema.md).
pub(super) type Call = Initcall;

/// One level: its span and its initcalls in the order they ran.
pub(super) struct Level {
    name: String,
    start_ns: f64,
    end_ns: f64,
    calls: Vec<Call>,
}

/// The initcalls of a boot, by level.
pub(super) struct Initcalls {
    levels: Vec<Level>,
}

impl Initcalls {
    /// The initcalls of a timeline document; None without any (no
    /// `--initcalls`, or `error` says why none were recorded).
    pub(super) fn from_timeline(obj: Option<&InitcallsDoc>) -> Option<Self> {
        let obj = obj?;
        let mut levels: Vec<Level> = obj
            .levels
            .iter()
            .map(|l| Level {
                name: l.level.clone(),
                start_ns: l.start_ns as f64,
                end_ns: l.end_ns as f64,
                calls: Vec::new(),
            })
            .collect();
        for c in obj.initcalls.iter().cloned() {
            let (start, end) = (c.start_ns as f64, (c.start_ns + c.duration_ns) as f64);
            match levels.iter_mut().find(|l| l.name == c.level) {
                Some(l) => {
                    l.start_ns = l.start_ns.min(start);
                    l.end_ns = l.end_ns.max(end);
                    l.calls.push(c);
                }
                // A level the document did not list: its span from its calls.
                None => levels.push(Level {
                    name: c.level.clone(),
                    start_ns: start,
                    end_ns: end,
                    calls: vec![c],
                }),
            }
        }
        levels.retain(|l| !l.calls.is_empty());
        for l in &mut levels {
            l.calls.sort_by_key(|c| c.start_ns);
        }
        levels.sort_by(|a, b| a.start_ns.total_cmp(&b.start_ns));
        (!levels.is_empty()).then_some(Self { levels })
    }

    fn count(&self) -> usize {
        self.levels.iter().map(|l| l.calls.len()).sum()
    }

    /// The slowest initcalls of `level` worth a label on an axis `span_ns`
    /// wide, slowest first.
    fn labelled(level: &Level, span_ns: f64) -> Vec<&Call> {
        let mut calls: Vec<&Call> = level
            .calls
            .iter()
            .filter(|c| c.duration_ns as f64 >= span_ns * LABEL_MIN_SHARE)
            .collect();
        calls.sort_by_key(|c| std::cmp::Reverse(c.duration_ns));
        calls.truncate(LABELLED_PER_LEVEL);
        calls
    }
}

/// A row label at nesting `depth`, left-aligned.
fn row_label(svg: &mut Svg, depth: usize, y: f64, s: &str, extra: &str) {
    let x = 16.0 + depth as f64 * INDENT;
    svg.text(x, y + BAR_H - 2.0, &fit(s, LEFT - 8.0 - x), extra);
}

/// Draws the initcalls under `kernel` (its span and colour), on an axis
/// over the kernel phase (or the initcalls' span without one).
pub(super) fn draw(svg: &mut Svg, ic: &Initcalls, kernel: Option<(f64, f64, &str)>) {
    let first = ic
        .levels
        .iter()
        .map(|l| l.start_ns)
        .fold(f64::MAX, f64::min);
    let last = ic.levels.iter().map(|l| l.end_ns).fold(0.0, f64::max);
    let (lo, hi) = match kernel {
        Some((s, e, _)) => (s.min(first), e.max(last)),
        None => (first, last),
    };
    let span = (hi - lo).max(1.0);
    svg.y += 10.0;
    svg.heading(
        &format!(
            "Kernel initcalls by level ({} initcalls in {} levels)",
            group_digits(ic.count() as f64),
            ic.levels.len()
        ),
        14.0,
    );
    svg.note(&format!(
        "each initcall drawn in its level's row where it ran (failed ones red); \
         labelled: each level's {LABELLED_PER_LEVEL} slowest of at least {:.0} % of the axis",
        LABEL_MIN_SHARE * 100.0
    ));
    let labelled: Vec<Vec<&Call>> = ic
        .levels
        .iter()
        .map(|l| Initcalls::labelled(l, span))
        .collect();
    let rows = 1 + ic.levels.len() + labelled.iter().map(Vec::len).sum::<usize>();
    let scale = svg.time_axis(lo, hi, rows as f64 * ROW_H + 4.0);
    // `kernel` itself, the parent of the rows below.
    let y = svg.y;
    let (k0, k1, color) = kernel.unwrap_or((first, last, PHASE_COLORS[0]));
    row_label(svg, 0, y, "kernel", r#"font-weight="bold""#);
    let (x0, x1) = (scale.x(k0), scale.x(k1));
    svg.rect(x0, y + 2.0, x1 - x0, BAR_H, color, "kernel");
    svg.y += ROW_H;
    for (i, (level, slow)) in ic.levels.iter().zip(&labelled).enumerate() {
        level_row(svg, &scale, level, PHASE_COLORS[i % PHASE_COLORS.len()]);
        for c in slow {
            call_row(svg, &scale, c, PHASE_COLORS[i % PHASE_COLORS.len()]);
        }
    }
}

/// A level: its span, light, and each of its initcalls in its colour.
fn level_row(svg: &mut Svg, scale: &Scale, level: &Level, color: &str) {
    let y = svg.y;
    row_label(
        svg,
        1,
        y,
        &format!("{} ({})", level.name, level.calls.len()),
        r#"font-weight="bold""#,
    );
    let (x0, x1) = (scale.x(level.start_ns), scale.x(level.end_ns));
    let own: u64 = level.calls.iter().map(|c| c.duration_ns).sum();
    svg.rect(
        x0,
        y + 2.0,
        x1 - x0,
        BAR_H,
        LEVEL_SPAN_COLOR,
        &format!(
            "{}: {} to {}, initcalls' own time {}",
            level.name,
            ms(level.start_ns),
            ms(level.end_ns),
            ms(own as f64)
        ),
    );
    for c in &level.calls {
        let (c0, c1) = (
            scale.x(c.start_ns as f64),
            scale.x((c.start_ns + c.duration_ns) as f64),
        );
        svg.rect(
            c0,
            y + 4.0,
            c1 - c0,
            BAR_H - 4.0,
            if c.ret == 0 { color } else { FAILED_COLOR },
            &call_title(c),
        );
    }
    bar_label(
        svg,
        x0,
        x1.max(x0 + 1.0),
        y + BAR_H - 2.0,
        &format!(
            "{} ({} in initcalls)",
            ms(level.end_ns - level.start_ns),
            ms(own as f64)
        ),
    );
    svg.y += ROW_H;
}

fn call_title(c: &Call) -> String {
    let mut t = format!(
        "{} ({}): {} from {}",
        c.name,
        c.level,
        ms(c.duration_ns as f64),
        ms(c.start_ns as f64)
    );
    if c.ret != 0 {
        t.push_str(&format!(", returned {}", c.ret));
    }
    t
}

/// A slow initcall, labelled with its name and duration.
fn call_row(svg: &mut Svg, scale: &Scale, c: &Call, color: &str) {
    let y = svg.y;
    row_label(svg, 2, y, &c.name, r##"fill="#333""##);
    let (x0, x1) = (
        scale.x(c.start_ns as f64),
        scale.x((c.start_ns + c.duration_ns) as f64),
    );
    let failed = c.ret != 0;
    svg.rect(
        x0,
        y + 2.0,
        x1 - x0,
        BAR_H,
        if failed { FAILED_COLOR } else { color },
        &call_title(c),
    );
    let mut label = ms(c.duration_ns as f64);
    if failed {
        label.push_str(&format!(", returned {}", c.ret));
    }
    bar_label(svg, x0, x1.max(x0 + 1.0), y + BAR_H - 2.0, &label);
    svg.y += ROW_H;
}
