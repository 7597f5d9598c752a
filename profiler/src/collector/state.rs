//! The state behind the collector's lock: what the ring buffer delivered
//! (marks, thread lifetimes), the samples, and the worker that keeps them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use bootscope_model::mark::boot_time_port_mark_name;

use super::every::{FollowedVm, View};
use super::object::BpfObject;
use super::plan::ProgramState;
use super::target::TargetLife;
use super::{thread_cpu_time, Shared};
use crate::bpf::{self, BsEvent};
use crate::kvm_stats;
use crate::phases::{self, PhaseNames};
use crate::profile::*;
use crate::reasons::ReasonTables;
use crate::topology::Topology;

#[derive(Clone, Debug, Default)]
pub(super) struct ThreadInfo {
    pub(super) tgid: u32,
    pub(super) name: String,
    pub(super) start_ns: u64,
    pub(super) end_ns: Option<u64>,
    pub(super) exit_code: Option<i32>,
}

/// Everything behind the lock.
pub(super) struct State {
    pub(super) bpf: BpfObject,
    /// Held while the kernel keeps run statistics for `--bpf-stats`.
    pub(super) bpf_stats: Option<OwnedFd>,
    pub(super) startup: Vec<StartupStage>,
    /// The kernel reads threads' exit codes ([`KernelBtf::reads_exit_codes`]).
    pub(super) exit_codes: bool,
    pub(super) started: Instant,
    pub(super) start_mono_ns: u64,
    pub(super) finished_ns: Option<u64>,
    pub(super) target: Target,
    pub(super) target_pid: u32,
    pub(super) life: TargetLife,
    pub(super) host: HostInfo,
    pub(super) topology: Topology,
    pub(super) reasons: ReasonTables,
    pub(super) programs: Vec<ProgramState>,
    pub(super) extra_sources: Vec<DataSource>,
    pub(super) threads: BTreeMap<u32, ThreadInfo>,
    pub(super) tgids: BTreeSet<u32>,
    pub(super) marks: Vec<Mark>,
    pub(super) phase_names: PhaseNames,
    /// Each process's phase index, and how far its boot has got by its
    /// marks.
    pub(super) current_phase: HashMap<u32, (u32, phases::PhaseTracker)>,
    pub(super) samples: Vec<Sample>,
    pub(super) kvm_stats: kvm_stats::KvmStatsReader,
    pub(super) ring_events: u64,
    pub(super) vmm_marks: u64,
    pub(super) ring_bytes: u32,
    pub(super) boot_time_port: u16,
    pub(super) marks_dropped: u64,
    /// Port marks kept so far (at most MAX_MARKS).
    pub(super) port_marks: usize,
    /// CPU time of samples taken so far.
    pub(super) sample_cpu: Duration,
    /// CPU time of the worker thread so far, and of the final read.
    pub(super) reader_cpu: Duration,
    /// Exits are counted by site too (`exits.sites`).
    pub(super) exit_sites: bool,
    /// When the deferred guest programs' attach ended.
    pub(super) guest_attached: Option<Instant>,
    /// Exits and faults are counted per time slot too (`time_slots`).
    pub(super) time_slots: Option<SlotClock>,
    /// The VMs followed apart ([`super::TargetSpec::AnyVm`]), by process.
    pub(super) vms: BTreeMap<u32, FollowedVm>,
    /// Processes started by a followed VM: the VM (their root).
    pub(super) roots: HashMap<u32, u32>,
    /// While profiles are built per VM: the maps read once, and whose
    /// profile is being built.
    pub(super) view: Option<View>,
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

/// How long after a VM is first followed (every VM's mode) its KVM
/// statistics are looked for on every tick.
pub(super) const HOLD_WINDOW_NS: u64 = 10_000_000_000;

/// `BPF_EXIST` (uapi linux/bpf.h): update only an entry that is there.
pub(super) const BPF_EXIST: u64 = 2;

/// Port marks kept per profile: a guest alternating marker values forever
/// cannot grow the profile without bound. The VMM's own marks, console
/// milestones and the boot timer are few and always kept.
pub(super) const MAX_MARKS: usize = 10_000;
/// Decodes a task's `exit_code` (a wait status) as a shell would.
pub(super) fn exit_status_code(raw: u64) -> i32 {
    let raw = raw as u32;
    let sig = raw & 0x7f;
    if sig == 0 {
        ((raw >> 8) & 0xff) as i32
    } else {
        128 + sig as i32
    }
}

/// Samples are at least this many times their own duration apart.
pub(super) const SAMPLE_SPACING: u32 = 1000;

/// Time to the next sample: the interval asked for, or more when a sample
/// costs over 0.1 % of it.
pub(super) fn sample_spacing(interval: Duration, cost: Duration) -> Duration {
    interval.max(cost.saturating_mul(SAMPLE_SPACING))
}

/// Reads the ring buffer (on data, or every `drain_interval`) and samples
/// counters every `sample_interval`, until told to stop.
pub(super) fn worker_loop(
    shared: Arc<Shared>,
    mut ring: RingBuf<aya::maps::MapData>,
    sample_interval: Duration,
    drain_interval: Option<Duration>,
) {
    // KVM's debugfs directory of a VM vanishes with the VM, so it is read
    // every tick, not only at samples.
    let tick = Duration::from_millis(10);
    let cpu_at_start = thread_cpu_time();
    let mut next_sample = Instant::now() + sample_interval;
    let mut first_sample = true;
    let mut next_drain = Instant::now() + drain_interval.unwrap_or_default();
    let drain = |ring: &mut RingBuf<aya::maps::MapData>, shared: &Shared| {
        let mut events = Vec::new();
        while let Some(item) = ring.next() {
            if let Some(e) = BsEvent::from_bytes(&item) {
                events.push(e);
            }
        }
        if !events.is_empty() {
            // Records of different CPUs may arrive out of order.
            events.sort_by_key(|e| e.ts_ns);
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            for e in &events {
                st.apply_event(e);
            }
        }
    };
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        let now = Instant::now();
        if stopping || drain_interval.is_none() || now >= next_drain {
            drain(&mut ring, &shared);
            if let Some(d) = drain_interval {
                next_drain = now + d;
            }
        }
        if stopping {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.reader_cpu = thread_cpu_time().saturating_sub(cpu_at_start);
            break;
        }
        let frequent = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if now < next_sample {
                if st.kvm_stats_wanted() {
                    st.refresh_kvm_stats(false);
                }
            } else {
                st.poll_target();
                let began = Instant::now();
                st.take_sample();
                // A sample reads every counting map entry by entry and looks
                // for the target's vCPU statistics files: a fraction of a
                // millisecond natively, tens of milliseconds where every
                // instruction is emulated. Spacing samples at least
                // SAMPLE_SPACING times their own cost keeps the sampler
                // under 0.1 % of a CPU, which on a one-CPU machine is taken
                // from the guest.
                // The first sample also pays one-time costs (code and
                // buffers faulted in: 20 to 30 ms in the lab against about
                // one for the next ones), so it does not set the spacing.
                next_sample = if first_sample {
                    now + sample_interval
                } else {
                    now + sample_spacing(sample_interval, began.elapsed())
                };
                first_sample = false;
            }
            st.reader_cpu = thread_cpu_time().saturating_sub(cpu_at_start);
            st.kvm_stats_wanted()
        };
        // Sleep until the next sample unless counts need reading more often:
        // a profiler on a one-CPU machine takes its CPU time from the guest.
        let until_sample = next_sample.saturating_duration_since(Instant::now());
        let wait = if frequent {
            until_sample.min(tick)
        } else {
            until_sample
        };
        // The ring buffer's data (unless it is read on a timer) or a stop
        // request ends the wait early.
        let mut pfds = [
            libc::pollfd {
                fd: shared.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: ring.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let n = if drain_interval.is_some() { 1 } else { 2 };
        // SAFETY: n valid pollfds for descriptors open for the whole call.
        unsafe { libc::poll(pfds.as_mut_ptr(), n, wait.as_millis().max(1) as i32) };
    }
}

impl State {
    pub(super) fn now_ns(&self) -> u64 {
        self.finished_ns
            .unwrap_or_else(|| self.started.elapsed().as_nanos() as u64)
    }

