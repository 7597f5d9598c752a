//! `bootscope profile`: follow a running process or launch a command (QEMU,
//! bootscope itself, anything using KVM) under the eBPF collectors and write
//! its profile.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::common::{usage, Failure};
use crate::guest_mem::Watch;
use crate::profile_console::{take_collector, ConsolePlan, MarkSlot};
use crate::profile_summary::summary;
use crate::profile_units as disk_units;
use std::sync::{Arc, Mutex};

use bootscope_profiler::launch::{ChildFaults, HeldCommand};
use bootscope_profiler::restore_cmd::noted;
use bootscope_profiler::{Collector, CollectorConfig, CollectorSet, Profile, TargetSpec};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "command"])))]
pub struct ProfileArgs {
    /// Where to write the profile (JSON, schema in docs/profile-schema.md).
    #[arg(long, short = 'o', default_value = "profile.json")]
    pub output: PathBuf,
    /// Stop after this many seconds (default: when the target ends, or on
    /// Ctrl-C). A launched command still running then gets SIGTERM. Not
    /// perf trace's --duration, which filters events by their latency.
    #[arg(long, value_name = "SECONDS", value_parser = crate::common::parse_seconds)]
    pub duration: Option<Duration>,
    /// Profile this running process (and the processes it starts); -p as
    /// in perf and kvm_stat.
    #[arg(long, short = 'p')]
    pub pid: Option<u32>,
    /// Sample the counters this often, in milliseconds (up to an hour).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub sample_interval_ms: u64,
    /// Size of the ring buffer for marks and thread events, in KiB.
    #[arg(long, default_value_t = 256)]
    pub ring_buffer_kib: u32,
    /// Do not print the summary.
    #[arg(long)]
    pub no_summary: bool,
    /// Show the profile live in a terminal UI (docs/tui.md); it is still
    /// written to --output when the UI is closed.
    #[arg(long)]
    pub tui: bool,
    /// Refresh the terminal UI this often, in milliseconds (up to a minute).
    #[arg(long, default_value_t = crate::live_tui::DEFAULT_REFRESH_MS,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub refresh_ms: u64,
    /// Have the kernel count and time every run of the eBPF programs
    /// (BPF_ENABLE_STATS): `sources[].runs` and `run_ns` say what the
    /// eBPF side cost. The kernel then times every eBPF program on the
    /// host, which costs a little itself.
    #[arg(long)]
    pub bpf_stats: bool,
    /// Profile with these collectors only (comma-separated: exits, faults,
    /// threads, numa, phases, sched, tail; all; default all but sched, the
    /// run-queue waits of the target's threads, and tail, a restore's page-fault
    /// tail, on for restores only): each one left out is eBPF
    /// programs not run on its events. exit-counts: the exits without their
    /// latency (one program per exit instead of two). tail-total: the tail
    /// with its guest faults also counted over the VM's life (a program on
    /// every guest fault after the window too: for checks against KVM's
    /// own statistics).
    #[arg(long, value_name = "LIST", value_parser = CollectorSet::parse)]
    pub collect: Option<CollectorSet>,
    /// Count exits by the guest code that made them (`exits.sites`), named
    /// with the guest kernel's symbols.
    #[arg(long)]
    pub exit_sites: bool,
    /// The guest kernel's symbols for --exit-sites: a vmlinux, a bzImage,
    /// a System.map or a kallsyms dump (default: the `--kernel`/`-kernel`
    /// of the command launched).
    #[arg(long, value_name = "PATH", requires = "exit_sites")]
    pub guest_symbols: Option<PathBuf>,
    /// Trace the guest kernel's initcalls: the command launched gets the
    /// trace parameters on its guest's kernel command line, in its own
    /// options (QEMU -append, Cloud Hypervisor --cmdline, Firecracker
    /// boot_args in a private copy of its config; bootscope run
    /// --initcalls). With --pid: says what to add.
    #[arg(long)]
    pub initcalls: bool,
    /// Do not read the guest's memory (docs/profiler.md, "Guest memory"):
    /// no memory slots caught, the VMM never held at its guest's end.
    #[arg(long)]
    pub no_guest_memory: bool,
    /// The systemd unit the critical chain ends at, when the command boots
    /// a disk image file whose units go into the profile (as `run
    /// --workload-unit`).
    #[arg(long, value_name = "UNIT", value_parser = crate::common::parse_unit_name, conflicts_with = "pid")]
    pub workload_unit: Option<String>,
    /// The command to launch and follow from its first instruction, after
    /// `--` (e.g. `-- qemu-system-x86_64 -enable-kvm ...`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Refuses a `--pid` that names no process, or one that has ended or is
/// ending: there is nothing to profile.
fn check_pid(pid: u32) -> Result<()> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) if pid != 0 => s,
        _ => bail!("--pid {pid}: no such process; give the pid of a running process (ps -p {pid} checks it)"),
    };
    // `pid (comm) STATE ppid pgrp session tty tpgid FLAGS ...`; comm may
    // hold spaces and parentheses, so the fields start after the last `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    const PF_EXITING: u64 = 0x4;
    let exiting = fields
        .get(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0);
    match fields.first().copied() {
        Some("Z") => bail!(
            "--pid {pid}: the process has exited (a zombie its parent has not reaped yet); there is nothing left to profile"
        ),
        Some("X") => bail!("--pid {pid}: the process has exited; there is nothing left to profile"),
        _ if exiting => bail!("--pid {pid}: the process is exiting; there is nothing left to profile"),
        _ => Ok(()),
    }
}

