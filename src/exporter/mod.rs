//! `bootscope exporter`: follows every VMM on the host (any process holding
//! a KVM VM) with the eBPF collectors and serves their metrics to
//! Prometheus over HTTP (docs/export.md).
//!
//! A scanner thread looks for VMMs every `--scan-interval`, starts a
//! collector for each new one and finishes the collectors of those that
//! ended; the main thread answers scrapes from what the collectors hold.

mod discover;
mod metrics;
mod serve;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bootscope_profiler::{Collector, CollectorConfig, CollectorSet, Profile, TargetSpec};

use discover::VmProcess;
pub use metrics::ExtraLabels;
use metrics::{Exposition, Floors, VmLabels, VmWriter};

/// The default `--listen`: the loopback address only, as the metrics name
/// the host's processes.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9724";

#[derive(clap::Args)]
pub struct ExporterArgs {
    /// Serve the metrics (GET /metrics) on this address and port.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Look for new and ended VMMs this often.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = crate::cli::parse_seconds)]
    pub scan_interval: Duration,
    /// Keep serving an ended VM's last values this long, so that the next
    /// scrapes see its final counts before its series end.
    #[arg(long, value_name = "SECONDS", default_value = "120", value_parser = crate::cli::parse_seconds)]
    pub keep_ended: Duration,
    /// Split the per-VM series further (comma-separated: vcpu, phase,
    /// port); more series each.
    #[arg(long = "labels", value_name = "LIST", value_parser = ExtraLabels::parse)]
    pub labels: Option<ExtraLabels>,
    /// Follow VMs with these collectors only (comma-separated: exits,
    /// exit-counts, faults, threads, numa, phases; default all).
    #[arg(long, value_name = "LIST", value_parser = CollectorSet::parse)]
    pub collect: Option<CollectorSet>,
    /// Do not have the kernel count and time the eBPF programs' runs
    /// (`bootscope_vm_bpf_program_*` are then absent).
    #[arg(long)]
    pub no_bpf_stats: bool,
}

/// One VM followed (or ended and still served).
struct Followed {
    who: VmProcess,
    pid_label: String,
    collector: Option<Collector>,
    /// Its final profile once it ended (a last snapshot while finishing).
    last: Option<Profile>,
    ended_at: Option<Instant>,
    followed_since_s: f64,
    floors: Floors,
}

/// What the scanner and the scrapes share.
#[derive(Default)]
struct Registry {
    vms: BTreeMap<u32, Followed>,
    /// Processes the collectors could not follow, with their start time
    /// (not tried again while the same process holds the pid).
    refused: BTreeMap<u32, f64>,
    followed_total: u64,
    follow_errors_total: u64,
    ended_total: u64,
    scans_total: u64,
    scan_seconds_total: f64,
}

struct Exporter {
    registry: Mutex<Registry>,
    config: CollectorConfig,
    extra: ExtraLabels,
    keep_ended: Duration,
    start_time_s: f64,
}

fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Exporter {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts following the VMMs found that are not followed yet.
    fn follow_new(&self, pids: &[u32]) {
        let proc_root = Path::new("/proc");
        for &pid in pids {
            let (known, refused_at) = {
                let r = self.lock();
                let live = r.vms.get(&pid).is_some_and(|f| f.ended_at.is_none());
                (live, r.refused.get(&pid).copied())
            };
            if known {
                continue;
            }
            let Some(who) = discover::describe(proc_root, pid) else {
                continue;
            };
            if refused_at == Some(who.start_time_s) {
                continue;
            }
            let mut config = self.config.clone();
            config.target = TargetSpec::Pid(pid);
            match Collector::start(config) {
                Ok(c) => {
                    eprintln!(
                        "exporter: following pid {pid} ({}{})",
                        who.comm,
                        if who.name.is_empty() {
                            String::new()
                        } else {
                            format!(", vm {}", who.name)
                        }
                    );
                    let mut r = self.lock();
                    r.followed_total += 1;
                    r.refused.remove(&pid);
                    // A process ended long ago may still be served under a
                    // pid the kernel has handed on: the new one replaces it.
                    r.vms.insert(
                        pid,
                        Followed {
                            pid_label: pid.to_string(),
                            who,
                            collector: Some(c),
                            last: None,
                            ended_at: None,
                            followed_since_s: unix_now_s(),
                            floors: Floors::default(),
                        },
                    );
                }
                Err(e) => {
                    eprintln!("exporter: cannot follow pid {pid} ({}): {e}", who.comm);
                    let mut r = self.lock();
                    r.follow_errors_total += 1;
                    r.refused.insert(pid, who.start_time_s);
                }
            }
        }
    }

    /// Finishes the collectors of VMs that ended (or no longer hold a VM),
    /// and forgets VMs ended longer than `keep_ended` ago.
    fn retire(&self, holding: &[u32]) {
        let ending: Vec<(u32, Collector)> = {
            let mut r = self.lock();
            let mut out = Vec::new();
            for (pid, f) in r.vms.iter_mut() {
                let gone = f
                    .collector
                    .as_ref()
                    .is_some_and(|c| c.target_ended() || !holding.contains(pid));
                if gone {
                    // Served from this snapshot until the final profile is
                    // in: the series never pause.
                    f.last = f.collector.as_ref().map(Collector::snapshot);
                    f.ended_at = Some(Instant::now());
                    out.extend(f.collector.take().map(|c| (*pid, c)));
                }
            }
            r.ended_total += out.len() as u64;
            let keep = self.keep_ended;
            r.vms
                .retain(|_, f| f.ended_at.is_none_or(|t| t.elapsed() < keep));
            r.refused.retain(|pid, _| holding.contains(pid));
            out
        };
        for (pid, c) in ending {
            let last = c.finish();
            eprintln!(
                "exporter: pid {pid} ended ({} exits seen)",
                last.exits.total
            );
            if let Some(f) = self.lock().vms.get_mut(&pid) {
                f.last = Some(last);
            }
        }
    }

    fn scan_loop(&self, stop: &AtomicBool, interval: Duration) {
        while !stop.load(Ordering::SeqCst) {
            let began = Instant::now();
            let holding = discover::scan(Path::new("/proc"));
            self.retire(&holding);
            self.follow_new(&holding);
            {
                let mut r = self.lock();
                r.scans_total += 1;
                r.scan_seconds_total += began.elapsed().as_secs_f64();
            }
            let until = began + interval;
            while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(
                    until
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(100)),
                );
            }
        }
    }

    /// The whole exposition, as of now.
    fn render(&self) -> String {
        let mut x = Exposition::default();
        metrics::declare_families(&mut x);
        let mut r = self.lock();
        let mut running = 0;
        for f in r.vms.values_mut() {
            let snapshot;
            let profile = match (&f.collector, &f.last) {
                (Some(c), _) => {
                    snapshot = c.snapshot();
                    &snapshot
                }
                (None, Some(p)) => p,
                (None, None) => continue,
            };
            running += usize::from(f.collector.is_some());
            let mut w = VmWriter {
                x: &mut x,
                floors: &mut f.floors,
                who: VmLabels {
                    pid: &f.pid_label,
                    comm: &f.who.comm,
                    vm: &f.who.name,
                },
            };
            let up = f.ended_at.is_none();
            metrics::write_vm(
                &mut w,
                profile,
                up,
                f.who.start_time_s,
                f.followed_since_s,
                self.extra,
            );
        }
        serve::write_exporter_metrics(&mut x, &r, running, self.start_time_s);
        x.render()
    }
}

/// `bootscope exporter`: 0 after SIGINT or SIGTERM, 2 for bad input (an
/// address that is not ADDR:PORT, a port in use or not ours to take), 1
/// when following VMs is impossible here.
pub fn run(args: ExporterArgs) -> i32 {
    let server = match serve::bind(&args.listen) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("bootscope: error: {msg}");
            return crate::cli::EXIT_USAGE;
        }
    };
    if let Err(msg) = serve::check_can_follow() {
        eprintln!("bootscope: error: {msg}");
        return crate::cli::EXIT_FAILURE;
    }
    let interrupts = match crate::signals::catch() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("bootscope: error: {e:#}");
            return crate::cli::EXIT_FAILURE;
        }
    };
    let mut config = CollectorConfig::new(TargetSpec::Pid(0));
    // Prometheus keeps the time series: the profiles' own samples would
    // only grow the daemon's memory.
    config.sample_interval = Duration::from_secs(3600);
    config.exit_codes = false;
    config.bpf_stats = !args.no_bpf_stats;
    if let Some(c) = args.collect {
        config.collectors = c;
    }
    let exporter = Arc::new(Exporter {
        registry: Mutex::new(Registry::default()),
        config,
        extra: args.labels.unwrap_or_default(),
        keep_ended: args.keep_ended,
        start_time_s: unix_now_s(),
    });
    let stop = interrupts.flag();
    let scanner = {
        let (e, stop, every) = (exporter.clone(), stop.clone(), args.scan_interval);
        std::thread::Builder::new()
            .name("bootscope-scan".into())
            .spawn(move || e.scan_loop(&stop, every))
    };
    let scanner = match scanner {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bootscope: error: cannot start the scanner thread: {e}");
            return crate::cli::EXIT_FAILURE;
        }
    };
    eprintln!(
        "exporter: serving http://{}/metrics",
        server
            .server_addr()
            .to_ip()
            .map(|a| a.to_string())
            .unwrap_or_default()
    );
    serve::answer(&server, &stop, || exporter.render());
    let _ = scanner.join();
    if let Some(sig) = interrupts.received() {
        eprintln!("exporter: stopped by {}", crate::signals::name(sig));
    }
    0
}
