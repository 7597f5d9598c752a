//! The lab: real nested KVM inside QEMU's emulator.
//!
//! Some development and CI machines expose a `/dev/kvm` that cannot run a
//! stock kernel at useful speed (for example a PVM backend), and none of them
//! give access to the hardware exit tracepoints bootscope is built around.
//! QEMU's software emulator (TCG) emulates AMD SVM with nested paging, so a
//! Debian kernel booted under it can load `kvm_amd` and offer a real KVM.
//! The lab packages bootscope, its shared libraries, its input files and the
//! KVM modules into an initramfs, boots that "outer" guest under TCG, runs
//! bootscope there and brings its exit code and output files back.
//!
//! * [`cpio`] writes the `newc` archives the kernel unpacks as initramfs.
//! * [`guest`] finds the Debian kernel and builds the project's default
//!   (busybox) guest initramfs.
//! * [`outer`] builds the outer guest and runs the lab.
//! * [`restore_guest`] builds the restore guest, which checks itself across
//!   a snapshot and restore, and reads what it printed.
//! * [`debian`] builds a Debian guest with systemd as a raw disk image
//!   (`bootscope guest build debian`).
//!
//! Everything here is slowed down by emulation: the lab proves correctness
//! and compares VMMs side by side within one run; it does not measure
//! absolute boot times.

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub mod cpio;
pub mod debian;
mod elf;
pub mod guest;
pub mod outer;
pub mod restore_guest;
mod transport;
mod util;

pub use guest::{build_default_initramfs, find_debian_kernel, DebianKernel};
pub use outer::{check_prerequisites, run_lab, run_lab_with_console, LabConfig, LabOutcome};

