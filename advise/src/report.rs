//! The advice as text and as the `bootscope.advise` document
//! (docs/advise-schema.md): one type ([`AdviseDoc`]) for the writer and
//! any reader.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::evaluate::{human_ns, Advice, Triable};
use crate::evidence::{Evidence, Vmm};
use crate::prove::{FixResult, ProveReport};
use crate::rules::Risk;

/// The document's `schema` field.
pub const SCHEMA: &str = "bootscope.advise";
/// The document's version.
pub const VERSION: u32 = 1;

/// What `advise` writes with `--output`/`--json`.
#[derive(Clone, Debug, Serialize)]
pub struct AdviseDoc<'a> {
    pub schema: &'static str,
    pub version: u32,
    /// The documents read (none when `--prove` recorded its own).
    pub documents: &'a [PathBuf],
    pub vmm: &'a Vmm,
    pub host_kvm: &'a str,
    pub cmdline: Option<&'a str>,
    #[serde(flatten)]
    pub advice: &'a Advice,
    /// Present with `--prove`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prove: Option<&'a ProveReport>,
}

/// The schema name and version of a document, for readers that check
/// before reading.
#[derive(Debug, Deserialize)]
pub struct DocHeader {
    pub schema: String,
    pub version: u32,
}

impl<'a> AdviseDoc<'a> {
    pub fn new(ev: &'a Evidence, advice: &'a Advice, prove: Option<&'a ProveReport>) -> Self {
        Self {
            schema: SCHEMA,
            version: VERSION,
            documents: &ev.documents,
            vmm: &ev.vmm,
            host_kvm: &ev.host_kvm,
            cmdline: ev.cmdline.as_deref(),
            advice,
            prove,
        }
    }

    /// Pretty JSON with a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("the advise document serializes");
        v.push(b'\n');
        v
    }
}

fn risk_word(r: Risk) -> &'static str {
    match r {
        Risk::Low => "low risk",
        Risk::GivesUp => "gives up",
        Risk::Unsafe => "UNSAFE",
    }
}

fn triable_word(t: Triable) -> &'static str {
    match t {
        Triable::Yes => "--prove tries it",
        Triable::NeedsAllowUnsafe => "tried only with --allow-unsafe",
        Triable::BootscopeOnly => "a bootscope run option: advice for this VMM",
        Triable::No => "advice: cannot be tried automatically",
    }
}

/// The advice in words, findings ranked.
pub fn advice_text(advice: &Advice) -> String {
    let mut out = String::new();
    if advice.findings.is_empty() {
        out.push_str("advise: no finding\n");
    }
    for (i, f) in advice.findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}. {}{} [{}]",
            i + 1,
            f.title,
            f.subject
                .as_deref()
                .map(|s| format!(": {s}"))
                .unwrap_or_default(),
            f.rule
        );
        match f.accounts_ns {
            Some(t) => {
                let _ = writeln!(
                    out,
                    "   accounts for about {} of the {} phase (estimate)",
                    human_ns(t),
                    f.phase
                );
            }
            None => {
                let _ = writeln!(out, "   no time attributed ({} phase)", f.phase);
            }
        }
        for e in &f.evidence {
            let _ = writeln!(out, "   evidence: {e}");
        }
        for c in &f.fixes {
            let _ = writeln!(
                out,
                "   fix: {} ({}; {})",
                c.change.describe(),
                risk_word(c.risk),
                triable_word(c.triable)
            );
            let _ = writeln!(out, "        gives up: {}", c.gives_up);
            if let Some(t) = c.estimate_ns {
                let _ = writeln!(
                    out,
                    "        estimated saving: up to {} (estimate)",
                    human_ns(t)
                );
            }
            let _ = writeln!(out, "        source: {}", c.source);
        }
    }
    if !advice.unchecked.is_empty() {
        out.push_str("not checked (the documents lack the data):\n");
        for u in &advice.unchecked {
            let _ = writeln!(out, "  {} ({}): needs {}", u.rule, u.title, u.flag);
        }
    }
    if !advice.clear.is_empty() {
        let _ = writeln!(out, "checked, nothing found: {}", advice.clear.join(", "));
    }
    // Subjects and evidence name what the documents hold (initcalls,
    // units, modules): the text rule for a terminal.
    bootscope_model::text::printable_keeping(&out, &['\n']).into_owned()
}

