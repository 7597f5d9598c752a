//! The JSON documents bootscope reads back: profiles and boot timelines
//! (`export`, `tui`, `plot`) and bench files (`compare`, `check`, `plot`).

use std::path::Path;

use bootscope_bench::compare::{self, CheckOptions, Sample};
use bootscope_bench::plot;
use bootscope_bench::stats::TestKind;
use bootscope_profiler::export::{self, Format};
use bootscope_profiler::Profile;

use crate::memfile::MemFile;

/// Any bytes as a profile or timeline file: `export`'s reader (which
/// converts timelines), every export format of what it read, `Profile::read`
/// (the TUI's reader) and the SVG plot. A profile that reads must read
/// the same again after being written out.
pub fn profile_or_timeline(data: &[u8]) {
    let file = MemFile::new(data);
    if let Ok((profile, _kind)) = export::read_input(file.path()) {
        for format in Format::EVERY_PROFILE {
            let text = export::render(&profile, format);
            assert!(text.ends_with('\n'), "{format:?} output lacks its newline");
        }
        let again = MemFile::new(export::render(&profile, Format::Json).as_bytes());
        let (back, _) = export::read_input(again.path()).expect("an exported profile reads back");
        assert_eq!(back, profile, "a profile changed on its way through JSON");
    }
    if let Ok(profile) = Profile::read(file.path()) {
        let _ = serde_json::to_vec(&profile).expect("a Profile serializes");
    }
    let _ = plot::render(data, Path::new("input.json"));
}

/// Any bytes as a bench file: the reader, the summary, `compare` of the
/// file with itself, `check` against itself (which must pass), and the plot.
pub fn bench(data: &[u8]) {
    let path = Path::new("bench.json");
    let _ = plot::render(data, path);
    let Ok(mut doc) = bootscope_bench::doc::parse(data, path) else {
        return;
    };
    for config in &mut doc.configs {
        bootscope_bench::doc::summarize(config);
        let _ = config.failures();
    }
    let _ = doc.to_json();
    for label in doc.labels() {
        let Ok(sample) = Sample::from_doc(&doc, path, Some(&label)) else {
            continue;
        };
        for test in [TestKind::Welch, TestKind::MannWhitney] {
            if let Ok(report) = compare::compare(&sample, &sample, &[], test, 0.05) {
                let _ = report.text();
                let _ = report.json();
            }
        }
        let opts = CheckOptions {
            metrics: Vec::new(),
            max_regression_pct: 5.0,
            alpha: 0.05,
            test: TestKind::MannWhitney,
        };
        if let Ok(report) = compare::check(&sample, &sample, &opts) {
            let _ = report.text();
            let _ = report.json();
            let _ = report.junit();
        }
    }
}
