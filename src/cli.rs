use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{ArgMatches, CommandFactory, Parser, Subcommand};

use bootscope_model::size::parse_size;
use bootscope_vmm::console::{merge_patterns, MilestonePattern};
use bootscope_vmm::host::{self, HostRoot, KvmFlavour};
use bootscope_vmm::timeline::{vmm_marks, Clock, Recorder, StopReason, TimelineDoc};
use bootscope_vmm::vm::{self, VmConfig, VmError};

/// Exit status for bad input.
pub const EXIT_USAGE: i32 = 2;
/// Exit status for a failed run.
pub const EXIT_FAILURE: i32 = 1;

/// The default kernel command line: serial console, reset through the
/// keyboard controller, no PCI probing (there is no PCI bus), and no port 0x80
/// I/O delays (they would pollute the boot-marker port).
pub const DEFAULT_CMDLINE: &str =
    "console=ttyS0 reboot=k panic=-1 pci=off io_delay=none i8042.noaux i8042.nomux i8042.dumbkbd";

#[derive(Parser)]
#[command(
    name = "bootscope",
    version,
    about = "See, and shorten, how a virtual machine boots"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a kernel under bootscope's own VMM and print its boot timeline.
    Run(RunArgs),
    /// Say what this host offers (KVM flavour, tracefs, BPF, BTF, NUMA, huge
    /// pages, QEMU).
    Doctor {
        /// Print JSON instead of a table.
        #[arg(long, short = 'j')]
        json: bool,
    },
    /// Run `bootscope ARGS...` inside the lab: QEMU's emulator with nested
    /// real KVM (AMD SVM + NPT).
    Lab(LabArgs),
    /// Boot the built-in default guest on host KVM if it can boot a stock
    /// kernel, else in the lab, and print its timeline.
    Demo {
        /// Where to write the timeline JSON.
        #[arg(long)]
        timeline: Option<PathBuf>,
    },
    /// Profile a running process (--pid) or a command it launches (after
    /// `--`) with eBPF: exit reasons, page faults, threads, NUMA, boot phases.
    Profile(crate::profile_cmd::ProfileArgs),
    /// Boot repeatedly (optionally two configurations, interleaved) and
    /// report per-phase and per-exit-reason statistics (docs/bench-schema.md).
    Bench(crate::bench_cmd::BenchArgs),
    /// Compare two benchmarks metric by metric, with significance, in plain
    /// words; or two profiles by exit reason and exit site.
    Compare(crate::bench_cmd::CompareArgs),
    /// Check a benchmark against a baseline: exit status 1 on a regression
    /// (docs/ci.md).
    Check(crate::bench_cmd::CheckArgs),
    /// Follow every VMM on this host (any process holding a KVM VM) with
    /// eBPF and serve its exits, latencies, page faults, preallocation and
    /// boot phases as Prometheus metrics (docs/export.md).
    Exporter(crate::exporter::ExporterArgs),
    /// The initcalls of a boot under another VMM, from `initcall_debug`
    /// lines on its guest's console (`run --initcalls` needs no console
    /// lines).
    Initcalls(crate::initcalls_cmd::InitcallsArgs),
    /// Draw a boot timeline, profile or benchmark as an SVG picture.
    Plot(crate::bench_cmd::PlotArgs),
    /// Convert a profile or a boot timeline to JSON, CSV, Prometheus text or
    /// a Chrome trace for ui.perfetto.dev (docs/export.md).
    Export {
        /// Output format.
        #[arg(long, value_parser = bootscope_profiler::export::FORMAT_NAMES, required_unless_present = "json")]
        format: Option<String>,
        /// The same as --format json.
        #[arg(long, short = 'j', conflicts_with = "format")]
        json: bool,
        /// CSV table (with --format csv; default exits).
        #[arg(long, value_parser = bootscope_profiler::export::CSV_TABLE_NAMES)]
        table: Option<String>,
        /// Write to this file (atomically) instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// A profile (bootscope profile --output) or a boot timeline
        /// (bootscope run --timeline).
        input: PathBuf,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish or
    /// powershell) to standard output.
    #[command(after_help = "Examples:
  bootscope completions bash > /etc/bash_completion.d/bootscope
  bootscope completions zsh > ~/.zfunc/_bootscope
  bootscope completions fish > ~/.config/fish/completions/bootscope.fish")]
    Completions {
        /// The shell to complete in.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (roff): bootscope.1 and one per subcommand
    /// (bootscope-run.1, ...), into a directory; the Debian package installs
    /// them.
    #[command(after_help = "Example:
  bootscope man --out-dir /usr/local/share/man/man1 && mandb -q")]
    Man {
        /// The directory to write the pages into (created if missing).
        #[arg(long, value_name = "DIR")]
        out_dir: PathBuf,
    },
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// Kernel image (bzImage or ELF vmlinux with a PVH note); default: the
    /// Debian kernel with the project's default initramfs.
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// Initial ramdisk.
    #[arg(long)]
    initrd: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, default_value = DEFAULT_CMDLINE)]
    cmdline: String,
    /// Guest memory (e.g. 512M, 2G; a bare number is MiB).
    #[arg(long)]
    memory: Option<String>,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1)]
    vcpus: u32,
    /// Where the guest console goes: stdout, null or a file path.
    #[arg(long, default_value = "stdout")]
    serial: String,
    /// Write the boot timeline (JSON, schema in docs/timeline-schema.md).
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Extra console milestone NAME=REGEX (repeatable; a default's name
    /// replaces it).
    #[arg(long = "serial-pattern", value_name = "NAME=REGEX")]
    serial_patterns: Vec<String>,
    /// Do not match the built-in console milestones.
    #[arg(long)]
    no_default_patterns: bool,
    /// Stop the guest after this many seconds (exit status 1).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    timeout: Option<Duration>,
    /// On a PVM host, run a non-PVM kernel anyway through the instruction
    /// emulator (very slow).
    #[arg(long)]
    allow_emulation: bool,
    /// Do not print the summary table.
    #[arg(long)]
    no_summary: bool,
    /// Show the boot live in a terminal UI (docs/tui.md); a console on
    /// stdout then goes to a file, shown in a pane.
    #[arg(long)]
    tui: bool,
    /// Refresh the terminal UI this often, in milliseconds (up to a minute).
    #[arg(long, default_value_t = crate::tui_cmd::DEFAULT_REFRESH_MS,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    refresh_ms: u64,
    /// Map the initrd from its file (copy-on-write) instead of copying it
    /// into guest RAM: VMs started from one image then share its page
    /// cache, at the price of a nested page fault per 4 KiB page the guest
    /// reads or frees (a copy sits in huge pages).
    #[arg(long)]
    map_initrd: bool,
    /// Boot a bzImage the classic way: its own decompressor runs in the
    /// guest (with KASLR, if the kernel has it). By default the VMM
    /// decompresses the kernel on the host, keeps it in
    /// ~/.cache/bootscope/kernels, and enters it directly.
    #[arg(long)]
    guest_decompress: bool,
    /// A guest NUMA node bound to host nodes (repeatable):
    /// node=ID,cpus=LIST,memory=SIZE,host-nodes=LIST,policy=bind|preferred|interleave
    #[arg(long = "numa", value_name = "SPEC")]
    numa: Vec<String>,
    /// Preallocate (fault in) all guest memory before boot.
    #[arg(long)]
    prealloc: bool,
    /// Preallocation threads per region.
    #[arg(long, default_value_t = 1)]
    prealloc_threads: usize,
    /// CPUs for the preallocation thread contexts (default: the CPUs of the
    /// region's host nodes).
    #[arg(long, value_name = "LIST")]
    prealloc_cpus: Option<String>,
    /// Back guest memory with huge pages from the hugetlb pool: 2M or 1G.
    #[arg(long, value_name = "SIZE")]
    hugepages: Option<String>,
    /// Require transparent huge pages (madvise) on guest memory; fail where
    /// the host has them off. By default guest memory is advised whenever
    /// the host's THP mode allows it.
    #[arg(long, conflicts_with = "no_thp")]
    thp: bool,
    /// Back guest memory with base pages only (no MADV_HUGEPAGE).
    #[arg(long)]
    no_thp: bool,
    /// After set-up, install a seccomp filter that denies what a running VMM
    /// does not need (including changing CPU affinity).
    #[arg(long)]
    sandbox: bool,
    /// Give the guest no ACPI tables (MP table only): it then probes for an
    /// i8042 controller and can only halt, not power off.
    #[arg(long)]
    no_acpi: bool,
    /// Run only the set-up phases and report their timeline: memory or load.
    #[arg(long, value_name = "PHASE")]
    stop_after: Option<String>,
    /// Do not profile the VMM with eBPF (on by default where BPF works).
    #[arg(long)]
    no_profile: bool,
    /// Profile the VMM with eBPF and fail if the profiler cannot start
    /// (by default a run without BPF goes on unprofiled, with a warning).
    #[arg(long, conflicts_with = "no_profile")]
    profile: bool,
    /// Write the eBPF profile of the run (schema in docs/profile-schema.md).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Have the kernel count and time every run of the eBPF programs
    /// (`sources[].runs`, `run_ns` in the profile).
    #[arg(long, conflicts_with = "no_profile")]
    bpf_stats: bool,
    /// Profile with these collectors only (comma-separated: exits, faults,
    /// threads, numa, phases; default all): each one left out is eBPF
    /// programs not run on its events. exit-counts: the exits without their
    /// latency (one program per exit instead of two).
    #[arg(long, value_name = "LIST", value_parser = bootscope_profiler::CollectorSet::parse, conflicts_with = "no_profile")]
    collect: Option<bootscope_profiler::CollectorSet>,
    /// Count exits by the guest code that made them (`exits.sites`), named
    /// with the guest kernel's symbols.
    #[arg(long, conflicts_with = "no_profile")]
    exit_sites: bool,
    /// The guest kernel's symbols for --exit-sites: a vmlinux, a bzImage,
    /// a System.map or a kallsyms dump (default: the kernel booted).
    #[arg(long, value_name = "PATH", requires = "exit_sites")]
    guest_symbols: Option<PathBuf>,
    /// Record every kernel initcall (name, level, start, duration) as
    /// sub-phases of `kernel`: the kernel logs them below the console's log
    /// level and bootscope reads its log from guest memory at shutdown
    /// (docs/initcalls.md).
    #[arg(long, conflicts_with = "stop_after")]
    initcalls: bool,
}

