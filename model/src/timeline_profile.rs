//! A VMM boot timeline (`bootscope run --timeline`, docs/timeline-schema.md)
//! as a [`Profile`]: what every reader of both documents (export, the TUI)
//! renders from. The document is read with [`crate::timeline`].

use serde_json::Value;

use crate::profile::{DataSource, Mark, PhaseSpan, Profile, UNIT_PHASE_PREFIX};
use crate::timeline::{Timeline, TimelineError};

/// Converts a boot timeline document to a profile of bootscope's own VMM
/// (`target.kind` `self`, data source and `exits.source` `vmm`): its marks
/// and phases, and KVM's own exit count (`kvm_stats.exits`) as
/// `exits.kvm_stats_exits`. A timeline
/// has no per-reason exits, threads, faults or NUMA data, so those stay
/// empty and `exits.total` stays 0.
///
/// The schema name and version are checked; marks and phases must be
/// complete (name, source, time; name, start, end with end >= start).
pub fn profile_from_timeline(doc: &Value) -> Result<Profile, TimelineError> {
    let t = Timeline::parse_complete(doc)?;
    let mut p = Profile::new();
    p.target.kind = "self".into();
    // `vmm` reads "bootscope 0.1.0": the process is bootscope itself.
    p.target.name = t
        .vmm
        .split_whitespace()
        .next()
        .unwrap_or("bootscope")
        .to_string();
    p.host.kvm = t.host_kvm.clone();
    p.marks = t
        .marks
        .iter()
        .map(|m| Mark {
            name: m.name.clone(),
            source: m.source,
            t_ns: m.t_ns,
            value: m.value,
            tgid: None,
            guest_rip: None,
        })
        .collect();
    p.phases = t
        .phases
        .iter()
        .map(|ph| PhaseSpan {
            name: ph.name.clone(),
            start_ns: ph.start_ns,
            end_ns: ph.end_ns,
        })
        .collect();
    if let Some(root) = doc.as_object() {
        initcall_phases(root, &mut p)?;
    }
    unit_phases(&t, &mut p);
    let kvm_exits = t.kvm_stats.as_ref().and_then(|s| s.get("exits").copied());
    // The only exit figure is KVM's own count, which the VMM read.
    p.exits.source = "vmm".into();
    p.exits.isa = "unknown".into();
    p.exits.kvm_stats_exits = kvm_exits;

    if let Some(clean) = t.outcome.as_ref().and_then(|o| o.clean) {
        // `bootscope run` exits 0 exactly when the guest stopped cleanly.
        p.target.exit_code = Some(if clean { 0 } else { 1 });
    }
    p.sources.push(DataSource {
        name: "vmm".into(),
        status: "attached".into(),
        detail: vmm_detail(&t),
        events: p.marks.len() as u64,
        ..Default::default()
    });
    p.sources.push(kvm_stats_source(kvm_exits));

    p.duration_ns = p
        .marks
        .iter()
        .map(|m| m.t_ns)
        .chain(p.phases.iter().map(|ph| ph.end_ns))
        .max()
        .unwrap_or(0);
    Ok(p)
}

/// The `vmm` source's detail: the guest's kernel, vCPUs and memory, and
/// the run's outcome.
fn vmm_detail(t: &Timeline) -> String {
    let mut detail = String::from("boot timeline");
    if let Some(g) = &t.guest {
        if !g.kernel.is_empty() {
            detail.push_str(&format!(" of {}", g.kernel));
            if !g.kernel_format.is_empty() {
                detail.push_str(&format!(" ({})", g.kernel_format));
            }
        }
        if let Some(n) = g.vcpus {
            detail.push_str(&format!(", {n} vCPU"));
        }
        if let Some(b) = g.memory_bytes {
            detail.push_str(&format!(", {} MiB", b >> 20));
        }
    }
    if let Some(o) = t.outcome.as_ref().filter(|o| !o.reason.is_empty()) {
        detail.push_str(&format!("; outcome {}", o.reason));
    }
    detail
}

