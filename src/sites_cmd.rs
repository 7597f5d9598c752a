//! `--exit-sites` and `--guest-symbols` of `run` and `profile`: the guest
//! symbol table loaded before anything runs (a bad file is bad input), the
//! sites named once the profile is final, and their summary.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bootscope_profiler::guest_symbols::{kernel_of_command, SymbolTable, SymbolsError};
use bootscope_profiler::sites::{GuestRegion, MODULE_SPACE, MODULE_TAG};
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

/// The symbols of the kernel a `run` booted, once it has: from the
/// vmlinux the VMM decompressed (its kernel cache file) when there is one,
/// which saves decompressing the payload a second time, else from the
/// kernel file. None (said why): they could not be read.
pub fn booted_kernel_symbols(
    guest: &bootscope_vmm::timeline::TimelineGuest,
) -> Option<SymbolTable> {
    let kernel = PathBuf::from(&guest.kernel);
    let cached = guest
        .kernel_boot
        .as_ref()
        .and_then(|b| b.cache_file.as_ref())
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if let Some(Ok(mut t)) = cached.as_deref().map(cache_file_symbols) {
        t.source = format!(
            "{} (the payload of {}, decompressed by the VMM)",
            t.source,
            kernel.display()
        );
        return Some(t);
    }
    load_symbols(None, Some(kernel)).ok().flatten()
}

/// The symbols of the VMM's kernel cache file `vmlinux`: named by its
/// content, so the table recovered from it is kept beside it
/// (`FILE.kallsyms`) and read from there next time.
pub fn cache_file_symbols(vmlinux: &Path) -> Result<SymbolTable, SymbolsError> {
    SymbolTable::load_cached(vmlinux, &kept_table(vmlinux))
}

/// Where the symbol table recovered from the kernel cache file `vmlinux`
/// is kept: `FILE.kallsyms`.
pub fn kept_table(vmlinux: &Path) -> PathBuf {
    let mut name = vmlinux.as_os_str().to_owned();
    name.push(".kallsyms");
    PathBuf::from(name)
}

/// The kernel a launched command boots, for `profile -- COMMAND`.
pub fn command_kernel(command: &[String]) -> Option<PathBuf> {
    kernel_of_command(command)
}