/// Refuses a command to launch that cannot be run, with the reason (else
/// the child's exec would fail after the fork, with status 127 and no
/// word of why).
fn check_command(command: &[String]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some(program) = command.first() else {
        bail!("give a command to launch after `--`, or --pid");
    };
    let Some(path) = bootscope_profiler::launch::resolve_program(program) else {
        bail!("cannot run {program}: no such command in PATH; give its path or install it");
    };
    let meta = std::fs::metadata(&path).map_err(|e| {
        anyhow::anyhow!(
            "cannot run {}: {e}; give the path of a program",
            path.display()
        )
    })?;
    if !meta.is_file() {
        bail!(
            "cannot run {}: it is not a regular file; give the path of a program",
            path.display()
        );
    }
    if meta.permissions().mode() & 0o111 == 0 {
        bail!(
            "cannot run {}: it is not executable (chmod +x it)",
            path.display()
        );
    }
    Ok(())
}

/// The target checked, and the command to launch: with --initcalls
/// rewritten (src/profile_launch.rs); --pid with --initcalls refused.
fn checked_target(
    args: &ProfileArgs,
    command: Vec<String>,
) -> Result<(Vec<String>, Option<crate::profile_launch::Launch>), Failure> {
    match args.pid {
        Some(pid) => check_pid(pid).map_err(usage)?,
        None => check_command(&command).map_err(usage)?,
    }
    match args.pid {
        Some(pid) if args.initcalls => Err(usage(crate::profile_launch::pid_initcalls(pid))),
        Some(_) => Ok((command, None)),
        None => {
            let l = crate::profile_launch::prepare(&command, args.initcalls).map_err(usage)?;
            Ok((l.command.clone(), Some(l)))
        }
    }
}

