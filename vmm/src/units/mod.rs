//! A systemd guest's userspace on the timeline (docs/guest.md): the record
//! its workload leaves on the disk image is read after the guest stops
//! (the VMM owns the disk, so nothing is read while it runs and nothing is
//! printed on the console), the guest's `CLOCK_MONOTONIC` is aligned with
//! the VMM's through the workload's port 0x80 write, and the units, the
//! critical chain to the workload and systemd's own start-up figures go
//! into the timeline's `units` object.

pub mod chain;
pub mod image;
pub mod journal;
pub mod order;
pub mod record;
pub mod summary;
pub mod unit_files;

use std::path::{Path, PathBuf};

use bootscope_model::mark::MarkSource;
use bootscope_model::timeline_initramfs::{self, InitramfsStage};
use bootscope_model::units::{ChainLink, Startup, Unit, UnitsClock, UnitsDoc};

use crate::timeline::{derive_phases, vmm_marks, HostTool, Timeline, TimelineMark};
use record::Record;

/// Where the workload leaves its record in the image.
pub const RECORD_PATH: &str = "/var/lib/bootscope/units.txt";
/// The workload unit, the end of the critical chain.
pub const WORKLOAD_UNIT: &str = "bootscope-workload.service";
pub use crate::timeline::guest_clock_marks::{SYSTEMD_FINISHED, SYSTEMD_STARTED};

/// The record file in a disk image, read once through the bounded reader
/// (`image`): `Ok(None)` when the image holds no ext4 file system or no
/// record; an error when the file system is implausible, or the record is
/// larger than [`image::MAX_RECORD_BYTES`], not UTF-8, or unreadable.
pub fn read_record_file(image: &Path) -> Result<Option<String>, String> {
    let bytes = image::read_file_at(image, RECORD_PATH)
        .map_err(|e| format!("cannot read {RECORD_PATH} from {}: {e}", image.display()))?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|_| {
                format!(
                    "cannot read {RECORD_PATH} from {}: it is not UTF-8 text",
                    image.display()
                )
            })
        })
        .transpose()
}

/// The record on a disk image before the boot, to tell after it whether
/// this boot wrote it.
#[derive(Clone, Debug)]
pub struct RecordProbe {
    image: PathBuf,
    before: Option<String>,
    /// The boot the image's journal ended with before this boot.
    journal_before: Option<[u8; 16]>,
    /// Where the critical chain ends, when the user named the unit
    /// (`--workload-unit`).
    workload: Option<String>,
}

/// Unit name suffixes systemd knows.
const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".target",
    ".socket",
    ".mount",
    ".automount",
    ".swap",
    ".path",
    ".timer",
    ".device",
    ".slice",
    ".scope",
];

/// Checks a unit name given on the command line (`--workload-unit`): a
/// systemd unit name (at most 255 bytes, a unit type's suffix, no `/` or
/// white space), or why not.
pub fn check_unit_name(name: &str) -> Result<(), String> {
    let suffixed = UNIT_SUFFIXES
        .iter()
        .any(|s| name.len() > s.len() && name.ends_with(s));
    if name.len() > 255
        || !suffixed
        || name.contains(['/', '\\'])
        || name.contains(char::is_whitespace)
    {
        return Err(format!(
            "'{name}' is not a systemd unit name: give the unit's full name with its type, such as myapp.service or multi-user.target (systemctl list-units --all in the guest lists them)"
        ));
    }
    Ok(())
}

/// The unit the critical chain ends at: `named` when this boot started
/// it, else `automatic()`; with a note for the units' source when `named`
/// did not start.
fn chain_end(
    record: &Record,
    named: Option<&str>,
    automatic: impl FnOnce() -> String,
) -> (String, Option<String>) {
    let Some(named) = named else {
        return (automatic(), None);
    };
    if record.unit(named).is_some_and(|u| u.inactive_exit_us > 0) {
        return (named.to_string(), None);
    }
    let fallback = automatic();
    let note = format!(
        "the workload unit {named} (--workload-unit) did not start in this boot, so the critical chain ends at {}",
        if fallback.is_empty() { "no unit" } else { &fallback }
    );
    (fallback, Some(note))
}

impl RecordProbe {
    /// Reads the image's record, if any, before the boot.
    pub fn before_boot(image: &Path) -> RecordProbe {
        // One load of the file system for both: the record and the
        // journal's last boot.
        let (before, journal_before) = image::with_fs_at(image, |fs| {
            let record = image::read_in(fs, RECORD_PATH)
                .ok()
                .flatten()
                .and_then(|b| String::from_utf8(b).ok());
            Ok((record, journal::tail_boot(fs)))
        })
        .ok()
        .flatten()
        .unwrap_or_default();
        RecordProbe {
            image: image.to_path_buf(),
            before,
            journal_before,
            workload: None,
        }
    }

