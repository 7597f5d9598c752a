//! What `--prove` measured: each fix's verdict and comparisons, the check
//! boot, the fixes not tried, and the report of them all.

use std::path::PathBuf;

use bootscope_bench::compare::Comparison;
use bootscope_bench::TestKind;
use serde::Serialize;

use super::options::Budget;
use crate::evaluate::ConcreteChange;

/// A fix not tried, and why.
#[derive(Clone, Debug, Serialize)]
pub struct NotTried {
    pub rule: &'static str,
    pub change: ConcreteChange,
    pub reason: String,
}

/// What became of a fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Reaches the same userspace mark cleanly and significantly sooner.
    Accepted,
    /// Boots as before, but no significant saving.
    NotSignificant,
    /// Significantly slower.
    Slower,
    /// A boot with it failed, or did not reach the same userspace mark.
    BreaksBoot,
    /// The VMM refused it (bad usage, exit status 2).
    CouldNotBeTried,
    /// Too few boots finished (interrupted, or the original failed).
    Incomplete,
}

impl Verdict {
    /// The verdict in the words of the report and the progress lines.
    pub fn word(self) -> &'static str {
        match self {
            Self::Accepted => "ACCEPTED",
            Self::NotSignificant => "rejected: no significant saving",
            Self::Slower => "rejected: slower",
            Self::BreaksBoot => "rejected: breaks the boot",
            Self::CouldNotBeTried => "could not be tried",
            Self::Incomplete => "incomplete",
        }
    }
}

/// One fix's (or the combination's) measurement.
#[derive(Clone, Debug, Serialize)]
pub struct FixResult {
    /// The changes measured (one, or all accepted ones).
    pub changes: Vec<ConcreteChange>,
    pub rules: Vec<&'static str>,
    pub verdict: Verdict,
    /// Why, in words.
    pub detail: String,
    /// The estimate the finding gave, for comparison with the measurement.
    pub estimate_ns: Option<u64>,
    /// Time to userspace, with the fix against without (ratio, interval, p).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_userspace: Option<Comparison>,
    /// The phase the finding's time is spent in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Comparison>,
    /// Exit counts (KVM's statistics), medians.
    pub exits: Vec<Comparison>,
    /// Successful measured boots: without, with.
    pub ok_runs: (usize, usize),
    /// Rounds booted (a round boots each side once): `--runs`, or fewer
    /// when the bench stopped early (its outcome settled) or was
    /// interrupted.
    pub rounds: u32,
    /// The command line (bootscope: `run` arguments) with the change.
    pub command: Vec<String>,
}

/// The check boot: the original boots, reaching userspace.
#[derive(Clone, Debug, Serialize)]
pub struct CheckBoot {
    pub wall_ns: u64,
    /// The userspace mark (bootscope: the mark that opened its `userspace`
    /// phase) or console pattern it reached.
    pub userspace_mark: String,
    /// The guest's own mark after the `userspace` phase opened (a systemd
    /// guest's workload writing port 0x80): every A/B bench measures the
    /// time to it (`mark:NAME`), and a boot that misses it breaks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_mark: Option<String>,
    /// Its timeline and profile (bootscope), for the evidence.
    #[serde(skip)]
    pub documents: Vec<PathBuf>,
}

/// Everything `--prove` measured.
#[derive(Clone, Debug, Serialize)]
pub struct ProveReport {
    /// What the A/B benches measured: `time_to_userspace` (bootscope),
    /// `mark:NAME` (bootscope, to the check boot's workload mark) or
    /// `console:userspace`.
    pub metric: String,
    pub test: TestKind,
    pub level: f64,
    pub runs_per_side: u32,
    pub budget: Option<Budget>,
    /// Boots started, the check boot included.
    pub boots: u32,
    pub original_command: Vec<String>,
    pub original_cmdline: String,
    pub check: CheckBoot,
    pub fixes: Vec<FixResult>,
    pub not_tried: Vec<NotTried>,
    /// The accepted fixes together against the original (measured when
    /// two or more were accepted; with one it is that fix's result).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub combined: Option<FixResult>,
    /// `combined` is all the fixes tried, benched together before any
    /// alone (`--together-first`) and accepted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub combined_first: bool,
    /// All the fixes tried together (`--together-first`) when that bench
    /// did not accept them: the single fixes decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub together: Option<FixResult>,
    /// The command line with the accepted (and, combined, still
    /// accepted) fixes.
    pub final_command: Vec<String>,
    pub final_cmdline: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
}
