//! Runs a program in the lab from the command line, for manual checks:
//!
//! ```text
//! cargo run -p bootscope-lab --example lab -- [--memory MIB] [--timeout SECS]
//!     [--program PATH]... [--input PATH]... [--output PATH]... EXE [ARGS...]
//! cargo run -p bootscope-lab --example lab -- --default-initramfs OUT.cpio
//! ```
//!
//! The guest console appears on stdout; the exit status is the program's.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bootscope_lab::{run_lab, LabConfig};

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "--default-initramfs") {
        let Some(out) = args.get(1) else {
            return usage("--default-initramfs needs an output path");
        };
        return match bootscope_lab::build_default_initramfs(std::path::Path::new(out)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lab: {e}");
                ExitCode::from(2)
            }
        };
    }
    let mut memory = LabConfig::DEFAULT_MEMORY_MIB;
    let mut timeout = LabConfig::DEFAULT_TIMEOUT;
    let mut programs = Vec::new();
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    loop {
        let number = |v: Option<&OsString>| {
            v.and_then(|v| v.to_str())
                .and_then(|v| v.parse::<u64>().ok())
        };
        match args.first().and_then(|a| a.to_str()) {
            Some("--memory") => match number(args.get(1)) {
                Some(n) => memory = n,
                None => return usage("--memory needs a number of MiB"),
            },
            Some("--timeout") => match number(args.get(1)) {
                Some(n) => timeout = Duration::from_secs(n),
                None => return usage("--timeout needs a number of seconds"),
            },
            Some("--program") => match args.get(1) {
                Some(p) => programs.push(PathBuf::from(p)),
                None => return usage("--program needs a path"),
            },
            Some("--input") => match args.get(1) {
                Some(p) => inputs.push(PathBuf::from(p)),
                None => return usage("--input needs a path"),
            },
            Some("--output") => match args.get(1) {
                Some(p) => outputs.push(PathBuf::from(p)),
                None => return usage("--output needs a path"),
            },
            _ => break,
        }
        args.drain(..2);
    }
    if args.is_empty() {
        return usage("missing the program to run");
    }
    let exe = PathBuf::from(args.remove(0));
    let mut cfg = LabConfig::new(exe, args);
    cfg.memory_mib = memory;
    cfg.timeout = timeout;
    cfg.extra_programs = programs;
    cfg.extra_inputs = inputs;
    cfg.outputs = outputs;
    match run_lab(&cfg) {
        Ok(outcome) => {
            eprintln!(
                "lab: exit code {}, {} output file(s), {:.2} s",
                outcome.exit_code,
                outcome.outputs.len(),
                outcome.elapsed.as_secs_f64()
            );
            for path in &outcome.outputs {
                eprintln!("lab: wrote {}", path.display());
            }
            ExitCode::from(u8::try_from(outcome.exit_code & 0xff).unwrap_or(1))
        }
        Err(e) => {
            eprintln!("lab: {e}");
            ExitCode::from(2)
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("lab: {problem}\nusage: lab [--memory MIB] [--timeout SECS] [--program PATH]... [--input PATH]... [--output PATH]... EXE [ARGS...]\n       lab --default-initramfs OUT.cpio");
    ExitCode::from(2)
}
