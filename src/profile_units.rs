//! A profiled VMM's systemd units: when the command line names a disk
//! image file (QEMU's `-drive file=` or `-hda`, Cloud Hypervisor's `--disk
//! path=`, Firecracker's config file's `drives`), it is read once before
//! the VMM starts (its record and its journal's last boot) and once after
//! it exits, read-only, by the VMM crate's readers (`vmm/src/units`): the
//! units and the critical chain of a `guest build` image's record, or of
//! any systemd image's journal, go into the profile's `units`, aligned on
//! the profile's marks (the workload's port 0x80 write, or the console's
//! `Run /init` line).

use std::path::PathBuf;

use bootscope_model::profile::Profile;
use bootscope_model::timeline::{Timeline, TimelineMark};
use bootscope_vmm::units::RecordProbe;

/// The disk image a VMM's command line boots from: the first one it names
/// (in its own options: `bootscope_model::vmm::disk_images`) that is a
/// regular file.
pub fn disk_image(command: &[String]) -> Option<PathBuf> {
    bootscope_model::vmm::disk_images(command)
        .ok()?
        .into_iter()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
}

/// The image read before the VMM started.
pub struct DiskUnits {
    probe: RecordProbe,
}

impl DiskUnits {
    /// Reads the image the command names, if any, before it runs; the
    /// critical chain ends at `workload` when given (`--workload-unit`).
    pub fn before(command: &[String], workload: Option<String>) -> Option<Self> {
        let image = disk_image(command)?;
        Some(Self {
            probe: RecordProbe::before_boot(&image).with_workload_unit(workload),
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
pub fn before_launch(
    command: &[String],
    attached: bool,
    workload: Option<String>,
) -> Option<DiskUnits> {
    (!attached)
        .then(|| DiskUnits::before(command, workload))
        .flatten()
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
    fn a_vmm_s_root_image_that_is_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("vm.json");
        let (data, root) = (dir.path().join("data.raw"), dir.path().join("root.raw"));
        std::fs::write(&data, b"").unwrap();
        std::fs::write(&root, b"").unwrap();
        std::fs::write(
            &config,
            serde_json::json!({"boot-source": {"kernel_image_path": "vmlinux"}, "drives": [
                {"drive_id": "data", "path_on_host": data, "is_root_device": false},
                {"drive_id": "root", "path_on_host": root, "is_root_device": true}]})
            .to_string(),
        )
        .unwrap();
        let f = vec![
            "firecracker".to_string(),
            "--config-file".into(),
            config.to_str().unwrap().into(),
        ];
        let named = bootscope_model::vmm::disk_images(&f);
        assert_eq!(disk_image(&f), Some(root), "{named:?}");
        std::fs::write(&config, b"not json").unwrap();
        assert_eq!(disk_image(&f), None);
        // A named image that is not a file is no image.
        assert_eq!(
            disk_image(&words("qemu-system-x86_64 -hda /nonexistent/x.raw")),
            None
        );
        let image = dir.path().join("disk.raw");
        std::fs::write(&image, b"").unwrap();
        let q = vec![
            "qemu-system-x86_64".to_string(),
            "-hda".into(),
            image.to_str().unwrap().into(),
        ];
        assert_eq!(disk_image(&q), Some(image));
    }
}
