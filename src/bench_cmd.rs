//! `bootscope bench`, `compare`, `check` and `plot`: the command-line side of
//! the bench library (`bench/`). Each returns the process exit status:
//! 0 success, 1 failed runs or a regression, 2 bad input (an output file
//! that cannot be written included).
//!
//! Here `bench` itself; `summary.rs` what it prints, `readers.rs` the
//! commands that read its files (`compare`, `check`, `plot`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bootscope_bench::doc::{ConfigResult, Machine};
use bootscope_bench::runner::{self, DEFAULT_CONSOLE_PATTERNS};
use bootscope_bench::{BenchDoc, BenchError, BenchPlan, ConfigPlan, ConsolePattern, Side};

use crate::common::{write_output, EXIT_FAILURE, EXIT_USAGE};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bootscope bench --runs 10 --output bench.json -- run --kernel bzImage --initrd initrd.cpio
  bootscope bench --runs 10 -- run --cmdline \"console=ttyS0 quiet\" --vs run --cmdline console=ttyS0
  bootscope bench --runs 5 -- run --kernel K --initrd I --vs-command qemu-system-x86_64 -M microvm ...
  bootscope lab -- bench --runs 3 --output /tmp/bench.json -- run --kernel K --initrd I")]
pub struct BenchArgs {
    /// Measured runs per configuration.
    #[arg(long, default_value_t = 10)]
    pub runs: u32,
    /// Warm-up runs per configuration first, left out of the statistics.
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// Write every run and the summaries (JSON, docs/bench-schema.md).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Name of the first configuration, then of the second (repeat).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Also time the first console line (standard output) matching REGEX
    /// (repeatable).
    #[arg(long = "console-pattern", value_name = "NAME=REGEX")]
    pub console_patterns: Vec<String>,
    /// Do not time the built-in console lines (kernel banner, run init).
    #[arg(long)]
    pub no_default_patterns: bool,
    /// Run every boot under `bootscope profile` for exits per reason and
    /// page faults (needs the eBPF collectors; adds their overhead).
    #[arg(long)]
    pub profile: bool,
    /// A note on what is measured, KEY=VALUE (repeatable): kept in the
    /// bench file and shown by compare and check. The git revision of the
    /// current directory is recorded by itself.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// Boot N VMs of each configuration at once in every round (a storm,
    /// released together), after one VM alone: per-VM times as a
    /// distribution (median, p90, p99, max), the storm's makespan and boots
    /// per second, each VM's host memory (docs/bench-schema.md). Refused
    /// when the host's available memory cannot hold N guests.
    #[arg(long, value_name = "N")]
    pub parallel: Option<u32>,
    /// Kill a run still going after this many seconds.
    #[arg(long, default_value = "600", value_name = "SECONDS", value_parser = crate::common::parse_seconds)]
    pub run_timeout: Duration,
    /// Also push the results to the Prometheus Pushgateway at this URL
    /// (http://HOST:PORT), under job bootscope, kind bench, host (this
    /// host's name); a failed push is exit status 1.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// After `--`: `run` and its arguments; optionally `--vs` and a second
    /// set of run arguments, or `--vs-command` and any command, to
    /// interleave with the first.
    #[arg(last = true, required = true, value_name = "RUN-ARGS")]
    pub args: Vec<OsString>,
}

/// Prints an error the way the rest of the CLI does and maps it to an exit
/// status.
fn fail(e: BenchError) -> i32 {
    eprintln!("bootscope: error: {e}");
    if e.is_bad_input() {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    }
}

/// Refuses, as bad input, an output path that cannot be written
/// ([`crate::common::check_output`]), before any work starts.
fn check_output(flag: &str, p: &Path) -> Result<(), BenchError> {
    check_output_of(flag, p, &[])
}

/// [`check_output`], and that the output is none of the command's
/// `inputs` ([`crate::common::check_not_inputs`]).
fn check_output_of(flag: &str, p: &Path, inputs: &[(&str, &Path)]) -> Result<(), BenchError> {
    crate::common::check_outputs_of(&[(flag, p)], inputs)
        .map_err(|e| BenchError::Usage(format!("{e:#}")))
}

/// Writes an output file; one that cannot be written is exit status 2, like
/// any output path refused up front (never 1, which `check` keeps for a
/// regression and `bench` for failed runs).
fn write(path: &Path, bytes: &[u8]) -> i32 {
    match write_output(path, bytes) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bootscope: error: {e:#}");
            EXIT_USAGE
        }
    }
}

