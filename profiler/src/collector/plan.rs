//! Program planning: which of [`PROGRAMS`] this host and configuration
//! need, and the field layouts they are loaded with, read from tracefs
//! before anything is loaded.

use std::collections::{BTreeMap, HashMap};

use bootscope_model::host::{kvm_modules, HostRoot};
use serde::Serialize;

use super::config::CollectorSet;
use crate::bpf::{BsField, CollectorKind, ProgramSpec, Source, PROGRAMS};
use crate::reasons::ReasonTables;
use crate::tracefs::{EventFormat, Tracefs};

/// What became of a program, as `sources[].status` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ProgramStatus {
    /// Loaded and attached (or, while planning, still to be).
    Attached,
    /// The kernel lacks its tracepoint.
    Missing,
    /// Its fields or its load or attach failed.
    Failed,
    /// Not asked for, or not needed on this host.
    Disabled,
}

impl ProgramStatus {
    /// The name in `sources[].status`.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ProgramStatus::Attached => "attached",
            ProgramStatus::Missing => "missing",
            ProgramStatus::Failed => "failed",
            ProgramStatus::Disabled => "disabled",
        }
    }
}

impl std::fmt::Display for ProgramStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of one program.
#[derive(Clone, Debug)]
pub(super) struct ProgramState {
    pub(super) spec: ProgramSpec,
    pub(super) status: ProgramStatus,
    pub(super) detail: String,
}

impl ProgramState {
    pub(super) fn is_attached(&self) -> bool {
        self.status == ProgramStatus::Attached
    }
}

/// True when a program of `source` is attached.
pub(super) fn attached(programs: &[ProgramState], source: Source) -> bool {
    programs
        .iter()
        .any(|p| p.spec.source == source && p.is_attached())
}

/// The programs planned, before loading.
pub(super) struct Plan {
    pub(super) programs: Vec<ProgramState>,
    /// `EVENT__FIELD` globals, for the fields programs read with a helper.
    pub(super) globals: BTreeMap<String, BsField>,
    /// Fields patched into the programs, by patch slot.
    pub(super) direct: Vec<Option<BsField>>,
    pub(super) reasons: ReasonTables,
}

/// Plans every program of [`PROGRAMS`] from the collectors asked for, the
/// KVM backend and this kernel's format files.
pub(super) fn plan_programs(
    collectors: &CollectorSet,
    tracefs: &Tracefs,
    backend: KvmBackend,
) -> Plan {
    let mut formats: HashMap<(&str, &str), Option<EventFormat>> = HashMap::new();
    let mut plan = Plan {
        programs: Vec::new(),
        globals: BTreeMap::new(),
        direct: vec![None; crate::patch::PATCH_SLOTS.len()],
        reasons: ReasonTables::from_formats(None, None),
    };
    for spec in PROGRAMS {
        if let Some(why) = not_needed(spec, backend, &plan.programs) {
            plan.programs.push(ProgramState {
                spec: *spec,
                status: ProgramStatus::Disabled,
                detail: why,
            });
            continue;
        }
        let fmt = formats
            .entry((spec.system, spec.event))
            .or_insert_with(|| tracefs.format(spec.system, spec.event).ok().flatten())
            .clone();
        let st = if !collectors.has(spec.collector) {
            disabled(spec, collectors)
        } else if let Some(fmt) = fmt {
            resolve_fields(spec, &fmt, &mut plan)
        } else {
            ProgramState {
                spec: *spec,
                status: ProgramStatus::Missing,
                detail: format!(
                    "this kernel has no tracepoint {}:{} ({} lacks it)",
                    spec.system,
                    spec.event,
                    tracefs.root().join("events").display()
                ),
            }
        };
        plan.programs.push(st);
    }
    plan.reasons = ReasonTables::from_formats(
        formats.get(&("kvm", "kvm_exit")).and_then(|f| f.as_ref()),
        formats
            .get(&("kvm", "kvm_userspace_exit"))
            .and_then(|f| f.as_ref()),
    );
    plan
}

/// A program whose collector is off.
fn disabled(spec: &ProgramSpec, collectors: &CollectorSet) -> ProgramState {
    let detail = if spec.collector == CollectorKind::ExitLatency && collectors.exits {
        "exit latency not asked for (--collect exit-counts): each exit is counted \
                     by the next exit of its vCPU, or when the profile is read"
            .into()
    } else if spec.collector == CollectorKind::TailTotal && collectors.tail {
        "the tail's count over the VM's life not asked for (--collect tail-total): \
         fault_tail.guest_faults_total is left out"
            .into()
    } else {
        "collector not enabled".into()
    };
    ProgramState {
        spec: *spec,
        status: ProgramStatus::Disabled,
        detail,
    }
}

