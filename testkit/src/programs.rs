//! Programs the tests run beside the code under test: git for a throwaway
//! repository, promtool as the independent judge of a Prometheus
//! exposition.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `git -C DIR ARGS` with a committer of its own (a test's throwaway
/// repository needs no user configuration); panics unless git succeeds,
/// and returns its standard output, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run git: {e}"));
    assert!(
        o.status.success(),
        "git {args:?} in {}: status {:?}\n{}{}",
        dir.display(),
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `TOOL check metrics` on a Prometheus text exposition: panics with
/// promtool's complaints when it rejects `text` (or stops reading it); an
/// error only when `tool` cannot be started, for the caller to decide
/// whether that skips.
pub fn promtool_check(tool: &str, text: &str) -> std::io::Result<()> {
    let mut child = Command::new(tool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("piped standard input")
        .write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("cannot write to {tool}: {e}"));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for {tool}: {e}"));
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
