//! The record a systemd guest's workload leaves on its disk
//! (`/var/lib/bootscope/units.txt`, written by the workload of
//! `bootscope guest build debian`; docs/guest.md says how to write one):
//!
//! ```text
//! bootscope-units 1
//! marker_value=0x60
//! marker_monotonic_ns=BEFORE AFTER
//! [manager]
//! (systemctl show -p Version,...TimestampMonotonic of the manager)
//! [units]
//! (systemctl show -p Id,...,After of every unit, blank-line separated)
//! [analyze]
//! (systemd-analyze time)
//! [end]
//! ```

use std::collections::BTreeMap;

/// The record's first line.
pub const RECORD_MAGIC: &str = "bootscope-units 1";
/// The most units a record may list (a Debian boot lists 155, a large
/// server a few thousand): the guest writes the record, so what is built
/// from it is bounded.
pub const MAX_UNITS: usize = 10_000;
/// The largest record parsed (the image reader refuses larger files
/// before reading them).
pub const MAX_RECORD_BYTES: usize = super::image::MAX_RECORD_BYTES as usize;

/// Why a record cannot be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("it does not start with \"{RECORD_MAGIC}\"")]
    Magic,
    #[error("it ends before its [end] line: the guest did not finish writing it")]
    Truncated,
    #[error("line {line}: {problem}")]
    Line { line: usize, problem: String },
    #[error("it has no {0}")]
    Missing(&'static str),
    #[error("it is {0} bytes, more than the {MAX_RECORD_BYTES} a record may hold")]
    TooLarge(usize),
    #[error("it lists more than {MAX_UNITS} units")]
    TooManyUnits,
}

/// One unit's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitProps {
    pub id: String,
    pub active_state: String,
    /// `InactiveExitTimestampMonotonic`: activation began (µs, 0 never).
    pub inactive_exit_us: u64,
    /// `ActiveEnterTimestampMonotonic`: it became active.
    pub active_enter_us: u64,
    /// `ActiveExitTimestampMonotonic`: deactivation began.
    pub active_exit_us: u64,
    /// `InactiveEnterTimestampMonotonic`: it became inactive again.
    pub inactive_enter_us: u64,
    /// `After=`: the units it is ordered after.
    pub after: Vec<String>,
}

/// The parsed record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub marker_value: u8,
    /// The guest's `CLOCK_MONOTONIC` (ns) right before and after the
    /// marker write.
    pub marker_guest_ns: (u64, u64),
    /// The manager's properties.
    pub manager: BTreeMap<String, String>,
    pub units: Vec<UnitProps>,
    /// `systemd-analyze time`'s output.
    pub analyze: String,
}

