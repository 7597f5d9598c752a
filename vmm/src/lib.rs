//! bootscope's virtual machine monitor: boots a real Linux kernel (bzImage or
//! ELF/PVH) under KVM and timestamps every boot phase on one clock.
//!
//! The crate knows nothing of eBPF or terminals; it produces a
//! [`timeline::Timeline`] that the profiler and the UI consume.

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

pub mod bootparams;
pub mod console;
pub mod devices;
pub mod exit;
pub mod exit_slots;
pub mod host;
pub mod kernel;
pub mod kernel_log;
pub mod kvm_stats;
pub mod layout;
pub mod loader;
pub mod memory;
pub mod pci;
pub mod rtc;
pub mod sandbox;
pub mod snapshot;
pub mod timeline;
pub mod units;
pub mod virtio;
pub mod vm;
pub mod x86;
