//! Small helpers shared by the lab modules.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use bootscope_model::proc;

use crate::{LabError, Result};

/// A private temporary directory `$TMPDIR/bootscope-<label>-<random>`
/// (mode 0700: [`bootscope_model::output::private_temp_dir`]), removed
/// with its contents when dropped.
pub(crate) fn temp_dir(label: &str) -> Result<tempfile::TempDir> {
    bootscope_model::output::private_temp_dir(&format!("bootscope-{label}-"))
        .map_err(|e| LabError::io("create temporary directory", std::env::temp_dir(), e))
}

/// Writes `data` to `dest` by the rules of the workspace's one output
/// writer ([`bootscope_model::output`]): atomically, a new file getting
/// `mode` less the umask.
pub(crate) fn write_atomically(dest: &Path, data: &[u8], mode: u32) -> Result<()> {
    Ok(bootscope_model::output::write_file_with_mode(
        dest, data, mode,
    )?)
}

/// Quotes `s` for a POSIX shell: single quotes, with embedded single quotes
/// written as `'\''`. Works for arbitrary bytes except NUL.
pub(crate) fn shell_quote(s: &OsStr) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    out.push(b'\'');
    for &b in s.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// Joins `path` onto `cwd` (if relative) and removes `.` and `..`
/// components lexically, without touching the file system.
pub(crate) fn absolute_lexical(cwd: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Compares kernel version strings the way people read them: runs of
/// digits numerically, everything else byte-wise (`6.10.0` > `6.9.12`).
pub(crate) fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let bytes = s.as_bytes();
        let mut start = 0;
        while start < bytes.len() {
            let digit = bytes[start].is_ascii_digit();
            let mut end = start + 1;
            while end < bytes.len() && bytes[end].is_ascii_digit() == digit {
                end += 1;
            }
            out.push((digit, &s[start..end]));
            start = end;
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, sa), (db, sb)) in ca.iter().zip(cb.iter()) {
        let ord = if *da && *db {
            let ta = sa.trim_start_matches('0');
            let tb = sb.trim_start_matches('0');
            ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb))
        } else {
            sa.cmp(sb)
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len())
}

/// Finds `program` the way `execvp` would: as given if it contains a `/`,
/// otherwise in the directories of `$PATH`.
pub(crate) fn find_in_path(program: &Path) -> Option<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return program.is_file().then(|| program.to_path_buf());
    }
    proc::find_in_path(program.to_str()?, &std::env::var_os("PATH")?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(
            compare_versions("6.10.0-1-amd64", "6.9.12-1-amd64"),
            Ordering::Greater
        );
        assert_eq!(
            compare_versions("6.1.0-56-amd64", "6.1.0-9-amd64"),
            Ordering::Greater
        );
        assert_eq!(
            compare_versions("6.1.0-56-amd64", "6.1.0-56-amd64"),
            Ordering::Equal
        );
        assert_eq!(compare_versions("6.1.0", "6.1.0-1"), Ordering::Less);
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(shell_quote(OsStr::new("a b")), b"'a b'");
        assert_eq!(shell_quote(OsStr::new("it's")), b"'it'\\''s'");
        assert_eq!(shell_quote(OsStr::new("")), b"''");
    }

    #[test]
    fn lexical_paths() {
        let cwd = Path::new("/home/u/src");
        assert_eq!(
            absolute_lexical(cwd, Path::new("out.json")),
            Path::new("/home/u/src/out.json")
        );
        assert_eq!(
            absolute_lexical(cwd, Path::new("../x/./y")),
            Path::new("/home/u/x/y")
        );
        assert_eq!(absolute_lexical(cwd, Path::new("/a/../b")), Path::new("/b"));
    }

    #[test]
    fn atomic_write_replaces_and_cleans_up() {
        let dir = temp_dir("util-test").unwrap();
        let dest = dir.path().join("out.txt");
        write_atomically(&dest, b"one", 0o644).unwrap();
        write_atomically(&dest, b"two", 0o644).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out.txt")]);
        let err = write_atomically(&dir.path().join("no/such/dir"), b"x", 0o644).unwrap_err();
        assert!(matches!(err, LabError::Output(_)), "{err}");
    }
}
