//! The kernel and VMM rules' detectors: findings from a boot's exits (by
//! site, port and reason), its initcalls, its initrd and kernel image, its
//! memory set-up and its entropy source. Each names the time it accounts
//! for and the phase it lies in.

use crate::evaluate::{human_ns, thousands, Found};
use crate::evidence::{Evidence, Vmm};
use crate::rules::{Detector, RULES};

/// -ENODEV: the return value of a probe that found no device.
pub(crate) const ENODEV: i64 = -19;

/// Port I/O exit reasons: SVM, VMX, and the PVM fallback's.
const IO_REASONS: [&str; 3] = ["io", "IO_INSTRUCTION", "KVM_EXIT_IO"];

/// Phases whose exits the kernel's boot messages cannot explain.
const AFTER_KERNEL: [&str; 2] = ["userspace", "vmm teardown"];

pub(crate) fn exits_at(ev: &Evidence, functions: &[&str], ports: (u16, u16)) -> Vec<Found> {
    let Some(exits) = &ev.exits else {
        return Vec::new();
    };
    if let Some(sites) = &exits.sites {
        let mut by_function: Vec<(String, String, u64, u64)> = Vec::new();
        for s in sites.iter().filter(|s| {
            !AFTER_KERNEL.contains(&s.phase.as_str()) && IO_REASONS.contains(&s.reason.as_str())
        }) {
            let Some(f) = s.function.as_deref().filter(|f| functions.contains(f)) else {
                continue;
            };
            match by_function
                .iter_mut()
                .find(|(g, r, _, _)| g == f && *r == s.reason)
            {
                Some(row) => {
                    row.2 += s.count;
                    row.3 += s.latency_ns;
                }
                None => by_function.push((f.into(), s.reason.clone(), s.count, s.latency_ns)),
            }
        }
        if by_function.is_empty() {
            return Vec::new();
        }
        by_function.sort_by_key(|r| std::cmp::Reverse(r.2));
        let evidence = by_function
            .iter()
            .map(|(f, reason, count, lat)| {
                format!(
                    "{reason} exits at {f} before userspace: {} of {} exits, about {} by exit count x mean latency",
                    thousands(*count),
                    thousands(exits.total),
                    human_ns(*lat)
                )
            })
            .collect();
        let total: u64 = by_function.iter().map(|r| r.3).sum();
        return vec![Found {
            subject: None,
            evidence,
            accounts_ns: (total > 0).then_some(total),
            phase: "kernel",
        }];
    }
    let count: u64 = exits
        .pio
        .iter()
        .filter(|(p, _)| (u32::from(ports.0)..=u32::from(ports.1)).contains(p))
        .map(|(_, n)| n)
        .sum();
    if count == 0 {
        return Vec::new();
    }
    let io = exits
        .by_reason
        .iter()
        .find(|r| IO_REASONS.contains(&r.reason.as_str()));
    let mean = io.and_then(|r| r.latency_ns.map(|l| l as f64 / r.count.max(1) as f64));
    let accounts = mean.map(|m| (m * count as f64) as u64);
    let mut line = format!(
        "port I/O on {:#x}-{:#x}: {} of {} exits",
        ports.0,
        ports.1,
        thousands(count),
        thousands(exits.total)
    );
    match accounts {
        Some(a) => line.push_str(&format!(
            ", about {} at the io exits' mean latency",
            human_ns(a)
        )),
        None => line.push_str(" (no exit latency recorded: VMX/SVM hosts record it)"),
    }
    vec![Found {
        subject: None,
        evidence: vec![
            line,
            "the whole boot's port I/O (exit sites, `run --exit-sites`, would name the guest functions and phases)".into(),
        ],
        accounts_ns: accounts,
        phase: "kernel",
    }]
}

pub(crate) fn exit_reasons(ev: &Evidence, reasons: &[&str]) -> Vec<Found> {
    let Some(exits) = &ev.exits else {
        return Vec::new();
    };
    let rows: Vec<_> = exits
        .by_reason
        .iter()
        .filter(|r| reasons.contains(&r.reason.as_str()) && r.count > 0)
        .collect();
    if rows.is_empty() {
        return Vec::new();
    }
    let latency: Option<u64> = rows.iter().map(|r| r.latency_ns).sum();
    let evidence = rows
        .iter()
        .map(|r| {
            format!(
                "{} exits: {} of {}{}",
                r.reason,
                thousands(r.count),
                thousands(exits.total),
                r.latency_ns
                    .map(|l| format!(", about {} by exit count x mean latency", human_ns(l)))
                    .unwrap_or_default()
            )
        })
        .collect();
    vec![Found {
        subject: None,
        evidence,
        accounts_ns: latency,
        phase: "kernel",
    }]
}

