use std::path::PathBuf;

use super::*;

fn words(s: &str) -> Vec<String> {
    s.split(' ').map(String::from).collect()
}

/// The edit `profile --initcalls` makes, in small: words appended.
fn add_x(old: &str) -> Result<String, String> {
    if old.contains("tp_printk") {
        return Err("prints every event".into());
    }
    Ok(if old.is_empty() {
        "x=1".into()
    } else {
        format!("{old} x=1")
    })
}

#[test]
fn kinds_by_program_and_behind_wrappers() {
    let k = |s: &str| locate(&words(s));
    assert_eq!(k("qemu-system-x86_64 -m 1G"), (VmmKind::Qemu, 0));
    assert_eq!(k("/usr/bin/qemu-kvm"), (VmmKind::Qemu, 0));
    assert_eq!(
        k("cloud-hypervisor --kernel k"),
        (VmmKind::CloudHypervisor, 0)
    );
    assert_eq!(
        k("./firecracker-v1.7.0-x86_64 --no-api"),
        (VmmKind::Firecracker, 0)
    );
    assert_eq!(k("/opt/bootscope run --kernel k"), (VmmKind::Bootscope, 0));
    assert_eq!(k("true"), (VmmKind::Other, 0));
    assert_eq!(
        k("sudo -E -u root taskset -c 0-1 qemu-system-x86_64 -M microvm"),
        (VmmKind::Qemu, 7)
    );
    assert_eq!(
        k("sudo --user=root -- firecracker"),
        (VmmKind::Firecracker, 3)
    );
    assert_eq!(
        k("env -i A=1 B=2 -u HOME cloud-hypervisor"),
        (VmmKind::CloudHypervisor, 6)
    );
    assert_eq!(k("taskset 0x3 qemu-system-x86_64"), (VmmKind::Qemu, 2));
    assert_eq!(
        k("numactl --cpunodebind=0 -m 0 -l qemu-system-x86_64"),
        (VmmKind::Qemu, 5)
    );
    assert_eq!(k("numactl -m0 -N 0 firecracker"), (VmmKind::Firecracker, 4));
    // Wrappers only, or nothing: no program.
    assert_eq!(k("sudo -u"), (VmmKind::Other, 2));
    assert_eq!(locate::<&str>(&[]), (VmmKind::Other, 0));
}

#[test]
fn qemu_append_extended_added_or_refused() {
    // One argument with spaces and quotes stays one argument.
    let argv = vec![
        "qemu-system-x86_64".to_string(),
        "-kernel".into(),
        "/k".into(),
        "-append".into(),
        "console=ttyS0 dyndbg=\"func a +p\"".into(),
        "-m".into(),
        "512".into(),
    ];
    let r = with_kernel_cmdline(&argv, add_x).unwrap();
    assert_eq!(r.kind, VmmKind::Qemu);
    assert_eq!(r.argv[4], "console=ttyS0 dyndbg=\"func a +p\" x=1");
    assert_eq!(r.argv.len(), argv.len());
    assert_eq!(r.cmdline, r.argv[4]);
    // The last of repeated -append is the one QEMU takes; `--append` too.
    let r = with_kernel_cmdline(
        &words("sudo qemu-system-x86_64 -kernel k -append a --append b"),
        add_x,
    )
    .unwrap();
    assert_eq!(
        r.argv,
        words("sudo qemu-system-x86_64 -kernel k -append a --append")
            .into_iter()
            .chain(["b x=1".to_string()])
            .collect::<Vec<_>>()
    );
    // No -append: one after -kernel.
    let r = with_kernel_cmdline(&words("qemu-system-x86_64 -kernel k -m 1G"), add_x).unwrap();
    assert_eq!(
        r.argv,
        words("qemu-system-x86_64 -kernel k -append x=1 -m 1G")
    );
    // A value that is the word -append is not the option.
    let r = with_kernel_cmdline(&words("qemu-system-x86_64 -name -append -kernel k"), add_x);
    assert!(r.is_ok());
    // No -kernel: the boot loader has the command line.
    let e = with_kernel_cmdline(&words("qemu-system-x86_64 -hda disk.img"), add_x)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            VmmArgsError::NoKernel {
                flag: "-kernel",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("QEMU is given no -kernel"), "{e}");
    // The edit's refusal names the command line.
    let e = with_kernel_cmdline(
        &words("qemu-system-x86_64 -kernel k -append tp_printk"),
        add_x,
    )
    .err()
    .unwrap();
    assert!(
        e.to_string().contains("\"tp_printk\": prints every event"),
        "{e}"
    );
}

