//! The command line: its clap definition and the dispatch of each
//! subcommand to its command file. What the commands share is in
//! `common.rs`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use bootscope_vmm::timeline::Clock;

use crate::common::{usage, Failure, EXIT_FAILURE, EXIT_USAGE};
use crate::lab_cmd::LabArgs;
use crate::run_args::RunArgs;

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
    let result = dispatch(cli.command, clock);
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

/// Runs one subcommand.
fn dispatch(cmd: Command, clock: Clock) -> Result<i32, Failure> {
    match cmd {
        Command::Run(args) => crate::run_cmd::cmd_run(args, clock),
        Command::Doctor { json } => crate::doctor_cmd::run(json),
        Command::Lab(args) => crate::lab_cmd::cmd_lab(args, &command()),
        Command::Demo { timeline } => {
            // The demo is a `run` or `lab` command line, run as given.
            let args = crate::demo_cmd::command_line(timeline)?;
            let argv = std::iter::once(OsString::from("bootscope")).chain(args);
            let cli = Cli::try_parse_from(argv).map_err(|e| usage(e.into()))?;
            dispatch(cli.command, clock)
        }
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
            crate::export_cmd::run(&format, table.as_deref(), output.as_deref(), &input)
        }
        Command::Completions { shell } => crate::manual_cmd::completions(command(), shell),
        Command::Man { out_dir } => crate::manual_cmd::man(command(), &out_dir),
    }
}

/// The command line as clap sees it: what `--help`, the manual pages and
/// the completion scripts are made from.
pub fn command() -> clap::Command {
    Cli::command()
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
    fn the_demo_in_the_lab_is_a_lab_command() {
        let run: Vec<OsString> = ["run", "--kernel", "k", "--initrd", "i", "--timeout", "300"]
            .map(OsString::from)
            .to_vec();
        let argv = std::iter::once(OsString::from("bootscope"))
            .chain(crate::demo_cmd::in_the_lab(run.clone()));
        let Ok(Cli {
            command: Command::Lab(lab),
        }) = Cli::try_parse_from(argv)
        else {
            panic!("the demo's lab command line is not a lab command");
        };
        assert_eq!(lab.memory, "2G");
        assert_eq!((lab.cpus, lab.numa_nodes, lab.retries), (None, 1, 1));
        assert_eq!(lab.timeout, std::time::Duration::from_secs(900));
        assert!(lab.exe.is_none() && lab.programs.is_empty() && lab.inputs.is_empty());
        assert!(lab.outputs.is_empty() && !lab.aslr && !lab.tty);
        assert_eq!(lab.args, run);
    }
}
