//! Number formats shared by the panes: counts with thousands separators,
//! rates, durations, sizes and CPU lists.

pub use bootscope_model::human::group_digits as fmt_count;

/// Events per second, short.
pub fn fmt_rate(r: f64) -> String {
    if !(r.is_finite() && r > 0.0) {
        "0/s".into()
    } else if r < 10.0 {
        format!("{r:.1}/s")
    } else {
        format!("{}/s", fmt_count(r.round() as u64))
    }
}

/// A duration in milliseconds (one decimal below 10 s).
pub fn fmt_ms(ns: u64) -> String {
    if ns < 10_000_000_000 {
        bootscope_model::human::ms(ns)
    } else {
        format!("{} ms", fmt_count((ns as f64 / 1e6).round() as u64))
    }
}

/// A short duration for histogram labels: 512ns, 2us, 16ms, 1s.
pub fn fmt_ns_short(ns: u64, ascii: bool) -> String {
    bootscope_model::human::ns_short(ns, if ascii { "us" } else { "µs" })
}

/// Bytes in binary units.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v < 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.0} {}", UNITS[u])
    }
}

/// CPU numbers as a list with ranges: 0-3,6.
pub fn fmt_cpu_list(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", v[i], v[j])
        } else if j == i + 1 {
            format!("{},{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_count(0), "0");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(1000), "1,000");
        assert_eq!(fmt_count(1234567), "1,234,567");
        assert_eq!(fmt_rate(0.0), "0/s");
        assert_eq!(fmt_rate(2.54), "2.5/s");
        assert_eq!(fmt_rate(1234.4), "1,234/s");
        assert_eq!(fmt_ms(12_345_678), "12.3 ms");
        assert_eq!(fmt_ms(12_345_000_000), "12,345 ms");
        assert_eq!(fmt_ns_short(512, false), "512ns");
        assert_eq!(fmt_ns_short(2048, true), "2us");
        assert_eq!(fmt_ns_short(4_194_304, false), "4ms");
        assert_eq!(fmt_bytes(1 << 30), "1.0 GiB");
        assert_eq!(fmt_bytes(512 << 20), "512 MiB");
        assert_eq!(fmt_bytes(100), "100 B");
        assert_eq!(fmt_cpu_list(&[3, 0, 1, 2, 6, 8, 9]), "0-3,6,8,9");
        assert_eq!(fmt_cpu_list(&[]), "");
    }
}