/// KVM's own exit count as a source: attached with the count the VMM read,
/// or missing.
fn kvm_stats_source(kvm_exits: Option<u64>) -> DataSource {
    match kvm_exits {
        Some(n) => DataSource {
            name: "kvm_stats".into(),
            status: "attached".into(),
            detail: "KVM_GET_STATS_FD, summed over vCPUs at guest shutdown".into(),
            events: n,
            ..Default::default()
        },
        None => DataSource {
            name: "kvm_stats".into(),
            status: "missing".into(),
            detail: "the timeline has no KVM exit count (kernel without binary statistics)".into(),
            events: 0,
            ..Default::default()
        },
    }
}

/// A level of the timeline's `initcalls` object.
#[derive(serde::Deserialize)]
struct LevelSpan {
    level: String,
    start_ns: u64,
    duration_ns: u64,
}

/// An initcall of the timeline's `initcalls` object.
#[derive(serde::Deserialize)]
struct CallSpan {
    name: String,
    start_ns: u64,
    duration_ns: u64,
}

/// Item `i` of the array `list` of the `initcalls` object, typed; an error
/// names the item.
fn initcall_item<T: serde::de::DeserializeOwned>(
    ic: &Value,
    list: &str,
) -> Result<Vec<T>, TimelineError> {
    let Some(items) = ic.get(list).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let items = items.as_array().ok_or_else(|| TimelineError::Field {
        field: format!("initcalls.{list}"),
        problem: "is not an array".into(),
    })?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            T::deserialize(item).map_err(|e| TimelineError::Field {
                field: format!("initcalls.{list}[{i}]"),
                problem: format!("is malformed: {e}"),
            })
        })
        .collect()
}

/// The initcall levels (`initcalls: LEVEL`) and initcalls (`initcall:
/// NAME`) of a `run --initcalls` timeline, as phases nested in `kernel`.
fn initcall_phases(
    root: &serde_json::Map<String, Value>,
    p: &mut Profile,
) -> Result<(), TimelineError> {
    let Some(ic) = root.get("initcalls").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let levels: Vec<LevelSpan> = initcall_item(ic, "levels")?;
    let calls: Vec<CallSpan> = initcall_item(ic, "initcalls")?;
    let levels = levels
        .into_iter()
        .map(|l| (format!("initcalls: {}", l.level), l.start_ns, l.duration_ns));
    let calls = calls
        .into_iter()
        .map(|c| (format!("initcall: {}", c.name), c.start_ns, c.duration_ns));
    for (name, start_ns, duration_ns) in levels.chain(calls) {
        p.phases.push(PhaseSpan {
            name,
            start_ns,
            end_ns: start_ns.saturating_add(duration_ns),
        });
    }
    Ok(())
}

/// The name of the initramfs stage as a phase.
pub const INITRAMFS_PHASE: &str = "initramfs";

/// The units of a systemd guest (`unit: NAME`, from leaving inactive to
/// active), as phases nested in `userspace`, and its initramfs stage as
/// the phase [`INITRAMFS_PHASE`].
fn unit_phases(t: &Timeline, p: &mut Profile) {
    let Some(units) = &t.units else { return };
    if let Some(stage) = &units.initramfs {
        // A boot phase of its own, before `userspace` that holds it.
        let at = p
            .phases
            .iter()
            .position(|ph| ph.name == "userspace")
            .unwrap_or(p.phases.len());
        p.phases.insert(
            at,
            PhaseSpan {
                name: INITRAMFS_PHASE.into(),
                start_ns: stage.start_ns,
                end_ns: stage.end_ns,
            },
        );
    }
    for u in &units.units {
        p.phases.push(PhaseSpan {
            name: format!("{UNIT_PHASE_PREFIX}{}", u.name),
            start_ns: u.start_ns,
            end_ns: u.start_ns.saturating_add(u.duration_ns),
        });
    }
}
