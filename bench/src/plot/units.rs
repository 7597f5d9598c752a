//! A systemd guest's units (the timeline's `units` object) as
//! `systemd-analyze plot` draws them: one compact row per unit, by start,
//! its bar from leaving `inactive` to `active` (or to its end), on an axis
//! over the units' span; the critical chain to the workload highlighted
//! (its units' names bold, their bars red) and the workload's port 0x80
//! mark a dashed line.

use std::collections::HashSet;

use bootscope_model::units::{Unit, UnitsDoc};

use super::svg::*;

/// A unit's row: compact, so that a Debian boot's 80 units fit a page.
const UNIT_ROW_H: f64 = 12.0;
const UNIT_BAR_H: f64 = 8.0;
const UNIT_FONT: f64 = 10.0;
/// Characters of a unit label at [`UNIT_FONT`] per pixel, about.
const UNIT_CHAR_W: f64 = 5.7;
const CHAIN_COLOR: &str = "#d62728";
const UNIT_COLOR: &str = "#9bb0c8";
const FAILED_COLOR: &str = "#8c564b";
/// A bar's duration is written beside it when it is on the chain or
/// takes at least this share of the axis.
const LABEL_MIN_SHARE: f64 = 0.02;

/// A unit's name cut to the label column at the units' font.
fn unit_label(name: &str) -> String {
    let max = ((LEFT - 16.0) / UNIT_CHAR_W) as usize;
    if name.chars().count() <= max {
        name.to_string()
    } else {
        let mut t: String = name.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Draws the units of `u`, with `marker` (name and time) as a line; does
/// nothing without units.
pub(super) fn draw(svg: &mut Svg, u: &UnitsDoc, marker: Option<(&str, f64)>) {
    if u.units.is_empty() {
        return;
    }
    let mut units: Vec<&Unit> = u.units.iter().collect();
    units.sort_by(|a, b| {
        a.start_ns
            .cmp(&b.start_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    let chain: HashSet<&str> = u.critical_chain.iter().map(|l| l.name.as_str()).collect();
    let lo = units.iter().map(|x| x.start_ns).min().unwrap_or(0) as f64;
    let hi = units
        .iter()
        .map(|x| x.start_ns.saturating_add(x.duration_ns))
        .chain(marker.map(|m| m.1 as u64))
        .max()
        .unwrap_or(0) as f64;
    let span = (hi - lo).max(1.0);
    svg.y += 10.0;
    let target = if u.chain_target.is_empty() {
        "?"
    } else {
        &u.chain_target
    };
    svg.heading(
        &format!(
            "systemd units ({} by start), the critical chain to {target} in red ({} units)",
            units.len(),
            u.critical_chain.len()
        ),
        14.0,
    );
    svg.note(&format!(
        "each bar from the unit leaving inactive to active (systemd-analyze plot); durations written for the chain's units and bars of at least {:.0} % of the axis",
        LABEL_MIN_SHARE * 100.0
    ));
    let grid_h = units.len() as f64 * UNIT_ROW_H + 4.0;
    let scale = svg.time_axis(lo, hi, grid_h);
    let top = svg.y;
    for unit in &units {
        unit_row(svg, &scale, unit, chain.contains(unit.name.as_str()), span);
    }
    if let Some((name, t)) = marker.filter(|m| m.1 >= lo) {
        let x = scale.x(t);
        svg.line(
            x,
            top,
            x,
            svg.y,
            r##"stroke="#333" stroke-dasharray="4,3""##,
        );
        svg.text(
            x + 3.0,
            top - 2.0 + UNIT_FONT,
            name,
            &format!(r##"font-size="{UNIT_FONT}" fill="#333""##),
        );
    }
    svg.y += 4.0;
}

/// One unit's row: its name, its bar, and its duration when on the chain
/// or long enough.
fn unit_row(svg: &mut Svg, scale: &Scale, unit: &Unit, on_chain: bool, span: f64) {
    let y = svg.y;
    let weight = if on_chain {
        r##" font-weight="bold" fill="#b00""##
    } else {
        ""
    };
    svg.text(
        LEFT - 8.0,
        y + UNIT_BAR_H,
        &unit_label(&unit.name),
        &format!(r#"text-anchor="end" font-size="{UNIT_FONT}"{weight}"#),
    );
    let start = unit.start_ns as f64;
    let end = unit.start_ns.saturating_add(unit.duration_ns) as f64;
    let (x0, x1) = (scale.x(start), scale.x(end));
    let color = match (on_chain, unit.state.as_str()) {
        (true, _) => CHAIN_COLOR,
        (false, "failed") => FAILED_COLOR,
        _ => UNIT_COLOR,
    };
    let title = format!(
        "{} ({}): {} to {}",
        unit.name,
        unit.state,
        ms(start),
        ms(end)
    );
    svg.rect(x0, y + 2.0, x1 - x0, UNIT_BAR_H, color, &title);
    if on_chain || (end - start) / span >= LABEL_MIN_SHARE {
        svg.text(
            x1.max(x0 + 1.0) + 4.0,
            y + UNIT_BAR_H,
            &ms(end - start),
            &format!(r##"font-size="{UNIT_FONT}" fill="#333""##),
        );
    }
    svg.y += UNIT_ROW_H;
}
