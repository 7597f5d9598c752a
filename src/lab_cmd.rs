//! `bootscope lab -- ARGS`: runs bootscope (or another program) inside the
//! nested-KVM lab machine, carrying in the files it names and out the ones
//! it writes.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;

use bootscope_model::size::parse_size;

use crate::common::{default_guest, parse_seconds, usage, Failure, EXIT_FAILURE};

#[derive(clap::Args)]
pub(crate) struct LabArgs {
    /// Memory of the lab machine (the outer QEMU guest).
    #[arg(long, default_value = "2G")]
    pub(crate) memory: String,
    /// CPUs of the lab machine (default: 1, or one per NUMA node). With 2, a
    /// profiler's threads run beside the nested guest's vCPU instead of
    /// taking turns with it on one CPU.
    #[arg(long)]
    pub(crate) cpus: Option<u32>,
    /// NUMA nodes of the lab machine: its CPUs and memory are split evenly
    /// between them (the Linux inside has real per-node allocators). Its
    /// CPUs default to one per node.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) numa_nodes: u32,
    /// Give up after this many seconds (each attempt, see --retries).
    #[arg(long, value_name = "SECONDS", default_value = "600", value_parser = parse_seconds)]
    pub(crate) timeout: Duration,
    /// Start the lab machine again this many times if it freezes (its
    /// heartbeat stops for a minute: QEMU's emulator lost an interrupt's
    /// wake-up while a nested guest ran). Nothing of a frozen attempt comes
    /// back.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) retries: u32,
    /// Run this program inside instead of bootscope (e.g. /bin/busybox, with
    /// `sh SCRIPT` as ARGS); it is carried in with its shared libraries.
    #[arg(long, value_name = "PATH")]
    pub(crate) exe: Option<PathBuf>,
    /// Also carry in this program at its own path, with its shared
    /// libraries (repeatable).
    #[arg(long = "program", value_name = "PATH")]
    pub(crate) programs: Vec<PathBuf>,
    /// Also carry in this file, or this directory with everything in it, at
    /// its own path (repeatable).
    #[arg(long = "input", value_name = "PATH")]
    pub(crate) inputs: Vec<PathBuf>,
    /// Also bring back this file, written in the lab, to the same path
    /// (repeatable). bootscope's own output files (--output, --timeline,
    /// --serial FILE of the command run) come back by themselves; files
    /// written by a profiled command or an --exe program do not. A file
    /// that is also an --input is carried in and brought back over itself
    /// (a disk image the guest writes: --input IMG --output IMG -- run
    /// --disk IMG).
    #[arg(long = "output", value_name = "PATH")]
    pub(crate) outputs: Vec<PathBuf>,
    /// Keep address space layout randomization on in the lab machine. It is
    /// off by default because the emulator translates code anew at every
    /// fresh address, on every run, which real hardware does not do.
    #[arg(long)]
    pub(crate) aslr: bool,
    /// Give the program the console as its terminal, sized and typed as
    /// this one, with the keys typed passed through (this terminal is in
    /// raw mode meanwhile; Ctrl-A x stops the lab). On by itself for a
    /// command with --tui.
    #[arg(long)]
    pub(crate) tty: bool,
    /// The command to run inside (bootscope's arguments, or the --exe
    /// program's), after `--`. Existing files it names are carried in; its
    /// arguments reach the program as they are.
    #[arg(last = true, required = true)]
    pub(crate) args: Vec<OsString>,
}

/// `bootscope lab`. `cli`: bootscope's command line definition, by which
/// the command run inside is read (the files it names and writes).
pub(crate) fn cmd_lab(args: LabArgs, cli: &clap::Command) -> Result<i32, Failure> {
    let memory = parse_size(&args.memory)
        .context("--memory")
        .map_err(usage)?;
    let exe = match &args.exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe().context("cannot find the bootscope executable")?,
    };
    let inner_out = inner_outputs(cli, &args.args, args.exe.is_some()).map_err(usage)?;
    // Every file the lab writes back, and every file it reads, checked by
    // the rules of every other output before anything is prepared (exit 2
    // at once).
    crate::lab_files::check(
        &args.outputs,
        &inner_out,
        &args.inputs,
        &args.programs,
        &exe,
    )
    .map_err(usage)?;
    let mut outputs = args.outputs;
    outputs.extend(inner_out);
    // A path the lab still refuses (an output named twice, one inside a
    // directory carried in) is its error to report: nothing is prepared.
    let outputs_ok = outputs
        .iter()
        .all(|p| bootscope_model::output::check_writable(p).is_ok());
    let inner = if args.exe.is_some() || !outputs_ok {
        args.args
    } else {
        with_default_guest(cli, args.args)?
    };
    let terminal = if args.tty || (args.exe.is_none() && wants_terminal(cli, &inner)) {
        let t = bootscope_lab::outer::LabTerminal::of_host().map_err(|why| {
            usage(anyhow::anyhow!(
                "the program in the lab needs a terminal (--tui or --tty), but {why}: run \
                 `bootscope lab` in a terminal, or leave --tui out"
            ))
        })?;
        Some(t)
    } else {
        None
    };
    // Kept until the run is over: it may hold the prepared files.
    let prepared = if args.exe.is_none() {
        crate::lab_prepare::prepare(cli, &inner)
    } else {
        crate::lab_prepare::Prepared::default()
    };
    let mut cfg = bootscope_lab::outer::LabConfig::new(exe, inner);
    cfg.placed_inputs.clone_from(&prepared.placed);
    cfg.terminal = terminal;
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
    // The console (and so the command's output) is standard output.
    let mut console = crate::stdout::Stream::default();
    let result = bootscope_lab::outer::run_lab_with_console(&cfg, &mut console);
    if let Some(e) = console.error() {
        eprintln!("bootscope: error: cannot write standard output (the lab's console): {e}");
        if matches!(result, Ok(ref o) if o.exit_code == 0) {
            return Ok(EXIT_FAILURE);
        }
    }
    match result {
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

/// Whether the bootscope command `args` shows a terminal UI (`--tui`).
fn wants_terminal(cli: &clap::Command, args: &[OsString]) -> bool {
    let argv = std::iter::once(OsString::from("bootscope")).chain(args.iter().cloned());
    let Ok(matches) = cli.clone().try_get_matches_from(argv) else {
        return false;
    };
    matches.subcommand().is_some_and(|(_, sub)| {
        sub.try_get_one::<bool>("tui")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false)
    })
}

