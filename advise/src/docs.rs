//! docs/advise.md's table of rules, generated from [`crate::rules::RULES`]
//! (a test keeps the committed file in sync: regenerate it with
//! `BOOTSCOPE_WRITE_DOCS=1 cargo test --release -p bootscope-advise docs`).

use crate::rules::{Change, Detector, Need, Risk, Way, RULES};

/// The marker lines between which docs/advise.md holds the table.
pub const BEGIN: &str = "<!-- rules: generated from advise/src/rules.rs -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- end of rules -->";

fn detector_words(d: &Detector) -> String {
    match d {
        Detector::ExitsAt {
            functions,
            ports,
            min_ns,
        } => format!(
            "port I/O exits before userspace at {} (exit sites); without sites, port I/O on {:#x}-{:#x} x the io exits' mean latency{}",
            functions.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", "),
            ports.0,
            ports.1,
            if *min_ns > 0 {
                format!("; at least {} ms", min_ns / 1_000_000)
            } else {
                String::new()
            }
        ),
        Detector::ExitReasons { reasons } => format!(
            "exits of reason {} (count x latency)",
            reasons.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
        ),
        Detector::SlowInitcalls { names, min_ns } => format!(
            "initcall {} taking at least {} ms",
            names.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" or "),
            *min_ns as f64 / 1e6
        ),
        Detector::FailedProbes { min_ns } => format!(
            "any other initcall returning -ENODEV after at least {} ms",
            *min_ns as f64 / 1e6
        ),
        Detector::CompressedInitramfs => {
            "the initramfs's unpacking, from `populate_rootfs`'s start to the kernel's `Freeing initrd memory` (mark `serial: initrd freed`, at the line's printk timestamp moved to the initcalls' clock; else `populate_rootfs`'s duration), with an initrd that is not a plain cpio (by its magic bytes, or compressed archives after a plain one), and the initcall that waited for it".into()
        }
        Detector::CopiedInitrd { min_bytes } => {
            format!("an initrd of at least {} MiB copied, not mapped", min_bytes >> 20)
        }
        Detector::GuestDecompression => {
            "`guest.kernel_boot.decompressed_by` is `guest`; the firmware/boot loader phase".into()
        }
        Detector::CompressedVmmKernel { min_ns } => format!(
            "QEMU's `-kernel` a bzImage (`HdrS` at 0x202) and at least {} ms before the `kernel` phase (from the VM's first exit to the kernel's first port I/O)",
            *min_ns as f64 / 1e6
        ),
        Detector::SerialPrealloc { min_ns } => format!(
            "one preallocation thread, or `memory.elapsed_ns`, of at least {} ms",
            *min_ns as f64 / 1e6
        ),
        Detector::SlowChainUnits { min_ns } => format!(
            "the {} slowest units on the critical chain (`units.critical_chain`), each taking at least {} ms to start (targets, devices, the root mount, journald, systemd-udevd (devices reach systemd through it), the wait units and a unit that became active after the one above it on the chain left out)",
            crate::userspace::SLOWEST_ON_CHAIN,
            *min_ns as f64 / 1e6
        ),
        Detector::WaitUnits { names } => format!(
            "unit {} in `units.units`, by its duration",
            names.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" or ")
        ),
        Detector::RarelyNeededUnits => format!(
            "units in `units.units` that a VM rarely needs: {}; one finding for all, their start-up times summed (they overlap: the saving is at most that)",
            crate::userspace::RARELY_NEEDED_WORDS
        ),
        Detector::StatusOnConsole => {
            "the kernel command line's last `console=` is a serial port and the guest ran systemd; the userspace phase's port exits at the 8250 driver's functions (exit sites) when profiled".into()
        }
        Detector::InitramfsStage { min_ns } => format!(
            "the initramfs stage (`units.initramfs`) of at least {} ms",
            *min_ns as f64 / 1e6
        ),
        Detector::RootFsck => {
            "`systemd-fsck-root.service`'s duration, or the initramfs stage's fsck line (no time attributed)".into()
        }
        Detector::WorkloadBehindTarget { min_ns } => format!(
            "the critical chain's target is a service (the workload, found by its marker) that waited for {} on the chain, which was reached at least {} ms after `basic.target`; the units started in between listed",
            crate::userspace::DEFAULT_TARGETS.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(" or "),
            *min_ns as f64 / 1e6
        ),
        Detector::CmdlineLacks { absent } => format!(
            "no entropy device (bootscope: `run --no-rng` or `--no-acpi`; another VMM: none on its command line) and none of {} (no time attributed)",
            absent.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn need_words(n: Need) -> &'static str {
    match n {
        Need::Exits => "exits",
        Need::ExitSitesOrPorts => "exit sites or ports",
        Need::Initcalls => "initcalls",
        Need::Phases => "phases",
        Need::Cmdline => "command line",
        Need::Guest => "timeline",
        Need::Units => "units",
    }
}

