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

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpio::Builder;
use crate::elf::{self, Linkage};
use crate::guest::{self, DebianKernel};
use crate::transport;
use crate::util::{self, TempDir};
use crate::{LabError, Result};

/// Guest directories whose contents come from the guest kernel, not from
/// the archive: host files there are never carried in as inputs.
const GUEST_PSEUDO_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Where the program under test lives in the guest.
const GUEST_EXE: &str = "/bin/bootscope";

/// Directory for the link that gives the program its host name.
const EXE_ALIAS_DIR: &str = "/lab/bin";

/// Kernel module that provides nested KVM; its dependencies come from
/// `modules.dep`.
const ROOT_MODULE: &str = "kvm_amd";

/// Lines of QEMU's stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 20;

/// QEMU warns once per CPU feature that TCG cannot emulate; the `EPYC`
/// model lists several. They are harmless, so they are not forwarded.
const HARMLESS_QEMU_WARNING: &str = "TCG doesn't support requested feature";

/// Outer kernel command line: console on the first serial port; `quiet`
/// and `loglevel=3` keep kernel messages from mixing with the program's
/// output; `panic=-1` reboots at once on a panic, which `-no-reboot` turns
/// into a QEMU exit instead of a hang.
const KERNEL_CMDLINE: &str = "console=ttyS0 quiet loglevel=3 panic=-1";

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

/// A host file carried into the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    /// Where to read it on the host.
    pub host: PathBuf,
    /// Absolute path in the guest.
    pub guest: PathBuf,
}

/// The arguments as the guest will see them, and the files involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPlan {
    /// Arguments for the program in the guest.
    pub args: Vec<OsString>,
    /// Files to carry in.
    pub inputs: Vec<InputFile>,
    /// Absolute host (and guest) paths of the output files.
    pub outputs: Vec<PathBuf>,
    /// The directories of the output files as named (relative to `cwd` or
    /// absolute), created in the guest before the program starts.
    pub output_dirs: Vec<PathBuf>,
    /// Directory the program starts in, in the guest as on the host.
    pub cwd: PathBuf,
}

/// Works out which files go into the guest and which come back.
///
/// * Each of `outputs` (relative to `cwd` or absolute) is brought back; see
///   [`LabConfig::outputs`] for what is refused.
/// * Any argument, or the value of any `--flag=VALUE` argument, that names
///   an existing regular file is an input, unless it names one of the
///   outputs. Its text stays as it is: the guest starts in `cwd` and has
///   the file at the same path. The exception is a path through `..` that
///   would not reach the same file in the guest (a `..` after a directory
///   name, or a symbolic link on the way): it becomes the file's canonical
///   path, where the guest has it.
///
/// `extra_inputs` must exist; a directory among them is carried in with
/// all the files under it (see [`LabConfig::extra_inputs`]).
///
/// Host files under `/proc`, `/sys` and `/dev` are not carried in: the
/// guest kernel provides its own.
pub fn plan_arguments(
    args: &[OsString],
    outputs: &[PathBuf],
    extra_inputs: &[PathBuf],
    cwd: &Path,
) -> Result<ArgPlan> {
    let mut plan = ArgPlan {
        args: Vec::with_capacity(args.len()),
        inputs: Vec::new(),
        outputs: Vec::new(),
        output_dirs: Vec::new(),
        cwd: cwd.to_path_buf(),
    };
    for output in outputs {
        let bad = |reason: String| LabError::BadOutput {
            path: output.clone(),
            reason,
        };
        let text = output.as_os_str().as_bytes();
        if text.is_empty() {
            return Err(bad("is an empty path; name a file".into()));
        }
        if text.contains(&0) {
            return Err(bad("contains a NUL byte".into()));
        }
        let absolute = util::absolute_lexical(cwd, output);
        if absolute == Path::new("/")
            || text.ends_with(b"/")
            || fs::metadata(&absolute).is_ok_and(|m| m.is_dir())
        {
            return Err(bad("is a directory; name a file".into()));
        }
        if plan.outputs.contains(&absolute) {
            return Err(bad(format!(
                "is named twice (as {}); each output file is brought back once, so name it once",
                absolute.display()
            )));
        }
        plan.outputs.push(absolute);
        if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
            plan.output_dirs.push(parent.to_path_buf());
        }
    }
    let mut seen_inputs = HashSet::new();
    let mut add_input = |plan: &mut ArgPlan, input: InputFile| {
        if seen_inputs.insert(input.guest.clone()) {
            plan.inputs.push(input);
        }
    };
    for arg in args {
        if arg.as_bytes().contains(&0) {
            return Err(LabError::InvalidConfig(format!(
                "argument {arg:?} contains a NUL byte"
            )));
        }
        let text = arg.as_bytes();
        if text.starts_with(b"-") {
            if let Some(eq) = text.iter().position(|&b| b == b'=') {
                let (flag, value) = (&text[..eq], OsStr::from_bytes(&text[eq + 1..]));
                let new_value = match input_for(value, cwd, &plan.outputs)? {
                    Some((input, rewritten)) => {
                        add_input(&mut plan, input);
                        rewritten
                    }
                    None => value.to_os_string(),
                };
                let mut joined = flag.to_vec();
                joined.push(b'=');
                joined.extend_from_slice(new_value.as_bytes());
                plan.args.push(OsString::from_vec(joined));
                continue;
            }
        }
        match input_for(arg, cwd, &plan.outputs)? {
            Some((input, rewritten)) => {
                add_input(&mut plan, input);
                plan.args.push(rewritten);
            }
            None => plan.args.push(arg.clone()),
        }
    }
    for extra in extra_inputs {
        let host = if extra.is_absolute() {
            extra.clone()
        } else {
            cwd.join(extra)
        };
        if fs::metadata(&host).map(|m| m.is_dir()).unwrap_or(false) {
            let (guest_dir, _) = guest_location(extra.as_os_str(), cwd, &host)?;
            if let Some(output) = plan.outputs.iter().find(|o| {
                o.starts_with(&guest_dir) || o.starts_with(util::absolute_lexical(cwd, extra))
            }) {
                return Err(LabError::BadOutput {
                    path: output.clone(),
                    reason: format!(
                        "lies in the directory {} that --input carries in; bring back a file outside it, or carry in only the files it needs",
                        extra.display()
                    ),
                });
            }
            if GUEST_PSEUDO_DIRS
                .iter()
                .any(|dir| guest_dir.starts_with(dir))
            {
                continue;
            }
            let mut files = Vec::new();
            directory_inputs(&host, &guest_dir, &mut HashSet::new(), &mut files)?;
            for input in files {
                add_input(&mut plan, input);
            }
            continue;
        }
        match input_for(extra.as_os_str(), cwd, &[])? {
            Some((input, _)) => add_input(&mut plan, input),
            None => {
                return Err(LabError::InputMissing {
                    path: extra.clone(),
                })
            }
        }
    }
    Ok(plan)
}

/// Adds every regular file under the host directory `host_dir` to `out`, at
/// the same relative path under `guest_dir`, in name order.
///
/// Symbolic links are followed, so the guest gets the files they point to
/// (even outside the directory); links that point nowhere, and special
/// files such as sockets, are skipped. `visited` holds the canonical paths
/// of the directories already walked, so a link back up the tree ends the
/// walk there instead of looping.
fn directory_inputs(
    host_dir: &Path,
    guest_dir: &Path,
    visited: &mut HashSet<PathBuf>,
    out: &mut Vec<InputFile>,
) -> Result<()> {
    let canonical = fs::canonicalize(host_dir).map_err(|e| LabError::io("resolve", host_dir, e))?;
    if !visited.insert(canonical) {
        return Ok(());
    }
    let mut names: Vec<OsString> = fs::read_dir(host_dir)
        .map_err(|e| LabError::io("list", host_dir, e))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<io::Result<_>>()
        .map_err(|e| LabError::io("list", host_dir, e))?;
    names.sort();
    for name in names {
        let host = host_dir.join(&name);
        let guest = guest_dir.join(&name);
        // `metadata` follows links; a dangling link has none.
        let Ok(meta) = fs::metadata(&host) else {
            continue;
        };
        if meta.is_dir() {
            directory_inputs(&host, &guest, visited, out)?;
        } else if meta.is_file() {
            out.push(InputFile { host, guest });
        }
    }
    Ok(())
}

