//! What `--prove` runs with: the fixes to try, the plan of its boots, and
//! the check boot of the original.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bootscope_bench::doc::Machine;
use bootscope_bench::runner::{self, DEFAULT_CONSOLE_PATTERNS};
use bootscope_bench::{BenchError, ConsolePattern, Side};
use serde::Serialize;

use super::options::{FixKind, ProveOptions};
use super::outcome::{CheckBoot, NotTried};
use crate::error::AdviseError;
use crate::evaluate::{Advice, ConcreteChange, Triable};
use crate::rules::Risk;
use crate::target::ProveTarget;

/// The console pattern that marks userspace in another VMM's boot.
pub const MARKER_NAME: &str = "userspace";

/// A fix to try.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub rule: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub change: ConcreteChange,
    pub risk: Risk,
    pub estimate_ns: Option<u64>,
    /// The phase its finding's time is spent in.
    pub phase: String,
}

/// The fixes to try (in the findings' rank order, each change once), and
/// those left out with the reason.
pub fn trials(
    advice: &Advice,
    opts: &ProveOptions,
    target: &ProveTarget,
) -> (Vec<Trial>, Vec<NotTried>) {
    let mut tried = Vec::new();
    let mut left = Vec::new();
    let mut seen = BTreeSet::new();
    let allowed = |rule: &str| opts.rules.is_empty() || opts.rules.iter().any(|r| r == rule);
    // A fix two rules propose (`quiet`) is tried under the one --rules
    // names, wherever that one is listed.
    let wanted: BTreeSet<String> = advice
        .findings
        .iter()
        .filter(|f| allowed(f.rule))
        .flat_map(|f| f.fixes.iter().map(|c| format!("{:?}", c.change)))
        .collect();
    for f in &advice.findings {
        for c in &f.fixes {
            let key = format!("{:?}", c.change);
            if (!allowed(f.rule) && wanted.contains(&key)) || !seen.insert(key) {
                continue;
            }
            let reason = match (c.triable, target) {
                (Triable::No, _) => Some("advice: cannot be tried automatically".to_string()),
                (Triable::NeedsAllowUnsafe, _) if !opts.allow_unsafe => {
                    Some("weakens security: tried only with --allow-unsafe".into())
                }
                (Triable::BootscopeOnly, _) | (_, ProveTarget::Template { .. })
                    if matches!(c.change, ConcreteChange::RunFlags(_)) =>
                {
                    Some(
                        "a bootscope run option: the template changes only the kernel command line"
                            .into(),
                    )
                }
                (_, target) if target.refuses(&c.change).is_some() => target.refuses(&c.change),
                _ if FixKind::of(&c.change).is_some_and(|k| !opts.kinds.contains(&k)) => {
                    Some("not among the --kinds to try".into())
                }
                _ if !allowed(f.rule) => Some("not among the --rules to try".into()),
                _ if tried.len() >= opts.max_fixes => {
                    Some(format!("beyond --max-fixes {}", opts.max_fixes))
                }
                _ => None,
            };
            match reason {
                Some(reason) => left.push(NotTried {
                    rule: f.rule,
                    change: c.change.clone(),
                    reason,
                }),
                None => tried.push(Trial {
                    rule: f.rule,
                    subject: f.subject.clone(),
                    change: c.change.clone(),
                    risk: c.risk,
                    estimate_ns: c.estimate_ns,
                    phase: f.phase.clone(),
                }),
            }
        }
    }
    (tried, left)
}

/// What `--prove` runs with.
pub struct ProvePlan {
    /// The bootscope executable.
    pub exe: PathBuf,
    pub target: ProveTarget,
    pub opts: ProveOptions,
    pub machine: Machine,
    /// Private directory for the runs' files.
    pub work_dir: PathBuf,
    pub stop: Arc<AtomicBool>,
    /// This bootscope's `run` profiles itself (has `--no-profile`).
    pub run_profiles_itself: bool,
    /// Set by the check boot when the guest marks userspace itself (port
    /// 0x80, port 0xf4, the boot timer): every boot then runs with
    /// `--no-default-patterns`, so that time to userspace ends at that
    /// mark on both sides, not at a console line a fix such as `quiet`
    /// hides.
    pub guest_marks_userspace: AtomicBool,
}

/// The guest's own userspace mark in a timeline, when it wrote one.
fn guest_userspace_mark(t: &bootscope_model::timeline::Timeline) -> Option<String> {
    t.marks
        .iter()
        .find(|m| {
            m.name.starts_with("port 0x80: userspace")
                || m.name.starts_with("port 0xf4: ") && m.value == Some(7)
                || m.name.starts_with("boot timer:")
        })
        .map(|m| m.name.clone())
}