fn change_words(c: &Change) -> String {
    match c {
        Change::KernelArgs(a) => format!("kernel: `{a}`"),
        Change::RunFlags(f) => format!("run: `{}`", f.join(" ")),
        Change::Advice(a) => format!("advice: {a}"),
        Change::InVmm(ways) => ways
            .iter()
            .map(|w| {
                let how = match w.way {
                    Way::Manual { how } => how.to_string(),
                    Way::Options {
                        args,
                        replace,
                        machine,
                        kernel,
                    } => {
                        let mut parts = Vec::new();
                        if let Some((props, types)) = machine {
                            parts.push(format!("`-M {},{props}`", types.join("|")));
                        }
                        if !args.is_empty() {
                            parts.push(format!("`{}`", args.join(" ")));
                        }
                        if !replace.is_empty() {
                            parts.push(format!("in place of `{}`", replace.join("`, `")));
                        }
                        if !kernel.is_empty() {
                            parts.push(format!("with `{kernel}`"));
                        }
                        parts.join(" ")
                    }
                };
                format!("{}: {how}", w.vmm.name())
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn risk_words(r: Risk) -> &'static str {
    match r {
        Risk::Low => "low",
        Risk::GivesUp => "gives up",
        Risk::Unsafe => "**unsafe** (`--allow-unsafe`)",
    }
}

/// The Markdown table of every rule and fix.
pub fn rules_markdown() -> String {
    let mut out = String::from(
        "| rule | evidence | needs | fix | risk: what it gives up | source |\n|---|---|---|---|---|---|\n",
    );
    for rule in RULES {
        let needs = rule
            .needs
            .iter()
            .map(|n| need_words(*n))
            .collect::<Vec<_>>()
            .join(", ");
        for (i, fix) in rule.fixes.iter().enumerate() {
            let (id, evidence, needs) = if i == 0 {
                (
                    format!("`{}`: {}", rule.id, rule.title),
                    detector_words(&rule.detector),
                    needs.clone(),
                )
            } else {
                (String::new(), String::new(), String::new())
            };
            out.push_str(&format!(
                "| {id} | {evidence} | {needs} | {} | {}: {} | {} |\n",
                change_words(&fix.change),
                risk_words(fix.risk),
                fix.gives_up,
                fix.source
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/advise.md holds the table the code has.
    #[test]
    fn docs_advise_md_lists_every_rule() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/advise.md");
        let text = std::fs::read_to_string(path).expect("docs/advise.md");
        let (before, rest) = text
            .split_once(BEGIN)
            .expect("docs/advise.md: begin marker");
        let (table, after) = rest.split_once(END).expect("docs/advise.md: end marker");
        let want = format!("\n{}", rules_markdown());
        if table != want {
            if std::env::var_os("BOOTSCOPE_WRITE_DOCS").is_some() {
                std::fs::write(path, format!("{before}{BEGIN}{want}{END}{after}")).unwrap();
                return;
            }
            panic!("docs/advise.md's table of rules is not the code's: regenerate it with BOOTSCOPE_WRITE_DOCS=1 cargo test --release -p bootscope-advise docs");
        }
        for rule in RULES {
            assert!(
                table.contains(&format!("`{}`", rule.id)),
                "{} missing",
                rule.id
            );
        }
    }
}
