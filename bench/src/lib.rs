//! Benchmarks of VM boots: repeated runs (`bootscope bench`), their
//! statistics, comparisons in plain words (`compare`), pass/fail regression
//! checks for CI (`check`) and SVG plots (`plot`).
//!
//! The library does not know the CLI: `bootscope` hands it the executable to
//! run, the host's KVM flavour and the parsed options. Documents read and
//! written: the bench document (docs/bench-schema.md), bootscope's timeline
//! and profile (read only).

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

pub mod compare;
pub mod doc;
pub mod error;
pub mod metrics;
pub mod plot;
pub mod provenance;
pub mod runner;
pub mod schema;
pub mod stats;
pub mod storm;

pub use compare::{CheckOptions, CheckReport, CompareReport, MetricSpec, Sample};
pub use doc::BenchDoc;
pub use error::BenchError;
pub use runner::{BenchPlan, ConfigPlan, ConsolePattern, Side};
pub use stats::TestKind;
