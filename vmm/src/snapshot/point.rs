//! Where a snapshot is taken (`--snapshot-at`) and how the vCPUs meet
//! there: the mark that asks for it, each vCPU thread parking out of
//! `KVM_RUN` with its state saved, and their release (to go on, or to end).

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kvm_ioctls::VcpuFd;

use crate::timeline::{is_userspace_start, MarkSource, TimelineMark};

use super::vcpu::{complete_pending_exit, VcpuState};

/// The point `--snapshot-at` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotAt {
    /// The first mark that says guest userspace started.
    Userspace,
    /// The guest's first write of this value to port 0x80.
    DebugPort(u8),
    /// `SIGUSR1` sent to the VMM (the caller calls
    /// [`SnapshotPoint::request`]).
    Signal,
}

impl FromStr for SnapshotAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("userspace") {
            return Ok(Self::Userspace);
        }
        if t.eq_ignore_ascii_case("SIGUSR1") || t.eq_ignore_ascii_case("USR1") {
            return Ok(Self::Signal);
        }
        let hex = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"));
        if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            return Ok(Self::DebugPort(v));
        }
        Err(format!(
            "--snapshot-at {s:?}: give `userspace`, a port 0x80 value such as 0x61, or SIGUSR1"
        ))
    }
}

impl std::fmt::Display for SnapshotAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Userspace => f.write_str("userspace"),
            Self::DebugPort(v) => write!(f, "0x{v:02x}"),
            Self::Signal => f.write_str("SIGUSR1"),
        }
    }
}

impl SnapshotAt {
    /// True when `mark` is the point.
    pub fn matches(&self, mark: &TimelineMark) -> bool {
        match self {
            Self::Userspace => is_userspace_start(mark),
            Self::DebugPort(v) => {
                mark.source == MarkSource::DebugPort && mark.value == Some(u64::from(*v))
            }
            Self::Signal => false,
        }
    }
}

/// What the parked vCPUs share with the thread that takes the snapshot.
#[derive(Default)]
struct Parking {
    /// Each running vCPU thread's pthread, to kick it out of `KVM_RUN`.
    threads: BTreeMap<u32, libc::pthread_t>,
    /// Each parked vCPU's saved state (or why it could not be saved).
    parked: BTreeMap<u32, Option<Result<VcpuState, String>>>,
    /// vCPU threads that have ended.
    ended: BTreeSet<u32>,
    /// Bumped to release the parked threads.
    generation: u64,
    /// With the release: whether the threads end (true) or go on.
    stop: bool,
}

/// The meeting point of the vCPU threads for one snapshot.
pub struct SnapshotPoint {
    pub at: SnapshotAt,
    /// Where to write it and whether the guest goes on.
    pub request: super::SnapshotRequest,
    /// The CPUID the guest sees (vCPU 0's).
    pub cpuid: Vec<super::CpuidLeaf>,
    /// How many vCPU threads the VM starts: a snapshot waits for each one
    /// to park, also for one whose thread has not started yet.
    vcpus: u32,
    /// The MSRs to save (`KVM_GET_MSR_INDEX_LIST`).
    msr_indices: Vec<u32>,
    requested: AtomicBool,
    /// A snapshot was taken: later marks ask for none.
    taken: AtomicBool,
    parking: Mutex<Parking>,
    changed: Condvar,
}

