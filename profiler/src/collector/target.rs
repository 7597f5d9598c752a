//! Target tracking: the process profiled, its descendants and threads,
//! and how its end is noticed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use aya::Ebpf;
use bootscope_model::proc::threads_of;

use super::config::{CollectorSet, TargetSpec};
use super::maps::{map_error, seed_sched_tasks, SCHED_TASKS_MAP};
use super::thread_info::{read_comm, ThreadInfo};
use crate::bpf;
use crate::error::ProfilerError;
use crate::tracefs::Tracefs;

/// Checks for root or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN).
pub fn check_privileges() -> Result<(), ProfilerError> {
    let status = crate::pseudo::read("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    if eff & CAP_SYS_ADMIN != 0 || (eff & CAP_BPF != 0 && eff & CAP_PERFMON != 0) {
        return Ok(());
    }
    let euid = bootscope_model::proc::effective_uid();
    Err(ProfilerError::NotPrivileged {
        detail: format!("running as uid {euid} with effective capabilities {eff:#x}"),
    })
}

/// The kernel's pids are the initial namespace's; ours must be too.
pub(super) fn check_pid_namespace() -> Result<(), ProfilerError> {
    // PROC_PID_INIT_INO in include/linux/proc_ns.h.
    const INIT_PID_NS: &str = "pid:[4026531836]";
    match std::fs::read_link("/proc/self/ns/pid") {
        Ok(l) if l.as_os_str() != INIT_PID_NS => Err(ProfilerError::PidNamespace {
            ns: l.display().to_string(),
        }),
        _ => Ok(()),
    }
}

pub(super) fn find_or_mount_tracefs() -> Result<Tracefs, ProfilerError> {
    if let Some(t) = Tracefs::find() {
        return Ok(t);
    }
    let target = crate::tracefs::TRACEFS_CANDIDATES[0];
    match crate::mount::mount_fs("nodev", target, "tracefs") {
        Ok(()) => Tracefs::find().ok_or_else(|| ProfilerError::TracefsMissing {
            looked: crate::tracefs::TRACEFS_CANDIDATES.join(", "),
            source: std::io::Error::other("mounted, but it has no events/ directory"),
        }),
        Err(source) => Err(ProfilerError::TracefsMissing {
            looked: crate::tracefs::TRACEFS_CANDIDATES.join(", "),
            source,
        }),
    }
}

/// `pid` and its live descendants, parents before children.
///
/// From each thread's `children` file (CONFIG_PROC_CHILDREN, a few reads
/// however busy the host); where the kernel has none, from the parent links
/// of every process's /proc/N/stat.
pub(super) fn descendants(pid: u32) -> Vec<u32> {
    walk_children(pid, children_of).unwrap_or_else(|| descendants_by_scan(pid))
}

/// Breadth-first from `pid` through `children` (sorted, each pid once);
/// None as soon as `children` has no answer.
pub(super) fn walk_children(
    pid: u32,
    mut children: impl FnMut(u32) -> Option<Vec<u32>>,
) -> Option<Vec<u32>> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let mut kids = children(out[i])?;
        kids.sort_unstable();
        kids.retain(|k| !out.contains(k));
        out.extend(kids);
        i += 1;
    }
    Some(out)
}

/// Children of `pid` from /proc/PID/task/*/children; None when the kernel
/// does not provide those files.
pub(super) fn children_of(pid: u32) -> Option<Vec<u32>> {
    let mut kids = Vec::new();
    for tid in threads_of(pid) {
        match crate::pseudo::read(format!("/proc/{pid}/task/{tid}/children")) {
            Ok(text) => kids.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            ),
            // The thread ended meanwhile: its siblings still answer.
            Err(_) if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {}
            Err(_) => return None,
        }
    }
    Some(kids)
}

/// [`descendants`] from every process's parent link.
pub(super) fn descendants_by_scan(pid: u32) -> Vec<u32> {
    let mut parent_of = HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(stat) = crate::pseudo::read(format!("/proc/{p}/stat")) {
            // pid (comm) state ppid ...; comm may hold spaces and parens.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok())
            {
                parent_of.insert(p, ppid);
            }
        }
    }
    walk_children(pid, |cur| {
        Some(
            parent_of
                .iter()
                .filter(|(_, &pp)| pp == cur)
                .map(|(&c, _)| c)
                .collect(),
        )
    })
    .unwrap_or_else(|| vec![pid])
}

pub(super) fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/stat")).exists()
        && crate::pseudo::read(format!("/proc/{pid}/stat"))
            .map(|s| {
                // A zombie has ended: state Z (or X).
                !matches!(
                    s.rsplit_once(')')
                        .and_then(|(_, r)| r.split_whitespace().next()),
                    Some("Z") | Some("X")
                )
            })
            .unwrap_or(false)
}

/// How the collector learns that the target process ended (besides the
/// threads collector's exit event).
pub(super) enum TargetLife {
    /// Profiling its own process (or every VM): it cannot end while
    /// profiling.
    Own,
    /// A pidfd: readable once the process has exited (a zombie included),
    /// one cheap poll, and no pid reuse to fool it.
    Pidfd(OwnedFd),
    /// /proc/PID/stat, where pidfd_open is missing (Linux before 5.3). For
    /// a process of many threads the kernel sums them all to write it.
    Proc(u32),
}

impl TargetLife {
    pub(super) fn watch(pid: u32, own: bool) -> Self {
        if own {
            return TargetLife::Own;
        }
        match crate::launch::pidfd_open(pid) {
            Ok(fd) => TargetLife::Pidfd(fd),
            Err(_) => TargetLife::Proc(pid),
        }
    }

