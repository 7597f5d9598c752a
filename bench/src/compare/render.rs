//! The reports in words: plain text, JSON and JUnit XML.

use std::fmt::Write as _;

use super::comparison::{CompareReport, Comparison, SampleInfo};
use super::format::{format_confidence, format_p, format_pct, format_value, xml_escape};
use super::verdict::CheckReport;
use crate::metrics::{self, MetricKind};
use crate::stats::TestKind;

impl Comparison {
    /// "kernel phase 12.3 % faster, p = 0.004".
    pub fn words(&self) -> String {
        let name = metrics::display_name(&self.metric);
        let (b, n) = self.centers();
        let change = if b == n {
            "unchanged".to_string()
        } else if b == 0.0 {
            format!("from 0 to {}", format_value(self.kind, n))
        } else {
            let pct = self.change_pct.abs();
            let word = match (self.kind, self.change_pct < 0.0) {
                (MetricKind::Time, true) => "faster",
                (MetricKind::Time, false) => "slower",
                (MetricKind::Count, true) => "fewer",
                (MetricKind::Count, false) => "more",
                (MetricKind::Bytes, true) => "smaller",
                (MetricKind::Bytes, false) => "larger",
            };
            format!("{} % {word}", format_pct(pct))
        };
        match &self.test {
            Some(t) => format!("{name} {change}, p {}", format_p(t.p_value)),
            None => format!("{name} {change}"),
        }
    }
}

fn describe(s: &SampleInfo) -> String {
    format!("{} in {} ({} runs)", s.label, s.path.display(), s.runs)
}

/// The `--meta` notes and git revision of each side, one line each, where
/// either has any.
fn provenance_lines(s: &mut String, sides: [(&str, &SampleInfo); 2]) {
    if sides.iter().all(|(_, i)| i.provenance.text().is_none()) {
        return;
    }
    for (name, info) in sides {
        let text = info.provenance.text();
        let _ = writeln!(
            s,
            "  {name:<9} {}",
            text.as_deref().unwrap_or("(no git revision or notes)")
        );
    }
}

impl CompareReport {
    /// The plain-words report.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "bootscope compare: {} -> {}",
            describe(&self.base),
            describe(&self.new)
        );
        provenance_lines(&mut s, [("base:", &self.base), ("new:", &self.new)]);
        let _ = writeln!(
            s,
            "times: {} on {}s, significant below p = {}; counts: medians",
            self.test.title(),
            if self.test == TestKind::Welch {
                "mean"
            } else {
                "median"
            },
            self.alpha
        );
        let _ = writeln!(s);
        let width = self
            .metrics
            .iter()
            .map(|c| c.words().chars().count())
            .max()
            .unwrap_or(0);
        for c in &self.metrics {
            let (b, n) = c.centers();
            let verdict = match (&c.test, c.significant) {
                (None, _) => c.no_test.clone().unwrap_or_default(),
                (Some(_), true) => "significant".into(),
                (Some(_), false) => "not significant".into(),
            };
            let mut ratio = if b != 0.0 {
                format!(", ratio {:.3}", n / b)
            } else {
                String::new()
            };
            if let Some(r) = &c.ratio {
                let _ = write!(
                    ratio,
                    ", estimate {:.3}, {} % interval {:.3}..{:.3}",
                    r.estimate,
                    format_confidence(r.confidence),
                    r.low,
                    r.high
                );
            }
            let _ = writeln!(
                s,
                "  {:<width$}  ({} -> {}{ratio}; {verdict})",
                c.words(),
                format_value(c.kind, b),
                format_value(c.kind, n),
            );
        }
        // Labels, metric and phase names come from the documents read: the
        // text rule for a terminal.
        bootscope_model::text::printable_keeping(&s, &['\n']).into_owned()
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

impl CheckReport {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "bootscope check: {} against baseline {}",
            describe(&self.current),
            describe(&self.baseline)
        );
        provenance_lines(
            &mut s,
            [("current:", &self.current), ("baseline:", &self.baseline)],
        );
        let _ = writeln!(
            s,
            "a regression: counts whose median grew beyond the limit; times that grew beyond it \
             with {} p < {}",
            self.test.title(),
            self.alpha
        );
        let _ = writeln!(s);
        for r in &self.results {
            let tag = if r.status == "regression" {
                "FAIL"
            } else {
                "ok  "
            };
            let _ = writeln!(s, "  {tag}  {}", r.message);
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "result: {} ({} of {} metrics regressed)",
            if self.regressions > 0 {
                "REGRESSION"
            } else {
                "pass"
            },
            self.regressions,
            self.results.len()
        );
        // Labels, metric and phase names come from the documents read: the
        // text rule for a terminal.
        bootscope_model::text::printable_keeping(&s, &['\n']).into_owned()
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// JUnit XML: one test case per metric, a `<failure>` per regression.
    pub fn junit(&self) -> String {
        let mut s = String::new();
        let n = self.results.len();
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r#"<testsuites name="bootscope check" tests="{n}" failures="{}" errors="0">"#,
            self.regressions
        );
        let _ = writeln!(
            s,
            r#"  <testsuite name="bootscope check {}" tests="{n}" failures="{}" errors="0" skipped="0">"#,
            xml_escape(&self.current.label),
            self.regressions
        );
        let _ = writeln!(s, "    <properties>");
        for (k, v) in [
            ("baseline", self.baseline.path.display().to_string()),
            ("current", self.current.path.display().to_string()),
            ("test", self.test.title().to_string()),
            ("alpha", self.alpha.to_string()),
            ("max_regression_pct", self.max_regression_pct.to_string()),
        ] {
            let _ = writeln!(
                s,
                r#"      <property name="{k}" value="{}"/>"#,
                xml_escape(&v)
            );
        }
        let _ = writeln!(s, "    </properties>");
        for r in &self.results {
            let class = match r.kind {
                MetricKind::Time => "bootscope.check.time",
                MetricKind::Count => "bootscope.check.count",
                MetricKind::Bytes => "bootscope.check.bytes",
            };
            let name = xml_escape(&r.metric);
            if r.status == "regression" {
                let _ = writeln!(
                    s,
                    r#"    <testcase classname="{class}" name="{name}" time="0">"#
                );
                let _ = writeln!(
                    s,
                    r#"      <failure type="regression" message="{}">{}</failure>"#,
                    xml_escape(&r.message),
                    xml_escape(&r.message)
                );
                let _ = writeln!(s, "    </testcase>");
            } else {
                let _ = writeln!(
                    s,
                    r#"    <testcase classname="{class}" name="{name}" time="0"/>"#
                );
            }
        }
        let _ = writeln!(
            s,
            "    <system-out>{}</system-out>",
            xml_escape(&self.text())
        );
        let _ = writeln!(s, "  </testsuite>");
        let _ = writeln!(s, "</testsuites>");
        s
    }
}