/// Arguments as strings, for reports.
pub(crate) fn words(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// What the A/B benches measure, by bench's metric name: the time to the
/// workload's mark when the check boot has one (a systemd guest's
/// `port 0x80: userspace 0x60`, after the `userspace` phase opened at
/// systemd's start), else the time to userspace (bootscope) or to the
/// `--marker` line (another VMM).
pub(crate) fn metric_of(target: &ProveTarget, check: &CheckBoot) -> String {
    match (target, &check.workload_mark) {
        (ProveTarget::Bootscope { .. }, Some(mark)) => bootscope_bench::metrics::mark_metric(mark),
        (ProveTarget::Bootscope { .. }, None) => "time_to_userspace".into(),
        (ProveTarget::Template { .. }, _) => "console:userspace".into(),
    }
}

/// What a metric of [`metric_of`] is the time to, in words: `userspace`,
/// the mark's name, or the `--marker` line.
pub(crate) fn measured_to(metric: &str) -> String {
    match metric {
        "time_to_userspace" => "userspace".into(),
        "console:userspace" => "the --marker line".into(),
        m => m.strip_prefix("mark:").unwrap_or(m).to_string(),
    }
}

/// The guest's own userspace mark, when it comes after the mark that
/// opened the `userspace` phase: the mark of a workload that a systemd
/// guest starts (the phase opens at `systemd: started`, placed from its
/// journal). `None` when the guest's mark opens the phase itself.
fn workload_mark(own: &str, facts: &bootscope_bench::metrics::TimelineFacts) -> Option<String> {
    let opened = facts.userspace_mark.as_deref()?;
    let at = |name: &str| {
        facts
            .metrics
            .get(&bootscope_bench::metrics::mark_metric(name))
            .copied()
    };
    (opened != own && at(own)? > at(opened)?).then(|| own.to_string())
}

impl ProvePlan {
    pub(crate) fn metric(&self, check: &CheckBoot) -> String {
        metric_of(&self.target, check)
    }

    /// A side of the A/B benches. A guest that marks userspace itself
    /// boots with `--no-default-patterns`, so that time to userspace ends
    /// at its mark on both sides; one whose workload marks it after the
    /// phase opens (`check` has a workload mark) keeps the console's
    /// patterns: the time to the mark does not depend on them, and its
    /// journal is placed on the timeline by the `Run /init` line.
    pub(crate) fn side(&self, changes: &[&ConcreteChange], check: &CheckBoot) -> Side {
        let mut argv = self.target.argv(changes);
        if self.guest_marks_userspace.load(Ordering::SeqCst)
            && check.workload_mark.is_none()
            && !argv.iter().any(|a| a == "--no-default-patterns")
        {
            argv.push("--no-default-patterns".into());
        }
        match self.target {
            ProveTarget::Bootscope { .. } => Side::Bootscope(argv),
            ProveTarget::Template { .. } => Side::Command(argv),
        }
    }

    pub(crate) fn patterns(&self) -> Result<Vec<ConsolePattern>, AdviseError> {
        let mut p = DEFAULT_CONSOLE_PATTERNS
            .iter()
            .map(|s| ConsolePattern::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        if matches!(self.target, ProveTarget::Template { .. }) {
            p.push(self.opts.marker.clone());
        }
        Ok(p)
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The check boot's command line, and the documents it writes.
    fn check_argv(&self, record: bool) -> (Vec<OsString>, Vec<PathBuf>) {
        let timeline = self.work_dir.join("check.timeline.json");
        let profile = self.work_dir.join("check.profile.json");
        let mut argv: Vec<OsString> = Vec::new();
        let mut documents = Vec::new();
        match &self.target {
            ProveTarget::Bootscope { .. } => {
                argv.extend([self.exe.clone().into_os_string(), "run".into()]);
                argv.extend(self.target.argv(&[]));
                argv.extend([
                    "--no-summary".into(),
                    "--timeline".into(),
                    timeline.clone().into(),
                ]);
                documents.push(timeline.clone());
                if record {
                    if self.run_profiles_itself {
                        argv.extend(["--output".into(), profile.clone().into()]);
                        if matches!(self.machine.host_kvm.as_str(), "vmx" | "svm") {
                            argv.push("--exit-sites".into());
                        }
                        documents.push(profile.clone());
                    }
                    if !argv.iter().any(|a| a == "--initcalls") {
                        argv.push("--initcalls".into());
                    }
                } else if self.run_profiles_itself {
                    argv.push("--no-profile".into());
                }
            }
            ProveTarget::Template { .. } => {
                if record {
                    argv.extend([
                        self.exe.clone().into_os_string(),
                        "profile".into(),
                        "--no-summary".into(),
                        "--output".into(),
                        profile.clone().into(),
                    ]);
                    // The initcalls, in the VMM's own options
                    // (src/profile_launch.rs), for the rules that need them.
                    if self.target.vmm() != bootscope_model::vmm::VmmKind::Other {
                        argv.push("--initcalls".into());
                    }
                    argv.push("--".into());
                    documents.push(profile.clone());
                }
                argv.extend(self.target.argv(&[]));
            }
        }
        (argv, documents)
    }

    /// Boots the original once (bench's runner): it must end cleanly and
    /// reach userspace, else [`AdviseError::DoesNotBoot`]. With `record`,
    /// a bootscope boot also writes its timeline and profile with exit
    /// sites (VMX/SVM) and initcalls, and another VMM's boot runs under
    /// `bootscope profile`: the evidence when no document was given.
    pub fn check_boot(&self, record: bool) -> Result<CheckBoot, AdviseError> {
        let (argv, documents) = self.check_argv(record);
        let timeline = self.work_dir.join("check.timeline.json");
        let out = runner::execute(
            &argv,
            &self.patterns()?,
            self.opts.run_timeout,
            Some(&self.stop),
        )?;
        let cmd = runner::shell_words(&argv);
        let fail = |why: String| {
            let tail = out.stderr_tail.trim();
            AdviseError::DoesNotBoot(format!(
                "{cmd}: {why}{}",
                if tail.is_empty() {
                    String::new()
                } else {
                    format!("; its standard error ends: {tail}")
                }
            ))
        };
        if out.timed_out {
            return Err(fail(format!(
                "still running after {} s (--run-timeout)",
                self.opts.run_timeout.as_secs()
            )));
        }
        if out.exit_code != Some(0) {
            return Err(fail(match out.exit_code {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".into(),
            }));
        }
        let mark = match &self.target {
            ProveTarget::Bootscope { .. } => {
                let hint = bootscope_bench::metrics::TIMELINE_HINT;
                let t = bootscope_bench::schema::read_timeline(&timeline, hint).map_err(|e| {
                    fail(match e {
                        BenchError::Input(e) => format!("no timeline ({e})"),
                        e => e.to_string(),
                    })
                })?;
                let facts = bootscope_bench::metrics::from_timeline(&t);
                if !facts.clean {
                    return Err(fail(format!("unclean end: {}", facts.detail)));
                }
                if let Some(own) = guest_userspace_mark(&t) {
                    self.guest_marks_userspace.store(true, Ordering::SeqCst);
                    let workload_mark = workload_mark(&own, &facts);
                    return Ok(CheckBoot {
                        wall_ns: u64::try_from(out.wall.as_nanos()).unwrap_or(u64::MAX),
                        userspace_mark: match &workload_mark {
                            Some(_) => facts.userspace_mark.unwrap_or_default(),
                            None => own,
                        },
                        workload_mark,
                        documents,
                    });
                }
                facts.userspace_mark.ok_or_else(|| {
                    fail("it never reached userspace (no userspace mark in its timeline)".into())
                })?
            }
            ProveTarget::Template { .. } => {
                if !out.console.contains_key(MARKER_NAME) {
                    return Err(fail(format!(
                        "its console never printed the userspace line {:?} (--marker)",
                        self.opts.marker.regex.as_str()
                    )));
                }
                format!("console: {}", self.opts.marker.regex.as_str())
            }
        };
        Ok(CheckBoot {
            wall_ns: u64::try_from(out.wall.as_nanos()).unwrap_or(u64::MAX),
            userspace_mark: mark,
            workload_mark: None,
            documents,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::evaluate::advise;
    use crate::evidence::Evidence;

    #[test]
    fn the_guests_own_userspace_mark() {
        let t = |marks: serde_json::Value| {
            let doc = serde_json::json!({"schema": "bootscope.timeline", "version": 1, "marks": marks, "phases": []});
            bootscope_model::timeline::Timeline::parse(&doc).unwrap()
        };
        let marks = serde_json::json!([
            {"name": "serial: run init", "source": "serial", "t_ns": 5},
            {"name": "port 0x80: userspace 0x60", "source": "debug_port", "t_ns": 9, "value": 96}
        ]);
        assert_eq!(
            guest_userspace_mark(&t(marks)).as_deref(),
            Some("port 0x80: userspace 0x60")
        );
        let marks =
            serde_json::json!([{"name": "serial: run init", "source": "serial", "t_ns": 5}]);
        assert_eq!(guest_userspace_mark(&t(marks)), None);
    }

    /// A test plan booting bootscope with `args`.
    pub(crate) fn plan(args: &[&str]) -> ProvePlan {
        ProvePlan {
            exe: PathBuf::from("/bin/false"),
            target: ProveTarget::Bootscope {
                args: args.iter().map(|a| a.to_string()).collect(),
                default_cmdline: "console=ttyS0".into(),
            },
            opts: ProveOptions {
                budget: None,
                runs: 6,
                max_fixes: 4,
                together_first: false,
                level: 0.05,
                allow_unsafe: false,
                run_timeout: Duration::from_secs(1),
                marker: ConsolePattern::parse("userspace=x").unwrap(),
                kinds: FixKind::ALL.to_vec(),
                rules: Vec::new(),
            },
            machine: Machine::default(),
            work_dir: std::env::temp_dir(),
            stop: Arc::new(AtomicBool::new(false)),
            run_profiles_itself: false,
            guest_marks_userspace: AtomicBool::new(true),
        }
    }

    /// A check boot reaching `opened`, with the workload's mark `workload`.
    pub(crate) fn check(opened: &str, workload: Option<&str>) -> CheckBoot {
        CheckBoot {
            wall_ns: 1,
            userspace_mark: opened.into(),
            workload_mark: workload.map(str::to_string),
            documents: Vec::new(),
        }
    }

    /// The facts of a timeline whose userspace phase opens at `opened`.
    fn facts(opened: &str, marks: serde_json::Value) -> bootscope_bench::metrics::TimelineFacts {
        let start = marks
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == opened)
            .map(|m| m["t_ns"].as_u64().unwrap())
            .unwrap();
        let doc = serde_json::json!({
            "schema": "bootscope.timeline", "version": 3, "marks": marks,
            "phases": [{"name": "userspace", "start_ns": start, "end_ns": start + 1,
                        "duration_ns": 1, "from": opened}]
        });
        let t = bootscope_model::timeline::Timeline::parse(&doc).unwrap();
        bootscope_bench::metrics::from_timeline(&t)
    }

    #[test]
    fn a_systemd_guest_is_measured_to_its_workloads_mark() {
        const MARKER: &str = "port 0x80: userspace 0x60";
        // A disk boot: the phase opens at systemd's start, the workload
        // writes its marker seconds later.
        let disk = facts(
            "systemd: started",
            serde_json::json!([
                {"name": "systemd: started", "source": "guest_clock", "t_ns": 4_000},
                {"name": MARKER, "source": "debug_port", "t_ns": 9_000, "value": 96}
            ]),
        );
        assert_eq!(workload_mark(MARKER, &disk).as_deref(), Some(MARKER));
        // The default guest: its marker opens the phase itself.
        let initramfs = facts(
            MARKER,
            serde_json::json!([
                {"name": "serial: run init", "source": "serial", "t_ns": 2_000},
                {"name": MARKER, "source": "debug_port", "t_ns": 3_000, "value": 96}
            ]),
        );
        assert_eq!(workload_mark(MARKER, &initramfs), None);
        let p = plan(&["--disk", "d.raw"]);
        let to_workload = check("systemd: started", Some(MARKER));
        let to_userspace = check(MARKER, None);
        assert_eq!(p.metric(&to_workload), "mark:port 0x80: userspace 0x60");
        assert_eq!(measured_to(&p.metric(&to_workload)), MARKER);
        assert_eq!(p.metric(&to_userspace), "time_to_userspace");
        assert_eq!(measured_to(&p.metric(&to_userspace)), "userspace");
        let template = ProveTarget::template("qemu -append {cmdline}", None, None).unwrap();
        assert_eq!(metric_of(&template, &to_workload), "console:userspace");
        // The console's patterns stay on for the disk boot (they place its
        // journal), off where the guest's mark ends time to userspace.
        let argv = |side: Side| match side {
            Side::Bootscope(a) => words(&a),
            Side::Command(_) => panic!("a bootscope side"),
        };
        let no_defaults = "--no-default-patterns".to_string();
        assert!(!argv(p.side(&[], &to_workload)).contains(&no_defaults));
        assert!(argv(p.side(&[], &to_userspace)).contains(&no_defaults));
    }

    /// Advice on a loud lab boot (tests/fixtures/lab-sites-loud), the
    /// options of a short proof and a QEMU template.
    fn loud_lab_boot() -> (crate::evaluate::Advice, ProveOptions, ProveTarget) {
        let ev = Evidence::read(&[std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/lab-sites-loud.profile.json"
        ))])
        .unwrap();
        let opts = ProveOptions {
            budget: None,
            runs: 2,
            max_fixes: 4,
            together_first: false,
            level: 0.05,
            allow_unsafe: false,
            run_timeout: Duration::from_secs(1),
            marker: ConsolePattern::parse("userspace=x").unwrap(),
            kinds: FixKind::ALL.to_vec(),
            rules: Vec::new(),
        };
        let template = ProveTarget::template("qemu -append {cmdline}", None, None).unwrap();
        (advise(&ev), opts, template)
    }

    #[test]
    fn trials_leave_out_advice_unsafe_and_run_options_of_a_template() {
        let (advice, opts, template) = loud_lab_boot();
        let (tried, left) = trials(&advice, &opts, &template);
        let tried: Vec<_> = tried.iter().map(|t| t.change.describe()).collect();
        assert_eq!(tried, ["kernel command line: quiet"]);
        let reasons: Vec<_> = left
            .iter()
            .map(|n| (n.change.describe(), n.reason.as_str()))
            .collect();
        assert!(
            reasons.contains(&(
                "bootscope run --console virtio".into(),
                "a bootscope run option: the template changes only the kernel command line"
            )),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|(c, r)| c.contains("mitigations=off") && r.contains("--allow-unsafe")),
            "{reasons:?}"
        );
        let only_run = ProveOptions {
            kinds: vec![FixKind::Run],
            ..opts.clone()
        };
        let bootscope = ProveTarget::Bootscope {
            args: Vec::new(),
            default_cmdline: String::new(),
        };
        let (tried, left) = trials(&advice, &only_run, &bootscope);
        let tried: Vec<_> = tried.iter().map(|t| t.change.describe()).collect();
        assert_eq!(tried, ["bootscope run --console virtio"]);
        assert!(
            left.iter()
                .any(|n| n.change.describe() == "kernel command line: quiet"
                    && n.reason == "not among the --kinds to try"),
            "{left:?}"
        );
        let opts = ProveOptions {
            allow_unsafe: true,
            max_fixes: 1,
            together_first: false,
            ..opts
        };
        let (tried, left) = trials(&advice, &opts, &template);
        assert_eq!(tried.len(), 1);
        assert!(
            left.iter().any(|n| n.reason == "beyond --max-fixes 1"),
            "{left:?}"
        );
    }

    #[test]
    fn rules_pick_the_fixes_tried() {
        let (advice, opts, template) = loud_lab_boot();
        // --rules: only the fixes of the rules named.
        let is_quiet = |d: String| d == "kernel command line: quiet";
        let quiet_rule = advice
            .findings
            .iter()
            .find(|f| f.fixes.iter().any(|c| is_quiet(c.change.describe())))
            .unwrap()
            .rule;
        let its_rule = ProveOptions {
            rules: vec![quiet_rule.into()],
            ..opts.clone()
        };
        let (one, _) = trials(&advice, &its_rule, &template);
        assert!(one.iter().any(|t| is_quiet(t.change.describe())));
        assert!(one.iter().all(|t| t.rule == quiet_rule));
        let other_rule = ProveOptions {
            rules: vec!["kaslr".into()],
            ..opts.clone()
        };
        let (_, left_out) = trials(&advice, &other_rule, &template);
        assert!(
            left_out.iter().any(
                |n| is_quiet(n.change.describe()) && n.reason == "not among the --rules to try"
            ),
            "{left_out:?}"
        );
        // `quiet` is also systemd-status-on-serial's fix, listed after the
        // serial console's: named alone, that rule still tries it.
        let mut also = advice.clone();
        let mut status = also
            .findings
            .iter()
            .find(|f| f.rule == quiet_rule)
            .unwrap()
            .clone();
        status.rule = "systemd-status-on-serial";
        status.fixes.retain(|c| is_quiet(c.change.describe()));
        also.findings.push(status);
        let second = ProveOptions {
            rules: vec!["systemd-status-on-serial".into()],
            ..opts.clone()
        };
        let (tried, left_out) = trials(&also, &second, &template);
        assert!(
            tried
                .iter()
                .any(|t| is_quiet(t.change.describe()) && t.rule == "systemd-status-on-serial"),
            "{tried:?}"
        );
        assert!(!left_out.iter().any(|n| is_quiet(n.change.describe())));
        let mut unknown = opts.clone();
        unknown.rules = vec!["no-such-rule".into()];
        unknown.runs = 6;
        let e = unknown.validate().unwrap_err().to_string();
        assert!(
            e.contains("no rule is named \"no-such-rule\"") && e.contains("slow-unit-on-chain"),
            "{e}"
        );
    }
}
