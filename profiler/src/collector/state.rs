//! The state behind the collector's lock: the loaded object and the parts
//! that read it (the event log, the tasks, the sampler, every VM's mode),
//! and what needs more than one part (applying a ring buffer event,
//! telling the kernel a phase, taking a sample).

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::Pod;
use bootscope_model::proc::thread_cpu_time;

use super::any_vm::{self, AnyVm, View};
use super::log::EventLog;
use super::mark_phases;
use super::object::BpfObject;
use super::plan::ProgramState;
use super::sampler::Sampler;
use super::sched;
use super::tasks::Tasks;
use crate::bpf::{self, BsEvent, BsHist, BsSchedKey, Source};
use crate::error::ProfilerError;
use crate::profile::*;
use crate::reasons::ReasonTables;
use crate::topology::Topology;

/// Everything behind the lock: the loaded object and the parts that
/// read it.
pub(super) struct State {
    pub(super) bpf: BpfObject,
    /// What was loaded and attached, and what the profile says of the host.
    pub(super) setup: Setup,
    /// The profile's clock.
    pub(super) clock: Clock,
    /// The target, its processes and their threads.
    pub(super) tasks: Tasks,
    /// Marks and the phase each process is in.
    pub(super) log: EventLog,
    /// Counter samples and KVM's own statistics.
    pub(super) sampler: Sampler,
    /// The VMs followed apart in every VM's mode.
    pub(super) any_vm: AnyVm,
}

/// What was loaded and attached, and what the profile says about the host
/// and how it got there.
pub(super) struct Setup {
    /// Held while the kernel keeps run statistics for `--bpf-stats`.
    pub(super) bpf_stats: Option<OwnedFd>,
    pub(super) startup: Vec<StartupStage>,
    pub(super) host: HostInfo,
    pub(super) topology: Topology,
    pub(super) reasons: ReasonTables,
    pub(super) programs: Vec<ProgramState>,
    pub(super) extra_sources: Vec<DataSource>,
    pub(super) ring_bytes: u32,
    /// Exits are counted by site too (`exits.sites`).
    pub(super) exit_sites: bool,
    /// When the deferred guest programs' attach ended.
    pub(super) guest_attached: Option<Instant>,
    /// Runs and run time (`--bpf-stats`) of programs detached before the
    /// end, read as they were detached, by program name.
    pub(super) detached_runs: BTreeMap<&'static str, super::sources::RunStats>,
}

/// The profile's clock: its zero, and the in-kernel time slots.
pub(super) struct Clock {
    pub(super) started: Instant,
    pub(super) start_mono_ns: u64,
    pub(super) finished_ns: Option<u64>,
    /// Exits and faults are counted per time slot too (`time_slots`).
    pub(super) time_slots: Option<SlotClock>,
}

/// Where the in-kernel time slots lie: slot `i` starts at
/// `base_mono_ns + i * width_ns` on CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug)]
pub(super) struct SlotClock {
    pub(super) width_ns: u64,
    pub(super) base_mono_ns: u64,
    /// Entries the map was made with.
    pub(super) capacity: u32,
}

impl Clock {
    /// A clock whose zero is `origin` (its `Instant` and CLOCK_MONOTONIC
    /// time), with time slots of width `slots` (when on) from
    /// `slot_base_mono_ns`.
    pub(super) fn new(
        origin: (Instant, u64),
        slots: Option<Duration>,
        slot_base_mono_ns: u64,
    ) -> Clock {
        let (started, start_mono_ns) = origin;
        Clock {
            started,
            start_mono_ns,
            finished_ns: None,
            time_slots: slots.map(|w| SlotClock {
                width_ns: (w.as_nanos() as u64).max(1),
                base_mono_ns: slot_base_mono_ns,
                capacity: super::load::time_slot_entries(),
            }),
        }
    }

    /// Now, or the end of profiling once it ended (ns since the zero).
    pub(super) fn now_ns(&self) -> u64 {
        self.finished_ns
            .unwrap_or_else(|| self.started.elapsed().as_nanos() as u64)
    }

    /// A CLOCK_MONOTONIC time of the programs on the profile's clock.
    pub(super) fn ktime_to_t(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.start_mono_ns)
    }
}

/// `BPF_EXIST` (uapi linux/bpf.h): update only an entry that is there.
pub(super) const BPF_EXIST: u64 = 2;

impl State {
    pub(super) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub(super) fn ktime_to_t(&self, ts: u64) -> u64 {
        self.clock.ktime_to_t(ts)
    }

