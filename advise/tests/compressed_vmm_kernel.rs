//! The `compressed-vmm-kernel` rule: a bzImage given to QEMU with
//! `-kernel` and a long time before the kernel's first port I/O; its fix,
//! `-kernel` the decompressed vmlinux, rewrites a `--prove-command`.

use std::path::{Path, PathBuf};

use bootscope_advise::evaluate::{kernel_to_decompress, ConcreteChange};
use bootscope_advise::evidence::{Evidence, Vmm, VmmKernel};
use bootscope_advise::target::ProveTarget;

const RULE: &str = "compressed-vmm-kernel";

/// A file with a bzImage's setup-header magic (`HdrS` at 0x202), or an
/// ELF's.
fn kernel_file(dir: &Path, name: &str, bzimage: bool) -> PathBuf {
    let mut bytes = vec![0u8; 0x400];
    if bzimage {
        bytes[0x202..0x206].copy_from_slice(b"HdrS");
    } else {
        bytes[..4].copy_from_slice(b"\x7fELF");
    }
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn qemu_command(kernel: &Path) -> Vec<String> {
    [
        "qemu-system-x86_64",
        "-M",
        "microvm",
        "-serial",
        "stdio",
        "-kernel",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([kernel.display().to_string()])
    .chain(["-append".into(), "console=ttyS0 quiet".into()])
    .collect()
}

/// Evidence of a QEMU profile booting `kernel`, `before_ns` before the
/// kernel phase.
fn evidence(vmm: Vmm, kernel: &Path, before_ns: u64) -> Evidence {
    let command = qemu_command(kernel);
    Evidence {
        vmm,
        vmm_kernel: VmmKernel::of_qemu(&command),
        vmm_command: command,
        cmdline: Some("console=ttyS0 quiet".into()),
        phases: vec![
            ("bootloader".into(), before_ns),
            ("kernel".into(), 2_000_000_000),
            ("userspace".into(), 100_000_000),
        ],
        ..Evidence::default()
    }
}

fn finding(ev: &Evidence) -> Option<bootscope_advise::Finding> {
    bootscope_advise::advise(ev)
        .findings
        .into_iter()
        .find(|f| f.rule == RULE)
}

#[test]
fn fires_on_a_qemu_bzimage_with_a_long_time_before_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let bz = kernel_file(dir.path(), "vmlinuz", true);
    let mut ev = evidence(Vmm::Qemu, &bz, 15_000_000_000);
    assert_eq!(
        ev.vmm_kernel.as_ref().unwrap().format.as_deref(),
        Some("bzImage")
    );
    assert_eq!(kernel_to_decompress(&ev), Some(bz.as_path()));
    // Without the vmlinux made: advice naming what to boot, not tried.
    let f = finding(&ev).expect("fires");
    assert_eq!(f.accounts_ns, Some(15_000_000_000));
    assert!(
        matches!(&f.fixes[0].change, ConcreteChange::Advice(a) if a.contains("-kernel VMLINUX"))
    );
    // With it: QEMU's -kernel in place of the bzImage.
    let vmlinux = dir.path().join("vmlinux-abc");
    ev.vmm_kernel.as_mut().unwrap().vmlinux = Some(vmlinux.clone());
    let f = finding(&ev).expect("fires");
    assert!(f.evidence.iter().any(|e| e.contains("vmlinux-abc")));
    match &f.fixes[0].change {
        ConcreteChange::VmmOptions {
            vmm,
            args,
            replace,
            machine,
            kernel,
        } => {
            assert_eq!(*vmm, Vmm::Qemu);
            assert_eq!(
                args,
                &["-kernel".to_string(), vmlinux.display().to_string()]
            );
            assert_eq!(replace, &["-kernel".to_string()]);
            assert_eq!((machine, kernel.as_str()), (&None, ""));
        }
        other => panic!("not a QEMU option: {other:?}"),
    }
}

#[test]
fn does_not_fire_without_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let bz = kernel_file(dir.path(), "vmlinuz", true);
    let elf = kernel_file(dir.path(), "vmlinux", false);
    // Short before the kernel: nothing worth the vmlinux.
    let ev = evidence(Vmm::Qemu, &bz, 50_000_000);
    assert!(finding(&ev).is_none());
    assert_eq!(kernel_to_decompress(&ev), None);
    // An ELF given already.
    let ev = evidence(Vmm::Qemu, &elf, 15_000_000_000);
    assert_eq!(
        ev.vmm_kernel.as_ref().unwrap().format.as_deref(),
        Some("elf")
    );
    assert!(finding(&ev).is_none());
    // A kernel file not here: its format unknown.
    let ev = evidence(Vmm::Qemu, &dir.path().join("absent"), 15_000_000_000);
    assert_eq!(ev.vmm_kernel.as_ref().unwrap().format, None);
    assert!(finding(&ev).is_none());
    // No kernel phase: the time before it is not known.
    let mut ev = evidence(Vmm::Qemu, &bz, 15_000_000_000);
    ev.phases.retain(|(n, _)| n != "kernel");
    assert!(finding(&ev).is_none());
    // Not QEMU: no -kernel read.
    let ev = Evidence {
        vmm_kernel: None,
        ..evidence(Vmm::CloudHypervisor, &bz, 15_000_000_000)
    };
    assert!(finding(&ev).is_none());
}

#[test]
fn prove_command_boots_the_vmlinux() {
    let change = ConcreteChange::VmmOptions {
        vmm: Vmm::Qemu,
        args: vec!["-kernel".into(), "/cache/vmlinux-abc".into()],
        replace: vec!["-kernel".into()],
        machine: None,
        kernel: String::new(),
    };
    let t = ProveTarget::template(
        "qemu-system-x86_64 -M microvm -serial stdio -kernel /boot/vmlinuz -initrd i -append '{cmdline}'",
        Some("console=ttyS0 quiet".into()),
        None,
    )
    .unwrap();
    assert_eq!(t.refuses(&change), None);
    let argv: Vec<String> = t
        .argv(&[&change])
        .into_iter()
        .map(|a| a.into_string().unwrap())
        .collect();
    assert!(!argv.iter().any(|a| a == "/boot/vmlinuz"), "{argv:?}");
    let at = argv.iter().position(|a| a == "-kernel").unwrap();
    assert_eq!(argv[at + 1], "/cache/vmlinux-abc");
    assert_eq!(argv.iter().filter(|a| *a == "-kernel").count(), 1);
    assert!(argv.iter().any(|a| a == "console=ttyS0 quiet"), "{argv:?}");
    // The original keeps its bzImage.
    let orig: Vec<String> = t
        .argv(&[])
        .into_iter()
        .map(|a| a.into_string().unwrap())
        .collect();
    assert!(orig.iter().any(|a| a == "/boot/vmlinuz"));
}
