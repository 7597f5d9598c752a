//! Guest memory of a traced VMM, read read-only (`bootscope profile`;
//! docs/profiler.md, "Guest memory"): the VM's memory slots
//! ([`layout`]), the VMM's memory read through them ([`process`]), at the
//! moments that keep the data: when the guest reaches userspace, while it
//! runs; at the exit that ends the guest, with the VMM held stopped for
//! the read ([`hold`]); else when profiling stops. The readers are the
//! VMM's own (`bootscope_vmm::kernel_log`): the kernel's log, its
//! initcalls from its trace ring, its modules; and the boot parameters
//! ([`boot_params`]).

pub mod boot_params;
pub mod console;
pub mod hold;
pub mod layout;
mod pass;
pub mod process;
pub mod regions;
pub mod summary;
mod symbols;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bootscope_model::guest_read::GuestRead;
use bootscope_model::modules::GuestModules;
use bootscope_profiler::Collector;

/// The serial port whose lines (their bytes timed by eBPF as the guest
/// writes them) put the guest kernel's log and initcalls on the profile's
/// clock: COM1's, the console of every VMM's default guest.
pub const SERIAL_PORT: u16 = 0x3f8;

/// How long the watcher sleeps when nothing it waits for happened. It
/// wakes at once on news ([`Collector::wait_news`]: a guest's mark, a VMM
/// held at its guest's end, a new VM); this bounds what it learns without
/// news (another process's memory slots, symbols loaded meanwhile). Each
/// wake-up on the CPU of the guest's vCPU interrupts the guest (an
/// `interrupt` exit), and on a one-CPU lab machine takes its time: looking
/// every 20 ms cost such a boot about 3 % of its CPU.
const IDLE_WAKE: Duration = Duration::from_millis(250);

/// The latest the guest kernel's symbols start loading when no guest
/// mark says the guest runs ([`Collector::guest_started`]).
const SYMBOLS_START_LATEST: Duration = Duration::from_secs(3);

/// What the watcher knows before it starts.
pub struct Plan {
    /// The VMM when known (`--pid`, or the launched command itself until
    /// another process sets memory slots).
    pub pid: u32,
    /// The guest kernel's image, for its symbols and types (initcalls
    /// from the trace ring, modules).
    pub kernel: Option<PathBuf>,
    /// The guest kernel's command line as the VMM's own options give it
    /// (where the boot parameters are not found in guest memory).
    pub cmdline: Option<String>,
    /// A launched command's process group (the watchdog continues it).
    pub pgid: Option<u32>,
    /// How long reads that need the guest kernel's symbols wait for
    /// their load, once the VMM no longer needs holding.
    pub symbols_wait: Duration,
}

/// [`Plan::symbols_wait`] for `bootscope profile`: a kernel's first
/// profile recovers its symbol table from the bzImage (tens of seconds in
/// the lab's nested guest), later ones load it from the kernel cache.
pub const SYMBOLS_WAIT: Duration = Duration::from_secs(300);

/// What the watcher hands back.
pub struct Outcome {
    pub read: GuestRead,
    /// The modules, with their symbols, for naming exit sites.
    pub modules: Option<GuestModules>,
}

/// The watcher thread.
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Outcome>,
    collector: Arc<Collector>,
}