/// Runs the subcommand; returns the exit status (a launched command's own
/// status when it ended by itself).
pub fn run(args: ProfileArgs) -> Result<i32, Failure> {
    if crate::live_tui::no_terminal(args.tui) {
        return Err(usage(anyhow::anyhow!(bootscope_tui::NOT_A_TERMINAL)));
    }
    crate::common::check_output("--output", &args.output).map_err(usage)?;
    // SIGINT and SIGTERM end the profiling: they are passed on to the
    // launched command's process group, which is then ended whole; the
    // profile is still written.
    let interrupts = crate::signals::catch()?;
    let command: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (command, launch) = checked_target(&args, command)?;
    // Which VMM `--pid` follows, read now: its /proc entry goes with it.
    let pid_vmm = args.pid.map(crate::profile_launch::pid_vmm);
    let symbols = exit_site_symbols(&args, &command)?;
    // Under --tui a launched command must not read the keys or write over
    // the screen: its output goes to a file, shown in the console pane.
    let child_log = if args.tui && args.pid.is_none() {
        Some(crate::live_tui::command_log()?)
    } else {
        None
    };
    // The console read for boot milestones (src/profile_console.rs).
    let console = ConsolePlan::new(&command, args.pid.is_some(), child_log.as_deref())
        .context("cannot set up reading the command's console")?;
    let disk = disk_units::before_launch(&command, args.pid.is_some(), args.workload_unit.clone());
    let mut launched = None;
    let target = match args.pid {
        Some(pid) => TargetSpec::Pid(pid),
        None => {
            let l = launch_command(&command, &console, child_log.as_deref())?;
            let pid = l.held.pid();
            launched = Some(l);
            TargetSpec::Launched(pid)
        }
    };
    // A held child that is dropped on an error exits without running.
    let collector = Arc::new(start_collector(&args, target, &command)?);
    let slot: MarkSlot = Arc::new(Mutex::new(Some(collector.clone())));
    let reader = console
        .start(&slot)
        .context("cannot start reading the command's console")?;
    let held = launched.as_ref().map(|l| &l.held);
    let guest_watch = Watch::for_profile(&collector, &args, &command, held);
    if let Some(l) = launched.as_mut() {
        l.held
            .release()
            .context("cannot release the launched command")?;
    }
    let started = Instant::now();
    let waited = wait_for_target(
        &args,
        &collector,
        launched.as_mut().map(|l| &mut l.held),
        &interrupts,
        started,
        &command,
        child_log.as_deref(),
    )?;
    // A command that ended by itself has written its last console line.
    let ended = reader.as_ref().filter(|_| waited.status.is_some());
    let guest = guest_watch.map(Watch::finish);
    let mut profile = noted(disk_units::after(
        disk,
        take_collector(collector, &slot, ended)?.finish(),
    ));
    let signal = interrupts.received();
    profile.target.interrupted_by = signal.map(|s| crate::signals::name(s).to_string());
    profile.target.vmm = Some(crate::profile_launch::record(launch.as_ref(), pid_vmm));
    let mut code = 0;
    if let Some(Launched {
        foreground,
        group,
        held,
    }) = launched
    {
        let held_faults = held.held_faults();
        let (exit_code, own, faults) = stop_launched(held, &waited, signal)?;
        drop(group);
        // The group is gone: the terminal is this process's again.
        drop(foreground);
        // Its output to the pipe has ended (unless something that left
        // the group holds it).
        if let Some(r) = reader {
            r.finish(CONSOLE_GRACE);
        }
        profile.target.exit_code = exit_code;
        profile.target.faults = faults.map(|f| bootscope_model::profile::ProcessFaults {
            minflt: f.minflt,
            majflt: f.majflt,
            held: held_faults.map_or(0, |h| h.minflt + h.majflt),
        });
        if own {
            code = exit_code.unwrap_or(0);
        }
    }
    crate::guest_mem::annotate(&mut profile, symbols.as_ref(), guest);
    write_profile(&args, &profile, signal, code)
}

/// Writes the profile and its summary, and says if a signal ended it: the
/// exit status (`code`, the signal's status after one).
fn write_profile(
    args: &ProfileArgs,
    profile: &Profile,
    signal: Option<i32>,
    code: i32,
) -> Result<i32, Failure> {
    let json = serde_json::to_vec_pretty(profile)?;
    crate::common::write_output(&args.output, &json)?;
    if !args.no_summary {
        eprint!("{}", summary(profile, &args.output));
    }
    let mut code = code;
    if let Some(sig) = signal {
        eprintln!(
            "bootscope: interrupted by {}: the profile covers the time until then",
            crate::signals::name(sig)
        );
        code = crate::signals::exit_status(sig);
    }
    Ok(crate::stdout::after_lost_output(code))
}

/// The guest kernel's symbols for `--exit-sites` (None without it).
fn exit_site_symbols(
    args: &ProfileArgs,
    command: &[String],
) -> Result<Option<bootscope_profiler::guest_symbols::SymbolTable>, Failure> {
    if !args.exit_sites {
        return Ok(None);
    }
    // Reading an input: a signal ends the command at once.
    let _immediate = crate::signals::Immediate::new();
    crate::guest_symbols::load_symbols(
        args.guest_symbols.as_deref(),
        crate::guest_symbols::command_kernel(command),
    )
    .map_err(|e| usage(anyhow::anyhow!(e)))
}

/// Starts the collector on `target` as the arguments ask.
fn start_collector(
    args: &ProfileArgs,
    target: TargetSpec,
    command: &[String],
) -> Result<Collector, Failure> {
    let mut config = CollectorConfig::new(target);
    config.command = command.to_vec();
    config.sample_interval = Duration::from_millis(args.sample_interval_ms.max(10));
    config.ring_buffer_bytes = args.ring_buffer_kib.saturating_mul(1024);
    config.bpf_stats = args.bpf_stats;
    config.exit_sites = args.exit_sites;
    if args.initcalls && !args.no_guest_memory {
        // Its lines put the initcalls on the profile's clock (a program
        // run per byte the guest prints: only when they are asked for).
        config.serial_port = Some(crate::guest_mem::SERIAL_PORT);
    }
    if args.initcalls {
        // Each initcall's exits and faults, from the counts per slot.
        config.time_slots = Some(Duration::from_nanos(bootscope_vmm::exit_slots::SLOT_NS));
    }
    if let Some(set) = args.collect {
        config.collectors = set;
    } else {
        // The page-fault tail of a restore: on by default for restores.
        config.collectors.tail = bootscope_profiler::restore_cmd::restore_of(command).is_some();
    }
    match Collector::start(config) {
        Ok(c) => Ok(c),
        // The pid went away since it was checked.
        Err(e @ bootscope_profiler::ProfilerError::NoSuchProcess { .. }) => {
            Err(usage(anyhow::Error::new(e).context("--pid")))
        }
        Err(e) => Err(anyhow::Error::new(e)
            .context("cannot start profiling")
            .into()),
    }
}

