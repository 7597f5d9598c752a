//! The one function that evaluates a rule ([`evaluate`]), and [`advise`],
//! which evaluates every rule of the table and ranks the findings by the
//! boot time their evidence accounts for.

pub use bootscope_model::human::{group_digits as thousands, human_ns};
use serde::Serialize;

use crate::evidence::{Evidence, Vmm};
use crate::rules::{Change, Detector, Fix, Need, Risk, Rule, NAMED_INITCALLS, RULES};
use crate::userspace;

/// -ENODEV: the return value of a probe that found no device.
const ENODEV: i64 = -19;

/// Port I/O exit reasons: SVM, VMX, and the PVM fallback's.
const IO_REASONS: [&str; 3] = ["io", "IO_INSTRUCTION", "KVM_EXIT_IO"];

/// Phases whose exits the kernel's boot messages cannot explain.
const AFTER_KERNEL: [&str; 2] = ["userspace", "vmm teardown"];

/// Whether and how a fix can be tried automatically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Triable {
    /// `--prove` tries it.
    Yes,
    /// It weakens security: tried only with `--allow-unsafe`.
    NeedsAllowUnsafe,
    /// A `bootscope run` option: not for another VMM's command.
    BootscopeOnly,
    /// Advice a person acts on.
    No,
}

/// A fix proposed for one finding.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    /// The rule's fix, placeholders filled in.
    pub change: ConcreteChange,
    pub risk: Risk,
    pub gives_up: String,
    pub source: String,
    pub triable: Triable,
    /// The time the finding's evidence accounts for: at most this much
    /// can the fix save. An estimate, not a measurement.
    pub estimate_ns: Option<u64>,
}

/// A change with its placeholders filled in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum ConcreteChange {
    KernelArgs(String),
    RunFlags(Vec<String>),
    Advice(String),
    /// Options of another VMM ([`crate::vmm_terms`]).
    VmmOptions {
        vmm: crate::rules::VmmKind,
        args: Vec<String>,
        replace: Vec<String>,
        machine: Option<String>,
        kernel: String,
    },
}

impl ConcreteChange {
    /// How a person would write it.
    pub fn describe(&self) -> String {
        match self {
            Self::KernelArgs(a) => format!("kernel command line: {a}"),
            Self::RunFlags(f) => format!("bootscope run {}", f.join(" ")),
            Self::Advice(a) => a.clone(),
            Self::VmmOptions {
                vmm,
                args,
                replace,
                machine,
                kernel,
            } => {
                let mut parts = Vec::new();
                if let Some(m) = machine {
                    parts.push(format!("-M ...,{m}"));
                }
                if !args.is_empty() {
                    parts.push(args.join(" "));
                }
                let mut out = format!("{} options: {}", vmm.name(), parts.join(" "));
                if !replace.is_empty() {
                    out.push_str(&format!(" (in place of its {})", replace.join(", ")));
                }
                if !kernel.is_empty() {
                    out.push_str(&format!("; kernel command line: {kernel}"));
                }
                out
            }
        }
    }
}

/// What a rule found.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    pub title: &'static str,
    /// The initcall or function it is about, when one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The evidence, in words and figures from the documents.
    pub evidence: Vec<String>,
    /// The boot time the evidence accounts for (an estimate: exits are
    /// counted x their mean latency, initcalls by their duration).
    pub accounts_ns: Option<u64>,
    /// The phase the time is spent in.
    pub phase: String,
    pub fixes: Vec<Candidate>,
}

/// A rule that could not be checked for want of data.
#[derive(Clone, Debug, Serialize)]
pub struct Unchecked {
    pub rule: &'static str,
    pub title: &'static str,
    pub needs: Need,
    /// What would record the data.
    pub flag: &'static str,
}

/// The evaluation of one rule.
#[derive(Clone, Debug)]
pub enum RuleOutcome {
    /// The evidence is there (one finding, or one per initcall).
    Found(Vec<Finding>),
    /// The data is there and shows nothing to fix.
    Clear,
    /// The data it needs is missing.
    Unchecked(Need),
}

/// Every finding, ranked, and the rules that could not be checked.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    pub findings: Vec<Finding>,
    pub unchecked: Vec<Unchecked>,
    /// Rules checked that found nothing.
    pub clear: Vec<&'static str>,
}

/// Evaluates every rule of [`RULES`] on `ev`.
pub fn advise(ev: &Evidence) -> Advice {
    advise_with(RULES, ev)
}

