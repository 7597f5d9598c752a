//! Units for any systemd image: the journal systemd keeps on the disk
//! (`/var/log/journal/MACHINE-ID/system*.journal`, Debian's default),
//! read from the image after the guest stopped, turned into the same
//! [`Record`] the workload of a `guest build` image writes, so that the
//! units, the critical chain and the summary are built one way.
//!
//! The journal is the guest's: each file is read within a size bound and
//! parsed by the bounded reader (`bootscope_model::journal`), and whatever
//! it could not read is named, never a failure of the boot's timeline.

use std::io::Read;
use std::path::Path;

use bootscope_model::journal::{self, units::FIELDS, BootUnits, Limits};
use bootscope_model::mark::MarkSource;
use bootscope_model::timeline_initramfs::{self, InitramfsStage, StageMessage};
use bootscope_model::units::{UnitsClock, UnitsDoc};

use super::record::{Record, UnitProps};
use super::{order, unit_files};
use crate::timeline::Timeline;

/// Where a persistent journal lives in the image.
pub const JOURNAL_DIR: &str = "/var/log/journal";
/// One journal file read at most (journald's own default cap).
pub const MAX_FILE_BYTES: u64 = 128 << 20;
/// Journal files read at most, the newest (archives and the active file).
pub const MAX_FILES: usize = 8;

/// The journal of an image: the files read, the boot they end with, and
/// what could not be read.
#[derive(Clone, Debug, Default)]
pub struct ImageJournal {
    /// Paths in the image, oldest first.
    pub files: Vec<String>,
    /// The last boot in them; `None` when they hold no entry.
    pub boot: Option<BootUnits>,
    /// One line per file or part not read, and why.
    pub problems: Vec<String>,
}

/// Why an image has no journal to read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoJournal {
    #[error("the image has no {JOURNAL_DIR} (systemd keeps its journal in memory only; create the directory in the image to keep one)")]
    NoDirectory,
    #[error("{JOURNAL_DIR} in the image holds no system journal file")]
    NoFiles,
    #[error("cannot read {path} in the image: {reason}")]
    Unreadable { path: String, reason: String },
}

/// The system journal files under one machine directory, oldest first:
/// archives (`system@...journal`, named by their first sequence number)
/// before the active `system.journal`.
fn order_files(mut names: Vec<String>) -> Vec<String> {
    names
        .retain(|n| n == "system.journal" || (n.starts_with("system@") && n.ends_with(".journal")));
    names.sort_by(|a, b| {
        (a == "system.journal")
            .cmp(&(b == "system.journal"))
            .then_with(|| a.cmp(b))
    });
    // The newest files matter: the boot just done is at the end.
    let skip = names.len().saturating_sub(MAX_FILES);
    names.split_off(skip)
}

fn list(fs: &ext4_view::Ext4, dir: &str) -> Result<Vec<String>, NoJournal> {
    let unreadable = |e: ext4_view::Ext4Error| NoJournal::Unreadable {
        path: dir.to_string(),
        reason: e.to_string(),
    };
    let mut names = Vec::new();
    for entry in fs.read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let name = entry.file_name().as_str().unwrap_or_default().to_string();
        if name != "." && name != ".." && names.len() < 4096 {
            names.push(name);
        }
    }
    Ok(names)
}