/// The programs of [`LabConfig::extra_programs`] as files to carry in at
/// their host paths (relative paths are taken from `cwd`).
pub fn plan_programs(programs: &[PathBuf], cwd: &Path) -> Result<Vec<InputFile>> {
    let mut planned: Vec<InputFile> = Vec::with_capacity(programs.len());
    for program in programs {
        let missing = |reason: &str| LabError::ProgramMissing {
            path: program.clone(),
            reason: reason.to_string(),
        };
        if program.as_os_str().as_bytes().contains(&0) {
            return Err(missing("its path contains a NUL byte"));
        }
        let host = if program.is_absolute() {
            program.clone()
        } else {
            cwd.join(program)
        };
        match fs::metadata(&host) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => return Err(missing("it is not a regular file")),
            Err(e) => return Err(missing(&e.to_string())),
        }
        let (guest, _) = guest_location(program.as_os_str(), cwd, &host)?;
        if GUEST_PSEUDO_DIRS.iter().any(|dir| guest.starts_with(dir)) {
            return Err(missing(
                "it lives under /proc, /sys or /dev, which the guest kernel provides",
            ));
        }
        if !planned.iter().any(|p| p.guest == guest) {
            planned.push(InputFile { host, guest });
        }
    }
    Ok(planned)
}

/// If `value` names an existing regular file other than one of `outputs`
/// (absolute paths), where to put it in the guest and what the argument
/// becomes.
fn input_for(
    value: &OsStr,
    cwd: &Path,
    outputs: &[PathBuf],
) -> Result<Option<(InputFile, OsString)>> {
    if value.is_empty() {
        return Ok(None);
    }
    let path = Path::new(value);
    let host = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    if !fs::metadata(&host).map(|m| m.is_file()).unwrap_or(false) {
        return Ok(None);
    }
    if outputs.contains(&util::absolute_lexical(cwd, path)) {
        return Ok(None);
    }
    let (guest, rewritten) = guest_location(value, cwd, &host)?;
    if GUEST_PSEUDO_DIRS.iter().any(|dir| guest.starts_with(dir)) {
        return Ok(None);
    }
    Ok(Some((InputFile { host, guest }, rewritten)))
}

/// Where the existing host file or directory `host`, named `value` relative
/// to `cwd`, goes in the guest, and what an argument naming it becomes.
///
/// The guest starts in `cwd` and holds no symbolic links of the host, so a
/// path without `..` reaches the same place there as its lexically
/// resolved absolute path, and stays as it is. So does a relative path
/// whose `..` components all come first (they only climb out of `cwd`,
/// which exists in the guest with all its parents) when it leads to the
/// file's canonical path. Any other path through `..` may pass through a
/// link or a directory the guest lacks: the guest gets the file at its
/// canonical path, and the argument becomes that path.
fn guest_location(value: &OsStr, cwd: &Path, host: &Path) -> Result<(PathBuf, OsString)> {
    let path = Path::new(value);
    let lexical = util::absolute_lexical(cwd, path);
    if !path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Ok((lexical, value.to_os_string()));
    }
    let canonical = fs::canonicalize(host).map_err(|e| LabError::io("resolve", host, e))?;
    let leading_only = !path.is_absolute()
        && path
            .components()
            .skip_while(|c| matches!(c, Component::ParentDir | Component::CurDir))
            .all(|c| !matches!(c, Component::ParentDir));
    if leading_only && canonical == lexical {
        Ok((lexical, value.to_os_string()))
    } else {
        Ok((canonical.clone(), canonical.into_os_string()))
    }
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
    check_numa(cfg)?;
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
    // Bad input is refused before the host is searched for the lab's parts.
    let exe_meta = fs::metadata(&cfg.bootscope_exe).map_err(|e| LabError::ExeMissing {
        path: cfg.bootscope_exe.clone(),
        reason: e.to_string(),
    })?;
    if !exe_meta.is_file() {
        return Err(LabError::ExeMissing {
            path: cfg.bootscope_exe.clone(),
            reason: "it is not a regular file".into(),
        });
    }
    let cwd = std::env::current_dir()
        .map_err(|e| LabError::io("determine", "the current directory", e))?;
    let plan = plan_arguments(&cfg.args, &cfg.outputs, &cfg.extra_inputs, &cwd)?;
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

    let tmp = TempDir::new("lab")?;
    let archive = tmp.path().join("outer.cpio");
    let archive_len = build_outer_initramfs(
        &archive,
        &kernel,
        &busybox,
        &cfg.bootscope_exe,
        &programs,
        &plan,
        cfg.randomize_addresses,
    )?;
    let archive_mib = archive_len.div_ceil(1 << 20);
    if archive_mib * 2 + 256 > cfg.memory_mib {
        return Err(LabError::NotEnoughMemory {
            archive_mib,
            memory_mib: cfg.memory_mib,
        });
    }
    let stream_path = tmp.path().join("lab-out.bin");
    let heartbeat_path = tmp.path().join("heartbeat");
    let mut cmd = qemu_command(
        &qemu,
        &MachineShape::of(cfg),
        &kernel.vmlinuz,
        &archive,
        &stream_path,
        &heartbeat_path,
    );
    let mut attempt = 0;
    let (status, elapsed, stderr_tail) = loop {
        attempt += 1;
        // A fresh stream and heartbeat line per attempt: a frozen one may
        // hold part of a result, or beats and kicks of the last machine.
        let _ = fs::remove_file(&stream_path);
        let line = HeartbeatLine::create(&heartbeat_path)?;
        let watch = Watch {
            stop: cfg.stop.clone(),
            timeout: cfg.timeout,
            heartbeat: line,
            freeze_after: cfg.freeze_after,
        };
        match run_qemu(&mut cmd, &qemu, watch, console) {
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
            other => break other?,
        }
    };

    let data = match fs::read(&stream_path) {
        Ok(data) => data,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(LabError::io("read", &stream_path, e)),
    };
    let report = match transport::parse(&data, &stream_path, &plan.outputs, tmp.path()) {
        Ok(report) => report,
        // A QEMU failure explains a broken stream better than the stream.
        Err(LabError::StreamTruncated { .. } | LabError::StreamCorrupt { .. })
            if !status.success() =>
        {
            return Err(LabError::QemuFailed {
                status: status.to_string(),
                stderr: format_tail(&stderr_tail),
            });
        }
        Err(err) => return Err(err),
    };

    let mut outputs = Vec::new();
    for (index, contents) in &report.files {
        let path = &plan.outputs[*index];
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| LabError::io("create directory", parent, e))?;
        }
        util::write_atomically(path, contents, 0o644)?;
        outputs.push(path.clone());
    }
    Ok(LabOutcome {
        exit_code: report.exit_code,
        outputs,
        nested_kvm: report.nested_kvm,
        elapsed,
    })
}

fn format_tail(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; QEMU said:\n{}", lines.join("\n"))
    }
}

