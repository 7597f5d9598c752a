//! The guest programs: those that can fire only while a vCPU runs (inside
//! `KVM_RUN`): KVM's exit, exit detail, guest fault and marker port
//! programs. They are most of the programs to verify and attach, and a VMM
//! profiling itself needs them from its first `KVM_RUN` on only, so with
//! [`super::CollectorConfig::defer_guest_programs`] they are attached on a
//! thread of their own while the VMM sets up, and the VMM waits for them
//! before it runs its vCPUs. The programs its set-up needs (threads, host
//! page faults, page allocations) are attached before it starts.
//!
//! Where the process may run on one CPU only (the one-CPU lab, a VMM
//! pinned to a CPU) the set-up cannot hide the attach: the CPU time is the
//! same before or during the set-up, and taken during it, it would be
//! counted as the VMM's own `vmm setup`. There the thread runs at the
//! lowest priority (nice 19) until the VMM waits for it, then at the VMM's,
//! so the attach lands in the wait (the timeline's `profiler guest
//! attach`). With more CPUs it runs at the VMM's priority from the start:
//! at nice 19 on a loaded two-CPU host it got so little CPU during the
//! set-up that the VMM waited 31 ms for it instead of 6 (docs/benchmarks.md).

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::load::{attach_programs, AttachStages, Stages};
use super::plan::ProgramStatus;
use super::state::State;
use super::Shared;
use crate::bpf::ProgramSpec;

/// The guest programs' stages in `startup[]`.
pub(super) const GUEST_STAGES: AttachStages = AttachStages {
    verify: "guest verify",
    attach: "guest attach",
};

/// Delays the guest programs' attach by this many milliseconds (a number):
/// for tests that check a VMM waits for them before its first `KVM_RUN`.
pub const GUEST_ATTACH_DELAY_ENV: &str = "BOOTSCOPE_GUEST_ATTACH_DELAY_MS";

/// True for a program that can fire only while a vCPU runs.
pub(super) fn fires_in_guest(spec: &ProgramSpec) -> bool {
    matches!(spec.system, "kvm" | "kvmmmu")
}

/// Where the guest programs stand.
pub(super) enum GuestAttach {
    /// None deferred, or all attached.
    Done,
    /// Deferred and not started.
    Pending,
    /// Being attached on their thread.
    Running(JoinHandle<()>),
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The niceness of the guest programs' thread until they are waited for.
const BACKGROUND_NICE: i32 = 19;

/// The calling thread's niceness (Linux: `PRIO_PROCESS` with 0 is the
/// calling thread, with a thread id that thread).
fn nice_of(tid: i32) -> Option<i32> {
    // SAFETY: getpriority takes two integers. -1 is also a valid
    // niceness, so errno tells an error apart.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        (*libc::__errno_location() == 0).then_some(n)
    }
}

/// Sets a thread's niceness (0: the calling thread); raising it back needs
/// CAP_SYS_NICE, and without it the thread keeps the lower priority.
fn set_nice(tid: i32, nice: i32) {
    // SAFETY: setpriority takes integers only.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
}

/// Puts the calling thread, the guest programs' own, in the background
/// where it may run on one CPU only: nice 19 until [`hurry`] (or, if that
/// came first, not at all).
fn background(shared: &Shared) {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        return;
    }
    let own = nice_of(0).unwrap_or(0);
    set_nice(0, BACKGROUND_NICE);
    // SAFETY: gettid has no arguments.
    let tid = unsafe { libc::gettid() };
    shared.guest_tid.store(tid, Ordering::SeqCst);
    if shared.guest_hurry.load(Ordering::SeqCst) {
        set_nice(0, own);
    }
}

/// The VMM waits for the guest programs: their thread gets the waiting
/// thread's priority back.
pub(super) fn hurry(shared: &Shared) {
    shared.guest_hurry.store(true, Ordering::SeqCst);
    let tid = shared.guest_tid.load(Ordering::SeqCst);
    if tid > 0 {
        set_nice(tid, nice_of(0).unwrap_or(0));
    }
}

/// Verifies and attaches the guest programs (`in_background`: on their
/// own thread, first put in the background). The object with the programs
/// leaves the state meanwhile; the maps stay, so the collector goes on
/// reading them (and the VMM's marks are not held up).
pub(super) fn attach_guest_programs(shared: &Shared, in_background: bool) {
    if in_background {
        background(shared);
    }
    if let Some(ms) = std::env::var(GUEST_ATTACH_DELAY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let mut stages = Stages::new();
    let (ebpf, mut programs) = {
        let mut st = lock(shared);
        (st.bpf.take_programs(), st.setup.programs.clone())
    };
    let Some(mut ebpf) = ebpf else { return };
    attach_programs(
        &mut ebpf,
        &mut programs,
        fires_in_guest,
        &mut stages,
        &GUEST_STAGES,
    );
    let mut st = lock(shared);
    st.bpf.put_programs(ebpf);
    for (done, planned) in programs.into_iter().zip(st.setup.programs.iter_mut()) {
        if fires_in_guest(&done.spec) {
            *planned = done;
        }
    }
    st.setup.startup.extend(stages.done);
    st.setup.guest_attached = Some(Instant::now());
}

/// The guest programs of a target that never ran a vCPU: not attached.
pub(super) fn skip_guest_programs(shared: &Shared) {
    let mut st = lock(shared);
    for p in st
        .setup
        .programs
        .iter_mut()
        .filter(|p| p.is_attached() && fires_in_guest(&p.spec))
    {
        p.status = ProgramStatus::Disabled;
        p.detail = "not attached: deferred to the VMM's first KVM_RUN, which never came".into();
    }
}
