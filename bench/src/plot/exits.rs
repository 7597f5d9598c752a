//! A boot's exits: per reason as horizontal bars, with a profile's top exit
//! sites (the guest functions that made them) beside each bar, and per
//! phase as stacked bars.

use std::collections::BTreeMap;

use bootscope_model::profile::Profile;

use super::svg::*;

/// Exit sites listed beside each reason's bar.
pub(super) const SITES_PER_REASON: usize = 3;
/// Reasons with a colour of their own in the stacked bars; the rest are
/// `other`.
const STACKED_REASONS: usize = 7;
const REASON_COLORS: [&str; STACKED_REASONS] = [
    "#59a14f", "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
];
const OTHER_COLOR: &str = "#bab0ac";
/// Where the sites column starts, and its mini bars' full width.
const SITES_X: f64 = LEFT + PLOT_W * 0.62 + 90.0;
const SITE_BAR_W: f64 = 50.0;

/// The exit sites of a profile (`exits.sites`, `--exit-sites`): per
/// reason, the guest functions with their exits, most first (every vCPU
/// and phase summed), named as `bootscope export --format folded` names
/// them (`ExitSite::function_name`). Empty without sites.
pub(super) fn top_sites(p: &Profile) -> BTreeMap<String, Vec<(String, f64)>> {
    let Some(sites) = &p.exits.sites else {
        return BTreeMap::new();
    };
    sites
        .reason_totals()
        .into_keys()
        .map(|reason| {
            let fns = sites
                .top_functions(&reason)
                .into_iter()
                .filter(|f| f.count > 0)
                .map(|f| (f.name, f.count as f64))
                .collect();
            (reason, fns)
        })
        .collect()
}

/// A profile's exits per phase (`exits.by_phase`), by reason, in the order
/// of `phases` (phases the list does not name come after).
pub(super) fn by_phase(p: &Profile, phases: &[String]) -> Vec<(String, Vec<(String, f64)>)> {
    let mut out: Vec<(String, Vec<(String, f64)>)> = p
        .exits
        .by_phase
        .iter()
        .map(|ph| {
            let reasons = ph
                .by_reason
                .iter()
                .map(|(r, n)| (r.clone(), *n as f64))
                .filter(|r| r.1 > 0.0)
                .collect::<Vec<_>>();
            (ph.phase.clone(), reasons)
        })
        .filter(|p| !p.1.is_empty())
        .collect();
    let rank = |name: &str| phases.iter().position(|p| p == name).unwrap_or(usize::MAX);
    out.sort_by_key(|p| rank(&p.0));
    out
}

/// Horizontal bars, largest first; with `sites`, each reason's top sites
/// beside its bar (a mini bar of their share of the reason, the share and
/// the function), the bars made shorter to leave them room.
pub(super) fn exit_bars(
    svg: &mut Svg,
    title: &str,
    exits: &[(String, f64)],
    sites: &BTreeMap<String, Vec<(String, f64)>>,
) {
    svg.y += 10.0;
    svg.heading(title, 14.0);
    let mut sorted: Vec<&(String, f64)> = exits.iter().collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    if sorted.is_empty() {
        svg.note("(no exit counts in this file)");
        return;
    }
    let max = sorted[0].1.max(1.0);
    let bar_w = if sites.is_empty() {
        PLOT_W
    } else {
        PLOT_W * 0.62
    };
    if !sites.is_empty() {
        svg.y += FONT + 2.0;
        let y = svg.y;
        svg.text(
            SITES_X,
            y,
            &format!("top exit sites (share of the reason's exits; top {SITES_PER_REASON})"),
            r##"fill="#555" font-style="italic""##,
        );
    }
    svg.y += 6.0;
    for (name, count) in sorted {
        let y = svg.y;
        svg.text(
            LEFT - 8.0,
            y + BAR_H - 2.0,
            &fit(name, LEFT - 16.0),
            r#"text-anchor="end""#,
        );
        let w = count / max * bar_w;
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
        let top = sites.get(name.as_str()).map_or(&[][..], |s| &s[..]);
        let shown = top.len().min(SITES_PER_REASON);
        for (i, (function, n)) in top[..shown].iter().enumerate() {
            site_row(svg, y + i as f64 * ROW_H, function, n / count.max(1.0));
        }
        svg.y += ROW_H * shown.max(1) as f64;
    }
}

