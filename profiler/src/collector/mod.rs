//! The collector: loads the eBPF object, follows the target, streams marks
//! and thread lifetimes from the ring buffer, and turns the in-kernel
//! aggregates into a [`Profile`] whenever asked.
//!
//! ```no_run
//! use bootscope_profiler::collector::{Collector, CollectorConfig, TargetSpec};
//! let c = Collector::start(CollectorConfig::new(TargetSpec::Pid(1234)))?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let live = c.snapshot(); // as often as wanted
//! let done = c.finish();
//! # Ok::<(), bootscope_profiler::ProfilerError>(())
//! ```

mod any_vm;
mod config;
mod exit_detail;
mod exits;
mod faults;
mod guest;
mod load;
mod log;
mod maps;
mod mark_phases;
mod memslots;
mod names;
mod object;
mod plan;
mod read;
mod sampler;
mod sched;
mod serial;
mod sites;
mod sources;
mod state;
mod tail;
mod target;
mod tasks;
mod thread_info;
mod threads;
mod time_slots;
mod worker;
pub use any_vm::FollowedVm;
pub use config::{CollectorConfig, CollectorSet, TargetSpec};
pub use guest::GUEST_ATTACH_DELAY_ENV;
pub use memslots::{hold_reason, BsHeld, BsMemslot};
pub use serial::SerialLine;
pub use target::check_privileges;

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aya::maps::{MapData, RingBuf};
use bootscope_model::host::{kvm_flavour, HostRoot};
pub use bootscope_model::proc::thread_cpu_time;

use crate::bpf::{self, Source};
use crate::error::ProfilerError;
use crate::profile::*;
use crate::topology::{page_size, Topology};

use guest::{fires_in_guest, GuestAttach};
use load::{
    attach_programs, enable_run_stats, fill_topology_maps, load_object, use_raw_spte,
    ObjectSettings, Stages, SETUP_STAGES,
};
use maps::{kernel_release, map_error};
pub use names::{thread_role, vcpu_from_thread_name};
use object::BpfObject;
use plan::{attached, plan_programs, unused_maps, KvmBackend, ProgramState};
use state::State;
use target::{
    check_pid_namespace, descendants, find_or_mount_tracefs, resolve_target, seed_target,
    TargetLife,
};
use worker::worker_loop;

struct Shared {
    stop: AtomicBool,
    /// An eventfd the worker waits on with the ring buffer: stopping must
    /// not wait for a sleep that may last until the next sample (seconds
    /// when samples are spaced out on a slow machine).
    wake: OwnedFd,
    state: Mutex<State>,
    /// The guest programs' thread, once it runs in the background
    /// ([`guest`]), and whether it is waited for.
    guest_tid: AtomicI32,
    guest_hurry: AtomicBool,
    /// How many records that a reader of the profile may act on at once
    /// (a guest's mark, a VMM held at its guest's end, a new VM) the worker
    /// has applied, and the condition it signals each time.
    news: Mutex<u64>,
    news_changed: Condvar,
}

