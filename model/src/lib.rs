//! What bootscope's crates share. For now: [`output`], the one writer of
//! output files (timelines, profiles, benchmarks, reports, snapshots, the
//! lab's files), so that every command treats the paths it is given alike.

pub mod output;