/// One site beside the bars: a mini bar of its share, the share, the
/// function.
fn site_row(svg: &mut Svg, y: f64, function: &str, share: f64) {
    let share = share.clamp(0.0, 1.0);
    svg.rect(
        SITES_X,
        y + 5.0,
        SITE_BAR_W,
        BAR_H - 6.0,
        "#e8e8e8",
        function,
    );
    svg.rect(
        SITES_X,
        y + 5.0,
        SITE_BAR_W * share,
        BAR_H - 6.0,
        "#4e79a7",
        &format!("{function}: {:.1} %", share * 100.0),
    );
    let x = SITES_X + SITE_BAR_W + 6.0;
    let text = format!("{:>3.0} %  {function}", share * 100.0);
    svg.text(x, y + BAR_H - 2.0, &fit(&text, WIDTH - 8.0 - x), "");
}

/// The reasons that get a colour of their own: the most frequent over all
/// phases.
fn stacked_reasons(phases: &[(String, Vec<(String, f64)>)]) -> Vec<String> {
    let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
    for (_, reasons) in phases {
        for (r, n) in reasons {
            *totals.entry(r).or_default() += n;
        }
    }
    let mut v: Vec<(&str, f64)> = totals.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    // More reasons than colours: one colour goes to `other`.
    let n = if v.len() > STACKED_REASONS {
        STACKED_REASONS - 1
    } else {
        STACKED_REASONS
    };
    v.into_iter().take(n).map(|r| r.0.to_string()).collect()
}

/// Exits per phase: a stacked bar per phase (one segment per reason, the
/// least frequent as `other`) with its total, and a legend.
pub(super) fn phase_stacks(svg: &mut Svg, phases: &[(String, Vec<(String, f64)>)]) {
    if phases.is_empty() {
        return;
    }
    svg.y += 10.0;
    svg.heading("Exits per phase, by reason", 14.0);
    let named = stacked_reasons(phases);
    let color = |r: &str| {
        named
            .iter()
            .position(|n| n == r)
            .map_or(OTHER_COLOR, |i| REASON_COLORS[i])
    };
    // Legend.
    svg.y += 8.0;
    let mut x = LEFT;
    let y = svg.y;
    let has_other = phases
        .iter()
        .any(|p| p.1.iter().any(|r| !named.contains(&r.0)));
    let legend = named
        .iter()
        .map(String::as_str)
        .chain(has_other.then_some("other"));
    for r in legend {
        svg.rect(x, y, 10.0, 10.0, color(r), r);
        svg.text(x + 14.0, y + 9.0, r, r#"font-size="11""#);
        x += 24.0 + r.chars().count() as f64 * CHAR_W;
    }
    svg.y += 16.0;
    let total = |p: &(String, Vec<(String, f64)>)| p.1.iter().map(|r| r.1).sum::<f64>();
    let max = phases.iter().map(total).fold(1.0, f64::max);
    for p in phases {
        let y = svg.y;
        svg.text(
            LEFT - 8.0,
            y + BAR_H - 2.0,
            &fit(&p.0, LEFT - 16.0),
            r#"text-anchor="end" font-weight="bold""#,
        );
        // Named reasons in legend order, then the rest summed.
        let mut segments: Vec<(&str, f64)> = named
            .iter()
            .filter_map(|n| Some((n.as_str(), p.1.iter().find(|r| &r.0 == n)?.1)))
            .collect();
        let other: f64 =
            p.1.iter()
                .filter(|r| !named.contains(&r.0))
                .map(|r| r.1)
                .sum();
        if other > 0.0 {
            segments.push(("other", other));
        }
        let mut x = LEFT;
        for (r, n) in segments {
            let w = n / max * PLOT_W;
            svg.rect(
                x,
                y + 2.0,
                w,
                BAR_H,
                color(r),
                &format!("{}: {r} {}", p.0, group_digits(n)),
            );
            x += w;
        }
        svg.text(x + 6.0, y + BAR_H - 2.0, &group_digits(total(p)), "");
        svg.y += ROW_H;
    }
}