/// Evaluates `rules` on `ev`: findings ranked by the time they account
/// for (findings without a time last, in table order).
pub fn advise_with(rules: &[Rule], ev: &Evidence) -> Advice {
    let mut advice = Advice {
        findings: Vec::new(),
        unchecked: Vec::new(),
        clear: Vec::new(),
    };
    for rule in rules {
        match evaluate(rule, ev) {
            RuleOutcome::Found(f) => advice.findings.extend(f),
            RuleOutcome::Clear => advice.clear.push(rule.id),
            RuleOutcome::Unchecked(need) => advice.unchecked.push(Unchecked {
                rule: rule.id,
                title: rule.title,
                needs: need,
                flag: need.flag(),
            }),
        }
    }
    advice
        .findings
        .sort_by_key(|f| std::cmp::Reverse(f.accounts_ns.map_or(0, |t| t.saturating_add(1))));
    advice
}

/// Evidence a detector found: before fixes are attached.
pub(crate) struct Found {
    pub(crate) subject: Option<String>,
    pub(crate) evidence: Vec<String>,
    pub(crate) accounts_ns: Option<u64>,
    pub(crate) phase: &'static str,
}

/// Evaluates one rule on `ev`.
pub fn evaluate(rule: &Rule, ev: &Evidence) -> RuleOutcome {
    if let Some(need) = rule.needs.iter().find(|n| !has(ev, **n)) {
        return RuleOutcome::Unchecked(*need);
    }
    if rule.off_with.iter().any(|w| ev.cmdline_has(w)) {
        return RuleOutcome::Clear;
    }
    let found = match rule.detector {
        Detector::ExitsAt { functions, ports } => exits_at(ev, functions, ports),
        Detector::ExitReasons { reasons } => exit_reasons(ev, reasons),
        Detector::SlowInitcalls { names, min_ns } => merged(initcalls(ev, |i| {
            names.contains(&i.name.as_str()) && i.duration_ns >= min_ns
        })),
        Detector::FailedProbes { min_ns } => initcalls(ev, |i| {
            i.ret == ENODEV
                && i.duration_ns >= min_ns
                && !NAMED_INITCALLS.contains(&i.name.as_str())
        }),
        Detector::CompressedInitramfs => compressed_initramfs(ev),
        Detector::CopiedInitrd { min_bytes } => copied_initrd(ev, min_bytes),
        Detector::GuestDecompression => guest_decompression(ev),
        Detector::CompressedVmmKernel { min_ns } => compressed_vmm_kernel(ev, min_ns),
        Detector::SerialPrealloc { min_ns } => serial_prealloc(ev, min_ns),
        Detector::CmdlineLacks { absent } => cmdline_lacks(ev, absent),
        Detector::SlowChainUnits { min_ns } => userspace::slow_chain_units(ev, min_ns),
        Detector::WaitUnits { names } => userspace::wait_units(ev, names),
        Detector::RarelyNeededUnits => userspace::rarely_needed_units(ev),
        Detector::StatusOnConsole => userspace::status_on_console(ev),
        Detector::InitramfsStage { min_ns } => userspace::initramfs_stage(ev, min_ns),
        Detector::RootFsck => userspace::root_fsck(ev),
        Detector::WorkloadBehindTarget { min_ns } => userspace::workload_behind_target(ev, min_ns),
    };
    let findings: Vec<Finding> = found
        .into_iter()
        .map(|f| Finding {
            rule: rule.id,
            title: rule.title,
            fixes: rule
                .fixes
                .iter()
                .filter_map(|fix| candidate(fix, ev, f.subject.as_deref(), f.accounts_ns))
                .collect(),
            subject: f.subject,
            evidence: f.evidence,
            accounts_ns: f.accounts_ns,
            phase: f.phase.into(),
        })
        .filter(|f| !f.fixes.is_empty())
        .collect();
    if findings.is_empty() {
        RuleOutcome::Clear
    } else {
        RuleOutcome::Found(findings)
    }
}

/// Whether `ev` has the data `need` names.
fn has(ev: &Evidence, need: Need) -> bool {
    match need {
        Need::Exits => ev.exits.is_some(),
        Need::ExitSitesOrPorts => ev
            .exits
            .as_ref()
            .is_some_and(|e| e.sites.is_some() || !e.pio.is_empty()),
        Need::Initcalls => ev.initcalls.as_ref().is_some_and(|i| !i.is_empty()),
        Need::Phases => !ev.phases.is_empty(),
        Need::Cmdline => ev.cmdline.is_some(),
        Need::Guest => ev.vmm == Vmm::Bootscope && ev.kernel_format.is_some(),
        Need::Units => ev.units.is_some(),
    }
}

