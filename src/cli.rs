use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};

use bootscope_vmm::host::{self, HostRoot, KvmFlavour};
use bootscope_vmm::timeline::Clock;

use crate::lab_cmd::{cmd_lab, LabArgs};
use crate::run_cmd::{cmd_run, RunArgs};

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
    /// Browse a saved profile or boot timeline in the terminal UI: the live
    /// TUI's panes over the recorded samples, with time scrubbing.
    Tui(crate::browse_cmd::BrowseArgs),
    /// Build guest disk images: `guest build debian` (docs/guest.md).
    Guest(crate::guest_cmd::GuestArgs),
    /// Draw a boot timeline, profile or benchmark as an SVG picture.
    Plot(crate::bench_cmd::PlotArgs),
    /// From a boot's timeline or profile to ranked findings and candidate
    /// fixes; with --prove, an A/B bench per fix (docs/advise.md).
    Advise(crate::advise_cmd::AdviseArgs),
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

/// A CLI error: the message and the exit status it maps to.
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) error: anyhow::Error,
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
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return EXIT_USAGE;
        }
        // --help and --version: standard output, checked like any other.
        Err(e) => {
            use std::io::IsTerminal;
            let text = if std::io::stdout().is_terminal() {
                e.render().ansi().to_string()
            } else {
                e.render().to_string()
            };
            return match crate::stdout::print(text) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("bootscope: error: cannot write standard output: {e}");
                    EXIT_FAILURE
                }
            };
        }
    };
    // SIGINT and SIGTERM end every command cleanly (src/signals.rs): the
    // temporary files of the outputs being written are removed first.
    if let Err(e) = crate::signals::install() {
        eprintln!("bootscope: warning: {e:#}");
    }
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
        Command::Advise(args) => Ok(crate::advise_cmd::advise_cmd(args)),
        Command::Tui(args) => crate::browse_cmd::run(args),
        Command::Exporter(args) => Ok(crate::exporter::run(args)),
        Command::Initcalls(args) => crate::initcalls_cmd::run(args),
        Command::Guest(args) => crate::guest_cmd::run(args),
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

/// The default guest: Debian's kernel and the project's busybox initramfs.
pub(crate) fn default_guest() -> Result<(PathBuf, PathBuf)> {
    let kernel = bootscope_lab::guest::find_debian_kernel().context("no default guest kernel")?;
    // bootscope's own cache, private and checked (no shared fallback):
    // the initramfs written there is booted as root.
    let dir = bootscope_model::cache::cache_dir("")?;
    let initrd = dir.join("default-guest.cpio");
    bootscope_lab::guest::build_default_initramfs(&initrd)
        .context("cannot build the default guest initramfs")?;
    Ok((kernel.vmlinuz, initrd))
}

fn cmd_doctor(json: bool) -> Result<i32, Failure> {
    let root = HostRoot::default();
    let mut findings = host::kvm_findings(&root);
    findings.extend(bootscope_profiler::host::findings(
        &root,
        host::kvm_flavour(&root),
    ));
    findings.extend(host::memory_findings(&root));
    let text = if json {
        serde_json::to_string_pretty(&findings)? + "\n"
    } else {
        findings
            .iter()
            .map(|f| {
                format!(
                    "{:<10} {:<4} {}\n",
                    f.item,
                    if f.ok { "ok" } else { "--" },
                    f.detail
                )
            })
            .collect()
    };
    crate::stdout::print(text).map_err(crate::stdout::failure)?;
    Ok(0)
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
            tty: false,
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
    crate::stdout::print(script).map_err(crate::stdout::failure)?;
    Ok(0)
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
        None => crate::stdout::print(text).map_err(crate::stdout::failure)?,
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
