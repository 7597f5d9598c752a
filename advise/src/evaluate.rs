//! The one function that evaluates a rule ([`evaluate`]), and [`advise`],
//! which evaluates every rule of the table and ranks the findings by the
//! boot time their evidence accounts for.

pub use bootscope_model::human::{group_digits as thousands, human_ns};
use serde::Serialize;

use crate::evidence::{Evidence, Vmm};
pub use crate::kernel::kernel_to_decompress;
use crate::kernel::{
    cmdline_lacks, compressed_initramfs, compressed_vmm_kernel, copied_initrd, exit_reasons,
    exits_at, guest_decompression, initcalls, merged, serial_prealloc, ENODEV,
};
use crate::rules::{Change, Detector, Fix, Need, Risk, Rule, NAMED_INITCALLS, RULES};
use crate::userspace;

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
        Detector::ExitsAt {
            functions,
            ports,
            min_ns,
        } => exits_at(ev, functions, ports)
            .into_iter()
            .filter(|f| f.accounts_ns.is_none_or(|ns| ns >= min_ns))
            .collect(),
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
