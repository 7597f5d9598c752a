//! The guest programs: those that can fire only while a vCPU runs (inside
//! `KVM_RUN`): KVM's exit, exit detail, guest fault and marker port
//! programs. They are most of the programs to verify and attach, and a VMM
//! profiling itself needs them from its first `KVM_RUN` on only, so with
//! [`super::CollectorConfig::defer_guest_programs`] they are attached on a
//! thread of their own while the VMM sets up, and the VMM waits for them
//! before it runs its vCPUs. The programs its set-up needs (threads, host
//! page faults, page allocations) are attached before it starts.

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

/// Verifies and attaches the guest programs. The object with the programs
/// leaves the state meanwhile; the maps stay, so the collector goes on
/// reading them (and the VMM's marks are not held up).
pub(super) fn attach_guest_programs(shared: &Shared) {
    if let Some(ms) = std::env::var(GUEST_ATTACH_DELAY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let mut stages = Stages::new();
    let (ebpf, mut programs) = {
        let mut st = lock(shared);
        (st.bpf.take_programs(), st.programs.clone())
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
    for (done, planned) in programs.into_iter().zip(st.programs.iter_mut()) {
        if fires_in_guest(&done.spec) {
            *planned = done;
        }
    }
    st.startup.extend(stages.done);
    st.guest_attached = Some(Instant::now());
}

/// The guest programs of a target that never ran a vCPU: not attached.
pub(super) fn skip_guest_programs(shared: &Shared) {
    let mut st = lock(shared);
    for p in st
        .programs
        .iter_mut()
        .filter(|p| p.is_attached() && fires_in_guest(&p.spec))
    {
        p.status = ProgramStatus::Disabled;
        p.detail = "not attached: deferred to the VMM's first KVM_RUN, which never came".into();
    }
}