/// The fix as a candidate for this boot; `None` when it is already in
/// place.
fn candidate(
    fix: &Fix,
    ev: &Evidence,
    subject: Option<&str>,
    accounts: Option<u64>,
) -> Option<Candidate> {
    let change = match fix.change {
        Change::KernelArgs(a) => {
            // Only the words the command line lacks; a subject of several
            // units gives the words once for each.
            let args = match subject {
                Some(units) if a.contains("{unit}") => units
                    .split_whitespace()
                    .map(|u| a.replace("{unit}", u))
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => a.replace("{initcall}", subject.unwrap_or_default()),
            };
            let missing: Vec<&str> = args
                .split_whitespace()
                .filter(|w| !ev.cmdline_has(w))
                .collect();
            if missing.is_empty() {
                return None;
            }
            ConcreteChange::KernelArgs(missing.join(" "))
        }
        Change::RunFlags(f) => {
            if flags_given(&ev.vmm_command, f) {
                return None;
            }
            ConcreteChange::RunFlags(f.iter().map(|s| (*s).to_string()).collect())
        }
        Change::Advice(a) => {
            ConcreteChange::Advice(a.replace("{unit}", subject.unwrap_or_default()))
        }
        Change::InVmm(ways) => match crate::vmm_terms::concrete(ways, ev)? {
            ConcreteChange::RunFlags(f) if flags_given(&ev.vmm_command, &as_strs(&f)) => {
                return None
            }
            c => c,
        },
    };
    let triable = match (&change, fix.risk, &ev.vmm) {
        (ConcreteChange::Advice(_), _, _) => Triable::No,
        (_, Risk::Unsafe, _) => Triable::NeedsAllowUnsafe,
        (ConcreteChange::RunFlags(_), _, Vmm::Other) => Triable::BootscopeOnly,
        _ => Triable::Yes,
    };
    Some(Candidate {
        change,
        risk: fix.risk,
        gives_up: fix
            .gives_up
            .replace("{unit}", subject.unwrap_or_default())
            .replace(
                "{what}",
                &crate::userspace::what_it_does(subject.unwrap_or_default()),
            ),
        source: fix.source.into(),
        triable,
        estimate_ns: accounts,
    })
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Whether a command holds the options `flags` (`--console virtio` as
/// those two words or as `--console=virtio`), the last of an option's
/// values counting.
fn flags_given(command: &[String], flags: &[&str]) -> bool {
    let Some((name, value)) = flags.split_first() else {
        return true;
    };
    let Some(value) = value.first() else {
        return command.iter().any(|a| a == name);
    };
    let mut last = None;
    for (i, a) in command.iter().enumerate() {
        if a == name {
            last = command.get(i + 1).map(String::as_str);
        } else if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            last = Some(v);
        }
    }
    last == Some(*value)
}

fn exits_at(ev: &Evidence, functions: &[&str], ports: (u16, u16)) -> Vec<Found> {
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

fn exit_reasons(ev: &Evidence, reasons: &[&str]) -> Vec<Found> {
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

fn initcalls(ev: &Evidence, pick: impl Fn(&crate::evidence::Initcall) -> bool) -> Vec<Found> {
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
fn merged(found: Vec<Found>) -> Vec<Found> {
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

fn compressed_initramfs(ev: &Evidence) -> Vec<Found> {
    let Some(initrd) = &ev.initrd else {
        return Vec::new();
    };
    let Some(pr) = ev
        .initcalls
        .iter()
        .flatten()
        .find(|i| i.name == "populate_rootfs")
    else {
        return Vec::new();
    };
    let compression = initrd.compression.as_deref().unwrap_or("unknown");
    if compression == "none" {
        return Vec::new();
    }
    let size = initrd
        .bytes
        .map(|b| format!(", {} bytes", thousands(b)))
        .unwrap_or_default();
    vec![Found {
        subject: Some("populate_rootfs".into()),
        evidence: vec![format!(
            "populate_rootfs: {} unpacking the initramfs {} ({}{size})",
            human_ns(pr.duration_ns),
            initrd.path,
            if let Some(why) = &initrd.unread {
                format!("not read: {why}")
            } else if compression == "unknown" {
                "not readable here: its compression is unknown".to_string()
            } else {
                format!("{compression}-compressed")
            }
        )],
        accounts_ns: Some(pr.duration_ns),
        phase: "kernel",
    }]
}

fn copied_initrd(ev: &Evidence, min_bytes: u64) -> Vec<Found> {
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

fn guest_decompression(ev: &Evidence) -> Vec<Found> {
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

fn compressed_vmm_kernel(ev: &Evidence, min_ns: u64) -> Vec<Found> {
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

fn serial_prealloc(ev: &Evidence, min_ns: u64) -> Vec<Found> {
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

fn cmdline_lacks(ev: &Evidence, absent: &[&str]) -> Vec<Found> {
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