#[derive(clap::Args)]
struct LabArgs {
    /// Memory of the lab machine (the outer QEMU guest).
    #[arg(long, default_value = "2G")]
    memory: String,
    /// CPUs of the lab machine (default: 1, or one per NUMA node). With 2, a
    /// profiler's threads run beside the nested guest's vCPU instead of
    /// taking turns with it on one CPU.
    #[arg(long)]
    cpus: Option<u32>,
    /// NUMA nodes of the lab machine: its CPUs and memory are split evenly
    /// between them (the Linux inside has real per-node allocators). Its
    /// CPUs default to one per node.
    #[arg(long, default_value_t = 1, value_name = "N")]
    numa_nodes: u32,
    /// Give up after this many seconds (each attempt, see --retries).
    #[arg(long, value_name = "SECONDS", default_value = "600", value_parser = parse_seconds)]
    timeout: Duration,
    /// Start the lab machine again this many times if it freezes (its
    /// heartbeat stops for a minute: QEMU's emulator lost an interrupt's
    /// wake-up while a nested guest ran). Nothing of a frozen attempt comes
    /// back.
    #[arg(long, default_value_t = 1, value_name = "N")]
    retries: u32,
    /// Run this program inside instead of bootscope (e.g. /bin/busybox, with
    /// `sh SCRIPT` as ARGS); it is carried in with its shared libraries.
    #[arg(long, value_name = "PATH")]
    exe: Option<PathBuf>,
    /// Also carry in this program at its own path, with its shared
    /// libraries (repeatable).
    #[arg(long = "program", value_name = "PATH")]
    programs: Vec<PathBuf>,
    /// Also carry in this file, or this directory with everything in it, at
    /// its own path (repeatable).
    #[arg(long = "input", value_name = "PATH")]
    inputs: Vec<PathBuf>,
    /// Also bring back this file, written in the lab, to the same path
    /// (repeatable). bootscope's own output files (--output, --timeline,
    /// --serial FILE of the command run) come back by themselves; files
    /// written by a profiled command or an --exe program do not.
    #[arg(long = "output", value_name = "PATH")]
    outputs: Vec<PathBuf>,
    /// Keep address space layout randomization on in the lab machine. It is
    /// off by default because the emulator translates code anew at every
    /// fresh address, on every run, which real hardware does not do.
    #[arg(long)]
    aslr: bool,
    /// The command to run inside (bootscope's arguments, or the --exe
    /// program's), after `--`. Existing files it names are carried in; its
    /// arguments reach the program as they are.
    #[arg(last = true, required = true)]
    args: Vec<OsString>,
}

