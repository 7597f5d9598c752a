//! A boot (timeline or profile): its phases and marks on a millisecond
//! axis, a timeline's initcalls nested under `kernel`, then its exits per
//! reason (with a profile's top exit sites) and per phase.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use bootscope_model::profile::Profile;
use bootscope_model::timeline::{Timeline, TimelineGuest};

use super::exits::{by_phase, exit_bars, phase_stacks, top_sites};
use super::initcalls::{self, Initcalls};
use super::svg::*;

/// A boot, from either document.
pub(super) struct Boot {
    title: String,
    subtitle: String,
    /// The profiled command line.
    command: Option<String>,
    phases: Vec<(String, f64, f64)>,
    marks: Vec<(String, f64)>,
    exits_title: String,
    exits: Vec<(String, f64)>,
    /// A profile's exit sites per reason, most first.
    sites: BTreeMap<String, Vec<(String, f64)>>,
    /// A profile's exits per phase, by reason.
    by_phase: Vec<(String, Vec<(String, f64)>)>,
    /// A timeline's initcalls (`run --initcalls`).
    initcalls: Option<Initcalls>,
    /// A profile's page-fault tail of a restore.
    fault_tail: Option<bootscope_model::fault_tail::FaultTail>,
    /// A systemd guest's units (a timeline's, without an error).
    units: Option<bootscope_model::units::UnitsDoc>,
}

impl Boot {
    pub(super) fn from_timeline(t: &Timeline) -> Self {
        let mut phases: Vec<(String, f64, f64)> = t
            .phases
            .iter()
            .map(|p| (p.name.clone(), p.start_ns as f64, p.end_ns as f64))
            .collect();
        // A systemd guest's initramfs stage, where `userspace` starts (its
        // units are drawn in a section of their own).
        if let Some(stage) = t.units.as_ref().and_then(|u| u.initramfs.as_ref()) {
            phases.push((
                bootscope_model::timeline_profile::INITRAMFS_PHASE.to_string(),
                stage.start_ns as f64,
                stage.end_ns as f64,
            ));
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
            sites: BTreeMap::new(),
            by_phase: Vec::new(),
            initcalls: Initcalls::from_timeline(t.initcalls.as_ref()),
            fault_tail: None,
            units: t.units.clone().filter(|u| u.error.is_none()),
        }
    }

    pub(super) fn from_profile(p: &Profile) -> Self {
        let phases: Vec<(String, f64, f64)> = p
            .phases
            .iter()
            .map(|s| (s.name.clone(), s.start_ns as f64, s.end_ns as f64))
            .collect();
        let exits = p
            .exits
            .by_reason
            .iter()
            .map(|r| (r.reason.clone(), r.count as f64))
            .collect();
        let phase_names: Vec<String> = phases.iter().map(|s| s.0.clone()).collect();
        let t = &p.target;
        Self {
            title: format!("Profile: pid {} ({})", t.pid, t.name),
            subtitle: format!(
                "host KVM {} · {} CPUs · host page faults {} · guest page faults {}",
                p.host.kvm, p.host.cpus, p.page_faults.host_total, p.page_faults.guest_total,
            ),
            command: Some(t.command.join(" ")).filter(|c| !c.is_empty()),
            phases,
            marks: by_time(
                p.marks
                    .iter()
                    .map(|m| (m.name.clone(), m.t_ns as f64))
                    .collect(),
            ),
            exits_title: format!(
                "Exits by reason ({}), {} in all",
                p.exits.source,
                group_digits(p.exits.total as f64)
            ),
            exits,
            sites: top_sites(p),
            by_phase: by_phase(p, &phase_names),
            initcalls: None,
            fault_tail: p.fault_tail.clone(),
            units: None,
        }
    }
}

/// Marks sorted by their time.
pub(super) fn by_time(mut marks: Vec<(String, f64)>) -> Vec<(String, f64)> {
    marks.sort_by(|a, b| a.1.total_cmp(&b.1));
    marks
}

