//! The initramfs stage of a boot (the timeline's `units.initramfs`,
//! docs/timeline-schema.md): from the kernel running the initramfs's init
//! (`Run /init as init process`) to the switch to the real root, with what
//! it did as far as the guest's log shows it: the drivers that logged, udev,
//! the root device found, its mount and fsck. The VMM builds it from the
//! messages of that window (the journal keeps them: the kernel's, and the
//! initramfs's own once the runtime journal is flushed); the summary,
//! `plot`, the TUI and `advise` read it.

use serde::{Deserialize, Serialize};

use crate::units::Unit;

/// Steps kept in the stage; the rest are counted in `messages`.
pub const MAX_STEPS: usize = 64;
/// Driver names kept.
pub const MAX_DRIVERS: usize = 128;
/// The longest message text kept in a step.
pub const MAX_TEXT: usize = 240;

/// The timeline's `units.initramfs` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InitramfsStage {
    /// Where the stage's ends and steps were read.
    pub source: String,
    /// The kernel ran the initramfs's init (timeline ns).
    pub start_ns: u64,
    /// The real root's init took over (timeline ns).
    pub end_ns: u64,
    pub duration_ns: u64,
    /// What ended it: `switch root` (a systemd initramfs's `Switching
    /// root.`) or `systemd started` (PID 1's first message on the real
    /// root, after an initramfs-tools or busybox init).
    pub end: String,
    /// What it did, in time order (at most [`MAX_STEPS`]).
    pub steps: Vec<StageStep>,
    /// Drivers that logged in the stage (the `DRIVER DEVICE:` prefix of
    /// the kernel's device messages): the modules it loaded, as far as
    /// the log names them.
    pub drivers: Vec<String>,
    /// The root file system's device, from its mount message (`vda1`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub root_device: String,
    /// The root's fsck, when it logged one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fsck: String,
    /// Units of a systemd initramfs that started in the stage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// Messages logged in the stage.
    pub messages: u64,
}

/// One thing the initramfs did, at its message's time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StageStep {
    /// `udev`, `device` (a disk found), `mount` (the root mounted),
    /// `fsck`.
    pub kind: String,
    pub t_ns: u64,
    /// The message (at most [`MAX_TEXT`] characters).
    pub text: String,
}

/// One logged message on the timeline's clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageMessage {
    pub t_ns: u64,
    /// The sender (`SYSLOG_IDENTIFIER`); empty or `kernel` for the kernel.
    pub ident: String,
    pub text: String,
}

