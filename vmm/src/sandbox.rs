//! The seccomp sandbox installed after set-up (`--sandbox`).
//!
//! A denylist applied to every thread of the process at once (TSYNC): the
//! system calls a running VMM never needs return EPERM. Changing CPU affinity
//! is among them, which is why preallocation threads are created through
//! thread contexts whose affinity was set before the sandbox went up.
//! Denied calls fail with EPERM rather than killing the process, so a VMM
//! bug shows up as an error message, not a mysterious SIGSYS.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// System calls a VMM has no business making once the guest runs.
pub const DENIED_SYSCALLS: &[(&str, libc::c_long)] = &[
    ("sched_setaffinity", libc::SYS_sched_setaffinity),
    ("execve", libc::SYS_execve),
    ("execveat", libc::SYS_execveat),
    ("fork", libc::SYS_fork),
    ("vfork", libc::SYS_vfork),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("setuid", libc::SYS_setuid),
    ("setgid", libc::SYS_setgid),
    ("setreuid", libc::SYS_setreuid),
    ("setregid", libc::SYS_setregid),
    ("setresuid", libc::SYS_setresuid),
    ("setresgid", libc::SYS_setresgid),
    ("setgroups", libc::SYS_setgroups),
    ("capset", libc::SYS_capset),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("personality", libc::SYS_personality),
    ("acct", libc::SYS_acct),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("adjtimex", libc::SYS_adjtimex),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("socket", libc::SYS_socket),
    ("connect", libc::SYS_connect),
    ("bind", libc::SYS_bind),
    ("listen", libc::SYS_listen),
    ("accept", libc::SYS_accept),
    ("accept4", libc::SYS_accept4),
];

/// Errors installing the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The filter could not be compiled.
    #[error("cannot build the seccomp filter: {0}")]
    Build(#[source] seccompiler::BackendError),
    /// The kernel refused the filter.
    #[error("cannot install the seccomp filter on all threads: {0} (does this kernel have CONFIG_SECCOMP_FILTER?)")]
    Install(#[source] seccompiler::Error),
}

/// Compiles the denylist into a BPF program.
pub fn build_filter() -> Result<BpfProgram, SandboxError> {
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = DENIED_SYSCALLS
        .iter()
        .map(|(_, nr)| (*nr, Vec::new()))
        .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .map_err(SandboxError::Build)?;
    BpfProgram::try_from(filter).map_err(SandboxError::Build)
}

/// Installs the filter on every thread of the process (existing ones via
/// TSYNC; later ones inherit it).
pub fn install() -> Result<(), SandboxError> {
    let prog = build_filter()?;
    seccompiler::apply_filter_all_threads(&prog).map_err(SandboxError::Install)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_compiles_and_covers_affinity() {
        let prog = build_filter().unwrap();
        assert!(!prog.is_empty());
        assert!(DENIED_SYSCALLS
            .iter()
            .any(|(n, _)| *n == "sched_setaffinity"));
        // sched_getaffinity stays allowed: threads report where they may run.
        assert!(!DENIED_SYSCALLS
            .iter()
            .any(|(n, _)| *n == "sched_getaffinity"));
    }
}