/// A CLI error: the message and the exit status it maps to.
pub(crate) struct Failure {
    code: i32,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            code: EXIT_FAILURE,
            error: e.into(),
        }
    }
}

/// A bad-input error: exit status 2.
pub(crate) fn usage(error: anyhow::Error) -> Failure {
    Failure {
        code: EXIT_USAGE,
        error,
    }
}

pub fn main() -> i32 {
    let clock = Clock::start();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
            eprintln!("bootscope: error: {}", not_utf8_message());
            return EXIT_USAGE;
        }
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_USAGE } else { 0 };
        }
    };
    let result = match cli.command {
        Command::Run(args) => cmd_run(args, clock),
        Command::Doctor { json } => cmd_doctor(json),
        Command::Lab(args) => cmd_lab(args),
        Command::Demo { timeline } => cmd_demo(timeline, clock),
        Command::Profile(args) => crate::profile_cmd::run(args),
        Command::Bench(args) => Ok(crate::bench_cmd::bench(args)),
        Command::Compare(args) => Ok(crate::bench_cmd::compare(args)),
        Command::Check(args) => Ok(crate::bench_cmd::check(args)),
        Command::Plot(args) => Ok(crate::bench_cmd::plot(args)),
        Command::Exporter(args) => Ok(crate::exporter::run(args)),
        Command::Initcalls(args) => crate::initcalls_cmd::run(args),
        Command::Export {
            format,
            json,
            table,
            output,
            input,
        } => {
            let format = if json {
                "json".into()
            } else {
                format.unwrap_or_default()
            };
            cmd_export(&format, table.as_deref(), output.as_deref(), &input)
        }
        Command::Completions { shell } => cmd_completions(shell),
        Command::Man { out_dir } => cmd_man(&out_dir),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!("bootscope: error: {}", error_text(&f.error));
            f.code
        }
    }
}

/// Which argument clap refused as not UTF-8 (it does not say), for an
/// option that takes text rather than a file name.
fn not_utf8_message() -> String {
    let args: Vec<OsString> = std::env::args_os().collect();
    let Some(i) = args.iter().position(|a| a.to_str().is_none()) else {
        return "an argument is not valid UTF-8".into();
    };
    let shown = args[i].to_string_lossy();
    match args[..i].last().and_then(|a| a.to_str()) {
        Some(flag) if flag.starts_with('-') => format!(
            "the value of {flag} ({shown:?}, bad bytes shown as U+FFFD) is not valid \
             UTF-8; this option takes text (rename the file or choose another name)"
        ),
        _ => format!("argument {shown:?} is not valid UTF-8; this argument takes text"),
    }
}

/// An error and its causes, `: `-separated like anyhow's `{:#}`, leaving
/// out a cause whose text the message already carries (errors that name
/// their source in their own message).
fn error_text(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

/// This process's command line for reports: `std::env::args` would panic on
/// an argument that is not UTF-8 (such as a file name), so each argument is
/// converted lossily, for display only.
pub fn command_line() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The longest time any duration flag accepts: 30 days.
pub const MAX_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// Parses a duration flag given in seconds (a clap value parser): a
/// positive, finite number no larger than [`MAX_SECONDS`]. Huge values
/// (1e30, 2^64) are refused here instead of overflowing a `Duration`.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds (for example 2.5)"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err("must be a positive number of seconds".into());
    }
    if v > MAX_SECONDS {
        return Err(format!(
            "{s} seconds is too long: give at most {MAX_SECONDS} (30 days)"
        ));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("{s} seconds: {e}"))
}

/// Checks that `p`, given as `flag`, can be written (its directory takes a
/// new file, it is not a directory, its links are safe to follow), before
/// anything long starts. The rules are [`bootscope_model::output`]'s.
pub fn check_output(flag: &str, p: &Path) -> Result<()> {
    bootscope_model::output::check_writable(p).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

/// [`check_output`] for each of one command's outputs, and that no two of
/// them name the same file.
pub fn check_outputs(outputs: &[(&str, &Path)]) -> Result<()> {
    for (flag, p) in outputs {
        check_output(flag, p)?;
    }
    bootscope_model::output::check_distinct(outputs).map_err(anyhow::Error::new)
}

/// Writes an output file by the rules of [`bootscope_model::output`]:
/// atomically (no reader sees half of it) where it is a regular file, in
/// place where it is a device or FIFO.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<()> {
    bootscope_model::output::write_file(path, bytes).map_err(anyhow::Error::new)
}

fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("bootscope");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache/bootscope");
    }
    std::env::temp_dir().join("bootscope")
}

/// The default guest: Debian's kernel and the project's busybox initramfs.
fn default_guest() -> Result<(PathBuf, PathBuf)> {
    let kernel = bootscope_lab::guest::find_debian_kernel().context("no default guest kernel")?;
    let dir = default_cache_dir();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
    let initrd = dir.join("default-guest.cpio");
    bootscope_lab::guest::build_default_initramfs(&initrd)
        .context("cannot build the default guest initramfs")?;
    Ok((kernel.vmlinuz, initrd))
}

