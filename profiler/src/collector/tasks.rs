//! The target, the processes followed with it and their threads, as the
//! ring buffer's task events and the seeding at start tell them.

use std::collections::{BTreeMap, BTreeSet};

use super::target::TargetLife;
use super::thread_info::{read_comm, ThreadInfo};
use crate::profile::Target;

/// The target and what is followed with it.
pub(super) struct Tasks {
    pub(super) target: Target,
    pub(super) target_pid: u32,
    pub(super) life: TargetLife,
    /// Every thread seen, by thread id.
    pub(super) threads: BTreeMap<u32, ThreadInfo>,
    /// The processes followed.
    pub(super) tgids: BTreeSet<u32>,
    /// The kernel reads threads' exit codes ([`KernelBtf::reads_exit_codes`](super::load::KernelBtf::reads_exit_codes)).
    pub(super) exit_codes: bool,
}

/// Decodes a task's `exit_code` (a wait status) as a shell would.
pub(super) fn exit_status_code(raw: u64) -> i32 {
    let raw = raw as u32;
    let sig = raw & 0x7f;
    if sig == 0 {
        ((raw >> 8) & 0xff) as i32
    } else {
        128 + sig as i32
    }
}

impl Tasks {
    /// The target (named by its `comm` now) with the threads and processes
    /// seeded at start.
    pub(super) fn new(
        kind: String,
        command: Vec<String>,
        target_pid: u32,
        life: TargetLife,
        (threads, tgids): (BTreeMap<u32, ThreadInfo>, BTreeSet<u32>),
        exit_codes: bool,
    ) -> Self {
        Tasks {
            target: Target {
                kind,
                command,
                pid: target_pid,
                name: read_comm(target_pid, target_pid).unwrap_or_default(),
                exit_code: None,
                ended_ns: None,
                interrupted_by: None,
                vmm: None,
                faults: None,
            },
            target_pid,
            life,
            threads,
            tgids,
            exit_codes,
        }
    }

    /// A thread's name, empty if it was never seen.
    pub(super) fn thread_name(&self, tid: u32) -> String {
        self.threads
            .get(&tid)
            .map(|t| t.name.clone())
            .unwrap_or_default()
    }

    /// Notices a target that ended without its exit event (missed, or the
    /// threads collector is off).
    pub(super) fn poll_target(&mut self, now_ns: u64) {
        if self.target.ended_ns.is_none() && self.life.ended() {
            self.target.ended_ns = Some(now_ns);
        }
    }

    /// A thread renamed itself (`comm`).
    pub(super) fn rename(&mut self, tid: u32, tgid: u32, name: String, t_ns: u64) {
        if tid == self.target_pid {
            self.target.name = name.clone();
        }
        let entry = self.threads.entry(tid).or_insert_with(|| ThreadInfo {
            tgid,
            start_ns: t_ns,
            ..Default::default()
        });
        entry.name = name;
    }

    /// A thread ended with the wait status `raw`; `last` when it was its
    /// process's last thread (the process ended).
    pub(super) fn exit(
        &mut self,
        tid: u32,
        tgid: u32,
        comm: String,
        raw: u64,
        last: bool,
        t_ns: u64,
    ) {
        let entry = self.threads.entry(tid).or_insert_with(|| ThreadInfo {
            tgid,
            name: comm,
            start_ns: 0,
            ..Default::default()
        });
        entry.end_ns = Some(t_ns);
        entry.exit_code = self.exit_codes.then(|| exit_status_code(raw));
        if last && tgid == self.target_pid && self.target.ended_ns.is_none() {
            self.target.ended_ns = Some(t_ns);
        }
    }

    /// Files threads `tids` of process `tgid`, found in procfs, that were
    /// not seen yet (named by their `comm` now).
    pub(super) fn add_threads(&mut self, tgid: u32, tids: &[u32]) {
        for &tid in tids {
            self.threads.entry(tid).or_insert_with(|| ThreadInfo {
                tgid,
                name: read_comm(tgid, tid).unwrap_or_default(),
                ..Default::default()
            });
        }
    }

    /// Drops processes `tgids` and their threads.
    pub(super) fn forget(&mut self, tgids: &[u32]) {
        for t in tgids {
            self.tgids.remove(t);
        }
        self.threads.retain(|_, i| !tgids.contains(&i.tgid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(exit_status_code(0), 0);
        assert_eq!(exit_status_code(3 << 8), 3);
        assert_eq!(exit_status_code(9), 137);
    }
}