    /// Records a mark; if it opens a new phase for its process, tells the
    /// kernel. A port mark's phase the kernel switched to at the write
    /// itself (`mark_phases`) where it sees the port writes; another mark's
    /// is told here, unless the kernel switched the process's phase at a
    /// port write after the mark.
    pub(super) fn push_mark(&mut self, mark: Mark) {
        self.close_tail_window(&mark);
        let port = mark.source.is_port() && self.attached(Source::MarkerPio);
        let mono_ns = mark.t_ns.saturating_add(self.clock.start_mono_ns);
        let tgid = mark.tgid.unwrap_or(self.tasks.target_pid);
        let opened = self.log.record(mark, self.tasks.target_pid);
        if port {
            return;
        }
        if let Some(rank) = self.log.reached(tgid) {
            mark_phases::note_rank(&mut self.bpf, tgid, rank);
        }
        if let Some((tgid, idx)) = opened {
            if !mark_phases::switched_after(&self.bpf, tgid, mono_ns) {
                self.set_phase(tgid, idx);
            }
        }
    }

    /// Tells the kernel a process's phase: the target's in its array slot
    /// (unless it has ended: the slot is then cleared), a descendant's in
    /// `followed` (only while it is there: an ended one is not revived).
    pub(super) fn set_phase(&mut self, tgid: u32, phase: u32) {
        if tgid == self.tasks.target_pid {
            if self.tasks.target.ended_ns.is_some() {
                return;
            }
            if let Some(map) = self.bpf.map_mut("target") {
                if let Ok(mut slot) = Array::<&mut MapData, bpf::BsTarget>::try_from(map) {
                    let _ = slot.set(0, bpf::BsTarget { tgid, phase }, 0);
                }
            }
        }
        if let Some(map) = self.bpf.map_mut("followed") {
            if let Ok(mut m) = BpfHashMap::<&mut MapData, u32, u32>::try_from(map) {
                let _ = m.insert(tgid, phase, BPF_EXIST);
            }
        }
    }

    /// Stops counting anything of the target: the final read then sees
    /// every map as of one moment (the reading thread of a VMM profiling
    /// itself would otherwise add host page faults of its own between one
    /// map's read and the next).
    pub(super) fn stop_following(&mut self) {
        if let Some(map) = self.bpf.map_mut("target") {
            if let Ok(mut slot) = Array::<&mut MapData, bpf::BsTarget>::try_from(map) {
                let _ = slot.set(0, bpf::BsTarget { tgid: 0, phase: 0 }, 0);
            }
        }
        if let Some(map) = self.bpf.map_mut("followed") {
            if let Ok(mut m) = BpfHashMap::<&mut MapData, u32, u32>::try_from(map) {
                for tgid in &self.tasks.tgids {
                    let _ = m.remove(tgid);
                }
            }
        }
    }

    pub(super) fn apply_event(&mut self, e: &BsEvent) {
        self.log.ring_events += 1;
        let t = self.ktime_to_t(e.ts_ns);
        match e.kind {
            bpf::event_kind::MARK => {
                let mark = self.log.port_mark(e, t);
                self.push_mark(mark);
            }
            bpf::event_kind::TASK_NEW => self.task_new(e, t),
            bpf::event_kind::TASK_RENAME => self.tasks.rename(e.tid, e.tgid, e.comm(), t),
            bpf::event_kind::TASK_EXIT => {
                let last = e.arg1 != 0;
                self.tasks.exit(e.tid, e.tgid, e.comm(), e.arg0, last, t);
                if last {
                    // Its last exit is counted: read KVM's total one last
                    // time and let the VM go.
                    self.sampler.kvm_stats.release(e.tgid);
                    self.any_vm.note_end(e.tgid, t);
                }
            }
            bpf::event_kind::VM_NEW => self.note_vm(e.tgid, e.comm(), t),
            bpf::event_kind::SERIAL_LINE => {
                let line = super::serial::SerialLine::from_event(e, |ts| self.ktime_to_t(ts));
                self.log.push_serial_line(line);
            }
            _ => {}
        }
    }

