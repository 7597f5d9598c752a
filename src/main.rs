//! `bootscope`: the command line over the VMM, the profiler, the lab,
//! bench and advise. Only this crate uses anyhow; the libraries return typed errors.

mod advise_cmd;
mod bench_cmd;
mod bench_storm;
mod browse_cmd;
mod cli;
mod device_args;
mod exporter;
mod guest_cmd;
mod initcalls_cmd;
mod lab_cmd;
mod lab_prepare;
mod profile_cmd;
mod profile_console;
mod push;
mod run_cmd;
mod signals;
mod sites_cmd;
mod stdout;
mod tui_cmd;

fn main() {
    let code = cli::main();
    std::process::exit(code);
}
