//! The lab runner: boots an "outer" Debian guest under QEMU's emulator with
//! real nested KVM, runs a program in it and brings the results back.
//!
//! The outer guest's initramfs holds static busybox, the KVM modules of the
//! host's Debian kernel, the program (as `/bin/bootscope`) with its shared
//! libraries at their host paths, any extra programs (with their libraries)
//! and every input file at its host path, and the program starts in the same
//! directory as on the host, so arguments naming files need no rewriting.
//! The lab knows nothing of the program's flags: the caller names the output
//! files to bring back ([`LabConfig::outputs`]). The guest's first serial
//! port is its console and streams live to the caller; the second carries
//! the exit code and the output files back (see the `transport` module).
//!
//! * `plan`: which files go in, which come back, what the arguments become.
//! * `initramfs` and `modules`: the outer guest's archive.
//! * `init`: its `/init`, a shell script (`init.sh`) with the run's values
//!   filled in.
//! * `qemu`, `watch` and `heartbeat`: the QEMU process, its command
//!   line, the wait for its end and the heartbeat that tells a frozen lab
//!   machine from a slow one.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::guest::{self, DebianKernel};
use crate::transport;
use crate::util;
use crate::{LabError, Result};

mod heartbeat;
mod init;
mod initramfs;
pub(crate) mod modules;
mod plan;
mod qemu;
mod terminal;
mod watch;

pub use plan::{plan_arguments, plan_programs, ArgPlan, InputFile};
pub use terminal::LabTerminal;

use heartbeat::HeartbeatLine;
use qemu::MachineShape;
use watch::Watch;

/// How to run the lab.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Memory of the outer guest in MiB. It must hold the unpacked
    /// initramfs and whatever the program runs inside it (nested guests).
    pub memory_mib: u64,
    /// CPUs of the outer guest (1 by default). With more than one, QEMU
    /// runs them on as many host threads (multi-threaded TCG), and a
    /// profiler's own threads no longer take their time from the nested
    /// guest's vCPU, as on a real host.
    pub cpus: u32,
    /// NUMA nodes of the outer guest (1: none declared). Its CPUs and
    /// memory are split evenly between them (the first nodes take one CPU
    /// or MiB more when the split is uneven), and distances are given: 10
    /// within a node, 20 between two. The Linux inside then has real
    /// per-node allocators, so binding, placement and locality can be
    /// checked against a kernel that really has several nodes.
    pub numa_nodes: u32,
    /// The program to run in the guest (it becomes `/bin/bootscope`).
    pub bootscope_exe: PathBuf,
    /// Its arguments, passed on as they are. An argument (or the value of a
    /// `--flag=VALUE` argument) naming an existing regular file carries that
    /// file into the guest at the same path; only a relative path through
    /// `..` that would not reach the same file inside is replaced by the
    /// file's canonical path. Arguments naming one of the [`outputs`] are
    /// not carried in (name them in [`extra_inputs`] to carry them in too).
    ///
    /// [`outputs`]: LabConfig::outputs
    /// [`extra_inputs`]: LabConfig::extra_inputs
    pub args: Vec<OsString>,
    /// Files the program writes that are brought back to the host, to the
    /// same paths (relative paths are taken from the current directory,
    /// where the program starts in the guest too). Their directories are
    /// created in the guest before the program starts; a file the program
    /// does not write is left alone on the host. Each may be named once,
    /// and none may lie in a directory of [`LabConfig::extra_inputs`].
    pub outputs: Vec<PathBuf>,
    /// The QEMU binary (`qemu-system-x86_64` from `$PATH` by default).
    pub qemu: PathBuf,
    /// Upper bound on the whole run; QEMU is killed when it is exceeded.
    pub timeout: Duration,
    /// More files to carry into the guest at their host paths. A directory
    /// is carried with everything in it, recursively; symbolic links in it
    /// are followed (the guest gets the files they point to) and links that
    /// point nowhere are skipped.
    pub extra_inputs: Vec<PathBuf>,
    /// More programs to carry into the guest at their host paths, each with
    /// its shared libraries and dynamic loader (as for the main program), so
    /// the main program (for example a script run by busybox) can start
    /// them by their host paths.
    pub extra_programs: Vec<PathBuf>,
    /// Host files carried in at another path than their own (`guest`,
    /// absolute): what the host prepared for the program where the program
    /// looks for it, such as an entry of the kernel cache in the lab
    /// machine's cache directory (its `HOME` is [`GUEST_HOME`]). The host
    /// file must be a regular file.
    pub placed_inputs: Vec<InputFile>,
    /// Give the program a terminal: the lab machine's console, with this
    /// size and type, as its controlling terminal, and the host's keys
    /// (see the `terminal` module). The host's standard input must be a
    /// terminal then; it is in raw mode while the lab runs. None: the
    /// program runs with standard input from `/dev/null`.
    pub terminal: Option<LabTerminal>,
    /// Keep address space layout randomization on in the outer guest. Off
    /// by default: QEMU's emulator translates code per virtual address, so
    /// a program loaded at fresh random addresses is translated anew on
    /// every run, a cost of the emulation that real hardware does not have
    /// and that grows with the code a run touches (docs/benchmarks.md).
    pub randomize_addresses: bool,
    /// How long the lab machine's heartbeat (a byte its init writes to a
    /// third serial port every two seconds) may stay silent before the lab
    /// counts as frozen and QEMU is killed ([`LabError::Frozen`]).
    pub freeze_after: Duration,
    /// How many times a lab machine that froze is started again from
    /// scratch. A freeze is the emulator's fault, not the program's, and
    /// nothing of a frozen attempt comes back (outputs are written only
    /// after a complete run), so running it again is safe.
    pub frozen_retries: u32,
    /// Set from elsewhere (a signal handler) to stop: QEMU is killed, the
    /// temporary directory removed, and the run ends with
    /// [`LabError::Interrupted`].
    pub stop: Option<Arc<AtomicBool>>,
}

