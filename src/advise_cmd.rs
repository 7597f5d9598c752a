//! `bootscope advise`: findings from a timeline and/or profile, and with
//! `--prove` the A/B benches that accept or reject each fix (the logic is
//! in the `bootscope-advise` crate; docs/advise.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bootscope_advise::prove::{
    trials, Budget, FixKind, ProveOptions, ProvePlan, ProveReport, MARKER_NAME,
};
use bootscope_advise::report::{advice_text, AdviseDoc};
use bootscope_advise::target::ProveTarget;
use bootscope_advise::{advise, AdviseError, Evidence};
use bootscope_bench::doc::Machine;
use bootscope_bench::ConsolePattern;

use crate::common::{check_outputs_of, write_output, DEFAULT_CMDLINE, EXIT_FAILURE, EXIT_USAGE};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bootscope advise boot.timeline.json boot.profile.json
  bootscope advise --prove --budget 40 --output advice.json --svg advice.svg -- run --kernel K --initrd I
  bootscope advise qemu.profile.json --prove --marker 'Hello from init' \\
      --prove-command 'qemu-system-x86_64 -M microvm ... -append \"{cmdline}\"'")]
pub struct AdviseArgs {
    /// A boot's timeline (`run --timeline`) and/or profile (`run --output`,
    /// `profile --output`); with --prove and none given, the check boot
    /// records them.
    #[arg(value_name = "TIMELINE-OR-PROFILE.json", num_args = 0..=2)]
    pub documents: Vec<PathBuf>,
    /// Print the JSON document (docs/advise-schema.md) instead of text.
    #[arg(long, short = 'j')]
    pub json: bool,
    /// Write the JSON document to this file.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Write a self-contained SVG report to this file.
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Try each fix that can be tried: an interleaved A/B bench of the boot
    /// after `--` (or --prove-command) with and without it.
    #[arg(long)]
    pub prove: bool,
    /// Another VMM's command line, with {cmdline} where its kernel command
    /// line goes (QEMU: -append "{cmdline}"); a QEMU or Cloud Hypervisor
    /// command with -kernel may leave it out (its own -append/--cmdline is
    /// rewritten). VMM-option fixes rewrite the command itself.
    #[arg(long, value_name = "TEMPLATE", requires = "prove")]
    pub prove_command: Option<String>,
    /// The original kernel command line for --prove-command (default: the
    /// document's).
    #[arg(long, requires = "prove_command")]
    pub cmdline: Option<String>,
    /// The console line (a regular expression) that marks userspace in
    /// --prove-command's boot.
    #[arg(long, value_name = "REGEX", default_value = r"Run \S+ as init process")]
    pub marker: String,
    /// What proving may spend: a number of boots (the check boot
    /// included) or a duration (90s, 15m, 2h).
    #[arg(long, value_name = "N|DURATION", requires = "prove")]
    pub budget: Option<String>,
    /// Try at most this many fixes (the highest ranked).
    #[arg(long, default_value_t = 4)]
    pub max_fixes: usize,
    /// Bench all the fixes to try together first: when that set is
    /// accepted it is the proven command line, and each fix is then
    /// measured alone for its share, as the budget allows. Savings too
    /// small to show one by one on a noisy host can show together.
    #[arg(long, requires = "prove")]
    pub together_first: bool,
    /// Rounds of each A/B bench (a round boots each side once, ABBA); at
    /// 0.05 at least 6. A bench stops early once its outcome is settled.
    #[arg(long, default_value_t = 6)]
    pub runs: u32,
    /// Significance level: a fix is accepted when the signed-rank test on
    /// time to userspace, boots paired by round, gives p below it.
    #[arg(long, default_value_t = 0.05)]
    pub level: f64,
    /// The kinds of fix to try: kernel (command-line words), run (VMM
    /// options: bootscope run's, or the other VMM's own); the others are
    /// reported as not tried.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["kernel", "run"])]
    pub kinds: Vec<KindArg>,
    /// Try only the fixes of these rules (comma-separated rule ids, as
    /// advise lists them and docs/advise.md names them); default: every
    /// rule's, the highest ranked first.
    #[arg(
        long,
        value_name = "RULE,...",
        value_delimiter = ',',
        requires = "prove"
    )]
    pub rules: Vec<String>,
    /// Also try fixes that weaken the guest's security (mitigations=off,
    /// nokaslr, random.trust_cpu=on).
    #[arg(long)]
    pub allow_unsafe: bool,
    /// Kill a boot still going after this many seconds.
    #[arg(long, default_value = "600", value_name = "SECONDS", value_parser = crate::common::parse_seconds)]
    pub run_timeout: Duration,
    /// After `--`: `run` and its arguments, the boot --prove measures.
    #[arg(last = true, value_name = "RUN-ARGS")]
    pub args: Vec<OsString>,
}