    /// A task started: a thread of a followed process, or a process (which
    /// starts in its parent's phase, and in every VM's mode belongs to its
    /// parent's VM).
    fn task_new(&mut self, e: &BsEvent, t: u64) {
        let tgid = if e.tgid == 0 { e.tid } else { e.tgid };
        // Without clone flags (fork fallback) a thread cannot be told
        // from a process: it is filed as its own.
        let new_process = e.arg1 != bpf::CLONE_FLAGS_UNKNOWN && e.arg1 & bpf::CLONE_THREAD == 0;
        if new_process {
            self.tasks.tgids.insert(e.tid);
            let parent_tgid = self.tasks.threads.get(&(e.arg0 as u32)).map(|t| t.tgid);
            if let Some(p) = parent_tgid.and_then(|p| self.log.current_phase.get(&p).cloned()) {
                self.log.current_phase.insert(e.tid, p);
            }
            // The parent is the thread that forked: a process of the VM's
            // (or its own) tgid.
            let parent = parent_tgid.unwrap_or(e.tgid);
            self.any_vm.note_child(e.tid, parent);
        }
        let entry = self.tasks.threads.entry(e.tid).or_default();
        entry.tgid = tgid;
        entry.name = e.comm();
        entry.start_ns = t;
    }

    /// Notices a target that ended without its exit event (missed, or the
    /// threads collector is off).
    pub(super) fn poll_target(&mut self) {
        let now = self.now_ns();
        self.tasks.poll_target(now);
    }

    pub(super) fn source_counts(&self) -> [u64; bpf::SOURCE_COUNT] {
        let mut out = [0u64; bpf::SOURCE_COUNT];
        if let Some(map) = self.bpf.map("source_events") {
            if let Ok(a) = PerCpuArray::<&MapData, u64>::try_from(map) {
                for (i, slot) in out.iter_mut().enumerate() {
                    if let Ok(v) = a.get(&(i as u32), 0) {
                        *slot = v.iter().sum();
                    }
                }
            }
        }
        out
    }

    /// Whether KVM's statistics must be read on every tick: until each
    /// followed VM's are held (a short-lived VM's would go with it). With
    /// nothing followed (every VM's mode, before the first one), no. In
    /// every VM's mode only for VMs followed less than
    /// [`HOLD_WINDOW_NS`](any_vm::HOLD_WINDOW_NS) ago: a VMM that never
    /// opens vCPU statistics files (QEMU, unless asked) is then looked at
    /// only at scrapes.
    pub(super) fn kvm_stats_wanted(&self) -> bool {
        if self.any_vm.vms.is_empty() {
            return !self.tasks.tgids.is_empty() && self.sampler.kvm_stats.needs_frequent_reads();
        }
        !self.vms_to_hold().is_empty()
    }

    /// Live VMs followed less than
    /// [`HOLD_WINDOW_NS`](any_vm::HOLD_WINDOW_NS) ago whose KVM statistics
    /// are not held yet.
    fn vms_to_hold(&self) -> Vec<u32> {
        let kvm_stats = &self.sampler.kvm_stats;
        self.any_vm
            .vms_to_hold(self.now_ns(), |tgid| kvm_stats.holds(tgid))
    }

    /// Reads KVM's own counts; `rescan` also looks for new vCPUs (for a
    /// VMM profiling itself, only once it said they exist).
    pub(super) fn refresh_kvm_stats(&mut self, rescan: bool) {
        // Until a VM shows up, look for one on every tick: short-lived VMs
        // would otherwise be missed. In every VM's mode a tick looks only
        // at the VMs still to hold.
        if !rescan && !self.any_vm.vms.is_empty() {
            let pids = self.vms_to_hold();
            self.sampler.kvm_stats.poll(&pids, true);
            return;
        }
        let pids: Vec<u32> = self.tasks.tgids.iter().copied().collect();
        let rescan = rescan || self.sampler.kvm_stats.total().is_none();
        self.sampler.kvm_stats.poll(&pids, rescan);
    }

    pub(super) fn take_sample(&mut self) {
        let began = thread_cpu_time();
        self.take_sample_untimed();
        self.sampler.sample_cpu += thread_cpu_time().saturating_sub(began);
    }

    pub(super) fn take_sample_untimed(&mut self) {
        self.refresh_kvm_stats(true);
        self.name_watched_threads();
        let t_ns = self.now_ns();
        // Samples need the counts only, not each program's events.
        let mut events = [0; bpf::SOURCE_COUNT];
        let exits = self.exit_reasons(false, &mut events);
        let faults = self.faults(&mut events);
        let by_reason: bootscope_model::profile::ReasonCounts = exits
            .by_reason
            .iter()
            .map(|r| (r.reason.as_str(), r.count))
            .collect();
        self.sampler.samples.push(Sample {
            t_ns,
            exits_total: exits.total,
            exits_by_reason: by_reason,
            guest_faults: faults.guest_total,
            host_faults: faults.host_total,
        });
    }