/// Result type of this crate.
pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// Everything that can go wrong while preparing or running the lab.
///
/// Each message names the file or program involved and, where the user can
/// do something about it, says what.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A file system operation on a named path failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "read" or "create directory".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// An output file cannot be written (the message names it and why).
    #[error(transparent)]
    Output(#[from] bootscope_model::output::OutputError),

    /// A name cannot be stored in a cpio archive.
    #[error("cannot store {name:?} in the cpio archive: {reason}")]
    CpioName {
        /// The offending archive path.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A file is too large for the `newc` format (32-bit sizes).
    #[error("cannot store {} in the cpio archive: it is {size} bytes, the newc format holds at most 4 GiB - 1", path.display())]
    CpioTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },

    /// A host file changed size while it was copied into an archive.
    #[error("{} changed size while it was being archived (expected {expected} bytes, read {actual}); make sure nothing writes to it during the lab run", path.display())]
    FileChanged {
        /// The file.
        path: PathBuf,
        /// The size from its metadata.
        expected: u64,
        /// The number of bytes actually read.
        actual: u64,
    },

    /// A cpio archive could not be parsed back.
    #[error("malformed cpio archive at byte {offset}: {reason}")]
    CpioMalformed {
        /// Byte offset of the problem.
        offset: usize,
        /// What was wrong.
        reason: String,
    },

    /// No usable Debian kernel was found.
    #[error("no Debian kernel with the kvm-amd module was found: {details}; install one with `apt-get install linux-image-amd64`")]
    KernelNotFound {
        /// What was searched and what was missing.
        details: String,
    },

    /// The kernel's module dependency list is missing or lacks a module.
    #[error("cannot resolve kernel module {module} from {}: {reason}; reinstall the kernel (`apt-get install --reinstall linux-image-amd64`) or run `depmod` for it", modules_dep.display())]
    ModuleDep {
        /// The module looked up.
        module: String,
        /// The modules.dep file consulted.
        modules_dep: PathBuf,
        /// What was wrong.
        reason: String,
    },

    /// A compressed kernel module could not be decompressed.
    #[error("cannot decompress kernel module {} with `{tool}`: {reason}; install it with `apt-get install {package}`", path.display())]
    ModuleDecompress {
        /// The compressed module.
        path: PathBuf,
        /// The tool that was run.
        tool: &'static str,
        /// The Debian package providing the tool.
        package: &'static str,
        /// What went wrong.
        reason: String,
    },

    /// Static busybox is not installed.
    #[error("static busybox not found at {}; install it with `apt-get install busybox-static`", path.display())]
    BusyboxMissing {
        /// Where it was looked for.
        path: PathBuf,
    },

    /// The installed busybox is dynamically linked.
    #[error("{} is not a statically linked busybox, so it cannot run in a guest without its libraries; install `busybox-static` (`apt-get install busybox-static`)", path.display())]
    BusyboxNotStatic {
        /// The busybox binary.
        path: PathBuf,
    },

    /// Running a host helper program failed.
    #[error("running `{program}` on {} failed: {reason}", subject.display())]
    HostTool {
        /// The program, e.g. "ldd".
        program: String,
        /// The file it was run on.
        subject: PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// The program to run inside the lab does not exist.
    #[error("the program to run in the lab, {}, is not an existing file: {reason}", path.display())]
    ExeMissing {
        /// The configured executable.
        path: PathBuf,
        /// Why it is unusable.
        reason: String,
    },

    /// A shared library of the program could not be found on the host.
    #[error("{} needs the shared library {library}, which the dynamic loader cannot find on this host; install it or rebuild the program", exe.display())]
    LibraryNotFound {
        /// The program.
        exe: PathBuf,
        /// The library name ldd reported.
        library: String,
    },

    /// An extra program to carry into the lab is unusable.
    #[error("the extra lab program {} cannot be carried into the lab: {reason}", path.display())]
    ProgramMissing {
        /// The configured program.
        path: PathBuf,
        /// Why it is unusable.
        reason: String,
    },

    /// An extra input file does not exist.
    #[error("lab input {} does not exist or is neither a regular file nor a directory; check the path given to --input", path.display())]
    InputMissing {
        /// The configured input.
        path: PathBuf,
    },

    /// An output file to bring back is unusable.
    #[error("lab output {} {reason}", path.display())]
    BadOutput {
        /// The output as named.
        path: PathBuf,
        /// What is wrong with it and what to do.
        reason: String,
    },

    /// Two different host files would land on the same guest path.
    #[error("lab input {} would land on guest path {}, which already holds {}; rename or move the input", host.display(), guest.display(), existing)]
    InputConflict {
        /// The input's host path.
        host: PathBuf,
        /// The guest path both want.
        guest: PathBuf,
        /// What already occupies it.
        existing: String,
    },

    /// The lab configuration is unusable.
    #[error("invalid lab configuration: {0}")]
    InvalidConfig(String),

    /// The outer initramfs would not fit in the lab guest's memory.
    #[error("the lab guest's initramfs is {archive_mib} MiB, too large for {memory_mib} MiB of guest memory (it needs about twice its size plus 256 MiB); raise the memory with `--memory`")]
    NotEnoughMemory {
        /// Size of the outer initramfs.
        archive_mib: u64,
        /// Configured guest memory.
        memory_mib: u64,
    },

    /// QEMU is not installed.
    #[error("QEMU ({}) was not found; install it with `apt-get install qemu-system-x86`", qemu.display())]
    QemuMissing {
        /// The configured QEMU binary.
        qemu: PathBuf,
    },

    /// QEMU could not be started.
    #[error("cannot start QEMU ({}): {source}", qemu.display())]
    QemuSpawn {
        /// The configured QEMU binary.
        qemu: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// QEMU exited before the guest reported a result.
    #[error("QEMU exited with {status} before the lab guest reported its result{stderr}")]
    QemuFailed {
        /// QEMU's exit status.
        status: String,
        /// The last lines QEMU printed on stderr, prefixed with a separator.
        stderr: String,
    },

    /// The run was stopped from outside (SIGINT or SIGTERM).
    #[error("the lab run was interrupted and QEMU was stopped; outputs of the run inside come back only from a complete run, so none were written")]
    Interrupted,

    /// The run took longer than allowed.
    #[error("the lab run did not finish within {} s and QEMU was killed; the console output above shows how far the guest got (allow more time with a longer timeout)", timeout.as_secs_f64())]
    Timeout {
        /// The configured timeout.
        timeout: Duration,
    },

    /// The lab machine stopped running anything: its heartbeat (a byte
    /// its init writes every 2 s) stopped while QEMU kept running.
    #[error("the lab machine froze: no heartbeat from it for {} s while the emulator kept running, so QEMU was killed (the console output above shows how far it got). QEMU's emulator can lose the wake-up of an interrupt that arrives while a nested guest is being entered, after which the lab machine never takes its timer interrupt again; the lab sends it an interrupt every half second to undo that, but this time it stayed frozen. Run it again (`--retries N` does that by itself), or use a newer QEMU", silent.as_secs())]
    Frozen {
        /// How long the heartbeat had been silent.
        silent: Duration,
    },

    /// The guest's result stream was cut short.
    #[error("the lab guest's result stream ({}) is incomplete: {reason}; the guest probably crashed or was stopped early (see the console output above)", path.display())]
    StreamTruncated {
        /// The stream file on the host.
        path: PathBuf,
        /// What was missing.
        reason: String,
    },

    /// The guest's result stream is malformed.
    #[error("the lab guest's result stream ({}) is corrupt at line {line}: {reason}", path.display())]
    StreamCorrupt {
        /// The stream file on the host.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: String,
    },

    /// An output file arrived damaged.
    #[error("output file {} arrived damaged from the lab guest: {reason}; it was not written", path.display())]
    OutputDamaged {
        /// The output's host path.
        path: PathBuf,
        /// Size or checksum mismatch details.
        reason: String,
    },
}

impl LabError {
    /// Whether the error is in what the caller asked for (a missing or
    /// conflicting input, program or output, an invalid setting), found
    /// before the lab machine starts, rather than a failure of the host or
    /// the run.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            LabError::Output(_)
                | LabError::ExeMissing { .. }
                | LabError::ProgramMissing { .. }
                | LabError::InputMissing { .. }
                | LabError::InputConflict { .. }
                | LabError::BadOutput { .. }
                | LabError::InvalidConfig(_)
        )
    }

    /// Shorthand for [`LabError::Io`].
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LabError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
