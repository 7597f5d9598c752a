//! Boot phase marks on one monotonic clock, and the phases derived from them.
//!
//! Every mark, whether the VMM itself records it (memory ready, first
//! `KVM_RUN`) or the guest reports it (debug port 0x80, the boot timer, port
//! 0xf4, a console line), is a [`TimelineMark`] with nanoseconds since VMM start.
//! Phases are the intervals between well-known marks. The JSON form is the
//! versioned schema documented in `docs/timeline-schema.md`.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The schema's name and version, as its readers check them.
pub use bootscope_model::timeline::{TIMELINE_SCHEMA_NAME, TIMELINE_SCHEMA_VERSION};

/// Names of the marks the VMM records itself.
mod restore;
pub use restore::restore_marks;

pub mod vmm_marks {
    pub const PROCESS_START: &str = "vmm: process start";
    pub const MEMORY_READY: &str = "vmm: memory ready";
    /// The decompression thread has the bzImage's kernel: read from the
    /// cache, or decompressed (either way after hashing the payload).
    pub const KERNEL_FROM_CACHE: &str = "vmm: kernel read from cache";
    pub const KERNEL_DECOMPRESSED: &str = "vmm: kernel decompressed";
    pub const KERNEL_LOADED: &str = "vmm: kernel and initrd loaded";
    pub const VCPUS_CREATED: &str = "vmm: vcpus created";
    pub const FIRST_KVM_RUN: &str = "vmm: first KVM_RUN";
    pub const FIRST_SERIAL_BYTE: &str = "vmm: first serial byte";
    pub const GUEST_SHUTDOWN: &str = "vmm: guest shutdown";
    pub const VMM_EXIT: &str = "vmm: exit";
}

/// Marks on the guest's own clock, placed on the timeline from a record the
/// guest left (a systemd guest's units, `units/`).
pub mod guest_clock_marks {
    /// systemd started as PID 1 (the end of the `kernel` phase).
    pub const SYSTEMD_STARTED: &str = "systemd: started";
    /// systemd's start-up finished (its job queue emptied).
    pub const SYSTEMD_FINISHED: &str = "systemd: startup finished";
}

/// A tool on the host that attaches to the VMM's process before its guest
/// runs, named by the caller (the VMM's configuration carries it): the
/// names of the marks the caller records for it, and of the phases they
/// split off the VMM's own. The tool attaches in two parts: what the
/// set-up needs, before the VMM starts; and its guest programs (those that
/// act only while a vCPU runs), for which the VMM, ready to run its vCPUs,
/// may wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTool {
    /// The tool's name in the marks and phases (`profiler`).
    pub name: String,
}

impl HostTool {
    pub fn new(name: &str) -> Self {
        Self { name: name.into() }
    }

    /// The tool's first part is attached; the VMM starts after it
    /// (`vmm: NAME attached`).
    pub fn attached_mark(&self) -> String {
        format!("vmm: {} attached", self.name)
    }

    /// The VMM, ready to run its vCPUs, waits for the tool's guest
    /// programs, attached meanwhile (`vmm: waiting for the NAME's guest
    /// programs`).
    pub fn guest_wait_mark(&self) -> String {
        format!("vmm: waiting for the {}'s guest programs", self.name)
    }

    /// The tool's guest programs are attached (when that ended, during the
    /// set-up or the wait): `vmm: NAME's guest programs attached`.
    pub fn guest_attached_mark(&self) -> String {
        format!("vmm: {}'s guest programs attached", self.name)
    }

    /// Process start to [`Self::attached_mark`] (`NAME attach`).
    pub fn attach_phase(&self) -> String {
        format!("{} attach", self.name)
    }

    /// [`Self::guest_wait_mark`] to the first `KVM_RUN` (`NAME guest
    /// attach`).
    pub fn guest_attach_phase(&self) -> String {
        format!("{} guest attach", self.name)
    }
}

