//! `bootscope exporter`: follows every VMM on the host (any process holding
//! a KVM VM) with the eBPF collectors and serves their metrics to
//! Prometheus over HTTP (docs/export.md).
//!
//! One set of eBPF programs follows every VM: each process from its first
//! KVM event on (however short its life), and those a scan of `/proc`
//! finds before their guest runs. A scanner thread, every
//! `--scan-interval`, starts serving the VMs found and takes the final
//! counts of those that ended; the main thread answers scrapes from the
//! programs' maps, read once per scrape and split by process.

mod discover;
mod metrics;
mod serve;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bootscope::exporter_http::{self, HttpStats, Limits};
use bootscope_profiler::{
    Collector, CollectorConfig, CollectorSet, FollowedVm, Profile, TargetSpec,
};

use bootscope_model::prometheus::Exposition;
use discover::VmProcess;
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

/// One VM followed (or ended and still served).
struct Followed {
    who: VmProcess,
    pid_label: String,
    /// Its final profile once it ended (None while it runs).
    last: Option<Profile>,
    ended_at: Option<Instant>,
    followed_since_s: f64,
    floors: Floors,
}

/// What the scanner and the scrapes share.
#[derive(Default)]
struct Registry {
    vms: BTreeMap<u32, Followed>,
    /// Processes that could not be followed, with their start time (not
    /// tried again while the same process holds the pid).
    refused: BTreeMap<u32, f64>,
    followed_total: u64,
    follow_errors_total: u64,
    ended_total: u64,
    scans_total: u64,
    scan_seconds_total: f64,
}

struct Exporter {
    registry: Mutex<Registry>,
    /// Held while VMs are taken on or retired (by the scanner and by a
    /// scrape): each happens once.
    upkeep: Mutex<()>,
    /// One set of eBPF programs for every VM of the host.
    collector: Collector,
    extra: ExtraLabels,
    keep_ended: Duration,
    start_time_s: f64,
    http: Arc<HttpStats>,
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

    fn is_live(&self, pid: u32) -> bool {
        self.lock()
            .vms
            .get(&pid)
            .is_some_and(|f| f.ended_at.is_none())
    }

    /// Serves `who` from now on (a VM the programs or the scan found).
    fn register(&self, who: VmProcess, since_s: f64) {
        eprintln!(
            "exporter: following pid {} ({}{})",
            who.pid,
            who.comm,
            if who.name.is_empty() {
                String::new()
            } else {
                format!(", vm {}", who.name)
            }
        );
        let mut r = self.lock();
        r.followed_total += 1;
        r.refused.remove(&who.pid);
        // A VM ended a while ago may still be served under a pid the kernel
        // has handed on: the new one replaces it.
        r.vms.insert(
            who.pid,
            Followed {
                pid_label: who.pid.to_string(),
                who,
                last: None,
                ended_at: None,
                followed_since_s: since_s,
                floors: Floors::default(),
            },
        );
    }

    /// Serves the VMs the programs found (each from its first KVM event:
    /// however short it was) and follows those the scan found before their
    /// guest ran (from now: their set-up's page faults and threads too).
    fn follow_new(&self, seen: &[FollowedVm], holding: &[u32]) {
        let proc_root = Path::new("/proc");
        let started = self.collector.started();
        for vm in seen {
            if self.is_live(vm.tgid) {
                continue;
            }
            // Named as it was when the programs found it: it may be gone
            // since.
            let who = discover::from_followed(proc_root, vm);
            let since = unix_now_s()
                - Instant::now()
                    .saturating_duration_since(started + Duration::from_nanos(vm.since_ns))
                    .as_secs_f64();
            self.register(who, since);
        }
        for &pid in holding {
            if self.is_live(pid) {
                continue;
            }
            let Some(who) = discover::describe(proc_root, pid) else {
                continue;
            };
            if self.lock().refused.get(&pid) == Some(&who.start_time_s) {
                continue;
            }
            match self.collector.follow(pid) {
                Ok(()) => self.register(who, unix_now_s()),
                Err(e) => {
                    eprintln!("exporter: cannot follow pid {pid} ({}): {e}", who.comm);
                    let mut r = self.lock();
                    r.follow_errors_total += 1;
                    r.refused.insert(pid, who.start_time_s);
                }
            }
        }
    }

