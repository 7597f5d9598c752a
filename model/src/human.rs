//! Numbers as people read them, one form each for every report: sizes
//! (`1 GiB`), counts with their digits grouped (`1,234,567`) and durations
//! (`12.3 ms`, `2.13 s`; `1,234.5` ms in a table, `1234.567891` in CSV,
//! `16ms` on a histogram's axis).

/// Formats a byte count for messages: `1 GiB`, `2 MiB`, `12 KiB`, or bytes.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

/// A run of decimal digits with a comma between each group of three:
/// `1234567` -> `1,234,567`.
pub fn group_digit_text(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1234567` as `1,234,567`.
pub fn group_digits(n: u64) -> String {
    group_digit_text(&n.to_string())
}

/// `43,012`, `-1,200`.
pub fn group_digits_signed(n: i128) -> String {
    let out = group_digit_text(&n.unsigned_abs().to_string());
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Nanoseconds as milliseconds with one decimal: `12.3 ms`.
pub fn ms(ns: u64) -> String {
    ms_f64(ns as f64)
}

/// [`ms`] of a figure that need not be whole (a mean, a spread).
pub fn ms_f64(ns: f64) -> String {
    format!("{:.1} ms", ns / 1e6)
}

/// Milliseconds with one decimal and their digits grouped, without the
/// unit (a table's column says it): `1,234.5`, `-0.1`.
pub fn ms_grouped(ns: f64) -> String {
    let tenths = (ns / 1e5).round() as i64;
    let whole = group_digits_signed(i128::from(tenths / 10));
    let whole = if tenths < 0 && tenths / 10 == 0 {
        format!("-{whole}")
    } else {
        whole
    };
    format!("{whole}.{}", (tenths % 10).unsigned_abs())
}

/// Nanoseconds as exact milliseconds with six decimals, for a number
/// column (CSV): `1234.567891`.
pub fn ms_exact(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000, ns % 1_000_000)
}

/// A short duration in whole units, for a histogram's labels: `512ns`,
/// `2µs`, `16ms`, `1s`; `micro` spells the microsecond (`µs`, or `us` for
/// an ASCII terminal).
pub fn ns_short(ns: u64, micro: &str) -> String {
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{}{micro}", ns / 1_000)
    } else if ns < 1_000_000_000 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}s", ns / 1_000_000_000)
    }
}

/// Nanoseconds in words: `2.13 s`, `212.0 ms`, `40 µs`.
pub fn human_ns(ns: u64) -> String {
    let ns = ns as f64;
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.0} µs", ns / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_group_by_three() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1234567), "1,234,567");
        assert_eq!(group_digits(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(group_digits_signed(-1200), "-1,200");
        assert_eq!(group_digits_signed(43012), "43,012");
        assert_eq!(group_digit_text("12345678"), "12,345,678");
    }

    #[test]
    fn durations() {
        assert_eq!(ms(12_345_678), "12.3 ms");
        assert_eq!(ms(0), "0.0 ms");
        assert_eq!(human_ns(2_130_000_000), "2.13 s");
        assert_eq!(human_ns(212_000_000), "212.0 ms");
        assert_eq!(human_ns(40_000), "40 µs");
        assert_eq!(ms_f64(2.5e6), "2.5 ms");
        assert_eq!(ms_grouped(1_234_549_999.0), "1,234.5");
        assert_eq!(ms_grouped(-50_000.0), "-0.1");
        assert_eq!(ms_grouped(-40_000.0), "0.0");
        assert_eq!(ms_exact(1_234_567_891), "1234.567891");
        assert_eq!(ms_exact(0), "0.000000");
        assert_eq!(ns_short(512, "µs"), "512ns");
        assert_eq!(ns_short(2048, "us"), "2us");
        assert_eq!(ns_short(4_194_304, "µs"), "4ms");
        assert_eq!(ns_short(3_000_000_000, "µs"), "3s");
    }
}
