//! The self-contained SVG report: findings as bars of the time their
//! evidence accounts for (estimates), then each fix's measured ratio of
//! time to userspace with its interval against 1 (the original), the
//! combination, and the final command line.

use std::fmt::Write as _;

use bootscope_bench::compare::xml_escape;

use crate::evaluate::{human_ns, ConcreteChange};
use crate::prove::{FixResult, ProveReport, Verdict};
use crate::report::{final_command, AdviseDoc};

const WIDTH: f64 = 1080.0;
const LEFT: f64 = 330.0;
const RIGHT: f64 = 40.0;
const ROW: f64 = 26.0;
/// Room right of the ratio axis for each row's figures.
const NOTE: f64 = 310.0;
/// Room for a row's label, right-aligned left of the bars.
const LABEL_PX: f64 = LEFT - 8.0 - 20.0;
/// Room for a line across the picture from its left margin.
const LINE_PX: f64 = WIDTH - 20.0 - RIGHT;

fn verdict_colour(v: Verdict) -> &'static str {
    match v {
        Verdict::Accepted => "#2e7d32",
        Verdict::NotSignificant | Verdict::Incomplete => "#757575",
        Verdict::Slower | Verdict::BreaksBoot => "#c62828",
        Verdict::CouldNotBeTried => "#ef6c00",
    }
}

fn text(out: &mut String, x: f64, y: f64, size: u32, anchor: &str, s: &str) {
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}">{}</text>"#,
        xml_escape(s)
    );
}

/// A character's advance in a sans-serif font, in ems: DejaVu Sans's
/// (the usual `sans-serif` on Linux, and among the widest), rounded up by
/// class, so that text measured with it fits in any common sans-serif.
fn advance_em(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | '`' => 0.32,
        'f' | 't' | 'r' | 'I' | ' ' | '(' | ')' | '[' | ']' | '{' | '}' | '/' | '\\' | '-' => 0.42,
        'm' | 'w' | 'M' | 'W' | '@' | '%' => 0.98,
        '…' => 1.0,
        'A'..='Z' => 0.78,
        '0'..='9' | 'a'..='z' | '_' | '=' | '+' | '<' | '>' | '~' | '#' | '$' | '&' | '*' | '?' => {
            0.64
        }
        _ if c.is_ascii() => 0.64,
        _ => 1.0,
    }
}

/// The estimated width of `s` at `size` px ([`advance_em`]).
fn width_px(s: &str, size: u32) -> f64 {
    s.chars().map(advance_em).sum::<f64>() * f64::from(size)
}

