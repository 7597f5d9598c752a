//! A thread as the collector records it, and its name as procfs tells it:
//! what the tasks, the sched collector's reader and every VM's mode fill
//! in alike.

/// What is known of one thread: its process, its name, and when it
/// started and ended.
#[derive(Clone, Debug, Default)]
pub(super) struct ThreadInfo {
    pub(super) tgid: u32,
    pub(super) name: String,
    pub(super) start_ns: u64,
    pub(super) end_ns: Option<u64>,
    pub(super) exit_code: Option<i32>,
}

/// Thread `tid`'s name (`comm`) in process `pid`; None once it is gone.
pub(super) fn read_comm(pid: u32, tid: u32) -> Option<String> {
    crate::pseudo::read(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}
