//! A profile's counts given to the initcalls of the boot it followed
//! (`run --initcalls`, profiled): both are on the VMM's clock.

use bootscope_model::initcalls::{InitcallsDoc, IntervalCounts, SampledCounts};

use crate::profile::{Profile, Sample, TimeSlots};

/// Gives the initcalls what the profiler counted during each: exactly,
/// from its per-slot counts, where it has them; else its sampled counters
/// (every exit by reason, page faults) shared out between samples.
pub fn attribute_profile(initcalls: &mut InitcallsDoc, profile: &Profile) {
    attribute(initcalls, profile.time_slots.as_ref(), &profile.samples);
}

/// [`attribute_profile`] from the profile's parts (a live collector's
/// slots and samples).
pub fn attribute(initcalls: &mut InitcallsDoc, slots: Option<&TimeSlots>, samples: &[Sample]) {
    if let Some(slots) = slots {
        initcalls.attribute_counts(&ProfileSlots(slots));
    }
    let mut samples: Vec<_> = samples
        .iter()
        .map(|s| {
            (
                s.t_ns,
                SampledCounts {
                    exits: s.exits_total,
                    exits_by_reason: s.exits_by_reason.to_map(),
                    guest_faults: s.guest_faults,
                    host_faults: s.host_faults,
                },
            )
        })
        .collect();
    initcalls.attribute_samples(&mut samples);
}

/// The profiler's per-slot counts, as the initcalls ask for them.
struct ProfileSlots<'a>(&'a TimeSlots);

impl IntervalCounts for ProfileSlots<'_> {
    fn slot_ns(&self) -> u64 {
        self.0.slot_ns
    }

    fn complete_until_ns(&self) -> Option<u64> {
        let s = self.0;
        s.full_from_slot.map(|slot| {
            let t = i128::from(s.start_ns) + i128::from(slot) * i128::from(s.slot_ns);
            u64::try_from(t.max(0)).unwrap_or(u64::MAX)
        })
    }

    fn between(&self, start_ns: u64, end_ns: u64) -> SampledCounts {
        let t = self.0.between(start_ns, end_ns);
        SampledCounts {
            exits: t.exits,
            exits_by_reason: t.exits_by_reason,
            guest_faults: t.guest_faults,
            host_faults: t.host_faults,
        }
    }
}