/// The QEMU command line of the outer guest.
///
/// `-nodefaults` drops the default devices (VGA, network, the monitor
/// multiplexed onto stdio); two ISA serial ports remain: ttyS0 on QEMU's
/// stdio (a pipe we read, with stdin from /dev/null so no terminal is ever
/// touched) and ttyS1 on the result file.
fn qemu_command(
    qemu: &Path,
    shape: &MachineShape,
    vmlinuz: &Path,
    initrd: &Path,
    stream: &Path,
    heartbeat: &Path,
) -> Command {
    let mut cmd = Command::new(qemu);
    // One host thread per emulated CPU when there are several.
    let accel = if shape.cpus > 1 {
        "tcg,thread=multi"
    } else {
        "tcg"
    };
    cmd.args(["-accel", accel, "-cpu", "EPYC,+svm,+npt"])
        .arg("-m")
        .arg(format!("{}M", shape.memory_mib))
        .arg("-smp")
        .arg(shape.cpus.to_string())
        .args(shape.numa_args())
        .args([
            "-display",
            "none",
            "-nodefaults",
            "-no-user-config",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(KERNEL_CMDLINE)
        .args([
            "-chardev",
            "stdio,id=con0,signal=off",
            "-serial",
            "chardev:con0",
        ])
        .arg("-chardev")
        .arg(chardev_file_option("lab0", stream))
        .args(["-serial", "chardev:lab0"])
        .arg("-chardev")
        .arg(chardev_option("pipe", "beat", heartbeat))
        .args(["-serial", "chardev:beat"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // QEMU dies with us: a `bootscope lab` killed by a signal (SIGTERM from
    // a CI runner, SIGKILL) must not leave an emulator running.
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe calls (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd
}

/// The lab machine's CPUs, memory and NUMA nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MachineShape {
    memory_mib: u64,
    cpus: u32,
    /// Per node (none without NUMA): its first CPU, CPU count and MiB.
    nodes: Vec<(u32, u32, u64)>,
}

impl MachineShape {
    fn of(cfg: &LabConfig) -> Self {
        let n = cfg.numa_nodes.max(1);
        let mut nodes = Vec::new();
        if n > 1 {
            let mut first = 0;
            for i in 0..n {
                // Even split; the first nodes take the remainder.
                let cpus = cfg.cpus / n + u32::from(i < cfg.cpus % n);
                let mib = cfg.memory_mib / u64::from(n)
                    + u64::from(u64::from(i) < cfg.memory_mib % u64::from(n));
                nodes.push((first, cpus, mib));
                first += cpus;
            }
        }
        MachineShape {
            memory_mib: cfg.memory_mib,
            cpus: cfg.cpus,
            nodes,
        }
    }

    /// QEMU's options for the nodes: one RAM backend and one `-numa node`
    /// each, and the distance of every pair.
    fn numa_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (i, &(first, cpus, mib)) in self.nodes.iter().enumerate() {
            args.push("-object".into());
            args.push(format!("memory-backend-ram,id=ram-node{i},size={mib}M"));
            args.push("-numa".into());
            let last = first + cpus - 1;
            args.push(format!(
                "node,nodeid={i},cpus={first}-{last},memdev=ram-node{i}"
            ));
        }
        for src in 0..self.nodes.len() {
            for dst in 0..self.nodes.len() {
                if src != dst {
                    args.push("-numa".into());
                    args.push(format!("dist,src={src},dst={dst},val=20"));
                }
            }
        }
        args
    }
}

/// `--numa-nodes`: every node gets a CPU and [`LabConfig::MIN_NODE_MIB`].
fn check_numa(cfg: &LabConfig) -> Result<()> {
    let n = cfg.numa_nodes;
    if n == 0 {
        return Err(LabError::InvalidConfig(
            "0 NUMA nodes: the lab machine has at least 1 (--numa-nodes 1 is a machine without NUMA)"
                .into(),
        ));
    }
    if n > cfg.cpus {
        return Err(LabError::InvalidConfig(format!(
            "{n} NUMA nodes but {} CPU(s): every node needs a CPU; give at least --cpus {n}",
            cfg.cpus
        )));
    }
    if cfg.memory_mib / u64::from(n) < LabConfig::MIN_NODE_MIB {
        return Err(LabError::InvalidConfig(format!(
            "{} MiB cannot be split into {n} NUMA nodes of at least {} MiB each; give at least --memory {}M",
            cfg.memory_mib,
            LabConfig::MIN_NODE_MIB,
            LabConfig::MIN_NODE_MIB * u64::from(n)
        )));
    }
    Ok(())
}

/// `file,id=<id>,path=<path>` with commas in the path doubled, as QEMU's
/// option syntax requires.
fn chardev_file_option(id: &str, path: &Path) -> OsString {
    chardev_option("file", id, path)
}

/// `<backend>,id=<id>,path=<path>`, commas in the path doubled.
fn chardev_option(backend: &str, id: &str, path: &Path) -> OsString {
    let mut opt = format!("{backend},id={id},path=").into_bytes();
    for &b in path.as_os_str().as_bytes() {
        opt.push(b);
        if b == b',' {
            opt.push(b',');
        }
    }
    OsString::from_vec(opt)
}

/// Kills and reaps QEMU when dropped unless it was reaped already, so no
/// error path (or panic) leaves an emulator running.
struct ChildGuard {
    child: Child,
    reaped: bool,
}

impl ChildGuard {
    fn kill(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.reaped = true;
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What `run_qemu` waits for: the timeout, and the heartbeat line whose
/// beats say the lab machine still runs.
struct Watch {
    stop: Option<Arc<AtomicBool>>,
    timeout: Duration,
    heartbeat: HeartbeatLine,
    freeze_after: Duration,
}

/// How often the host sends a byte down the heartbeat line.
const KICK_EVERY: Duration = Duration::from_millis(500);

/// The lab machine's third serial port, as two FIFOs QEMU's `pipe` chardev
/// opens (`PATH.in` is what the port receives, `PATH.out` what it sends).
///
/// Out of the lab machine come its heartbeat bytes. Into it the host sends
/// a byte every [`KICK_EVERY`]: a receive interrupt. QEMU 7.2's emulator can
/// lose the wake-up of an interrupt that arrives while a nested guest is
/// being entered (it updates the CPU's pending-interrupt bits without a
/// lock), and a CPU that lost it never takes its pending timer interrupt
/// again: the lab machine freezes. Any later interrupt sets the bits anew,
/// so the kicks turn such a freeze into a pause of at most half a second.
struct HeartbeatLine {
    to_lab: fs::File,
    from_lab: fs::File,
    beats: u64,
}

impl HeartbeatLine {
    /// Makes fresh FIFOs at `PATH.in` and `PATH.out` and opens both ends
    /// the host uses, non-blocking (read-write, so neither open waits for
    /// QEMU).
    fn create(path: &Path) -> Result<Self> {
        let open = |suffix: &str| -> Result<fs::File> {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            let fifo = PathBuf::from(name);
            let _ = fs::remove_file(&fifo);
            let c = std::ffi::CString::new(fifo.as_os_str().as_bytes())
                .map_err(|_| LabError::io("create", &fifo, io::ErrorKind::InvalidInput.into()))?;
            // SAFETY: mkfifo reads a NUL-terminated path that outlives the
            // call.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return Err(LabError::io("create", &fifo, io::Error::last_os_error()));
            }
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
                .map_err(|e| LabError::io("open", &fifo, e))
        };
        Ok(HeartbeatLine {
            to_lab: open(".in")?,
            from_lab: open(".out")?,
            beats: 0,
        })
    }

    /// Sends one byte into the lab machine (dropped if the FIFO is full:
    /// the machine is not reading, and the next kick comes soon).
    fn kick(&mut self) {
        let _ = self.to_lab.write(b"k");
    }

    /// Takes what the lab machine sent; returns all beats so far.
    fn beats(&mut self) -> u64 {
        let mut buf = [0u8; 256];
        while let Ok(n @ 1..) = self.from_lab.read(&mut buf) {
            self.beats += n as u64;
        }
        self.beats
    }
}

/// Tracks the heartbeat: frozen once it has started beating and then
/// not beaten for `freeze_after`. Before the first beat (the lab kernel still
/// booting) only the timeout applies.
struct HeartbeatWatch {
    len: u64,
    changed: Instant,
}

impl HeartbeatWatch {
    fn new(now: Instant) -> Self {
        HeartbeatWatch {
            len: 0,
            changed: now,
        }
    }

    /// Feeds the file's current length; returns how long it has been
    /// silent once that exceeds `limit`.
    fn check(&mut self, len: u64, now: Instant, limit: Duration) -> Option<Duration> {
        if len != self.len {
            self.len = len;
            self.changed = now;
            return None;
        }
        let silent = now.saturating_duration_since(self.changed);
        (self.len > 0 && silent >= limit).then_some(silent)
    }
}

/// Starts QEMU, copies its stdout to `console` live, forwards its stderr
/// (minus harmless warnings) to ours, and waits up to the timeout, or until
/// the lab machine's heartbeat stops.
fn run_qemu(
    cmd: &mut Command,
    qemu: &Path,
    mut watch: Watch,
    console: &mut (dyn Write + Send),
) -> Result<(ExitStatus, Duration, Vec<String>)> {
    let timeout = watch.timeout;
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            LabError::QemuMissing {
                qemu: qemu.to_path_buf(),
            }
        } else {
            LabError::QemuSpawn {
                qemu: qemu.to_path_buf(),
                source,
            }
        }
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut guard = ChildGuard {
        child,
        reaped: false,
    };

    std::thread::scope(|scope| {
        let copier = stdout.map(|out| scope.spawn(move || copy_live(out, console)));
        let errors = stderr.map(|err| scope.spawn(move || forward_stderr(err)));
        let deadline = start + timeout;
        let mut beat = HeartbeatWatch::new(start);
        let mut next_beat_check = start;
        let waited = loop {
            match guard.child.try_wait() {
                Ok(Some(status)) => {
                    guard.reaped = true;
                    break Ok(status);
                }
                Ok(None) if Instant::now() >= deadline => break Err(LabError::Timeout { timeout }),
                Ok(None)
                    if watch
                        .stop
                        .as_ref()
                        .is_some_and(|s| s.load(Ordering::SeqCst)) =>
                {
                    break Err(LabError::Interrupted)
                }
                Ok(None) => {
                    let now = Instant::now();
                    if now >= next_beat_check {
                        next_beat_check = now + KICK_EVERY;
                        watch.heartbeat.kick();
                        let beats = watch.heartbeat.beats();
                        if let Some(silent) = beat.check(beats, now, watch.freeze_after) {
                            break Err(LabError::Frozen { silent });
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => break Err(LabError::io("wait for", qemu, e)),
            }
        };
        let elapsed = start.elapsed();
        // On errors QEMU still runs: stop it so its pipes close and the
        // copying threads finish.
        guard.kill();
        if let Some(copier) = copier {
            let _ = copier.join();
        }
        let tail = errors.and_then(|h| h.join().ok()).unwrap_or_default();
        waited.map(|status| (status, elapsed, tail))
    })
}

/// Copies QEMU's stdout (the guest console) to `console`, flushing after
/// every read so output appears as the guest produces it.
fn copy_live(mut from: impl Read, console: &mut (dyn Write + Send)) {
    let mut buf = [0u8; 4096];
    let mut filter = ConsoleFilter::default();
    let mut out = Vec::with_capacity(buf.len());
    let mut console_ok = true;
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.clear();
                filter.feed(&buf[..n], &mut out);
                // Keep draining the pipe even if the console went away, so
                // QEMU never blocks on a full pipe.
                if console_ok && !out.is_empty() {
                    console_ok = console
                        .write_all(&out)
                        .and_then(|_| console.flush())
                        .is_ok();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    out.clear();
    filter.finish(&mut out);
    if console_ok && !out.is_empty() {
        let _ = console.write_all(&out).and_then(|_| console.flush());
    }
}

/// Drops the kernel's own `[ 2.85] reboot: Power down` line, which every
/// lab run ends with and which says nothing about the program.
///
/// Lines starting with `[` (kernel messages) are held until complete so
/// they can be recognised; everything else passes through at once.
#[derive(Default)]
struct ConsoleFilter {
    /// Whether the last byte passed on was inside a line (not a newline).
    mid_line: bool,
    /// A kernel-message-looking line being collected.
    held: Vec<u8>,
    /// Whether `held` is in use.
    holding: bool,
}

impl ConsoleFilter {
    /// Longest line held back; longer ones cannot be the power-off message.
    const MAX_HELD: usize = 160;

    fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        for &b in data {
            if self.holding {
                self.held.push(b);
                if b == b'\n' {
                    if !is_power_off_line(&self.held) {
                        out.extend_from_slice(&self.held);
                    }
                    self.held.clear();
                    self.holding = false;
                    self.mid_line = false;
                } else if self.held.len() > Self::MAX_HELD {
                    out.append(&mut self.held);
                    self.holding = false;
                    self.mid_line = true;
                }
                continue;
            }
            if !self.mid_line && b == b'[' {
                self.holding = true;
                self.held.push(b);
                continue;
            }
            out.push(b);
            self.mid_line = b != b'\n';
        }
    }

    /// Emits a held partial line at the end of the stream, unless it is the
    /// power-off message cut short of its newline.
    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.holding && !is_power_off_line(&self.held) {
            out.append(&mut self.held);
        }
        self.held.clear();
        self.holding = false;
    }
}

/// `[ <seconds>] reboot: Power down` with optional CR/LF.
fn is_power_off_line(line: &[u8]) -> bool {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\r', '\n']);
    let Some(rest) = text.strip_prefix('[') else {
        return false;
    };
    let Some((stamp, message)) = rest.split_once(']') else {
        return false;
    };
    let stamp = stamp.trim();
    !stamp.is_empty()
        && stamp.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && message.trim() == "reboot: Power down"
}

/// Forwards QEMU's stderr to ours and returns its last lines.
fn forward_stderr(from: impl Read) -> Vec<String> {
    let mut tail: Vec<String> = Vec::new();
    let mut reader = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        if text.contains(HARMLESS_QEMU_WARNING) {
            continue;
        }
        let _ = io::stderr().write_all(&line);
        if tail.len() == STDERR_TAIL_LINES {
            tail.remove(0);
        }
        tail.push(text.trim_end().to_string());
    }
    tail
}

/// Builds the outer initramfs at `path` and returns its size in bytes.
fn build_outer_initramfs(
    path: &Path,
    kernel: &DebianKernel,
    busybox: &Path,
    exe: &Path,
    programs: &[InputFile],
    plan: &ArgPlan,
    randomize_addresses: bool,
) -> Result<u64> {
    let modules = kvm_modules(kernel)?;
    let libraries = shared_libraries(exe)?;
    let applets = busybox_applets(busybox)?;

    let file = fs::File::create(path).map_err(|e| LabError::io("create", path, e))?;
    let mut cpio = Builder::new(BufWriter::new(file));
    // What the lab itself put at each guest path, to decide what an input
    // landing on the same path means.
    let mut taken: HashMap<PathBuf, Occupant> = HashMap::new();

    for dir in [
        "dev", "proc", "sys", "run", "root", "bin", "sbin", "usr/bin", "usr/sbin",
    ] {
        cpio.add_dir(dir, 0o755)?;
    }
    cpio.add_dir("tmp", 0o1777)?;
    cpio.add_char_device("dev/console", 5, 1, 0o600)?;
    cpio.add_file_from_host("bin/busybox", busybox, 0o755)?;
    taken.insert(PathBuf::from("/bin/busybox"), Occupant::Command);
    for applet in &applets {
        let link = Path::new("/bin").join(applet);
        if !cpio.contains(&link) {
            cpio.add_symlink(&link, "busybox")?;
            taken.insert(link, Occupant::Command);
        }
    }
    cpio.add_file_from_host(GUEST_EXE, exe, 0o755)?;
    taken.insert(PathBuf::from(GUEST_EXE), Occupant::HostFile(host_key(exe)));
    if let Some(link) = exe_alias(exe) {
        cpio.add_symlink(&link, GUEST_EXE)?;
        taken.insert(link, Occupant::Fixed("the link that starts the program"));
    }
    for lib in &libraries {
        if !cpio.contains(lib) {
            cpio.add_file_from_host(lib, lib, 0o755)?;
            taken.insert(lib.clone(), Occupant::HostFile(host_key(lib)));
        }
    }
    for module in &modules {
        cpio.add_file_bytes(&module.guest, &module.contents, 0o644)?;
        taken.insert(module.guest.clone(), Occupant::Fixed("a kernel module"));
    }
    add_programs(&mut cpio, &mut taken, programs)?;
    for input in &plan.inputs {
        let conflict = |existing: String| LabError::InputConflict {
            host: input.host.clone(),
            guest: input.guest.clone(),
            existing,
        };
        match taken.get(&input.guest) {
            None => {}
            // The same file is already there (e.g. a library named as input).
            Some(Occupant::HostFile(key)) if *key == host_key(&input.host) => continue,
            // A command such as /bin/sh named as an argument: the guest's
            // busybox provides it, and the host binary might not run there.
            Some(Occupant::Command) => continue,
            Some(Occupant::HostFile(key)) => return Err(conflict(key.clone())),
            Some(Occupant::Fixed(what)) => return Err(conflict((*what).to_string())),
        }
        match cpio.add_file_from_host(&input.guest, &input.host, 0o644 | exec_bits(&input.host)) {
            Ok(()) => {}
            Err(LabError::CpioName { .. }) => {
                return Err(conflict("a file or directory the lab itself needs".into()))
            }
            Err(e) => return Err(e),
        }
        taken.insert(
            input.guest.clone(),
            Occupant::HostFile(host_key(&input.host)),
        );
    }
    let start = exe_alias(exe).unwrap_or_else(|| PathBuf::from(GUEST_EXE));
    let init = outer_init_script(kernel, &modules, plan, &start, randomize_addresses);
    cpio.add_file_bytes("init", &init, 0o755)?;
    let len = cpio.len();
    let mut writer = cpio.finish()?;
    writer.flush().map_err(|e| LabError::io("write", path, e))?;
    Ok(len)
}

/// Adds the extra programs at their guest paths, each with the shared
/// libraries and dynamic loader it needs (the ones already in the archive
/// are shared).
fn add_programs<W: Write>(
    cpio: &mut Builder<W>,
    taken: &mut HashMap<PathBuf, Occupant>,
    programs: &[InputFile],
) -> Result<()> {
    for program in programs {
        let key = host_key(&program.host);
        match taken.get(&program.guest) {
            None => {}
            Some(Occupant::HostFile(existing)) if *existing == key => {}
            Some(occupant) => {
                let existing = match occupant {
                    Occupant::Command => "busybox or one of its command links".to_string(),
                    Occupant::HostFile(existing) => existing.clone(),
                    Occupant::Fixed(what) => (*what).to_string(),
                };
                return Err(LabError::InputConflict {
                    host: program.host.clone(),
                    guest: program.guest.clone(),
                    existing,
                });
            }
        }
        if !cpio.contains(&program.guest) {
            match cpio.add_file_from_host(&program.guest, &program.host, 0o755) {
                Ok(()) => {}
                Err(LabError::CpioName { .. }) => {
                    return Err(LabError::InputConflict {
                        host: program.host.clone(),
                        guest: program.guest.clone(),
                        existing: "a file or directory the lab itself needs".into(),
                    })
                }
                Err(e) => return Err(e),
            }
            taken.insert(program.guest.clone(), Occupant::HostFile(key));
        }
        for lib in shared_libraries(&program.host)? {
            if !cpio.contains(&lib) {
                cpio.add_file_from_host(&lib, &lib, 0o755)?;
                taken.insert(lib.clone(), Occupant::HostFile(host_key(&lib)));
            }
        }
    }
    Ok(())
}

/// What the lab put at a guest path.
enum Occupant {
    /// Busybox or one of its applet links.
    Command,
    /// A copy of a host file, identified by [`host_key`].
    HostFile(String),
    /// Something generated, described for error messages.
    Fixed(&'static str),
}

/// Where the program is started from when its file name on the host is not
/// `bootscope`: a link with that name, so the program sees the same
/// `argv[0]` as on the host (multi-call programs such as busybox depend on
/// it).
fn exe_alias(exe: &Path) -> Option<PathBuf> {
    let name = exe.file_name()?;
    if name == OsStr::new("bootscope") {
        return None;
    }
    Some(Path::new(EXE_ALIAS_DIR).join(name))
}

/// Identifies a host file for duplicate detection (its canonical path).
fn host_key(host: &Path) -> String {
    fs::canonicalize(host)
        .unwrap_or_else(|_| host.to_path_buf())
        .display()
        .to_string()
}

/// Keeps the execute bits of an input (a script or program passed as an
/// argument must stay runnable).
fn exec_bits(host: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(host)
        .map(|m| m.permissions().mode() & 0o111)
        .unwrap_or(0)
}

/// The applet names busybox was built with (`busybox --list`).
fn busybox_applets(busybox: &Path) -> Result<Vec<String>> {
    let out = Command::new(busybox)
        .arg("--list")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::HostTool {
            program: "busybox --list".into(),
            subject: busybox.to_path_buf(),
            reason: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(LabError::HostTool {
            program: "busybox --list".into(),
            subject: busybox.to_path_buf(),
            reason: format!("it exited with {}", out.status),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_string)
        .collect())
}

/// The shared libraries (and dynamic loader) `exe` needs, at the paths the
/// host's dynamic loader resolves them to. Static programs need none.
fn shared_libraries(exe: &Path) -> Result<Vec<PathBuf>> {
    let interp = match elf::linkage(exe)? {
        Linkage::Static | Linkage::NotElf64 => return Ok(Vec::new()),
        Linkage::Dynamic(interp) => interp,
    };
    let out = Command::new("ldd")
        .arg(exe)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::HostTool {
            program: "ldd".into(),
            subject: exe.to_path_buf(),
            reason: format!("{e}; install it with `apt-get install libc-bin`"),
        })?;
    if !out.status.success() {
        return Err(LabError::HostTool {
            program: "ldd".into(),
            subject: exe.to_path_buf(),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let mut libs = parse_ldd(&String::from_utf8_lossy(&out.stdout)).map_err(|library| {
        LabError::LibraryNotFound {
            exe: exe.to_path_buf(),
            library,
        }
    })?;
    if !libs.contains(&interp) {
        libs.push(interp);
    }
    Ok(libs)
}

/// Parses `ldd` output. Lines look like `libc.so.6 => /lib/.../libc.so.6
/// (0x...)`, `/lib64/ld-linux-x86-64.so.2 (0x...)` or `linux-vdso.so.1
/// (0x...)` (provided by the kernel, skipped). A `not found` library is
/// returned as the error.
fn parse_ldd(text: &str) -> std::result::Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let target = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(name.trim().to_string());
                }
                rest
            }
            None => line,
        };
        let path = target.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            let path = PathBuf::from(path);
            if !libs.contains(&path) {
                libs.push(path);
            }
        }
    }
    Ok(libs)
}

/// A kernel module ready to be put into the archive.
struct Module {
    /// Module name as in `lsmod` (`kvm_amd`).
    name: String,
    /// Path in the guest, always an uncompressed `.ko`.
    guest: PathBuf,
    /// Uncompressed contents.
    contents: Vec<u8>,
}

/// The KVM modules in load order (dependencies first), decompressed.
fn kvm_modules(kernel: &DebianKernel) -> Result<Vec<Module>> {
    let dep_path = kernel.modules_dir.join("modules.dep");
    let text = fs::read_to_string(&dep_path).map_err(|e| LabError::ModuleDep {
        module: ROOT_MODULE.into(),
        modules_dep: dep_path.clone(),
        reason: e.to_string(),
    })?;
    let order = module_load_order(&text, ROOT_MODULE).map_err(|reason| LabError::ModuleDep {
        module: ROOT_MODULE.into(),
        modules_dep: dep_path.clone(),
        reason,
    })?;
    let guest_dir = Path::new("/lib/modules").join(&kernel.version);
    order
        .into_iter()
        .map(|rel| {
            let host = kernel.modules_dir.join(&rel);
            let contents = read_module(&host)?;
            let plain = strip_compression_suffix(&rel);
            Ok(Module {
                name: module_name(&rel),
                guest: guest_dir.join(plain),
                contents,
            })
        })
        .collect()
}

/// Resolves `root` (a module name) and its dependencies from the text of
/// `modules.dep`, returning module paths relative to the module tree in an
/// order `insmod` can load them.
fn module_load_order(modules_dep: &str, root: &str) -> std::result::Result<Vec<String>, String> {
    let mut deps: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut by_name: HashMap<String, &str> = HashMap::new();
    for line in modules_dep.lines() {
        let Some((module, rest)) = line.split_once(':') else {
            continue;
        };
        let module = module.trim();
        deps.insert(module, rest.split_whitespace().collect());
        by_name.insert(module_name(module), module);
    }
    let start = by_name
        .get(&module_name(root))
        .copied()
        .ok_or_else(|| format!("it lists no module named {root}"))?;
    let mut order = Vec::new();
    let mut done = HashSet::new();
    let mut in_progress = HashSet::new();
    fn visit<'a>(
        module: &'a str,
        deps: &HashMap<&'a str, Vec<&'a str>>,
        done: &mut HashSet<&'a str>,
        in_progress: &mut HashSet<&'a str>,
        order: &mut Vec<String>,
    ) -> std::result::Result<(), String> {
        if done.contains(module) {
            return Ok(());
        }
        if !in_progress.insert(module) {
            return Err(format!("its dependencies of {module} form a cycle"));
        }
        let list = deps
            .get(module)
            .ok_or_else(|| format!("{module} is needed but has no entry of its own"))?;
        // modprobe loads the listed dependencies from last to first.
        for dep in list.iter().rev() {
            visit(dep, deps, done, in_progress, order)?;
        }
        in_progress.remove(module);
        done.insert(module);
        order.push(module.to_string());
        Ok(())
    }
    visit(start, &deps, &mut done, &mut in_progress, &mut order)?;
    Ok(order)
}

/// `kernel/arch/x86/kvm/kvm-amd.ko.xz` -> `kvm_amd`.
fn module_name(path_or_name: &str) -> String {
    let base = path_or_name.rsplit('/').next().unwrap_or(path_or_name);
    let base = base.split(".ko").next().unwrap_or(base);
    base.replace('-', "_")
}

fn strip_compression_suffix(rel: &str) -> &str {
    for suffix in [".xz", ".zst", ".gz"] {
        if let Some(stripped) = rel.strip_suffix(suffix) {
            return stripped;
        }
    }
    rel
}

/// Reads a module, decompressing `.ko.xz`, `.ko.zst` and `.ko.gz` with the
/// host's tools: busybox `insmod` cannot be relied on to do it.
fn read_module(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let (tool, package) = if name.ends_with(".ko.xz") {
        ("xz", "xz-utils")
    } else if name.ends_with(".ko.zst") {
        ("zstd", "zstd")
    } else if name.ends_with(".ko.gz") {
        ("gzip", "gzip")
    } else {
        return fs::read(path).map_err(|e| LabError::io("read", path, e));
    };
    let fail = |reason: String| LabError::ModuleDecompress {
        path: path.to_path_buf(),
        tool,
        package,
        reason,
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(out.stdout)
}

/// The outer guest's `/init`.
///
/// It prepares the file systems bootscope uses (proc, sysfs, devtmpfs,
/// tracefs, debugfs, bpffs), loads the KVM modules, reports whether
/// `/dev/kvm` appeared, runs the program with stdin from `/dev/null` (the
/// console has no input), sends the results over ttyS1 and powers off.
fn outer_init_script(
    kernel: &DebianKernel,
    modules: &[Module],
    plan: &ArgPlan,
    exe: &Path,
    randomize_addresses: bool,
) -> Vec<u8> {
    let q = |s: &OsStr| util::shell_quote(s);
    let mut s: Vec<u8> = Vec::new();
    s.extend_from_slice(
        br#"#!/bin/sh
# Outer guest of the bootscope lab (generated): nested KVM under emulation.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing || echo "lab: warning: cannot mount tracefs"
mount -t debugfs debugfs /sys/kernel/debug || echo "lab: warning: cannot mount debugfs"
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
# Plain newlines on the console, as on a host terminal or pipe.
stty -onlcr 2>/dev/null
# Heartbeat on the third serial port: the host counts the lab machine as
# frozen when it stops (LabConfig::freeze_after).
# The host's kicks arrive on the same port (see HeartbeatLine): not echoed.
if [ -c /dev/ttyS2 ]; then
	stty raw -echo </dev/ttyS2 2>/dev/null
	( while :; do printf . || exit; sleep 2; done ) >/dev/ttyS2 2>/dev/null </dev/null &
fi
"#,
    );
    for module in modules {
        s.extend_from_slice(b"insmod ");
        s.extend_from_slice(&q(module.guest.as_os_str()));
        s.extend_from_slice(
            format!(
                " || echo \"lab: warning: cannot load kernel module {}\"\n",
                module.name
            )
            .as_bytes(),
        );
    }
    s.extend_from_slice(
        br#"if [ -c /dev/kvm ]; then
	lab_kvm=1
	echo "lab: nested KVM ready (kvm_amd npt=$(cat /sys/module/kvm_amd/parameters/npt 2>/dev/null))"
	lab_nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
	if [ "$lab_nodes" -gt 1 ]; then
		for n in /sys/devices/system/node/node[0-9]*; do
			lab_shape="$lab_shape ${n##*/}: cpus $(cat $n/cpulist), $(( $(sed -n 's/.*MemTotal: *\([0-9]*\).*/\1/p' $n/meminfo) / 1024 )) MiB;"
		done
		echo "lab: $lab_nodes NUMA nodes:$lab_shape distances $(cat /sys/devices/system/node/node0/distance)"
	fi
else
	lab_kvm=0
"#,
    );
    s.extend_from_slice(
        format!(
            "\techo \"lab: /dev/kvm is missing: kvm_amd did not load in the lab guest (kernel {}), so nested KVM is unavailable; its kernel messages follow\"\n",
            kernel.version
        )
        .as_bytes(),
    );
    s.extend_from_slice(b"\tdmesg | grep -i -e kvm -e svm -e ccp | tail -n 20\nfi\n");
    if !randomize_addresses {
        // LabConfig::randomize_addresses says why.
        s.extend_from_slice(
            b"echo 0 >/proc/sys/kernel/randomize_va_space || echo \"lab: warning: cannot turn address space randomization off\"\n",
        );
    }
    s.extend_from_slice(b"mkdir -p ");
    s.extend_from_slice(&q(plan.cwd.as_os_str()));
    s.extend_from_slice(b" && cd ");
    s.extend_from_slice(&q(plan.cwd.as_os_str()));
    s.push(b'\n');
    // As named, from the program's directory: `mkdir -p a/../b` also makes
    // the `a` that the program's path passes through.
    for dir in &plan.output_dirs {
        s.extend_from_slice(b"mkdir -p -- ");
        s.extend_from_slice(&q(dir.as_os_str()));
        s.push(b'\n');
    }
    s.extend_from_slice(&q(exe.as_os_str()));
    for arg in &plan.args {
        s.push(b' ');
        s.extend_from_slice(&q(arg));
    }
    s.extend_from_slice(b" </dev/null\nlab_code=$?\ncd /\n");
    s.extend_from_slice(transport::GUEST_SEND_FUNCTION.as_bytes());
    s.extend_from_slice(
        b"if [ -c /dev/ttyS1 ]; then\n\texec 3<>/dev/ttyS1\n\tstty raw -echo <&3\n\t{\n",
    );
    s.extend_from_slice(
        format!(
            "\t\techo '{}'\n\t\techo \"KVM $lab_kvm\"\n",
            transport::HEADER
        )
        .as_bytes(),
    );
    for (index, output) in plan.outputs.iter().enumerate() {
        s.extend_from_slice(format!("\t\tlab_send {index} ").as_bytes());
        s.extend_from_slice(&q(output.as_os_str()));
        s.push(b'\n');
    }
    s.extend_from_slice(
        br#"		echo "EXIT $lab_code"
	} >&3
	# The last close waits until the UART has sent everything.
	exec 3>&-
else
	echo "lab: /dev/ttyS1 is missing, so the results cannot be sent back"
fi
poweroff -f
"#,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert_eq!(
            parse_ldd("\tlibbpf.so.1 => not found\n").unwrap_err(),
            "libbpf.so.1"
        );
    }

    #[test]
    fn module_order_from_modules_dep() {
        let dep = "kernel/arch/x86/kvm/kvm.ko.xz: kernel/virt/lib/irqbypass.ko.xz\n\
                   kernel/arch/x86/kvm/kvm-amd.ko.xz: kernel/drivers/crypto/ccp/ccp.ko.xz kernel/arch/x86/kvm/kvm.ko.xz kernel/virt/lib/irqbypass.ko.xz\n\
                   kernel/drivers/crypto/ccp/ccp.ko.xz:\n\
                   kernel/virt/lib/irqbypass.ko.xz:\n";
        assert_eq!(
            module_load_order(dep, "kvm_amd").unwrap(),
            vec![
                "kernel/virt/lib/irqbypass.ko.xz",
                "kernel/arch/x86/kvm/kvm.ko.xz",
                "kernel/drivers/crypto/ccp/ccp.ko.xz",
                "kernel/arch/x86/kvm/kvm-amd.ko.xz",
            ]
        );
        assert!(module_load_order(dep, "kvm_intel").is_err());
        let broken = "a.ko: b.ko\n";
        assert!(module_load_order(broken, "a").unwrap_err().contains("b.ko"));
        let cycle = "a.ko: b.ko\nb.ko: a.ko\n";
        assert!(module_load_order(cycle, "a").unwrap_err().contains("cycle"));
        assert_eq!(module_name("kernel/arch/x86/kvm/kvm-amd.ko.zst"), "kvm_amd");
        assert_eq!(strip_compression_suffix("x/kvm.ko.zst"), "x/kvm.ko");
        assert_eq!(strip_compression_suffix("x/kvm.ko"), "x/kvm.ko");
    }

    #[test]
    fn host_modules_resolve() {
        let Ok(kernel) = guest::find_debian_kernel() else {
            println!("SKIP host_modules_resolve: no Debian kernel with kvm-amd installed");
            return;
        };
        let modules = kvm_modules(&kernel).unwrap();
        let names: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names.last(), Some(&"kvm_amd"));
        let pos = |n: &str| names.iter().position(|m| *m == n).unwrap();
        assert!(pos("kvm") < pos("kvm_amd"));
        assert!(pos("irqbypass") < pos("kvm"));
        for m in &modules {
            assert!(
                m.contents.starts_with(b"\x7fELF"),
                "{} is not an ELF object",
                m.name
            );
            assert!(m.guest.to_string_lossy().ends_with(".ko"));
        }
    }

    #[test]
    fn arguments_are_planned() {
        let dir = TempDir::new("plan-test").unwrap();
        let cwd = dir.path().join("work");
        fs::create_dir_all(cwd.join("images")).unwrap();
        fs::write(cwd.join("images/vmlinux"), b"k").unwrap();
        fs::write(cwd.join("run"), b"not a subcommand").unwrap();
        fs::write(cwd.join("old.json"), b"an earlier output").unwrap();
        fs::write(dir.path().join("up.img"), b"i").unwrap();
        let abs_initrd = dir.path().join("up.img");
        let args = os(&[
            "run",
            "--kernel",
            "images/vmlinux",
            "--initrd=../up.img",
            "images/../../up.img",
            "--serial",
            "tty",
            "-serial",
            "stdio",
            "--output",
            "x",
            "-o",
            "old.json",
            "--timeline=t.json",
        ]);
        let mut all = args.clone();
        all.push(abs_initrd.clone().into_os_string());
        let outputs = [
            PathBuf::from("out/../t.json"),
            PathBuf::from("/abs/o.txt"),
            PathBuf::from("old.json"),
        ];
        let plan = plan_arguments(&all, &outputs, &[], &cwd).unwrap();
        // Only the path through a directory and back is replaced; nothing
        // else is touched, output-like flags included.
        let canonical_img = fs::canonicalize(&abs_initrd).unwrap();
        let mut want = args.clone();
        want[4] = canonical_img.clone().into_os_string();
        want.push(abs_initrd.clone().into_os_string());
        assert_eq!(plan.args, want);
        assert_eq!(
            plan.outputs,
            vec![
                cwd.join("t.json"),
                PathBuf::from("/abs/o.txt"),
                cwd.join("old.json")
            ]
        );
        assert_eq!(
            plan.output_dirs,
            vec![PathBuf::from("out/.."), PathBuf::from("/abs")]
        );
        let guests: Vec<&Path> = plan.inputs.iter().map(|i| i.guest.as_path()).collect();
        assert!(guests.contains(&cwd.join("run").as_path()));
        assert!(guests.contains(&cwd.join("images/vmlinux").as_path()));
        assert!(guests.contains(&canonical_img.as_path()));
        // An earlier copy of an output is not carried in.
        assert!(!guests.contains(&cwd.join("old.json").as_path()));
        assert_eq!(plan.inputs.len(), 3, "{:?}", plan.inputs);
        assert_eq!(plan.cwd, cwd);

        let err = plan_arguments(&[], &[], &[cwd.join("missing")], &cwd).unwrap_err();
        assert!(matches!(err, LabError::InputMissing { .. }), "{err}");
        assert!(err.is_bad_input());
        let extra = plan_arguments(&[], &[], &[PathBuf::from("images/vmlinux")], &cwd).unwrap();
        assert_eq!(extra.inputs[0].guest, cwd.join("images/vmlinux"));
        // /proc files are the guest kernel's business.
        let proc_arg = plan_arguments(&os(&["/proc/self/status"]), &[], &[], &cwd).unwrap();
        assert!(proc_arg.inputs.is_empty());
    }

    #[test]
    fn bad_outputs_are_refused() {
        let dir = TempDir::new("plan-output-test").unwrap();
        let cwd = dir.path().join("work");
        fs::create_dir_all(cwd.join("data/sub")).unwrap();
        fs::write(cwd.join("data/sub/f"), b"f").unwrap();
        let refused = |outputs: &[&str], inputs: &[&str], what: &str| {
            let outputs: Vec<PathBuf> = outputs.iter().map(PathBuf::from).collect();
            let inputs: Vec<PathBuf> = inputs.iter().map(PathBuf::from).collect();
            let err = plan_arguments(&[], &outputs, &inputs, &cwd).unwrap_err();
            assert!(matches!(err, LabError::BadOutput { .. }), "{err}");
            assert!(err.is_bad_input());
            let text = err.to_string();
            assert!(text.contains(what), "{text}");
            text
        };
        let text = refused(&["p.json", "./p.json"], &[], "named twice");
        assert!(text.contains("p.json"), "{text}");
        refused(&["data"], &[], "is a directory");
        refused(&["new/"], &[], "is a directory");
        refused(&[""], &[], "empty path");
        let text = refused(
            &["data/sub/p.json"],
            &["data"],
            "lies in the directory data",
        );
        assert!(
            text.contains(&*cwd.join("data/sub/p.json").to_string_lossy()),
            "{text}"
        );
        refused(
            &[&*cwd.join("data/x").to_string_lossy()],
            &["data/sub/.."],
            "lies in",
        );
        // Beside a carried-in directory, or carried in as a file: fine.
        let ok = plan_arguments(
            &[],
            &[PathBuf::from("data2/p.json"), PathBuf::from("data/sub/f")],
            &[PathBuf::from("data/sub/f")],
            &cwd,
        )
        .unwrap();
        assert_eq!(ok.inputs.len(), 1);
        assert_eq!(ok.outputs.len(), 2);
    }

    #[test]
    fn directory_inputs_are_carried_recursively() {
        let dir = TempDir::new("plan-dir-test").unwrap();
        let cwd = dir.path().join("work");
        let data = cwd.join("data");
        fs::create_dir_all(data.join("sub/deeper")).unwrap();
        fs::write(data.join("a.rom"), b"a").unwrap();
        fs::write(data.join("sub/b.bin"), b"b").unwrap();
        fs::write(data.join("sub/deeper/c"), b"c").unwrap();
        let outside = dir.path().join("outside.bin");
        fs::write(&outside, b"o").unwrap();
        use std::os::unix::fs::symlink;
        symlink("a.rom", data.join("alias.rom")).unwrap();
        symlink(&outside, data.join("sub/outside.bin")).unwrap();
        symlink("missing", data.join("dangling")).unwrap();
        // Links back up the tree must not make the walk loop.
        symlink("..", data.join("sub/up")).unwrap();
        symlink(".", data.join("self")).unwrap();

        let plan = plan_arguments(&[], &[], &[PathBuf::from("data")], &cwd).unwrap();
        let got: Vec<(PathBuf, PathBuf)> = plan
            .inputs
            .iter()
            .map(|i| (i.host.clone(), i.guest.clone()))
            .collect();
        let host = |rel: &str| cwd.join("data").join(rel);
        let guest = |rel: &str| cwd.join("data").join(rel);
        assert_eq!(
            got,
            vec![
                (host("a.rom"), guest("a.rom")),
                (host("alias.rom"), guest("alias.rom")),
                (host("sub/b.bin"), guest("sub/b.bin")),
                (host("sub/deeper/c"), guest("sub/deeper/c")),
                (host("sub/outside.bin"), guest("sub/outside.bin")),
            ]
        );
        assert!(plan.args.is_empty() && plan.outputs.is_empty());

        // An absolute directory keeps its path; a file inside it named as an
        // argument too is carried once.
        let abs = plan_arguments(
            &[data.join("a.rom").into_os_string()],
            &[],
            std::slice::from_ref(&data),
            &cwd,
        )
        .unwrap();
        assert_eq!(abs.inputs.len(), 5);
        assert_eq!(abs.inputs[0].guest, data.join("a.rom"));
        // Directories under /proc, /sys and /dev stay the guest kernel's.
        let sys = plan_arguments(&[], &[], &[PathBuf::from("/sys/kernel")], &cwd).unwrap();
        assert!(sys.inputs.is_empty());
    }

    #[test]
    fn extra_programs_are_planned() {
        let dir = TempDir::new("plan-programs-test").unwrap();
        let cwd = dir.path().to_path_buf();
        fs::create_dir_all(cwd.join("bin")).unwrap();
        fs::write(cwd.join("bin/tool"), b"#!/bin/sh\n").unwrap();
        let planned = plan_programs(
            &[
                PathBuf::from("bin/tool"),
                cwd.join("bin/tool"),
                PathBuf::from("/bin/busybox"),
            ],
            &cwd,
        );
        if !Path::new("/bin/busybox").is_file() {
            assert!(matches!(planned, Err(LabError::ProgramMissing { .. })));
            return;
        }
        let planned = planned.unwrap();
        assert_eq!(
            planned,
            vec![
                InputFile {
                    host: cwd.join("bin/tool"),
                    guest: cwd.join("bin/tool"),
                },
                InputFile {
                    host: PathBuf::from("/bin/busybox"),
                    guest: PathBuf::from("/bin/busybox"),
                },
            ]
        );
        for bad in [cwd.join("missing"), cwd.join("bin")] {
            let err = plan_programs(std::slice::from_ref(&bad), &cwd).unwrap_err();
            assert!(matches!(err, LabError::ProgramMissing { .. }), "{err}");
            assert!(err.to_string().contains(&*bad.to_string_lossy()), "{err}");
        }
    }

    #[test]
    fn extra_programs_bring_their_libraries() {
        // The test binary itself is dynamically linked on Debian.
        let me = std::env::current_exe().unwrap();
        let programs = plan_programs(std::slice::from_ref(&me), Path::new("/")).unwrap();
        let mut cpio = Builder::new(Vec::new());
        let mut taken = HashMap::new();
        add_programs(&mut cpio, &mut taken, &programs).unwrap();
        // Adding the same program again is harmless.
        add_programs(&mut cpio, &mut taken, &programs).unwrap();
        let bytes = cpio.finish().unwrap();
        let entries = crate::cpio::read_entries(&bytes).unwrap();
        let find = |p: &Path| {
            let rel = p.strip_prefix("/").unwrap();
            entries.iter().find(|e| e.name == rel)
        };
        let exe = find(&me).expect("the program is in the archive");
        assert_eq!(exe.mode, 0o100755);
        assert_eq!(exe.data.len() as u64, fs::metadata(&me).unwrap().len());
        let Linkage::Dynamic(interp) = elf::linkage(&me).unwrap() else {
            panic!("the test binary should be dynamically linked");
        };
        assert!(find(&interp).is_some(), "the dynamic loader is missing");
        for lib in shared_libraries(&me).unwrap() {
            assert!(find(&lib).is_some(), "{} is missing", lib.display());
        }

        // A path the lab already uses for something else is a conflict.
        let mut cpio = Builder::new(Vec::new());
        let mut taken = HashMap::new();
        taken.insert(me.clone(), Occupant::Fixed("a kernel module"));
        let err = add_programs(&mut cpio, &mut taken, &programs).unwrap_err();
        assert!(matches!(err, LabError::InputConflict { .. }), "{err}");
        assert!(err.to_string().contains("a kernel module"), "{err}");
    }

    #[test]
    fn init_script_is_complete() {
        let kernel = DebianKernel {
            version: "6.1.0-56-amd64".into(),
            vmlinuz: "/boot/vmlinuz-6.1.0-56-amd64".into(),
            modules_dir: "/lib/modules/6.1.0-56-amd64".into(),
        };
        let modules = vec![Module {
            name: "kvm".into(),
            guest: "/lib/modules/6.1.0-56-amd64/kernel/arch/x86/kvm/kvm.ko".into(),
            contents: Vec::new(),
        }];
        let plan = ArgPlan {
            args: os(&["sh", "-c", "echo 'hi'", "--output", "/o/out file"]),
            inputs: Vec::new(),
            outputs: vec![PathBuf::from("/o/out file")],
            output_dirs: vec![PathBuf::from("/o"), PathBuf::from("-rel/..")],
            cwd: PathBuf::from("/home/u"),
        };
        let exe = Path::new(GUEST_EXE);
        let script =
            String::from_utf8(outer_init_script(&kernel, &modules, &plan, exe, false)).unwrap();
        assert!(script.contains("insmod '/lib/modules/6.1.0-56-amd64/kernel/arch/x86/kvm/kvm.ko'"));
        assert!(script.contains("mount -t tracefs tracefs /sys/kernel/tracing"));
        assert!(script.contains("lab: nested KVM ready (kvm_amd npt="));
        let cd = script.find("cd '/home/u'\n").unwrap();
        let mkdir = script.find("mkdir -p -- '/o'\n").unwrap();
        assert!(
            cd < mkdir,
            "output directories are made from the program's directory"
        );
        assert!(script.contains("mkdir -p -- '-rel/..'\n"));
        assert!(script.contains(
            "'/bin/bootscope' 'sh' '-c' 'echo '\\''hi'\\''' '--output' '/o/out file' </dev/null\n"
        ));
        assert!(script.contains("lab_send 0 '/o/out file'\n"));
        assert!(script.contains("echo \"EXIT $lab_code\""));
        assert!(script.trim_end().ends_with("poweroff -f"));
        assert!(script.contains(">/dev/ttyS2"), "the heartbeat");
        assert!(script.contains("echo 0 >/proc/sys/kernel/randomize_va_space"));
        let kept =
            String::from_utf8(outer_init_script(&kernel, &modules, &plan, exe, true)).unwrap();
        assert!(!kept.contains("randomize_va_space"));
    }

    #[test]
    fn power_off_line_is_filtered() {
        let input: &[u8] = b"lab: ready\n[    1.5] kvm: something\r\nout [x]\n[    2.863273] reboot: Power down\r\n";
        // Any split into chunks gives the same result.
        for split in 0..input.len() {
            let mut f = ConsoleFilter::default();
            let mut out = Vec::new();
            f.feed(&input[..split], &mut out);
            f.feed(&input[split..], &mut out);
            f.finish(&mut out);
            assert_eq!(
                out, b"lab: ready\n[    1.5] kvm: something\r\nout [x]\n",
                "split {split}"
            );
        }
        let mut f = ConsoleFilter::default();
        let mut out = Vec::new();
        f.feed(b"[    6.2] reboot: Power down", &mut out);
        f.finish(&mut out);
        assert!(out.is_empty());
        let mut f = ConsoleFilter::default();
        f.feed(b"[partial", &mut out);
        f.finish(&mut out);
        assert_eq!(out, b"[partial");
    }

    #[test]
    fn cpus_become_qemu_arguments() {
        let args = |cpus| -> Vec<String> {
            let mut cfg = LabConfig::new("/b", vec![]);
            cfg.cpus = cpus;
            let cmd = qemu_command(
                Path::new("qemu"),
                &MachineShape::of(&cfg),
                Path::new("/k"),
                Path::new("/i"),
                Path::new("/s"),
                Path::new("/h"),
            );
            cmd.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let after = |a: &[String], flag: &str| {
            let i = a.iter().position(|x| x == flag).unwrap();
            a[i + 1].clone()
        };
        let one = args(1);
        assert_eq!(after(&one, "-smp"), "1");
        assert_eq!(after(&one, "-accel"), "tcg");
        let two = args(2);
        assert_eq!(after(&two, "-smp"), "2");
        assert_eq!(after(&two, "-accel"), "tcg,thread=multi");
        assert!(!two.iter().any(|a| a == "-numa"));
    }

    #[test]
    fn numa_nodes_split_cpus_and_memory_evenly() {
        let shape = |nodes, cpus, mib| {
            let mut cfg = LabConfig::new("/b", vec![]);
            cfg.numa_nodes = nodes;
            cfg.cpus = cpus;
            cfg.memory_mib = mib;
            (
                check_numa(&cfg).map_err(|e| e.to_string()),
                MachineShape::of(&cfg),
            )
        };
        let (ok, two) = shape(2, 2, 2048);
        ok.unwrap();
        assert_eq!(two.nodes, vec![(0, 1, 1024), (1, 1, 1024)]);
        assert_eq!(
            two.numa_args(),
            [
                "-object",
                "memory-backend-ram,id=ram-node0,size=1024M",
                "-numa",
                "node,nodeid=0,cpus=0-0,memdev=ram-node0",
                "-object",
                "memory-backend-ram,id=ram-node1,size=1024M",
                "-numa",
                "node,nodeid=1,cpus=1-1,memdev=ram-node1",
                "-numa",
                "dist,src=0,dst=1,val=20",
                "-numa",
                "dist,src=1,dst=0,val=20",
            ]
        );
        // Uneven: the first nodes take the remainder; sizes add up.
        let (ok, three) = shape(3, 5, 1025);
        ok.unwrap();
        assert_eq!(three.nodes, vec![(0, 2, 342), (2, 2, 342), (4, 1, 341)]);
        assert_eq!(
            three
                .numa_args()
                .iter()
                .filter(|a| a.starts_with("dist"))
                .count(),
            6
        );
        // One node: no NUMA options at all.
        assert!(shape(1, 2, 2048).1.numa_args().is_empty());
        // Bad input, each with what to do.
        let err = |nodes, cpus, mib| shape(nodes, cpus, mib).0.unwrap_err();
        assert!(
            err(0, 1, 2048).contains("at least 1"),
            "{}",
            err(0, 1, 2048)
        );
        assert!(err(2, 1, 2048).contains("--cpus 2"), "{}", err(2, 1, 2048));
        assert!(
            err(4, 4, 512).contains("--memory 1024M"),
            "{}",
            err(4, 4, 512)
        );
    }

    #[test]
    fn heartbeat_silence_counts_only_after_the_first_beat() {
        let t0 = Instant::now();
        let limit = Duration::from_secs(60);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut w = HeartbeatWatch::new(t0);
        // The lab kernel boots: no beat yet, however long.
        assert_eq!(w.check(0, at(100), limit), None);
        // Beating: never silent long.
        assert_eq!(w.check(1, at(101), limit), None);
        assert_eq!(w.check(1, at(150), limit), None);
        assert_eq!(w.check(2, at(152), limit), None);
        // Silent for the limit: frozen, and for how long.
        assert_eq!(w.check(2, at(211), limit), None);
        assert_eq!(w.check(2, at(212), limit), Some(Duration::from_secs(60)));
        // A beat resets it.
        assert_eq!(w.check(3, at(213), limit), None);
        assert_eq!(w.check(3, at(272), limit), None);
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

    #[test]
    fn chardev_paths_escape_commas() {
        assert_eq!(
            chardev_file_option("lab0", Path::new("/tmp/a,b/out.bin")),
            OsString::from("file,id=lab0,path=/tmp/a,,b/out.bin")
        );
    }
}