fn cmd_run(args: RunArgs, clock: Clock) -> Result<i32, Failure> {
    if crate::tui_cmd::no_terminal(args.tui) {
        return Err(usage(anyhow::anyhow!(bootscope_tui::NOT_A_TERMINAL)));
    }
    // From here on SIGINT and SIGTERM stop the guest and the run still
    // writes its timeline and profile (outcome `interrupted`).
    let interrupts = crate::signals::catch()?;
    let recorder = Arc::new(Recorder::new(clock));
    recorder.push(bootscope_vmm::timeline::PhaseMark {
        name: vmm_marks::PROCESS_START.into(),
        source: bootscope_vmm::timeline::MarkSource::Vmm,
        t_ns: 0,
        value: None,
        vcpu: None,
    });
    let mut numa = Vec::new();
    for spec in &args.numa {
        numa.push(
            spec.parse::<bootscope_vmm::memory::NumaSpec>()
                .map_err(|e| usage(anyhow::Error::new(e).context(format!("--numa {spec}"))))?,
        );
    }
    let memory_bytes = match &args.memory {
        Some(m) => parse_size(m).context("--memory").map_err(usage)?,
        None if !numa.is_empty() => numa.iter().map(|n| n.memory).sum(),
        None => 256 << 20,
    };
    let prealloc_cpus = match &args.prealloc_cpus {
        Some(l) => Some(
            l.parse::<bootscope_vmm::memory::CpuSet>()
                .map_err(|e| usage(anyhow::Error::new(e).context("--prealloc-cpus")))?,
        ),
        None => None,
    };
    let hugepages = match &args.hugepages {
        Some(h) => Some(
            h.parse::<bootscope_vmm::memory::HugePageSize>()
                .map_err(|e| usage(anyhow::Error::new(e).context("--hugepages")))?,
        ),
        None => None,
    };
    let stop_after = match args.stop_after.as_deref() {
        None => None,
        Some("memory") => Some(vm::StopAfter::Memory),
        Some("load") => Some(vm::StopAfter::Load),
        Some(other) => {
            return Err(usage(anyhow::anyhow!(
                "--stop-after {other:?}: give memory or load"
            )))
        }
    };
    let memory_opts = bootscope_vmm::memory::MemoryOptions {
        total: None,
        numa,
        prealloc: args.prealloc,
        prealloc_threads: args.prealloc_threads,
        prealloc_cpus,
        hugepages,
        thp: match (args.thp, args.no_thp) {
            (true, _) => bootscope_vmm::memory::ThpChoice::Required,
            (_, true) => bootscope_vmm::memory::ThpChoice::Off,
            _ => bootscope_vmm::memory::ThpChoice::Auto,
        },
    };
    let mut outputs: Vec<(&str, &Path)> = Vec::new();
    if let Some(t) = &args.timeline {
        outputs.push(("--timeline", t));
    }
    if let (Some(o), false) = (&args.output, args.no_profile) {
        outputs.push(("--output", o));
    }
    if !matches!(args.serial.as_str(), "stdout" | "-" | "null") {
        outputs.push(("--serial", Path::new(&args.serial)));
    }
    check_outputs(&outputs).map_err(usage)?;
    let mut patterns = Vec::new();
    for spec in &args.serial_patterns {
        patterns.push(MilestonePattern::parse(spec).map_err(|e| usage(e.into()))?);
    }
    let patterns = merge_patterns(patterns, !args.no_default_patterns);
    let timeout = args.timeout;
    let (kernel, initrd) = match args.kernel.clone() {
        Some(k) => (k, args.initrd.clone()),
        // Memory set-up alone needs no kernel.
        None if stop_after == Some(vm::StopAfter::Memory) => (PathBuf::new(), None),
        None => {
            let (k, i) = default_guest().map_err(usage)?;
            eprintln!(
                "bootscope: default guest: kernel {} initrd {}",
                k.display(),
                i.display()
            );
            (k, Some(args.initrd.clone().unwrap_or(i)))
        }
    };
    let tui_console = crate::tui_cmd::TuiConsole::new(args.tui, &args.serial).map_err(usage)?;
    let tui_serial = tui_console.serial.clone();
    let console: Box<dyn Write + Send> = match tui_console.serial.as_str() {
        "stdout" | "-" => Box::new(std::io::stdout()),
        "null" => Box::new(std::io::sink()),
        path => Box::new(
            bootscope_model::output::open_stream(Path::new(path))
                .map_err(|e| usage(anyhow::anyhow!("--serial: {e}")))?,
        ),
    };
    let cmdline = if args.initcalls {
        bootscope_vmm::kernel_log::cmdline_with_initcalls(&args.cmdline)
            .map_err(|e| usage(e.into()))?
    } else {
        args.cmdline.clone()
    };
    let cfg = VmConfig {
        kernel,
        initrd,
        cmdline,
        memory_bytes,
        vcpus: args.vcpus,
        console,
        patterns,
        timeout,
        allow_emulation: args.allow_emulation,
        map_images: args.map_initrd,
        decompress: bootscope_vmm::loader::DecompressOptions {
            in_guest: args.guest_decompress,
            cache_dir: bootscope_vmm::kernel::decompress::user_cache_dir(),
        },
        memory: memory_opts,
        sandbox: args.sandbox,
        stop_after,
        acpi: !args.no_acpi,
        stop: Some(interrupts.flag()),
        initcalls: args.initcalls,
    };
    // A kernel that cannot be booted is refused before the profiler
    // attaches, as fast as without it (the VMM probes it again).
    if !args.no_profile && stop_after != Some(vm::StopAfter::Memory) {
        bootscope_vmm::loader::probe_kernel(&cfg.kernel)
            .map_err(|e| usage(vm::ConfigError::from(e).into()))?;
    }
    if let Some(initrd) = &cfg.initrd {
        bootscope_vmm::loader::check_initrd(initrd)
            .map_err(|e| usage(vm::ConfigError::from(e).into()))?;
    }
    // The profiler attaches before the VMM starts, so that the VMM's
    // phases are its own: loading and attaching the eBPF programs (tens of
    // milliseconds natively, a tenth of a second in the lab) would
    // otherwise run inside its set-up, and on one CPU take their time from
    // it. The attach is the timeline's `profiler attach` phase.
    // A symbol file given is checked before anything runs (bad input), and
    // the live view names sites as they come; otherwise the booted
    // kernel's own symbols are read after the run, from the VMM's
    // decompressed copy where it made one (docs/profiler.md).
    let symbols = if args.exit_sites && (args.guest_symbols.is_some() || args.tui) {
        crate::sites_cmd::load_symbols(args.guest_symbols.as_deref(), Some(cfg.kernel.clone()))
            .map_err(|e| usage(anyhow::anyhow!(e)))?
    } else {
        None
    };
    let collector = attach_self_profile(&args, &recorder)?;
    let report = if args.tui {
        crate::tui_cmd::run_vm(
            cfg,
            &recorder,
            collector.clone(),
            &tui_console,
            args.refresh_ms,
            symbols.as_ref(),
        )?
    } else {
        vm::run(cfg, recorder.clone())
    };
    let report = match report {
        Ok(r) => r,
        Err(VmError::Config(e)) => return Err(usage(e.into())),
        Err(e) => return Err(e.into()),
    };
    let console_error = report.console_error;
    let mut doc = report.timeline;
    // A signal that stopped the guest (one that came after it ended
    // changes nothing).
    let interrupted = interrupts
        .received()
        .filter(|_| doc.outcome.reason == StopReason::Stopped);
    if let Some(sig) = interrupted {
        doc.outcome.reason = StopReason::Interrupted;
        doc.outcome.detail = format!(
            "interrupted by {}: the guest was stopped before it ended",
            crate::signals::name(sig)
        );
    }
    // Once: under --tui it is recorded when the VM ends, not when the UI
    // is closed.
    recorder.vmm_once(vmm_marks::VMM_EXIT);
    doc.marks = recorder.snapshot();
    doc.phases = bootscope_vmm::timeline::derive_phases(&doc.marks);
    let profiled = collector.is_some();
    if let Some(c) = collector {
        let profile = finish_self_profile(&args, c, &doc, symbols.as_ref())?;
        if let (Some(initcalls), Some(profile)) = (doc.initcalls.as_mut(), profile) {
            crate::initcalls_cmd::attribute_profile(initcalls, &profile);
        }
    }
    let mut result = finish_run(&args, &doc);
    if let Some(sig) = interrupted {
        result = result.and(Err(Failure {
            code: crate::signals::exit_status(sig),
            error: anyhow::anyhow!("{}", doc.outcome.detail),
        }));
    } else if let Some(e) = console_error {
        eprintln!(
            "bootscope: error: cannot write the guest console to --serial {}: {e}",
            tui_serial
        );
        if matches!(result, Ok(0)) {
            result = Ok(EXIT_FAILURE);
        }
    }
    if profiled {
        release_bpf_in_background();
    }
    result
}

