//! Processes as procfs shows them, and the programs they run.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Thread ids of process `pid`, ascending (`/proc/PID/task`); empty when
/// the process is gone.
pub fn threads_of(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

/// The first executable regular file named `program` in the directories
/// of `path` (a `PATH`-style list), as a shell would find it.
pub fn find_in_path(program: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

/// A regular file with an execute bit set.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_threads_include_the_main_thread() {
        let me = std::process::id();
        let tids = threads_of(me);
        assert!(tids.contains(&me), "{tids:?}");
        assert!(tids.windows(2).all(|w| w[0] < w[1]));
        assert!(threads_of(u32::MAX).is_empty());
    }

    #[test]
    fn programs_are_found_in_the_path_given() {
        let sh = find_in_path("sh", OsStr::new("/nonexistent:/bin:/usr/bin")).unwrap();
        assert!(sh.ends_with("sh") && is_executable(&sh), "{sh:?}");
        assert_eq!(find_in_path("sh", OsStr::new("/nonexistent")), None);
        // A directory is not a program, whatever its mode.
        assert!(!is_executable(Path::new("/bin")));
    }
}
