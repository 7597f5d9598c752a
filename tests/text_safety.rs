//! Names from outside reach no terminal and no SVG raw: a profiled
//! process's thread names, the guest's phase and function names. The
//! summary of `profile`, `compare`, exports to a terminal and
//! `plot --flamegraph` show their control characters escaped (the text
//! rule, model's `printable`; the XML rule, model's `xml_text`);
//! docs/architecture.md, "Text from outside".

mod support;

use support::*;

use std::path::{Path, PathBuf};

/// What `prctl(PR_SET_NAME, ...)` lets any process call a thread: it would
/// retitle the terminal's window and clear its screen.
const HOSTILE: &str = "\u{1b}]0;PWN\u{7}\u{1b}[2J";
/// The same, shown escaped.
const SHOWN: &str = r"\e]0;PWN\u{07}\e[2J";
/// Its end, as folded stacks show it too (their `;` is a frame's end).
const SHOWN_END: &str = r"PWN\u{07}\e[2J";
/// Set in the process the summary test profiles.
const WORKLOAD_ENV: &str = "BOOTSCOPE_TEST_HOSTILE_THREAD";

/// The control characters of `s` other than newline, carriage return and
/// tab.
fn controls(s: &str) -> Vec<char> {
    s.chars()
        .filter(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
        .collect()
}

/// A lab profile with exit sites whose phase, function and thread names
/// a hostile guest and target chose.
fn hostile_profile(fixture_name: &str, dir: &Path) -> PathBuf {
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(recorded(fixture_name)).unwrap()).unwrap();
    let rename = |v: &mut serde_json::Value, key: &str| {
        let old = v[key].as_str().unwrap_or_default().to_string();
        v[key] = format!("{HOSTILE}{old}").into();
    };
    for p in doc["phases"].as_array_mut().unwrap() {
        rename(p, "name");
    }
    for s in doc["exits"]["sites"]["sites"].as_array_mut().unwrap() {
        rename(s, "function");
    }
    for t in doc["threads"].as_array_mut().unwrap() {
        rename(t, "name");
    }
    rename(&mut doc["target"], "name");
    let path = dir.join(fixture_name);
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    path
}

#[test]
fn compare_shows_hostile_phase_and_function_names_escaped() {
    let d = scratch("text-compare");
    let a = hostile_profile("lab-sites-quiet.profile.json", &d);
    let b = hostile_profile("lab-sites-loud.profile.json", &d);
    let o = bootscope_output(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(controls(&out).is_empty(), "{out:?}");
    assert!(out.contains(SHOWN), "{out}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Whether `svg` is well-formed XML, by python3's parser; None without
/// python3.
fn well_formed(svg: &Path) -> Option<Result<(), String>> {
    let o = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])",
        ])
        .arg(svg)
        .output()
        .ok()?;
    Some(if o.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    })
}

#[test]
fn a_flame_graph_of_hostile_function_names_is_valid_xml() {
    let d = scratch("text-flamegraph");
    let p = hostile_profile("lab-sites-loud.profile.json", &d);
    let svg = d.join("flame.svg");
    let o = bootscope_output(&[
        "plot",
        "--flamegraph",
        p.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let body = std::fs::read_to_string(&svg).unwrap();
    assert!(controls(&body).is_empty(), "control characters in the SVG");
    assert!(body.contains(SHOWN_END), "the names, escaped");
    match well_formed(&svg) {
        Some(r) => r.unwrap_or_else(|e| panic!("not well-formed XML: {e}")),
        None => eprintln!("SKIP: the XML parse (no python3); checked for control characters"),
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// `bootscope ARGS` run with a terminal as its standard output (`script`
/// makes one): its status and what reached the terminal. None without
/// `script`.
fn on_a_terminal(args: &[&str]) -> Option<(Option<i32>, String)> {
    let script = find_program("script")?;
    let exe = env!("CARGO_BIN_EXE_bootscope");
    let line = std::iter::once(exe)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let o = std::process::Command::new(script)
        .args(["-qec", &line, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    Some((
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    ))
}

#[test]
fn exports_to_a_terminal_show_hostile_names_escaped() {
    let d = scratch("text-export");
    let p = hostile_profile("lab-sites-loud.profile.json", &d);
    let p = p.to_str().unwrap();
    let Some((code, out)) = on_a_terminal(&["export", "--format", "folded", p]) else {
        skip_test!("no script(1) to give bootscope a terminal");
    };
    assert_eq!(code, Some(0), "{out}");
    assert!(controls(&out).is_empty(), "{out:?}");
    assert!(out.contains(SHOWN_END), "{out}");
    let (code, out) =
        on_a_terminal(&["export", "--format", "csv", "--table", "threads", p]).unwrap();
    assert_eq!(code, Some(0), "{out}");
    assert!(controls(&out).is_empty(), "{out:?}");
    assert!(out.contains(SHOWN), "{out}");
    // Binary: refused on a terminal.
    let (code, out) = on_a_terminal(&["export", "--format", "pprof", p]).unwrap();
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("standard output is a terminal"), "{out}");
    assert!(controls(&out).is_empty(), "{out:?}");
    // Into a pipe or a file, the data are as the profile has them.
    let o = bootscope_output(&["export", "--format", "csv", "--table", "threads", p]);
    assert!(stdout(&o).contains(HOSTILE), "{}", stdout(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// The profiled process: its thread named as a hostile process would, a
/// moment of work, then the end.
fn workload() -> ! {
    let name = std::ffi::CString::new(HOSTILE).unwrap();
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (the kernel keeps
    // its first 15 bytes).
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
    let mut x = 0u64;
    while std::time::Instant::now() < until {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    std::process::exit(0)
}

#[test]
fn profile_summary_shows_a_hostile_thread_name_escaped() {
    if std::env::var_os(WORKLOAD_ENV).is_some() {
        workload();
    }
    require_bpf!();
    let d = scratch("text-summary");
    let out = d.join("p.json");
    let exe = std::env::current_exe().unwrap();
    let o = run(
        bootscope()
            .args(["profile", "--output"])
            .arg(&out)
            .arg("--")
            .arg(&exe)
            .args([
                "--exact",
                "profile_summary_shows_a_hostile_thread_name_escaped",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKLOAD_ENV, "1"),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let said = stderr(&o);
    assert!(controls(&said).is_empty(), "{said:?}");
    // The kernel keeps 15 bytes of the name.
    assert!(said.contains(r"\e]0;PWN\u{07}\e[2"), "{said}");
    let _ = std::fs::remove_dir_all(&d);
}
