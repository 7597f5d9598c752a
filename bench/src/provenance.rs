//! What a benchmark measured, beyond the machine it ran on: the user's own
//! `KEY=VALUE` notes (`bootscope bench --meta`) and the git revision of the
//! directory `bench` was started in.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

pub use bootscope_model::bench::{GitRevision, Provenance};

use crate::error::BenchError;

/// Parses `--meta KEY=VALUE` arguments: a non-empty key without spaces,
/// each key once.
pub fn parse_meta(specs: &[String]) -> Result<BTreeMap<String, String>, BenchError> {
    let mut out = BTreeMap::new();
    for spec in specs {
        let bad = |why: &str| {
            BenchError::Usage(format!(
                "--meta {spec:?}: {why}; give KEY=VALUE (for example --meta kernel=6.1)"
            ))
        };
        let (k, v) = spec.split_once('=').ok_or_else(|| bad("no '='"))?;
        if k.is_empty() {
            return Err(bad("the key is empty"));
        }
        if k.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the key has a space or control character"));
        }
        if v.chars().any(char::is_control) {
            return Err(bad("the value has a control character"));
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(bad(&format!("the key {k:?} is given twice")));
        }
    }
    Ok(out)
}

/// The revision of the git work tree `dir` is in; None when it is in
/// none, or git is not installed.
pub fn detect_git(dir: &Path) -> Option<GitRevision> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            // Reading a work tree owned by another user (CI as root) is
            // safe: nothing is run from it.
            .args(["-c", "safe.directory=*", "-C"])
            .arg(dir)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let commit = git(&["rev-parse", "--verify", "--quiet", "HEAD"])?
        .trim()
        .to_string();
    if commit.is_empty() {
        return None;
    }
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.trim().is_empty());
    Some(GitRevision { commit, dirty })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_is_key_value() {
        let m = parse_meta(&["kernel=6.1".into(), "note=a=b".into(), "empty=".into()]).unwrap();
        assert_eq!(m["kernel"], "6.1");
        assert_eq!(m["note"], "a=b");
        assert_eq!(m["empty"], "");
        for bad in ["novalue", "=x", "a b=c", "x=1\n"] {
            let e = parse_meta(&[bad.into()]).unwrap_err();
            assert!(e.is_bad_input(), "{bad}");
            assert!(e.to_string().contains("give KEY=VALUE"), "{e}");
        }
        let e = parse_meta(&["k=1".into(), "k=2".into()]).unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
    }

    #[test]
    fn text_names_revision_and_notes() {
        let mut p = Provenance::default();
        assert_eq!(p.text(), None);
        p.git = Some(GitRevision {
            commit: "0123456789abcdef0123".into(),
            dirty: true,
        });
        p.meta.insert("kernel".into(), "6.1".into());
        assert_eq!(
            p.text().unwrap(),
            "git 0123456789ab, uncommitted changes; meta kernel=6.1"
        );
    }

    #[test]
    fn revision_of_a_work_tree_and_its_changes() {
        if Command::new("git").arg("--version").output().is_err() {
            eprintln!("SKIP: git is not installed");
            return;
        }
        let dir = std::env::temp_dir().join(format!("bootscope-git-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let git = |args: &[&str]| bootscope_testkit::git(&dir, args);
        git(&["init", "-q"]);
        // A repository without a commit has no revision.
        assert_eq!(detect_git(&dir), None);
        std::fs::write(dir.join("f"), "1").unwrap();
        git(&["add", "f"]);
        git(&["commit", "-q", "-m", "one"]);
        let head = git(&["rev-parse", "HEAD"]);
        let clean = detect_git(&dir).expect("a revision");
        assert_eq!(clean.commit, head);
        assert!(!clean.dirty);
        // Untracked files do not count; a changed tracked file does, seen
        // from a subdirectory too.
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/new"), "x").unwrap();
        assert!(!detect_git(&dir.join("sub")).unwrap().dirty);
        std::fs::write(dir.join("f"), "2").unwrap();
        let dirty = detect_git(&dir.join("sub")).unwrap();
        assert_eq!(dirty.commit, head);
        assert!(dirty.dirty);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_revision_outside_a_work_tree() {
        let dir = std::env::temp_dir().join(format!("bootscope-nogit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let found = detect_git(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found, None);
    }
}
