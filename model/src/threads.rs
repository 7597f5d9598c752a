//! The names bootscope's VMM gives its threads, and what a thread is from
//! its name: one contract for the VMM that names them and the profiler
//! that reads them (a profile's `threads[].role`, docs/profile-schema.md).
//! QEMU's names (`CPU N/KVM`, `touch_pages`) are read too.

use std::fmt;

/// The virtio device thread's name (one thread serves every device).
pub const VIRTIO_THREAD: &str = "virtio";

/// The prefix of every preallocation worker's name.
const PREALLOC_PREFIX: &str = "prealloc";

/// QEMU's preallocation threads.
const QEMU_PREALLOC: &str = "touch_pages";

/// The name of vCPU `index`'s thread: `vcpu3`.
pub fn vcpu_thread_name(index: impl fmt::Display) -> String {
    format!("vcpu{index}")
}

/// The name of preallocation worker `index` of guest node `node`:
/// `prealloc-n1-3`.
pub fn prealloc_thread_name(node: impl fmt::Display, index: usize) -> String {
    format!("{PREALLOC_PREFIX}-n{node}-{index}")
}

/// vCPU index from a thread name: `vcpu3` (bootscope), `CPU 3/KVM` (QEMU).
pub fn vcpu_from_thread_name(name: &str) -> Option<u32> {
    if let Some(n) = name.strip_prefix("vcpu") {
        return n.trim().parse().ok();
    }
    name.strip_prefix("CPU ")
        .and_then(|r| r.split_once('/'))
        .and_then(|(n, _)| n.trim().parse().ok())
}

/// What a thread is: a profile's `threads[].role`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadRole {
    /// Runs a vCPU (`vcpuN`, `CPU N/KVM`).
    Vcpu,
    /// Preallocates guest memory (`prealloc*`, `touch_pages`).
    Prealloc,
    /// bootscope's virtio device thread (`virtio`).
    Virtio,
    /// The process's main thread (tid = tgid).
    Main,
    Other,
}

impl ThreadRole {
    /// The role of a thread, from its name (and whether it is its
    /// process's main thread).
    pub fn of(name: &str, tid: u32, tgid: u32) -> Self {
        if vcpu_from_thread_name(name).is_some() {
            Self::Vcpu
        } else if name.starts_with(QEMU_PREALLOC) || name.starts_with(PREALLOC_PREFIX) {
            Self::Prealloc
        } else if name == VIRTIO_THREAD {
            Self::Virtio
        } else if tid == tgid {
            Self::Main
        } else {
            Self::Other
        }
    }

    /// The name a profile gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vcpu => "vcpu",
            Self::Prealloc => "prealloc",
            Self::Virtio => "virtio",
            Self::Main => "main",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for ThreadRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_vmm_gives_read_back() {
        assert_eq!(vcpu_from_thread_name(&vcpu_thread_name(12)), Some(12));
        assert_eq!(vcpu_from_thread_name("vcpu0"), Some(0));
        assert_eq!(vcpu_from_thread_name("CPU 3/KVM"), Some(3));
        assert_eq!(vcpu_from_thread_name("touch_pages"), None);
        assert_eq!(prealloc_thread_name(1, 3), "prealloc-n1-3");
        assert_eq!(ThreadRole::of(&vcpu_thread_name(1), 5, 4), ThreadRole::Vcpu);
        assert_eq!(
            ThreadRole::of(&prealloc_thread_name(0, 0), 5, 4),
            ThreadRole::Prealloc
        );
        assert_eq!(ThreadRole::of(VIRTIO_THREAD, 5, 4), ThreadRole::Virtio);
        assert_eq!(ThreadRole::of("virtio-x", 5, 4), ThreadRole::Other);
    }

    #[test]
    fn roles_of_other_vmms_threads() {
        let role = |name, tid| ThreadRole::of(name, tid, 4).as_str();
        assert_eq!(role("CPU 1/KVM", 5), "vcpu");
        assert_eq!(role("touch_pages", 5), "prealloc");
        assert_eq!(role("qemu-system-x86", 4), "main");
        assert_eq!(role("call_rcu", 6), "other");
        assert_eq!(ThreadRole::Virtio.to_string(), "virtio");
    }
}
