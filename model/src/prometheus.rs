//! The Prometheus text exposition format (version 0.0.4), written the same
//! way by every part of bootscope that speaks it: `export --format
//! prometheus`, the exporter's `/metrics` and `--push`.
//!
//! [`Text`] writes families in the order they come, each family's `# HELP`
//! and `# TYPE` before its samples. [`Exposition`] collects samples of many
//! families in any order and renders each family's samples together, in
//! the order the families were first declared.

use std::collections::HashMap;
use std::fmt::Write as _;

/// Escapes a label value: backslash, double quote and line feed.
pub fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A number as Prometheus reads it (integers without a fraction).
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Nanoseconds as exact decimal seconds (`0.000001024`, `2`).
pub fn seconds(ns: u64) -> String {
    let (s, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if frac == 0 {
        return s.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{s}.{}", digits.trim_end_matches('0'))
}

/// `name{k="v",...}`: a series' identity (no braces without labels).
pub fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let mut s = String::from(name);
    if !labels.is_empty() {
        s.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{k}=\"{}\"", escape_label(v));
        }
        s.push('}');
    }
    s
}

/// A family's `# HELP` and `# TYPE` lines. Help texts are bootscope's own
/// (no backslash or line feed to escape).
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Families written one after the other, as they come.
#[derive(Default)]
pub struct Text {
    out: String,
}

impl Text {
    /// Starts a family: its HELP and TYPE lines.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        header(&mut self.out, name, kind, help);
    }

    /// One sample line; `name` is the family's name, or with `_bucket`,
    /// `_sum` or `_count` for a histogram's parts; `value` as it is to be
    /// printed ([`number`], [`seconds`], an integer).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        self.out.push_str(&series(name, labels));
        self.out.push(' ');
        self.out.push_str(value);
        self.out.push('\n');
    }

    /// A sample of a floating-point value, printed by [`number`].
    pub fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.sample(name, labels, &number(v));
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }
}

/// One family of an [`Exposition`]: its type, help, and sample lines.
struct Family {
    kind: &'static str,
    help: &'static str,
    lines: Vec<String>,
}

/// Families in the order first declared; samples of one family stay
/// together whatever order they are added in.
#[derive(Default)]
pub struct Exposition {
    order: Vec<&'static str>,
    families: HashMap<&'static str, Family>,
}

impl Exposition {
    /// Declares a family (again: no change), so that it is listed with its
    /// HELP and TYPE even without samples.
    pub fn family(&mut self, name: &'static str, kind: &'static str, help: &'static str) {
        if !self.families.contains_key(name) {
            self.order.push(name);
            self.families.insert(
                name,
                Family {
                    kind,
                    help,
                    lines: Vec::new(),
                },
            );
        }
    }

    /// Adds a sample of the declared family `family` (a sample of a family
    /// never declared is left out); `suffix` is `_bucket`, `_sum` or
    /// `_count` for histograms, else empty.
    pub fn sample(&mut self, family: &'static str, suffix: &str, labels: &[(&str, &str)], v: f64) {
        if let Some(f) = self.families.get_mut(family) {
            let line = format!(
                "{} {}",
                series(&format!("{family}{suffix}"), labels),
                number(v)
            );
            f.lines.push(line);
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            let f = &self.families[name];
            header(&mut out, name, f.kind, f.help);
            for l in &f.lines {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_numbers_read_as_prometheus_reads_them() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(1e16), "10000000000000000");
        assert_eq!(seconds(1_024), "0.000001024");
        assert_eq!(seconds(2_000_000_000), "2");
        assert_eq!(seconds(1_500_000_000), "1.5");
        assert_eq!(series("m", &[]), "m");
        assert_eq!(
            series("m", &[("a", "x"), ("b", "\"")]),
            "m{a=\"x\",b=\"\\\"\"}"
        );
    }

    #[test]
    fn text_writes_families_as_they_come() {
        let mut t = Text::default();
        t.family("a_total", "counter", "As.");
        t.sample("a_total", &[("k", "v")], "3");
        t.family("b_seconds", "gauge", "Bs.");
        t.sample_f64("b_seconds", &[], 0.5);
        assert_eq!(
            t.finish(),
            "# HELP a_total As.\n# TYPE a_total counter\na_total{k=\"v\"} 3\n\
             # HELP b_seconds Bs.\n# TYPE b_seconds gauge\nb_seconds 0.5\n"
        );
    }

    #[test]
    fn an_exposition_keeps_each_familys_samples_together() {
        let mut x = Exposition::default();
        x.family("a", "gauge", "A.");
        x.family("h", "histogram", "H.");
        x.family("a", "counter", "declared again: no change");
        x.sample("h", "_count", &[], 2.0);
        x.sample("a", "", &[("k", "1")], 1.0);
        x.sample("undeclared", "", &[], 1.0);
        x.sample("a", "", &[("k", "2")], 2.5);
        assert_eq!(
            x.render(),
            "# HELP a A.\n# TYPE a gauge\na{k=\"1\"} 1\na{k=\"2\"} 2.5\n\
             # HELP h H.\n# TYPE h histogram\nh_count 2\n"
        );
    }
}