impl Record {
    /// A manager timestamp (µs), 0 when absent.
    pub fn manager_us(&self, key: &str) -> u64 {
        self.manager
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The unit named `id`.
    pub fn unit(&self, id: &str) -> Option<&UnitProps> {
        self.units.iter().find(|u| u.id == id)
    }
}

/// The longest unit name systemd makes (`UNIT_NAME_MAX`).
pub const MAX_UNIT_NAME: usize = 256;

/// A value from the record quoted in an error, cut at 40 characters.
fn quoted(value: &str) -> String {
    match value.char_indices().nth(40) {
        Some((i, _)) => format!("{:?}…", &value[..i]),
        None => format!("{value:?}"),
    }
}

fn number(line: usize, key: &str, value: &str) -> Result<u64, RecordError> {
    value.trim().parse().map_err(|_| RecordError::Line {
        line,
        problem: format!("{key} is {}, not a number", quoted(value)),
    })
}

fn apply_unit_property(
    unit: &mut UnitProps,
    line: usize,
    key: &str,
    value: &str,
) -> Result<(), RecordError> {
    match key {
        "Id" if value.len() > MAX_UNIT_NAME => {
            return Err(RecordError::Line {
                line,
                problem: format!(
                    "Id is {} bytes long (systemd's unit names have at most {MAX_UNIT_NAME})",
                    value.len()
                ),
            })
        }
        "Id" => unit.id = value.to_string(),
        "ActiveState" => unit.active_state = value.to_string(),
        "InactiveExitTimestampMonotonic" => unit.inactive_exit_us = number(line, key, value)?,
        "ActiveEnterTimestampMonotonic" => unit.active_enter_us = number(line, key, value)?,
        "ActiveExitTimestampMonotonic" => unit.active_exit_us = number(line, key, value)?,
        "InactiveEnterTimestampMonotonic" => unit.inactive_enter_us = number(line, key, value)?,
        "After" => {
            // A longer name is no unit's.
            unit.after = value
                .split_whitespace()
                .filter(|a| a.len() <= MAX_UNIT_NAME)
                .map(str::to_string)
                .collect();
        }
        _ => {}
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Head,
    Manager,
    Units,
    Analyze,
    End,
}

fn parse_marker(line: usize, value: &str) -> Result<(u64, u64), RecordError> {
    let bad = || RecordError::Line {
        line,
        problem: format!(
            "marker_monotonic_ns is {}: the workload could not write the marker or read its clock",
            quoted(value)
        ),
    };
    let mut it = value.split_whitespace();
    let before = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let after = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    if after < before || it.next().is_some() {
        return Err(bad());
    }
    Ok((before, after))
}

fn parse_head(record: &mut Record, n: usize, line: &str) -> Result<(), RecordError> {
    if let Some(v) = line.strip_prefix("marker_value=") {
        let v = v.trim();
        let parsed = v
            .strip_prefix("0x")
            .map_or_else(|| v.parse().ok(), |h| u8::from_str_radix(h, 16).ok());
        record.marker_value = parsed.ok_or_else(|| RecordError::Line {
            line: n,
            problem: format!("marker_value is {}, not a byte", quoted(v)),
        })?;
    } else if let Some(v) = line.strip_prefix("marker_monotonic_ns=") {
        record.marker_guest_ns = parse_marker(n, v)?;
    }
    Ok(())
}

/// Adds the unit being read, if any, within [`MAX_UNITS`].
fn push_unit(record: &mut Record, unit: &mut Option<UnitProps>) -> Result<(), RecordError> {
    if let Some(u) = unit.take() {
        if record.units.len() >= MAX_UNITS {
            return Err(RecordError::TooManyUnits);
        }
        record.units.push(u);
    }
    Ok(())
}

/// Parses a record of at most [`MAX_RECORD_BYTES`] and [`MAX_UNITS`].
pub fn parse(text: &str) -> Result<Record, RecordError> {
    if text.len() > MAX_RECORD_BYTES {
        return Err(RecordError::TooLarge(text.len()));
    }
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, l)) if l.trim() == RECORD_MAGIC => {}
        _ => return Err(RecordError::Magic),
    }
    let mut record = Record::default();
    let mut section = Section::Head;
    let mut unit: Option<UnitProps> = None;
    let mut analyze = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        let next = match line.trim() {
            "[manager]" => Some(Section::Manager),
            "[units]" => Some(Section::Units),
            "[analyze]" => Some(Section::Analyze),
            "[end]" => Some(Section::End),
            _ => None,
        };
        if let Some(next) = next {
            push_unit(&mut record, &mut unit)?;
            section = next;
            continue;
        }
        match section {
            Section::Head => parse_head(&mut record, n, line)?,
            Section::Manager => {
                if let Some((k, v)) = line.split_once('=') {
                    record.manager.insert(k.to_string(), v.to_string());
                }
            }
            Section::Units => {
                if line.trim().is_empty() {
                    push_unit(&mut record, &mut unit)?;
                } else if let Some((k, v)) = line.split_once('=') {
                    let u = unit.get_or_insert_with(UnitProps::default);
                    apply_unit_property(u, n, k, v)?;
                }
            }
            Section::Analyze => analyze.push(line),
            Section::End => {}
        }
    }
    if section != Section::End {
        return Err(RecordError::Truncated);
    }
    record.units.retain(|u| !u.id.is_empty());
    record.analyze = analyze.join("\n");
    if record.marker_guest_ns == (0, 0) {
        return Err(RecordError::Missing("marker_monotonic_ns line"));
    }
    if record.manager_us("UserspaceTimestampMonotonic") == 0 {
        return Err(RecordError::Missing(
            "UserspaceTimestampMonotonic of the manager",
        ));
    }
    if record.units.is_empty() {
        return Err(RecordError::Missing("unit"));
    }
    Ok(record)
}

