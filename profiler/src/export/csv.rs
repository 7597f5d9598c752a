//! CSV tables (RFC 4180 quoting, `\n` line ends, a header row always).

use std::fmt::Write as _;

use super::CsvTable;
use crate::profile::Profile;
// Nanoseconds as exact milliseconds with six decimals (chrome.rs too).
pub(super) use bootscope_model::human::ms_exact as ms;

/// Renders one table of the profile.
pub fn to_csv(p: &Profile, table: CsvTable) -> String {
    let mut out = String::new();
    match table {
        CsvTable::Exits => exits(p, &mut out),
        CsvTable::Latency => latency(p, &mut out),
        CsvTable::Phases => phases(p, &mut out),
        CsvTable::Threads => threads(p, &mut out),
        CsvTable::ExitSites => exit_sites(p, &mut out),
        CsvTable::NpfRanges => npf_ranges(p, &mut out),
        CsvTable::GuestLog => guest_log(p, &mut out),
    }
    out
}

/// Quotes a field when it holds a comma, a quote or a line break, doubling
/// the quotes inside.
fn field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

fn row<S: AsRef<str>>(out: &mut String, fields: &[S]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&field(f.as_ref()));
    }
    out.push('\n');
}

fn exits(p: &Profile, out: &mut String) {
    row(
        out,
        &[
            "reason",
            "code",
            "count",
            "share_percent",
            "latency_total_ns",
            "latency_mean_ns",
        ],
    );
    let mut reasons: Vec<_> = p.exits.by_reason.iter().collect();
    reasons.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.reason.cmp(&b.reason)));
    let counted: u64 = reasons.iter().map(|r| r.count).sum();
    // Exits of no known reason still count in the whole.
    let whole = p.exits.total.max(counted);
    for r in reasons {
        let share = if whole == 0 {
            0.0
        } else {
            100.0 * r.count as f64 / whole as f64
        };
        let (total, mean) = match r.latency_total_ns {
            Some(t) if r.count > 0 => (t.to_string(), (t / r.count).to_string()),
            Some(t) => (t.to_string(), String::new()),
            None => (String::new(), String::new()),
        };
        row(
            out,
            &[
                r.reason.clone(),
                r.code.to_string(),
                r.count.to_string(),
                format!("{share:.2}"),
                total,
                mean,
            ],
        );
    }
}

fn latency(p: &Profile, out: &mut String) {
    row(out, &["reason", "lo_ns", "hi_ns", "count"]);
    let mut reasons: Vec<_> = p.exits.by_reason.iter().collect();
    reasons.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.reason.cmp(&b.reason)));
    for r in reasons {
        let mut buckets: Vec<_> = r.latency_hist.iter().collect();
        buckets.sort_by_key(|b| (b.lo_ns, b.hi_ns));
        for b in buckets {
            row(
                out,
                &[
                    r.reason.clone(),
                    b.lo_ns.to_string(),
                    b.hi_ns.to_string(),
                    b.count.to_string(),
                ],
            );
        }
    }
}

fn phases(p: &Profile, out: &mut String) {
    row(out, &["phase", "start_ms", "end_ms", "duration_ms"]);
    for ph in &p.phases {
        row(
            out,
            &[
                ph.name.clone(),
                ms(ph.start_ns),
                ms(ph.end_ns),
                ms(ph.end_ns.saturating_sub(ph.start_ns)),
            ],
        );
    }
}

/// Space-separated numbers.
fn list(values: impl IntoIterator<Item = u32>) -> String {
    let mut s = String::new();
    for v in values {
        if !s.is_empty() {
            s.push(' ');
        }
        let _ = write!(s, "{v}");
    }
    s
}

fn threads(p: &Profile, out: &mut String) {
    row(
        out,
        &[
            "tid",
            "name",
            "role",
            "cpus",
            "nodes",
            "pages_allocated",
            "pages_local",
            "pages_remote",
        ],
    );
    for t in &p.threads {
        row(
            out,
            &[
                t.tid.to_string(),
                t.name.clone(),
                t.role.clone(),
                list(t.cpus.iter().map(|c| c.cpu)),
                list(t.nodes.iter().copied()),
                t.pages_allocated.to_string(),
                t.pages_local.to_string(),
                t.pages_remote.to_string(),
            ],
        );
    }
}