/// `run ARGS` without `--kernel` boots the default guest, as it does on the
/// host; the lab machine has neither Debian's kernel nor the initramfs
/// builder's inputs, so they are prepared here and named explicitly (named
/// files are carried in). `--initrd` given alone is kept. Any other command
/// is returned as it is.
fn with_default_guest(cli: &clap::Command, args: Vec<OsString>) -> Result<Vec<OsString>, Failure> {
    let argv = std::iter::once(OsString::from("bootscope")).chain(args.iter().cloned());
    let Ok(matches) = cli.clone().try_get_matches_from(argv) else {
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
const OUTPUT_ARGS: [(&str, &[&str]); 10] = [
    ("run", &["serial", "timeline", "output"]),
    ("demo", &["timeline"]),
    ("profile", &["output"]),
    ("bench", &["output"]),
    ("compare", &["output"]),
    ("check", &["output"]),
    ("plot", &["output"]),
    ("export", &["output"]),
    ("lab", &["outputs"]),
    ("advise", &["output", "svg"]),
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
fn inner_outputs(cli: &clap::Command, args: &[OsString], exe: bool) -> Result<Vec<PathBuf>> {
    let argv = std::iter::once(OsString::from("bootscope")).chain(args.iter().cloned());
    match cli.clone().try_get_matches_from(argv) {
        Ok(matches) => Ok(outputs_of(cli, &matches)),
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
fn outputs_of(cli: &clap::Command, matches: &ArgMatches) -> Vec<PathBuf> {
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
                if let Ok(m) = cli.clone().try_get_matches_from(argv) {
                    out.extend(outputs_of(cli, &m));
                }
            }
        }
        "lab" if sub.get_raw("exe").is_none() => {
            if let Ok(inner) = inner_outputs(cli, &trailing(), false) {
                out.extend(inner);
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bootscope's own command line definition.
    fn cli() -> clap::Command {
        crate::cli::command()
    }
    use std::path::Path;

    #[test]
    fn output_args_are_bootscope_arguments() {
        let cli = cli();
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

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// The files `bootscope lab -- ARGS` brings back.
    fn outputs(v: &[&str]) -> Vec<PathBuf> {
        inner_outputs(&cli(), &os(v), false).unwrap()
    }

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn lab_outputs_of_profile_leave_the_command_s_flags_alone() {
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
    }

    #[test]
    fn lab_outputs_of_run_demo_and_export() {
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
    }

    #[test]
    fn lab_outputs_of_bench_and_of_a_lab_in_the_lab() {
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
    }

    #[test]
    fn lab_outputs_are_bootscope_s_own() {
        // --help inside is shown by the lab.
        assert!(outputs(&["profile", "--help"]).is_empty());
        // Another program's arguments are left alone with --exe...
        assert!(
            inner_outputs(&cli(), &os(&["sh", "-c", "x --output y"]), true)
                .unwrap()
                .is_empty()
        );
        // ...and are bad input without it.
        let err = inner_outputs(&cli(), &os(&["sh", "-c", "x"]), false).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("not a valid bootscope command"), "{text}");
        assert!(text.contains("'sh'"), "{text}");
        assert!(text.contains("--exe PATH"), "{text}");
    }

    #[test]
    fn lab_run_without_kernel_gets_the_default_guest() {
        let same = |v: &[&str]| {
            assert_eq!(with_default_guest(&cli(), os(v)).ok(), Some(os(v)), "{v:?}");
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
        let Ok(out) = with_default_guest(&cli(), os(&["run", "--timeout", "600"])) else {
            panic!("the default guest cannot be prepared here");
        };
        assert_eq!(out[0], "run");
        assert_eq!(out[1], "--kernel");
        assert!(Path::new(&out[2]).is_file(), "{out:?}");
        assert_eq!(out[3], "--initrd");
        assert!(Path::new(&out[4]).is_file(), "{out:?}");
        assert_eq!(out[5..], os(&["--timeout", "600"]));
        // An initrd given is the one used.
        let out = with_default_guest(&cli(), os(&["run", "--initrd", "mine.cpio"]))
            .ok()
            .unwrap();
        assert_eq!(out[1], "--kernel");
        assert_eq!(out[3..], os(&["--initrd", "mine.cpio"]));
    }
}
