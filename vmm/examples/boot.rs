//! Boots a kernel with the library alone (development aid):
//! `cargo run -p bootscope-vmm --example boot -- KERNEL [CMDLINE]`.
use std::sync::Arc;
use std::time::Duration;

use bootscope_vmm::console::MilestonePattern;
use bootscope_vmm::timeline::{Clock, Recorder};
use bootscope_vmm::vm::{run, VmConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let kernel = args.next().expect("usage: boot KERNEL [CMDLINE]");
    let cmdline = args.next().unwrap_or_else(|| "console=ttyS0".into());
    let rec = Arc::new(Recorder::new(Clock::start()));
    let cfg = VmConfig {
        kernel: kernel.into(),
        initrd: None,
        cmdline,
        memory_bytes: 256 << 20,
        vcpus: 1,
        console: Box::new(std::io::stdout()),
        patterns: MilestonePattern::defaults(),
        timeout: Some(Duration::from_secs(5)),
        allow_emulation: false,
        map_images: true,
        memory: Default::default(),
        sandbox: false,
        stop_after: None,
        acpi: true,
        stop: None,
    };
    match run(cfg, rec) {
        Ok(r) => {
            print!("{}", r.timeline.summary_table());
            println!("{:?}\n{:?}", r.timeline.outcome, r.marker_counts);
            println!("{:?}", r.timeline.kvm_stats);
        }
        Err(e) => println!("error: {e}"),
    }
}