pub use bootscope_model::mark::{boot_time_port_mark_name, debug_port_mark_name, MarkSource};
pub use bootscope_model::smaps::{MemorySample, MemoryUse};
pub use bootscope_model::timeline::{
    Timeline, TimelineGuest, TimelineKernelBoot, TimelineMark, TimelineOutcome, TimelinePhase,
};

/// Monotonic clock whose zero is VMM start.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `t_ns` after the origin (to hand marks to other clocks).
    pub fn instant_at(&self, t_ns: u64) -> Instant {
        self.origin + std::time::Duration::from_nanos(t_ns)
    }
}

/// Called for every mark as it is recorded (e.g. to forward marks to a live
/// profiler). Runs on the recording thread: keep it short.
pub type MarkListener = Box<dyn Fn(&TimelineMark) + Send + Sync>;

/// Thread-safe collector of marks, shared by the vCPU threads and devices.
pub struct Recorder {
    clock: Clock,
    marks: Mutex<Vec<TimelineMark>>,
    listener: std::sync::OnceLock<MarkListener>,
    /// Called for every mark pushed: the snapshot point's trigger.
    snapshot_trigger: std::sync::OnceLock<MarkListener>,
    /// Called for every mark pushed: a restore's end of its memory window.
    window_trigger: std::sync::OnceLock<MarkListener>,
    /// What this process cost the host in memory at the first userspace
    /// mark (or at the end of the set-up `--stop-after` asked for).
    memory: std::sync::OnceLock<MemorySample>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            marks: Mutex::new(Vec::new()),
            listener: std::sync::OnceLock::new(),
            snapshot_trigger: std::sync::OnceLock::new(),
            window_trigger: std::sync::OnceLock::new(),
            memory: std::sync::OnceLock::new(),
        }
    }

    /// Reads this process's memory use (`/proc/self/smaps_rollup`, once)
    /// and keeps it as taken at `at`, unless a sample was kept already.
    /// Runs on the calling thread: a vCPU thread that wrote the userspace
    /// mark reads it before the guest goes on.
    pub fn sample_memory(&self, at: &str) {
        if self.memory.get().is_some() {
            return;
        }
        let t_ns = self.clock.now_ns();
        if let Ok(usage) = MemoryUse::of_self() {
            let _ = self.memory.set(MemorySample {
                at: at.into(),
                t_ns,
                usage,
            });
        }
    }

    /// The memory sample, when one was taken.
    pub fn memory_sample(&self) -> Option<MemorySample> {
        self.memory.get().cloned()
    }

    /// Installs the listener called for every mark recorded from now on
    /// (once; later calls are ignored and return false).
    pub fn set_listener(&self, listener: MarkListener) -> bool {
        self.listener.set(listener).is_ok()
    }

    /// Installs the snapshot point's trigger, called for every mark pushed
    /// from now on (once).
    pub fn set_snapshot_trigger(&self, trigger: MarkListener) -> bool {
        self.snapshot_trigger.set(trigger).is_ok()
    }

    /// Installs a restore's memory window trigger, called for every mark
    /// pushed from now on (once).
    pub fn set_window_trigger(&self, trigger: MarkListener) -> bool {
        self.window_trigger.set(trigger).is_ok()
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Records a VMM-side mark now.
    pub fn vmm(&self, name: &str) {
        self.push(TimelineMark {
            name: name.to_string(),
            source: MarkSource::Vmm,
            t_ns: self.clock.now_ns(),
            value: None,
            vcpu: None,
        });
    }

    /// Records a VMM-side mark only if no mark of that name exists yet.
    pub fn vmm_once(&self, name: &str) {
        let t_ns = self.clock.now_ns();
        let mut marks = self.lock();
        if !marks.iter().any(|m| m.name == name) {
            let mark = TimelineMark {
                name: name.to_string(),
                source: MarkSource::Vmm,
                t_ns,
                value: None,
                vcpu: None,
            };
            if let Some(l) = self.listener.get() {
                l(&mark);
            }
            marks.push(mark);
        }
    }

    /// Records a guest-side mark now.
    pub fn guest(&self, name: String, source: MarkSource, value: Option<u64>, vcpu: Option<u32>) {
        self.push(TimelineMark {
            name,
            source,
            t_ns: self.clock.now_ns(),
            value,
            vcpu,
        });
    }

    pub fn push(&self, mark: TimelineMark) {
        if let Some(l) = self.listener.get() {
            l(&mark);
        }
        if let Some(t) = self.snapshot_trigger.get() {
            t(&mark);
        }
        if let Some(t) = self.window_trigger.get() {
            t(&mark);
        }
        let userspace = is_userspace_start(&mark);
        self.lock().push(mark);
        if userspace {
            self.sample_memory("userspace");
        }
    }

    pub fn snapshot(&self) -> Vec<TimelineMark> {
        let mut marks = self.lock().clone();
        marks.sort_by_key(|m| m.t_ns);
        marks
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<TimelineMark>> {
        // A panic while holding the lock cannot leave the Vec inconsistent.
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// True when the mark says the guest kernel proper started running.
pub fn is_kernel_start(mark: &TimelineMark) -> bool {
    match mark.source {
        MarkSource::DebugPort => matches!(mark.value, Some(0x40..=0x5f)),
        MarkSource::BootTimePort => mark.value == Some(6),
        MarkSource::Serial => mark.name.contains("kernel banner"),
        _ => false,
    }
}

/// True when the mark says guest userspace started.
pub fn is_userspace_start(mark: &TimelineMark) -> bool {
    match mark.source {
        MarkSource::DebugPort => matches!(mark.value, Some(0x60..=0x7f)),
        MarkSource::BootTimePort => mark.value == Some(7),
        MarkSource::BootTimer => true,
        MarkSource::Serial => mark.name.contains("run init"),
        // systemd's start as PID 1: where systemd's own figures end the kernel.
        MarkSource::GuestClock => mark.name == guest_clock_marks::SYSTEMD_STARTED,
        _ => false,
    }
}

/// Derives the named boot phases from a sorted list of marks, with the
/// marks of the host tool that attached, if one did (`tool`).
///
/// - `TOOL attach`: process start to the tool attached, when it attached
///   before the VMM started (the VMM's phases are then its own and start
///   after it);
/// - `vmm setup`: VMM start (process start, or the tool attached) to the
///   first `KVM_RUN`, or to the wait for the tool's guest programs when
///   there is one;
/// - `TOOL guest attach`: that wait to the first `KVM_RUN` (the rest of the
///   tool's attach the set-up did not hide, and the vCPU threads' start);
/// - `firmware/boot loader`: first `KVM_RUN` to the kernel's first sign of
///   life (only when the guest reports one separately);
/// - `kernel`: first `KVM_RUN` (or the kernel-start mark) to userspace start;
/// - `userspace`: userspace start to guest shutdown;
/// - `vmm teardown`: guest shutdown to VMM exit.
///
/// A restored run has phases of its own (`restore::phases`).
pub fn derive_phases(marks: &[TimelineMark], tool: Option<&HostTool>) -> Vec<TimelinePhase> {
    if let Some(p) = restore::phases(marks) {
        return p;
    }
    let first = |pred: &dyn Fn(&TimelineMark) -> bool| marks.iter().find(|m| pred(m));
    let named =
        |name: &str| first(&|m: &TimelineMark| m.name == name && m.source == MarkSource::Vmm);
    let start = named(vmm_marks::PROCESS_START);
    let run = named(vmm_marks::FIRST_KVM_RUN);
    let guest_wait = tool
        .and_then(|t| named(&t.guest_wait_mark()))
        .filter(|w| run.is_some_and(|r| w.t_ns <= r.t_ns));
    // Attached before any of the VMM's own set-up marks (memory ready, the
    // kernel loaded, ...): the VMM started after it.
    let attached = tool.and_then(|t| {
        let name = t.attached_mark();
        named(&name).filter(|a| {
            !marks.iter().any(|m| {
                m.source == MarkSource::Vmm
                    && m.t_ns < a.t_ns
                    && m.name != vmm_marks::PROCESS_START
                    && m.name != name
            })
        })
    });
    // A kernel-start mark from the guest splits pre-kernel time off, but only
    // when it is a dedicated marker (a console banner comes after the
    // decompressor and early boot, so it would misattribute that time).
    let kernel_marker =
        first(&|m: &TimelineMark| is_kernel_start(m) && m.source != MarkSource::Serial);
    let user = first(&is_userspace_start);
    let shutdown = named(vmm_marks::GUEST_SHUTDOWN);
    let exit = named(vmm_marks::VMM_EXIT);

    let mut phases = Vec::new();
    let mut add = |name: &str, a: Option<&TimelineMark>, b: Option<&TimelineMark>| {
        if let (Some(a), Some(b)) = (a, b) {
            if b.t_ns >= a.t_ns {
                phases.push(TimelinePhase {
                    name: name.to_string(),
                    start_ns: a.t_ns,
                    end_ns: b.t_ns,
                    duration_ns: b.t_ns - a.t_ns,
                    from: a.name.clone(),
                    to: b.name.clone(),
                });
            }
        }
    };
    if let (Some(t), Some(_)) = (tool, attached) {
        add(&t.attach_phase(), start, attached);
    }
    add("vmm setup", attached.or(start), guest_wait.or(run));
    if let (Some(t), Some(_)) = (tool, guest_wait) {
        add(&t.guest_attach_phase(), guest_wait, run);
    }
    if let Some(k) = kernel_marker {
        add("firmware/boot loader", run, Some(k));
        add("kernel", Some(k), user.or(shutdown));
    } else {
        add("kernel", run, user.or(shutdown));
    }
    if user.is_some() {
        add("userspace", user, shutdown);
    }
    add("vmm teardown", shutdown, exit);
    phases
}

/// The name serde gives a unit enum variant (its `rename_all` spelling).
pub(crate) fn variant_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Why the guest stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The guest asked for a reset through the i8042 controller.
    I8042Reset,
    /// The guest powered off: S5 written to the ACPI sleep control register.
    AcpiPowerOff,
    /// The guest reset through the ACPI reset register.
    AcpiReset,
    /// The guest reset through the chipset's reset control register (port
    /// 0xcf9).
    Cf9Reset,
    /// The guest triple-faulted (KVM_EXIT_SHUTDOWN) without asking for a
    /// reset or power-off first: it crashed.
    TripleFault,
    /// The guest triple-faulted after its kernel announced a restart on the
    /// console (`reboot: Restarting system`): Linux's `reboot=t`.
    TripleFaultReboot,
    /// KVM reported a system event (reset, shutdown or crash).
    SystemEvent,
    /// The kernel halted after `poweroff` (no ACPI power-off path), seen on
    /// the console.
    GuestHalt,
    /// The kernel panicked.
    GuestPanic,
    /// The guest ran past `--timeout`.
    Timeout,
    /// The guest was stopped for running under instruction emulation on a
    /// PVM host.
    PvmEmulation,
    /// An error in the VMM or an unexpected exit.
    Error,
    /// `--stop-after`: only the set-up phases ran.
    StoppedAfterSetup,
    /// Stopped on request before the guest ended.
    Stopped,
    /// Stopped by SIGINT or SIGTERM before the guest ended.
    Interrupted,
    /// Stopped at `--snapshot-at` once the snapshot was written.
    SnapshotTaken,
}

impl StopReason {
    /// The name the timeline's `outcome.reason` gives it.
    pub fn name(&self) -> String {
        variant_name(self)
    }

    /// Whether this is a clean end of the guest (exit status 0): a reset
    /// or power-off the guest asked for, or `--stop-after`. A triple fault
    /// with no such request is a crash.
    pub fn is_clean(&self) -> bool {
        matches!(
            self,
            StopReason::I8042Reset
                | StopReason::AcpiPowerOff
                | StopReason::AcpiReset
                | StopReason::Cf9Reset
                | StopReason::TripleFaultReboot
                | StopReason::SystemEvent
                | StopReason::GuestHalt
                | StopReason::StoppedAfterSetup
                | StopReason::SnapshotTaken
        )
    }
}

/// The summary table printed at exit: every mark-to-mark interval, then
/// the derived phases.
pub fn summary_table(doc: &Timeline) -> String {
    let total = doc.marks.last().map(|m| m.t_ns).unwrap_or(0).max(1);
    let ms = |ns: u64| ns as f64 / 1e6;
    let share = |ns: u64| 100.0 * ns as f64 / total as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<44} {:>10} {:>12} {:>7}",
        "phase", "start ms", "duration ms", "share"
    );
    for (i, m) in doc.marks.iter().enumerate() {
        let end = doc.marks.get(i + 1).map(|n| n.t_ns).unwrap_or(m.t_ns);
        let d = end - m.t_ns;
        let _ = writeln!(
            out,
            "{:<44} {:>10.3} {:>12.3} {:>6.1}%",
            truncate(&m.name, 44),
            ms(m.t_ns),
            ms(d),
            share(d)
        );
    }
    let _ = writeln!(out, "{}", "-".repeat(76));
    for p in &doc.phases {
        let _ = writeln!(
            out,
            "{:<44} {:>10.3} {:>12.3} {:>6.1}%",
            p.name,
            ms(p.start_ns),
            ms(p.duration_ns),
            share(p.duration_ns)
        );
    }
    let _ = writeln!(out, "{:<44} {:>10} {:>12.3}", "total", "", ms(total));
    if let Some(r) = &doc.restore_memory {
        let _ = writeln!(out, "{}", r.summary_line());
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(name: &str, source: MarkSource, t_ns: u64, value: Option<u64>) -> TimelineMark {
        TimelineMark {
            name: name.into(),
            source,
            t_ns,
            value,
            vcpu: None,
        }
    }

    fn boot(marks_extra: Vec<TimelineMark>) -> Vec<TimelineMark> {
        let mut v = vec![
            mark(vmm_marks::PROCESS_START, MarkSource::Vmm, 0, None),
            mark(vmm_marks::FIRST_KVM_RUN, MarkSource::Vmm, 10, None),
            mark(vmm_marks::GUEST_SHUTDOWN, MarkSource::Vmm, 100, None),
            mark(vmm_marks::VMM_EXIT, MarkSource::Vmm, 105, None),
        ];
        v.extend(marks_extra);
        v.sort_by_key(|m| m.t_ns);
        v
    }

    #[test]
    fn phases_from_debug_port_marks() {
        let marks = boot(vec![
            mark(
                &debug_port_mark_name(0x40),
                MarkSource::DebugPort,
                20,
                Some(0x40),
            ),
            mark(
                &debug_port_mark_name(0x60),
                MarkSource::DebugPort,
                70,
                Some(0x60),
            ),
        ]);
        let p = derive_phases(&marks, None);
        let names: Vec<_> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "vmm setup",
                "firmware/boot loader",
                "kernel",
                "userspace",
                "vmm teardown"
            ]
        );
        let kernel = &p[2];
        assert_eq!(
            (kernel.start_ns, kernel.end_ns, kernel.duration_ns),
            (20, 70, 50)
        );
        assert_eq!(p[3].duration_ns, 30);
    }

    #[test]
    fn serial_banner_does_not_split_kernel_phase() {
        let marks = boot(vec![
            mark("serial: kernel banner", MarkSource::Serial, 30, None),
            mark("serial: free initmem", MarkSource::Serial, 31, None),
            mark("serial: run init", MarkSource::Serial, 80, None),
        ]);
        let p = derive_phases(&marks, None);
        let kernel = p.iter().find(|p| p.name == "kernel").unwrap();
        assert_eq!((kernel.start_ns, kernel.end_ns), (10, 80));
        assert!(p.iter().all(|p| p.name != "firmware/boot loader"));
        // A port marker after a banner still splits the phase.
        let mut with_port = marks.clone();
        with_port.push(mark(
            &debug_port_mark_name(0x40),
            MarkSource::DebugPort,
            40,
            Some(0x40),
        ));
        with_port.sort_by_key(|m| m.t_ns);
        let p = derive_phases(&with_port, None);
        let kernel = p.iter().find(|p| p.name == "kernel").unwrap();
        assert_eq!((kernel.start_ns, kernel.end_ns), (40, 80));
    }

    #[test]
    fn a_tool_attached_before_the_vmm_has_its_own_phase() {
        let tool = HostTool::new("tracer");
        let marks = boot(vec![mark(&tool.attached_mark(), MarkSource::Vmm, 4, None)]);
        let p = derive_phases(&marks, Some(&tool));
        let names: Vec<_> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["tracer attach", "vmm setup", "kernel", "vmm teardown"]
        );
        assert_eq!((p[0].start_ns, p[0].end_ns), (0, 4));
        assert_eq!((p[1].start_ns, p[1].end_ns), (4, 10));
        // The marks of a tool the VMM was not told of split nothing off.
        let p = derive_phases(&marks, None);
        assert_eq!((p[0].name.as_str(), p[0].start_ns), ("vmm setup", 0));
        // Attached during the VMM's set-up (after one of its marks): part
        // of that set-up, no phase of its own.
        let p = derive_phases(
            &boot(vec![
                mark(vmm_marks::MEMORY_READY, MarkSource::Vmm, 2, None),
                mark(&tool.attached_mark(), MarkSource::Vmm, 4, None),
            ]),
            Some(&tool),
        );
        assert_eq!(p[0].name, "vmm setup");
        assert_eq!((p[0].start_ns, p[0].end_ns), (0, 10));
        assert!(p.iter().all(|p| p.name != "tracer attach"));
    }

    #[test]
    fn the_wait_for_the_tools_guest_programs_is_a_phase() {
        let tool = HostTool::new("profiler");
        let p = derive_phases(
            &boot(vec![
                mark(&tool.attached_mark(), MarkSource::Vmm, 2, None),
                mark(vmm_marks::MEMORY_READY, MarkSource::Vmm, 4, None),
                mark(&tool.guest_attached_mark(), MarkSource::Vmm, 5, None),
                mark(&tool.guest_wait_mark(), MarkSource::Vmm, 7, None),
            ]),
            Some(&tool),
        );
        let spans: Vec<_> = p
            .iter()
            .map(|p| (p.name.as_str(), p.start_ns, p.end_ns))
            .collect();
        assert_eq!(
            spans[..3],
            [
                ("profiler attach", 0, 2),
                ("vmm setup", 2, 7),
                ("profiler guest attach", 7, 10)
            ]
        );
        assert_eq!(spans[3].0, "kernel");
        // A run that never reached its first KVM_RUN has no such phase.
        let stopped = vec![
            mark(vmm_marks::PROCESS_START, MarkSource::Vmm, 0, None),
            mark(&tool.guest_wait_mark(), MarkSource::Vmm, 7, None),
        ];
        assert!(derive_phases(&stopped, Some(&tool)).is_empty());
    }

    #[test]
    fn no_userspace_mark_means_kernel_runs_to_shutdown() {
        let p = derive_phases(&boot(vec![]), None);
        let kernel = p.iter().find(|p| p.name == "kernel").unwrap();
        assert_eq!(kernel.end_ns, 100);
        assert!(p.iter().all(|p| p.name != "userspace"));
    }

    #[test]
    fn listener_sees_every_mark() {
        let r = Recorder::new(Clock::start());
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        assert!(r.set_listener(Box::new(move |m| s2.lock().unwrap().push(m.name.clone()))));
        r.vmm("a");
        r.vmm_once("b");
        r.vmm_once("b");
        r.guest("c".into(), MarkSource::DebugPort, Some(0x40), Some(0));
        assert_eq!(*seen.lock().unwrap(), ["a", "b", "c"]);
        assert!(!r.set_listener(Box::new(|_| {})));
    }

    #[test]
    fn recorder_once_keeps_first() {
        let r = Recorder::new(Clock::start());
        r.vmm_once("x");
        r.vmm_once("x");
        assert_eq!(r.snapshot().len(), 1);
    }
}
