//! A restore's fault-rate curve (a profile's `fault_tail`), drawn under the
//! phases on the same millisecond axis: one stacked bar per bucket, guest
//! faults by what their service took on the host.

use bootscope_model::fault_tail::{FaultTail, KINDS};
use bootscope_model::human::human_ns;

use super::svg::*;

/// Height of the curve's area.
const CURVE_H: f64 = 120.0;
/// One colour per kind, in [`KINDS`] order: resident, minor (anonymous,
/// file), major (anonymous, file).
const KIND_COLORS: [&str; 5] = ["#bbbbbb", "#4e79a7", "#76b7b2", "#e15759", "#f28e2b"];

/// Draws the curve at the current height on `scale` (the phases' axis).
pub(super) fn draw(svg: &mut Svg, t: &FaultTail, scale: Scale) {
    svg.heading("Guest faults after the restore (fault-rate curve)", 14.0);
    svg.note(&t.summary_line());
    let Some(start) = t.window.start_ns else {
        svg.note("(no guest fault in the window)");
        return;
    };
    let peak = t.curve.iter().map(|b| b.total()).max().unwrap_or(0);
    svg.y += 8.0;
    let top = svg.y;
    let base = top + CURVE_H;
    svg.line(LEFT, base, LEFT + PLOT_W, base, r##"stroke="#888""##);
    let per_ms = 1e6 / t.bucket_ns.max(1) as f64;
    svg.text(
        LEFT - 8.0,
        top + FONT,
        &format!("{} /ms", group_digits(peak as f64 * per_ms)),
        r#"text-anchor="end" font-size="11""#,
    );
    svg.text(LEFT - 8.0, base, "0", r#"text-anchor="end" font-size="11""#);
    if peak == 0 {
        svg.y = base + 8.0;
        return;
    }
    for b in &t.curve {
        let t0 = (start + b.t_ns) as f64;
        let (x0, x1) = (scale.x(t0), scale.x(t0 + t.bucket_ns as f64));
        let mut y = base;
        for (i, &n) in b.counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            let h = n as f64 / peak as f64 * CURVE_H;
            y -= h;
            svg.rect(
                x0,
                y,
                (x1 - x0).max(1.0),
                h,
                KIND_COLORS[i],
                &format!("{} ms: {n} {}", ms(t0), KINDS[i]),
            );
        }
    }
    svg.y = base + 6.0;
    let mut x = LEFT;
    for (i, k) in KINDS.iter().enumerate() {
        let y = svg.y;
        svg.rect(x, y, 10.0, 10.0, KIND_COLORS[i], k);
        svg.text(x + 14.0, y + 10.0, k, r#"font-size="11""#);
        x += 110.0;
    }
    svg.y += 16.0;
    draw_sites(svg, t);
}

/// The guest code sites listed under the curve.
const TOP_SITES: usize = 8;
/// The longest site bar: the rest of the width is its label's.
const SITE_BAR_W: f64 = PLOT_W * 0.85;

/// The guest code that faulted most in the window (`sites`, most first):
/// one bar per site, its length the site's faults, its host-fault share
/// darker, with the faults and the vCPU time they waited beside it.
fn draw_sites(svg: &mut Svg, t: &FaultTail) {
    let Some(top) = t.sites.first().map(|s| s.faults.max(1)) else {
        return;
    };
    svg.heading("Guest code that faulted most in the window", 12.0);
    for s in t.sites.iter().take(TOP_SITES) {
        svg.y += 4.0;
        let y = svg.y;
        let place = s.place();
        svg.text(
            LEFT - 8.0,
            y + BAR_H - 3.0,
            &fit(&place, LEFT - 24.0),
            r##"text-anchor="end" fill="#333""##,
        );
        let w = s.faults as f64 / top as f64 * SITE_BAR_W;
        let detail = format!(
            "{} faults ({} needed a host fault), {} waiting",
            group_digits(s.faults as f64),
            group_digits(s.host_faults as f64),
            human_ns(s.wait_ns)
        );
        svg.rect(
            LEFT,
            y,
            w,
            BAR_H,
            KIND_COLORS[0],
            &format!("{place}: {detail}"),
        );
        let host = s.host_faults as f64 / top as f64 * SITE_BAR_W;
        if host > 0.0 {
            svg.rect(
                LEFT,
                y,
                host,
                BAR_H,
                KIND_COLORS[1],
                &format!("{place}: {detail}"),
            );
        }
        bar_label(svg, LEFT, LEFT + w, y + BAR_H - 3.0, &detail);
        svg.y += ROW_H - 4.0;
    }
    let rest = t.sites.len().saturating_sub(TOP_SITES);
    if rest > 0 {
        svg.note(&format!("and {rest} more sites"));
    }
}