/// Block device names as the kernel names disks.
fn is_disk_name(s: &str) -> bool {
    let s = s.trim_start_matches('[').trim_end_matches([']', ':']);
    ["vd", "sd", "xvd", "hd", "nvme", "mmcblk"]
        .iter()
        .any(|p| s.starts_with(p) && s.len() > p.len() && s.len() <= 32)
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The device of a file system's mount message (`EXT4-fs (vda1): mounted
/// filesystem ...`, `XFS (vda1): Mounting ...`).
fn mounted_device(text: &str) -> Option<&str> {
    let fs = [
        "EXT4-fs (",
        "EXT3-fs (",
        "EXT2-fs (",
        "XFS (",
        "BTRFS info (device ",
    ];
    let rest = fs.iter().find_map(|p| text.strip_prefix(p))?;
    let (dev, tail) = rest.split_once(')')?;
    let lower = tail.to_ascii_lowercase();
    (lower.contains("mounted filesystem") || lower.contains("mounting")).then_some(dev)
}

/// A kernel device message's driver (`virtio_blk virtio1: [vda] ...`).
fn driver_of(text: &str) -> Option<&str> {
    let mut words = text.split(' ');
    let driver = words.next()?;
    let device = words.next()?;
    // `DRIVER DEVICE:`, or a network device's `DRIVER DEVICE IFNAME:`.
    let named = device.ends_with(':') || words.next().is_some_and(|w| w.ends_with(':'));
    let plausible = !driver.is_empty()
        && driver.len() <= 56
        && driver
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        && device.len() > 1
        && named;
    plausible.then_some(driver)
}

/// What kind of step a message is, if any.
fn kind_of(m: &StageMessage) -> Option<&'static str> {
    let text = m.text.as_str();
    let lower = text.to_ascii_lowercase();
    if m.ident.contains("fsck") || lower.contains("fsck") || lower.contains(": clean, ") {
        return Some("fsck");
    }
    if m.ident.contains("udev") || lower.contains("udevd") || lower.contains("udevadm settle") {
        return Some("udev");
    }
    if mounted_device(text).is_some() {
        return Some("mount");
    }
    let first = text.split(' ').next().unwrap_or("");
    let probed = text
        .split(' ')
        .take(3)
        .any(|w| w.starts_with('[') && is_disk_name(w));
    if probed || (first.ends_with(':') && is_disk_name(first)) {
        return Some("device");
    }
    None
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(MAX_TEXT) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The stage from `start_ns` to `end_ns` (`end` says what ended it), with
/// the steps of the messages inside it and the units that started in it.
pub fn stage(
    source: &str,
    (start_ns, end_ns): (u64, u64),
    end: &str,
    messages: &[StageMessage],
    units: &[Unit],
) -> InitramfsStage {
    let end_ns = end_ns.max(start_ns);
    let mut out = InitramfsStage {
        source: source.to_string(),
        start_ns,
        end_ns,
        duration_ns: end_ns - start_ns,
        end: end.to_string(),
        ..InitramfsStage::default()
    };
    let mut inside: Vec<&StageMessage> = messages
        .iter()
        .filter(|m| (start_ns..=end_ns).contains(&m.t_ns))
        .collect();
    inside.sort_by_key(|m| m.t_ns);
    out.messages = inside.len() as u64;
    for m in inside {
        let kernel = m.ident.is_empty() || m.ident == "kernel";
        if let Some(d) = driver_of(&m.text).filter(|_| kernel) {
            if !out.drivers.iter().any(|x| x == d) && out.drivers.len() < MAX_DRIVERS {
                out.drivers.push(d.to_string());
            }
        }
        let Some(kind) = kind_of(m) else { continue };
        if kind == "mount" && out.root_device.is_empty() {
            out.root_device = mounted_device(&m.text).unwrap_or_default().to_string();
        }
        if kind == "fsck" && out.fsck.is_empty() {
            out.fsck = cut(&m.text);
        }
        if out.steps.len() < MAX_STEPS {
            out.steps.push(StageStep {
                kind: kind.to_string(),
                t_ns: m.t_ns,
                text: cut(&m.text),
            });
        }
    }
    out.units = units
        .iter()
        .filter(|u| u.start_ns >= start_ns && u.start_ns < end_ns)
        .take(MAX_STEPS)
        .map(|u| u.name.clone())
        .collect();
    out
}

impl InitramfsStage {
    /// The first step of `kind`.
    pub fn step(&self, kind: &str) -> Option<&StageStep> {
        self.steps.iter().find(|s| s.kind == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(t_ns: u64, ident: &str, text: &str) -> StageMessage {
        StageMessage {
            t_ns,
            ident: ident.into(),
            text: text.into(),
        }
    }

    /// What a Debian 12 initramfs-tools boot logs between `Run /init` and
    /// systemd's start (docs/guest.md).
    fn debian_messages() -> Vec<StageMessage> {
        vec![
            msg(90, "kernel", "Run /init as init process"),
            msg(100, "kernel", "Run /init as init process"),
            msg(120, "kernel", "virtio_blk virtio1: 1/0/0 default/read/poll queues"),
            msg(130, "kernel", "virtio_blk virtio1: [vda] 4194304 512-byte logical blocks (2.15 GB/2.00 GiB)"),
            msg(131, "kernel", " vda: vda1"),
            msg(140, "kernel", "vda: vda1"),
            msg(150, "systemd-udevd", "starting version 252.39-1~deb12u2"),
            msg(160, "kernel", "virtio_net virtio0 enp0s2: renamed from eth0"),
            msg(200, "kernel", "EXT4-fs (vda1): mounted filesystem 8d1d3f0e with ordered data mode. Quota mode: none."),
            msg(210, "fsck", "/dev/vda1: clean, 28530/131072 files, 219853/524032 blocks"),
            msg(400, "kernel", "EXT4-fs (vda1): re-mounted 8d1d3f0e. Quota mode: none."),
        ]
    }

    #[test]
    fn a_debian_initramfs_shows_its_drivers_disk_root_and_fsck() {
        let units = vec![Unit {
            name: "systemd-journald.service".into(),
            start_ns: 310,
            ..Unit::default()
        }];
        let s = stage(
            "journal",
            (100, 300),
            "systemd started",
            &debian_messages(),
            &units,
        );
        assert_eq!(s.duration_ns, 200);
        // The re-mount at 400 is after the stage; the line at 90 before it.
        assert_eq!(s.messages, 9);
        assert_eq!(s.drivers, ["virtio_blk", "virtio_net"]);
        assert_eq!(s.root_device, "vda1");
        assert!(s.fsck.starts_with("/dev/vda1: clean"), "{}", s.fsck);
        let kinds: Vec<&str> = s.steps.iter().map(|x| x.kind.as_str()).collect();
        assert_eq!(kinds, ["device", "device", "udev", "mount", "fsck"]);
        assert_eq!(s.step("udev").unwrap().t_ns, 150);
        assert!(s.units.is_empty(), "a unit after the stage is not in it");
    }

    #[test]
    fn a_systemd_initramfs_lists_its_units_and_bounds_its_steps() {
        let units: Vec<Unit> = ["systemd-udev-settle.service", "initrd-switch-root.service"]
            .iter()
            .enumerate()
            .map(|(i, n)| Unit {
                name: (*n).into(),
                start_ns: 10 + i as u64,
                ..Unit::default()
            })
            .collect();
        let flood: Vec<StageMessage> = (0..1000)
            .map(|i| msg(20 + i, "systemd-udevd", &"x".repeat(1000)))
            .collect();
        let s = stage("journal", (10, 5000), "switch root", &flood, &units);
        assert_eq!(s.units.len(), 2);
        assert_eq!(s.steps.len(), MAX_STEPS);
        assert_eq!(s.messages, 1000);
        assert!(s.steps[0].text.chars().count() <= MAX_TEXT + 1);
    }

    #[test]
    fn an_end_before_the_start_is_an_empty_stage() {
        let s = stage("x", (500, 100), "systemd started", &debian_messages(), &[]);
        assert_eq!((s.start_ns, s.end_ns, s.duration_ns), (500, 500, 0));
        assert!(s.steps.is_empty());
    }

    #[test]
    fn words_that_look_like_disks_or_drivers_are_checked() {
        assert!(is_disk_name("[vda]") && is_disk_name("sda:") && is_disk_name("nvme0n1"));
        assert!(!is_disk_name("vd") && !is_disk_name("[sd/x]") && !is_disk_name("video"));
        assert_eq!(
            driver_of("ata_piix 0000:00:01.1: version 2.13"),
            Some("ata_piix")
        );
        assert_eq!(driver_of("Freeing unused kernel image"), None);
        assert_eq!(
            mounted_device("XFS (sda2): Mounting V5 Filesystem"),
            Some("sda2")
        );
        assert_eq!(mounted_device("EXT4-fs (vda1): re-mounted x."), None);
    }

    #[test]
    fn a_timeline_s_stage_is_a_phase_before_userspace() {
        let doc = serde_json::json!({
            "schema": "bootscope.timeline", "version": 3,
            "marks": [],
            "phases": [
                {"name": "kernel", "start_ns": 0, "end_ns": 10, "duration_ns": 10, "from": "a", "to": "b"},
                {"name": "userspace", "start_ns": 10, "end_ns": 90, "duration_ns": 80, "from": "b", "to": "c"}
            ],
            "units": {"source": "x", "units": [], "critical_chain": [],
                      "initramfs": {"start_ns": 10, "end_ns": 40, "duration_ns": 30, "end": "systemd started"}}
        });
        let p = crate::timeline_profile::profile_from_timeline(&doc).unwrap();
        let names: Vec<&str> = p.phases.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["kernel", "initramfs", "userspace"]);
        assert_eq!((p.phases[1].start_ns, p.phases[1].end_ns), (10, 40));
        // A timeline written before the stage reads as before.
        let mut old = doc.clone();
        old["units"].as_object_mut().unwrap().remove("initramfs");
        let p = crate::timeline_profile::profile_from_timeline(&old).unwrap();
        assert_eq!(p.phases.len(), 2);
    }
}