pub(crate) fn initcalls(
    ev: &Evidence,
    pick: impl Fn(&crate::evidence::Initcall) -> bool,
) -> Vec<Found> {
    ev.initcalls
        .iter()
        .flatten()
        .filter(|i| pick(i))
        .map(|i| Found {
            subject: Some(i.name.clone()),
            evidence: vec![format!(
                "initcall {} ({} level): {}, returned {}{}",
                i.name,
                i.level,
                human_ns(i.duration_ns),
                i.ret,
                if i.ret == ENODEV {
                    " (-ENODEV: no such device)"
                } else {
                    ""
                }
            )],
            accounts_ns: Some(i.duration_ns),
            phase: "kernel",
        })
        .collect()
}

/// One finding of several initcalls of one rule (`pci_arch_init` and
/// `pci_subsys_init` are one PCI scan): their evidence, their time summed.
pub(crate) fn merged(found: Vec<Found>) -> Vec<Found> {
    let mut it = found.into_iter();
    let Some(mut first) = it.next() else {
        return Vec::new();
    };
    for f in it {
        first.evidence.extend(f.evidence);
        first.accounts_ns = first.accounts_ns.zip(f.accounts_ns).map(|(a, b)| a + b);
        if let (Some(a), Some(b)) = (&mut first.subject, f.subject) {
            a.push_str(", ");
            a.push_str(&b);
        }
    }
    vec![first]
}

pub(crate) fn compressed_initramfs(ev: &Evidence) -> Vec<Found> {
    let Some(initrd) = &ev.initrd else {
        return Vec::new();
    };
    let initcalls = ev.initcalls.iter().flatten();
    let Some(pr) = initcalls.clone().find(|i| i.name == "populate_rootfs") else {
        return Vec::new();
    };
    let compression = initrd.compression.as_deref().unwrap_or("unknown");
    // A plain archive first can still have compressed ones after it (a
    // copy was made only if so).
    if compression == "none" && initrd.cpio.is_none() {
        return Vec::new();
    }
    let size = initrd
        .bytes
        .map(|b| format!(", {} bytes", thousands(b)))
        .unwrap_or_default();
    let what = if let Some(why) = &initrd.unread {
        format!("not read: {why}")
    } else if compression == "unknown" {
        "not readable here: its compression is unknown".to_string()
    } else if compression == "none" {
        "compressed archives after an uncompressed one".to_string()
    } else {
        format!("{compression}-compressed")
    };
    // The kernel unpacks asynchronously: populate_rootfs returns at once
    // and the unpacking runs beside the initcalls after it, until the
    // kernel frees the initrd; a module load and /init wait for it.
    let unpacked = initrd
        .freed_ns
        .filter(|&f| pr.start_ns > 0 && f > pr.start_ns)
        .map(|f| (f, f - pr.start_ns));
    let Some((freed, took)) = unpacked.filter(|(_, took)| *took > pr.duration_ns) else {
        return vec![Found {
            subject: Some("populate_rootfs".into()),
            evidence: vec![format!(
                "populate_rootfs: {} unpacking the initramfs {} ({what}{size}); the unpacking's end was not seen (the console's \"Freeing initrd memory\" line: not with quiet)",
                human_ns(pr.duration_ns),
                initrd.path,
            )],
            accounts_ns: Some(pr.duration_ns),
            phase: "kernel",
        }];
    };
    let mut evidence = vec![format!(
        "the initramfs {} ({what}{size}) was unpacked from populate_rootfs to the kernel freeing it (\"Freeing initrd memory\"): {}, beside the initcalls after it",
        initrd.path,
        human_ns(took),
    )];
    // The initcall running when the unpacking ended: one that loads a
    // module waits for the initramfs there.
    if let Some(w) = initcalls
        .filter(|i| i.name != pr.name && i.start_ns > pr.start_ns && i.start_ns < freed)
        .filter(|i| i.start_ns + i.duration_ns >= freed)
        .max_by_key(|i| i.duration_ns)
    {
        evidence.push(format!(
            "{} ran across its end ({}): an initcall that loads a module waits for the initramfs to be unpacked",
            w.name,
            human_ns(w.duration_ns)
        ));
    }
    vec![Found {
        subject: Some("populate_rootfs".into()),
        evidence,
        accounts_ns: Some(took),
        phase: "kernel",
    }]
}

pub(crate) fn copied_initrd(ev: &Evidence, min_bytes: u64) -> Vec<Found> {
    match &ev.initrd {
        Some(i) if !i.mapped && i.bytes.is_some_and(|b| b >= min_bytes) => vec![Found {
            subject: None,
            evidence: vec![format!(
                "initrd {} ({} bytes) copied into guest memory during vmm setup ({})",
                i.path,
                thousands(i.bytes.unwrap_or(0)),
                ev.phase_ns("vmm setup")
                    .map_or_else(|| "phase not recorded".into(), human_ns)
            )],
            accounts_ns: None,
            phase: "vmm setup",
        }],
        _ => Vec::new(),
    }
}

pub(crate) fn guest_decompression(ev: &Evidence) -> Vec<Found> {
    if ev.decompressed_by.as_deref() != Some("guest") {
        return Vec::new();
    }
    let fw = ev.phase_ns("firmware/boot loader");
    vec![Found {
        subject: None,
        evidence: vec![format!(
            "the bzImage's decompressor ran in the guest (KASLR {}){}",
            if ev.kaslr == Some(true) { "on" } else { "off" },
            fw.map(|t| format!("; firmware/boot loader phase {}", human_ns(t)))
                .unwrap_or_default()
        )],
        accounts_ns: fw,
        phase: "firmware/boot loader",
    }]
}