/// How the wait for the target ended.
struct Waited {
    /// The launched command's status, when it ended by itself.
    status: Option<std::process::ExitStatus>,
    /// What ended the profiling (`the target ended`, a signal's name,
    /// `--duration elapsed`, ...).
    stopped_by: &'static str,
}

/// Waits until the target ends, a signal or the closed live view stops the
/// profiling, or `--duration` elapses. Under `--tui` the live view runs
/// first.
fn wait_for_target(
    args: &ProfileArgs,
    collector: &Collector,
    mut held: Option<&mut HeldCommand>,
    interrupts: &crate::signals::Interrupts,
    started: Instant,
    command: &[String],
    child_log: Option<&Path>,
) -> Result<Waited, Failure> {
    let quit = interrupts.flag();
    let duration = args.duration;
    let mut status = None;
    let mut stopped_by = "the target ended";
    if args.tui {
        let ended = crate::live_tui::profile_live(
            collector,
            held.as_deref_mut(),
            started,
            duration,
            command,
            child_log,
            args.refresh_ms,
        )?;
        // Closing the UI before the target ended stops it as Ctrl-C does.
        if !ended {
            quit.store(true, Ordering::SeqCst);
        }
    }
    // Sleep until the target ends (its pidfd becomes readable), Ctrl-C or
    // --duration: a profiler polling every few milliseconds takes its CPU
    // from the guest on a small machine.
    let pidfd = bootscope_profiler::launch::pidfd_open(collector.target_pid()).ok();
    loop {
        if let Some(h) = held.as_deref_mut() {
            if let Some(s) = h
                .try_wait()
                .context("cannot wait for the launched command")?
            {
                status = Some(s);
                break;
            }
        } else if collector.target_ended() {
            break;
        }
        if quit.load(Ordering::SeqCst) {
            stopped_by = match interrupts.received() {
                Some(sig) => crate::signals::name(sig),
                None => "the live view was closed",
            };
            break;
        }
        let left = duration.map(|d| d.saturating_sub(started.elapsed()));
        if left.is_some_and(|l| l.is_zero()) {
            stopped_by = "--duration elapsed";
            break;
        }
        let ended = wait_for_exit(pidfd.as_ref(), left.unwrap_or(MAX_WAIT).min(MAX_WAIT));
        // A followed --pid has ended once its pidfd says so, whether or
        // not the collector has seen its last thread go yet.
        if ended && held.is_none() {
            break;
        }
    }
    Ok(Waited { status, stopped_by })
}