/// Finds the program's fields in its format: each one either patched into
/// the program or set as a global.
fn resolve_fields(spec: &ProgramSpec, fmt: &EventFormat, plan: &mut Plan) -> ProgramState {
    let failed = |detail| ProgramState {
        spec: *spec,
        status: ProgramStatus::Failed,
        detail,
    };
    let missing: Vec<&str> = spec
        .fields
        .iter()
        .copied()
        .filter(|f| fmt.field(f).is_none())
        .collect();
    if !missing.is_empty() {
        return failed(format!(
            "its format file lacks field(s) {} on this kernel",
            missing.join(", ")
        ));
    }
    let mut unreadable = None;
    for f in spec.fields.iter().chain(spec.optional_fields) {
        let Some(d) = fmt.field(f) else { continue };
        let field = BsField {
            off: d.offset,
            size: d.size,
        };
        match crate::patch::slot_of(spec.event, f) {
            // Loaded straight from the record: patched in.
            Some(slot) => match crate::patch::check_field(spec.event, f, field) {
                Ok(()) => plan.direct[slot] = Some(field),
                Err(why) => unreadable = Some(why),
            },
            None => {
                plan.globals.insert(format!("{}__{}", spec.event, f), field);
            }
        }
    }
    match unreadable {
        Some(why) => failed(why),
        None => ProgramState {
            spec: *spec,
            status: ProgramStatus::Attached,
            detail: String::new(),
        },
    }
}

/// The KVM backend, when exactly one is loaded: which tracepoints can fire
/// follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KvmBackend {
    /// `kvm_pvm`: kvm_exit and kvm_entry live in the VMX/SVM code.
    Pvm,
    /// `kvm_intel` or `kvm_amd` ("vmx", "svm"): kvm_exit and
    /// kvm_page_fault fire, so their fallbacks are not needed.
    Hardware(&'static str),
    /// None or several: everything is attached.
    Unknown,
}

impl KvmBackend {
    pub(super) fn detect() -> Self {
        let m = kvm_modules(&HostRoot::default());
        Self::from_modules(m.pvm, m.intel, m.amd)
    }

    fn from_modules(pvm: bool, intel: bool, amd: bool) -> Self {
        match (pvm, intel, amd) {
            (true, false, false) => KvmBackend::Pvm,
            (false, true, false) => KvmBackend::Hardware("vmx"),
            (false, false, true) => KvmBackend::Hardware("svm"),
            _ => KvmBackend::Unknown,
        }
    }
}

/// Why a program is not attached on this host although its collector is
/// on: it cannot fire here, or it is a fallback whose primary source does.
/// Each program attached costs start-up (verification, attach) and a run
/// on every event.
pub(super) fn not_needed(
    spec: &ProgramSpec,
    backend: KvmBackend,
    before: &[ProgramState],
) -> Option<String> {
    let attached = |s: Source| attached(before, s);
    match (spec.source, backend) {
        (Source::SchedProcessFork, _) if attached(Source::TaskNewtask) => {
            Some("not needed: task:task_newtask follows new processes on this kernel".into())
        }
        (Source::KvmExit | Source::KvmEntry, KvmBackend::Pvm) => Some(
            "not attached: this is a PVM host (kvm_pvm), where only KVM's VMX/SVM code, \
             absent here, raises it"
                .into(),
        ),
        (Source::KvmUserspaceExit, KvmBackend::Hardware(isa)) => Some(format!(
            "not needed: kvm:kvm_exit gives the exit reasons on this {isa} host \
             (this is the PVM fallback)"
        )),
        (Source::TailWalk, KvmBackend::Hardware(isa)) => Some(format!(
            "not needed: kvm:kvm_page_fault begins a guest fault on this {isa} host"
        )),
        (Source::TailNpf, KvmBackend::Pvm) => Some(
            "not attached: this is a PVM host (kvm_pvm), where a guest fault begins with \
             kvmmmu:kvm_mmu_pagetable_walk"
                .into(),
        ),
        (Source::KvmmmuSpteRequested, KvmBackend::Hardware(isa)) => Some(format!(
            "not needed: kvm:kvm_page_fault counts guest faults on this {isa} host \
             (this is its fallback)"
        )),
        _ => None,
    }
}