/// `HOME` of the program in the lab machine (`/init` exports it).
pub const GUEST_HOME: &str = "/root";

impl LabConfig {
    /// Default guest memory: room for bootscope, a nested guest and its
    /// initramfs.
    pub const DEFAULT_MEMORY_MIB: u64 = 2048;
    /// The most CPUs the lab machine is given.
    pub const MAX_CPUS: u32 = 16;
    /// The least memory a NUMA node of the lab machine is given.
    pub const MIN_NODE_MIB: u64 = 256;
    /// Default timeout: generous, since everything runs under emulation.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
    /// Default heartbeat silence that counts as a frozen lab machine: a
    /// loaded machine still schedules the two-second beat within a few
    /// seconds, so a minute of silence is one that no longer runs anything.
    pub const DEFAULT_FREEZE_AFTER: Duration = Duration::from_secs(60);

    /// A configuration with default memory, QEMU and timeout.
    pub fn new(bootscope_exe: impl Into<PathBuf>, args: Vec<OsString>) -> Self {
        LabConfig {
            memory_mib: Self::DEFAULT_MEMORY_MIB,
            cpus: 1,
            numa_nodes: 1,
            bootscope_exe: bootscope_exe.into(),
            args,
            outputs: Vec::new(),
            qemu: PathBuf::from("qemu-system-x86_64"),
            timeout: Self::DEFAULT_TIMEOUT,
            extra_inputs: Vec::new(),
            extra_programs: Vec::new(),
            placed_inputs: Vec::new(),
            terminal: None,
            randomize_addresses: false,
            freeze_after: Self::DEFAULT_FREEZE_AFTER,
            frozen_retries: 1,
            stop: None,
        }
    }
}