fn exit_sites(p: &Profile, out: &mut String) {
    row(
        out,
        &[
            "reason",
            "vcpu",
            "phase",
            "rip",
            "function",
            "offset",
            "count",
            "share_percent",
            "latency_total_ns",
            "latency_mean_ns",
        ],
    );
    let Some(sites) = &p.exits.sites else { return };
    let totals = sites.reason_totals();
    for s in &sites.sites {
        let total = totals.get(&s.reason).copied().unwrap_or(0).max(1);
        row(
            out,
            &[
                s.reason.clone(),
                s.vcpu.to_string(),
                s.phase.clone(),
                s.rip.map(|r| format!("{r:#x}")).unwrap_or_default(),
                s.function_name(),
                s.offset.map(|o| format!("{o:#x}")).unwrap_or_default(),
                s.count.to_string(),
                format!("{:.3}", 100.0 * s.count as f64 / total as f64),
                s.latency_total_ns.to_string(),
                s.latency_total_ns
                    .checked_div(s.timed)
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            ],
        );
    }
}

fn npf_ranges(p: &Profile, out: &mut String) {
    row(
        out,
        &[
            "gpa_start",
            "gpa_end",
            "phase",
            "label",
            "count",
            "latency_total_ns",
            "latency_mean_ns",
        ],
    );
    let ranges = p.exits.sites.iter().flat_map(|s| &s.npf_ranges);
    for r in ranges {
        row(
            out,
            &[
                format!("{:#x}", r.gpa_start),
                format!("{:#x}", r.gpa_end),
                r.phase.clone(),
                r.label.clone().unwrap_or_default(),
                r.count.to_string(),
                r.latency_total_ns.to_string(),
                r.latency_total_ns
                    .checked_div(r.timed)
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            ],
        );
    }
}

