//! What users bring from other tools and expect of an installed command:
//! completion scripts, manual pages, `-p` for `--pid`, `--json` for
//! `--format json`, and clear errors (exit status 2) when they are misused.

mod support;

use support::bootscope_output as bootscope;
use support::*;

const SUBCOMMANDS: [&str; 17] = [
    "run",
    "doctor",
    "lab",
    "demo",
    "profile",
    "bench",
    "compare",
    "check",
    "exporter",
    "plot",
    "tui",
    "advise",
    "guest",
    "initcalls",
    "export",
    "completions",
    "man",
];

#[test]
fn completions_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _bootscope"),
        ("zsh", "#compdef bootscope"),
        ("fish", "complete -c bootscope"),
    ] {
        let o = bootscope(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell}: no subcommand {sub}");
        }
        let flag = |name: &str| {
            if shell == "fish" {
                format!("-l {name}")
            } else {
                format!("--{name}")
            }
        };
        // Flags of subcommands too.
        for name in ["no-profile", "meta", "out-dir", "json"] {
            assert!(script.contains(&flag(name)), "{shell}: no {name}");
        }
    }
    // The bash script loads and registers itself.
    let o = bootscope(&["completions", "bash"]);
    let dir = scratch("completions");
    let file = dir.join("bootscope.bash");
    std::fs::write(&file, &o.stdout).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p bootscope",
            file.display()
        ))
        .output()
        .expect("bash runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    expect_usage_error(&["completions", "tcsh"], &["tcsh", "bash"]);
    expect_usage_error(&["completions"], &["<SHELL>"]);
}

#[test]
fn manual_page_per_subcommand() {
    let dir = scratch("man");
    let out = dir.join("man1");
    let o = bootscope(&["man", "--out-dir", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let top = std::fs::read_to_string(out.join("bootscope.1")).unwrap();
    assert!(
        top.starts_with(".ie") || top.contains(".TH bootscope 1"),
        "{top}"
    );
    for sub in SUBCOMMANDS {
        let page = std::fs::read_to_string(out.join(format!("bootscope-{sub}.1")))
            .unwrap_or_else(|e| panic!("bootscope-{sub}.1: {e}"));
        assert!(page.contains(&format!(".TH bootscope-{sub} 1")), "{sub}");
        assert!(page.contains(".SH SYNOPSIS"), "{sub}");
    }
    let run = std::fs::read_to_string(out.join("bootscope-run.1")).unwrap();
    assert!(run.contains("kernel"), "{run}");
    // No page for clap's `help` subcommand.
    let pages = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(pages, SUBCOMMANDS.len() + 1);
    // A file where the directory should be.
    let file = dir.join("file");
    std::fs::write(&file, "x").unwrap();
    expect_usage_error(
        &["man", "--out-dir", file.to_str().unwrap()],
        &["--out-dir", "not a directory"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn short_p_is_pid() {
    // The same check, the same message, as --pid.
    let gone = "4194303";
    for flag in ["-p", "--pid"] {
        expect_usage_error(
            &["profile", flag, gone, "--duration", "1"],
            &["--pid 4194303: no such process"],
        );
    }
    expect_usage_error(&["profile", "-p", "x"], &["invalid value 'x'"]);
}

#[test]
fn json_is_format_json() {
    let dir = scratch("json");
    // A boot timeline to export, written by the VMM's set-up alone.
    let timeline = dir.join("t.json");
    let o = bootscope(&[
        "run",
        "--stop-after",
        "memory",
        "--memory",
        "16M",
        "--no-profile",
        "--no-summary",
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    if o.status.code() != Some(0) {
        let _ = std::fs::remove_dir_all(&dir);
        skip_test!("cannot set up a VM here: {}", stderr(&o));
    }
    let t = timeline.to_str().unwrap();
    let long = bootscope(&["export", "--format", "json", t]);
    assert_eq!(long.status.code(), Some(0), "{}", stderr(&long));
    for flag in ["--json", "-j"] {
        let short = bootscope(&["export", flag, t]);
        assert_eq!(short.status.code(), Some(0), "{}", stderr(&short));
        assert_eq!(short.stdout, long.stdout, "{flag}");
    }
    expect_usage_error(&["export", "--json", "--format", "csv", t], &["--json"]);
    expect_usage_error(&["export", t], &["--format"]);
    let o = bootscope(&["doctor", "-j"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("doctor -j is JSON");
    let _ = std::fs::remove_dir_all(&dir);
}