/// Names the profile's sites (if any): the kernel image's from `table`,
/// the module area's from the guest's `modules` (bootscope's own VMM read
/// them); prints the warnings about them.
pub fn annotate(
    profile: &mut Profile,
    table: Option<&SymbolTable>,
    modules: Option<&bootscope_model::modules::GuestModules>,
) {
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
    if let Some(m) = modules {
        bootscope_profiler::guest_symbols::modules::name_sites(sites, m);
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
    npf_summary(&mut s, sites);
    if let Some(i) = sites.symbols.as_ref().filter(|i| i.in_modules > 0) {
        let (n, named) = (i.in_modules, i.in_modules_named);
        let _ = match (named, i.modules.len()) {
            (0, 0) => writeln!(
                s,
                "  {n} sites are in the kernel's module area ({:#x}..{:#x}): shown by \
                 address, tagged {}",
                MODULE_SPACE.start, MODULE_SPACE.end, MODULE_TAG
            ),
            (named, loaded) => writeln!(
                s,
                "  {n} sites are in the kernel's module area: {named} named `function \
                 [module]` from the guest's {loaded} loaded modules, {} by address, tagged {}",
                n - named,
                MODULE_TAG
            ),
        };
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

/// Labels the profile's nested page fault ranges and MMIO addresses with
/// what bootscope's VMM placed there (its timeline's `guest.regions`):
/// a virtio device's accesses by device and register.
pub fn label_npf_ranges(profile: &mut Profile, regions: &[bootscope_vmm::layout::GuestRegion]) {
    let regions: Vec<GuestRegion> = regions
        .iter()
        .map(|g| GuestRegion {
            name: g.name.clone(),
            start: g.start,
            end: g.end,
        })
        .collect();
    if let Some(sites) = profile.exits.sites.as_mut().filter(|_| !regions.is_empty()) {
        sites.label_npf_ranges(&regions);
    }
    for m in &mut profile.exits.mmio {
        m.label = bootscope_profiler::sites::mmio_label(&regions, m.gpa);
    }
}

/// The guest-physical ranges with the most nested page faults.
fn npf_summary(s: &mut String, sites: &bootscope_profiler::sites::ExitSites) {
    let by = sites.npf_by_range();
    if by.is_empty() {
        return;
    }
    let total: u64 = by.iter().map(|r| r.3).sum();
    let _ = writeln!(s, "  nested page faults by guest-physical range ({total}):");
    for (a, b, label, n) in by.iter().take(TOP_SITES) {
        let share = 100.0 * *n as f64 / total.max(1) as f64;
        let what = label.as_deref().unwrap_or("-");
        let _ = writeln!(s, "    {a:#012x}-{b:#012x} {n:>10} {share:>6.1}%  {what}");
    }
    if by.iter().all(|r| r.2.is_none()) {
        let _ = writeln!(
            s,
            "    (not labelled: the guest's memory layout is known for bootscope's own VMM only)"
        );
    }
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

/// The schema a JSON file names, if it is JSON with one (an unreadable or
/// non-JSON file is left to the bench reader, which says what is wrong).
fn schema_of(path: &Path) -> Option<String> {
    let bytes = bootscope_model::input::read_input(path).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some(v.get("schema")?.as_str()?.to_string())
}

/// `bootscope compare` on profiles: None when no file given is a profile
/// (they are bench documents), else the report written and the exit
/// status. Err: bad input (a profile beside a bench document, options that
/// apply to bench documents only, a profile that cannot be read).
pub fn compare_profiles(
    args: &crate::bench_cmd::CompareArgs,
) -> Result<Option<i32>, bootscope_bench::BenchError> {
    use bootscope_bench::BenchError;
    let schemas: Vec<Option<String>> = args.files.iter().map(|f| schema_of(f)).collect();
    let is_profile =
        |s: &Option<String>| s.as_deref() == Some(bootscope_profiler::profile::PROFILE_SCHEMA_NAME);
    if !schemas.iter().any(is_profile) {
        return Ok(None);
    }
    let usage = |m: String| Err(BenchError::Usage(m));
    let [a, b] = args.files.as_slice() else {
        return usage(format!(
            "{} is a profile: give a second profile to compare it with",
            args.files[0].display()
        ));
    };
    if let Some(i) = schemas.iter().position(|s| !is_profile(s)) {
        let what = match &schemas[i] {
            Some(s) => format!("a {s} document"),
            None => "not a bootscope document".into(),
        };
        return usage(format!(
            "{} is a profile but {} is {what}: compare two profiles or two bench files",
            args.files[1 - i].display(),
            args.files[i].display()
        ));
    }
    if !args.metrics.is_empty() || args.config.is_some() {
        return usage(
            "--metric and --config apply to bench files; two profiles are compared by exit \
             reason and exit site"
                .into(),
        );
    }
    let read = |p: &Path| Profile::read(p).map_err(|e| BenchError::Usage(e.to_string()));
    let report = bootscope_profiler::compare::compare(
        &read(a)?,
        &a.display().to_string(),
        &read(b)?,
        &b.display().to_string(),
    );
    let text = match if args.json { "json" } else { &args.format } {
        "json" => report.json(),
        _ => report.text(),
    };
    Ok(Some(match &args.output {
        Some(o) => match crate::cli::write_output(o, text.as_bytes()) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("bootscope: error: {e:#}");
                crate::cli::EXIT_USAGE
            }
        },
        None => {
            crate::stdout::print(text).map_err(crate::stdout::bench_error)?;
            0
        }
    }))
}
