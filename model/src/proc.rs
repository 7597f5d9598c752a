//! Processes as procfs shows them, the programs they run, and the CPU
//! time of the calling thread.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The calling process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// CPU time the calling thread has used (zero if the clock cannot be
/// read).
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

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

/// Field `n` (1-based, as in proc(5)) of a /proc/PID/stat line; the
/// command name may hold spaces and parentheses, so fields are counted
/// after its closing parenthesis.
pub fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

/// The command line of the process whose procfs directory is `dir`
/// (`/proc/PID`), one string per argument; empty when it is gone (or a
/// kernel thread).
pub fn argv_of(dir: &Path) -> Vec<String> {
    std::fs::read(dir.join("cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
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

/// Processes of process group `pgid` that are still alive, ascending (from
/// /proc: a zombie or dead entry has exited and is left out).
pub fn group_members(pgid: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // `pid (comm) STATE ppid pgrp ...`; comm may hold spaces and
            // parentheses, so the fields start after the last `)`.
            let mut fields = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace())
                .into_iter()
                .flatten();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|f| f.parse::<u32>().ok());
            pgrp == Some(pgid) && !matches!(state, Some("Z" | "X" | "x"))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether `pgid` may be signalled as a group: a real group that is not
/// this process's own (`kill(-1)` or `kill(0)` would reach far more).
fn signallable(pgid: u32) -> Option<libc::pid_t> {
    let g = libc::pid_t::try_from(pgid).ok().filter(|g| *g > 1)?;
    // SAFETY: getpgrp has no preconditions and cannot fail.
    (g != unsafe { libc::getpgrp() }).then_some(g)
}

/// Sends `sig` to every process of group `pgid` (never to this process's
/// own group); false when the group has no process left or cannot be
/// signalled.
pub fn signal_group(pgid: u32, sig: libc::c_int) -> bool {
    let Some(g) = signallable(pgid) else {
        return false;
    };
    // SAFETY: kill(2) with a negative pid (a process group other than ours,
    // checked above) and a signal number; it has no memory preconditions.
    unsafe { libc::kill(-g, sig) == 0 }
}

/// Ends whatever is left of process group `pgid`: SIGTERM, up to `grace`
/// for its processes to go, then SIGKILL and up to a second more. Returns
/// the pids still alive at the end (empty once the group is gone).
pub fn end_group(pgid: u32, grace: std::time::Duration) -> Vec<u32> {
    use std::time::{Duration, Instant};
    if signallable(pgid).is_none() {
        return Vec::new();
    }
    let wait = |limit: Duration| {
        let until = Instant::now() + limit;
        loop {
            let left = group_members(pgid);
            if left.is_empty() || Instant::now() >= until {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    if group_members(pgid).is_empty() {
        return Vec::new();
    }
    signal_group(pgid, libc::SIGTERM);
    if wait(grace).is_empty() {
        return Vec::new();
    }
    signal_group(pgid, libc::SIGKILL);
    wait(Duration::from_secs(1))
}

/// The process groups of launched commands still running, for
/// [`kill_listed_groups`].
static LISTED_GROUPS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn listed_groups() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LISTED_GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A launched command's process group, listed while this value lives:
/// should a signal end the process at once, [`kill_listed_groups`] kills
/// it first, so that nothing of it outlives its parent. Drop it once the
/// group has been ended.
pub struct ListedGroup(u32);

impl ListedGroup {
    pub fn new(pgid: u32) -> Self {
        listed_groups().push(pgid);
        ListedGroup(pgid)
    }
}

impl Drop for ListedGroup {
    fn drop(&mut self) {
        let mut groups = listed_groups();
        if let Some(i) = groups.iter().position(|g| *g == self.0) {
            groups.swap_remove(i);
        }
    }
}

/// SIGKILL to every listed process group, for a process about to exit on
/// a signal. Not for a signal handler (it takes a lock).
pub fn kill_listed_groups() {
    for pgid in listed_groups().iter() {
        signal_group(*pgid, libc::SIGKILL);
    }
}

/// A field of a meminfo file, in bytes (a count for the fields without a
/// `kB` unit): `/proc/meminfo` (`MemTotal:  24634636 kB`) or a NUMA
/// node's (`Node 0 MemTotal:  24634636 kB`).
pub fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let l = match l.strip_prefix("Node ") {
            Some(rest) => rest.split_once(' ')?.1.trim_start(),
            None => l,
        };
        let (key, rest) = l.split_once(':')?;
        if key != name {
            return None;
        }
        let mut words = rest.split_whitespace();
        let value: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => value.checked_mul(1024),
            None => Some(value),
            Some(_) => None,
        }
    })
}

/// A field of `/proc/meminfo` ([`meminfo_field`]); `None` when the file
/// or the field cannot be read.
pub fn meminfo(name: &str) -> Option<u64> {
    meminfo_field(&std::fs::read_to_string("/proc/meminfo").ok()?, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::Duration;

    #[test]
    fn meminfo_fields_of_the_host_and_of_a_node() {
        let host =
            "MemTotal:       24634636 kB\nMemAvailable:    1024 kB\nHugePages_Total:       8\n";
        assert_eq!(meminfo_field(host, "MemTotal"), Some(24634636 << 10));
        assert_eq!(meminfo_field(host, "MemAvailable"), Some(1 << 20));
        assert_eq!(meminfo_field(host, "HugePages_Total"), Some(8));
        assert_eq!(meminfo_field(host, "MemFree"), None);
        let node = "Node 1 MemTotal:  1024 kB\nNode 1 MemFree:   512 kB\n";
        assert_eq!(meminfo_field(node, "MemTotal"), Some(1 << 20));
        assert_eq!(meminfo_field(node, "MemFree"), Some(512 << 10));
        assert!(meminfo("MemTotal").is_some_and(|b| b > 0));
    }

    #[test]
    fn stat_fields_after_an_awkward_command_name() {
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0";
        assert_eq!(stat_field(stat, 3), Some("S"));
        assert_eq!(stat_field(stat, 4), Some("1"));
        assert_eq!(stat_field(stat, 22), Some("777"));
        assert_eq!(stat_field(stat, 2), None);
    }

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

    #[test]
    fn a_process_group_is_ended_whole() {
        // A shell in a group of its own whose children ignore SIGTERM.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 1000 & sleep 1000 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = sh.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while group_members(pgid).len() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                group_members(pgid)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = end_group(pgid, Duration::from_millis(200));
        assert!(left.is_empty(), "{left:?}");
        assert!(sh.wait().is_ok());
        assert!(group_members(pgid).is_empty());
        // Never this process's own group, nor init's.
        // SAFETY: getpgrp has no preconditions.
        let own = unsafe { libc::getpgrp() } as u32;
        assert!(!signal_group(own, 0));
        assert!(!signal_group(1, 0));
        assert!(!signal_group(0, 0));
        assert!(end_group(own, Duration::ZERO).is_empty());
    }
}