    /// Ends the critical chain at `unit` (`--workload-unit`) rather than
    /// at the unit found by itself (bootscope's workload unit, the unit
    /// that wrote the port 0x80 marker, the default target).
    pub fn with_workload_unit(mut self, unit: Option<String>) -> RecordProbe {
        self.workload = unit;
        self
    }

    /// After the guest stopped: puts the units on the timeline when this
    /// boot wrote a record; says why not when the image held one but this
    /// boot left none or the old one; leaves the timeline alone for an
    /// image that never had one. `tool`: the host tool of the run's
    /// configuration, for the phases derived again.
    pub fn after_boot(self, doc: &mut Timeline, tool: Option<&HostTool>) {
        let source = format!("{RECORD_PATH} in the disk image {}", self.image.display());
        let after = read_record_file(&self.image);
        let units = match (self.before, after) {
            (_, Err(e)) => UnitsDoc {
                source,
                error: Some(e),
                ..Default::default()
            },
            // Any systemd image: the units from its journal.
            (None, Ok(None)) => match journal::units_doc(
                &self.image,
                doc,
                self.journal_before,
                self.workload.as_deref(),
            ) {
                Some(units) => units,
                None => return,
            },
            (Some(_), Ok(None)) => UnitsDoc {
                source,
                error: Some("the guest removed its record and wrote no new one in this boot (its workload did not finish)".into()),
                ..Default::default()
            },
            (Some(old), Ok(Some(new))) if old == new => UnitsDoc {
                source,
                error: Some("the record is the one from before this boot (the guest's workload did not write one)".into()),
                ..Default::default()
            },
            (_, Ok(Some(text))) => {
                // The record is the guest's: whatever it holds, the
                // timeline keeps the boot's own figures and says why the
                // units are missing.
                let workload = self.workload.as_deref();
                std::panic::catch_unwind(|| units_doc(&text, &source, &doc.marks, workload)).unwrap_or_else(
                    |_| UnitsDoc {
                        source: source.clone(),
                        error: Some("the record could not be read (an internal error on its contents)".into()),
                        ..Default::default()
                    },
                )
            }
        };
        apply(doc, units, tool);
    }
}

/// `v` within `i64`.
fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// µs to ns, saturating: the figures are the guest's.
fn us_to_ns(us: u64) -> u64 {
    us.saturating_mul(1000)
}

/// Guest µs to timeline ns through the offset, clamped at 0.
fn to_timeline(us: u64, offset_ns: i64) -> u64 {
    (i128::from(us) * 1000 + i128::from(offset_ns)).clamp(0, i128::from(u64::MAX)) as u64
}

/// The alignment: the VMM's time of the marker write against the guest's
/// clock read right before and after it.
fn align(record: &Record, marker_t_ns: u64) -> UnitsClock {
    let (before, after) = record.marker_guest_ns;
    let mid = before + (after - before) / 2;
    UnitsClock {
        offset_ns: clamp_i64(i128::from(marker_t_ns) - i128::from(mid)),
        error_ns: (after - before).div_ceil(2),
        marker_t_ns,
        marker_guest_ns: [before, after],
    }
}

