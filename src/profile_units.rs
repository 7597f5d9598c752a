//! A profiled VMM's systemd units: when the command line names a disk
//! image file (QEMU's `-drive file=` or `-hda`, Cloud Hypervisor's `--disk
//! path=`, Firecracker's config file's `drives`), it is read once before
//! the VMM starts (its record and its journal's last boot) and once after
//! it exits, read-only, by the VMM crate's readers (`vmm/src/units`): the
//! units and the critical chain of a `guest build` image's record, or of
//! any systemd image's journal, go into the profile's `units`, aligned on
//! the profile's marks (the workload's port 0x80 write, or the console's
//! `Run /init` line).

use std::path::{Path, PathBuf};

use bootscope_model::argv::{flag_value, flag_values};
use bootscope_model::profile::Profile;
use bootscope_model::timeline::{Timeline, TimelineMark};
use bootscope_vmm::units::RecordProbe;

/// Firecracker's configuration file read at most.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The disk image a VMM's command line boots from: the first one named,
/// if it is a regular file.
pub fn disk_image(command: &[String]) -> Option<PathBuf> {
    let named = qemu_disk(command)
        .or_else(|| cloud_hypervisor_disk(command))
        .or_else(|| firecracker_disk(command))?;
    let path = PathBuf::from(named);
    std::fs::metadata(&path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|_| path)
}

/// `key=` in a comma-separated option list (`file=disk.raw,if=virtio`;
/// QEMU's `,,` for a comma in a value is not taken apart).
fn option_value<'a>(list: &'a str, key: &str) -> Option<&'a str> {
    list.split(',')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .filter(|v| !v.is_empty())
}

fn qemu_disk(command: &[String]) -> Option<String> {
    flag_values(command, &["-drive", "--drive"])
        .find_map(|(_, v)| option_value(v, "file").map(str::to_string))
        .or_else(|| flag_value(command, &["-hda", "--hda"]).map(str::to_string))
}

fn cloud_hypervisor_disk(command: &[String]) -> Option<String> {
    flag_values(command, &["--disk"]).find_map(|(_, v)| option_value(v, "path").map(str::to_string))
}

/// The root drive (else the first) of Firecracker's `--config-file`.
fn firecracker_disk(command: &[String]) -> Option<String> {
    let config = flag_value(command, &["--config-file"])?;
    let bytes =
        bootscope_model::input::read_input_with_limit(Path::new(config), MAX_CONFIG_BYTES).ok()?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let drives = doc.get("drives")?.as_array()?;
    let root = drives
        .iter()
        .find(|d| d.get("is_root_device").and_then(serde_json::Value::as_bool) == Some(true))
        .or_else(|| drives.first())?;
    root.get("path_on_host")?.as_str().map(str::to_string)
}

/// The image read before the VMM started.
pub struct DiskUnits {
    probe: RecordProbe,
}

impl DiskUnits {
    /// Reads the image the command names, if any, before it runs.
    pub fn before(command: &[String]) -> Option<Self> {
        let image = disk_image(command)?;
        Some(Self {
            probe: RecordProbe::before_boot(&image),
        })
    }

    /// After the VMM exited: the image's units into the profile, on the
    /// profile's marks.
    pub fn after(self, profile: &mut Profile) {
        let mut timeline = Timeline {
            marks: profile
                .marks
                .iter()
                .map(|m| TimelineMark {
                    name: m.name.clone(),
                    source: m.source,
                    t_ns: m.t_ns,
                    value: m.value,
                    vcpu: None,
                })
                .collect(),
            ..Timeline::default()
        };
        timeline.marks.sort_by_key(|m| m.t_ns);
        self.probe.after_boot(&mut timeline, None);
        profile.units = timeline.units;
    }
}

/// `Some(DiskUnits)` read before a launched command; nothing for `--pid`.
pub fn before_launch(command: &[String], attached: bool) -> Option<DiskUnits> {
    (!attached).then(|| DiskUnits::before(command)).flatten()
}

/// The profile, with the image's units when an image was read before.
pub fn after(disk: Option<DiskUnits>, mut profile: Profile) -> Profile {
    if let Some(d) = disk {
        d.after(&mut profile);
    }
    profile
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn each_vmm_s_disk_flag_names_its_image() {
        let q =
            words("qemu-system-x86_64 -m 1G -drive if=virtio,format=raw,file=/img/a.raw -hda /b");
        assert_eq!(qemu_disk(&q).as_deref(), Some("/img/a.raw"));
        let q = words("qemu-system-x86_64 -hda /img/b.raw");
        assert_eq!(qemu_disk(&q).as_deref(), Some("/img/b.raw"));
        let q = words("qemu-system-x86_64 --drive=file=/img/c.raw,if=virtio");
        assert_eq!(qemu_disk(&q).as_deref(), Some("/img/c.raw"));
        let c =
            words("cloud-hypervisor --kernel k --disk path=/img/d.raw,readonly=off --cmdline x");
        assert_eq!(cloud_hypervisor_disk(&c).as_deref(), Some("/img/d.raw"));
        assert_eq!(qemu_disk(&words("qemu -drive if=none")), None);
        assert_eq!(cloud_hypervisor_disk(&words("ch --disk")), None);
    }

    #[test]
    fn firecracker_s_root_drive_from_its_config() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("vm.json");
        std::fs::write(
            &config,
            r#"{"drives": [{"drive_id": "data", "path_on_host": "/img/data.raw", "is_root_device": false},
                           {"drive_id": "root", "path_on_host": "/img/root.raw", "is_root_device": true}]}"#,
        )
        .unwrap();
        let f = vec![
            "firecracker".to_string(),
            "--config-file".into(),
            config.to_str().unwrap().into(),
        ];
        assert_eq!(firecracker_disk(&f).as_deref(), Some("/img/root.raw"));
        std::fs::write(&config, b"not json").unwrap();
        assert_eq!(firecracker_disk(&f), None);
        // A named image that is not a file is no image.
        assert_eq!(disk_image(&words("qemu -hda /nonexistent/x.raw")), None);
        let image = dir.path().join("disk.raw");
        std::fs::write(&image, b"").unwrap();
        let q = vec![
            "qemu".to_string(),
            "-hda".into(),
            image.to_str().unwrap().into(),
        ];
        assert_eq!(disk_image(&q), Some(image));
    }
}
