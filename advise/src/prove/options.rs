//! `--prove`'s settings: the budget, the kinds of fix to try, the paired
//! test and the least number of runs with which it can decide.

use std::time::Duration;

use bootscope_bench::{stats, ConsolePattern, TestKind};
use serde::Serialize;

use crate::error::AdviseError;
use crate::evaluate::ConcreteChange;

/// The statistical test: the Wilcoxon signed-rank test on the boots paired
/// by round.
pub const TEST: TestKind = TestKind::Wilcoxon;

/// The least `--runs` with which the test can reach `level` at all (every
/// pair faster gives the smallest p, 2 / 2^runs).
pub fn least_runs(level: f64) -> u32 {
    (1..=64)
        .find(|&n| stats::min_attainable_p(TEST, n as usize, n as usize) < level)
        .unwrap_or(64)
}

/// A significance level for messages: short, in scientific notation
/// below 1e-4 (`1e-300`).
pub fn level(v: f64) -> String {
    bootscope_bench::compare::format::format_level(v)
}

/// A smallest attainable p for messages: three decimals, or two
/// significant digits in scientific notation below 0.001.
fn smallest_p(p: f64) -> String {
    if p >= 1e-3 || p == 0.0 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

/// How much `--prove` may spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// At most this many boots, the check boot included.
    Boots(u32),
    /// No new A/B bench starts once it could not end within this time.
    Time(Duration),
}

impl Budget {
    /// `N` boots, or a duration: `90s`, `15m`, `2h`.
    pub fn parse(s: &str) -> Result<Self, AdviseError> {
        let bad = || {
            AdviseError::Usage(format!(
                "--budget {s:?}: give a number of boots (e.g. 40) or a duration (90s, 15m, 2h) above 0"
            ))
        };
        let s = s.trim();
        if let Ok(n) = s.parse::<u32>() {
            return if n == 0 {
                Err(bad())
            } else {
                Ok(Self::Boots(n))
            };
        }
        let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
        let n: u64 = num.parse().map_err(|_| bad())?;
        let secs = match unit {
            "s" => n,
            "m" | "min" => n * 60,
            "h" => n * 3600,
            _ => return Err(bad()),
        };
        if secs == 0 {
            return Err(bad());
        }
        Ok(Self::Time(Duration::from_secs(secs)))
    }
}

/// `--prove`'s settings.
#[derive(Clone, Debug)]
pub struct ProveOptions {
    pub budget: Option<Budget>,
    /// Measured boots per side of each A/B bench.
    pub runs: u32,
    pub max_fixes: usize,
    /// Bench all the fixes together before each alone (`--together-first`).
    pub together_first: bool,
    /// Significance level of the test (and 1 - confidence of the ratio's
    /// interval).
    pub level: f64,
    pub allow_unsafe: bool,
    pub run_timeout: Duration,
    /// Another VMM's userspace console line (`--marker`).
    pub marker: ConsolePattern,
    /// The kinds of fix to try (`--kinds`); the others are listed as not
    /// tried.
    pub kinds: Vec<FixKind>,
    /// Try only the fixes of these rules (`--rules`, rule ids); empty: all.
    pub rules: Vec<String>,
}

/// A kind of fix `--prove` can try.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FixKind {
    /// Kernel command-line words.
    Kernel,
    /// VMM options: `bootscope run`'s, or another VMM's own.
    Run,
}

impl FixKind {
    /// Both kinds, the default.
    pub const ALL: [Self; 2] = [Self::Kernel, Self::Run];

    pub(crate) fn of(change: &ConcreteChange) -> Option<Self> {
        match change {
            ConcreteChange::KernelArgs(_) => Some(Self::Kernel),
            ConcreteChange::RunFlags(_) | ConcreteChange::VmmOptions { .. } => Some(Self::Run),
            ConcreteChange::Advice(_) => None,
        }
    }
}

impl ProveOptions {
    /// Checks the settings before any boot.
    pub fn validate(&self) -> Result<(), AdviseError> {
        if !(self.level > 0.0 && self.level < 0.5) {
            return Err(AdviseError::Usage(format!(
                "--level {}: give a significance level between 0 and 0.5, e.g. 0.05",
                level(self.level)
            )));
        }
        let least = least_runs(self.level);
        if self.runs < least {
            let p = stats::min_attainable_p(TEST, self.runs as usize, self.runs as usize);
            return Err(AdviseError::Usage(format!(
                "--runs {}: the paired test on {} rounds can never give p below {} (its smallest p is {}, every round faster); give --runs {least} or more, or a larger --level",
                self.runs, self.runs, level(self.level), smallest_p(p)
            )));
        }
        if let Some(bad) = self
            .rules
            .iter()
            .find(|r| !crate::rules::RULES.iter().any(|rule| rule.id == r.as_str()))
        {
            return Err(AdviseError::Usage(format!(
                "--rules: no rule is named {bad:?}; the rules are {} (docs/advise.md)",
                crate::rules::RULES
                    .iter()
                    .map(|r| r.id)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if self.max_fixes == 0 {
            return Err(AdviseError::Usage("--max-fixes must be at least 1".into()));
        }
        if let Some(Budget::Boots(n)) = self.budget {
            let one = 1 + 2 * self.runs;
            if n < one {
                return Err(AdviseError::Usage(format!(
                    "--budget {n} boots cannot hold the check boot and one A/B bench of 2 x {} boots ({one}); give at least {one}, or fewer --runs",
                    self.runs
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets() {
        assert_eq!(Budget::parse("40").unwrap(), Budget::Boots(40));
        assert_eq!(
            Budget::parse("15m").unwrap(),
            Budget::Time(Duration::from_secs(900))
        );
        assert_eq!(
            Budget::parse("2h").unwrap(),
            Budget::Time(Duration::from_secs(7200))
        );
        for bad in ["0", "0s", "-3", "5 parsecs", "m", ""] {
            assert!(Budget::parse(bad).unwrap_err().is_bad_input(), "{bad}");
        }
    }

    #[test]
    fn least_runs_follow_the_level() {
        // Every pair faster gives p = 2 / 2^n: 6 pairs give 0.031, 5 give
        // 0.0625.
        assert_eq!(least_runs(0.05), 6);
        assert_eq!(least_runs(0.1), 5);
        assert_eq!(least_runs(0.01), 8);
    }

    #[test]
    fn levels_and_p_values_are_printed_short() {
        assert_eq!(level(0.05), "0.05");
        assert_eq!(level(0.0001), "0.0001");
        assert_eq!(level(1e-300), "1e-300");
        assert_eq!(level(2.5e-7), "2.5e-7");
        assert_eq!(smallest_p(0.03125), "0.031");
        assert_eq!(smallest_p(2.0 / 2f64.powi(50)), "1.8e-15");
    }
}