    pub(super) fn ktime_to_t(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.start_mono_ns)
    }

    /// Records a mark; if it opens a new phase for its process, tells the
    /// kernel.
    pub(super) fn push_mark(&mut self, mark: Mark) {
        if mark.source.is_port() {
            if self.port_marks >= MAX_MARKS {
                self.marks_dropped += 1;
                return;
            }
            self.port_marks += 1;
        }
        let tgid = mark.tgid.unwrap_or(self.target_pid);
        let current = self.current_phase.entry(tgid).or_default();
        let opened = current
            .1
            .open(&mark)
            .map(|name| self.phase_names.index(&name));
        if let Some(idx) = opened.filter(|&idx| current.0 != idx) {
            current.0 = idx;
            self.set_phase(tgid, idx);
        }
        self.marks.push(mark);
    }

    /// Tells the kernel a process's phase: the target's in its array slot
    /// (unless it has ended: the slot is then cleared), a descendant's in
    /// `followed` (only while it is there: an ended one is not revived).
    pub(super) fn set_phase(&mut self, tgid: u32, phase: u32) {
        if tgid == self.target_pid {
            if self.target.ended_ns.is_some() {
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
                for tgid in &self.tgids {
                    let _ = m.remove(tgid);
                }
            }
        }
    }

    pub(super) fn apply_event(&mut self, e: &BsEvent) {
        self.ring_events += 1;
        let t = self.ktime_to_t(e.ts_ns);
        match e.kind {
            bpf::event_kind::MARK => {
                let (port, value) = (e.arg0 & 0xffff, e.arg0 >> 32);
                let guest_rip = (e.arg0 & bpf::MARK_RIP_KNOWN != 0).then_some(e.arg1);
                if e.arg0 & bpf::MARK_KERNEL_FIRST != 0 {
                    self.push_mark(phases::first_kernel_pio_mark(
                        port as u16,
                        t,
                        e.tgid,
                        e.arg1,
                    ));
                    return;
                }
                let (name, source) = if port == u64::from(self.boot_time_port) {
                    (
                        boot_time_port_mark_name(value as u8),
                        MarkSource::BootTimePort,
                    )
                } else {
                    (
                        phases::debug_port_write_name(value as u8, guest_rip),
                        MarkSource::DebugPort,
                    )
                };
                self.push_mark(Mark {
                    name,
                    source,
                    t_ns: t,
                    value: Some(value),
                    tgid: Some(e.tgid),
                    guest_rip,
                });
            }
            bpf::event_kind::TASK_NEW => {
                let tgid = if e.tgid == 0 { e.tid } else { e.tgid };
                // Without clone flags (fork fallback) a thread cannot be told
                // from a process: it is filed as its own.
                let new_process =
                    e.arg1 != bpf::CLONE_FLAGS_UNKNOWN && e.arg1 & bpf::CLONE_THREAD == 0;
                if new_process {
                    self.tgids.insert(e.tid);
                    let parent_tgid = self.threads.get(&(e.arg0 as u32)).map(|t| t.tgid);
                    if let Some(p) = parent_tgid.and_then(|p| self.current_phase.get(&p).cloned()) {
                        self.current_phase.insert(e.tid, p);
                    }
                    // The parent is the thread that forked: a process of
                    // the VM's (or its own) tgid.
                    let parent = parent_tgid.unwrap_or(e.tgid);
                    if !self.vms.is_empty() && parent != 0 {
                        let root = self.root_of(parent);
                        self.roots.insert(e.tid, root);
                    }
                }
                let entry = self.threads.entry(e.tid).or_default();
                entry.tgid = tgid;
                entry.name = e.comm();
                entry.start_ns = t;
            }
            bpf::event_kind::TASK_RENAME => {
                let name = e.comm();
                if e.tid == self.target_pid {
                    self.target.name = name.clone();
                }
                let entry = self.threads.entry(e.tid).or_insert_with(|| ThreadInfo {
                    tgid: e.tgid,
                    start_ns: t,
                    ..Default::default()
                });
                entry.name = name;
            }
            bpf::event_kind::TASK_EXIT => {
                let entry = self.threads.entry(e.tid).or_insert_with(|| ThreadInfo {
                    tgid: e.tgid,
                    name: e.comm(),
                    start_ns: 0,
                    ..Default::default()
                });
                entry.end_ns = Some(t);
                entry.exit_code = self.exit_codes.then(|| exit_status_code(e.arg0));
                if e.arg1 != 0 {
                    // Its last exit is counted: read KVM's total one last
                    // time and let the VM go.
                    self.kvm_stats.release(e.tgid);
                    if e.tgid == self.target_pid && self.target.ended_ns.is_none() {
                        self.target.ended_ns = Some(t);
                    }
                    if let Some(vm) = self.vms.get_mut(&e.tgid) {
                        vm.ended_ns.get_or_insert(t);
                    }
                }
            }
            bpf::event_kind::VM_NEW => self.note_vm(e.tgid, e.comm(), t),
            _ => {}
        }
    }