/// Splits the arguments after `--` into one or two configurations.
fn split_sides(args: &[OsString]) -> Result<Vec<Side>, BenchError> {
    let strip_run = |a: &[OsString]| -> Vec<OsString> {
        match a.first() {
            Some(first) if first == "run" => a[1..].to_vec(),
            _ => a.to_vec(),
        }
    };
    let pos = args.iter().position(|a| a == "--vs" || a == "--vs-command");
    let Some(pos) = pos else {
        return Ok(vec![Side::Bootscope(strip_run(args))]);
    };
    let first = Side::Bootscope(strip_run(&args[..pos]));
    let rest = &args[pos + 1..];
    if rest.iter().any(|a| a == "--vs" || a == "--vs-command") {
        return Err(BenchError::Usage(
            "bench compares at most two configurations: give --vs or --vs-command once".into(),
        ));
    }
    let second = if args[pos] == "--vs" {
        Side::Bootscope(strip_run(rest))
    } else {
        if rest.is_empty() {
            return Err(BenchError::Usage(
                "--vs-command needs a program and its arguments after it".into(),
            ));
        }
        Side::Command(rest.to_vec())
    };
    Ok(vec![first, second])
}

/// `bootscope bench`.
pub fn bench(args: BenchArgs) -> i32 {
    match bench_inner(args) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

/// Refuses a `--push` URL that cannot be a Pushgateway's, before any work.
fn check_push(url: Option<&str>) -> Result<(), BenchError> {
    url.map_or(Ok(()), |u| {
        crate::push::check_url(u).map_err(BenchError::Usage)
    })
}

/// Pushes `text` when `--push` was given; false (the error printed) when
/// the push failed.
fn push(url: Option<&str>, kind: &str, text: &str) -> bool {
    let Some(url) = url else {
        return true;
    };
    match crate::push::push(url, kind, text) {
        Ok(target) => {
            eprintln!("{kind}: results pushed to {target}");
            true
        }
        Err(e) => {
            eprintln!("bootscope: error: {e}");
            false
        }
    }
}

/// Each side's label: the one given with --label, else a, b.
fn labelled(sides: Vec<Side>, labels: &[String]) -> Vec<ConfigPlan> {
    let default_labels = ["a", "b"];
    sides
        .into_iter()
        .enumerate()
        .map(|(i, side)| ConfigPlan {
            label: labels
                .get(i)
                .cloned()
                .unwrap_or_else(|| default_labels[i].to_string()),
            side,
        })
        .collect()
}

/// Refuses `bench --profile` with a `run --no-profile` configuration
/// before any run: each run would be asked to profile and not to.
fn check_profile_wanted(configs: &[ConfigPlan], profile: bool) -> Result<(), BenchError> {
    for c in configs.iter().filter(|_| profile) {
        if matches!(&c.side, Side::Bootscope(a) if a.iter().any(|a| a == "--no-profile")) {
            return Err(BenchError::Usage(format!(
                "configuration {}: bench --profile profiles every run, and run --no-profile \
                 says not to: leave one of them out (to profile one configuration only, give \
                 it run --profile instead of bench --profile)",
                c.label
            )));
        }
    }
    Ok(())
}

/// The console patterns: the defaults (unless --no-default-patterns), with
/// a --console-pattern of the same name replacing one.
fn console_patterns(args: &BenchArgs) -> Result<Vec<ConsolePattern>, BenchError> {
    let mut patterns = Vec::new();
    if !args.no_default_patterns {
        for p in DEFAULT_CONSOLE_PATTERNS {
            patterns.push(ConsolePattern::parse(p)?);
        }
    }
    for p in &args.console_patterns {
        let p = ConsolePattern::parse(p)?;
        patterns.retain(|q: &ConsolePattern| q.name != p.name);
        patterns.push(p);
    }
    Ok(patterns)
}

/// What the bench is about to run.
fn announce(plan: &BenchPlan) {
    eprintln!(
        "bench: {} configuration(s), {} warm-up + {} measured run(s) each{}",
        plan.configs.len(),
        plan.warmup,
        plan.runs,
        if plan.configs.len() == 2 {
            ", interleaved"
        } else {
            ""
        }
    );
    if let Some(n) = plan.parallel {
        eprintln!(
            "bench: storms of {n} VM(s) started at once{}",
            if n > 1 {
                ", each after one VM alone"
            } else {
                ""
            }
        );
    }
    for c in &plan.configs {
        let (what, argv) = match &c.side {
            Side::Bootscope(a) => ("bootscope run", a),
            Side::Command(a) => ("command", a),
        };
        eprintln!("bench: {}: {what} {}", c.label, runner::shell_words(argv));
    }
}

/// The host's KVM as the bench file names it (`kvm`, `pvm`, ...).
fn host_kvm_name() -> String {
    let flavour = bootscope_vmm::host::kvm_flavour(&bootscope_vmm::host::HostRoot::default());
    serde_json::to_value(flavour)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn bench_inner(args: BenchArgs) -> Result<i32, BenchError> {
    if let Some(o) = &args.output {
        check_output("--output", o)?;
    }
    check_push(args.push.as_deref())?;
    let meta = bootscope_bench::provenance::parse_meta(&args.meta)?;
    let configs = configs_of(&args)?;
    let patterns = console_patterns(&args)?;
    let exe = std::env::current_exe().map_err(|source| BenchError::Spawn {
        program: "bootscope (its own executable)".into(),
        source,
    })?;
    let host_kvm = host_kvm_name();
    // SIGINT and SIGTERM stop the run under way; the finished ones are
    // still reported and written, and the work directory removed.
    let interrupts = match crate::signals::catch() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("bootscope: error: {e:#}");
            return Ok(EXIT_FAILURE);
        }
    };
    // The runs' own files go to a private directory (mode 0700, an
    // unpredictable name), removed when the bench ends.
    let work_dir =
        bootscope_model::output::private_temp_dir("bootscope-bench-").map_err(|source| {
            BenchError::Write {
                path: std::env::temp_dir(),
                source,
            }
        })?;
    let plan = BenchPlan {
        exe: exe.clone(),
        configs,
        runs: args.runs,
        warmup: args.warmup,
        profile: args.profile,
        run_profiles_itself: crate::common::run_profiles_itself(&exe),
        console_patterns: patterns,
        run_timeout: args.run_timeout,
        work_dir: work_dir.path().to_path_buf(),
        machine: Machine::detect(&host_kvm),
        stop: Some(interrupts.flag()),
        parallel: args.parallel,
    };
    plan.validate()?;
    announce(&plan);
    // The revision as the runs start, before anything could change it.
    let git = std::env::current_dir()
        .ok()
        .and_then(|d| bootscope_bench::provenance::detect_git(&d));
    let result = plan.run(print_progress);
    drop(work_dir);
    let mut doc = result?;
    let signal = interrupts.received();
    doc.interrupted_by = signal.map(|s| crate::signals::name(s).to_string());
    doc.provenance = bootscope_bench::provenance::Provenance { meta, git };
    crate::stdout::print(summary_text(&doc)).map_err(crate::stdout::bench_error)?;
    if let Some(o) = &args.output {
        let code = write(o, &doc.to_json());
        if code != 0 {
            return Ok(code);
        }
        eprintln!("bench: results in {}", o.display());
    }
    // After the file is written: a failed push loses nothing.
    let pushed = push(
        args.push.as_deref(),
        "bench",
        &crate::push::bench_text(&doc),
    );
    Ok(bench_status(&doc, signal, args.output.is_some(), pushed))
}

