//! The number and text formats the reports share: percentages, p values,
//! values in their unit, and XML escaping.

use crate::metrics::MetricKind;

/// Percentages: one decimal, two below 1 %.
pub fn format_pct(p: f64) -> String {
    if p.is_infinite() {
        "∞".into()
    } else if p < 1.0 {
        format!("{p:.2}")
    } else {
        format!("{p:.1}")
    }
}

/// 0.99 -> "99", 0.995 -> "99.5".
pub fn format_confidence(c: f64) -> String {
    let pct = c * 100.0;
    if (pct - pct.round()).abs() < 1e-9 {
        format!("{pct:.0}")
    } else {
        format!("{pct:.1}")
    }
}

/// "= 0.004", "= 0.21", "< 0.001".
pub fn format_p(p: f64) -> String {
    if p < 0.001 {
        return "< 0.001".into();
    }
    let digits = (1 - p.log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{p:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("= {s}")
}

/// A significance level or a probability as a number: as given where that
/// is short (`0.05`, `0.0001`), in scientific notation below 1e-4
/// (`1e-300`, not three hundred digits).
pub fn format_level(v: f64) -> String {
    if v != 0.0 && v.abs() < 1e-4 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A value in its unit: milliseconds for times, a count otherwise.
pub fn format_value(kind: MetricKind, v: f64) -> String {
    match kind {
        MetricKind::Time => bootscope_model::human::ms_f64(v),
        MetricKind::Count if v.fract() == 0.0 => format!("{v:.0}"),
        MetricKind::Count => format!("{v:.1}"),
        MetricKind::Bytes => format!("{:.1} MiB", v / 1_048_576.0),
    }
}

/// Text for XML attributes and content: the one XML rule,
/// [`bootscope_model::text::xml_text`] (control characters shown escaped,
/// markup characters as entities).
pub fn xml_escape(s: &str) -> String {
    bootscope_model::text::xml_text(s).into_owned()
}
