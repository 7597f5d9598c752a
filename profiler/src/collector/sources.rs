//! The profile's `sources`: each program's status and what it delivered,
//! the ring buffer, KVM's own statistics and the VMM's marks.

use super::log::MAX_MARKS;
use super::object::BpfObject;
use super::plan::ProgramState;
use super::sched;
use super::state::State;
use crate::bpf::{self, CollectorKind, Source};
use crate::profile::{DataSource, ExitProfile, PageFaultProfile};

impl State {
    pub(super) fn sources(
        &self,
        counts: &[u64; bpf::SOURCE_COUNT],
        exits: &ExitProfile,
        faults: &PageFaultProfile,
    ) -> Vec<DataSource> {
        let mut out: Vec<DataSource> = self
            .setup
            .programs
            .iter()
            .map(|p| self.program_source(p, counts[p.spec.source as usize], exits, faults))
            .collect();
        out.push(self.ring_source());
        let (status, detail) = self.sampler.kvm_stats.describe();
        out.push(DataSource {
            name: format!("kvm_stats:{}", self.sampler.kvm_stats.method()),
            status: status.into(),
            detail,
            events: self.sampler.kvm_stats.total().unwrap_or(0),
            collector: "exits".into(),
            ..Default::default()
        });
        out.extend(self.setup.extra_sources.iter().cloned());
        if self.log.vmm_marks > 0 {
            out.push(DataSource {
                name: "vmm".into(),
                status: "attached".into(),
                detail: "marks added in-process by bootscope's VMM".into(),
                events: self.log.vmm_marks,
                collector: "phases".into(),
                ..Default::default()
            });
        }
        out
    }

    /// One program's source: its status, and a detail that says why an
    /// attached program counted nothing or which fallback it is.
    fn program_source(
        &self,
        p: &ProgramState,
        events: u64,
        exits: &ExitProfile,
        faults: &PageFaultProfile,
    ) -> DataSource {
        let mut status = p.status.as_str().to_string();
        let mut detail = if p.detail.is_empty() {
            format!("feeds {}", p.spec.feeds)
        } else {
            p.detail.clone()
        };
        if p.is_attached() {
            match p.spec.source {
                Source::KvmExit if events == 0 => {
                    detail =
                        format!(
                        "attached, but fired 0 times for the target{}; exit reasons come from {}",
                        if self.setup.host.kvm == "pvm" {
                            " (PVM host: kvm_exit is only raised by the VMX/SVM code)"
                        } else {
                            ""
                        },
                        if exits.source.is_empty() { "no source" } else { &exits.source }
                    );
                }
                Source::KvmUserspaceExit if exits.source == "tracepoint:kvm:kvm_userspace_exit" => {
                    status = "fallback".into();
                    detail = "exits.by_reason counts exits to the VMM by KVM_EXIT_* reason: kvm:kvm_exit did not fire".into();
                }
                Source::SchedWaitSwitch => detail = sched::switch_detail(&self.bpf, &detail),
                Source::KvmmmuSpteRequested
                    if faults.guest_source == "tracepoint:kvmmmu:kvm_mmu_spte_requested" =>
                {
                    status = "fallback".into();
                    detail = "page_faults.guest_total counts KVM MMU mappings: kvm:kvm_page_fault did not fire".into();
                }
                _ => {}
            }
        }
        let stats = self.program_run_stats(p);
        let (runs, run_ns) = match stats {
            Some(s) => (Some(s.runs), Some(s.run_ns)),
            None => (None, None),
        };
        DataSource {
            name: p.spec.source_name(),
            status,
            detail,
            events,
            collector: collector_name(p.spec.collector).into(),
            runs,
            run_ns,
            verified_insns: stats.and_then(|s| s.verified_insns),
        }
    }

    /// The ring buffer's source: its size, its records, and the port marks
    /// beyond the cap.
    fn ring_source(&self) -> DataSource {
        DataSource {
            name: "ringbuf:events".into(),
            status: "attached".into(),
            detail: format!(
                "{} KiB ring buffer for marks and thread lifetimes; lost records are in lost_events{}",
                self.setup.ring_bytes / 1024,
                if self.log.marks_dropped > 0 {
                    format!(
                        "; {} port marks beyond the first {MAX_MARKS} not kept",
                        self.log.marks_dropped
                    )
                } else {
                    String::new()
                }
            ),
            events: self.log.ring_events,
            collector: "all".into(),
            ..Default::default()
        }
    }

    /// Runs and run time of an attached program, when the kernel keeps
    /// them (`--bpf-stats`).
    pub(super) fn program_run_stats(&self, p: &ProgramState) -> Option<RunStats> {
        self.setup.bpf_stats.as_ref()?;
        if !p.is_attached() {
            return None;
        }
        if let Some(&runs) = self.setup.detached_runs.get(p.spec.program) {
            return Some(runs);
        }
        RunStats::of(&self.bpf, p.spec.program)
    }
}

/// What the kernel keeps of a program's runs (`--bpf-stats`), and what
/// its verifier processed.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunStats {
    pub(super) runs: u64,
    pub(super) run_ns: u64,
    pub(super) verified_insns: Option<u32>,
}

impl RunStats {
    /// The loaded program's, read from the kernel.
    pub(super) fn of(bpf: &BpfObject, program: &str) -> Option<Self> {
        let info = bpf.program(program)?.info().ok()?;
        Some(Self {
            runs: info.run_count(),
            run_ns: u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
            verified_insns: info.verified_instruction_count(),
        })
    }
}

/// The collector (`--collect` name) a program feeds.
fn collector_name(kind: CollectorKind) -> &'static str {
    match kind {
        CollectorKind::Exits | CollectorKind::ExitLatency => "exits",
        CollectorKind::Faults => "faults",
        CollectorKind::Threads => "threads",
        CollectorKind::Numa => "numa",
        CollectorKind::Phases => "phases",
        CollectorKind::Sched => "sched",
        CollectorKind::Tail | CollectorKind::TailTotal => "tail",
    }
}