/// The units activated during the boot, on the timeline, by start time.
fn units_on_timeline(record: &Record, offset_ns: i64) -> Vec<Unit> {
    let mut units: Vec<Unit> = record
        .units
        .iter()
        .filter(|u| u.inactive_exit_us > 0)
        .map(|u| {
            // systemd-analyze blame's figure: to active, else to inactive.
            let end = if u.active_enter_us >= u.inactive_exit_us {
                u.active_enter_us
            } else if u.inactive_enter_us >= u.inactive_exit_us {
                u.inactive_enter_us
            } else {
                u.inactive_exit_us
            };
            Unit {
                name: u.id.clone(),
                start_ns: to_timeline(u.inactive_exit_us, offset_ns),
                active_ns: (u.active_enter_us > 0)
                    .then(|| to_timeline(u.active_enter_us, offset_ns)),
                duration_ns: us_to_ns(end - u.inactive_exit_us),
                state: u.active_state.clone(),
                guest_start_us: u.inactive_exit_us,
                guest_active_us: u.active_enter_us,
            }
        })
        .collect();
    units.sort_by(|a, b| {
        a.start_ns
            .cmp(&b.start_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    units
}

/// systemd's figures beside the timeline's.
fn startup(record: &Record, offset_ns: i64, first_run_ns: Option<u64>) -> Option<Startup> {
    let (line, kernel_us, userspace_us) = record::startup_finished(&record.analyze)?;
    let systemd_start_ns = to_timeline(record.manager_us("UserspaceTimestampMonotonic"), offset_ns);
    let finish_ns = to_timeline(record.manager_us("FinishTimestampMonotonic"), offset_ns);
    let first_run_ns = first_run_ns?;
    let timeline_kernel_ns = systemd_start_ns.saturating_sub(first_run_ns);
    let timeline_userspace_ns = finish_ns.saturating_sub(systemd_start_ns);
    let systemd_total = us_to_ns(kernel_us.saturating_add(userspace_us));
    Some(Startup {
        line,
        kernel_ns: us_to_ns(kernel_us),
        userspace_ns: us_to_ns(userspace_us),
        systemd_start_ns,
        finish_ns,
        timeline_kernel_ns,
        timeline_userspace_ns,
        userspace_ratio: timeline_userspace_ns as f64 / us_to_ns(userspace_us).max(1) as f64,
        total_ratio: timeline_kernel_ns.saturating_add(timeline_userspace_ns) as f64
            / systemd_total.max(1) as f64,
        kernel_before_clock_ns: clamp_i64(i128::from(offset_ns) - i128::from(first_run_ns)),
    })
}

/// The units document from a record and the timeline's marks, its chain
/// ending at `workload` when given and started, else at bootscope's
/// workload unit.
pub fn units_doc(
    text: &str,
    source: &str,
    marks: &[TimelineMark],
    workload: Option<&str>,
) -> UnitsDoc {
    let fail = |error: String| UnitsDoc {
        source: source.to_string(),
        error: Some(error),
        ..Default::default()
    };
    let record = match record::parse(text) {
        Ok(r) => r,
        Err(e) => return fail(format!("the record is unreadable: {e}")),
    };
    let marker = marks.iter().find(|m| {
        m.source == MarkSource::DebugPort && m.value == Some(u64::from(record.marker_value))
    });
    let Some(marker) = marker else {
        return fail(format!(
            "the guest wrote no 0x{:02x} to port 0x80 in this boot: the record is from an earlier boot",
            record.marker_value
        ));
    };
    let clock = align(&record, marker.t_ns);
    let (target, note) = chain_end(&record, workload, || WORKLOAD_UNIT.to_string());
    let source = note.map_or_else(|| source.to_string(), |n| format!("{source}; {n}"));
    doc_of(&record, &source, clock, marks, &target)
}

/// The units document of a record whose guest clock is aligned by
/// `clock`, with its critical chain to `target`.
fn doc_of(
    record: &Record,
    source: &str,
    clock: UnitsClock,
    marks: &[TimelineMark],
    target: &str,
) -> UnitsDoc {
    let first_run = marks
        .iter()
        .find(|m| m.source == MarkSource::Vmm && m.name == vmm_marks::FIRST_KVM_RUN)
        .map(|m| m.t_ns);
    let critical_chain = chain::critical_chain(record, target)
        .into_iter()
        .map(|l| ChainLink {
            active_ns: to_timeline(l.activated_us, clock.offset_ns),
            duration_ns: us_to_ns(l.duration_us()),
            name: l.name,
        })
        .collect();
    UnitsDoc {
        source: source.to_string(),
        systemd_version: record.manager.get("Version").cloned().unwrap_or_default(),
        error: None,
        startup: startup(record, clock.offset_ns, first_run),
        units: units_on_timeline(record, clock.offset_ns),
        chain_target: target.to_string(),
        critical_chain,
        clock: Some(clock),
        initramfs: None,
    }
}

/// Puts the units on the timeline: the `units` object, the marks of
/// systemd's start and of its start-up's end, and the phases derived again
/// (`kernel` then ends where systemd starts, as systemd counts it), with
/// the marks of the run's host tool (`tool`).
pub fn apply(doc: &mut Timeline, units: UnitsDoc, tool: Option<&HostTool>) {
    if let Some(s) = &units.startup {
        for (name, t_ns) in [
            (SYSTEMD_STARTED, s.systemd_start_ns),
            (SYSTEMD_FINISHED, s.finish_ns),
        ] {
            doc.marks.push(TimelineMark {
                name: name.to_string(),
                source: MarkSource::GuestClock,
                t_ns,
                value: None,
                vcpu: None,
            });
        }
        doc.marks.sort_by_key(|m| m.t_ns);
        doc.phases = derive_phases(&doc.marks, tool);
    }
    let mut units = units;
    if units.initramfs.is_none() && doc.guest.as_ref().is_some_and(|g| g.initrd.is_some()) {
        units.initramfs = console_stage(&doc.marks, &units);
    }
    doc.units = Some(units);
}

/// The initramfs stage from the console's `Run /init` line to systemd's
/// start, when the record says nothing of what came between.
fn console_stage(marks: &[TimelineMark], units: &UnitsDoc) -> Option<InitramfsStage> {
    let run_init = marks
        .iter()
        .find(|m| m.source == MarkSource::Serial && m.name.contains("run init"))?;
    let start = units.startup.as_ref()?.systemd_start_ns;
    (start > run_init.t_ns).then(|| {
        timeline_initramfs::stage(
            "the console's \"Run /init\" line to systemd's start (the record names no step between)",
            (run_init.t_ns, start),
            "systemd started",
            &[],
            &units.units,
        )
    })
}

pub use summary::summary;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hostile;