/// The configurations to compare: the argument lists between `--`s, with
/// their `--label`s.
fn configs_of(args: &BenchArgs) -> Result<Vec<ConfigPlan>, BenchError> {
    let sides = split_sides(&args.args)?;
    if args.labels.len() > sides.len() {
        return Err(BenchError::Usage(format!(
            "{} --label given for {} configuration(s)",
            args.labels.len(),
            sides.len()
        )));
    }
    let configs = labelled(sides, &args.labels);
    check_profile_wanted(&configs, args.profile)?;
    Ok(configs)
}

/// The bench's exit status once its results are out, with what went wrong
/// said on standard error: the signal's status if one stopped it (the
/// finished runs kept), a failure if a measured run failed, a
/// configuration had no successful run or the push failed, else 0.
fn bench_status(doc: &BenchDoc, signal: Option<i32>, written: bool, pushed: bool) -> i32 {
    if let Some(sig) = signal {
        let done: usize = doc.configs.iter().map(|c| c.runs.len()).sum();
        eprintln!(
            "bootscope: interrupted by {}: {done} finished run(s) kept{}",
            crate::signals::name(sig),
            if written { " in the output file" } else { "" }
        );
        return crate::signals::exit_status(sig);
    }
    let failed: usize = doc.configs.iter().map(ConfigResult::failures).sum();
    let no_success = doc.configs.iter().any(|c| c.measured().count() == 0);
    if failed > 0 || no_success {
        eprintln!(
            "bootscope: error: {failed} measured run(s) failed{}",
            if written {
                "; their errors are in the output file"
            } else {
                ""
            }
        );
        return EXIT_FAILURE;
    }
    if pushed {
        0
    } else {
        EXIT_FAILURE
    }
}

mod readers;
mod summary;
pub use readers::{check, compare, plot, CheckArgs, CompareArgs, PlotArgs};
use summary::{print_progress, summary_text};

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn sides() {
        let s = split_sides(&os(&["run", "--kernel", "k"])).unwrap();
        assert!(matches!(&s[..], [Side::Bootscope(a)] if a == &os(&["--kernel", "k"])));
        let s = split_sides(&os(&["--kernel", "k", "--vs", "run", "--kernel", "j"])).unwrap();
        assert!(
            matches!(&s[..], [Side::Bootscope(_), Side::Bootscope(b)] if b == &os(&["--kernel", "j"]))
        );
        let s = split_sides(&os(&["run", "--vs-command", "qemu", "-m", "256"])).unwrap();
        assert!(
            matches!(&s[..], [Side::Bootscope(a), Side::Command(c)] if a.is_empty() && c == &os(&["qemu", "-m", "256"]))
        );
        assert!(split_sides(&os(&["run", "--vs-command"])).is_err());
        assert!(split_sides(&os(&["run", "--vs", "--vs"])).is_err());
    }
}