impl Watch {
    /// Starts watching; `collector` has the memory programs attached (or
    /// said why not).
    pub fn start(collector: Arc<Collector>, plan: Plan) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let own = collector.clone();
        let mut missing = Vec::new();
        let attached = collector.attach_memslot_programs();
        let failed: Vec<String> = attached
            .iter()
            .filter_map(|(n, e)| e.as_ref().map(|e| format!("{n}: {e}")))
            .collect();
        if !failed.is_empty() {
            missing.push((
                "ioctl_capture",
                format!("eBPF programs not attached ({})", failed.join("; ")),
            ));
        }
        // Before any hold: it continues the VMM however bootscope ends.
        let watchdog = hold::Watchdog::start().ok().map(|mut w| {
            w.watch(&plan.pid.to_string());
            if let Some(g) = plan.pgid {
                w.watch(&format!("-{g}"));
            }
            w
        });
        let held_ok = failed.is_empty() && watchdog.is_some() && collector.hold_at_shutdown(true);
        if !held_ok {
            missing.push((
                "shutdown",
                "the VMM cannot be held at its guest's end (the eBPF programs or the watchdog \
                 process could not be started): read when profiling stops instead"
                    .to_string(),
            ));
        }
        let thread = std::thread::Builder::new()
            .name("bootscope-guest-mem".into())
            .spawn(move || {
                let mut reader = pass::Reader::new(plan, watchdog);
                for (part, why) in missing {
                    reader.doc.missing(part, why);
                }
                watch(&collector, reader, &flag)
            })
            .expect("a thread for reading guest memory");
        Watch {
            stop,
            thread,
            collector: own,
        }
    }

    /// Starts watching for `bootscope profile` (before a launched command
    /// is released: its first memory slot is caught and the hold armed):
    /// the target is the VMM
    /// until another process sets memory slots; the guest kernel is
    /// `kernel` (`--guest-symbols`) or the launched command's.
    /// None with `--no-guest-memory`.
    pub fn for_profile(
        collector: &Arc<Collector>,
        args: &crate::profile_cmd::ProfileArgs,
        command: &[String],
        held: Option<&bootscope_profiler::launch::HeldCommand>,
    ) -> Option<Self> {
        if args.no_guest_memory {
            return None;
        }
        let kernel = args.guest_symbols.clone();
        let plan = Plan {
            pid: collector.target_pid(),
            kernel: kernel
                .or_else(|| crate::guest_symbols::command_kernel(command))
                .or_else(|| args.pid.and_then(crate::profile_launch::pid_kernel)),
            cmdline: match args.pid {
                Some(pid) => crate::profile_launch::pid_kernel_cmdline(pid),
                None => bootscope_model::vmm::kernel_cmdline_of(command)
                    .ok()
                    .flatten(),
            },
            pgid: held.map(bootscope_profiler::launch::HeldCommand::pgid),
            symbols_wait: SYMBOLS_WAIT,
        };
        Some(Self::start(collector.clone(), plan))
    }

    /// Stops watching: a VMM still running is read once more (`end`).
    pub fn finish(self) -> Outcome {
        self.stop.store(true, Ordering::SeqCst);
        self.collector.wake_news();
        self.thread.join().unwrap_or_else(|_| Outcome {
            read: GuestRead::default(),
            modules: None,
        })
    }
}

/// The calling thread in the background while it reads memory with the
/// guest running ([`set_background_of`]), at the process's own priority
/// otherwise (looking for a held VMM, and reading it: it waits for the
/// read).
fn set_background(background: bool) {
    // SAFETY: a plain system call.
    set_background_of(unsafe { libc::gettid() }, background);
}