/// `s` cut to fit in `px` at `size` px, with an ellipsis where it was cut.
fn clip(s: &str, px: f64, size: u32) -> String {
    if width_px(s, size) <= px {
        return s.to_string();
    }
    let room = px - width_px("…", size);
    let mut used = 0.0;
    let mut out = String::new();
    for c in s.chars() {
        used += advance_em(c) * f64::from(size);
        if used > room {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// Findings: one bar per finding, scaled to the largest.
fn findings(out: &mut String, doc: &AdviseDoc, mut y: f64) -> f64 {
    text(
        out,
        20.0,
        y,
        16,
        "start",
        "Findings (time the evidence accounts for: estimates)",
    );
    y += 12.0;
    let max = doc
        .advice
        .findings
        .iter()
        .filter_map(|f| f.accounts_ns)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let span = WIDTH - LEFT - RIGHT - 90.0;
    for f in &doc.advice.findings {
        y += ROW;
        let label = format!(
            "{}{}",
            f.rule,
            f.subject
                .as_deref()
                .map(|s| format!(": {s}"))
                .unwrap_or_default()
        );
        text(out, LEFT - 8.0, y, 12, "end", &clip(&label, LABEL_PX, 12));
        match f.accounts_ns {
            Some(t) => {
                let w = (t as f64 / max * span).max(1.0);
                let _ = writeln!(
                    out,
                    r##"<rect x="{LEFT}" y="{:.1}" width="{w:.1}" height="14" fill="#5c6bc0"><title>{}</title></rect>"##,
                    y - 11.0,
                    xml_escape(&f.evidence.join("; "))
                );
                text(
                    out,
                    LEFT + w + 6.0,
                    y,
                    12,
                    "start",
                    &format!("{} (estimate)", human_ns(t)),
                );
            }
            None => text(out, LEFT, y, 12, "start", "no time attributed"),
        }
    }
    if !doc.advice.unchecked.is_empty() {
        y += ROW * 0.2;
        let names: Vec<&str> = doc.advice.unchecked.iter().map(|u| u.rule).collect();
        let line = format!("not checked (data missing): {}", names.join(", "));
        for part in wrap(&line, LINE_PX, 12) {
            y += ROW * 0.8;
            text(out, 20.0, y, 12, "start", &part);
        }
    }
    y
}

/// The ratio axis: from `lo` to `hi`, mapped onto the plot's width.
struct Axis {
    lo: f64,
    hi: f64,
}

impl Axis {
    fn x(&self, v: f64) -> f64 {
        let span = WIDTH - LEFT - RIGHT - NOTE;
        LEFT + (v.clamp(self.lo, self.hi) - self.lo) / (self.hi - self.lo) * span
    }
}

/// A change in few words for a row's label: the kernel's words, or the
/// `run` options.
fn short(c: &ConcreteChange) -> String {
    match c {
        ConcreteChange::KernelArgs(a) => a.clone(),
        ConcreteChange::RunFlags(f) => f.join(" "),
        ConcreteChange::Advice(a) => a.clone(),
        c @ ConcreteChange::VmmOptions { .. } => c.describe(),
    }
}

/// Long text as lines of at most `width` characters, broken at spaces.
/// `s` in lines that each fit in `px` at `size` px, broken at spaces (a
/// word wider than a line has one of its own).
fn wrap(s: &str, px: f64, size: u32) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in s.split(' ') {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && width_px(&format!("{last} {word}"), size) > px {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

fn ratio_row(out: &mut String, axis: &Axis, r: &FixResult, y: f64, label: &str) {
    // A set of more than two fixes by its size: their words would be
    // clipped to the first one's (the final command line lists them).
    let what = if r.changes.len() > 2 {
        format!("{} fixes", r.changes.len())
    } else {
        let changes: Vec<String> = r.changes.iter().map(short).collect();
        changes.join(" + ")
    };
    text(
        out,
        LEFT - 8.0,
        y,
        12,
        "end",
        &clip(&format!("{label}{what}"), LABEL_PX, 12),
    );
    let colour = verdict_colour(r.verdict);
    let verdict = match r.verdict {
        Verdict::Accepted => "accepted",
        Verdict::NotSignificant => "not significant",
        Verdict::Slower => "slower",
        Verdict::BreaksBoot => "breaks the boot",
        Verdict::CouldNotBeTried => "could not be tried",
        Verdict::Incomplete => "incomplete",
    };
    let Some(c) = &r.time_to_userspace else {
        text(out, axis.x(1.0) + 8.0, y, 12, "start", verdict);
        return;
    };
    // The Hodges-Lehmann estimate, the centre of the interval drawn; the
    // ratio of the centres without one.
    let (b, n) = c.centers();
    let ratio = c
        .ratio
        .as_ref()
        .map_or(if b > 0.0 { n / b } else { 1.0 }, |ri| ri.estimate);
    if let Some(ri) = &c.ratio {
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"/>"#,
            axis.x(ri.low),
            y - 4.0,
            axis.x(ri.high),
            y - 4.0
        );
    }
    let _ = writeln!(
        out,
        r#"<circle cx="{:.1}" cy="{:.1}" r="5" fill="{colour}"><title>{}</title></circle>"#,
        axis.x(ratio),
        y - 4.0,
        xml_escape(&r.detail)
    );
    let p = c
        .test
        .as_ref()
        .map(|t| format!(", p {}", bootscope_bench::compare::format_p(t.p_value)))
        .unwrap_or_default();
    let interval = c
        .ratio
        .as_ref()
        .map(|ri| format!(" ({:.2}..{:.2})", ri.low, ri.high))
        .unwrap_or_default();
    text(
        out,
        WIDTH - RIGHT - NOTE + 10.0,
        y,
        12,
        "start",
        &format!("{ratio:.2}{interval}{p}: {verdict}"),
    );
}

/// The proof's heading: what was measured, then the test on a line of its
/// own (with the heading it is wider than the picture).
fn proof_heading(out: &mut String, p: &ProveReport, mut y: f64) -> f64 {
    y += 2.0 * ROW;
    text(
        out,
        20.0,
        y,
        16,
        "start",
        &format!(
            "Measured: time to {} with the fix / without",
            // The mark is named in the check boot's line of the text report.
            if p.metric.starts_with("mark:") {
                "the workload's mark".to_string()
            } else {
                crate::prove::plan::measured_to(&p.metric)
            },
        ),
    );
    y += ROW;
    text(
        out,
        20.0,
        y,
        12,
        "start",
        &format!(
            "up to {} rounds, {}, level {}",
            p.runs_per_side,
            p.test.title(),
            crate::prove::options::level(p.level)
        ),
    );
    y
}

/// Fixes: ratio of time to userspace, with fix / without.
fn proven(out: &mut String, doc: &AdviseDoc, mut y: f64) -> f64 {
    let Some(p) = doc.prove else {
        return y;
    };
    y = proof_heading(out, p, y);
    let rows: Vec<&FixResult> = p
        .fixes
        .iter()
        .chain(p.combined.iter().filter(|c| c.changes.len() > 1))
        .chain(p.together.iter())
        .collect();
    let mut lo: f64 = 0.9;
    let mut hi: f64 = 1.1;
    for r in &rows {
        if let Some(c) = &r.time_to_userspace {
            let (b, n) = c.centers();
            if b > 0.0 {
                lo = lo.min(n / b);
                hi = hi.max(n / b);
            }
            if let Some(ri) = &c.ratio {
                lo = lo.min(ri.low);
                hi = hi.max(ri.high);
            }
        }
    }
    let axis = Axis {
        lo: (lo - 0.05).max(0.0),
        hi: hi + 0.05,
    };
    let top = y + 12.0;
    for r in &p.fixes {
        y += ROW;
        ratio_row(out, &axis, r, y, "");
    }
    // The set benched together: accepted (the combination), or, with
    // --together-first, not accepted before the single fixes decided.
    for c in p
        .combined
        .iter()
        .filter(|c| c.changes.len() > 1)
        .chain(p.together.iter())
    {
        y += ROW;
        ratio_row(out, &axis, c, y, "together: ");
    }
    let x1 = axis.x(1.0);
    let _ = writeln!(
        out,
        r##"<line x1="{x1:.1}" y1="{top:.1}" x2="{x1:.1}" y2="{:.1}" stroke="#000" stroke-dasharray="4 3"/>"##,
        y + 6.0
    );
    y += ROW;
    for v in [axis.lo, 1.0, axis.hi] {
        text(out, axis.x(v), y, 11, "middle", &format!("{v:.2}"));
    }
    for n in &p.not_tried {
        y += ROW * 0.8;
        text(
            out,
            20.0,
            y,
            12,
            "start",
            &clip(
                &format!("not tried: {} ({})", n.change.describe(), n.reason),
                LINE_PX,
                12,
            ),
        );
    }
    y += ROW * 0.4;
    for line in wrap(&format!("final: {}", final_command(p)), LINE_PX, 12) {
        y += ROW * 0.8;
        text(out, 20.0, y, 12, "start", &line);
    }
    y
}

/// The report as a self-contained SVG document.
pub fn report_svg(doc: &AdviseDoc) -> String {
    let mut body = String::new();
    let mut y = 30.0;
    text(&mut body, 20.0, y, 18, "start", "bootscope advise");
    y += 20.0;
    // With --prove, the command line given (the check boot's own adds
    // what records initcalls).
    let cmdline = doc
        .prove
        .map(|p| p.original_cmdline.as_str())
        .or(doc.cmdline);
    if let Some(c) = cmdline {
        text(
            &mut body,
            20.0,
            y,
            12,
            "start",
            &clip(&format!("kernel command line: {c}"), LINE_PX, 12),
        );
    }
    y += 20.0;
    y = findings(&mut body, doc, y);
    y = proven(&mut body, doc, y);
    let height = y + 30.0;
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="#fff"/>
{body}</svg>
"##
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::{Advice, ConcreteChange};
    use crate::evidence::Evidence;
    use crate::prove::CheckBoot;
    use bootscope_bench::compare::compare_metric;
    use bootscope_bench::TestKind;

    fn result(change: &str, base: &[f64], new: &[f64], verdict: Verdict) -> FixResult {
        FixResult {
            changes: vec![ConcreteChange::KernelArgs(change.into())],
            rules: vec!["r"],
            verdict,
            detail: "d <&>".into(),
            estimate_ns: Some(1_000_000),
            time_to_userspace: compare_metric(
                "time_to_userspace",
                base,
                new,
                TestKind::Wilcoxon,
                0.05,
            ),
            phase: None,
            exits: Vec::new(),
            ok_runs: (base.len(), new.len()),
            rounds: base.len() as u32,
            command: Vec::new(),
        }
    }

    #[test]
    fn long_lines_wrap_at_spaces() {
        // "a bb" is 28 px at 12 px, "a bb ccc" 56, "ccc dd" 43.
        assert_eq!(wrap("a bb ccc dd", 45.0, 12), ["a bb", "ccc dd"]);
        assert_eq!(wrap("abcdefgh ij", 30.0, 12), ["abcdefgh", "ij"]);
        for line in wrap(&"word ".repeat(100), 300.0, 12) {
            assert!(width_px(&line, 12) <= 300.0, "{line}");
        }
    }

    #[test]
    fn labels_are_clipped_to_their_width_not_a_count() {
        let fits = "rule: subject";
        assert_eq!(clip(fits, LABEL_PX, 12), fits);
        // Wide letters are cut sooner than narrow ones, each within the
        // room, with the ellipsis.
        let wide = clip(&"W".repeat(100), LABEL_PX, 12);
        let narrow = clip(&"i".repeat(200), LABEL_PX, 12);
        for s in [&wide, &narrow] {
            assert!(s.ends_with('…'), "{s}");
            assert!(width_px(s, 12) <= LABEL_PX, "{s}");
        }
        assert!(wide.chars().count() * 2 < narrow.chars().count());
        // A row of kernel words (the case that ran out of the picture).
        let words = "systemd.mask=e2scrub_reap.service + systemd.mask=getty@tty1.service";
        let c = clip(words, LABEL_PX, 12);
        assert!(c.len() < words.len() && width_px(&c, 12) <= LABEL_PX, "{c}");
    }

    #[test]
    fn draws_each_fix_against_one() {
        let base = [10.0e9, 10.2e9, 9.9e9, 10.1e9, 10.3e9, 9.8e9];
        let report = ProveReport {
            metric: "time_to_userspace".into(),
            test: TestKind::Wilcoxon,
            level: 0.05,
            runs_per_side: 6,
            budget: None,
            boots: 17,
            original_command: vec!["--kernel".into(), "k".into()],
            original_cmdline: "console=ttyS0".into(),
            check: CheckBoot {
                wall_ns: 1,
                userspace_mark: "m".into(),
                workload_mark: None,
                documents: Vec::new(),
            },
            fixes: vec![
                result(
                    "quiet",
                    &base,
                    &[6.0e9, 6.1e9, 5.9e9, 6.2e9, 6.3e9, 5.8e9],
                    Verdict::Accepted,
                ),
                result(
                    "8250.nr_uarts=1",
                    &base,
                    &[10.1e9, 9.8e9, 10.2e9, 10.0e9, 10.4e9, 9.7e9],
                    Verdict::NotSignificant,
                ),
            ],
            not_tried: Vec::new(),
            combined: None,
            combined_first: false,
            together: None,
            final_command: vec!["--cmdline".into(), "console=ttyS0 quiet".into()],
            final_cmdline: "console=ttyS0 quiet".into(),
            interrupted_by: None,
        };
        let ev = Evidence::default();
        let advice = Advice {
            findings: Vec::new(),
            unchecked: Vec::new(),
            clear: Vec::new(),
        };
        let doc = AdviseDoc::new(&ev, &advice, Some(&report));
        let svg = report_svg(&doc);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("d &lt;&amp;&gt;"), "escaped detail");
        assert!(svg.contains(">quiet</text>"), "{svg}");
        // The command line given, not the check boot's.
        assert!(svg.contains(">kernel command line: console=ttyS0</text>"));
        assert!(
            svg.contains(">0.60 (0.59..0.61), p = 0.031: accepted<"),
            "{svg}"
        );
        assert!(svg.contains("not significant"));
        assert!(
            svg.contains("final: bootscope run --cmdline &apos;console=ttyS0 quiet&apos;"),
            "{svg}"
        );
        // The accepted fix's interval is drawn (6 rounds give one).
        assert!(
            svg.contains("stroke=\"#2e7d32\" stroke-width=\"2\""),
            "{svg}"
        );

        // --together-first: a set of three, accepted first, is one row
        // named by its size; one not accepted is a row too.
        let three = |verdict| {
            let mut r = result(
                "quiet",
                &base,
                &[6.0e9, 6.1e9, 5.9e9, 6.2e9, 6.3e9, 5.8e9],
                verdict,
            );
            r.changes = ["quiet", "8250.nr_uarts=1", "systemd.unit=w.service"]
                .iter()
                .map(|w| ConcreteChange::KernelArgs((*w).into()))
                .collect();
            r
        };
        let first = ProveReport {
            combined: Some(three(Verdict::Accepted)),
            combined_first: true,
            ..report.clone()
        };
        let svg = report_svg(&AdviseDoc::new(&ev, &advice, Some(&first)));
        assert!(svg.contains(">together: 3 fixes</text>"), "{svg}");
        let not = ProveReport {
            together: Some(three(Verdict::NotSignificant)),
            ..report
        };
        let svg = report_svg(&AdviseDoc::new(&ev, &advice, Some(&not)));
        assert!(svg.contains(">together: 3 fixes</text>"), "{svg}");
    }
}