/// Detaching the profiler's tracepoint programs costs the kernel one RCU
/// grace period each (over a second in all on small VMs), and a process's exit
/// waits for it. A child that inherits the descriptors and outlives this
/// process by a moment takes that wait off the command's critical path.
fn release_bpf_in_background() {
    // SAFETY: fork in a multi-threaded process: the child only calls
    // async-signal-safe functions (nanosleep, _exit) before it ends.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ts = libc::timespec {
            tv_sec: 2,
            tv_nsec: 0,
        };
        // SAFETY: close, nanosleep and _exit are async-signal-safe; the child
        // touches no other state and never returns. It lets go of the
        // standard streams at once so nobody waits on its pipes.
        unsafe {
            libc::close(0);
            libc::close(1);
            libc::close(2);
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
}

/// How often the profiler samples its counters under `run --initcalls`.
const INITCALL_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// Starts the eBPF collector on this process (loading and attaching its
/// programs takes tens of milliseconds natively, a tenth of a second in the
/// lab), then forwards every VMM mark to it (the ones recorded so far with
/// their own times). Called before the VMM starts, so every preallocation
/// thread and every guest exit is seen. None: not profiling (`--no-profile`,
/// or the profiler cannot start and nothing asked for a profile).
fn attach_self_profile(
    args: &RunArgs,
    recorder: &Arc<Recorder>,
) -> Result<Option<Arc<bootscope_profiler::Collector>>, Failure> {
    if args.no_profile {
        return Ok(None);
    }
    let mut config =
        bootscope_profiler::CollectorConfig::new(bootscope_profiler::TargetSpec::CurrentProcess);
    // One clock for the profile and the timeline: the VMM's process start.
    config.origin = Some(recorder.clock().instant_at(0));
    // vCPUs, preallocation threads and their contexts per region, and
    // bootscope's own few (main, console, profiler, TUI).
    let regions = args.numa.len().max(1) as u32;
    let prealloc = u32::try_from(args.prealloc_threads).unwrap_or(u32::MAX);
    config.bpf_stats = args.bpf_stats;
    config.exit_sites = args.exit_sites;
    if args.initcalls {
        // Counters often enough to share them out among initcalls (the
        // sampler still keeps itself under 0.4 % of a CPU).
        config.sample_interval = INITCALL_SAMPLE_INTERVAL;
    }
    if let Some(set) = args.collect {
        config.collectors = set;
    }
    config.expected_threads = Some(
        args.vcpus
            .saturating_add(prealloc.saturating_add(1).saturating_mul(regions))
            .saturating_add(16),
    );
    // Why a profiler that cannot start is an error; else go on without it.
    let required_by = if args.profile {
        Some("--profile asks for a profile but the profiler cannot start")
    } else if args.output.is_some() {
        Some("--output asks for a profile but the profiler cannot start")
    } else {
        None
    };
    let collector = match (bootscope_profiler::Collector::start(config), required_by) {
        (Ok(c), _) => Arc::new(c),
        (Err(e), Some(why)) => return Err(anyhow::Error::new(e).context(why).into()),
        (Err(e), None) => {
            eprintln!("bootscope: not profiling this run: {e} (--no-profile silences this)");
            return Ok(None);
        }
    };
    let weak = Arc::downgrade(&collector);
    let clock = recorder.clock();
    let forward = move |c: &bootscope_profiler::Collector,
                        m: &bootscope_vmm::timeline::PhaseMark| {
        c.add_mark_at(
            &m.name,
            m.source,
            m.value.map(u64::from),
            clock.instant_at(m.t_ns),
        );
        // Their statistics files exist now: the cross-check's source.
        if m.name == bootscope_vmm::timeline::vmm_marks::VCPUS_CREATED {
            c.vcpus_created();
        }
    };
    // Marks recorded before the collector was ready (process start).
    for m in recorder.snapshot() {
        forward(&collector, &m);
    }
    recorder.set_listener(Box::new(move |m| {
        if let Some(c) = weak.upgrade() {
            forward(&c, m);
        }
    }));
    recorder.vmm(vmm_marks::PROFILER_ATTACHED);
    Ok(Some(collector))
}

fn finish_self_profile(
    args: &RunArgs,
    collector: Arc<bootscope_profiler::Collector>,
    doc: &TimelineDoc,
    symbols: Option<&bootscope_profiler::guest_symbols::SymbolTable>,
) -> Result<Option<bootscope_profiler::Profile>, Failure> {
    let Ok(mut collector) = Arc::try_unwrap(collector) else {
        eprintln!("bootscope: the profile could not be finished (collector still in use)");
        return Ok(None);
    };
    // Stopping the collector detaches every tracepoint program, which the
    // kernel does one RCU grace period at a time (~100 ms each here); the
    // process is about to exit, so take the final profile and let the exit
    // release them instead.
    let mut profile = collector.final_profile();
    std::mem::forget(collector);
    profile.target.kind = "self".into();
    profile.target.command = command_line();
    profile.target.exit_code = Some(if doc.outcome.clean { 0 } else { 1 });
    let booted;
    let symbols = match symbols {
        None if args.exit_sites => {
            booted = crate::sites_cmd::booted_kernel_symbols(&doc.guest);
            booted.as_ref()
        }
        given => given,
    };
    crate::sites_cmd::annotate(&mut profile, symbols);
    crate::sites_cmd::label_npf_ranges(&mut profile, &doc.guest.regions);
    if let Some(path) = &args.output {
        write_output(path, &serde_json::to_vec_pretty(&profile)?)?;
    }
    if !args.no_summary {
        let shown = args
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from("(not saved: use --output)"));
        eprint!("{}", crate::profile_cmd::summary(&profile, &shown));
    }
    Ok(Some(profile))
}