    pub(super) fn thread_name(&self, tid: u32) -> String {
        self.tasks.thread_name(tid)
    }

    /// Names the threads the sched programs watch that nothing else named
    /// ([`sched::name_watched_threads`]): while the sched collector runs
    /// without the threads collector.
    pub(super) fn name_watched_threads(&mut self) {
        if !self.attached(Source::SchedWaitSwitch) || self.attached(Source::TaskNewtask) {
            return;
        }
        let now = self.now_ns();
        sched::name_watched_threads(&self.bpf, &mut self.tasks, now);
    }

    /// Each thread's run-queue waits so far (none unless the sched
    /// collector runs); adds the waits to the switch program's events.
    pub(super) fn runqueue_waits(
        &self,
        events: &mut [u64; bpf::SOURCE_COUNT],
    ) -> BTreeMap<u32, (u32, RunqueueWait)> {
        if !self.attached(Source::SchedWaitSwitch) {
            return BTreeMap::new();
        }
        let entries = self.entries::<BsSchedKey, BsHist>(sched::WAITS_MAP);
        sched::runqueue_waits(&entries, &self.log.phase_names, events)
    }
}

/// Every VM's mode ([`any_vm`]) as the whole state sees it: its VMs'
/// processes among the tasks, and their profiles apart.
impl State {
    /// The entries of hash map `name` (of the process being built, under
    /// a [`View`]).
    pub(super) fn entries<K: Pod + Send, V: Pod + Send>(&self, name: &'static str) -> Vec<(K, V)> {
        self.any_vm.entries(&self.bpf, name)
    }

    /// Notes a VM followed from now on (seen by the programs, or added by
    /// the caller).
    pub(super) fn note_vm(&mut self, tgid: u32, thread_name: String, t_ns: u64) {
        self.tasks.tgids.insert(tgid);
        self.any_vm.note_vm(tgid, thread_name, t_ns);
    }

    /// Follows process `tgid` from now on, as if its guest had run. Err
    /// when the kernel's table of followed processes is full.
    pub(super) fn follow(&mut self, tgid: u32) -> Result<(), ProfilerError> {
        if self.any_vm.vms.contains_key(&tgid) {
            return Ok(());
        }
        any_vm::follow_in_maps(&mut self.bpf, tgid)?;
        let now = self.now_ns();
        self.note_vm(tgid, String::new(), now);
        let tids = any_vm::watch_threads(&mut self.bpf, tgid);
        self.tasks.add_threads(tgid, &tids);
        Ok(())
    }

    /// The profile of every process followed, and one per followed VM
    /// with only its own counts: the maps are read once for all.
    pub(super) fn build_each(&mut self) -> (Profile, BTreeMap<u32, Profile>) {
        self.poll_target();
        // KVM's own counts as of now (looking for new vCPUs too): the
        // samples that read them otherwise are hours apart here.
        self.refresh_kvm_stats(true);
        let now = self.now_ns();
        self.any_vm.view = Some(View::default());
        let all = self.build(now);
        let roots: Vec<u32> = self.any_vm.vms.keys().copied().collect();
        let each = roots
            .into_iter()
            .map(|r| (r, self.build_vm(now, r)))
            .collect();
        self.any_vm.view = None;
        (all, each)
    }

    /// The profile of one followed VM (its own counts, marks, threads and
    /// KVM statistics); under a [`View`].
    fn build_vm(&mut self, now: u64, root: u32) -> Profile {
        self.any_vm.view_root(root);
        let mut p = self.build(now);
        self.any_vm.keep_own(&mut p, root, now);
        p.exits.kvm_stats_exits = self.sampler.kvm_stats.total_of(root);
        if let Some(t) = p.fault_tail.as_mut() {
            let kvm = self.sampler.kvm_stats.faults_of(Some(root));
            t.kvm_pf_fixed = kvm.map(|k| k[0]);
            t.kvm_pf_taken = kvm.map(|k| k[1]);
        }
        p
    }

    /// Drops what was counted for VMs `tgids` and the processes they
    /// started, from the maps and every part.
    pub(super) fn forget_vms(&mut self, tgids: &[u32]) {
        let all = self.any_vm.with_children(tgids);
        any_vm::forget_in_maps(&mut self.bpf, &all);
        self.any_vm.forget(&all);
        self.tasks.forget(&all);
        self.log.forget(&all);
        for &t in &all {
            self.sampler.kvm_stats.forget(t);
        }
    }
}
