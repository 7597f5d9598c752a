//! `compare` and `plot --flamegraph` on profiles: two profiles compared by
//! exit reason and exit site, and a profile's exit sites as a flame graph
//! (the bench commands otherwise read bench documents).

use std::path::{Path, PathBuf};

use bootscope_bench::BenchError;
use bootscope_model::document::DocKind;
use bootscope_profiler::Profile;

use crate::common::{write_output, EXIT_USAGE};

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
    // The folded names are printable (the text rule); inferno escapes
    // markup but would pass the non-characters XML forbids.
    let folded = sites.folded().replace(['\u{fffe}', '\u{ffff}'], "\u{fffd}");
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "Exits by reason and guest function".into();
    opts.count_name = "exits".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, folded.lines(), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph of {}: {e}", input.display()))?;
    Ok(svg)
}

/// The schema a JSON file names (its kind is then [`DocKind::of_schema`]), if it is JSON with one (an unreadable or
/// non-JSON file is left to the bench reader, which says what is wrong).
/// Only the document's head is read when it has the field (as bootscope
/// writes it).
fn schema_of(path: &Path) -> Option<String> {
    let doc = bootscope_model::input::document::JsonStream::open(path).ok()?;
    if let Some(s) = doc.schema() {
        return Some(s.to_string());
    }
    if doc.head_is_whole() || doc.schema_value().is_some() {
        return None;
    }
    let v: serde_json::Value = doc.parse().ok()?;
    Some(v.get("schema")?.as_str()?.to_string())
}

/// `bootscope compare` on profiles: None when no file given is a profile
/// (they are bench documents), else the report written and the exit
/// status. Err: bad input (a profile beside a bench document, options that
/// apply to bench documents only, a profile that cannot be read).
/// `bench_options`: options given that apply to bench documents only
/// (`--metric`, `--config`); `format`: `json` or `text`.
pub fn compare_profiles(
    files: &[PathBuf],
    bench_options: bool,
    format: &str,
    output: Option<&Path>,
) -> Result<Option<i32>, BenchError> {
    let schemas: Vec<Option<String>> = files.iter().map(|f| schema_of(f)).collect();
    let is_profile =
        |s: &Option<String>| s.as_deref().and_then(DocKind::of_schema) == Some(DocKind::Profile);
    if !schemas.iter().any(is_profile) {
        return Ok(None);
    }
    let usage = |m: String| Err(BenchError::Usage(m));
    let [a, b] = files else {
        return usage(format!(
            "{} is a profile: give a second profile to compare it with",
            files[0].display()
        ));
    };
    if let Some(i) = schemas.iter().position(|s| !is_profile(s)) {
        // A file that cannot be read says why (it does not exist, ...).
        if let Err(e) = std::fs::metadata(&files[i]) {
            return usage(format!("cannot read {}: {e}", files[i].display()));
        }
        let what = match &schemas[i] {
            Some(s) => format!("a {s} document"),
            None => "not a bootscope document".into(),
        };
        return usage(format!(
            "{} is a profile but {} is {what}: compare two profiles or two bench files",
            files[1 - i].display(),
            files[i].display()
        ));
    }
    if bench_options {
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
    let text = match format {
        "json" => report.json(),
        _ => report.text(),
    };
    Ok(Some(match output {
        Some(o) => match write_output(o, text.as_bytes()) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("bootscope: error: {e:#}");
                EXIT_USAGE
            }
        },
        None => {
            crate::stdout::print(text).map_err(crate::stdout::bench_error)?;
            0
        }
    }))
}
