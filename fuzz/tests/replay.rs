//! Replays every corpus file through its fuzz target, without the fuzzer:
//! each input found by fuzzing (and each crash turned regression input)
//! stays a test. A target without a corpus fails the test.

use std::path::PathBuf;

use bootscope_fuzz::TARGETS;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

#[test]
fn every_corpus_file_runs_clean() {
    let mut crashed = Vec::new();
    for target in TARGETS {
        let dir = corpus_dir(target.name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
            .map(|e| e.expect("corpus entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "the {} corpus is empty", target.name);
        for file in &files {
            let data = std::fs::read(file).expect("reading a corpus file");
            if std::panic::catch_unwind(|| (target.run)(&data)).is_err() {
                crashed.push(format!("{}: {}", target.name, file.display()));
            }
        }
        println!("{}: {} inputs replayed", target.name, files.len());
    }
    assert!(crashed.is_empty(), "crashed on:\n{}", crashed.join("\n"));
}

#[test]
fn every_target_has_its_corpus_directory_and_nothing_else_is_there() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut dirs: Vec<String> = std::fs::read_dir(&root)
        .expect("fuzz/corpus")
        .map(|e| {
            e.expect("corpus entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    dirs.sort();
    let mut names: Vec<String> = TARGETS.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(dirs, names);
}
