//! The profile read from every collector's maps: each part's reader
//! (`exits.rs`, `exit_detail.rs`, `faults.rs`, `threads.rs`, `sources.rs`,
//! ...) adds what it counted to the sources' event counts as it goes.

use super::maps::percpu_sum;
use super::plan;
use super::state::State;
use crate::bpf::Source;
use crate::phases;
use crate::profile::{CollectorCost, Profile};

impl State {
    pub(super) fn attached(&self, s: Source) -> bool {
        plan::attached(&self.setup.programs, s)
    }

    pub(super) fn build(&self, now: u64) -> Profile {
        let mut counts = self.source_counts();
        let exits = self.exits(&mut counts);
        let page_faults = self.faults(&mut counts);
        let (threads, numa) = self.threads_and_numa(now, &mut counts);
        let marks = self.log.sorted_marks();
        let phases = phases::derive_spans(&marks, now);
        let fault_tail = self.fault_tail(&marks, &mut counts);
        Profile {
            sources: self.sources(&counts, &exits, &page_faults),
            target: self.tasks.target.clone(),
            host: self.setup.host.clone(),
            duration_ns: now,
            exits,
            page_faults,
            threads,
            numa,
            marks,
            phases,
            samples: self.sampler.samples.clone(),
            lost_events: percpu_sum(&self.bpf, "lost_events", 0),
            map_overflows: percpu_sum(&self.bpf, "map_overflows", 0),
            startup: self.setup.startup.clone(),
            collector: Some(CollectorCost {
                samples: self.sampler.samples.len() as u64,
                sample_cpu_ns: self.sampler.sample_cpu.as_nanos() as u64,
                cpu_ns: self.sampler.reader_cpu.as_nanos() as u64,
            }),
            fault_tail,
            ..Profile::new()
        }
    }
}
