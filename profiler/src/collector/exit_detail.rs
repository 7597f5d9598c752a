//! The exits' detail read from their maps: port I/O, marker port writes,
//! MMIO, MSRs, CPUID leaves and emulated instructions.

use std::collections::BTreeMap;

use super::state::State;
use crate::bpf::{self, Source};
use crate::profile::{CpuidStat, ExitProfile, MarkerWrites, MmioStat, MsrStat, PioStat};

impl State {
    /// Every exit's part of the profile: the reasons
    /// ([`State::exit_reasons`] with their detail), the exit sites, KVM's own
    /// count, and the detail each kind of exit's map holds.
    pub(super) fn exits(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> ExitProfile {
        let mut out = self.exit_reasons(true, events);
        // Where kvm_exit gave the reasons, the fallback's map was not read
        // for them (both attached only when the backend is unknown).
        if out.source == "tracepoint:kvm:kvm_exit" && self.attached(Source::KvmUserspaceExit) {
            events[Source::KvmUserspaceExit as usize] = self
                .entries::<bpf::BsUexitKey, u64>("uexit_counts")
                .iter()
                .map(|(_, n)| n)
                .sum();
        }
        out.kvm_stats_exits = self.sampler.kvm_stats.total();
        out.sites = self.exit_sites();
        out.pio = self.pio_stats(events);
        out.marker_writes = self.marker_writes();
        out.mmio = self.mmio_stats(events);
        out.msr = self.msr_stats(events);
        out.cpuid = self.cpuid_stats(events);
        for (k, n) in self.entries::<bpf::BsEmulateKey, u64>("emulate_counts") {
            events[Source::KvmEmulateInsn as usize] += n;
            out.emulated_instructions += n;
            if k.failed != 0 {
                out.emulation_failures += n;
            }
        }
        out
    }

    /// Port I/O exits by port, direction and size, the most frequent first.
    fn pio_stats(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> Vec<PioStat> {
        let mut pio: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsPioKey, u64>("pio_counts") {
            events[Source::KvmPio as usize] += n;
            *pio.entry((k.port, k.rw, k.size)).or_default() += n;
        }
        let mut out: Vec<PioStat> = pio
            .into_iter()
            .map(|((port, rw, size), count)| PioStat {
                port,
                direction: if rw != 0 { "write" } else { "read" }.into(),
                size,
                count,
            })
            .collect();
        out.sort_by(|a, b| b.count.cmp(&a.count).then(a.port.cmp(&b.port)));
        out
    }

    /// Writes to the marker ports by port and value.
    fn marker_writes(&self) -> Vec<MarkerWrites> {
        let mut markers: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsMarkerKey, u64>("marker_counts") {
            *markers.entry((k.port, k.value)).or_default() += n;
        }
        markers
            .into_iter()
            .map(|((port, value), count)| MarkerWrites { port, value, count })
            .collect()
    }

    /// MMIO exits by guest-physical address and kind, the most frequent
    /// first.
    fn mmio_stats(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> Vec<MmioStat> {
        let mut mmio: BTreeMap<(u64, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsMmioKey, u64>("mmio_counts") {
            events[Source::KvmMmio as usize] += n;
            *mmio.entry((k.gpa, k.kind)).or_default() += n;
        }
        let mut out: Vec<MmioStat> = mmio
            .into_iter()
            .map(|((gpa, kind), count)| MmioStat {
                label: None,
                gpa,
                kind: match kind {
                    0 => "unsatisfied-read",
                    1 => "read",
                    2 => "write",
                    _ => "unknown",
                }
                .into(),
                count,
            })
            .collect();
        out.sort_by(|a, b| b.count.cmp(&a.count).then(a.gpa.cmp(&b.gpa)));
        out
    }

    /// MSR accesses by MSR and direction, with those that faulted, the most
    /// frequent first.
    fn msr_stats(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> Vec<MsrStat> {
        let mut msr: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsMsrKey, u64>("msr_counts") {
            events[Source::KvmMsr as usize] += n;
            let e = msr.entry((k.msr, k.write)).or_default();
            e.0 += n;
            if k.exception != 0 {
                e.1 += n;
            }
        }
        let mut out: Vec<MsrStat> = msr
            .into_iter()
            .map(|((msr, write), (count, faults))| MsrStat {
                msr,
                direction: if write != 0 { "write" } else { "read" }.into(),
                count,
                faults,
            })
            .collect();
        out.sort_by(|a, b| b.count.cmp(&a.count).then(a.msr.cmp(&b.msr)));
        out
    }

    /// CPUID exits by leaf and subleaf.
    fn cpuid_stats(&self, events: &mut [u64; bpf::SOURCE_COUNT]) -> Vec<CpuidStat> {
        let mut cpuid: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for (k, n) in self.entries::<bpf::BsCpuidKey, u64>("cpuid_counts") {
            events[Source::KvmCpuid as usize] += n;
            *cpuid.entry((k.function, k.index)).or_default() += n;
        }
        cpuid
            .into_iter()
            .map(|((function, index), count)| CpuidStat {
                function,
                index,
                count,
            })
            .collect()
    }
}