/// What a lab run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabOutcome {
    /// Exit status of the program in the guest (128 + N if signal N killed it).
    pub exit_code: i32,
    /// Output files written back to the host, in the order they were named.
    pub outputs: Vec<PathBuf>,
    /// Whether `/dev/kvm` existed in the guest.
    pub nested_kvm: bool,
    /// Wall-clock time from starting QEMU until it exited.
    pub elapsed: Duration,
}

/// Checks that this host can run the lab with `qemu`: QEMU, a Debian
/// kernel with `kvm_amd`, and static busybox. Returns the kernel the lab
/// would boot; the error says what to install.
pub fn check_prerequisites(qemu: &Path) -> Result<DebianKernel> {
    prerequisites(qemu).map(|host| host.kernel)
}

/// What the lab needs from the host.
struct HostParts {
    /// Full path of the QEMU binary.
    qemu: PathBuf,
    /// The kernel to boot.
    kernel: DebianKernel,
    /// Static busybox.
    busybox: PathBuf,
}

fn prerequisites(qemu: &Path) -> Result<HostParts> {
    let qemu = util::find_in_path(qemu).ok_or_else(|| LabError::QemuMissing {
        qemu: qemu.to_path_buf(),
    })?;
    let kernel = guest::find_debian_kernel()?;
    let busybox = guest::static_busybox()?;
    Ok(HostParts {
        qemu,
        kernel,
        busybox,
    })
}

/// Runs the lab, streaming the guest console to this process's stdout.
pub fn run_lab(cfg: &LabConfig) -> Result<LabOutcome> {
    run_lab_with_console(cfg, &mut io::stdout())
}

/// Runs the lab, streaming the guest console to `console` as it arrives.
///
/// Steps: find the kernel, busybox and QEMU; plan inputs and outputs; build
/// the outer initramfs in a temporary directory; boot it; copy the console
/// while waiting (up to `cfg.timeout`); then verify the result stream and
/// write the output files back atomically. The temporary directory is
/// removed in every case.
pub fn run_lab_with_console(
    cfg: &LabConfig,
    console: &mut (dyn Write + Send),
) -> Result<LabOutcome> {
    check_config(cfg)?;
    // Bad input is refused before the host is searched for the lab's parts.
    check_exe(&cfg.bootscope_exe)?;
    let cwd = std::env::current_dir()
        .map_err(|e| LabError::io("determine", "the current directory", e))?;
    let mut plan = plan_arguments(&cfg.args, &cfg.outputs, &cfg.extra_inputs, &cwd)?;
    add_placed_inputs(&mut plan, &cfg.placed_inputs)?;
    let programs = plan_programs(&cfg.extra_programs, &cwd)?;
    // Outputs are written back only at the end: refuse now, not after the
    // run, one that cannot be written (a directory still missing is made
    // then).
    for output in &plan.outputs {
        if output.parent().is_some_and(Path::is_dir) {
            bootscope_model::output::check_writable(output)?;
        }
    }
    let HostParts {
        qemu,
        kernel,
        busybox,
    } = prerequisites(&cfg.qemu)?;

    let tmp = util::temp_dir("lab")?;
    let archive = tmp.path().join("outer.cpio");
    let archive_len = initramfs::build_outer_initramfs(
        &archive,
        &kernel,
        &busybox,
        &cfg.bootscope_exe,
        &programs,
        &plan,
        init::InitOptions {
            randomize_addresses: cfg.randomize_addresses,
            terminal: cfg.terminal.as_ref(),
        },
    )?;
    let archive_mib = archive_len.div_ceil(1 << 20);
    if archive_mib * 2 + 256 > cfg.memory_mib {
        return Err(LabError::NotEnoughMemory {
            archive_mib,
            memory_mib: cfg.memory_mib,
        });
    }
    let paths = RunPaths {
        qemu,
        stream: tmp.path().join("lab-out.bin"),
        heartbeat: tmp.path().join("heartbeat"),
    };
    let mut cmd = qemu::qemu_command(
        &paths.qemu,
        &MachineShape::of(cfg),
        &kernel.vmlinuz,
        &archive,
        &paths.stream,
        &paths.heartbeat,
        cfg.terminal.is_some(),
    );
    let (status, elapsed, stderr_tail) = run_attempts(cfg, &mut cmd, &paths, console)?;
    let report = read_report(&paths.stream, &plan, status, &stderr_tail)?;
    let outputs = write_outputs(&plan, &report)?;
    Ok(LabOutcome {
        exit_code: report.exit_code,
        outputs,
        nested_kvm: report.nested_kvm,
        elapsed,
    })
}

