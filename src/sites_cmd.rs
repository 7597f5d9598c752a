//! `--exit-sites` and `--guest-symbols` of `run` and `profile`: the guest
//! symbol table loaded before anything runs (a bad file is bad input), the
//! sites named once the profile is final, and their summary.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bootscope_profiler::guest_symbols::{kernel_of_command, SymbolTable};
use bootscope_profiler::Profile;

/// The symbol table to name sites with: `--guest-symbols`, else the guest
/// kernel the command boots when it can be read. Err: the file given is
/// not usable (bad input).
pub fn load_symbols(
    given: Option<&Path>,
    kernel: Option<PathBuf>,
) -> Result<Option<SymbolTable>, String> {
    if let Some(path) = given {
        return SymbolTable::load(path)
            .map(Some)
            .map_err(|e| format!("--guest-symbols: {e}"));
    }
    let Some(kernel) = kernel else {
        return Ok(None);
    };
    match SymbolTable::load(&kernel) {
        Ok(t) => Ok(Some(t)),
        Err(e) => {
            eprintln!(
                "bootscope: exit sites stay unnamed: {e} (give --guest-symbols to name them)"
            );
            Ok(None)
        }
    }
}

/// The kernel a launched command boots, for `profile -- COMMAND`.
pub fn command_kernel(command: &[String]) -> Option<PathBuf> {
    kernel_of_command(command)
}

/// Names the profile's sites (if any) and prints the warnings about them.
pub fn annotate(profile: &mut Profile, table: Option<&SymbolTable>) {
    let Some(sites) = profile.exits.sites.as_mut() else {
        return;
    };
    match table {
        Some(t) => t.annotate(sites),
        None => eprintln!(
            "bootscope: no guest symbols (give --guest-symbols vmlinux, bzImage, System.map \
             or kallsyms): exit sites are addresses"
        ),
    }
    if let Some(info) = &sites.symbols {
        for w in &info.warnings {
            eprintln!("bootscope: warning: exit sites: {w}");
        }
    }
}

/// How many sites of each reason the summary shows.
const TOP_SITES: usize = 5;

/// The top sites of each reason: `function+offset`, exits, share of the
/// reason, mean latency.
pub fn summary(p: &Profile) -> String {
    let mut s = String::new();
    let Some(sites) = &p.exits.sites else {
        return s;
    };
    let how = sites
        .symbols
        .as_ref()
        .map(|i| format!("{}; KASLR {}", i.source, i.kaslr))
        .unwrap_or_else(|| "not symbolized".into());
    let _ = writeln!(s, "exit sites ({how}):");
    let totals = sites.reason_totals();
    for r in p.exits.by_reason.iter().take(6) {
        let total = totals.get(&r.reason).copied().unwrap_or(0);
        let _ = writeln!(s, "  {} ({total} exits):", r.reason);
        for t in sites.top_sites(&r.reason).iter().take(TOP_SITES) {
            let share = 100.0 * t.count as f64 / total.max(1) as f64;
            let mean = if t.timed > 0 {
                format!("{:.1} us", t.mean_ns() as f64 / 1e3)
            } else {
                "-".into()
            };
            let _ = writeln!(
                s,
                "    {:<44} {:>10} {:>6.1}%  {mean}",
                t.name, t.count, share
            );
        }
    }
    if sites.overflows > 0 {
        let _ = writeln!(
            s,
            "  {} exits found the site map full: counted as [unattributed]",
            sites.overflows
        );
    }
    s
}

/// The exit sites of a profile as a flame graph SVG (inferno). Err: the
/// file is no profile, or has no exit sites (bad input).
pub fn flamegraph(input: &Path) -> Result<Vec<u8>, String> {
    let (profile, _) = bootscope_profiler::export::read_input(input).map_err(|e| e.to_string())?;
    let Some(sites) = profile.exits.sites.as_ref().filter(|s| !s.sites.is_empty()) else {
        return Err(format!(
            "{} has no exit sites: record it with --exit-sites",
            input.display()
        ));
    };
    let folded = sites.folded();
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "Exits by reason and guest function".into();
    opts.count_name = "exits".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, folded.lines(), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph of {}: {e}", input.display()))?;
    Ok(svg)
}