#[test]
fn cloud_hypervisor_cmdline_both_spellings() {
    let r = with_kernel_cmdline(
        &words("cloud-hypervisor --kernel k --cmdline=console=hvc0 --cpus boot=1"),
        add_x,
    )
    .unwrap();
    assert_eq!(r.argv[3], "--cmdline=console=hvc0 x=1");
    assert_eq!(r.cmdline, "console=hvc0 x=1");
    let r =
        with_kernel_cmdline(&words("cloud-hypervisor --cmdline quiet --kernel k"), add_x).unwrap();
    assert_eq!(
        r.argv,
        words("cloud-hypervisor --cmdline quiet --kernel k")
            .iter()
            .enumerate()
            .map(|(i, w)| if i == 2 {
                "quiet x=1".to_string()
            } else {
                w.clone()
            })
            .collect::<Vec<_>>()
    );
    // --kernel without --cmdline, either spelling.
    let r = with_kernel_cmdline(
        &words("cloud-hypervisor --kernel=k --memory size=1G"),
        add_x,
    )
    .unwrap();
    assert_eq!(
        r.argv,
        words("cloud-hypervisor --kernel=k --cmdline x=1 --memory size=1G")
    );
    let r = with_kernel_cmdline(&words("cloud-hypervisor --kernel k"), add_x).unwrap();
    assert_eq!(r.argv, words("cloud-hypervisor --kernel k --cmdline x=1"));
    let e = with_kernel_cmdline(&words("cloud-hypervisor --firmware f"), add_x)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            VmmArgsError::NoKernel {
                flag: "--kernel",
                ..
            }
        ),
        "{e}"
    );
    let e = with_kernel_cmdline(&words("cloud-hypervisor --payload kernel=k"), add_x)
        .err()
        .unwrap();
    assert!(matches!(e, VmmArgsError::Payload), "{e}");
}