/// One file's bytes, at most [`MAX_FILE_BYTES`].
fn read_bounded(fs: &ext4_view::Ext4, path: &str) -> Result<Vec<u8>, String> {
    let len = fs.metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_FILE_BYTES {
        return Err(format!(
            "it is {len} bytes, more than the {MAX_FILE_BYTES} read"
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    fs.open(path)
        .map_err(|e| e.to_string())?
        .take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// Reads the image's system journal.
pub fn read_image_journal(fs: &ext4_view::Ext4) -> Result<ImageJournal, NoJournal> {
    if !fs.exists(JOURNAL_DIR).unwrap_or(false) {
        return Err(NoJournal::NoDirectory);
    }
    // One directory per machine id; the one with the active file wins.
    let mut files = Vec::new();
    for machine in list(fs, JOURNAL_DIR)? {
        let dir = format!("{JOURNAL_DIR}/{machine}");
        let Ok(names) = list(fs, &dir) else { continue };
        let ordered = order_files(names);
        if ordered.iter().any(|n| n == "system.journal") || files.is_empty() {
            files = ordered.into_iter().map(|n| format!("{dir}/{n}")).collect();
        }
    }
    if files.is_empty() {
        return Err(NoJournal::NoFiles);
    }
    let mut out = ImageJournal::default();
    let mut entries = Vec::new();
    for path in files {
        match read_bounded(fs, &path)
            .and_then(|b| journal::parse(&b, FIELDS, &Limits::default()).map_err(|e| e.to_string()))
        {
            Ok(file) => {
                if let Some(at) = file.skipped.stopped_at {
                    out.problems.push(format!(
                        "{path}: read up to byte {at}, where an object is damaged"
                    ));
                }
                if file.skipped.bad_items > 0 {
                    out.problems.push(format!(
                        "{path}: {} fields point outside the file",
                        file.skipped.bad_items
                    ));
                }
                if file.skipped.over_limit > 0 {
                    out.problems.push(format!(
                        "{path}: {} entries past the reader's limits",
                        file.skipped.over_limit
                    ));
                }
                entries.extend(file.entries);
            }
            Err(e) => out.problems.push(format!("{path}: {e}")),
        }
        out.files.push(path);
    }
    out.boot = journal::boot_units(&entries, None);
    Ok(out)
}

/// The journal's boot as the record a `guest build` workload writes: each
/// unit's start job as its activation (`Starting` to `Started`; to
/// inactive for a unit that never became active), systemd's
/// `Startup finished` as the manager's timestamps and `systemd-analyze
/// time`'s line. The journal has no `After=` and no marker: the chain and
/// the clock come from elsewhere.
pub fn record_of(boot: &BootUnits) -> Record {
    let mut record = Record::default();
    if let Some(v) = &boot.systemd_version {
        record.manager.insert("Version".into(), v.clone());
    }
    if let Some(s) = &boot.startup {
        let userspace_start = s.kernel_us.saturating_add(s.initrd_us.unwrap_or(0));
        record.manager.insert(
            "UserspaceTimestampMonotonic".into(),
            userspace_start.to_string(),
        );
        record.manager.insert(
            "FinishTimestampMonotonic".into(),
            userspace_start.saturating_add(s.userspace_us).to_string(),
        );
        record.analyze = s.line.clone();
    }
    record.units = boot
        .units
        .iter()
        .filter_map(|u| {
            let done = u.done_us.unwrap_or(0);
            let start = u.starting_us.or(u.done_us)?;
            let failed = u.result == "failed";
            // A oneshot service that ran, or a unit skipped for a
            // condition: systemd has no activation time for it.
            let inactive = failed || u.never_active;
            Some(UnitProps {
                id: u.name.clone(),
                active_state: match (failed, u.never_active, u.done_us) {
                    (true, _, _) => "failed",
                    (false, true, _) => "inactive",
                    (false, false, Some(_)) => "active",
                    (false, false, None) => "activating",
                }
                .into(),
                inactive_exit_us: start,
                active_enter_us: if inactive { 0 } else { done },
                active_exit_us: 0,
                inactive_enter_us: if inactive { done } else { 0 },
                after: Vec::new(),
            })
        })
        .collect();
    record
}

/// The image's last boot as a record, each unit ordered as systemd's
/// manager orders it by the unit files (`After=`, explicit and implicit,
/// for the critical chain), with the journal files read and their
/// problems.
pub fn record_from_image(fs: &ext4_view::Ext4) -> Result<(Record, ImageJournal), NoJournal> {
    let journal = read_image_journal(fs)?;
    let Some(boot) = &journal.boot else {
        return Ok((Record::default(), journal));
    };
    let mut record = record_of(boot);
    let orderings: Vec<(String, unit_files::Ordering)> = record
        .units
        .iter()
        .map(|u| {
            let ord = unit_files::ordering(fs, &u.id).unwrap_or_default();
            (u.id.clone(), ord)
        })
        .collect();
    let mut after = order::after_lists(&orderings, &mut |name| unit_files::alias_of(fs, name));
    for unit in &mut record.units {
        unit.after = after.remove(&unit.id).unwrap_or_default();
    }
    Ok((record, journal))
}

/// Where the critical chain of a journal's boot ends: `workload` when it
/// ran, else the default target systemd reached (`graphical.target`,
/// `multi-user.target`), else the last target reached.
pub fn chain_target(record: &Record, workload: &str) -> Option<String> {
    let reached = |name: &str| record.unit(name).is_some_and(|u| u.active_enter_us > 0);
    if reached(workload) {
        return Some(workload.to_string());
    }
    ["graphical.target", "multi-user.target"]
        .into_iter()
        .find(|t| reached(t))
        .map(str::to_string)
        .or_else(|| {
            record
                .units
                .iter()
                .filter(|u| u.id.ends_with(".target") && u.active_enter_us > 0)
                .max_by_key(|u| u.active_enter_us)
                .map(|u| u.id.clone())
        })
}

/// The unit the workload's marker belongs to: of the services (and
/// scopes) that had started by the marker (`marker_us`, guest time) and
/// had not stopped before it, the last one started, the one whose process
/// wrote the port. Targets, mounts, sockets and the like run no workload.
pub fn workload_unit(record: &Record, marker_us: u64) -> Option<String> {
    record
        .units
        .iter()
        .filter(|u| u.id.ends_with(".service") || u.id.ends_with(".scope"))
        .filter(|u| u.inactive_exit_us > 0 && u.inactive_exit_us <= marker_us)
        .filter(|u| u.inactive_enter_us == 0 || u.inactive_enter_us >= marker_us)
        .max_by_key(|u| u.inactive_exit_us)
        .map(|u| u.id.clone())
}

/// The guest time (µs) of the workload's marker: the first port 0x80
/// write in userspace's range (0x60 to 0x7f), through the clock's offset.
fn marker_us(timeline: &Timeline, offset_ns: i64) -> Option<u64> {
    let m = timeline.marks.iter().find(|m| {
        m.source == MarkSource::DebugPort && m.value.is_some_and(|v| (0x60..=0x7f).contains(&v))
    })?;
    let guest_ns = i128::from(m.t_ns) - i128::from(offset_ns);
    u64::try_from(guest_ns / 1000).ok()
}

/// True when the image is a systemd root: it has systemd's manager.
fn is_systemd_root(fs: &ext4_view::Ext4) -> bool {
    ["/lib/systemd/systemd", "/usr/lib/systemd/systemd"]
        .iter()
        .any(|p| fs.exists(*p).unwrap_or(false))
}

/// The boot the active journal file ends with, from its header (56: the
/// tail entry's boot id), to tell after a boot whether it wrote any.
pub fn tail_boot(fs: &ext4_view::Ext4) -> Option<[u8; 16]> {
    for machine in list(fs, JOURNAL_DIR).ok()? {
        let path = format!("{JOURNAL_DIR}/{machine}/system.journal");
        let Ok(file) = fs.open(&path) else { continue };
        let mut head = [0u8; 72];
        file.take(72).read_exact(&mut head).ok()?;
        if head.starts_with(journal::file::SIGNATURE) {
            return head[56..72].try_into().ok();
        }
    }
    None
}

/// The guest clock's place on the timeline for a journal's boot, and
/// what gave it: the kernel log's clock when `run --initcalls` aligned it
/// (its stated error), else the kernel's `Run /init` console line (its
/// record is stored before the line is printed, so the offset is at most
/// the line's print time late). The journal's times are the kernel log's
/// for the kernel's messages and `CLOCK_MONOTONIC` for the rest: both
/// count from kvm-clock in a KVM guest.
fn clock(boot: &BootUnits, timeline: &Timeline) -> Result<(UnitsClock, &'static str), String> {
    if let Some(c) = timeline.initcalls.as_ref().and_then(|i| i.clock.as_ref()) {
        let clock = UnitsClock {
            offset_ns: c.offset_ns,
            error_ns: c.error_ns,
            ..UnitsClock::default()
        };
        return Ok((
            clock,
            "the kernel log's clock, aligned by its console lines",
        ));
    }
    let run_init = timeline
        .marks
        .iter()
        .find(|m| m.source == MarkSource::Serial && m.name.contains("run init"));
    if let (Some(init_us), Some(mark)) = (boot.init_run_us, run_init) {
        let guest_ns = init_us.saturating_mul(1000);
        let clock = UnitsClock {
            offset_ns: i64::try_from(i128::from(mark.t_ns) - i128::from(guest_ns)).unwrap_or(0),
            error_ns: 0,
            marker_t_ns: mark.t_ns,
            marker_guest_ns: [guest_ns, guest_ns],
        };
        return Ok((clock, "the kernel's \"Run /init\" console line"));
    }
    Err("its times cannot be placed on the timeline: boot with the kernel's console on the serial port (console=ttyS0, not quiet) or with --initcalls".into())
}

/// The units of any systemd image from its journal, for an image without
/// the record of a `guest build` workload: `None` when the image is not
/// a systemd root (a data disk); else the units, or why there are none.
/// `before`: the active journal's last boot before this boot; `workload`:
/// the unit the critical chain ends at when the user named it
/// (`--workload-unit`).
pub fn units_doc(
    image: &Path,
    timeline: &Timeline,
    before: Option<[u8; 16]>,
    workload: Option<&str>,
) -> Option<UnitsDoc> {
    let mut source = format!(
        "systemd's journal ({JOURNAL_DIR}) in the disk image {}",
        image.display()
    );
    let read = super::image::with_fs_at(image, |fs| {
        Ok(is_systemd_root(fs).then(|| record_from_image(fs)))
    });
    let fail = |source: &str, error: String| {
        Some(UnitsDoc {
            source: source.to_string(),
            error: Some(error),
            ..UnitsDoc::default()
        })
    };
    let (record, journal) = match read {
        Ok(None | Some(None)) => return None,
        Err(e) => return fail(&source, e),
        Ok(Some(Some(Err(e)))) => return fail(&source, e.to_string()),
        Ok(Some(Some(Ok(v)))) => v,
    };
    let Some(boot) = &journal.boot else {
        return fail(&source, "the journal holds no entry".into());
    };
    if before == Some(boot.boot_id) {
        return fail(&source, "the journal ends with the boot before this one: journald kept this boot's entries in memory (systemd-journal-flush.service did not run)".into());
    }
    let (clock, by) = match clock(boot, timeline) {
        Ok(c) => c,
        Err(e) => return fail(&source, e),
    };
    source = format!(
        "{source}: boot {} from {} file(s), clock from {by}",
        journal::file::boot_id_hex(&boot.boot_id),
        journal.files.len()
    );
    if !journal.problems.is_empty() {
        source = format!("{source}; not read: {}", journal.problems.join("; "));
    }
    // The chain ends at the workload: the one named, else bootscope's,
    // else the unit the marker belongs to, else the default target.
    let (target, note) = super::chain_end(&record, workload, || {
        Some(super::WORKLOAD_UNIT)
            .filter(|w| record.unit(w).is_some_and(|u| u.active_enter_us > 0))
            .map(str::to_string)
            .or_else(|| workload_unit(&record, marker_us(timeline, clock.offset_ns)?))
            .or_else(|| chain_target(&record, super::WORKLOAD_UNIT))
            .unwrap_or_default()
    });
    if let Some(note) = note {
        source = format!("{source}; {note}");
    }
    let offset_ns = clock.offset_ns;
    let mut units = super::doc_of(&record, &source, clock, &timeline.marks, &target);
    let initrd = timeline.guest.as_ref().is_some_and(|g| g.initrd.is_some());
    if initrd {
        units.initramfs = initramfs_stage(boot, offset_ns, &units.units);
    }
    Some(units)
}

/// The initramfs stage of a journal's boot on the timeline (guest time
/// plus `offset_ns`): `Run /init` to the switch root or systemd's start,
/// with the messages logged between them.
pub fn initramfs_stage(
    boot: &BootUnits,
    offset_ns: i64,
    units: &[bootscope_model::units::Unit],
) -> Option<InitramfsStage> {
    let start_us = boot.init_run_us?;
    let (end_us, end) = boot.initramfs_end_us()?;
    let messages: Vec<StageMessage> = boot
        .stage_log
        .iter()
        .map(|l| StageMessage {
            t_ns: super::to_timeline(l.at_us, offset_ns),
            ident: l.ident.clone(),
            text: l.text.clone(),
        })
        .collect();
    Some(timeline_initramfs::stage(
        "systemd's journal: the kernel's \"Run /init\" to the real root's init, the messages between",
        (
            super::to_timeline(start_us, offset_ns),
            super::to_timeline(end_us, offset_ns),
        ),
        end,
        &messages,
        units,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::journal::{StartupFinished, UnitTimes};

    #[test]
    fn active_file_comes_last_and_archives_by_name() {
        let names = vec![
            "user-1000.journal".to_string(),
            "system.journal".into(),
            "system@b-0000000000000010-0005.journal".into(),
            "system@a-0000000000000001-0001.journal".into(),
            "system.journal~".into(),
        ];
        assert_eq!(
            order_files(names),
            [
                "system@a-0000000000000001-0001.journal",
                "system@b-0000000000000010-0005.journal",
                "system.journal"
            ]
        );
        let many: Vec<String> = (0..40).map(|i| format!("system@{i:03}.journal")).collect();
        let kept = order_files(many);
        assert_eq!(kept.len(), MAX_FILES);
        assert_eq!(kept.last().unwrap(), "system@039.journal");
    }

    #[test]
    fn a_boot_becomes_the_record_the_units_are_built_from() {
        let boot = BootUnits {
            systemd_version: Some("252".into()),
            startup: Some(StartupFinished {
                line: "Startup finished in 1.000s (kernel) + 2.000s (userspace) = 3.000s.".into(),
                at_us: 3_000_100,
                kernel_us: 1_000_000,
                initrd_us: None,
                userspace_us: 2_000_000,
            }),
            units: vec![
                UnitTimes {
                    name: "a.service".into(),
                    starting_us: Some(1_100_000),
                    done_us: Some(1_500_000),
                    result: "done".into(),
                    never_active: false,
                },
                UnitTimes {
                    name: "multi-user.target".into(),
                    starting_us: None,
                    done_us: Some(2_900_000),
                    result: "done".into(),
                    never_active: false,
                },
                UnitTimes {
                    name: "oneshot.service".into(),
                    starting_us: Some(1_100_000),
                    done_us: Some(1_400_000),
                    result: "done".into(),
                    never_active: true,
                },
                UnitTimes {
                    name: "bad.service".into(),
                    starting_us: Some(1_200_000),
                    done_us: Some(1_300_000),
                    result: "failed".into(),
                    never_active: false,
                },
                UnitTimes {
                    name: "never.service".into(),
                    ..UnitTimes::default()
                },
            ],
            ..BootUnits::default()
        };
        let r = record_of(&boot);
        assert_eq!(r.manager_us("UserspaceTimestampMonotonic"), 1_000_000);
        assert_eq!(r.manager_us("FinishTimestampMonotonic"), 3_000_000);
        assert_eq!(r.units.len(), 4);
        // Ran and went inactive: no activation time, as systemd has none.
        let oneshot = r.unit("oneshot.service").unwrap();
        assert_eq!(oneshot.active_state, "inactive");
        assert_eq!(
            (oneshot.active_enter_us, oneshot.inactive_enter_us),
            (0, 1_400_000)
        );
        let a = r.unit("a.service").unwrap();
        assert_eq!(
            (a.inactive_exit_us, a.active_enter_us),
            (1_100_000, 1_500_000)
        );
        let t = r.unit("multi-user.target").unwrap();
        assert_eq!(
            (t.inactive_exit_us, t.active_enter_us),
            (2_900_000, 2_900_000)
        );
        let bad = r.unit("bad.service").unwrap();
        assert_eq!(bad.active_state, "failed");
        assert_eq!((bad.active_enter_us, bad.inactive_enter_us), (0, 1_300_000));
        assert!(super::super::record::startup_finished(&r.analyze).is_some());
        assert_eq!(
            chain_target(&r, "w.service").as_deref(),
            Some("multi-user.target")
        );
        // The marker at 1.25 s: a.service had started, bad.service too;
        // the last started of those still running is bad.service until it
        // failed (1.3 s); at 1.45 s the oneshot had ended too.
        assert_eq!(workload_unit(&r, 1_250_000).as_deref(), Some("bad.service"));
        assert_eq!(workload_unit(&r, 1_450_000).as_deref(), Some("a.service"));
        assert_eq!(workload_unit(&r, 1_000_000), None);
    }
}

/// Real ext4 images made with `mkfs.ext4 -d`, holding the journal files
/// systemd wrote (model's fixtures).
#[cfg(test)]
mod image_tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn fixture_journal() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../model/tests/fixtures/compact.journal.gz"
        );
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    /// An image of `tree` (a directory), or `None` without mkfs.ext4.
    fn image_of(tree: &Path, image: &Path) -> Option<ext4_view::Ext4> {
        let mkfs = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
            .into_iter()
            .find(|p| Path::new(p).exists())?;
        let ok = Command::new(mkfs)
            .args(["-q", "-F", "-d"])
            .arg(tree)
            .arg(image)
            .arg("16M")
            .status()
            .ok()?
            .success();
        assert!(ok, "mkfs.ext4 failed");
        Some(ext4_view::Ext4::load_from_path(image).unwrap())
    }

    #[test]
    fn the_journal_of_an_image_gives_its_last_boot() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("root");
        let machine = tree.join("var/log/journal/0123456789abcdef0123456789abcdef");
        std::fs::create_dir_all(&machine).unwrap();
        std::fs::write(machine.join("system.journal"), fixture_journal()).unwrap();
        // A user's journal and a damaged archive are named, not fatal.
        std::fs::write(machine.join("user-1000.journal"), b"x").unwrap();
        std::fs::write(machine.join("system@0-1-2.journal"), b"LPKSHHRH").unwrap();
        let Some(fs) = image_of(&tree, &dir.path().join("disk.img")) else {
            println!("SKIP: mkfs.ext4 is not installed (e2fsprogs)");
            return;
        };
        let journal = read_image_journal(&fs).unwrap();
        assert_eq!(journal.files.len(), 2, "{:?}", journal.files);
        assert!(journal.files[1].ends_with("/system.journal"));
        assert_eq!(journal.problems.len(), 1, "{:?}", journal.problems);
        assert!(journal.problems[0].contains("system@0-1-2.journal"));
        let boot = journal.boot.unwrap();
        assert_eq!(boot.units.len(), 2);
        assert!(boot.startup.is_some());
        let (record, _) = record_from_image(&fs).unwrap();
        // No unit files in this image: a service's default ordering only,
        // the target still ends the chain.
        let after = |n: &str| record.unit(n).unwrap().after.clone();
        assert_eq!(
            after("a.service"),
            ["sysinit.target", "basic.target", "systemd-journald.socket"]
        );
        assert!(after("multi-user.target").is_empty());
        assert_eq!(
            chain_target(&record, "w.service").as_deref(),
            Some("multi-user.target")
        );
    }

    /// The unit files of a small image, as `write_unit_tree` lays them out.
    const UNIT_FILES: &[(&str, &str)] = &[
        (
            "lib/systemd/system/a.service",
            "[Unit]\nAfter=x.target\nBefore=b.service\n[Service]\nExecStart=/bin/true\n",
        ),
        (
            "etc/systemd/system/a.service.d/10-late.conf",
            "[Unit]\nAfter=y.service\n",
        ),
        (
            "lib/systemd/system/getty@.service",
            "[Unit]\nDefaultDependencies=no\nAfter=z.service\n[Service]\nStandardInput=tty\n",
        ),
        (
            "lib/systemd/system/multi-user.target",
            "[Unit]\nRequires=basic.target\n",
        ),
        (
            "lib/systemd/system/graphical.target",
            "[Unit]\nRequires=multi-user.target\nAfter=multi-user.target\n",
        ),
        (
            "lib/systemd/system/utmp-runlevel.service",
            "[Unit]\nDefaultDependencies=no\nAfter=runlevel5.target\n",
        ),
    ];

    fn write_unit_tree(tree: &Path) {
        for (path, text) in UNIT_FILES {
            let path = tree.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let lib = tree.join("lib/systemd/system");
        let etc = tree.join("etc/systemd/system");
        std::fs::create_dir_all(lib.join("graphical.target.wants")).unwrap();
        std::fs::create_dir_all(etc.join("multi-user.target.wants")).unwrap();
        let links = [
            ("graphical.target", lib.join("runlevel5.target")),
            (
                "../utmp-runlevel.service",
                lib.join("graphical.target.wants/utmp-runlevel.service"),
            ),
            (
                "/lib/systemd/system/a.service",
                etc.join("multi-user.target.wants/a.service"),
            ),
            ("/dev/null", etc.join("masked.service")),
        ];
        for (to, link) in links {
            std::os::unix::fs::symlink(to, link).unwrap();
        }
    }

    #[test]
    fn unit_files_in_an_image_order_the_units() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("root");
        write_unit_tree(&tree);
        let Some(fs) = image_of(&tree, &dir.path().join("u.img")) else {
            println!("SKIP: mkfs.ext4 is not installed (e2fsprogs)");
            return;
        };
        assert_eq!(unit_files::ordering(&fs, "masked.service"), None);
        assert_eq!(unit_files::ordering(&fs, "absent.service"), None);
        assert_eq!(
            unit_files::alias_of(&fs, "runlevel5.target").as_deref(),
            Some("graphical.target")
        );
        assert_eq!(unit_files::alias_of(&fs, "graphical.target"), None);
        let names = [
            "a.service",
            "b.service",
            "getty@tty1.service",
            "multi-user.target",
            "graphical.target",
            "utmp-runlevel.service",
            "x.target",
            "y.service",
            "basic.target",
            "sysinit.target",
            "systemd-journald.socket",
        ];
        let units: Vec<(String, unit_files::Ordering)> = names
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    unit_files::ordering(&fs, n).unwrap_or_default(),
                )
            })
            .collect();
        let after = order::after_lists(&units, &mut |n| unit_files::alias_of(&fs, n));
        let of = |n: &str| after[n].iter().map(String::as_str).collect::<Vec<_>>();
        let service = ["sysinit.target", "basic.target", "systemd-journald.socket"];
        assert_eq!(
            of("a.service"),
            [&["x.target", "y.service"][..], &service].concat()
        );
        // a.service's Before=, the other end; b.service has no file.
        assert_eq!(of("b.service"), [&["a.service"][..], &service].concat());
        // No defaults, its terminal its output: its own After= only.
        assert_eq!(of("getty@tty1.service"), ["z.service"]);
        // Requires= and .wants order a target after what it wants...
        assert_eq!(of("multi-user.target"), ["basic.target", "a.service"]);
        // ... but not after a unit without defaults ordered after it (through
        // its alias): systemd-update-utmp-runlevel's case.
        assert_eq!(of("graphical.target"), ["multi-user.target"]);
        assert_eq!(
            of("utmp-runlevel.service"),
            ["graphical.target", "systemd-journald.socket"]
        );
    }

    fn mark(name: &str, source: MarkSource, t_ns: u64) -> crate::timeline::TimelineMark {
        crate::timeline::TimelineMark {
            name: name.into(),
            source,
            t_ns,
            value: None,
            vcpu: None,
        }
    }

    /// A systemd root with a journal: the units on the timeline's clock
    /// through the `Run /init` console line, the chain to the target, and
    /// why not when the clock or the journal is missing.
    #[test]
    fn units_of_a_systemd_image_from_its_journal() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("root");
        let machine = tree.join("var/log/journal/0123456789abcdef0123456789abcdef");
        std::fs::create_dir_all(&machine).unwrap();
        std::fs::create_dir_all(tree.join("lib/systemd/system")).unwrap();
        std::fs::write(tree.join("lib/systemd/systemd"), b"\x7fELF").unwrap();
        std::fs::write(
            tree.join("lib/systemd/system/multi-user.target"),
            "[Unit]\nWants=a.service\n",
        )
        .unwrap();
        std::fs::write(machine.join("system.journal"), fixture_journal()).unwrap();
        let image = dir.path().join("disk.img");
        if image_of(&tree, &image).is_none() {
            println!("SKIP: mkfs.ext4 is not installed (e2fsprogs)");
            return;
        }
        let mut timeline = Timeline::default();
        timeline.marks = vec![
            mark(
                crate::timeline::vmm_marks::FIRST_KVM_RUN,
                MarkSource::Vmm,
                1_000_000,
            ),
            // The kernel stored "Run /init" at 900 µs of its clock.
            mark("serial: run init", MarkSource::Serial, 50_000_000),
        ];
        let doc = units_doc(&image, &timeline, None, None).unwrap();
        assert_eq!(doc.error, None, "{}", doc.source);
        assert!(doc.source.contains("Run /init"), "{}", doc.source);
        assert_eq!(doc.clock.as_ref().unwrap().offset_ns, 50_000_000 - 900_000);
        assert_eq!(doc.systemd_version, "252.39-1~deb12u2");
        assert_eq!(doc.units.len(), 2);
        let a = doc.unit("a.service").unwrap();
        assert_eq!(a.start_ns, 2_000_000 + 49_100_000);
        assert_eq!(a.duration_ns, 1_000_000);
        assert_eq!(doc.chain_target, "multi-user.target");
        let chain: Vec<&str> = doc.critical_chain.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(chain, ["multi-user.target", "a.service"]);
        // A port 0x80 write at 2.5 ms of the guest's clock, after a.service
        // started: the chain ends at the unit it belongs to.
        let mut marked = timeline.clone();
        let marker_t = 2_500_000 + 49_100_000;
        let mut marker = mark("port 0x80: userspace 0x60", MarkSource::DebugPort, marker_t);
        marker.value = Some(0x60);
        marked.marks.push(marker);
        let to_workload = units_doc(&image, &marked, None, None).unwrap();
        assert_eq!(to_workload.chain_target, "a.service");
        assert_eq!(to_workload.critical_chain[0].name, "a.service");
        // One before a.service started belongs to no unit.
        marked.marks.last_mut().unwrap().t_ns = 1_900_000 + 49_100_000;
        let early = units_doc(&image, &marked, None, None).unwrap();
        assert_eq!(early.chain_target, "multi-user.target");
        // Named by the user (--workload-unit): the chain ends there, marker
        // or not; a unit this boot did not start leaves the automatic end,
        // and the source says so.
        let named = units_doc(&image, &marked, None, Some("a.service")).unwrap();
        assert_eq!(named.chain_target, "a.service");
        assert_eq!(named.source, early.source);
        let absent = units_doc(&image, &marked, None, Some("app.service")).unwrap();
        assert_eq!(absent.chain_target, "multi-user.target");
        assert_eq!(absent.critical_chain, early.critical_chain);
        assert!(
            absent.source.ends_with("the workload unit app.service (--workload-unit) did not start in this boot, so the critical chain ends at multi-user.target"),
            "{}",
            absent.source
        );
        assert_eq!(doc.startup.as_ref().unwrap().userspace_ns, 2_000_000_000);
        // Booted without an initrd: no initramfs stage.
        assert_eq!(doc.initramfs, None);
        timeline.guest = Some(crate::timeline::TimelineGuest {
            initrd: Some("initrd.img".into()),
            ..Default::default()
        });
        let with_initrd = units_doc(&image, &timeline, None, None).unwrap();
        let stage = with_initrd.initramfs.unwrap();
        // "Run /init" at 900 µs to systemd's first message at 1400 µs.
        assert_eq!((stage.start_ns, stage.end_ns), (50_000_000, 50_500_000));
        assert_eq!(stage.end, "systemd started");
        assert_eq!(stage.messages, 2);

        // The journal ends with the boot before: this boot kept it in memory.
        let before = Some(doc_boot(&image));
        let stale = units_doc(&image, &timeline, before, None).unwrap();
        assert!(stale.error.unwrap().contains("boot before this one"));
        // No console line and no initcalls: no clock, and it says what gives one.
        timeline.marks.truncate(1);
        let no_clock = units_doc(&image, &timeline, None, None).unwrap();
        assert!(no_clock.error.unwrap().contains("console=ttyS0"));
    }

    fn doc_boot(image: &Path) -> [u8; 16] {
        super::super::image::with_fs_at(image, |fs| Ok(tail_boot(fs)))
            .unwrap()
            .flatten()
            .unwrap()
    }

    #[test]
    fn a_data_disk_has_no_units_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("root");
        std::fs::create_dir_all(tree.join("data")).unwrap();
        let image = dir.path().join("data.img");
        if image_of(&tree, &image).is_none() {
            println!("SKIP: mkfs.ext4 is not installed (e2fsprogs)");
            return;
        }
        assert_eq!(units_doc(&image, &Timeline::default(), None, None), None);
        let raw = dir.path().join("raw.img");
        std::fs::write(&raw, vec![0u8; 65536]).unwrap();
        assert_eq!(units_doc(&raw, &Timeline::default(), None, None), None);
    }

    #[test]
    fn an_image_without_a_journal_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("root");
        std::fs::create_dir_all(tree.join("etc")).unwrap();
        let Some(fs) = image_of(&tree, &dir.path().join("a.img")) else {
            println!("SKIP: mkfs.ext4 is not installed (e2fsprogs)");
            return;
        };
        assert_eq!(read_image_journal(&fs).unwrap_err(), NoJournal::NoDirectory);
        std::fs::create_dir_all(tree.join("var/log/journal/m")).unwrap();
        let fs = image_of(&tree, &dir.path().join("b.img")).unwrap();
        assert_eq!(read_image_journal(&fs).unwrap_err(), NoJournal::NoFiles);
    }
}