pub(super) fn boot_svg(b: &Boot, path: &Path) -> String {
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
    if let Some(t) = &b.fault_tail {
        super::fault_curve::draw(&mut svg, t, scale);
    }
    if let Some(ic) = &b.initcalls {
        let kernel = b
            .phases
            .iter()
            .enumerate()
            .find(|(_, p)| p.0 == "kernel")
            .map(|(i, p)| (p.1, p.2, PHASE_COLORS[i % PHASE_COLORS.len()]));
        initcalls::draw(&mut svg, ic, kernel);
    }
    draw_units(&mut svg, b);
    exit_bars(&mut svg, &b.exits_title, &b.exits, &b.sites);
    phase_stacks(&mut svg, &b.by_phase);
    svg.finish(&b.title)
}

/// A systemd guest's units, with the workload's port 0x80 mark (the
/// chain's end).
fn draw_units(svg: &mut Svg, b: &Boot) {
    if let Some(u) = &b.units {
        let marker = b
            .marks
            .iter()
            .find(|m| m.0.starts_with("port 0x80"))
            .map(|m| (m.0.as_str(), m.1));
        super::units::draw(svg, u, marker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::timeline_initramfs::InitramfsStage;
    use bootscope_model::units::{ChainLink, UnitsDoc};

    #[test]
    fn the_initramfs_stage_and_the_chain_are_bars_under_userspace() {
        let t = Timeline {
            units: Some(UnitsDoc {
                critical_chain: vec![ChainLink {
                    name: "a.service".into(),
                    active_ns: 9_000_000,
                    duration_ns: 1_000_000,
                }],
                initramfs: Some(InitramfsStage {
                    start_ns: 2_000_000,
                    end_ns: 5_000_000,
                    ..InitramfsStage::default()
                }),
                ..UnitsDoc::default()
            }),
            ..Timeline::default()
        };
        let boot = Boot::from_timeline(&t);
        let names: Vec<&str> = boot.phases.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["initramfs"]);
        assert_eq!(
            (boot.phases[0].1, boot.phases[0].2),
            (2_000_000.0, 5_000_000.0)
        );
    }

    fn unit(name: &str, start_ms: u64, ms: u64) -> bootscope_model::units::Unit {
        bootscope_model::units::Unit {
            name: name.into(),
            start_ns: start_ms * 1_000_000,
            active_ns: Some((start_ms + ms) * 1_000_000),
            duration_ns: ms * 1_000_000,
            state: "active".into(),
            ..Default::default()
        }
    }

    #[test]
    fn every_unit_is_a_bar_and_the_chain_is_red() {
        let mut units: Vec<_> = (0..80)
            .map(|i| unit(&format!("u{i:02}.service"), 100 + i, 5))
            .collect();
        units.push(unit("a<b>&\"c\".service", 300, 50));
        let t = Timeline {
            units: Some(UnitsDoc {
                units,
                chain_target: "u79.service".into(),
                critical_chain: vec![ChainLink {
                    name: "u79.service".into(),
                    active_ns: 184_000_000,
                    duration_ns: 5_000_000,
                }],
                ..UnitsDoc::default()
            }),
            ..Timeline::default()
        };
        let svg = boot_svg(&Boot::from_timeline(&t), Path::new("t.json"));
        assert_eq!(
            svg.matches("<rect").count() - 1,
            81,
            "a bar per unit and the page"
        );
        assert!(svg.contains("the critical chain to u79.service in red (1 units)"));
        assert_eq!(svg.matches(r##"fill="#d62728""##).count(), 1);
        // Names are escaped, in the label and the bar's title.
        assert!(
            svg.contains("a&lt;b&gt;&amp;&quot;c&quot;.service"),
            "{svg}"
        );
        assert!(!svg.contains("a<b>"));
        // A unit's error hides the section.
        let mut broken = t.clone();
        broken.units.as_mut().unwrap().error = Some("no journal".into());
        let svg = boot_svg(&Boot::from_timeline(&broken), Path::new("t.json"));
        assert!(!svg.contains("systemd units"));
    }
}
