//! Sizes as users type them (`--memory`, `--numa ...,memory=SIZE`,
//! `--hugepages`), and as messages print them.
//!
//! Accepted: a whole number with an optional binary suffix, any case:
//! `K`/`KiB` (2^10), `M`/`MiB` (2^20), `G`/`GiB` (2^30), `T`/`TiB` (2^40) or
//! `b` (bytes); a bare number is MiB. `512M`, `2g`, `1048576K`, `64MiB`,
//! `4096b`, `1T`, `128`.

/// A size that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a number with a unit.
    #[error("size {0:?} is not a number with an optional K, M, G or T suffix (for example 512M)")]
    NotANumber(String),
    /// It overflows 64 bits.
    #[error("size {0:?} is too large")]
    TooLarge(String),
}

/// Parses a size in bytes by the rules of this module.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let lower = s.trim().to_ascii_lowercase();
    let units: [(&str, &str, u64); 4] = [
        ("tib", "t", 1 << 40),
        ("gib", "g", 1 << 30),
        ("mib", "m", 1 << 20),
        ("kib", "k", 1 << 10),
    ];
    let suffixed = units.iter().find_map(|&(long, short, mult)| {
        lower
            .strip_suffix(long)
            .or_else(|| lower.strip_suffix(short))
            .map(|n| (n, mult))
    });
    let (num, mult) = suffixed.unwrap_or_else(|| match lower.strip_suffix('b') {
        Some(n) => (n, 1),
        None => (lower.as_str(), 1 << 20),
    });
    let v: u64 = num
        .trim()
        .parse()
        .map_err(|_| SizeError::NotANumber(s.to_string()))?;
    v.checked_mul(mult)
        .ok_or_else(|| SizeError::TooLarge(s.to_string()))
}

pub use crate::human::human_size;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size(" 64 mib ").unwrap(), 64 << 20);
        assert_eq!(parse_size("128").unwrap(), 128 << 20);
        assert_eq!(parse_size("4096b").unwrap(), 4096);
        assert_eq!(parse_size("1048576K").unwrap(), 1 << 30);
        assert_eq!(parse_size("2KiB").unwrap(), 2048);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("1TiB").unwrap(), 1 << 40);
        assert_eq!(
            parse_size("lots"),
            Err(SizeError::NotANumber("lots".into()))
        );
        assert!(parse_size("-1M").is_err());
        assert_eq!(
            parse_size("99999999999G"),
            Err(SizeError::TooLarge("99999999999G".into()))
        );
        let e = parse_size("lots").unwrap_err().to_string();
        assert!(e.contains("\"lots\"") && e.contains("512M"), "{e}");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(1 << 30), "1 GiB");
        assert_eq!(human_size(3 << 20), "3 MiB");
        assert_eq!(human_size(4097), "4097 bytes");
    }
}