/// The maps only one program (or pair) writes: made one entry big when
/// none of their programs is attached, instead of preallocated in full.
const PROGRAM_MAPS: &[(&[&str], &str)] = &[
    (&["bs_kvm_exit", "bs_kvm_entry"], "exit_stats"),
    (&["bs_kvm_exit"], "vcpu_tids"),
    (&["bs_kvm_exit", "bs_kvm_entry"], "exit_start"),
    (&["bs_kvm_userspace_exit"], "uexit_counts"),
    (&["bs_kvm_pio"], "pio_counts"),
    (&["bs_kvm_mmio"], "mmio_counts"),
    (&["bs_kvm_msr"], "msr_counts"),
    (&["bs_kvm_cpuid"], "cpuid_counts"),
    (&["bs_kvm_emulate_insn"], "emulate_counts"),
    (&["bs_marker_pio"], "marker_counts"),
    (&["bs_marker_pio"], "marker_last"),
    (&["bs_mm_page_alloc"], "numa_pages"),
    (&["bs_sched_switch"], "run_time"),
    (&["bs_sched_wait_switch"], "sched_tasks"),
    (&["bs_sched_wait_switch"], "sched_waits"),
    (&["bs_tail_spte"], "tail_threads"),
    (&["bs_tail_spte"], "tail_curve"),
    (&["bs_tail_spte"], "tail_regions"),
    (&["bs_tail_spte"], "tail_sites"),
    (&["bs_tail_spte"], "tail_latency"),
    (&["bs_tail_spte"], "tail_pages"),
];

/// The maps of [`PROGRAM_MAPS`] that no attached program writes.
pub(super) fn unused_maps(programs: &[ProgramState]) -> Vec<&'static str> {
    let attached = |name: &str| {
        programs
            .iter()
            .any(|p| p.spec.program == name && p.is_attached())
    };
    PROGRAM_MAPS
        .iter()
        .filter(|(progs, _)| !progs.iter().any(|p| attached(p)))
        .map(|(_, map)| *map)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf;

    #[test]
    fn programs_that_cannot_fire_or_are_fallbacks_are_not_attached() {
        assert_eq!(
            KvmBackend::from_modules(true, false, false),
            KvmBackend::Pvm
        );
        assert_eq!(
            KvmBackend::from_modules(false, false, true),
            KvmBackend::Hardware("svm")
        );
        assert_eq!(
            KvmBackend::from_modules(true, true, false),
            KvmBackend::Unknown
        );
        assert_eq!(
            KvmBackend::from_modules(false, false, false),
            KvmBackend::Unknown
        );
        let spec = |src: Source| *PROGRAMS.iter().find(|p| p.source == src).unwrap();
        let state = |src: Source, status| ProgramState {
            spec: spec(src),
            status,
            detail: String::new(),
        };
        let skipped = |src, backend, before: &[ProgramState]| {
            not_needed(&spec(src), backend, before).is_some()
        };
        let svm = KvmBackend::Hardware("svm");
        let unknown = KvmBackend::Unknown;
        assert!(skipped(Source::KvmExit, KvmBackend::Pvm, &[]));
        assert!(skipped(Source::KvmEntry, KvmBackend::Pvm, &[]));
        assert!(!skipped(Source::KvmUserspaceExit, KvmBackend::Pvm, &[]));
        assert!(skipped(Source::KvmUserspaceExit, svm, &[]));
        assert!(skipped(Source::KvmmmuSpteRequested, svm, &[]));
        assert!(!skipped(Source::KvmExit, svm, &[]));
        assert!(!skipped(Source::KvmPageFault, KvmBackend::Pvm, &[]));
        // Unknown backend: everything.
        for p in PROGRAMS {
            if p.source != Source::SchedProcessFork {
                assert!(not_needed(p, unknown, &[]).is_none(), "{p:?}");
            }
        }
        // The fork fallback only where task_newtask is attached.
        let newtask_ok = [state(Source::TaskNewtask, ProgramStatus::Attached)];
        let newtask_missing = [state(Source::TaskNewtask, ProgramStatus::Missing)];
        assert!(skipped(Source::SchedProcessFork, unknown, &newtask_ok));
        assert!(!skipped(
            Source::SchedProcessFork,
            unknown,
            &newtask_missing
        ));
        // Their maps stay small; shared ones only when every writer is off.
        let all: Vec<ProgramState> = PROGRAMS
            .iter()
            .map(|p| ProgramState {
                spec: *p,
                status: match p.source {
                    Source::KvmExit => ProgramStatus::Disabled,
                    _ => ProgramStatus::Attached,
                },
                detail: String::new(),
            })
            .collect();
        assert_eq!(unused_maps(&all), ["vcpu_tids"]);
        let none: Vec<ProgramState> = all
            .iter()
            .cloned()
            .map(|mut p| {
                p.status = ProgramStatus::Disabled;
                p
            })
            .collect();
        assert_eq!(unused_maps(&none).len(), PROGRAM_MAPS.len());
        // Every map named is a symbol of the object.
        let symbol = |name: &str| {
            let n = name.len();
            bpf::OBJECT
                .windows(n + 2)
                .any(|w| w[0] == 0 && &w[1..=n] == name.as_bytes() && w[n + 1] == 0)
        };
        for (progs, map) in PROGRAM_MAPS {
            assert!(symbol(map), "{map}");
            for prog in *progs {
                assert!(PROGRAMS.iter().any(|p| p.program == *prog), "{prog}");
            }
        }
    }
}