/// Thread `tid` in the background: the `SCHED_IDLE` policy (it runs only
/// on CPU time no other thread wants, and never preempts one), or nice 19
/// where that policy is refused. Work there (loading the guest kernel's
/// symbols, reading memory while the guest runs) takes the CPU time the
/// guest leaves, so a profile costs the boot little on a host with no CPU
/// to spare. Back to the normal policy at the process's own nice when
/// not; raising the priority needs CAP_SYS_NICE (root has it), without
/// which the thread stays in the background.
fn set_background_of(tid: i32, background: bool) {
    if tid <= 0 {
        return;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system calls with a live sched_param.
    unsafe {
        // The main thread's nice: the process's own.
        let own = libc::getpriority(libc::PRIO_PROCESS, libc::getpid() as libc::id_t);
        let policy = if background {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        };
        libc::sched_setscheduler(tid, policy, &param);
        libc::setpriority(
            libc::PRIO_PROCESS,
            tid as libc::id_t,
            if background { 19 } else { own },
        );
    }
}

fn watch(collector: &Collector, mut reader: pass::Reader, stop: &AtomicBool) -> Outcome {
    // Looking for holds at the process's own priority, from the start (the
    // kernel's symbols load meanwhile): a hold is seen at once however
    // busy the guest keeps the CPU.
    let mut userspace_read = false;
    let mut shutdown_read = false;
    let mut news = 0;
    let began = Instant::now();
    loop {
        let ending = stop.load(Ordering::SeqCst);
        reader.learn_pid(collector);
        // The symbols load once the VMM has set up (its guest runs), or
        // after a bound for a guest that gives no mark.
        if reader.symbols.waiting()
            && (collector.guest_started() || began.elapsed() >= SYMBOLS_START_LATEST)
        {
            reader.symbols.begin();
        }
        for (tgid, h) in collector.held_vmms() {
            if reader.handled_hold(tgid) {
                continue;
            }
            // Held since the kernel stopped it, not since it was seen.
            let stopped_t = collector.ktime_to_profile_ns(h.ts_ns);
            let now_t = collector.started().elapsed().as_nanos() as u64;
            let since = Instant::now()
                .checked_sub(Duration::from_nanos(now_t.saturating_sub(stopped_t)))
                .unwrap_or_else(Instant::now);
            let held = hold::Held::adopt(tgid, since);
            held.wait_stopped();
            reader.pass(collector, tgid, "shutdown", stopped_t, Some(&held));
            reader.note_hold(tgid, bootscope_profiler::hold_reason(h.why));
            drop(held);
            // The guest has ended: a load still in progress no longer
            // takes CPU time from it.
            reader.symbols.hurry();
            shutdown_read = true;
        }
        // A copy a hold took is decoded once the symbols are there (the
        // VMM was continued at once: this waits for nothing).
        if reader.pending() && reader.symbols.ready() {
            set_background(true);
            reader.decode_pending();
            set_background(false);
        }
        // Read while the guest runs once the symbols are there (this read
        // may wait for nothing: it needs them, and the guest goes on).
        if !userspace_read
            && !shutdown_read
            && reader.symbols.ready()
            && collector.in_phase("userspace").is_some()
        {
            userspace_read = true;
            let t = collector.started().elapsed().as_nanos() as u64;
            let pid = reader.pid();
            // The guest runs on meanwhile: this read takes the CPU time it
            // leaves (a hold that fires meanwhile stops the VMM, and the
            // read then has the CPU to itself).
            set_background(true);
            reader.pass(collector, pid, "userspace", t, None);
            set_background(false);
        }
        if ending {
            break;
        }
        news = collector.wait_news(news, IDLE_WAKE);
    }
    wind_down(
        collector,
        reader,
        userspace_read || shutdown_read,
        shutdown_read,
    )
}

/// After profiling stopped: a hold that fired after the last look is
/// continued; a VMM still running is read (waiting for the symbols, at
/// most [`Plan::symbols_wait`]); a copy a hold took is decoded.
fn wind_down(
    collector: &Collector,
    mut reader: pass::Reader,
    read_once: bool,
    shutdown_read: bool,
) -> Outcome {
    collector.hold_at_shutdown(false);
    for (tgid, _) in collector.held_vmms() {
        if !reader.handled_hold(tgid) {
            let held = hold::Held::adopt(tgid, Instant::now());
            held.wait_stopped();
            reader.note_hold(tgid, "not read: profiling ended");
        }
    }
    if !shutdown_read {
        let pid = reader.pid();
        if hold::state(pid).is_some_and(|s| s != 'Z' && s != 'X') {
            // Unheld: this read may wait for the symbols.
            reader.wait_symbols();
            let t = collector.started().elapsed().as_nanos() as u64;
            reader.pass(collector, pid, "end", t, None);
        } else if !read_once {
            reader.doc.missing(
                "memory",
                format!("process {pid} ended before its guest memory could be read"),
            );
        }
    }
    if reader.pending() {
        reader.wait_symbols();
        reader.decode_pending();
    }
    reader.finish()
}

/// Labels the profile's nested page fault ranges with what the VM has
/// there: its memory slots (RAM, ROM, device memory, and what backs each
/// in the VMM), the x86 devices at fixed addresses, the VMM's fixed device
/// windows ([`regions`]).
pub fn label_npf_ranges(profile: &mut bootscope_profiler::Profile, read: &GuestRead) {
    let vmm = profile.target.vmm.as_ref().map_or_else(
        || bootscope_model::vmm::kind_of(&profile.target.command),
        |v| v.kind,
    );
    let regions = regions::npf_regions(read, vmm);
    if let Some(sites) = profile.exits.sites.as_mut().filter(|_| !regions.is_empty()) {
        sites.label_npf_ranges(&regions);
    }
}

/// Names the profile's sites (the modules read name those in module
/// text), labels its NPF ranges and adds the `guest_read` section.
pub fn annotate(
    profile: &mut bootscope_profiler::Profile,
    table: Option<&bootscope_profiler::guest_symbols::SymbolTable>,
    guest: Option<Outcome>,
) {
    let modules = guest.as_ref().and_then(|g| g.modules.as_ref());
    crate::guest_symbols::annotate(profile, table, modules);
    if let Some(mut g) = guest {
        label_npf_ranges(profile, &g.read);
        // Initcalls on the profile's clock get the exits and faults of
        // their own time.
        if let Some(doc) = g.read.initcalls.as_mut().filter(|d| d.clock.is_some()) {
            bootscope_profiler::initcalls::attribute_profile(doc, profile);
        }
        profile.guest_read = Some(g.read);
    }
}