    /// Notices a target that ended without its exit event (missed, or the
    /// threads collector is off).
    pub(super) fn poll_target(&mut self) {
        if self.target.ended_ns.is_none() && self.life.ended() {
            self.target.ended_ns = Some(self.now_ns());
        }
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

    /// Reads KVM's own counts; `rescan` also looks for new vCPUs (for a
    /// VMM profiling itself, only once it said they exist).
    /// Whether KVM's statistics must be read on every tick: until each
    /// followed VM's are held (a short-lived VM's would go with it). With
    /// nothing followed (every VM's mode, before the first one), no. In
    /// every VM's mode only for VMs followed less than
    /// [`HOLD_WINDOW_NS`] ago: a VMM that never opens vCPU statistics
    /// files (QEMU, unless asked) is then looked at only at scrapes.
    pub(super) fn kvm_stats_wanted(&self) -> bool {
        if self.vms.is_empty() {
            return !self.tgids.is_empty() && self.kvm_stats.needs_frequent_reads();
        }
        !self.vms_to_hold().is_empty()
    }

    /// Live VMs followed less than [`HOLD_WINDOW_NS`] ago whose KVM
    /// statistics are not held yet.
    fn vms_to_hold(&self) -> Vec<u32> {
        let now = self.now_ns();
        self.vms
            .values()
            .filter(|v| {
                v.ended_ns.is_none()
                    && now.saturating_sub(v.since_ns) < HOLD_WINDOW_NS
                    && !self.kvm_stats.holds(v.tgid)
            })
            .map(|v| v.tgid)
            .collect()
    }

    pub(super) fn refresh_kvm_stats(&mut self, rescan: bool) {
        // Until a VM shows up, look for one on every tick: short-lived VMs
        // would otherwise be missed. In every VM's mode a tick looks only
        // at the VMs still to hold.
        if !rescan && !self.vms.is_empty() {
            let pids = self.vms_to_hold();
            self.kvm_stats.poll(&pids, true);
            return;
        }
        let pids: Vec<u32> = self.tgids.iter().copied().collect();
        let rescan = rescan || self.kvm_stats.total().is_none();
        self.kvm_stats.poll(&pids, rescan);
    }

    pub(super) fn take_sample(&mut self) {
        let began = thread_cpu_time();
        self.take_sample_untimed();
        self.sample_cpu += thread_cpu_time().saturating_sub(began);
    }

    pub(super) fn take_sample_untimed(&mut self) {
        self.refresh_kvm_stats(true);
        self.name_watched_threads();
        let t_ns = self.now_ns();
        // Samples need the counts only, not each program's events.
        let mut events = [0; bpf::SOURCE_COUNT];
        let exits = self.exit_reasons(false, &mut events);
        let faults = self.faults(&mut events);
        let by_reason: BTreeMap<String, u64> = exits
            .by_reason
            .iter()
            .map(|r| (r.reason.clone(), r.count))
            .collect();
        self.samples.push(Sample {
            t_ns,
            exits_total: exits.total,
            exits_by_reason: by_reason,
            guest_faults: faults.guest_total,
            host_faults: faults.host_total,
        });
    }

    pub(super) fn thread_name(&self, tid: u32) -> String {
        self.threads
            .get(&tid)
            .map(|t| t.name.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cost_at_most_a_fraction_of_a_percent() {
        let ms = Duration::from_millis;
        // Natively a sample costs well under a millisecond: the interval
        // holds.
        // (75 to 230 us here: at most 230 ms apart).
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(80)), ms(200));
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(200)), ms(200));
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(230)), ms(230));
        // Emulated, 3 ms a sample: 3 s apart.
        assert_eq!(sample_spacing(ms(200), ms(3)), ms(3000));
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_status_code(0), 0);
        assert_eq!(exit_status_code(3 << 8), 3);
        assert_eq!(exit_status_code(9), 137);
    }
}