/// One measured result in words.
fn fix_result_text(out: &mut String, r: &FixResult) {
    let changes: Vec<String> = r.changes.iter().map(|c| c.describe()).collect();
    let _ = writeln!(out, "{}: {}", changes.join(" + "), r.verdict.word());
    let _ = writeln!(out, "   {}", r.detail);
    if let Some(c) = &r.time_to_userspace {
        let (b, n) = c.centers();
        let _ = write!(
            out,
            "   time to {} ({}s, {} rounds): {} -> {}, ratio {:.3}",
            crate::prove::plan::measured_to(&c.metric),
            c.center,
            r.rounds,
            human_ns(b as u64),
            human_ns(n as u64),
            if b > 0.0 { n / b } else { f64::NAN }
        );
        match &c.ratio {
            Some(ri) => {
                let _ = writeln!(
                    out,
                    "; Hodges-Lehmann ratio {:.3}, {} % interval {:.3}..{:.3}",
                    ri.estimate,
                    bootscope_bench::compare::format_confidence(ri.confidence),
                    ri.low,
                    ri.high
                );
            }
            None => out.push_str(" (too few boots for an interval)\n"),
        }
    }
    if let Some(est) = r.estimate_ns {
        let _ = writeln!(out, "   estimated beforehand: up to {}", human_ns(est));
    }
    if let Some(c) = &r.phase {
        let (b, n) = c.centers();
        let _ = writeln!(
            out,
            "   {}: {} -> {} ({:+.1} %)",
            c.metric,
            human_ns(b as u64),
            human_ns(n as u64),
            c.change_pct
        );
    }
    let exits: Vec<String> = r
        .exits
        .iter()
        .filter(|c| c.base.median > 0.0 || c.new.median > 0.0)
        .map(|c| {
            format!(
                "{} {:.0} -> {:.0}",
                c.metric.trim_start_matches("exits:"),
                c.base.median,
                c.new.median
            )
        })
        .collect();
    if !exits.is_empty() {
        let _ = writeln!(out, "   exits (medians): {}", exits.join(", "));
    }
}

/// `--prove`'s results in words.
pub fn prove_text(p: &ProveReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nproved: {} boots (up to {} rounds per fix, each booting both sides; {} at {}), original reaching {:?}{}",
        p.boots,
        p.runs_per_side,
        p.test.title(),
        crate::prove::options::level(p.level),
        p.check.userspace_mark,
        p.check
            .workload_mark
            .as_ref()
            .map(|m| format!(", measured to the workload's mark {m:?}"))
            .unwrap_or_default()
    );
    for r in &p.fixes {
        fix_result_text(&mut out, r);
    }
    for n in &p.not_tried {
        let _ = writeln!(out, "not tried: {} ({})", n.change.describe(), n.reason);
    }
    if let Some(t) = &p.together {
        let _ = writeln!(
            out,
            "all {} fixes together, measured first, against the original:",
            t.changes.len()
        );
        fix_result_text(&mut out, t);
    }
    match &p.combined {
        Some(c) if p.combined_first => {
            let _ = writeln!(
                out,
                "all {} fixes together, measured first, against the original (the proven line):",
                c.changes.len()
            );
            fix_result_text(&mut out, c);
        }
        Some(c) if c.changes.len() > 1 => {
            out.push_str("combined, against the original:\n");
            fix_result_text(&mut out, c);
        }
        Some(_) => out.push_str("one fix accepted: it is the combination\n"),
        None => out.push_str("no fix accepted: the original stays\n"),
    }
    let _ = writeln!(out, "final kernel command line: {}", p.final_cmdline);
    let _ = writeln!(out, "final command: {}", final_command(p));
    if let Some(s) = &p.interrupted_by {
        let _ = writeln!(
            out,
            "interrupted by {s}: the fixes after it were not measured"
        );
    }
    bootscope_model::text::printable_keeping(&out, &['\n']).into_owned()
}

/// The final command line as a shell takes it.
pub fn final_command(p: &ProveReport) -> String {
    let argv: Vec<std::ffi::OsString> = p.final_command.iter().map(Into::into).collect();
    let words = bootscope_bench::runner::shell_words(&argv);
    if !p.metric.starts_with("console:") {
        format!("bootscope run {words}")
    } else {
        words
    }
}
