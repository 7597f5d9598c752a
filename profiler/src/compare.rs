//! Two profiles compared (`bootscope compare A.profile.json
//! B.profile.json`): the boot phases' durations, exits per reason, and,
//! where both profiles have exit sites, per site (the reason and the guest
//! function as the profile names it), each list of exits sorted by the size
//! of the change. One boot against one boot: the phases' differences come
//! with no significance test (the report says so and points to `bench`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bootscope_model::human::group_digits_signed as group;
use bootscope_model::human::ms_grouped as ms_text;
use serde::Serialize;

use crate::sites::ExitSites;
use crate::Profile;

/// Schema name of the JSON comparison.
pub const COMPARE_SCHEMA_NAME: &str = "bootscope.profile-compare";
/// Its version.
pub const COMPARE_SCHEMA_VERSION: u32 = 1;
/// Site rows the text report shows (the JSON has all).
pub const TEXT_SITES: usize = 30;

/// One count in both profiles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub base: u64,
    pub new: u64,
    /// `new - base` (128 bits: any two 64-bit counts differ by less).
    pub change: i128,
}

impl Change {
    fn new(base: u64, new: u64) -> Self {
        Self {
            base,
            new,
            change: i128::from(new) - i128::from(base),
        }
    }

    /// `base -> new (+change, +pct %)`, the percentage left out from 0.
    fn text(&self) -> String {
        let pct = if self.base > 0 {
            format!(", {:+.1} %", 100.0 * self.change as f64 / self.base as f64)
        } else {
            String::new()
        };
        format!(
            "{} -> {} ({}{pct})",
            group(i128::from(self.base)),
            group(i128::from(self.new)),
            signed(self.change)
        )
    }
}

/// How long one phase took in both profiles (absent where a profile has
/// no such phase).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseChange {
    pub phase: String,
    pub base_ns: Option<u64>,
    pub new_ns: Option<u64>,
    /// `new_ns - base_ns`, where both have the phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_ns: Option<i64>,
}

impl PhaseChange {
    /// `12.3 ms -> 10.1 ms (-2.2 ms, -17.9 %)`, `absent -> 3.0 ms`.
    fn text(&self) -> String {
        let ms = |ns: Option<u64>| match ns {
            Some(ns) => format!("{} ms", ms_text(ns as f64)),
            None => "absent".to_string(),
        };
        let mut out = format!("{} -> {}", ms(self.base_ns), ms(self.new_ns));
        if let (Some(change), Some(base)) = (self.change_ns, self.base_ns) {
            let sign = if change > 0 { "+" } else { "" };
            out.push_str(&format!(" ({sign}{} ms", ms_text(change as f64)));
            if base > 0 {
                out.push_str(&format!(", {:+.1} %", 100.0 * change as f64 / base as f64));
            }
            out.push(')');
        }
        out
    }
}

/// What the phase section says of one pair of boots.
pub const PHASES_CAVEAT: &str = "one boot each: no significance test; `bootscope bench --output FILE` boots each configuration N times and `bootscope compare` of two bench files tests the difference";

/// Each phase's total duration in `p`, in the order the phases first
/// started; a timeline's initcall spans left out.
fn phase_durations(p: &Profile) -> Vec<(String, u64)> {
    let mut spans: Vec<_> = p.phases.iter().collect();
    spans.sort_by_key(|s| s.start_ns);
    let mut out: Vec<(String, u64)> = Vec::new();
    for s in spans {
        if s.name.starts_with("initcall: ") || s.name.starts_with("initcalls: ") {
            continue;
        }
        let d = s.end_ns.saturating_sub(s.start_ns);
        match out.iter_mut().find(|(n, _)| *n == s.name) {
            Some(e) => e.1 += d,
            None => out.push((s.name.clone(), d)),
        }
    }
    out
}

/// The phases of either profile, in the base's order then the new one's.
fn phase_changes(base: &Profile, new: &Profile) -> Vec<PhaseChange> {
    let (a, b) = (phase_durations(base), phase_durations(new));
    let mut names: Vec<&str> = a.iter().map(|p| p.0.as_str()).collect();
    for (n, _) in &b {
        if !names.contains(&n.as_str()) {
            names.push(n);
        }
    }
    let get = |v: &[(String, u64)], n: &str| v.iter().find(|p| p.0 == n).map(|p| p.1);
    names
        .into_iter()
        .map(|n| {
            let (base_ns, new_ns) = (get(&a, n), get(&b, n));
            PhaseChange {
                phase: n.to_string(),
                base_ns,
                new_ns,
                change_ns: base_ns.zip(new_ns).map(|(x, y)| y as i64 - x as i64),
            }
        })
        .collect()
}

