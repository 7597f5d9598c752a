//! Live terminal UI over the profiler's data.
//!
//! Not built yet: tracked by the TUI issue.
