//! The profiler's errors: each names what is missing and what to do.

/// Why profiling could not start (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum ProfilerError {
    /// Not root and without CAP_BPF + CAP_PERFMON.
    #[error(
        "profiling needs root, or the CAP_BPF and CAP_PERFMON capabilities ({detail}); \
         run bootscope as root (sudo) or grant them: setcap cap_bpf,cap_perfmon+ep $(command -v bootscope)"
    )]
    NotPrivileged { detail: String },

    /// tracefs is not mounted and mounting it failed.
    #[error(
        "tracefs is not mounted (looked in {looked}) and mounting it at /sys/kernel/tracing failed: {source}; \
         mount it yourself: mount -t tracefs nodev /sys/kernel/tracing"
    )]
    TracefsMissing {
        looked: String,
        #[source]
        source: std::io::Error,
    },

    /// The process to profile does not exist.
    #[error("no process with pid {pid} (check it with: ps -p {pid})")]
    NoSuchProcess { pid: u32 },

    /// The profiler runs in a PID namespace: the kernel's pids would not
    /// match the ones it sees.
    #[error(
        "bootscope runs inside a PID namespace (/proc/self/ns/pid is {ns}); the kernel reports host pids, \
         so run the profiler in the host's PID namespace (outside the container, or with --pid=host)"
    )]
    PidNamespace { ns: String },

    /// A file the profiler needs could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// The BPF object could not be loaded.
    #[error("the kernel refused the bootscope eBPF object: {source}")]
    Load {
        #[source]
        source: aya::EbpfError,
    },

    /// The BPF object could not be prepared for this kernel's records.
    #[error("cannot prepare the bootscope eBPF object: {0}")]
    Patch(#[from] crate::patch::PatchError),

    /// No collector could be attached at all.
    #[error("no tracepoint could be attached; sources: {detail}")]
    NothingAttached { detail: String },

    /// A map the collectors need is missing from the object or unusable.
    #[error("eBPF map {name}: {detail}")]
    Map { name: String, detail: String },

    /// The collector thread could not be started.
    #[error("cannot start the collector thread: {source}")]
    Thread {
        #[source]
        source: std::io::Error,
    },
}
