//! The documents' types hold every field of real documents: profiles and
//! bench files from the lab (tests/fixtures, tests/baselines, the fuzz
//! corpus) read into their types and written back are the same bytes.
//! (serde_json's `float_roundtrip`, on for these tests, reads every number
//! exactly as written; without it a fraction may come back one unit in
//! the last place off.)

use std::path::{Path, PathBuf};

use bootscope_model::bench::BenchDoc;
use bootscope_model::profile::Profile;
use serde::de::DeserializeOwned;
use serde::Serialize;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files of `dir` whose names end in `suffix`.
fn files(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(workspace().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no {suffix} in {dir}");
    out
}

/// Reads `path` into `T` and writes it back as the file is laid out
/// (pretty when it is indented, else compact; a final newline kept).
fn round_trip<T: DeserializeOwned + Serialize>(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: T = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} does not read: {e}", path.display()));
    let mut back = if text.starts_with("{\n") {
        serde_json::to_string_pretty(&doc).unwrap()
    } else {
        serde_json::to_string(&doc).unwrap()
    };
    if text.ends_with('\n') {
        back.push('\n');
    }
    (text, back)
}

fn assert_same(path: &Path, text: &str, back: &str) {
    if text != back {
        let at = text
            .bytes()
            .zip(back.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(text.len().min(back.len()));
        let from = at.saturating_sub(80);
        panic!(
            "{} differs at byte {at}:\n file: {}\n back: {}",
            path.display(),
            &text[from..(at + 80).min(text.len())],
            &back[from..(at + 80).min(back.len())]
        );
    }
}

/// Fields the profile's writer has written since the fixtures were
/// recorded, as their default values appear when read back from a file
/// without them (`exits.sites.symbols.in_modules`).
const ADDED_SINCE_THE_FIXTURES: [&str; 1] = [r#","in_modules":0"#];

#[test]
fn profiles_round_trip_byte_for_byte() {
    for path in files("tests/fixtures", ".profile.json") {
        let (text, mut back) = round_trip::<Profile>(&path);
        for added in ADDED_SINCE_THE_FIXTURES {
            if !text.contains(added) {
                back = back.replace(added, "");
            }
        }
        assert_same(&path, &text, &back);
    }
}

#[test]
fn profiles_read_as_a_stream_write_back_the_same_bytes() {
    // `Profile::read`: the bounded stream, compact samples.
    for path in files("tests/fixtures", ".profile.json") {
        let p = Profile::read(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut streamed = if text.starts_with("{\n") {
            serde_json::to_string_pretty(&p).unwrap()
        } else {
            serde_json::to_string(&p).unwrap()
        };
        for added in ADDED_SINCE_THE_FIXTURES {
            if !text.contains(added) {
                streamed = streamed.replace(added, "");
            }
        }
        if text.ends_with('\n') {
            streamed.push('\n');
        }
        assert_same(&path, &text, &streamed);
        // And as `profile --output` writes it (pretty).
        let pretty = serde_json::to_string_pretty(&p).unwrap();
        let again =
            serde_json::to_string_pretty(&serde_json::from_str::<Profile>(&pretty).unwrap())
                .unwrap();
        assert_eq!(again, pretty, "{}", path.display());
    }
}

#[test]
fn a_profile_as_bootscope_writes_it_round_trips() {
    // `profile --output` writes pretty JSON.
    for path in files("tests/fixtures", ".profile.json") {
        let p: Profile = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let pretty = serde_json::to_vec_pretty(&p).unwrap();
        let again: Profile = serde_json::from_slice(&pretty).unwrap();
        assert_eq!(again, p, "{}", path.display());
        assert_eq!(serde_json::to_vec_pretty(&again).unwrap(), pretty);
    }
}

#[test]
fn bench_files_round_trip_byte_for_byte() {
    let mut paths = files("tests/baselines", ".json");
    paths.extend(files("fuzz/corpus/bench_json", ".json"));
    for path in paths {
        let (text, back) = round_trip::<BenchDoc>(&path);
        assert_same(&path, &text, &back);
    }
}

#[test]
fn a_profile_s_absent_optional_fields_stay_absent() {
    // What the writer leaves out when empty is not written back either.
    let mut p = Profile::new();
    p.exits.source = "tracepoint:kvm:kvm_exit".into();
    let v = serde_json::to_value(&p).unwrap();
    for key in ["startup", "collector", "time_slots"] {
        assert!(v.get(key).is_none(), "{key} written: {v}");
    }
    assert!(v["exits"].get("sites").is_none());
    assert!(v["target"].get("command").is_none());
}
