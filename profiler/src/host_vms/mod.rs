//! Every VM of the host followed by one set of eBPF programs (the
//! collector's any-VM mode), for a long-running follower such as
//! `bootscope exporter`: each VMM process from its first KVM event on
//! (however short its life), and those a scan of `/proc` finds before their
//! guest runs; the final profile of each VM that ended, kept a while so
//! that readers see its final counts; and the counts of the following
//! itself. What a reader keeps per VM (the exporter: its counters' floors)
//! rides along as `S`.

pub mod discover;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use discover::VmProcess;

use crate::{
    Collector, CollectorConfig, CollectorSet, FollowedVm, Profile, ProfilerError, TargetSpec,
};

/// One VM followed (or ended and still kept).
pub struct Followed<S> {
    pub who: VmProcess,
    /// Its final profile once it ended (None while it runs).
    pub last: Option<Profile>,
    pub ended_at: Option<Instant>,
    /// When it started to be followed, in seconds since the Unix epoch.
    pub followed_since_s: f64,
    /// What the reader keeps for it.
    pub state: S,
}

/// The VMs followed and the counts of the following.
pub struct Registry<S> {
    pub vms: BTreeMap<u32, Followed<S>>,
    /// Processes that could not be followed, with their start time (not
    /// tried again while the same process holds the pid).
    refused: BTreeMap<u32, f64>,
    pub followed_total: u64,
    pub follow_errors_total: u64,
    pub ended_total: u64,
    pub scans_total: u64,
    pub scan_seconds_total: f64,
}

impl<S> Default for Registry<S> {
    fn default() -> Self {
        Self {
            vms: BTreeMap::new(),
            refused: BTreeMap::new(),
            followed_total: 0,
            follow_errors_total: 0,
            ended_total: 0,
            scans_total: 0,
            scan_seconds_total: 0.0,
        }
    }
}

/// Every VM of the host, followed by one collector.
pub struct HostVms<S> {
    registry: Mutex<Registry<S>>,
    /// Held while VMs are taken on or retired (by the scanner and by a
    /// reader): each happens once.
    upkeep: Mutex<()>,
    /// One set of eBPF programs for every VM of the host.
    collector: Collector,
    keep_ended: Duration,
}

/// Now, in seconds since the Unix epoch.
pub fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl<S: Default> HostVms<S> {
    /// Loads the programs that follow every VM: `collectors` (None: the
    /// default set), with the kernel counting their runs when `bpf_stats`.
    /// A VM that ended is kept `keep_ended` with its final profile.
    pub fn start(
        collectors: Option<CollectorSet>,
        bpf_stats: bool,
        keep_ended: Duration,
    ) -> Result<Self, ProfilerError> {
        let mut config = CollectorConfig::new(TargetSpec::AnyVm);
        // A follower's readers keep the time series: the profiles' own
        // samples would only grow a long-running process's memory.
        config.sample_interval = Duration::from_secs(3600);
        config.exit_codes = false;
        config.bpf_stats = bpf_stats;
        if let Some(c) = collectors {
            config.collectors = c;
        }
        Ok(Self {
            registry: Mutex::new(Registry::default()),
            upkeep: Mutex::new(()),
            collector: Collector::start(config)?,
            keep_ended,
        })
    }

    /// The VMs and counts, locked.
    pub fn lock(&self) -> MutexGuard<'_, Registry<S>> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_live(&self, pid: u32) -> bool {
        self.lock()
            .vms
            .get(&pid)
            .is_some_and(|f| f.ended_at.is_none())
    }

    /// Follows `who` from now on (a VM the programs or the scan found).
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
        // A VM ended a while ago may still be kept under a pid the kernel
        // has handed on: the new one replaces it.
        r.vms.insert(
            who.pid,
            Followed {
                who,
                last: None,
                ended_at: None,
                followed_since_s: since_s,
                state: S::default(),
            },
        );
    }

    /// Takes on the VMs the programs found (each from its first KVM event:
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
    /// list, when there is one), has the programs forget them, and drops
    /// VMs ended longer than `keep_ended` ago.
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

    /// Looks for new and ended VMMs every `interval` until `stop`.
    pub fn scan_loop(&self, stop: &AtomicBool, interval: Duration) {
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

    /// The profiles as of now, of every VM together and of each: with the
    /// VMs the programs found since the last scan taken on, and the final
    /// counts of those whose end they saw kept. One read of the maps
    /// serves both.
    pub fn read(&self) -> (Profile, BTreeMap<u32, Profile>) {
        let _turn = self.upkeep.lock().unwrap_or_else(|e| e.into_inner());
        let seen = self.collector.followed_vms();
        self.follow_new(&seen, &[]);
        let (all, each) = self.collector.snapshot_each();
        self.retire(&seen, None, Some(&each));
        (all, each)
    }
}