fn finish_run(args: &RunArgs, doc: &TimelineDoc) -> Result<i32, Failure> {
    if let Some(path) = &args.timeline {
        let json = serde_json::to_vec_pretty(doc)?;
        write_output(path, &json)?;
    }
    if !args.no_summary {
        eprintln!();
        if doc.guest.kernel.is_empty() {
            eprintln!(
                "bootscope: set-up timeline ({} MiB guest)",
                doc.guest.memory_bytes >> 20
            );
        } else {
            eprintln!(
                "bootscope: boot timeline of {} ({})",
                doc.guest.kernel, doc.guest.kernel_format
            );
        }
        eprint!("{}", doc.summary_table());
        if let Some(mem) = &doc.memory {
            print_prealloc_summary(mem);
        }
        if let Some(exits) = doc.kvm_stats.get("exits") {
            eprintln!("KVM exits (KVM's own statistics): {exits}");
        }
        if let Some(initcalls) = &doc.initcalls {
            eprint!("{}", bootscope_vmm::kernel_log::summary(initcalls, 10));
        }
        eprintln!("outcome: {}", doc.outcome.detail);
    }
    if doc.outcome.clean {
        Ok(0)
    } else if doc.outcome.reason == StopReason::Interrupted {
        // The caller gives the status of the signal.
        Ok(EXIT_FAILURE)
    } else {
        Err(Failure {
            code: EXIT_FAILURE,
            error: anyhow::anyhow!(
                "the guest did not shut down cleanly: {}",
                doc.outcome.detail
            ),
        })
    }
}

/// One line per region and thread: where preallocation ran and how fast.
fn print_prealloc_summary(mem: &serde_json::Value) {
    let Some(regions) = mem["regions"].as_array() else {
        return;
    };
    for r in regions {
        let bytes = r["bytes"].as_u64().unwrap_or(0);
        let ns = r["elapsed_ns"].as_u64().unwrap_or(0).max(1);
        eprintln!(
            "preallocation: guest node {}: {} MiB in {:.1} ms ({:.2} GiB/s, {})",
            r["guest_node"],
            bytes >> 20,
            ns as f64 / 1e6,
            bytes as f64 / (1u64 << 30) as f64 / (ns as f64 / 1e9),
            r["method"].as_str().unwrap_or("?")
        );
        for t in r["threads"].as_array().into_iter().flatten() {
            eprintln!(
                "  {:<16} tid {:<8} cpus {:<8} last cpu {:<3} node {:<3} pages {}",
                t["name"].as_str().unwrap_or("?"),
                t["tid"],
                t["allowed_cpus"].as_str().unwrap_or("?"),
                t["last_cpu"],
                t["node"],
                t["pages_touched"]
            );
        }
    }
}

fn cmd_doctor(json: bool) -> Result<i32, Failure> {
    let findings = host::doctor(&HostRoot::default());
    if json {
        println!("{}", serde_json::to_string_pretty(&findings)?);
    } else {
        for f in &findings {
            println!(
                "{:<10} {:<4} {}",
                f.item,
                if f.ok { "ok" } else { "--" },
                f.detail
            );
        }
    }
    Ok(0)
}

fn cmd_lab(args: LabArgs) -> Result<i32, Failure> {
    let memory = parse_size(&args.memory)
        .context("--memory")
        .map_err(usage)?;
    let exe = match &args.exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe().context("cannot find the bootscope executable")?,
    };
    let mut outputs = args.outputs;
    outputs.extend(inner_outputs(&args.args, args.exe.is_some()).map_err(usage)?);
    // An output that cannot be written is the lab's error to report (exit
    // 2, at once): nothing is prepared for a run that will not start.
    let outputs_ok = outputs
        .iter()
        .all(|p| bootscope_model::output::check_writable(p).is_ok());
    let inner = if args.exe.is_some() || !outputs_ok {
        args.args
    } else {
        with_default_guest(args.args)?
    };
    let mut cfg = bootscope_lab::outer::LabConfig::new(exe, inner);
    cfg.outputs = outputs;
    cfg.memory_mib = memory >> 20;
    cfg.cpus = args.cpus.unwrap_or(args.numa_nodes.max(1));
    cfg.numa_nodes = args.numa_nodes;
    cfg.timeout = args.timeout;
    cfg.extra_programs = args.programs;
    cfg.extra_inputs = args.inputs;
    cfg.randomize_addresses = args.aslr;
    cfg.frozen_retries = args.retries;
    // SIGINT and SIGTERM stop QEMU and remove the lab's temporary files.
    let interrupts = crate::signals::catch()?;
    cfg.stop = Some(interrupts.flag());
    match bootscope_lab::outer::run_lab(&cfg) {
        Ok(outcome) => Ok(outcome.exit_code),
        Err(e @ bootscope_lab::LabError::Interrupted) => Err(Failure {
            code: interrupts
                .received()
                .map_or(EXIT_FAILURE, crate::signals::exit_status),
            error: e.into(),
        }),
        Err(e) if e.is_bad_input() => Err(usage(e.into())),
        Err(e) => Err(e.into()),
    }
}

/// `run ARGS` without `--kernel` boots the default guest, as it does on the
/// host; the lab machine has neither Debian's kernel nor the initramfs
/// builder's inputs, so they are prepared here and named explicitly (named
/// files are carried in). `--initrd` given alone is kept. Any other command
/// is returned as it is.
fn with_default_guest(args: Vec<OsString>) -> Result<Vec<OsString>, Failure> {
    let argv = std::iter::once(OsString::from("bootscope")).chain(args.iter().cloned());
    let Ok(matches) = Cli::command().try_get_matches_from(argv) else {
        return Ok(args);
    };
    let Some(("run", run)) = matches.subcommand() else {
        return Ok(args);
    };
    let memory_only = run
        .get_raw("stop_after")
        .is_some_and(|mut v| v.any(|s| s == "memory"));
    if run.get_raw("kernel").is_some() || memory_only {
        return Ok(args);
    }
    let (kernel, initrd) = default_guest().map_err(usage)?;
    eprintln!(
        "bootscope: default guest: kernel {} initrd {}",
        kernel.display(),
        initrd.display()
    );
    let mut out: Vec<OsString> = vec!["run".into(), "--kernel".into(), kernel.into()];
    if run.get_raw("initrd").is_none() {
        out.push("--initrd".into());
        out.push(initrd.into());
    }
    out.extend(args.into_iter().skip(1));
    Ok(out)
}