/// Refuses settings the lab machine cannot run with.
fn check_config(cfg: &LabConfig) -> Result<()> {
    if cfg.memory_mib < 256 {
        return Err(LabError::InvalidConfig(format!(
            "{} MiB of guest memory is too little for the lab; use at least 256 MiB",
            cfg.memory_mib
        )));
    }
    if !(1..=LabConfig::MAX_CPUS).contains(&cfg.cpus) {
        return Err(LabError::InvalidConfig(format!(
            "{} CPUs: the lab machine takes 1 to {}",
            cfg.cpus,
            LabConfig::MAX_CPUS
        )));
    }
    qemu::check_numa(cfg)?;
    if cfg.timeout.is_zero() {
        return Err(LabError::InvalidConfig(
            "the timeout must be longer than zero".into(),
        ));
    }
    if cfg.freeze_after < Duration::from_secs(10) {
        return Err(LabError::InvalidConfig(format!(
            "a heartbeat silence of {:.1} s is too short to call the lab machine frozen (it beats every 2 s, later when loaded); use at least 10 s",
            cfg.freeze_after.as_secs_f64()
        )));
    }
    Ok(())
}

/// Adds the inputs the host placed at guest paths of its choosing; each
/// must be a regular file going to an absolute path no other input takes.
fn add_placed_inputs(plan: &mut ArgPlan, placed: &[InputFile]) -> Result<()> {
    for input in placed {
        let bad = |why: &str| {
            LabError::InvalidConfig(format!(
                "{} cannot be carried in at {}: {why}",
                input.host.display(),
                input.guest.display()
            ))
        };
        if !input.guest.is_absolute() {
            return Err(bad("the lab machine's path must be absolute"));
        }
        if !fs::metadata(&input.host).is_ok_and(|m| m.is_file()) {
            return Err(bad("it is not a regular file on this host"));
        }
        if plan.inputs.iter().any(|i| i.guest == input.guest) {
            return Err(bad("another input goes there"));
        }
        plan.inputs.push(input.clone());
    }
    Ok(())
}

/// The program to run must be an existing regular file.
fn check_exe(exe: &Path) -> Result<()> {
    let exe_meta = fs::metadata(exe).map_err(|e| LabError::ExeMissing {
        path: exe.to_path_buf(),
        reason: e.to_string(),
    })?;
    if !exe_meta.is_file() {
        return Err(LabError::ExeMissing {
            path: exe.to_path_buf(),
            reason: "it is not a regular file".into(),
        });
    }
    Ok(())
}

/// The QEMU binary and the host ends of the lab machine's result and
/// heartbeat lines.
struct RunPaths {
    qemu: PathBuf,
    stream: PathBuf,
    heartbeat: PathBuf,
}