impl Shared {
    /// Counts news and wakes whoever waits for it ([`Collector::wait_news`]).
    fn tell_news(&self) {
        *self.news.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.news_changed.notify_all();
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: an 8-byte write from a live u64 to our own eventfd; an
        // eventfd write only fails when the counter would overflow, and
        // then the worker is already woken.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// A running profile. Dropping it stops profiling.
pub struct Collector {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    guest: Mutex<GuestAttach>,
    target_pid: u32,
    started: Instant,
}
/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}
/// The zero of every `t_ns`: `origin` when it is not in the future, else
/// now; and that instant on the clock of `bpf_ktime_get_ns`.
fn clock_origin(origin: Option<Instant>) -> (Instant, u64) {
    let now = Instant::now();
    let now_mono_ns = monotonic_ns();
    // Instant is CLOCK_MONOTONIC on Linux: an earlier origin shifts both.
    let started = origin.filter(|o| *o <= now).unwrap_or(now);
    let start_mono_ns = now_mono_ns.saturating_sub(now.duration_since(started).as_nanos() as u64);
    (started, start_mono_ns)
}

/// The sources read once at start-up: the threads that were there, and the
/// NUMA topology.
fn startup_sources(threads: usize, topology: &Topology) -> Vec<DataSource> {
    let beyond = if topology.pfn_ranges.len() > bpf::MAX_PFN_RANGES {
        format!(
            "; only the first {} are searched, pages beyond count as unknown node",
            bpf::MAX_PFN_RANGES
        )
    } else {
        String::new()
    };
    vec![
        DataSource {
            name: "procfs:threads".into(),
            status: "attached".into(),
            detail: "names of threads that existed before profiling started".into(),
            events: threads as u64,
            collector: "threads".into(),
            ..Default::default()
        },
        DataSource {
            name: "sysfs:numa".into(),
            status: "attached".into(),
            detail: format!(
                "{} node(s); page frames mapped to nodes from {} ({} range(s){})",
                topology.nodes.len(),
                topology.pfn_source,
                topology.pfn_ranges.len(),
                beyond
            ),
            events: 0,
            collector: "numa".into(),
            ..Default::default()
        },
    ]
}

/// Verifies and attaches the planned programs, but the guest programs when
/// they are deferred (`defer`); returns whether some are. Err when none is
/// attached or left to attach.
/// The processes whose threads are seeded at start: a held child's (it
/// has no threads or children yet), none in every VM's mode (the programs
/// find the VMs), else the target and its live descendants.
fn processes_to_seed(target: TargetSpec, target_pid: u32) -> Vec<u32> {
    match target {
        TargetSpec::Launched(p) => vec![p],
        TargetSpec::AnyVm => Vec::new(),
        _ => descendants(target_pid),
    }
}

/// What the profile says of the host.
fn host_info(topology: &Topology) -> HostInfo {
    HostInfo {
        kvm: kvm_flavour(&HostRoot::default()).as_str().to_string(),
        kernel_release: kernel_release(),
        cpus: topology.cpu_nodes.len() as u32,
        numa_nodes: topology.nodes.clone(),
    }
}

fn attach_setup_programs(
    ebpf: &mut aya::Ebpf,
    programs: &mut [ProgramState],
    defer: bool,
    stages: &mut Stages,
) -> Result<bool, ProfilerError> {
    attach_programs(
        ebpf,
        programs,
        |spec| !(defer && fires_in_guest(spec)),
        stages,
        &SETUP_STAGES,
    );
    if !programs.iter().any(ProgramState::is_attached) {
        let detail = programs
            .iter()
            .map(|p| format!("{}: {} {}", p.spec.source_name(), p.status, p.detail))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ProfilerError::NothingAttached { detail });
    }
    Ok(defer
        && programs
            .iter()
            .any(|p| p.is_attached() && fires_in_guest(&p.spec)))
}

/// The ring buffer's size: a power of two of at least a page.
fn ring_size(asked: u32) -> u32 {
    asked
        .max(page_size() as u32)
        .checked_next_power_of_two()
        .unwrap_or(1 << 30)
}

/// The log of marks and phases, its phases' port writes opened in the
/// object (named as the marks' phases are), and the fault tail's window
/// armed when that collector runs.
fn event_log(
    ebpf: &mut aya::Ebpf,
    config: &CollectorConfig,
) -> Result<log::EventLog, ProfilerError> {
    let mut log = log::EventLog::new(config.boot_time_port);
    mark_phases::fill(ebpf, &mut log.phase_names)?;
    if config.collectors.tail {
        tail::arm(ebpf).map_err(|e| map_error("tail_window", e))?;
    }
    Ok(log)
}

/// The ring buffer of marks and thread lifetimes, taken out of the loaded
/// object for the worker thread to read.
fn take_ring(ebpf: &mut BpfObject) -> Result<RingBuf<MapData>, ProfilerError> {
    let ring = ebpf
        .take_map("events")
        .ok_or_else(|| map_error("events", "absent"))?;
    RingBuf::try_from(ring).map_err(|e| map_error("events", e))
}