/// The arguments of each subcommand that name a file it writes (clap ids;
/// `run`'s `--serial` also takes `stdout` and `null`).
const OUTPUT_ARGS: [(&str, &[&str]); 9] = [
    ("run", &["serial", "timeline", "output"]),
    ("demo", &["timeline"]),
    ("profile", &["output"]),
    ("bench", &["output"]),
    ("compare", &["output"]),
    ("check", &["output"]),
    ("plot", &["output"]),
    ("export", &["output"]),
    ("lab", &["outputs"]),
];

/// Values of `run --serial` that name no file.
const SERIAL_NOT_A_FILE: [&str; 3] = ["stdout", "null", "-"];

/// The files that the command `bootscope ARGS` run in the lab writes, from
/// bootscope's own command line (defaults included, such as `profile`'s
/// `profile.json`). Nothing after a subcommand's `--` is looked at unless
/// it is bootscope's again (`bench`'s run arguments, an inner `lab`'s
/// command). With `exe` (another program than this bootscope), arguments
/// that are not a bootscope command name no outputs; without it they are
/// bad input.
fn inner_outputs(args: &[OsString], exe: bool) -> Result<Vec<PathBuf>> {
    let argv = std::iter::once(OsString::from("bootscope")).chain(args.iter().cloned());
    match Cli::command().try_get_matches_from(argv) {
        Ok(matches) => Ok(outputs_of(&matches)),
        Err(_) if exe => Ok(Vec::new()),
        // `--help` or `--version` inside: the lab shows them.
        Err(e) if !e.use_stderr() => Ok(Vec::new()),
        Err(e) => {
            let text = e.render().to_string();
            let text = text.lines().next().unwrap_or_default();
            let text = text.trim_start_matches("error: ");
            bail!("the command after `lab --` is not a valid bootscope command ({text}); to run another program in the lab, name it with --exe PATH")
        }
    }
}

/// The output files named in a parsed bootscope command line.
fn outputs_of(matches: &ArgMatches) -> Vec<PathBuf> {
    let Some((name, sub)) = matches.subcommand() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some((_, ids)) = OUTPUT_ARGS.iter().find(|(n, _)| *n == name) {
        for id in *ids {
            let Some(values) = sub.get_raw(id) else {
                continue;
            };
            for v in values {
                if !(*id == "serial" && SERIAL_NOT_A_FILE.iter().any(|n| v == *n)) {
                    out.push(PathBuf::from(v));
                }
            }
        }
    }
    let trailing = || -> Vec<OsString> {
        sub.get_raw("args")
            .map(|v| v.map(OsString::from).collect())
            .unwrap_or_default()
    };
    match name {
        // Each configuration before `--vs-command` is `run`'s arguments.
        "bench" => {
            let args = trailing();
            let end = args
                .iter()
                .position(|a| a == "--vs-command")
                .unwrap_or(args.len());
            for side in args[..end].split(|a| a == "--vs") {
                let side = match side.first() {
                    Some(first) if first == "run" => &side[1..],
                    _ => side,
                };
                let argv = ["bootscope", "run"]
                    .into_iter()
                    .map(OsString::from)
                    .chain(side.iter().cloned());
                // bench itself reports arguments `run` does not take.
                if let Ok(m) = Cli::command().try_get_matches_from(argv) {
                    out.extend(outputs_of(&m));
                }
            }
        }
        "lab" if sub.get_raw("exe").is_none() => {
            if let Ok(inner) = inner_outputs(&trailing(), false) {
                out.extend(inner);
            }
        }
        _ => {}
    }
    out
}

fn cmd_demo(timeline: Option<PathBuf>, clock: Clock) -> Result<i32, Failure> {
    let flavour = host::kvm_flavour(&HostRoot::default());
    // The default guest is prepared on this host, so the lab only carries the
    // two files in.
    let (kernel, initrd) = default_guest().map_err(usage)?;
    let mut run_args: Vec<OsString> = vec![
        "run".into(),
        "--kernel".into(),
        kernel.into(),
        "--initrd".into(),
        initrd.into(),
        "--timeout".into(),
        "300".into(),
    ];
    if let Some(t) = &timeline {
        check_output("--timeline", t).map_err(usage)?;
        run_args.push("--timeline".into());
        run_args.push(t.clone().into());
    }
    if flavour.boots_stock_kernels() {
        eprintln!("bootscope: host KVM is {flavour}: booting the default guest natively");
        let argv = std::iter::once(OsString::from("bootscope")).chain(run_args);
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Run(args),
            }) => cmd_run(args, clock),
            Ok(_) => unreachable!("the demo builds a run command"),
            Err(e) => Err(usage(e.into())),
        }
    } else {
        let why = match flavour {
            KvmFlavour::Pvm => "host KVM is PVM, which cannot boot a stock kernel",
            _ => "host has no usable KVM",
        };
        eprintln!(
            "bootscope: {why}: booting the default guest in the lab (nested KVM under QEMU's emulator)"
        );
        cmd_lab(LabArgs {
            memory: "2G".into(),
            cpus: None,
            numa_nodes: 1,
            timeout: Duration::from_secs(900),
            exe: None,
            programs: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            aslr: false,
            retries: 1,
            args: run_args,
        })
    }
}

/// The command line as clap sees it: what `--help`, the manual pages and
/// the completion scripts are made from.
pub fn command() -> clap::Command {
    Cli::command()
}

fn cmd_completions(shell: clap_complete::Shell) -> Result<i32, Failure> {
    let mut cmd = command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "bootscope", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::Error::new(e)
            .context("cannot write to standard output")
            .into()),
        _ => Ok(0),
    }
}

