//! The sampler's part of the state: counter samples over time, KVM's own
//! statistics, and what sampling and reading cost.

use std::time::Duration;

use crate::kvm_stats::KvmStatsReader;
use crate::profile::Sample;

/// Samples and KVM's statistics.
pub(super) struct Sampler {
    pub(super) samples: Vec<Sample>,
    pub(super) kvm_stats: KvmStatsReader,
    /// CPU time of samples taken so far.
    pub(super) sample_cpu: Duration,
    /// CPU time of the worker thread so far, and of the final read.
    pub(super) reader_cpu: Duration,
}

impl Sampler {
    pub(super) fn new(kvm_stats: KvmStatsReader) -> Self {
        Sampler {
            samples: Vec::new(),
            kvm_stats,
            sample_cpu: Duration::ZERO,
            reader_cpu: Duration::ZERO,
        }
    }
}
