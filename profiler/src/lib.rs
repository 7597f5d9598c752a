//! bootscope's profiler: eBPF programs (bpf/) loaded with aya, aggregated in
//! the kernel, read into a [`profile::Profile`], and exported.
//!
//! The crate knows nothing of terminals: the TUI only draws what it produces.

pub mod export;
pub mod profile;