impl Collector {
    /// Starts profiling. Tracepoints this kernel lacks are recorded as
    /// missing in `sources[]` and the rest goes on; errors are for what
    /// makes profiling impossible.
    pub fn start(config: CollectorConfig) -> Result<Collector, ProfilerError> {
        let mut stages = Stages::new();
        check_privileges()?;
        check_pid_namespace()?;
        let (kind, target_pid) = resolve_target(config.target)?;
        let tracefs = find_or_mount_tracefs()?;
        stages.end("checks");
        let topology = Topology::read(Path::new("/"));
        stages.end("topology");

        let plan = plan_programs(&config.collectors, &tracefs, KvmBackend::detect());
        let ring_bytes = ring_size(config.ring_buffer_bytes);
        stages.end("tracefs formats");
        let unused = unused_maps(&plan.programs);
        let settings = ObjectSettings {
            globals: &plan.globals,
            direct: &plan.direct,
            fork_follows: !attached(&plan.programs, Source::TaskNewtask),
            ring_bytes,
            unused_maps: &unused,
        };
        // An origin given is the profile's zero whenever it is read; time
        // slot 0 starts there (else about now, before the programs load).
        let given_origin = config.origin.map(|o| clock_origin(Some(o)));
        let slot_base = given_origin.map_or_else(monotonic_ns, |(_, mono)| mono);
        let loaded = load_object(&config, &topology, &settings, slot_base, &mut stages)?;
        let mut ebpf = loaded.ebpf;
        fill_topology_maps(&mut ebpf, &topology)?;
        let log = event_log(&mut ebpf, &config)?;

        // The target, its live descendants and their threads.
        let (started, start_mono_ns) = given_origin.unwrap_or_else(|| clock_origin(None));
        let procs = processes_to_seed(config.target, target_pid);
        let (threads, tgids) = seed_target(&mut ebpf, target_pid, &procs, &config.collectors)?;
        stages.end("seed");

        // Before attaching, so that every run of ours is counted.
        let (bpf_stats, stats_source) = enable_run_stats(config.bpf_stats);
        let mut programs = plan.programs;
        use_raw_spte(&mut programs, loaded.spte_gfn);
        let deferred = attach_setup_programs(
            &mut ebpf,
            &mut programs,
            config.defer_guest_programs,
            &mut stages,
        )?;

        let mut ebpf = BpfObject::new(ebpf);
        let ring = take_ring(&mut ebpf)?;

        let host = host_info(&topology);
        let mut extra_sources = startup_sources(threads.len(), &topology);
        extra_sources.push(loaded.kernel_btf.source());
        extra_sources.extend(loaded.counters);
        extra_sources.extend(stats_source);
        stages.end("finish");
        let state = State {
            bpf: ebpf,
            setup: state::Setup {
                bpf_stats,
                startup: stages.done,
                host,
                topology,
                reasons: plan.reasons,
                programs,
                extra_sources,
                ring_bytes,
                exit_sites: config.exit_sites,
                guest_attached: None,
                detached_runs: BTreeMap::new(),
            },
            clock: state::Clock::new((started, start_mono_ns), config.time_slots, slot_base),
            tasks: tasks::Tasks::new(
                kind.into(),
                config.command.clone(),
                target_pid,
                TargetLife::watch(target_pid, config.target.never_ends()),
                (threads, tgids),
                loaded.kernel_btf.reads_exit_codes(),
            ),
            log,
            sampler: sampler::Sampler::new(config.target.kvm_stats_reader()),
            any_vm: any_vm::AnyVm::default(),
        };
        let guest = if deferred {
            GuestAttach::Pending
        } else {
            GuestAttach::Done
        };
        Self::spawn(state, ring, &config, guest)
    }