/// Exits of one reason in both profiles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReasonChange {
    pub reason: String,
    #[serde(flatten)]
    pub counts: Change,
}

/// Exits of one reason at one guest function in both profiles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteChange {
    pub reason: String,
    /// The function as the profile names it (`[guest user]`,
    /// `[unattributed]`, or the address in hex when it was not named).
    pub function: String,
    #[serde(flatten)]
    pub counts: Change,
}

/// The comparison of two profiles.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProfileComparison {
    pub schema: &'static str,
    pub version: u32,
    pub base: String,
    pub new: String,
    /// Both profiles' exit views (`exits.source`), when they differ: their
    /// reasons are then not the same names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources_differ: Option<(String, String)>,
    /// Every phase of either profile and how long it took in each.
    pub phases: Vec<PhaseChange>,
    pub total: Change,
    /// Every reason of either profile, the largest change first.
    pub reasons: Vec<ReasonChange>,
    /// Whether both profiles have exit sites (`--exit-sites`).
    pub sites_compared: bool,
    /// The files without exit sites.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites_missing_in: Vec<String>,
    /// Sites whose count changed, the largest change first.
    pub sites: Vec<SiteChange>,
    /// Sites with the same count in both.
    pub sites_unchanged: usize,
    /// The sites' symbol warnings of either profile, with its file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Exits per (reason, function) of one profile's sites.
fn by_function(s: &ExitSites) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for site in &s.sites {
        let n: &mut u64 = out
            .entry((site.reason.clone(), site.function_name()))
            .or_default();
        // Counts of one function add up to at most the profile's total:
        // only a made-up profile reaches the limit.
        *n = n.saturating_add(site.count);
    }
    out
}

/// Every key of either map with its two counts, the largest change first
/// (then by key, so equal inputs give equal output).
fn pair<K: Ord + Clone>(a: &BTreeMap<K, u64>, b: &BTreeMap<K, u64>) -> Vec<(K, Change)> {
    let mut keys: Vec<&K> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut v: Vec<(K, Change)> = keys
        .into_iter()
        .map(|k| {
            let c = Change::new(
                a.get(k).copied().unwrap_or(0),
                b.get(k).copied().unwrap_or(0),
            );
            (k.clone(), c)
        })
        .collect();
    v.sort_by(|x, y| {
        y.1.change
            .unsigned_abs()
            .cmp(&x.1.change.unsigned_abs())
            .then_with(|| x.0.cmp(&y.0))
    });
    v
}

/// Compares `base` (read from `base_name`) with `new`.
pub fn compare(
    base: &Profile,
    base_name: &str,
    new: &Profile,
    new_name: &str,
) -> ProfileComparison {
    let reasons = |p: &Profile| -> BTreeMap<String, u64> {
        p.exits
            .by_reason
            .iter()
            .map(|r| (r.reason.clone(), r.count))
            .collect()
    };
    let reasons = pair(&reasons(base), &reasons(new))
        .into_iter()
        .map(|(reason, counts)| ReasonChange { reason, counts })
        .collect();
    let mut sites_missing_in = Vec::new();
    for (p, name) in [(base, base_name), (new, new_name)] {
        if p.exits.sites.is_none() {
            sites_missing_in.push(name.to_string());
        }
    }
    let mut warnings = Vec::new();
    for (p, name) in [(base, base_name), (new, new_name)] {
        let info = p.exits.sites.as_ref().and_then(|s| s.symbols.as_ref());
        for w in info.map(|i| i.warnings.as_slice()).unwrap_or_default() {
            warnings.push(format!("{name}: {w}"));
        }
    }
    let (sites, sites_unchanged) = match (&base.exits.sites, &new.exits.sites) {
        (Some(a), Some(b)) => {
            let all = pair(&by_function(a), &by_function(b));
            let unchanged = all.iter().filter(|(_, c)| c.change == 0).count();
            let changed = all
                .into_iter()
                .filter(|(_, c)| c.change != 0)
                .map(|((reason, function), counts)| SiteChange {
                    reason,
                    function,
                    counts,
                })
                .collect();
            (changed, unchanged)
        }
        _ => (Vec::new(), 0),
    };
    let sources_differ = (base.exits.source != new.exits.source)
        .then(|| (base.exits.source.clone(), new.exits.source.clone()));
    ProfileComparison {
        schema: COMPARE_SCHEMA_NAME,
        version: COMPARE_SCHEMA_VERSION,
        base: base_name.into(),
        new: new_name.into(),
        sources_differ,
        phases: phase_changes(base, new),
        total: Change::new(base.exits.total, new.exits.total),
        reasons,
        sites_compared: sites_missing_in.is_empty(),
        sites_missing_in,
        sites,
        sites_unchanged,
        warnings,
    }
}

