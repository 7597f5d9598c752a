//! `bootscope exporter`: follows every VMM on the host (any process holding
//! a KVM VM) with the eBPF collectors and serves their metrics to
//! Prometheus over HTTP (docs/export.md).
//!
//! One set of eBPF programs follows every VM (the profiler's `host_vms`):
//! each process from its first KVM event on (however short its life), and
//! those a scan of `/proc` finds before their guest runs. A scanner
//! thread, every `--scan-interval`, takes on the VMs found and takes the
//! final counts of those that ended; the HTTP server answers scrapes from
//! the programs' maps, read once per scrape and split by process, written
//! as Prometheus text here (`metrics.rs`, `serve.rs`).

mod metrics;
mod serve;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bootscope::exporter_http::{self, HttpStats, Limits};
use bootscope_profiler::host_vms::{unix_now_s, HostVms};
use bootscope_profiler::CollectorSet;

use bootscope_model::prometheus::Exposition;
pub use metrics::ExtraLabels;
use metrics::{Floors, VmLabels, VmWriter};

/// The default `--listen`: the loopback address only, as the metrics name
/// the host's processes.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9724";

#[derive(clap::Args)]
pub struct ExporterArgs {
    /// Serve the metrics (GET /metrics) on this address and port.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Look for new and ended VMMs this often.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = crate::common::parse_seconds)]
    pub scan_interval: Duration,
    /// Keep serving an ended VM's last values this long, so that the next
    /// scrapes see its final counts before its series end.
    #[arg(long, value_name = "SECONDS", default_value = "120", value_parser = crate::common::parse_seconds)]
    pub keep_ended: Duration,
    /// Split the per-VM series further (comma-separated: vcpu, phase,
    /// port); more series each.
    #[arg(long = "labels", value_name = "LIST", value_parser = ExtraLabels::parse)]
    pub labels: Option<ExtraLabels>,
    /// Follow VMs with these collectors only (comma-separated: exits,
    /// exit-counts, faults, threads, numa, phases, sched; default all but
    /// sched, the run-queue waits of the VMs' threads).
    #[arg(long, value_name = "LIST", value_parser = CollectorSet::parse)]
    pub collect: Option<CollectorSet>,
    /// Do not have the kernel count and time the eBPF programs' runs
    /// (`bootscope_vm_bpf_program_*` are then absent).
    #[arg(long)]
    pub no_bpf_stats: bool,
}

/// What the scanner and the scrapes share.
struct Exporter {
    /// Every VM of the host, with its counters' floors.
    vms: HostVms<Floors>,
    extra: ExtraLabels,
    start_time_s: f64,
    http: Arc<HttpStats>,
}

impl Exporter {
    /// The whole exposition, as of now: with the VMs the programs found
    /// since the last scan, and the final counts of those whose end they
    /// saw.
    fn render(&self) -> String {
        let (all, each) = self.vms.read();
        let mut x = Exposition::default();
        metrics::declare_families(&mut x);
        let mut r = self.vms.lock();
        let mut running = 0;
        for (pid, f) in r.vms.iter_mut() {
            let Some(profile) = f.last.as_ref().or_else(|| each.get(pid)) else {
                continue;
            };
            let up = f.ended_at.is_none();
            running += usize::from(up);
            let pid_label = pid.to_string();
            let mut w = VmWriter {
                x: &mut x,
                floors: &mut f.state,
                who: VmLabels {
                    pid: &pid_label,
                    comm: &f.who.comm,
                    vm: &f.who.name,
                },
            };
            metrics::write_vm(
                &mut w,
                profile,
                up,
                f.who.start_time_s,
                f.followed_since_s,
                self.extra,
            );
        }
        metrics::write_collector(&mut x, &all);
        serve::write_exporter_metrics(&mut x, &r, running, self.start_time_s);
        drop(r);
        serve::write_server_metrics(&mut x, &self.http);
        x.render()
    }
}

/// `bootscope exporter`: 0 after SIGINT or SIGTERM, 2 for bad input (an
/// address that is not ADDR:PORT, a port in use or not ours to take), 1
/// when following VMs is impossible here.
pub fn run(args: ExporterArgs) -> i32 {
    let listener = match serve::bind(&args.listen) {
        Ok(l) => l,
        Err(msg) => {
            eprintln!("bootscope: error: {msg}");
            return crate::common::EXIT_USAGE;
        }
    };
    if let Err(msg) = serve::check_can_follow() {
        eprintln!("bootscope: error: {msg}");
        return crate::common::EXIT_FAILURE;
    }
    let interrupts = match crate::signals::catch() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("bootscope: error: {e:#}");
            return crate::common::EXIT_FAILURE;
        }
    };
    // Prometheus keeps the time series (HostVms::start keeps no samples).
    let vms = match HostVms::start(args.collect, !args.no_bpf_stats, args.keep_ended) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("bootscope: error: cannot load the eBPF programs: {e}");
            return crate::common::EXIT_FAILURE;
        }
    };
    let exporter = Arc::new(Exporter {
        vms,
        extra: args.labels.unwrap_or_default(),
        start_time_s: unix_now_s(),
        http: Arc::new(HttpStats::default()),
    });
    let stop = interrupts.flag();
    let scanner = {
        let (e, stop, every) = (exporter.clone(), stop.clone(), args.scan_interval);
        std::thread::Builder::new()
            .name("bootscope-scan".into())
            .spawn(move || e.vms.scan_loop(&stop, every))
    };
    let scanner = match scanner {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bootscope: error: cannot start the scanner thread: {e}");
            return crate::common::EXIT_FAILURE;
        }
    };
    if let Ok(addr) = listener.local_addr() {
        eprintln!("exporter: serving http://{addr}/metrics");
    }
    let limits = Limits::default().within_descriptor_limit();
    let render: exporter_http::Render = {
        let e = exporter.clone();
        Arc::new(move || e.render())
    };
    let served = exporter_http::serve(
        listener,
        limits,
        exporter.http.clone(),
        stop.clone(),
        render,
    );
    if let Err(e) = served {
        eprintln!("bootscope: error: cannot serve HTTP: {e}");
        stop.store(true, Ordering::SeqCst);
        let _ = scanner.join();
        return crate::common::EXIT_FAILURE;
    }
    let _ = scanner.join();
    if let Some(sig) = interrupts.received() {
        eprintln!("exporter: stopped by {}", crate::signals::name(sig));
    }
    0
}