    pub(super) fn ended(&self) -> bool {
        match self {
            TargetLife::Own => false,
            TargetLife::Pidfd(fd) => crate::launch::pidfd_ended(fd, Duration::ZERO),
            TargetLife::Proc(pid) => !process_alive(*pid),
        }
    }
}

/// What kind of target `spec` is, and its process id (a thread id stands
/// for its process).
pub(super) fn resolve_target(spec: TargetSpec) -> Result<(&'static str, u32), ProfilerError> {
    let (kind, target_pid) = match spec {
        TargetSpec::Pid(p) => ("pid", p),
        TargetSpec::Launched(p) => ("command", p),
        TargetSpec::CurrentProcess => ("self", std::process::id()),
        // No process of its own: tgid 0 never matches the target slot.
        TargetSpec::AnyVm => return Ok(("any-vm", 0)),
    };
    if target_pid == 0 || !Path::new(&format!("/proc/{target_pid}")).exists() {
        return Err(ProfilerError::NoSuchProcess { pid: target_pid });
    }
    let tgid = crate::pseudo::read(format!("/proc/{target_pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(target_pid);
    Ok((kind, tgid))
}

/// Tells the kernel which processes to follow (`procs`, in phase 0 until
/// the first phase mark), which one is the target, and the threads they
/// have now (for the sched collector too, when it runs); returns those
/// threads and processes.
pub(super) fn seed_target(
    ebpf: &mut Ebpf,
    target_pid: u32,
    procs: &[u32],
    collectors: &CollectorSet,
) -> Result<(BTreeMap<u32, ThreadInfo>, BTreeSet<u32>), ProfilerError> {
    let mut threads = BTreeMap::new();
    let mut tgids = BTreeSet::new();
    {
        let map = ebpf
            .map_mut("followed")
            .ok_or_else(|| map_error("followed", "absent"))?;
        let mut followed = BpfHashMap::<&mut MapData, u32, u32>::try_from(map)
            .map_err(|e| map_error("followed", e))?;
        for &p in procs {
            followed
                .insert(p, 0, 0)
                .map_err(|e| map_error("followed", e))?;
            tgids.insert(p);
        }
    }
    {
        let map = ebpf
            .map_mut("target")
            .ok_or_else(|| map_error("target", "absent"))?;
        let mut slot = Array::<&mut MapData, bpf::BsTarget>::try_from(map)
            .map_err(|e| map_error("target", e))?;
        let target = bpf::BsTarget {
            tgid: target_pid,
            phase: 0,
        };
        slot.set(0, target, 0).map_err(|e| map_error("target", e))?;
    }
    let map = ebpf
        .map_mut("threads")
        .ok_or_else(|| map_error("threads", "absent"))?;
    let mut known =
        BpfHashMap::<&mut MapData, u32, u32>::try_from(map).map_err(|e| map_error("threads", e))?;
    for &p in procs {
        for tid in threads_of(p) {
            let _ = known.insert(tid, p, 0);
            threads.insert(
                tid,
                ThreadInfo {
                    tgid: p,
                    name: read_comm(p, tid).unwrap_or_default(),
                    start_ns: 0,
                    ..Default::default()
                },
            );
        }
    }
    if collectors.sched {
        let watched = threads.iter().map(|(&tid, t)| (tid, t.tgid));
        seed_sched_tasks(ebpf.map_mut(SCHED_TASKS_MAP), watched);
    }
    Ok((threads, tgids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn descendants_include_self() {
        let me = std::process::id();
        assert_eq!(descendants(me)[0], me);
        assert!(process_alive(me));
        assert!(!threads_of(me).is_empty());
    }

    /// A target's end is seen once it has exited, before it is reaped (a
    /// zombie has ended), by its pidfd and by /proc alike; our own process
    /// never ends while profiling.
    #[test]
    fn a_target_ends_when_it_exits() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let by_fd = TargetLife::watch(pid, false);
        assert!(
            matches!(by_fd, TargetLife::Pidfd(_)),
            "pidfd_open (Linux 5.3+)"
        );
        let by_proc = TargetLife::Proc(pid);
        assert!(!by_fd.ended() && !by_proc.ended());
        drop(child.stdin.take());
        // Not reaped yet: a zombie.
        let until = Instant::now() + Duration::from_secs(10);
        while !by_fd.ended() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(by_fd.ended());
        assert!(by_proc.ended());
        child.wait().unwrap();
        assert!(by_fd.ended());
        assert!(!TargetLife::watch(std::process::id(), true).ended());
    }

    #[test]
    fn descendants_follow_children_and_grandchildren() {
        // sh starts sleep as its child; both are our descendants, found the
        // same way from the children files and from the /proc scan.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let me = std::process::id();
        let found = descendants(me);
        let scanned = descendants_by_scan(me);
        // SAFETY: kill(2) with a pid and a signal.
        unsafe { libc::kill(grandchild as i32, libc::SIGKILL) };
        child.wait().unwrap();
        for list in [&found, &scanned] {
            assert_eq!(list[0], me);
            let c = list.iter().position(|&p| p == child.id()).expect("child");
            let g = list
                .iter()
                .position(|&p| p == grandchild)
                .expect("grandchild");
            assert!(c < g, "{list:?}");
        }
        if Path::new(&format!("/proc/{me}/task/{me}/children")).exists() {
            assert_eq!(children_of(child.id()), Some(vec![]), "reaped");
        }
    }
}
