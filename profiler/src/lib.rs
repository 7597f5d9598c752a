//! bootscope's profiler: eBPF programs (bpf/) loaded with aya, aggregated in
//! the kernel, read into a [`profile::Profile`], and exported.
//!
//! The crate knows nothing of terminals: the TUI only draws what it produces.
//!
//! - [`collector::Collector`]: start, [`snapshot`](collector::Collector::snapshot)
//!   as often as wanted, [`finish`](collector::Collector::finish);
//! - [`launch::HeldCommand`]: start a command held before exec so it is
//!   followed from its first instruction;
//! - [`profile`]: the versioned document (docs/profile-schema.md).

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

mod batch;
pub mod bpf;
pub mod collector;
pub mod compare;
pub mod error;
pub mod export;
pub mod guest_symbols;
pub mod host;
pub mod host_vms;
pub mod initcalls;
pub mod kvm_stats;
pub mod launch;
mod le;
mod mount;
pub mod patch;
pub mod phases;
pub mod procfs;
mod pseudo;
pub mod reasons;
pub mod restore_cmd;
pub mod runqueue;
pub mod task_fields;
pub mod topology;
pub mod tracefs;

/// The profile document and its exit sites are the model's, shared with
/// every reader.
pub use bootscope_model::{profile, sites};
pub use collector::{
    check_privileges, hold_reason, BsHeld, BsMemslot, Collector, CollectorConfig, CollectorSet,
    FollowedVm, TargetSpec,
};
pub use error::ProfilerError;
pub use profile::Profile;