    /// Hands the state to the worker thread that reads the ring buffer and
    /// takes samples.
    fn spawn(
        state: State,
        ring: RingBuf<MapData>,
        config: &CollectorConfig,
        guest: GuestAttach,
    ) -> Result<Collector, ProfilerError> {
        let target_pid = state.tasks.target_pid;
        let started = state.clock.started;
        // SAFETY: eventfd takes an initial value and flags, no pointers.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(ProfilerError::Thread {
                source: std::io::Error::last_os_error(),
            });
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            // SAFETY: a fresh descriptor owned by nobody else.
            wake: unsafe { OwnedFd::from_raw_fd(wake) },
            state: Mutex::new(state),
            guest_tid: AtomicI32::new(0),
            guest_hurry: AtomicBool::new(false),
            news: Mutex::new(0),
            news_changed: Condvar::new(),
        });
        let worker_shared = shared.clone();
        let sample_interval = config.sample_interval.max(Duration::from_millis(10));
        let drain_interval = config.drain_interval;
        let worker = std::thread::Builder::new()
            .name("bootscope-collect".into())
            .spawn(move || worker_loop(worker_shared, ring, sample_interval, drain_interval))
            .map_err(|source| ProfilerError::Thread { source })?;
        Ok(Collector {
            shared,
            worker: Some(worker),
            guest: Mutex::new(guest),
            target_pid,
            started,
        })
    }

    /// The pid being profiled.
    pub fn target_pid(&self) -> u32 {
        self.target_pid
    }

    /// When profiling started (the zero of every `t_ns`).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// True once the target process has ended.
    pub fn target_ended(&self) -> bool {
        let st = self.lock();
        st.tasks.target.ended_ns.is_some() || st.tasks.life.ended()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in the worker cannot leave the state half-updated in a way
        // that matters more than losing the profile.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a mark that arrives in-process (bootscope's own VMM), stamped
    /// now. Port marks (`debug_port`, `boot_time_port`) are ignored while the
    /// phases collector sees the same writes in the kernel; returns whether
    /// the mark was recorded.
    pub fn add_mark(&self, name: &str, source: MarkSource, value: Option<u64>) -> bool {
        self.add_mark_at(name, source, value, Instant::now())
    }

    /// As [`Collector::add_mark`], for a mark that happened at `at`.
    pub fn add_mark_at(
        &self,
        name: &str,
        source: MarkSource,
        value: Option<u64>,
        at: Instant,
    ) -> bool {
        let mut st = self.lock();
        let kernel_sees_ports = attached(&st.setup.programs, Source::MarkerPio);
        if source.is_port() && kernel_sees_ports {
            return false;
        }
        let t_ns = at.saturating_duration_since(st.clock.started).as_nanos() as u64;
        let tgid = st.tasks.target_pid;
        st.log.vmm_marks += 1;
        st.push_mark(Mark {
            name: name.into(),
            source,
            t_ns,
            value,
            tgid: Some(tgid),
            guest_rip: None,
        });
        true
    }

    /// The profile so far; callable as often as wanted.
    pub fn snapshot(&self) -> Profile {
        let mut st = self.lock();
        st.poll_target();
        let now = st.now_ns();
        st.build(now)
    }

    /// The per-slot counts so far (`time_slots`; None unless
    /// [`CollectorConfig::time_slots`] asked for them). Reads the largest
    /// map there is: for once the target has stopped, not for every
    /// refresh.
    pub fn time_slots(&self) -> Option<TimeSlots> {
        let st = self.lock();
        st.clock.time_slots?;
        let mut counts = [0; bpf::SOURCE_COUNT];
        let exits = st.exit_reasons(false, &mut counts);
        let faults = st.faults(&mut counts);
        st.read_time_slots(&exits, &faults)
    }

    /// Follows process `tgid` from now on, as if its guest had run
    /// (with [`TargetSpec::AnyVm`], for a VM found before its first
    /// exit). Err when the kernel's table of followed processes is full.
    pub fn follow(&self, tgid: u32) -> Result<(), ProfilerError> {
        self.lock().follow(tgid)
    }

    /// The VMs followed (and not forgotten), by process id.
    pub fn followed_vms(&self) -> Vec<FollowedVm> {
        self.lock().any_vm.vms.values().cloned().collect()
    }

    /// One profile per followed VM (see [`Collector::followed_vms`]), each
    /// with only its own counts, and one of them all (the programs' own
    /// statistics, lost events and map overflows are the whole set's): the
    /// maps are read once for all.
    pub fn snapshot_each(&self) -> (Profile, BTreeMap<u32, Profile>) {
        self.lock().build_each()
    }

    /// Drops what was counted for `tgids` (VMs that ended, whose final
    /// profiles were taken) and the processes they started.
    pub fn forget(&self, tgids: &[u32]) {
        self.lock().forget_vms(tgids);
    }

    /// Waits until the worker has applied news past `seen` (a guest's
    /// mark, a VMM held at its guest's end, a new VM), at most `limit`;
    /// returns the count to pass next time. Lets a reader of the profile
    /// sleep instead of looking every few milliseconds: on a one-CPU
    /// machine each wake-up is taken from the guest.
    pub fn wait_news(&self, seen: u64, limit: Duration) -> u64 {
        let news = self.shared.news.lock().unwrap_or_else(|e| e.into_inner());
        let (news, _) = self
            .shared
            .news_changed
            .wait_timeout_while(news, limit, |n| *n == seen)
            .unwrap_or_else(|e| e.into_inner());
        *news
    }

    /// Wakes every [`Self::wait_news`] (a reader told to stop).
    pub fn wake_news(&self) {
        self.shared.tell_news();
    }

    /// A VMM profiling itself calls this once its vCPUs exist: their KVM
    /// statistics files are found now, in one scan of its descriptor table,
    /// instead of scan after scan until they show up (and their threads'
    /// names, for the sched collector without the threads collector).
    pub fn vcpus_created(&self) {
        let mut st = self.lock();
        st.sampler.kvm_stats.request_scan();
        st.refresh_kvm_stats(true);
        st.name_watched_threads();
    }

    /// Starts attaching the guest programs on a thread of their own, when
    /// they were deferred ([`CollectorConfig::defer_guest_programs`]) and
    /// not started yet.
    pub fn attach_guest_programs(&self) {
        let mut guest = self.guest_lock();
        if matches!(*guest, GuestAttach::Pending) {
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("bootscope-guest".into())
                .spawn(move || guest::attach_guest_programs(&shared, true));
            // Without a thread they are attached by the wait, on the
            // caller's.
            if let Ok(handle) = spawned {
                *guest = GuestAttach::Running(handle);
            }
        }
    }

    /// True when no guest program is left to attach: none deferred, or all
    /// attached (or failed).
    pub fn guest_programs_attached(&self) -> bool {
        match &*self.guest_lock() {
            GuestAttach::Done => true,
            GuestAttach::Pending => false,
            GuestAttach::Running(h) => h.is_finished(),
        }
    }

    /// Waits until the deferred guest programs are attached, attaching them
    /// on this thread if they were not started. Returns when their attach
    /// ended; None when none were deferred.
    pub fn wait_guest_programs(&self) -> Option<Instant> {
        let mut guest = self.guest_lock();
        match std::mem::replace(&mut *guest, GuestAttach::Done) {
            GuestAttach::Pending => guest::attach_guest_programs(&self.shared, false),
            GuestAttach::Running(h) => {
                if !h.is_finished() {
                    guest::hurry(&self.shared);
                }
                let _ = h.join();
            }
            GuestAttach::Done => {}
        }
        drop(guest);
        self.lock().setup.guest_attached
    }

    /// Guest programs still deferred are not attached now (the target never
    /// ran a vCPU); a running attach is waited for.
    fn settle_guest_programs(&self) {
        let mut guest = self.guest_lock();
        match std::mem::replace(&mut *guest, GuestAttach::Done) {
            GuestAttach::Pending => guest::skip_guest_programs(&self.shared),
            GuestAttach::Running(h) => {
                guest::hurry(&self.shared);
                let _ = h.join();
            }
            GuestAttach::Done => {}
        }
    }

    fn guest_lock(&self) -> MutexGuard<'_, GuestAttach> {
        self.guest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops profiling and returns the final profile (partial if the target
    /// ended early).
    pub fn finish(mut self) -> Profile {
        // Dropping self afterwards detaches the programs.
        self.final_profile()
    }

    /// The final profile, like [`finish`](Self::finish), but leaves the
    /// programs attached (for a caller that exits right away and lets the
    /// kernel release them).
    pub fn final_profile(&mut self) -> Profile {
        self.settle_guest_programs();
        self.stop_worker();
        let mut st = self.lock();
        let began = thread_cpu_time();
        st.stop_following();
        st.poll_target();
        st.take_sample();
        st.sampler.reader_cpu += thread_cpu_time().saturating_sub(began);
        let now = st.now_ns();
        st.clock.finished_ns = Some(now);
        let mut profile = st.build(now);
        // Read once, at the end: the slot map is the largest there is.
        profile.time_slots = st.read_time_slots(&profile.exits, &profile.page_faults);
        profile
    }

    fn guest_lock_mut(&mut self) -> &mut GuestAttach {
        self.guest.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    fn stop_worker(&mut self) {
        self.shared.stop();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        // The guest programs' thread holds the object: it ends first.
        if let GuestAttach::Running(h) = std::mem::replace(self.guest_lock_mut(), GuestAttach::Done)
        {
            let _ = h.join();
        }
        self.stop_worker();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::CollectorKind;

    #[test]
    fn collector_is_shareable_with_a_ui_thread() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Collector>();
    }

    #[test]
    fn collector_lists() {
        let s = CollectorSet::parse("exits, phases").unwrap();
        assert!(s.exits && s.phases && !s.faults && !s.threads && !s.numa);
        assert!(s.exit_latency && s.has(CollectorKind::ExitLatency));
        let all = CollectorSet::parse("all").unwrap();
        assert_eq!(all, CollectorSet::ALL);
        assert!(all.exits && all.exit_latency && all.faults && all.threads && all.numa);
        assert!(all.sched && !CollectorSet::DEFAULT.sched);
        assert!(all.tail && !CollectorSet::DEFAULT.tail);
        assert!(CollectorSet::parse("tail")
            .unwrap()
            .has(CollectorKind::Tail));
        let sched = CollectorSet::parse("sched").unwrap();
        assert!(sched.sched && sched.has(CollectorKind::Sched) && !sched.threads);
        assert_eq!(
            CollectorSet::DEFAULT,
            CollectorSet {
                sched: false,
                tail: false,
                tail_total: false,
                ..CollectorSet::ALL
            }
        );
        // The life count comes with the tail, and only when named.
        let total = CollectorSet::parse("tail-total").unwrap();
        assert!(total.has(CollectorKind::Tail) && total.has(CollectorKind::TailTotal));
        let tail = CollectorSet::parse("tail").unwrap();
        assert!(!tail.has(CollectorKind::TailTotal));
        let each = CollectorSet::parse(&CollectorSet::NAMES.join(",")).unwrap();
        assert_eq!(each, CollectorSet::ALL);
        // Exits counted, their latency not; named with exits, exits wins.
        let counts = CollectorSet::parse("exit-counts").unwrap();
        assert!(counts.exits && !counts.exit_latency);
        assert!(counts.has(CollectorKind::Exits) && !counts.has(CollectorKind::ExitLatency));
        assert!(
            CollectorSet::parse("exit-counts,exits")
                .unwrap()
                .exit_latency
        );
        let e = CollectorSet::parse("exits,pages").unwrap_err();
        assert!(
            e.contains("\"pages\"") && e.contains("exits, exit-counts, faults"),
            "{e}"
        );
        assert!(CollectorSet::parse("").unwrap_err().contains("empty"));
        assert!(CollectorSet::parse("exits,").unwrap_err().contains("empty"));
    }
}
