//! What a thread is, from its name: a vCPU (and which), a preallocation
//! worker, the main thread, or another.

/// vCPU index from a thread name: `vcpu3` (bootscope), `CPU 3/KVM` (QEMU).
pub fn vcpu_from_thread_name(name: &str) -> Option<u32> {
    if let Some(n) = name.strip_prefix("vcpu") {
        return n.trim().parse().ok();
    }
    name.strip_prefix("CPU ")
        .and_then(|r| r.split_once('/'))
        .and_then(|(n, _)| n.trim().parse().ok())
}

/// The role of a thread, from its name.
pub fn thread_role(name: &str, tid: u32, tgid: u32) -> &'static str {
    if vcpu_from_thread_name(name).is_some() {
        "vcpu"
    } else if name.starts_with("touch_pages") || name.starts_with("prealloc") {
        "prealloc"
    } else if tid == tgid {
        "main"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_names() {
        assert_eq!(vcpu_from_thread_name("vcpu0"), Some(0));
        assert_eq!(vcpu_from_thread_name("vcpu12"), Some(12));
        assert_eq!(vcpu_from_thread_name("CPU 3/KVM"), Some(3));
        assert_eq!(vcpu_from_thread_name("touch_pages"), None);
        assert_eq!(thread_role("CPU 1/KVM", 5, 4), "vcpu");
        assert_eq!(thread_role("touch_pages", 5, 4), "prealloc");
        assert_eq!(thread_role("qemu-system-x86", 4, 4), "main");
        assert_eq!(thread_role("call_rcu", 6, 4), "other");
    }
}
