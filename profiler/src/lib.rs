//! eBPF profiler (exit reasons, page faults, thread placement, NUMA locality).
//!
//! Not built yet: tracked by the profiler issue. The crate exists so the
//! workspace layout matches the architecture (`vmm` never depends on it).
