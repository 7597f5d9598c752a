//! The timeline document a build ends with: after a whole run, or after the
//! set-up stages `--stop-after` asked for.

use std::collections::BTreeMap;

use crate::host::KvmFlavour;
use crate::kvm_stats::{self, StatsFd};
use crate::loader::{EntryMode, KernelFormat, LoadedKernel};
use crate::memory::PreallocReport;
use bootscope_model::timeline::{
    PagePlacement, PreallocContext, PreallocRegion, PreallocThread, TimelineMemory,
};

use crate::timeline::{
    derive_phases, variant_name, Recorder, StopReason, Timeline, TimelineGuest, TimelineOutcome,
    TIMELINE_SCHEMA_NAME, TIMELINE_SCHEMA_VERSION,
};

use super::images::BootImages;
use super::{StopAfter, VmConfig};

/// KVM's statistics of all vCPUs, summed.
pub(super) fn sum_stats(stats: &[StatsFd]) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    for s in stats {
        if let Ok(v) = s.read() {
            kvm_stats::accumulate(&mut total, &v);
        }
    }
    total
}

/// The timeline's name for the kernel's format and entry.
pub(super) fn format_name(kernel: &LoadedKernel) -> &'static str {
    match kernel.format {
        KernelFormat::BzImage => "bzimage",
        KernelFormat::Elf if kernel.mode == EntryMode::Pvh => "elf-pvh",
        KernelFormat::Elf => "elf",
    }
}

impl StopAfter {
    /// The outcome's detail of a run stopped here.
    fn detail(self) -> &'static str {
        match self {
            StopAfter::Memory => "stopped after memory set-up (--stop-after memory)",
            StopAfter::Load => "stopped after loading the kernel (--stop-after load)",
        }
    }
}

/// A document with the marks recorded so far and the phases between them.
fn document(
    cfg: &VmConfig,
    recorder: &Recorder,
    flavour: KvmFlavour,
    guest: TimelineGuest,
    outcome: TimelineOutcome,
    kvm_stats: BTreeMap<String, u64>,
    prealloc: Option<&PreallocReport>,
) -> Timeline {
    let marks = recorder.snapshot();
    Timeline {
        schema: TIMELINE_SCHEMA_NAME.into(),
        version: u64::from(TIMELINE_SCHEMA_VERSION),
        clock: "CLOCK_MONOTONIC nanoseconds since VMM start".into(),
        vmm: format!("bootscope {}", env!("CARGO_PKG_VERSION")),
        host_kvm: format!("{flavour:?}").to_lowercase(),
        guest: Some(guest),
        outcome: Some(outcome),
        phases: derive_phases(&marks, cfg.host_tool.as_ref()),
        marks,
        kvm_stats: Some(kvm_stats),
        memory: prealloc.map(memory_section),
        initcalls: None,
        units: None,
        devices: Vec::new(),
        host_memory: recorder.memory_sample(),
        restore_memory: None,
    }
}

/// The timeline's `memory` section: the preallocation report.
fn memory_section(p: &PreallocReport) -> TimelineMemory {
    TimelineMemory {
        elapsed_ns: Some(p.elapsed_ns),
        regions: p
            .regions
            .iter()
            .map(|r| PreallocRegion {
                bytes: r.bytes,
                context: PreallocContext {
                    allowed_cpus: r.context.allowed_cpus.to_string(),
                    name: r.context.name.clone(),
                    tid: r.context.tid,
                },
                elapsed_ns: r.elapsed_ns,
                guest_node: r.guest_node,
                method: variant_name(&r.method),
                page_size: r.page_size,
                placement: PagePlacement {
                    absent: r.placement.absent,
                    per_node: (r.placement.per_node.iter())
                        .map(|(node, n)| (node.to_string(), *n))
                        .collect(),
                    sampled: r.placement.sampled,
                },
                threads: r
                    .threads
                    .iter()
                    .map(|t| PreallocThread {
                        allowed_cpus: t.allowed_cpus.to_string(),
                        bytes: t.bytes,
                        elapsed_ns: t.elapsed_ns,
                        last_cpu: t.last_cpu,
                        method: variant_name(&t.method),
                        name: t.name.clone(),
                        node: t.node,
                        pages_touched: t.pages_touched,
                        started_ns: t.started_ns,
                        tid: t.tid,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The timeline of a run that stopped after the set-up stage `stage`
/// (`kernel`: the loaded kernel, when that stage loaded one).
pub(super) fn setup_only_timeline(
    cfg: &VmConfig,
    recorder: &Recorder,
    flavour: KvmFlavour,
    stage: StopAfter,
    kernel: Option<&LoadedKernel>,
    prealloc: Option<&PreallocReport>,
) -> Timeline {
    recorder.sample_memory(match stage {
        StopAfter::Memory => "memory set-up",
        StopAfter::Load => "load",
    });
    let guest = TimelineGuest {
        kernel: match kernel {
            Some(_) => cfg.kernel.display().to_string(),
            None => String::new(),
        },
        kernel_format: kernel.map_or("none", format_name).into(),
        initrd: cfg.initrd.as_ref().map(|p| p.display().to_string()),
        initrd_mapped_from_file: Some(false),
        kernel_mapped_bytes: 0,
        kernel_boot: kernel.and_then(|k| k.boot.clone()),
        cmdline: cfg.cmdline.clone(),
        memory_bytes: Some(cfg.memory_bytes),
        vcpus: Some(u64::from(cfg.vcpus)),
        regions: Vec::new(),
    };
    let outcome = TimelineOutcome {
        reason: StopReason::StoppedAfterSetup.name(),
        clean: Some(true),
        detail: stage.detail().into(),
    };
    document(
        cfg,
        recorder,
        flavour,
        guest,
        outcome,
        BTreeMap::new(),
        prealloc,
    )
}

/// The timeline of a run that booted the guest and ended with `reason`.
pub(super) fn run_timeline(
    cfg: &VmConfig,
    recorder: &Recorder,
    flavour: KvmFlavour,
    images: &BootImages,
    (reason, detail): (StopReason, String),
    kvm_stats: BTreeMap<String, u64>,
    prealloc: Option<&PreallocReport>,
) -> Timeline {
    let guest = TimelineGuest {
        kernel: cfg.kernel.display().to_string(),
        kernel_format: format_name(&images.kernel).into(),
        initrd: cfg.initrd.as_ref().map(|p| p.display().to_string()),
        initrd_mapped_from_file: Some(images.initrd.is_some_and(|i| i.mapped_from_file)),
        kernel_mapped_bytes: images.kernel.mapped_from_file,
        kernel_boot: images.kernel.boot.clone(),
        cmdline: cfg.cmdline.clone(),
        memory_bytes: Some(cfg.memory_bytes),
        vcpus: Some(u64::from(cfg.vcpus)),
        regions: crate::layout::guest_regions(&crate::layout::Placement {
            kernel: (images.kernel.start, images.kernel.end),
            initrd: images.initrd.map(|i| (i.addr, i.size)),
            cmdline_bytes: cfg.cmdline.len() as u64 + 1,
            acpi: cfg.acpi,
            memory_bytes: cfg.memory_bytes,
        }),
    };
    let outcome = TimelineOutcome {
        clean: Some(reason.is_clean()),
        reason: reason.name(),
        detail,
    };
    document(cfg, recorder, flavour, guest, outcome, kvm_stats, prealloc)
}