/// A duration as systemd prints it (`1min 2.345s`, `1.234s`, `567ms`,
/// `89us`), in µs.
pub fn parse_systemd_span(s: &str) -> Option<u64> {
    let mut total = 0f64;
    let mut any = false;
    for word in s.split_whitespace() {
        let split = word.find(|c: char| c.is_ascii_alphabetic())?;
        let (num, unit) = word.split_at(split);
        let v: f64 = num.parse().ok()?;
        let us = match unit {
            "h" => 3_600e6,
            "min" => 60e6,
            "s" => 1e6,
            "ms" => 1e3,
            "us" | "µs" => 1.0,
            _ => return None,
        };
        total += v * us;
        any = true;
    }
    any.then(|| total.round() as u64)
}

/// systemd's `Startup finished in ...` line and its kernel and userspace
/// figures (µs).
pub fn startup_finished(analyze: &str) -> Option<(String, u64, u64)> {
    let line = analyze
        .lines()
        .find(|l| l.starts_with("Startup finished in "))?;
    let rest = line.strip_prefix("Startup finished in ")?;
    let part = |label: &str| {
        rest.split(" + ").find_map(|p| {
            let p = p.split(" = ").next()?.trim();
            p.strip_suffix(&format!("({label})"))
                .and_then(|v| parse_systemd_span(v.trim()))
        })
    };
    Some((line.trim().to_string(), part("kernel")?, part("userspace")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_spans() {
        assert_eq!(parse_systemd_span("1.234s"), Some(1_234_000));
        assert_eq!(parse_systemd_span("1min 2.5s"), Some(62_500_000));
        assert_eq!(parse_systemd_span("567ms"), Some(567_000));
        assert_eq!(parse_systemd_span("89us"), Some(89));
        assert_eq!(parse_systemd_span("fast"), None);
        assert_eq!(parse_systemd_span(""), None);
    }

    #[test]
    fn startup_line() {
        let a = "Startup finished in 2.519s (kernel) + 1min 4.133s (userspace) = 1min 6.652s \nmulti-user.target reached after 1min 4.100s in userspace.";
        let (line, k, u) = startup_finished(a).unwrap();
        assert!(line.starts_with("Startup finished in 2.519s"));
        assert_eq!(k, 2_519_000);
        assert_eq!(u, 64_133_000);
        assert!(startup_finished("Bootup is not yet finished").is_none());
    }

    #[test]
    fn refusals_name_the_problem() {
        assert_eq!(parse("hello\n"), Err(RecordError::Magic));
        let head = "bootscope-units 1\nmarker_value=0x60\nmarker_monotonic_ns=5 7\n[manager]\nUserspaceTimestampMonotonic=3\n[units]\nId=a.service\n";
        assert_eq!(parse(head), Err(RecordError::Truncated));
        let bad = head.replace("5 7", "error") + "[end]\n";
        assert!(matches!(
            parse(&bad),
            Err(RecordError::Line { line: 3, .. })
        ));
        let bad = head.replace(
            "Id=a.service",
            "Id=a.service\nActiveEnterTimestampMonotonic=x",
        ) + "[end]\n";
        assert!(matches!(
            parse(&bad),
            Err(RecordError::Line { line: 8, .. })
        ));
        let ok = parse(&(head.to_string() + "[end]\n")).unwrap();
        assert_eq!(ok.marker_guest_ns, (5, 7));
        assert_eq!(ok.marker_value, 0x60);
        assert_eq!(ok.units.len(), 1);
    }
}