impl SnapshotPoint {
    pub fn new(
        request: super::SnapshotRequest,
        msr_indices: Vec<u32>,
        cpuid: Vec<super::CpuidLeaf>,
        vcpus: u32,
    ) -> Self {
        Self {
            at: request.at,
            request,
            cpuid,
            vcpus,
            msr_indices,
            requested: AtomicBool::new(false),
            taken: AtomicBool::new(false),
            parking: Mutex::new(Parking::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Parking> {
        self.parking.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for the snapshot (once per run).
    pub fn request(&self) {
        if !self.taken.load(Ordering::SeqCst) {
            self.requested.store(true, Ordering::SeqCst);
        }
    }

    /// Called for every mark: asks for the snapshot at the point.
    pub fn on_mark(&self, mark: &TimelineMark) {
        if self.at.matches(mark) {
            self.request();
        }
    }

    /// True when the snapshot is asked for (by a mark, or by the signal
    /// flag of [`SnapshotAt::Signal`]).
    pub fn requested(&self) -> bool {
        if let Some(flag) = &self.request.signal {
            if flag.load(Ordering::SeqCst) {
                self.request();
            }
        }
        self.requested.load(Ordering::SeqCst)
    }

    /// A vCPU thread starts: it can be kicked from now on.
    pub fn register(&self, index: u32) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        self.lock().threads.insert(index, me);
    }

    /// A vCPU thread ends: it is kicked no more.
    pub fn deregister(&self, index: u32) {
        let mut p = self.lock();
        p.threads.remove(&index);
        p.ended.insert(index);
        drop(p);
        self.changed.notify_all();
    }

    /// On a vCPU thread, between two `KVM_RUN`s: when the snapshot is
    /// asked for, completes the last exit, saves the vCPU, and waits for
    /// the release. True: the thread is to end.
    pub fn park_if_requested(&self, vcpu: &mut VcpuFd, index: u32) -> bool {
        if !self.requested() {
            return false;
        }
        let state = complete_pending_exit(vcpu, index)
            .and_then(|()| VcpuState::save(vcpu, index, &self.msr_indices))
            .map_err(|e| e.to_string());
        let mut p = self.lock();
        let generation = p.generation;
        p.parked.insert(index, Some(state));
        self.changed.notify_all();
        while p.generation == generation {
            p = self.changed.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        p.stop
    }

    /// Kicks every running vCPU thread (with `kick`) until all are parked,
    /// for at most `limit`; returns their states by index. A vCPU whose
    /// thread has not started yet is waited for (it parks before its first
    /// `KVM_RUN`); one whose thread has ended is left out.
    pub fn gather(
        &self,
        kick: impl Fn(libc::pthread_t),
        limit: Duration,
    ) -> Result<Vec<VcpuState>, String> {
        let deadline = Instant::now() + limit;
        let mut p = self.lock();
        loop {
            let waiting: Vec<u32> = (0..self.vcpus)
                .filter(|i| !p.parked.contains_key(i) && !p.ended.contains(i))
                .collect();
            if waiting.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} vCPU thread(s) did not stop within {:.1} s",
                    waiting.len(),
                    limit.as_secs_f64()
                ));
            }
            // Kicked under the lock: a registered thread has not ended.
            // One not registered yet parks when it starts.
            for t in waiting.iter().filter_map(|i| p.threads.get(i)) {
                kick(*t);
            }
            p = (self.changed.wait_timeout(p, Duration::from_millis(2)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        // Taken out, their places kept: the threads stay parked until the
        // release.
        let out = (p.parked.values_mut())
            .map(|s| s.take().unwrap_or_else(|| Err("state taken twice".into())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(out)
    }

    /// Releases the parked vCPU threads: to end (`stop`) or to go on.
    pub fn release(&self, stop: bool) {
        self.taken.store(true, Ordering::SeqCst);
        self.requested.store(false, Ordering::SeqCst);
        if let Some(flag) = &self.request.signal {
            flag.store(false, Ordering::SeqCst);
        }
        let mut p = self.lock();
        p.parked.clear();
        p.stop = stop;
        p.generation += 1;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse_and_print() {
        assert_eq!("userspace".parse(), Ok(SnapshotAt::Userspace));
        assert_eq!("0x61".parse(), Ok(SnapshotAt::DebugPort(0x61)));
        assert_eq!("SIGUSR1".parse(), Ok(SnapshotAt::Signal));
        assert!("0x161".parse::<SnapshotAt>().is_err());
        assert!("later".parse::<SnapshotAt>().is_err());
        assert_eq!(SnapshotAt::DebugPort(0x61).to_string(), "0x61");
    }

    #[test]
    fn a_debug_port_point_matches_its_value_only() {
        let mark = |v: u64| TimelineMark {
            name: String::new(),
            source: MarkSource::DebugPort,
            t_ns: 0,
            value: Some(v),
            vcpu: None,
        };
        assert!(SnapshotAt::DebugPort(0x61).matches(&mark(0x61)));
        assert!(!SnapshotAt::DebugPort(0x61).matches(&mark(0x60)));
        assert!(SnapshotAt::Userspace.matches(&mark(0x60)));
        assert!(!SnapshotAt::Signal.matches(&mark(0x60)));
    }

    #[test]
    fn a_point_asks_once() {
        let request = crate::snapshot::SnapshotRequest {
            dir: "unused".into(),
            at: SnapshotAt::DebugPort(1),
            keep_running: false,
            signal: None,
        };
        let p = SnapshotPoint::new(request, Vec::new(), Vec::new(), 1);
        p.request();
        assert!(p.requested());
        p.release(false);
        p.request();
        assert!(!p.requested());
    }

    /// A vCPU thread that starts after the snapshot was asked for is
    /// waited for, not taken for one that ended.
    #[test]
    fn a_thread_not_started_yet_is_waited_for() {
        use std::sync::Arc;
        let request = crate::snapshot::SnapshotRequest {
            dir: "unused".into(),
            at: SnapshotAt::Signal,
            keep_running: false,
            signal: None,
        };
        let p = Arc::new(SnapshotPoint::new(request, Vec::new(), Vec::new(), 2));
        p.request();
        // vCPU 0 registered; vCPU 1's thread starts only after the
        // gathering began (its start is held until then).
        p.register(0);
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let late = {
            let p = p.clone();
            std::thread::spawn(move || {
                go_rx.recv().unwrap();
                p.register(1);
                p.lock().parked.insert(1, Some(Err("vcpu1".into())));
                p.changed.notify_all();
            })
        };
        p.lock().parked.insert(0, Some(Err("vcpu0".into())));
        let kicks = std::sync::atomic::AtomicUsize::new(0);
        let gathered = std::thread::scope(|s| {
            let g = s.spawn(|| {
                p.gather(
                    |_| {
                        kicks.fetch_add(1, Ordering::SeqCst);
                    },
                    Duration::from_secs(600),
                )
            });
            // The late thread starts while the gathering waits (a gathering
            // that did not wait would have returned by then).
            std::thread::sleep(Duration::from_millis(50));
            go_tx.send(()).unwrap();
            let gathered = g.join().unwrap();
            // vCPU 1 had parked when the gathering returned.
            assert!(p.lock().parked.contains_key(&1));
            gathered
        });
        late.join().unwrap();
        assert_eq!(gathered.err().as_deref(), Some("vcpu0"));
        // An ended thread is not waited for.
        p.release(false);
        let request = crate::snapshot::SnapshotRequest {
            dir: "unused".into(),
            at: SnapshotAt::Signal,
            keep_running: false,
            signal: None,
        };
        let q = SnapshotPoint::new(request, Vec::new(), Vec::new(), 2);
        q.register(0);
        q.register(1);
        q.deregister(1);
        q.lock().parked.insert(0, Some(Err("only".into())));
        assert_eq!(
            q.gather(|_| {}, Duration::from_secs(600)).err().as_deref(),
            Some("only")
        );
    }
}
