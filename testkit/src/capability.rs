//! The capability checks: root, `/dev/kvm`, eBPF profiling.

/// Says that the calling test did not run what it tests, and why: the one
/// line `scripts/test` counts as a skip.
pub fn skip(reason: impl std::fmt::Display) {
    eprintln!("SKIP: {reason}");
}

/// Prints `SKIP: reason` (format arguments as `format!`) and returns from
/// the calling test.
#[macro_export]
macro_rules! skip_test {
    ($($reason:tt)+) => {{
        $crate::skip(format_args!($($reason)+));
        return;
    }};
}

/// Whether this process runs as root (no message).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Root, or a SKIP line saying what needs it (`why`, e.g. "to mount a
/// file system").
pub fn root(why: &str) -> bool {
    let yes = is_root();
    if !yes {
        skip(format_args!("needs root {why}"));
    }
    yes
}

/// True when `/dev/kvm` can be opened for reading and writing; a SKIP line
/// otherwise.
pub fn kvm_available() -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => true,
        Err(e) => {
            skip(format_args!("/dev/kvm cannot be opened ({e})"));
            false
        }
    }
}

/// True when eBPF profiling is possible here; a SKIP line saying why not
/// otherwise. Only a truly absent capability skips: not root, no tracefs.
/// (Without the kernel's BTF it profiles everything but exit codes.)
pub fn can_profile() -> bool {
    if !is_root() {
        skip("eBPF profiling needs root (tests run as uid != 0)");
        return false;
    }
    // The profiler mounts tracefs itself when it can; only a kernel without
    // tracefs support skips.
    let has_tracefs = std::fs::read_to_string("/proc/filesystems")
        .map(|f| f.lines().any(|l| l.ends_with("tracefs")))
        .unwrap_or(false);
    if !has_tracefs {
        skip("this kernel has no tracefs");
        return false;
    }
    true
}

/// Returns from the calling test unless it runs as root; `why` completes
/// "needs root ...".
#[macro_export]
macro_rules! require_root {
    ($why:expr) => {
        if !$crate::root($why) {
            return;
        }
    };
}

/// Returns from the calling test unless `/dev/kvm` can be opened.
#[macro_export]
macro_rules! require_kvm {
    () => {
        if !$crate::kvm_available() {
            return;
        }
    };
}

/// Returns from the calling test unless eBPF profiling is possible here.
#[macro_export]
macro_rules! require_bpf {
    () => {
        if !$crate::can_profile() {
            return;
        }
    };
}