#[test]
fn firecracker_config_rewritten_into_a_private_copy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("vm.json");
    let original = r#"{"boot-source": {"kernel_image_path": "vmlinux", "boot_args": "console=ttyS0 reboot=k"},
        "drives": [{"drive_id": "rootfs", "path_on_host": "/img/root.ext4", "is_root_device": true},
                   {"drive_id": "data", "path_on_host": "data.img"}]}"#;
    std::fs::write(&cfg, original).unwrap();
    let argv = vec![
        "firecracker".to_string(),
        "--no-api".into(),
        format!("--config-file={}", cfg.display()),
    ];
    assert_eq!(
        kernel_cmdline_of(&argv).unwrap().as_deref(),
        Some("console=ttyS0 reboot=k")
    );
    let r = with_kernel_cmdline(&argv, add_x).unwrap();
    let temp = r.config.as_ref().expect("a private copy");
    assert_eq!(
        r.argv[2],
        format!("--config-file={}", temp.path().display())
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), original);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(temp.path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    // Its directory is this user's alone: nobody else can replace the copy.
    let parent = temp.path().parent().unwrap().to_path_buf();
    let dir_meta = std::fs::symlink_metadata(&parent).unwrap();
    assert!(dir_meta.is_dir());
    assert_eq!(dir_meta.permissions().mode() & 0o777, 0o700);
    use std::os::unix::fs::MetadataExt;
    let euid = crate::proc::effective_uid();
    assert_eq!(dir_meta.uid(), euid);
    let copy: serde_json::Value =
        serde_json::from_slice(&std::fs::read(temp.path()).unwrap()).unwrap();
    assert_eq!(
        copy["boot-source"]["boot_args"],
        "console=ttyS0 reboot=k x=1"
    );
    assert_eq!(copy["drives"][1]["path_on_host"], "data.img");
    assert_eq!(
        kernel_cmdline_of(&r.argv).unwrap().as_deref(),
        Some(r.cmdline.as_str())
    );
    let path = temp.path().to_path_buf();
    drop(r);
    assert!(!path.exists(), "the private copy is removed with it");
    assert!(!parent.exists(), "and its directory");
    assert_eq!(
        disk_images(&argv).unwrap(),
        [PathBuf::from("/img/root.ext4"), PathBuf::from("data.img")]
    );
    // `--config-file PATH` and no boot_args yet.
    std::fs::write(&cfg, r#"{"boot-source": {"kernel_image_path": "k"}}"#).unwrap();
    let argv = vec![
        "firecracker".to_string(),
        "--config-file".into(),
        cfg.display().to_string(),
    ];
    let r = with_kernel_cmdline(&argv, add_x).unwrap();
    assert_eq!(r.cmdline, "x=1");
    assert_ne!(r.argv[2], cfg.display().to_string());
}

#[test]
fn firecracker_api_and_unreadable_configs_refused() {
    let e = with_kernel_cmdline(&words("firecracker --api-sock /tmp/fc.sock"), add_x)
        .err()
        .unwrap();
    assert!(
        matches!(&e, VmmArgsError::ThroughApi { params } if params == "x=1"),
        "{e}"
    );
    assert!(e.to_string().contains("PUT /boot-source"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.json");
    let argv = vec![
        "firecracker".to_string(),
        "--config-file".into(),
        missing.display().to_string(),
    ];
    let e = with_kernel_cmdline(&argv, add_x).err().unwrap();
    assert!(matches!(e, VmmArgsError::Config { .. }), "{e}");
    assert!(e.to_string().contains("none.json"), "{e}");
    assert!(disk_images(&argv).is_err());
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"drives\": []}").unwrap();
    let argv = vec![
        "firecracker".to_string(),
        format!("--config-file={}", bad.display()),
    ];
    let e = with_kernel_cmdline(&argv, add_x).err().unwrap();
    assert!(e.to_string().contains("no \"boot-source\""), "{e}");
    std::fs::write(&bad, "not json").unwrap();
    let e = with_kernel_cmdline(&argv, add_x).err().unwrap();
    assert!(e.to_string().contains("not JSON"), "{e}");
    // A directory is not a config file.
    let argv = vec![
        "firecracker".to_string(),
        "--config-file".into(),
        dir.path().display().to_string(),
    ];
    assert!(with_kernel_cmdline(&argv, add_x).is_err());
}

/// Firecracker's kernel is in its config: found behind wrappers, a
/// relative config and kernel taken from the VMM's directory.
#[test]
fn firecracker_kernel_from_its_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("vm.json"),
        r#"{"boot-source": {"kernel_image_path": "images/vmlinux"}}"#,
    )
    .unwrap();
    let argv = words("taskset -c 0 firecracker --no-api --config-file vm.json");
    assert_eq!(
        firecracker::kernel_of(&argv, dir.path()),
        Some(dir.path().join("images/vmlinux"))
    );
    // From elsewhere the relative config is not there.
    let elsewhere = tempfile::tempdir().unwrap();
    assert_eq!(firecracker::kernel_of(&argv, elsewhere.path()), None);
    // An absolute kernel path stays as it is.
    let abs = dir.path().join("abs.json");
    std::fs::write(&abs, r#"{"boot-source": {"kernel_image_path": "/k"}}"#).unwrap();
    let argv = vec![
        "firecracker".to_string(),
        format!("--config-file={}", abs.display()),
    ];
    assert_eq!(
        firecracker::kernel_of(&argv, elsewhere.path()),
        Some(PathBuf::from("/k"))
    );
    // No kernel named, or not Firecracker: none.
    std::fs::write(&abs, r#"{"boot-source": {}}"#).unwrap();
    assert_eq!(firecracker::kernel_of(&argv, dir.path()), None);
    let qemu = words("qemu-system-x86_64 --config-file vm.json");
    assert_eq!(firecracker::kernel_of(&qemu, dir.path()), None);
}

#[test]
fn other_commands_and_bootscope_refused() {
    let e = with_kernel_cmdline(&words("true"), add_x).err().unwrap();
    assert!(
        e.to_string()
            .contains("add x=1 to its guest's kernel command line"),
        "{e}"
    );
    let e = with_kernel_cmdline(&words("bootscope run --kernel k"), add_x)
        .err()
        .unwrap();
    assert!(matches!(e, VmmArgsError::OwnFlag), "{e}");
}

#[test]
fn qemu_disks_in_every_spelling() {
    let argv = vec![
        "qemu-system-x86_64".to_string(),
        "-drive".into(),
        "id=d0,file=/img/a,,b.raw,format=raw,if=none".into(),
        "-hda".into(),
        "h.img".into(),
        "--drive".into(),
        "file=nbd://host/x,if=virtio".into(),
        "-blockdev".into(),
        "driver=raw,node-name=r,file.driver=file,file.filename=/img/c.raw".into(),
        "-blockdev".into(),
        r#"{"driver":"qcow2","node-name":"q","file":{"driver":"file","filename":"/img/d.qcow2"}}"#
            .into(),
        "-blockdev".into(),
        "driver=file,filename=e.img,node-name=f".into(),
        "-cdrom".into(),
        "x.iso".into(),
    ];
    assert_eq!(
        disk_images(&argv).unwrap(),
        [
            "/img/a,b.raw",
            "h.img",
            "/img/c.raw",
            "/img/d.qcow2",
            "e.img"
        ]
        .map(PathBuf::from)
    );
}

#[test]
fn cloud_hypervisor_and_bootscope_disks() {
    let argv = words(
        "cloud-hypervisor --disk path=/a.raw,readonly=on path=b.raw --net tap=t --disk=path=c.raw --disk vhost_user=true,socket=/s",
    );
    assert_eq!(
        disk_images(&argv).unwrap(),
        ["/a.raw", "b.raw", "c.raw"].map(PathBuf::from)
    );
    let argv = words("bootscope run --disk a.img,readonly --disk=b.img --kernel k");
    assert_eq!(
        disk_images(&argv).unwrap(),
        ["a.img", "b.img"].map(PathBuf::from)
    );
    assert!(disk_images(&words("firecracker --api-sock s"))
        .unwrap()
        .is_empty());
}

#[test]
fn machine_types_cmdlines_and_added_words() {
    let m = |s: &str| qemu_machine(&words(s));
    assert_eq!(
        m("qemu-system-x86_64 -M microvm,rtc=off").as_deref(),
        Some("microvm")
    );
    assert_eq!(
        m("qemu-system-x86_64 -machine type=q35,accel=kvm").as_deref(),
        Some("q35")
    );
    assert_eq!(m("qemu-system-x86_64 -M pc -M q35").as_deref(), Some("q35"));
    assert_eq!(m("qemu-system-x86_64 -m 1G"), None);
    assert_eq!(
        kernel_cmdline_of(&words("qemu-system-x86_64 -append a -append b"))
            .unwrap()
            .as_deref(),
        Some("b")
    );
    assert_eq!(
        kernel_cmdline_of(&words("qemu-system-x86_64 -kernel k")).unwrap(),
        None
    );
    assert_eq!(
        kernel_cmdline_of(&words("bootscope run --cmdline=quiet"))
            .unwrap()
            .as_deref(),
        Some("quiet")
    );
    assert_eq!(added_words("a b", "a b c=1 d"), ["c=1", "d"]);
    let run = VmmRun::of_command(&words("qemu-system-x86_64 -append quiet"), vec!["x".into()]);
    assert_eq!(run.kind, VmmKind::Qemu);
    assert_eq!(run.cmdline.as_deref(), Some("quiet"));
    let json = serde_json::to_string(&run).unwrap();
    assert_eq!(json, r#"{"kind":"qemu","cmdline":"quiet","added":["x"]}"#);
    let back: VmmRun = serde_json::from_str(r#"{"kind":"cloud_hypervisor"}"#).unwrap();
    assert_eq!(back.kind, VmmKind::CloudHypervisor);
}