/// The guest kernel's log, one record a row: its text made printable
/// (`bootscope_model::text::printable`: an escape sequence the guest wrote
/// shows as `\e`, a record's second line after `\n`), so that a row is
/// one line.
fn guest_log(p: &Profile, out: &mut String) {
    row(out, &["guest_ts_ns", "t_ns", "text"]);
    let Some(g) = &p.guest_read else {
        return;
    };
    let clock = g.log_clock();
    for r in g.kernel_log.iter().flat_map(|l| &l.records) {
        let t = clock
            .and_then(|c| r.profile_ns(c))
            .map(|t| t.to_string())
            .unwrap_or_default();
        row(
            out,
            &[
                r.ts_ns.to_string(),
                t,
                bootscope_model::text::printable(&r.text).into_owned(),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{self, AWKWARD_REASON};
    use super::*;

    /// A small RFC 4180 reader, to check the writer against.
    fn parse(text: &str) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        let mut row = Vec::new();
        let mut cell = String::new();
        let mut chars = text.chars().peekable();
        let mut quoted = false;
        while let Some(c) = chars.next() {
            match (quoted, c) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    chars.next();
                    cell.push('"');
                }
                (true, '"') => quoted = false,
                (true, c) => cell.push(c),
                (false, '"') => {
                    assert!(cell.is_empty(), "quote inside an unquoted field");
                    quoted = true;
                }
                (false, ',') => row.push(std::mem::take(&mut cell)),
                (false, '\n') => {
                    row.push(std::mem::take(&mut cell));
                    rows.push(std::mem::take(&mut row));
                }
                (false, c) => cell.push(c),
            }
        }
        assert!(!quoted, "unterminated quote");
        assert!(cell.is_empty() && row.is_empty(), "last line lacks \\n");
        rows
    }

    fn table(p: &Profile, t: CsvTable) -> Vec<Vec<String>> {
        let rows = parse(&to_csv(p, t));
        let width = rows[0].len();
        assert!(rows.iter().all(|r| r.len() == width), "ragged: {rows:?}");
        rows
    }

    #[test]
    fn exit_histogram() {
        let rows = table(&fixture::profile(), CsvTable::Exits);
        assert_eq!(
            rows[0],
            [
                "reason",
                "code",
                "count",
                "share_percent",
                "latency_total_ns",
                "latency_mean_ns"
            ]
        );
        assert_eq!(rows[1], ["io", "123", "600", "60.00", "1200000", "2000"]);
        assert_eq!(rows[2], ["npf", "1024", "300", "30.00", "3000000", "10000"]);
        assert_eq!(rows[3], ["hlt", "120", "75", "7.50", "", ""]);
        assert_eq!(
            rows[4],
            [AWKWARD_REASON, "7", "25", "2.50", "50000", "2000"]
        );
        assert_eq!(rows.len(), 5);
    }

    #[test]
    fn quoting() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two\nlines\"");
        assert_eq!(field("cr\r"), "\"cr\r\"");
        let text = to_csv(&fixture::profile(), CsvTable::Exits);
        assert!(text.contains("\"pio_write \"\"0x3f8\"\", \\ line\nend\",7,"));
    }

    #[test]
    fn guest_log_rows_are_one_line_each_on_the_profiles_clock() {
        let text = to_csv(&fixture::with_guest_log(true), CsvTable::GuestLog);
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(!text.contains('\u{1b}'));
        let rows = parse(&text);
        assert_eq!(rows[0], ["guest_ts_ns", "t_ns", "text"]);
        assert_eq!(rows[1], ["0", "1000000", "Linux version 6.1.0-56-amd64"]);
        assert_eq!(rows[2], ["150000000", "151000000", "evil \\e[2J, cleared"]);
        assert_eq!(rows[3][2], "Run /init as init process\\n  with arguments:");
        // Off the clock: the guest's time alone.
        let rows = table(&fixture::with_guest_log(false), CsvTable::GuestLog);
        assert_eq!(rows[4], ["700000000", "", "reboot: Power down"]);
        // A profile without a guest read: the header alone.
        assert_eq!(
            to_csv(&fixture::profile(), CsvTable::GuestLog),
            "guest_ts_ns,t_ns,text\n"
        );
    }

    #[test]
    fn latency_buckets() {
        let rows = table(&fixture::profile(), CsvTable::Latency);
        assert_eq!(rows[0], ["reason", "lo_ns", "hi_ns", "count"]);
        assert_eq!(rows[1], ["io", "1024", "2048", "100"]);
        assert_eq!(rows.len(), 1 + 3 + 2 + 2);
        assert_eq!(rows[7], [AWKWARD_REASON, "2048", "4096", "20"]);
    }

    #[test]
    fn phase_table() {
        let rows = table(&fixture::profile(), CsvTable::Phases);
        assert_eq!(rows[0], ["phase", "start_ms", "end_ms", "duration_ms"]);
        assert_eq!(rows[3], ["kernel", "80.000000", "800.000000", "720.000000"]);
        assert_eq!(rows.len(), 5);
        assert_eq!(ms(1_234_567_891), "1234.567891");
        assert_eq!(ms(0), "0.000000");
    }

    #[test]
    fn thread_table() {
        let rows = table(&fixture::profile(), CsvTable::Threads);
        assert_eq!(
            rows[0],
            [
                "tid",
                "name",
                "role",
                "cpus",
                "nodes",
                "pages_allocated",
                "pages_local",
                "pages_remote"
            ]
        );
        assert_eq!(
            rows[2],
            [
                "4243",
                "touch_pages",
                "prealloc",
                "1 2",
                "0 1",
                "131072",
                "100000",
                "31072"
            ]
        );
        assert_eq!(rows[3][1], "CPU 0/KVM, \"main\"");
        assert_eq!(rows.len(), 4);
    }

    #[test]
    fn empty_profile_has_headers_only() {
        let p = Profile::new();
        for t in [
            CsvTable::Exits,
            CsvTable::Latency,
            CsvTable::Phases,
            CsvTable::Threads,
        ] {
            assert_eq!(table(&p, t).len(), 1, "{t:?}");
        }
    }

    #[test]
    fn shares_use_the_reason_sum_when_total_is_short() {
        let mut p = fixture::profile();
        p.exits.total = 0;
        let rows = table(&p, CsvTable::Exits);
        assert_eq!(rows[1][3], "60.00");
    }
}
