//! Page faults read from the faults collector's map: guest faults (from
//! whichever source fired), host faults, by thread and by phase.

use std::collections::BTreeMap;

use super::state::State;
use crate::bpf::{self, Source};
use crate::profile::{PageFaultProfile, PhaseFaults, ThreadFaults};

impl State {
    pub(super) fn faults(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> PageFaultProfile {
        let mut out = PageFaultProfile::default();
        let entries = self.entries::<bpf::BsFaultKey, u64>("fault_counts");
        let has = |kind| entries.iter().any(|(k, n)| k.kind == kind && *n > 0);
        let guest_kind = if has(bpf::fault_kind::GUEST) {
            out.guest_source = "tracepoint:kvm:kvm_page_fault".into();
            Some(bpf::fault_kind::GUEST)
        } else if has(bpf::fault_kind::GUEST_MAP) {
            out.guest_source = "tracepoint:kvmmmu:kvm_mmu_spte_requested".into();
            Some(bpf::fault_kind::GUEST_MAP)
        } else {
            None
        };
        let mut by_thread: BTreeMap<u32, ThreadFaults> = BTreeMap::new();
        let mut by_phase: BTreeMap<u32, PhaseFaults> = BTreeMap::new();
        for (k, n) in entries {
            let source = match k.kind {
                bpf::fault_kind::GUEST => Some(Source::KvmPageFault),
                bpf::fault_kind::GUEST_MAP => Some(Source::KvmmmuSpteRequested),
                bpf::fault_kind::GUEST_MMIO => Some(Source::KvmmmuMmioPageFault),
                bpf::fault_kind::HOST_USER => Some(Source::PageFaultUser),
                bpf::fault_kind::HOST_KERNEL => Some(Source::PageFaultKernel),
                _ => None,
            };
            if let Some(source) = source {
                events[source as usize] += n;
            }
            let (guest, host) = match k.kind {
                bpf::fault_kind::HOST_USER => {
                    out.host_user += n;
                    (0, n)
                }
                bpf::fault_kind::HOST_KERNEL => {
                    out.host_kernel += n;
                    (0, n)
                }
                bpf::fault_kind::GUEST_MMIO => {
                    out.guest_mmio += n;
                    (0, 0)
                }
                kind if Some(kind) == guest_kind => (n, 0),
                _ => (0, 0),
            };
            if guest == 0 && host == 0 {
                continue;
            }
            out.guest_total += guest;
            out.host_total += host;
            let t = by_thread.entry(k.tid).or_insert_with(|| ThreadFaults {
                tid: k.tid,
                name: self.thread_name(k.tid),
                ..Default::default()
            });
            t.guest += guest;
            t.host += host;
            let p = by_phase.entry(k.phase).or_insert_with(|| PhaseFaults {
                phase: self.log.phase_names.name(k.phase),
                ..Default::default()
            });
            p.guest += guest;
            p.host += host;
        }
        out.by_thread = by_thread.into_values().collect();
        out.by_phase = by_phase.into_values().collect();
        out
    }
}