impl ProfileComparison {
    /// The report as people read it.
    pub fn text(&self) -> String {
        let mut s = String::new();
        if !self.phases.is_empty() {
            let _ = writeln!(s, "phases: {} -> {}", self.base, self.new);
            let _ = writeln!(s, "  ({PHASES_CAVEAT})");
            for p in &self.phases {
                let _ = writeln!(s, "  {}: {}", p.phase, p.text());
            }
        }
        let _ = writeln!(s, "exits: {} -> {}", self.base, self.new);
        if let Some((a, b)) = &self.sources_differ {
            let _ = writeln!(
                s,
                "note: the exit views differ ({a} against {b}): their reasons are not the same names"
            );
        }
        let _ = writeln!(s, "  total: {}", self.total.text());
        for r in &self.reasons {
            let _ = writeln!(s, "  {}: {}", r.reason, r.counts.text());
        }
        if !self.sites_compared {
            let _ = writeln!(
                s,
                "exit sites: not collected in {} (profile with --exit-sites to compare them)",
                self.sites_missing_in.join(" and ")
            );
            return s;
        }
        let _ = writeln!(
            s,
            "exit sites (reason at guest function), largest change first:"
        );
        for c in self.sites.iter().take(TEXT_SITES) {
            let _ = writeln!(s, "  {} at {}: {}", c.reason, c.function, c.counts.text());
        }
        let more = self.sites.len().saturating_sub(TEXT_SITES);
        if more > 0 {
            let _ = writeln!(s, "  ... {more} more changed (--json lists them all)");
        }
        let _ = writeln!(
            s,
            "  {} changed, {} unchanged",
            self.sites.len(),
            self.sites_unchanged
        );
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {w}");
        }
        // Phase and function names come from the profiles read: the text
        // rule for a terminal.
        bootscope_model::text::printable_keeping(&s, &['\n']).into_owned()
    }

    /// The report as JSON (pretty, with a final newline).
    pub fn json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// `+1,200`, `-3`, `0`.