/// The time before the `kernel` phase: the phases before it (firmware,
/// boot loader), when the boot has a `kernel` phase.
fn before_kernel_ns(ev: &Evidence) -> Option<u64> {
    let at = ev.phases.iter().position(|(n, _)| n == "kernel")?;
    Some(ev.phases[..at].iter().map(|(_, d)| *d).sum())
}

pub(crate) fn compressed_vmm_kernel(ev: &Evidence, min_ns: u64) -> Vec<Found> {
    let Some(k) = ev.vmm_kernel.as_ref().filter(|k| k.is_bzimage()) else {
        return Vec::new();
    };
    let Some(ns) = before_kernel_ns(ev).filter(|ns| *ns >= min_ns) else {
        return Vec::new();
    };
    let mut evidence = vec![format!(
        "{}'s -kernel {} is a bzImage: the guest decompresses its payload before the kernel runs; {} from the VM's first exit to the kernel's first port I/O",
        ev.vmm.name(),
        bootscope_model::text::printable(&k.path.display().to_string()),
        human_ns(ns)
    )];
    match (&k.vmlinux, &k.vmlinux_error) {
        (Some(v), _) => evidence.push(format!(
            "its decompressed vmlinux, kept in the kernel cache: {}",
            bootscope_model::text::printable(&v.display().to_string())
        )),
        (None, Some(why)) => evidence.push(format!(
            "no vmlinux was made of it: {}",
            bootscope_model::text::printable(why)
        )),
        (None, None) => {}
    }
    vec![Found {
        subject: None,
        evidence,
        accounts_ns: Some(ns),
        phase: "bootloader",
    }]
}

/// The bzImage given to the VMM that the `compressed-vmm-kernel` rule
/// finds in `ev`: the kernel whose decompressed vmlinux its fix boots.
pub fn kernel_to_decompress(ev: &Evidence) -> Option<&std::path::Path> {
    RULES.iter().find_map(|r| match r.detector {
        Detector::CompressedVmmKernel { min_ns }
            if !compressed_vmm_kernel(ev, min_ns).is_empty() =>
        {
            ev.vmm_kernel.as_ref().map(|k| k.path.as_path())
        }
        _ => None,
    })
}

pub(crate) fn serial_prealloc(ev: &Evidence, min_ns: u64) -> Vec<Found> {
    let (ns, line) = match (ev.prealloc_ns, ev.prealloc_threads.as_slice()) {
        (_, [(name, run)]) if *run >= min_ns => (
            *run,
            format!("one preallocation thread ({name}) ran {}", human_ns(*run)),
        ),
        (Some(ns), []) if ns >= min_ns => (
            ns,
            format!("preallocating guest memory took {}", human_ns(ns)),
        ),
        _ => return Vec::new(),
    };
    vec![Found {
        subject: None,
        evidence: vec![line],
        accounts_ns: Some(ns),
        phase: "vmm setup",
    }]
}

/// Whether the VM had an entropy device: another VMM's command naming
/// one; bootscope's `run` gives its guest a virtio-rng unless told
/// `--no-rng` or `--no-acpi` (the device is described in ACPI), the last
/// of `--rng`/`--no-rng` winning.
fn has_entropy_device(ev: &Evidence) -> bool {
    let cmd = &ev.vmm_command;
    match ev.vmm {
        Vmm::Bootscope => {
            let last = cmd
                .iter()
                .rev()
                .find(|a| *a == "--rng" || *a == "--no-rng")
                .map(String::as_str);
            last == Some("--rng") || last.is_none() && !cmd.iter().any(|a| a == "--no-acpi")
        }
        // Cloud Hypervisor gives every guest a virtio-rng (`--rng`).
        Vmm::CloudHypervisor => true,
        Vmm::Firecracker => bootscope_model::vmm::firecracker::config_path(cmd)
            .and_then(|p| bootscope_model::vmm::firecracker::read_config(&p).ok())
            .is_some_and(|c| c.get("entropy").is_some()),
        Vmm::Qemu | Vmm::Other => cmd.iter().any(|a| a.contains("virtio-rng")),
    }
}

pub(crate) fn cmdline_lacks(ev: &Evidence, absent: &[&str]) -> Vec<Found> {
    if absent.iter().any(|w| ev.cmdline_has(w)) {
        return Vec::new();
    }
    if has_entropy_device(ev) {
        return Vec::new();
    }
    vec![Found {
        subject: None,
        evidence: vec![format!(
            "no entropy device (a virtio-rng) in the VM and none of {} on the kernel's: the kernel seeds its generator from jitter and interrupts, and userspace reading /dev/random or getrandom() may wait (no time attributed: the profile does not show the wait)",
            absent.join(", ")
        )],
        accounts_ns: None,
        phase: "userspace",
    }]
}
