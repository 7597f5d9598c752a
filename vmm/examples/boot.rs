//! Boots a kernel with the library alone (development aid):
//! `cargo run -p bootscope-vmm --example boot -- KERNEL [CMDLINE]`.
use std::sync::Arc;
use std::time::Duration;

use bootscope_vmm::timeline::{Clock, Recorder};
use bootscope_vmm::vm::{run, VmConfig};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(kernel) = args.next() else {
        eprintln!("usage: boot KERNEL [CMDLINE]");
        std::process::exit(2);
    };
    let cmdline = match args.next().map(|c| c.into_string()) {
        None => "console=ttyS0".to_string(),
        Some(Ok(c)) => c,
        Some(Err(_)) => {
            eprintln!("boot: CMDLINE is not valid UTF-8");
            std::process::exit(2);
        }
    };
    let rec = Arc::new(Recorder::new(Clock::start()));
    let mut cfg = VmConfig::new(kernel.into(), cmdline, Box::new(std::io::stdout()));
    cfg.timeout = Some(Duration::from_secs(5));
    cfg.map_images = true;
    match run(cfg, rec) {
        Ok(r) => {
            print!("{}", bootscope_vmm::timeline::summary_table(&r.timeline));
            println!("{:?}\n{:?}", r.timeline.outcome, r.marker_counts);
            println!("{:?}", r.timeline.kvm_stats);
        }
        Err(e) => println!("error: {e}"),
    }
}