/// `--kinds`' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    Kernel,
    Run,
}

/// Runs `bootscope advise`; returns the exit status.
pub fn advise_cmd(args: AdviseArgs) -> i32 {
    match inner(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bootscope: error: {e}");
            if e.is_bad_input() {
                EXIT_USAGE
            } else {
                EXIT_FAILURE
            }
        }
    }
}

fn usage(msg: impl Into<String>) -> AdviseError {
    AdviseError::Usage(msg.into())
}

/// Everything checked before any boot.
fn check_args(args: &AdviseArgs) -> Result<(), AdviseError> {
    let mut outputs: Vec<(&str, &Path)> = Vec::new();
    if let Some(o) = &args.output {
        outputs.push(("--output", o));
    }
    if let Some(s) = &args.svg {
        outputs.push(("--svg", s));
    }
    let inputs: Vec<(&str, &Path)> = args
        .documents
        .iter()
        .map(|d| ("TIMELINE-OR-PROFILE.json", &**d))
        .collect();
    check_outputs_of(&outputs, &inputs).map_err(|e| usage(format!("{e:#}")))?;
    if !args.prove {
        if !args.args.is_empty() {
            return Err(usage(
                "arguments after `--` are the boot --prove measures: add --prove",
            ));
        }
        if args.documents.is_empty() {
            return Err(usage("give a timeline (bootscope run --timeline FILE) or a profile (bootscope profile --output FILE), or --prove with the boot after `--`"));
        }
    } else if args.prove_command.is_some() && !args.args.is_empty() {
        return Err(usage(
            "give the boot either after `--` (bootscope run) or as --prove-command, not both",
        ));
    } else if args.prove_command.is_none() && args.args.is_empty() {
        return Err(usage("--prove needs the boot to measure: `-- run RUN-ARGS...`, or --prove-command 'VMM ... {cmdline} ...'"));
    }
    Ok(())
}

fn target(args: &AdviseArgs, ev: Option<&Evidence>) -> Result<ProveTarget, AdviseError> {
    if let Some(t) = &args.prove_command {
        return ProveTarget::template(t, args.cmdline.clone(), ev.and_then(|e| e.cmdline.clone()));
    }
    let mut run_args: Vec<String> = Vec::new();
    for a in &args.args {
        run_args.push(
            a.to_str()
                .ok_or_else(|| usage(format!("run argument {a:?} is not UTF-8")))?
                .to_string(),
        );
    }
    if run_args.first().is_some_and(|a| a == "run") {
        run_args.remove(0);
    }
    for owned in ["--timeline", "--output", "-o"] {
        if run_args
            .iter()
            .any(|a| a == owned || a.starts_with(&format!("{owned}=")))
        {
            return Err(usage(format!(
                "leave {owned} out of the run arguments: --prove gives every boot its own"
            )));
        }
    }
    if let Some(flag) = run_args
        .iter()
        .find(|a| *a == "--profile" || *a == "--no-profile")
    {
        return Err(usage(format!(
            "leave {flag} out of the run arguments: --prove profiles the check boot (when no \
             documents are given) and no other"
        )));
    }
    Ok(ProveTarget::Bootscope {
        args: run_args,
        default_cmdline: DEFAULT_CMDLINE.into(),
    })
}

fn options(args: &AdviseArgs) -> Result<ProveOptions, AdviseError> {
    let budget = args.budget.as_deref().map(Budget::parse).transpose()?;
    let marker = ConsolePattern::parse(&format!("{MARKER_NAME}={}", args.marker))?;
    let opts = ProveOptions {
        budget,
        runs: args.runs,
        max_fixes: args.max_fixes,
        together_first: args.together_first,
        level: args.level,
        allow_unsafe: args.allow_unsafe,
        run_timeout: args.run_timeout,
        marker,
        kinds: args
            .kinds
            .iter()
            .map(|k| match k {
                KindArg::Kernel => FixKind::Kernel,
                KindArg::Run => FixKind::Run,
            })
            .collect(),
        rules: args.rules.clone(),
    };
    opts.validate()?;
    Ok(opts)
}