/// Writes `bootscope.1` and `bootscope-SUBCOMMAND.1` for every subcommand
/// into `dir`.
fn cmd_man(dir: &Path) -> Result<i32, Failure> {
    if dir.exists() && !dir.is_dir() {
        return Err(usage(anyhow::anyhow!(
            "--out-dir {}: not a directory; give a directory to write the manual pages into",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out-dir {}: cannot create the directory", dir.display()))
        .map_err(usage)?;
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    let mut written = 0;
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    for page in pages {
        let man = clap_mangen::Man::new(page).manual("bootscope manual");
        let path = dir.join(man.get_filename());
        let mut roff = Vec::new();
        man.render(&mut roff)?;
        write_output(&path, &roff)?;
        written += 1;
    }
    eprintln!("bootscope: {written} manual pages in {}", dir.display());
    Ok(0)
}

fn cmd_export(
    format: &str,
    table: Option<&str>,
    output: Option<&Path>,
    input: &Path,
) -> Result<i32, Failure> {
    use bootscope_profiler::export;
    // The library's messages already include their causes: print them once.
    let bad_input = |e: &dyn std::fmt::Display| usage(anyhow::anyhow!("{e}"));
    let format = export::Format::parse(format, table).map_err(|e| bad_input(&e))?;
    if let Some(o) = output {
        check_output("--output", o).map_err(usage)?;
    }
    let (profile, _) = export::read_input(input).map_err(|e| bad_input(&e))?;
    let text = export::render_bytes(&profile, format);
    match output {
        Some(path) => write_output(path, &text)?,
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&text).and_then(|()| out.flush()) {
                // A reader that stops early (`| head`) is not an error.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    return Err(anyhow::Error::new(e)
                        .context("cannot write to standard output")
                        .into())
                }
                _ => {}
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_names_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let load = bootscope_vmm::loader::LoadError::KernelRead {
            path: "/nonexistent".into(),
            source: io,
        };
        let e = anyhow::Error::new(load);
        let t = error_text(&e);
        assert_eq!(t.matches("No such file or directory").count(), 1, "{t}");
        assert!(t.starts_with("cannot read kernel /nonexistent"), "{t}");
        // Causes not in the message are kept, as with {:#}.
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&e), "outer: inner");
    }

    #[test]
    fn output_args_are_bootscope_arguments() {
        let cli = Cli::command();
        for (name, ids) in OUTPUT_ARGS {
            let sub = cli
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no subcommand {name}"));
            for id in ids {
                assert!(
                    sub.get_arguments().any(|a| a.get_id() == *id),
                    "{name} has no argument {id}"
                );
            }
        }
    }

    #[test]
    fn lab_outputs_are_bootscope_s_own() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let outputs = |v: &[&str]| inner_outputs(&os(v), false).unwrap();
        let paths = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        // The profiled command's flags are its own, whatever their names.
        let cmd = [
            "/x/cloud-hypervisor",
            "--serial",
            "tty",
            "--output",
            "x",
            "-o",
            "y",
            "--timeline=t",
        ];
        let mut profile = vec!["profile", "--output", "p.json", "--"];
        profile.extend(cmd);
        assert_eq!(outputs(&profile), paths(&["p.json"]));
        profile[1] = "-o";
        assert_eq!(outputs(&profile), paths(&["p.json"]));
        assert_eq!(
            outputs(&["profile", "-o=q.json", "--", "qemu", "-serial", "stdio"]),
            paths(&["q.json"])
        );
        // The default output is written, so it comes back too.
        assert_eq!(
            outputs(&["profile", "--", "qemu", "-serial", "stdio"]),
            paths(&["profile.json"])
        );
        assert_eq!(
            outputs(&[
                "run",
                "--kernel",
                "k",
                "--serial=con.log",
                "--timeline",
                "t.json",
                "-o",
                "r.json"
            ]),
            paths(&["con.log", "t.json", "r.json"])
        );
        assert!(outputs(&["run", "--serial", "null"]).is_empty());
        assert!(outputs(&["run", "--serial", "stdout"]).is_empty());
        assert_eq!(outputs(&["run", "-o", "null"]), paths(&["null"]));
        assert_eq!(
            outputs(&["demo", "--timeline", "d.json"]),
            paths(&["d.json"])
        );
        assert_eq!(
            outputs(&["export", "--format", "json", "-o", "e.json", "in.json"]),
            paths(&["e.json"])
        );
        assert!(outputs(&["doctor"]).is_empty());
        // bench: its output and those of each `run`, not of --vs-command.
        assert_eq!(
            outputs(&[
                "bench", "--output", "b.json", "--", "run", "--serial", "a.log", "--vs", "run",
                "--serial", "b.log"
            ]),
            paths(&["b.json", "a.log", "b.log"])
        );
        assert_eq!(
            outputs(&[
                "bench",
                "--",
                "--serial",
                "a.log",
                "--vs-command",
                "qemu",
                "-serial",
                "file:x.log",
                "--output",
                "y"
            ]),
            paths(&["a.log"])
        );
        // A lab in the lab: its --output and its command's, unless --exe.
        assert_eq!(
            outputs(&["lab", "--output", "o1", "--", "profile", "-o", "p2", "--", "c"]),
            paths(&["o1", "p2"])
        );
        assert_eq!(
            outputs(&["lab", "--exe", "/bin/sh", "--output", "o1", "--", "run", "-o", "x"]),
            paths(&["o1"])
        );
        // --help inside is shown by the lab.
        assert!(outputs(&["profile", "--help"]).is_empty());
        // Another program's arguments are left alone with --exe...
        assert!(inner_outputs(&os(&["sh", "-c", "x --output y"]), true)
            .unwrap()
            .is_empty());
        // ...and are bad input without it.
        let err = inner_outputs(&os(&["sh", "-c", "x"]), false).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("not a valid bootscope command"), "{text}");
        assert!(text.contains("'sh'"), "{text}");
        assert!(text.contains("--exe PATH"), "{text}");
    }

    #[test]
    fn lab_run_without_kernel_gets_the_default_guest() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let same = |v: &[&str]| {
            assert_eq!(with_default_guest(os(v)).ok(), Some(os(v)), "{v:?}");
        };
        same(&["run", "--kernel", "k", "--timeout", "1"]);
        same(&["run", "--stop-after", "memory"]);
        same(&["doctor"]);
        same(&["profile", "--", "run"]);
        same(&["not-a-command"]);
        if bootscope_lab::guest::find_debian_kernel().is_err() {
            eprintln!("SKIP: no Debian kernel: the default guest is not prepared");
            return;
        }
        let Ok(out) = with_default_guest(os(&["run", "--timeout", "600"])) else {
            panic!("the default guest cannot be prepared here");
        };
        assert_eq!(out[0], "run");
        assert_eq!(out[1], "--kernel");
        assert!(Path::new(&out[2]).is_file(), "{out:?}");
        assert_eq!(out[3], "--initrd");
        assert!(Path::new(&out[4]).is_file(), "{out:?}");
        assert_eq!(out[5..], os(&["--timeout", "600"]));
        // An initrd given is the one used.
        let out = with_default_guest(os(&["run", "--initrd", "mine.cpio"]))
            .ok()
            .unwrap();
        assert_eq!(out[1], "--kernel");
        assert_eq!(out[3..], os(&["--initrd", "mine.cpio"]));
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_seconds("600").unwrap(), Duration::from_secs(600));
        for bad in [
            "0",
            "-1",
            "nan",
            "inf",
            "1e30",
            "18446744073709551616",
            "x",
            "",
        ] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        assert!(parse_seconds("2592001").unwrap_err().contains("too long"));
    }
}
