//! `advise --prove`: every fix that can be tried is measured against the
//! original boot in an interleaved A/B bench ([`bootscope_bench::BenchPlan`],
//! its runner and statistics), accepted only when the boot still reaches
//! the same userspace mark with a clean outcome and is significantly
//! faster to userspace; the accepted fixes are then combined and the
//! combination measured against the original.
//!
//! * [`options`]: the settings, the test and the runs it needs.
//! * [`plan`]: the fixes to try, the plan of the boots, the check boot.
//! * [`outcome`]: the verdicts and the report.
//! * `measure`: the A/B benches and their verdicts.

mod measure;
pub mod options;
pub mod outcome;
pub mod plan;

pub use options::{Budget, FixKind, ProveOptions};
pub use outcome::{CheckBoot, FixResult, NotTried, ProveReport, Verdict};
pub use plan::{trials, ProvePlan, Trial, MARKER_NAME};