/// Ends the launched command and its process group, and gives its exit
/// code (128 + signal when a signal ended it), and whether it ended by
/// itself (its status is then bootscope's). Still running, the group gets
/// `signal` (SIGTERM when profiling stopped for another reason), then
/// SIGKILL after [`STOP_GRACE`]. Whatever is left of the group after the
/// command (a script's background jobs, a forked QEMU) gets SIGTERM, then
/// SIGKILL after [`GROUP_GRACE`].
fn stop_launched(
    mut h: HeldCommand,
    waited: &Waited,
    signal: Option<i32>,
) -> Result<(Option<i32>, bool, Option<ChildFaults>), Failure> {
    let s = match waited.status {
        Some(s) => s,
        None => {
            let sig = signal.unwrap_or(libc::SIGTERM);
            eprintln!(
                "bootscope: {}: stopping the launched command and its process group ({})",
                waited.stopped_by,
                crate::signals::name(sig)
            );
            h.signal_group(sig);
            let deadline = Instant::now() + STOP_GRACE;
            loop {
                if let Some(s) = h.try_wait()? {
                    break s;
                }
                if Instant::now() >= deadline {
                    h.signal_group(libc::SIGKILL);
                    let _ = h.signal(libc::SIGKILL);
                    break h.wait()?;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let left = bootscope_model::proc::group_members(h.pgid());
    if !left.is_empty() {
        eprintln!(
            "bootscope: the launched command left {} process(es) of its group running: stopping them (SIGTERM, SIGKILL after {} s)",
            left.len(),
            GROUP_GRACE.as_secs()
        );
        let still = bootscope_model::proc::end_group(h.pgid(), GROUP_GRACE);
        if !still.is_empty() {
            eprintln!(
                "bootscope: warning: processes of the launched command's group outlived SIGKILL: {still:?}"
            );
        }
    }
    use std::os::unix::process::ExitStatusExt;
    let c = s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0));
    Ok((Some(c), waited.status.is_some(), h.faults()))
}

/// A command launched to be profiled. It leads a process group of its
/// own: SIGINT and SIGTERM go to the whole group, and nothing of it
/// outlives the profile (dropped, the terminal is given back, the group
/// ended, a child still held ended before it runs).
struct Launched {
    foreground: Option<Foreground>,
    group: bootscope_model::proc::ListedGroup,
    held: HeldCommand,
}

/// Launches `command`, held before it runs, its console read by
/// `console` and its output to `child_log` (under `--tui`). Without a log,
/// at a terminal, its group is the foreground job (as a shell makes it),
/// so the command still reads the terminal and gets its keys (Ctrl-C);
/// not under --tui, which keeps the terminal.
fn launch_command(
    command: &[String],
    console: &ConsolePlan,
    child_log: Option<&Path>,
) -> Result<Launched, Failure> {
    let held = crate::live_tui::with_child_stdio(child_log, || {
        console.spawn(|| HeldCommand::spawn(command))
    })??
    .with_context(|| format!("cannot start {}", command.join(" ")))?;
    let group = bootscope_model::proc::ListedGroup::new(held.pgid());
    let foreground = match child_log {
        None => Foreground::give(held.pgid()),
        Some(_) => None,
    };
    Ok(Launched {
        foreground,
        group,
        held,
    })
}

/// How long a launched command has to end after the signal bootscope got
/// (or SIGTERM) before its group gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long the console reader has to pass on a launched command's last
/// output once the command has ended.
const CONSOLE_GRACE: Duration = Duration::from_secs(1);

/// How long what a launched command left running in its group has between
/// SIGTERM and SIGKILL.
const GROUP_GRACE: Duration = Duration::from_secs(1);

/// The terminal's foreground handed to a launched command's process group,
/// as a shell hands it to a job; taken back when dropped.
struct Foreground {
    old_sigttou: libc::sigaction,
}

impl Foreground {
    /// Makes `pgid` the foreground of the terminal on standard input, if
    /// that terminal's foreground is this process's group now.
    fn give(pgid: u32) -> Option<Self> {
        let pgid = libc::pid_t::try_from(pgid).ok()?;
        // SAFETY: isatty, tcgetpgrp, getpgrp, sigaction and tcsetpgrp take
        // plain integers and pointers to sigaction values that live on
        // this stack frame for the calls; a zeroed sigaction is a valid
        // "no flags, empty mask" value.
        unsafe {
            if libc::isatty(libc::STDIN_FILENO) != 1
                || libc::tcgetpgrp(libc::STDIN_FILENO) != libc::getpgrp()
            {
                return None;
            }
            // In the background this process may still write to the
            // terminal and take it back (SIGTTOU would stop it).
            let mut ignore: libc::sigaction = std::mem::zeroed();
            ignore.sa_sigaction = libc::SIG_IGN;
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGTTOU, &ignore, &mut old) != 0 {
                return None;
            }
            if libc::tcsetpgrp(libc::STDIN_FILENO, pgid) != 0 {
                libc::sigaction(libc::SIGTTOU, &old, std::ptr::null_mut());
                return None;
            }
            Some(Foreground { old_sigttou: old })
        }
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        // SAFETY: tcsetpgrp and getpgrp take plain integers; `old_sigttou`
        // is the action sigaction returned, valid for the call.
        unsafe {
            libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp());
            libc::sigaction(libc::SIGTTOU, &self.old_sigttou, std::ptr::null_mut());
        }
    }
}

/// The longest the waiting loop sleeps between checks: how soon Ctrl-C is
/// acted on (the signal may land on another thread than the waiting one).
const MAX_WAIT: Duration = Duration::from_millis(500);

/// Waits up to `timeout` for the process behind `pidfd` to end (true when
/// it has); without a pidfd (before Linux 5.3) the loop checks every 20 ms.
fn wait_for_exit(pidfd: Option<&OwnedFd>, timeout: Duration) -> bool {
    match pidfd {
        Some(fd) => bootscope_profiler::launch::pidfd_ended(fd, timeout),
        None => {
            std::thread::sleep(timeout.min(Duration::from_millis(20)));
            false
        }
    }
}
