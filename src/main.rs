//! `bootscope`: the command line over the VMM, the profiler, the lab,
//! bench and advise. Only this crate uses anyhow; the libraries return typed errors.

// Standard output goes through src/stdout.rs's checked writer (print!
// panics on a closed pipe or a full disk); tests may print.
#![deny(clippy::print_stdout)]

mod advise_cmd;
mod bench_cmd;
mod bench_storm;
mod browse_cmd;
mod cli;
mod common;
mod demo_cmd;
mod device_args;
mod doctor_cmd;
mod export_cmd;
mod exporter;
mod guest_cmd;
mod guest_mem;
mod guest_symbols;
mod initcalls_cmd;
mod lab_cmd;
mod lab_files;
mod lab_prepare;
mod live_tui;
mod manual_cmd;
mod profile_cmd;
mod profile_console;
mod profile_launch;
mod profile_reports;
mod profile_summary;
mod profile_units;
mod push;
mod run_args;
mod run_cmd;
mod signals;
mod snapshot_args;
mod stdout;

fn main() {
    let code = cli::main();
    std::process::exit(code);
}
