//! The sched collector against the kernel's own account: a process whose
//! threads wait for a CPU on purpose (more busy threads than CPUs: all
//! pinned to one) is profiled with `--collect sched`, and each thread's
//! run-queue wait in the profile is compared with the second field of
//! `/proc/PID/task/TID/schedstat` (the scheduler's `run_delay`).
//!
//! Both are frozen while they are compared: the process is launched by
//! `bootscope profile` (held until the programs are attached, so every
//! wait of it is seen), and it stops itself (SIGSTOP) when its threads are
//! done; the test reads schedstat once every thread is stopped, and only
//! then interrupts the profiler, whose final read comes after.

mod support;

use support::*;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Set in the process the test launches: the directory to report to.
const WORKLOAD_ENV: &str = "BOOTSCOPE_TEST_SCHED_WORKLOAD";
const TEST_NAME: &str = "runqueue_wait_matches_schedstat";
/// Busy threads, all on one CPU.
const BUSY_THREADS: usize = 4;
const BUSY_FOR: Duration = Duration::from_millis(1500);

/// The first CPU this process may run on.
fn first_allowed_cpu() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
    // writes at most its size into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 0;
        }
        (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .unwrap_or(0)
    }
}

/// Pins the calling thread (and the threads it starts) to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: as above; sched_setaffinity reads the set.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}");
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The launched process: busy threads on one CPU, then parked, then the
/// whole process stops itself.
fn workload(dir: &Path) -> ! {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    pin_to(first_allowed_cpu());
    let done = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + BUSY_FOR;
    let mut tids = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..BUSY_THREADS {
        let done = done.clone();
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("busy-{i}"))
            .spawn(move || {
                tx.send(gettid()).unwrap();
                let mut x = 0u64;
                while Instant::now() < until {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                done.fetch_add(1, Ordering::SeqCst);
                loop {
                    std::thread::park();
                }
            })
            .unwrap();
    }
    for _ in 0..BUSY_THREADS {
        tids.push(rx.recv().unwrap());
    }
    while done.load(Ordering::SeqCst) < BUSY_THREADS {
        std::thread::sleep(Duration::from_millis(20));
    }
    let list: Vec<String> = tids.iter().map(|t| t.to_string()).collect();
    let tmp = dir.join("busy.tmp");
    std::fs::write(&tmp, list.join(" ")).unwrap();
    std::fs::rename(&tmp, dir.join("busy")).unwrap();
    // To this thread: it stops (and the whole process with it) before it
    // returns. Sent to the process, another thread would take it and this
    // one could run on (all of them share one CPU).
    // SAFETY: raise with a valid signal.
    unsafe { libc::raise(libc::SIGSTOP) };
    // Continued: the profiler is done with it.
    std::process::exit(0)
}

/// `/proc/PID/task/TID/schedstat`'s run-queue wait (ns), per thread.
fn schedstat_waits(pid: u32) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = e.unwrap().file_name().to_str().unwrap().parse().unwrap();
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).unwrap();
        let wait = s.split_whitespace().nth(1).unwrap().parse().unwrap();
        out.push((tid, wait));
    }
    out.sort_unstable();
    out
}

/// True once every thread of `pid` is stopped.
fn all_stopped(pid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    dir.flatten().all(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised name.
        let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
        matches!(state, Some(Some('T' | 't')))
    })
}

/// Waits for `path` to exist, or for `child` to end (then fails).
fn wait_for_file(path: &Path, child: &mut Child, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            return s;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("bootscope ended ({st}) before {} appeared", path.display());
        }
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill with a pid and a valid signal.
    unsafe { libc::kill(pid as i32, sig) };
}

#[test]
fn runqueue_wait_matches_schedstat() {
    if let Some(dir) = std::env::var_os(WORKLOAD_ENV) {
        workload(Path::new(&dir));
    }
    require_bpf!();
    if !Path::new("/proc/self/schedstat").exists() {
        skip_test!("this kernel keeps no schedstat (built without CONFIG_SCHED_INFO)");
    }
    let d = scratch("sched");
    let out = d.join("profile.json");
    let exe = std::env::current_exe().unwrap();
    let mut child = bootscope()
        .args(["profile", "--collect", "sched", "--no-summary", "--output"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(WORKLOAD_ENV, &d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bootscope runs");
    let busy: Vec<u32> = wait_for_file(&d.join("busy"), &mut child, Duration::from_secs(60))
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let pid = workload_pid(&busy);
    let start = Instant::now();
    while !all_stopped(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{pid} never stopped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let want = schedstat_waits(pid);
    signal(child.id(), libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.exists(), "no profile written: {err}");
    let p = bootscope_profiler::Profile::read(&out).expect("a valid profile");
    check_waits(&p, pid, &busy, &want);
    let _ = std::fs::remove_dir_all(&d);
}

/// The process of the busy threads.
fn workload_pid(busy: &[u32]) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{}/status", busy[0])).unwrap();
    stat.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn check_waits(p: &bootscope_profiler::Profile, pid: u32, busy: &[u32], want: &[(u32, u64)]) {
    let sched = p
        .sources
        .iter()
        .filter(|s| s.collector == "sched")
        .map(|s| format!("{} {} {}", s.name, s.status, s.detail))
        .collect::<Vec<_>>();
    assert_eq!(sched.len(), 3, "{sched:?}");
    // Nothing but the sched collector attached.
    for s in &p.sources {
        if s.name.starts_with("tracepoint:") {
            assert_eq!(s.status == "attached", s.collector == "sched", "{s:?}");
        }
    }
    let mut report = String::new();
    for &(tid, schedstat) in want {
        let t = p.threads.iter().find(|t| t.tid == tid);
        let w = t.and_then(|t| t.runqueue_wait.as_ref());
        let got = w.map_or(0, |w| w.total_ns);
        report.push_str(&format!(
            "tid {tid}: profile {got} ns, schedstat {schedstat} ns\n"
        ));
        if let Some(w) = w {
            assert_eq!(t.unwrap().tgid, pid);
            let in_hist: u64 = w.hist.iter().map(|b| b.count).sum();
            assert_eq!(in_hist, w.count, "tid {tid}: histogram against count");
            let by_phase: u64 = w.by_phase.iter().map(|b| b.total_ns).sum();
            assert_eq!(by_phase, w.total_ns, "tid {tid}: phases against total");
        }
        let diff = got.abs_diff(schedstat);
        if busy.contains(&tid) {
            // The waits made on purpose: at least a fifth of the busy time.
            assert!(
                schedstat > BUSY_FOR.as_nanos() as u64 / 5,
                "tid {tid} hardly waited:\n{report}"
            );
            assert!(
                diff * 100 <= schedstat,
                "tid {tid}: more than 1 % apart\n{report}"
            );
        } else if tid == pid {
            // The main thread was forked (and held) before profiling
            // started: schedstat has its waits from before then too.
            assert!(
                got <= schedstat + 200_000,
                "tid {tid}: more than schedstat\n{report}"
            );
        } else {
            // The harness's thread: short waits, where the two clocks' 1 %
            // is a few microseconds.
            assert!(
                diff * 100 <= schedstat || diff <= 200_000,
                "tid {tid}: apart\n{report}"
            );
        }
    }
    eprintln!("{report}");
}