    /// Takes the final profiles of VMs that ended (the programs saw the
    /// process exit) or no longer hold a VM (not in `holding`, the scan's
    /// list, when there is one), has the programs forget them, and stops
    /// serving VMs ended longer than `keep_ended` ago.
    /// `taken`: the profiles of every VM read just before, if the caller
    /// has them (else they are read here when a VM ended).
    fn retire(
        &self,
        seen: &[FollowedVm],
        holding: Option<&[u32]>,
        taken: Option<&BTreeMap<u32, Profile>>,
    ) {
        let ending: Vec<u32> = {
            let r = self.lock();
            r.vms
                .iter()
                .filter(|(_, f)| f.ended_at.is_none())
                .map(|(&pid, _)| pid)
                .filter(|pid| {
                    holding.is_some_and(|h| !h.contains(pid))
                        || seen.iter().any(|v| v.tgid == *pid && v.ended_ns.is_some())
                })
                .collect()
        };
        if !ending.is_empty() {
            let read;
            let each = match taken {
                Some(t) => t,
                None => {
                    read = self.collector.snapshot_each().1;
                    &read
                }
            };
            self.collector.forget(&ending);
            let mut r = self.lock();
            for pid in &ending {
                let last = each.get(pid).cloned().unwrap_or_default();
                eprintln!(
                    "exporter: pid {pid} ended ({} exits seen)",
                    last.exits.total
                );
                if let Some(f) = r.vms.get_mut(pid) {
                    f.last = Some(last);
                    f.ended_at = Some(Instant::now());
                }
            }
            r.ended_total += ending.len() as u64;
        }
        let keep = self.keep_ended;
        let mut r = self.lock();
        r.vms
            .retain(|_, f| f.ended_at.is_none_or(|t| t.elapsed() < keep));
        if let Some(h) = holding {
            r.refused.retain(|pid, _| h.contains(pid));
        }
    }

    fn scan_loop(&self, stop: &AtomicBool, interval: Duration) {
        while !stop.load(Ordering::SeqCst) {
            let began = Instant::now();
            // The programs' list first: a VM in it that still runs holds its
            // VM when the scan looks.
            {
                let _turn = self.upkeep.lock().unwrap_or_else(|e| e.into_inner());
                let seen = self.collector.followed_vms();
                let holding = discover::scan(Path::new("/proc"));
                self.follow_new(&seen, &holding);
                let seen = self.collector.followed_vms();
                self.retire(&seen, Some(&holding), None);
            }
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

    /// The whole exposition, as of now: with the VMs the programs found
    /// since the last scan, and the final counts of those whose end they
    /// saw.
    fn render(&self) -> String {
        // One read of the maps serves the VMs that ended (their final
        // counts) and the exposition.
        let (all, each) = {
            let _turn = self.upkeep.lock().unwrap_or_else(|e| e.into_inner());
            let seen = self.collector.followed_vms();
            self.follow_new(&seen, &[]);
            let (all, each) = self.collector.snapshot_each();
            self.retire(&seen, None, Some(&each));
            (all, each)
        };
        let mut x = Exposition::default();
        metrics::declare_families(&mut x);
        let mut r = self.lock();
        let mut running = 0;
        for (pid, f) in r.vms.iter_mut() {
            let Some(profile) = f.last.as_ref().or_else(|| each.get(pid)) else {
                continue;
            };
            let up = f.ended_at.is_none();
            running += usize::from(up);
            let mut w = VmWriter {
                x: &mut x,
                floors: &mut f.floors,
                who: VmLabels {
                    pid: &f.pid_label,
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
    let mut config = CollectorConfig::new(TargetSpec::AnyVm);
    // Prometheus keeps the time series: the profiles' own samples would
    // only grow the daemon's memory.
    config.sample_interval = Duration::from_secs(3600);
    config.exit_codes = false;
    config.bpf_stats = !args.no_bpf_stats;
    if let Some(c) = args.collect {
        config.collectors = c;
    }
    let collector = match Collector::start(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bootscope: error: cannot load the eBPF programs: {e}");
            return crate::common::EXIT_FAILURE;
        }
    };
    let exporter = Arc::new(Exporter {
        registry: Mutex::new(Registry::default()),
        upkeep: Mutex::new(()),
        collector,
        extra: args.labels.unwrap_or_default(),
        keep_ended: args.keep_ended,
        start_time_s: unix_now_s(),
        http: Arc::new(HttpStats::default()),
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