fn signed(n: i128) -> String {
    if n > 0 {
        format!("+{}", group(n))
    } else {
        group(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ExitReasonStat;
    use crate::sites::ExitSite;

    fn profile(reasons: &[(&str, u64)], sites: Option<&[(&str, &str, u64)]>) -> Profile {
        let mut p = Profile::new();
        for (r, n) in reasons {
            p.exits.by_reason.push(ExitReasonStat {
                reason: (*r).into(),
                count: *n,
                ..Default::default()
            });
            p.exits.total += n;
        }
        p.exits.sites = sites.map(|s| ExitSites {
            sites: s
                .iter()
                .enumerate()
                .map(|(i, (reason, f, n))| ExitSite {
                    reason: (*reason).into(),
                    rip: Some(0xffff_ffff_8100_0000 + i as u64),
                    function: Some((*f).into()),
                    offset: Some(i as u64),
                    count: *n,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        p
    }

    #[test]
    fn the_largest_counts_are_printed_whole() {
        let max = u64::MAX;
        let a = profile(&[("HLT", 0)], None);
        let mut b = profile(&[("HLT", max)], None);
        b.exits.total = max;
        let c = compare(&a, "a", &b, "b");
        assert_eq!(c.total.change, i128::from(max));
        let text = c.text();
        assert!(text.contains("18,446,744,073,709,551,615"), "{text}");
        assert!(text.contains("+18,446,744,073,709,551,615"), "{text}");
        assert!(!text.contains("-1"), "{text}");
        let json = c.json();
        assert!(json.contains("18446744073709551615"), "{json}");
        let back = compare(&b, "b", &a, "a");
        assert!(back.text().contains("-18,446,744,073,709,551,615"));
    }

    #[test]
    fn reasons_and_sites_by_size_of_change() {
        let a = profile(
            &[("io", 43_012), ("msr", 10), ("hlt", 5)],
            Some(&[
                ("io", "io_serial_out", 43_000),
                ("io", "io_serial_in", 12),
                ("msr", "native_write_msr", 10),
                ("hlt", "default_idle", 5),
            ]),
        );
        let b = profile(
            &[("io", 402), ("msr", 10), ("npf", 7)],
            Some(&[
                ("io", "io_serial_out", 400),
                ("io", "io_serial_out", 2),
                ("msr", "native_write_msr", 10),
                ("npf", "clear_page", 7),
            ]),
        );
        let c = compare(&a, "a.json", &b, "b.json");
        assert_eq!(
            c.text(),
            "exits: a.json -> b.json\n  \
             total: 43,027 -> 419 (-42,608, -99.0 %)\n  \
             io: 43,012 -> 402 (-42,610, -99.1 %)\n  \
             npf: 0 -> 7 (+7)\n  \
             hlt: 5 -> 0 (-5, -100.0 %)\n  \
             msr: 10 -> 10 (0, +0.0 %)\n\
             exit sites (reason at guest function), largest change first:\n  \
             io at io_serial_out: 43,000 -> 402 (-42,598, -99.1 %)\n  \
             io at io_serial_in: 12 -> 0 (-12, -100.0 %)\n  \
             npf at clear_page: 0 -> 7 (+7)\n  \
             hlt at default_idle: 5 -> 0 (-5, -100.0 %)\n  \
             4 changed, 1 unchanged\n"
        );
        let v: serde_json::Value = serde_json::from_str(&c.json()).unwrap();
        assert_eq!(v["schema"], "bootscope.profile-compare");
        assert_eq!(v["sites"][0]["function"], "io_serial_out");
        assert_eq!(v["sites"][0]["change"], -42_598);
    }

    #[test]
    fn without_sites_reasons_only() {
        let a = profile(&[("io", 3)], None);
        let b = profile(&[("io", 1)], Some(&[("io", "io_serial_out", 1)]));
        let c = compare(&a, "a.json", &b, "b.json");
        assert!(!c.sites_compared);
        assert!(c.text().ends_with(
            "exit sites: not collected in a.json (profile with --exit-sites to compare them)\n"
        ));
        assert_eq!(group(-1_234_567), "-1,234,567");
        assert_eq!(signed(0), "0");
    }

    #[test]
    fn phases_compared_with_the_caveat() {
        use crate::profile::PhaseSpan;
        let span = |name: &str, start_ns: u64, end_ns: u64| PhaseSpan {
            name: name.into(),
            start_ns,
            end_ns,
        };
        let mut a = profile(&[("io", 1)], None);
        a.phases = vec![
            span("vmm setup", 0, 100_000_000),
            span("initcall: foo", 150_000_000, 160_000_000),
            span("kernel", 100_000_000, 1_300_000_000),
        ];
        let mut b = profile(&[("io", 1)], None);
        b.phases = vec![
            span("vmm setup", 0, 120_000_000),
            span("kernel", 120_000_000, 1_000_000_000),
            span("userspace", 1_000_000_000, 1_000_400_000),
        ];
        let c = compare(&a, "a.json", &b, "b.json");
        let text = c.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "phases: a.json -> b.json");
        assert_eq!(lines[1], format!("  ({PHASES_CAVEAT})"));
        assert_eq!(
            &lines[2..5],
            [
                "  vmm setup: 100.0 ms -> 120.0 ms (+20.0 ms, +20.0 %)",
                "  kernel: 1,200.0 ms -> 880.0 ms (-320.0 ms, -26.7 %)",
                "  userspace: absent -> 0.4 ms",
            ]
        );
        assert_eq!(lines[5], "exits: a.json -> b.json");
        let v: serde_json::Value = serde_json::from_str(&c.json()).unwrap();
        assert_eq!(v["phases"][1]["change_ns"], -320_000_000);
        assert_eq!(v["phases"][2]["base_ns"], serde_json::Value::Null);
        assert_eq!(ms_text(-50_000.0), "-0.1");
        assert_eq!(ms_text(-40_000.0), "0.0");
    }
}