/// Runs QEMU, and again from scratch up to [`LabConfig::frozen_retries`]
/// times when the lab machine froze; returns QEMU's status, the run's wall
/// time and the last lines of QEMU's stderr.
fn run_attempts(
    cfg: &LabConfig,
    cmd: &mut std::process::Command,
    paths: &RunPaths,
    console: &mut (dyn Write + Send),
) -> Result<(ExitStatus, Duration, Vec<String>)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        // A fresh stream and heartbeat line per attempt: a frozen one may
        // hold part of a result, or beats and kicks of the last machine.
        let _ = fs::remove_file(&paths.stream);
        let line = HeartbeatLine::create(&paths.heartbeat)?;
        let watch = Watch {
            stop: cfg.stop.clone(),
            timeout: cfg.timeout,
            heartbeat: line,
            freeze_after: cfg.freeze_after,
            terminal: cfg.terminal.is_some(),
        };
        match watch::run_qemu(cmd, &paths.qemu, watch, console) {
            Err(LabError::Frozen { silent, .. }) if attempt <= cfg.frozen_retries => {
                let _ = writeln!(
                    console,
                    "\nbootscope lab: the lab machine froze (no heartbeat for {} s: a fault of the emulator, see `bootscope lab --help`); starting it again (attempt {} of {})",
                    silent.as_secs(),
                    attempt + 1,
                    cfg.frozen_retries + 1
                );
                let _ = console.flush();
            }
            other => return other,
        }
    }
}

/// Reads and verifies the result stream the guest sent back.
fn read_report(
    stream_path: &Path,
    plan: &ArgPlan,
    status: ExitStatus,
    stderr_tail: &[String],
) -> Result<transport::Report> {
    let data = match fs::read(stream_path) {
        Ok(data) => data,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(LabError::io("read", stream_path, e)),
    };
    match transport::parse(&data, stream_path, &plan.outputs) {
        Ok(report) => Ok(report),
        // A QEMU failure explains a broken stream better than the stream.
        Err(LabError::StreamTruncated { .. } | LabError::StreamCorrupt { .. })
            if !status.success() =>
        {
            Err(LabError::QemuFailed {
                status: status.to_string(),
                stderr: format_tail(stderr_tail),
            })
        }
        Err(err) => Err(err),
    }
}

/// Writes the output files that came back to their host paths.
fn write_outputs(plan: &ArgPlan, report: &transport::Report) -> Result<Vec<PathBuf>> {
    let mut outputs = Vec::new();
    for (index, contents) in &report.files {
        let path = &plan.outputs[*index];
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| LabError::io("create directory", parent, e))?;
        }
        util::write_atomically(path, contents, 0o644)?;
        outputs.push(path.clone());
    }
    Ok(outputs)
}

fn format_tail(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; QEMU said:\n{}", lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_inputs_are_files_at_absolute_paths_of_their_own() {
        let dir = util::temp_dir("placed").unwrap();
        let file = dir.path().join("vmlinux-ab");
        fs::write(&file, b"x").unwrap();
        let plan = || plan_arguments(&[], &[], &[], dir.path()).unwrap();
        let placed = |host: &Path, guest: &str| InputFile {
            host: host.to_path_buf(),
            guest: PathBuf::from(guest),
        };
        let mut ok = plan();
        let good = placed(&file, "/root/.cache/bootscope/kernels/vmlinux-ab");
        add_placed_inputs(&mut ok, std::slice::from_ref(&good)).unwrap();
        assert_eq!(ok.inputs, std::slice::from_ref(&good));
        for (bad, why) in [
            (vec![placed(&file, "rel/vmlinux-ab")], "must be absolute"),
            (vec![placed(dir.path(), "/d")], "not a regular file"),
            (
                vec![placed(&dir.path().join("none"), "/n")],
                "not a regular file",
            ),
            (vec![good.clone(), good.clone()], "another input goes there"),
        ] {
            let err = add_placed_inputs(&mut plan(), &bad).unwrap_err();
            assert!(
                matches!(&err, LabError::InvalidConfig(m) if m.contains(why)),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_cpu_counts_are_refused_before_anything_runs() {
        for cpus in [0, LabConfig::MAX_CPUS + 1] {
            let mut cfg = LabConfig::new("/nonexistent/bootscope", Vec::new());
            cfg.cpus = cpus;
            let mut sink = Vec::new();
            let err = run_lab_with_console(&cfg, &mut sink).unwrap_err();
            assert!(
                matches!(&err, LabError::InvalidConfig(m) if m.contains("CPUs")),
                "{err}"
            );
        }
    }
}