fn host_kvm() -> String {
    let flavour = bootscope_vmm::host::kvm_flavour(&bootscope_vmm::host::HostRoot::default());
    serde_json::to_value(flavour)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Reads the documents, and says what they named that was not read.
fn read_evidence(paths: &[std::path::PathBuf]) -> Result<Evidence, AdviseError> {
    let mut ev = Evidence::read(paths)?;
    for note in ev.notes() {
        eprintln!("advise: {note}");
    }
    keep_vmlinux(&mut ev);
    keep_initrd_cpio(&mut ev);
    keep_initrd_modules(&mut ev);
    Ok(ev)
}

/// For a boot whose initramfs stage the `initramfs-stage` rule can time
/// and whose loaded modules were read: its initramfs with only those
/// modules (and what they need) made (or found, verified) in bootscope's
/// cache, and named in `ev`; or why not.
fn keep_initrd_modules(ev: &mut Evidence) {
    let staged = ev.units.as_ref().is_some_and(|u| u.initramfs.is_some());
    let Some(modules) = ev.guest_modules.clone().filter(|_| staged) else {
        return;
    };
    let Some(initrd) = ev.initrd.as_mut().filter(|i| i.unread.is_none()) else {
        return;
    };
    let path = Path::new(&initrd.path).to_path_buf();
    let shown = bootscope_model::text::printable(&initrd.path).to_string();
    let made = bootscope_vmm::kernel::initrd::user_cache_dir()
        .map_err(|e| format!("the initrd cache: {e}"))
        .and_then(|dir| {
            bootscope_vmm::kernel::initrd_modules::cached_modules_cpio(&path, &dir, &modules)
        });
    match made {
        Ok(file) => {
            eprintln!(
                "advise: the initramfs of {shown} with only the boot's {} modules: {}",
                modules.len(),
                bootscope_model::text::printable(&file.display().to_string())
            );
            initrd.modules_cpio = Some(file);
        }
        Err(why) => {
            let why = bootscope_model::text::printable(&why).to_string();
            eprintln!("advise: no archive with only the boot's modules made of {shown}: {why}");
            initrd.modules_cpio_error = Some(why);
        }
    }
}

/// For an initrd whose unpacking the `compressed-initramfs` rule can time
/// (the boot's initcalls have `populate_rootfs`): its initramfs as one
/// uncompressed archive made (or found, verified) in bootscope's cache,
/// and named in `ev`; or why not. A plain archive needs none.
fn keep_initrd_cpio(ev: &mut Evidence) {
    let unpacks = ev
        .initcalls
        .iter()
        .flatten()
        .any(|i| i.name == "populate_rootfs");
    let Some(initrd) = ev
        .initrd
        .as_mut()
        .filter(|i| unpacks && i.unread.is_none() && i.compression.as_deref() != Some("unknown"))
    else {
        return;
    };
    let path = Path::new(&initrd.path).to_path_buf();
    let shown = bootscope_model::text::printable(&initrd.path).to_string();
    let made = bootscope_vmm::kernel::initrd::user_cache_dir()
        .map_err(|e| format!("the initrd cache: {e}"))
        .and_then(|dir| bootscope_vmm::kernel::initrd::cached_cpio(&path, &dir));
    match made {
        Ok(Some(file)) => {
            eprintln!(
                "advise: the initramfs of {shown} as one uncompressed archive: {}",
                bootscope_model::text::printable(&file.display().to_string())
            );
            initrd.cpio = Some(file);
        }
        Ok(None) => {}
        Err(why) => {
            // It names files: shown as text, whatever their bytes.
            let why = bootscope_model::text::printable(&why).to_string();
            eprintln!("advise: no uncompressed archive made of {shown}: {why}");
            initrd.cpio_error = Some(why);
        }
    }
}

/// For a bzImage the `compressed-vmm-kernel` rule finds given to the VMM:
/// its decompressed vmlinux made (or found) in the kernel cache, written
/// there by the cache's safe writer and checked, and named in `ev`; or why
/// not.
fn keep_vmlinux(ev: &mut Evidence) {
    let Some(kernel) = bootscope_advise::evaluate::kernel_to_decompress(ev).map(Path::to_path_buf)
    else {
        return;
    };
    let made = decompressed_vmlinux(&kernel);
    let shown = kernel.display().to_string();
    let shown = bootscope_model::text::printable(&shown);
    match &made {
        Ok(v) => eprintln!(
            "advise: the decompressed vmlinux of {shown}: {}",
            bootscope_model::text::printable(&v.display().to_string())
        ),
        Err(why) => eprintln!("advise: no vmlinux made of {shown}: {why}"),
    }
    if let Some(k) = ev.vmm_kernel.as_mut() {
        match made {
            Ok(v) => k.vmlinux = Some(v),
            Err(why) => k.vmlinux_error = Some(why),
        }
    }
}

/// The kernel cache's file of bzImage `kernel`'s decompressed payload, an
/// ELF with a PVH entry note (what QEMU's `-kernel` boots directly).
fn decompressed_vmlinux(kernel: &Path) -> Result<PathBuf, String> {
    use bootscope_vmm::kernel::{cache, elf};
    use bootscope_vmm::loader::{probe_kernel, KernelFormat};
    let probe = probe_kernel(kernel).map_err(|e| e.to_string())?;
    let (KernelFormat::BzImage, Some(hdr)) = (probe.format, probe.setup_header) else {
        return Err("not a bzImage".into());
    };
    let dir = cache::user_cache_dir().map_err(|e| format!("the kernel cache: {e}"))?;
    let k = cache::host_kernel(kernel, &hdr, Some(&dir)).map_err(|e| e.to_string())?;
    let file = k.cache_file.filter(|f| f.is_file()).ok_or_else(|| {
        k.cache_note
            .unwrap_or_else(|| "the kernel cache did not keep it".into())
    })?;
    let headers = elf::read_headers(k.bytes.as_slice()).map_err(|e| format!("{e:?}"))?;
    if headers.pvh_entry.is_none() {
        return Err(format!(
            "{} has no PVH entry note (a kernel built without CONFIG_PVH): QEMU cannot boot it",
            file.display()
        ));
    }
    Ok(file)
}

fn inner(args: &AdviseArgs) -> Result<i32, AdviseError> {
    check_args(args)?;
    let given = if args.documents.is_empty() {
        None
    } else {
        Some(read_evidence(&args.documents)?)
    };
    if !args.prove {
        let ev = given.expect("checked: documents given");
        let advice = advise(&ev);
        return Ok(emit(args, &ev, &advice, None));
    }
    let target = target(args, given.as_ref())?;
    let opts = options(args)?;
    let interrupts = crate::signals::catch().map_err(|e| usage(format!("{e:#}")))?;
    let work_dir = bootscope_model::output::private_temp_dir("bootscope-advise-").map_err(|e| {
        usage(format!(
            "cannot create a private work directory in {}: {e}",
            std::env::temp_dir().display()
        ))
    })?;
    let exe = std::env::current_exe()
        .map_err(|e| usage(format!("cannot find bootscope's own executable: {e}")))?;
    let plan = ProvePlan {
        run_profiles_itself: crate::common::run_profiles_itself(&exe),
        guest_marks_userspace: std::sync::atomic::AtomicBool::new(false),
        exe,
        target,
        opts,
        machine: Machine::detect(&host_kvm()),
        work_dir: work_dir.path().to_path_buf(),
        stop: interrupts.flag(),
    };
    let words = bootscope_bench::runner::shell_words(&plan.target.argv(&[]));
    let prefix = match plan.target {
        ProveTarget::Bootscope { .. } => "bootscope run ",
        ProveTarget::Template { .. } => "",
    };
    eprintln!("advise: check boot of the original: {prefix}{words}");
    let check = plan.check_boot(given.is_none())?;
    let ev = match given {
        Some(ev) => ev,
        None => read_evidence(&check.documents)?,
    };
    let advice = advise(&ev);
    eprint!("{}", advice_text(&advice));
    let (tried, left) = trials(&advice, &plan.opts, &plan.target);
    eprintln!(
        "advise: {} fix(es) to try, up to {} boots per A/B bench",
        tried.len(),
        2 * plan.opts.runs
    );
    let mut report = plan.prove(check, tried, left, &mut |line: &str| {
        eprintln!("advise: {}", bootscope_model::text::printable(line))
    })?;
    let signal = interrupts.received();
    report.interrupted_by = signal.map(|s| crate::signals::name(s).to_string());
    drop(work_dir);
    let code = emit(args, &ev, &advice, Some(&report));
    if let Some(sig) = signal {
        eprintln!(
            "bootscope: interrupted by {}: what was measured is reported",
            crate::signals::name(sig)
        );
        return Ok(crate::signals::exit_status(sig));
    }
    Ok(code)
}

/// Prints and writes the report; the exit status. Standard output that
/// cannot be written (`>/dev/full`) is exit status 1, once the files are
/// written (src/stdout.rs).
fn emit(
    args: &AdviseArgs,
    ev: &Evidence,
    advice: &bootscope_advise::Advice,
    prove: Option<&ProveReport>,
) -> i32 {
    let doc = AdviseDoc::new(ev, advice, prove);
    let json = doc.to_json();
    let printed = if args.json {
        crate::stdout::print(&json)
    } else {
        let mut text = advice_text(advice);
        if let Some(p) = prove {
            text.push_str(&bootscope_advise::report::prove_text(p));
        }
        crate::stdout::print(text)
    };
    for (path, bytes) in [
        (args.output.as_ref(), json),
        (
            args.svg.as_ref(),
            bootscope_advise::svg::report_svg(&doc).into_bytes(),
        ),
    ] {
        if let Some(path) = path {
            if let Err(e) = write_output(path, &bytes) {
                eprintln!("bootscope: error: {e:#}");
                return EXIT_USAGE;
            }
        }
    }
    printed.map_or_else(crate::stdout::report, |()| 0)
}
