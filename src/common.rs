//! What every command shares: the error type and exit statuses, the
//! command line for reports, the seconds flag parser, the output checks
//! and writer, the default kernel command line and the default guest.
//! A leaf of the crate: it uses no command module.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

/// Exit status for bad input.
pub const EXIT_USAGE: i32 = 2;
/// Exit status for a failed run.
pub const EXIT_FAILURE: i32 = 1;

/// The default kernel command line: serial console, reset through the
/// keyboard controller, no PCI probing (there is no PCI bus), and no port 0x80
/// I/O delays (they would pollute the boot-marker port).
pub const DEFAULT_CMDLINE: &str =
    "console=ttyS0 reboot=k panic=-1 pci=off io_delay=none i8042.noaux i8042.nomux i8042.dumbkbd";

/// A CLI error: the message and the exit status it maps to.
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            code: EXIT_FAILURE,
            error: e.into(),
        }
    }
}

/// A bad-input error: exit status 2.
pub(crate) fn usage(error: anyhow::Error) -> Failure {
    Failure {
        code: EXIT_USAGE,
        error,
    }
}

/// This process's command line for reports: `std::env::args` would panic on
/// an argument that is not UTF-8 (such as a file name), so each argument is
/// converted lossily, for display only.
pub fn command_line() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The longest time any duration flag accepts: 30 days.
pub const MAX_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// Parses `--workload-unit` (a clap value parser): a systemd unit name.
pub fn parse_unit_name(s: &str) -> Result<String, String> {
    bootscope_vmm::units::check_unit_name(s)?;
    Ok(s.to_string())
}

/// Parses a duration flag given in seconds (a clap value parser): a
/// positive, finite number no larger than [`MAX_SECONDS`]. Huge values
/// (1e30, 2^64) are refused here instead of overflowing a `Duration`.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds (for example 2.5)"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err("must be a positive number of seconds".into());
    }
    if v > MAX_SECONDS {
        return Err(format!(
            "{s} seconds is too long: give at most {MAX_SECONDS} (30 days)"
        ));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("{s} seconds: {e}"))
}

/// Checks that `p`, given as `flag`, can be written (its directory takes a
/// new file, it is not a directory, its links are safe to follow), before
/// anything long starts. The rules are [`bootscope_model::output`]'s; a
/// memory device that takes no data (`/dev/full`) is refused too
/// ([`check_memory_device`]).
pub fn check_output(flag: &str, p: &Path) -> Result<()> {
    bootscope_model::output::check_writable(p).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
    check_memory_device(p).map_err(|e| anyhow::anyhow!("{flag}: cannot write {}: {e}", p.display()))
}

/// The kernel's memory devices (character major 1) whose open and empty
/// write do nothing else: null, zero, full, random, urandom.
const MEMORY_DEVICES: [u64; 5] = [3, 5, 7, 8, 9];

/// Gives `p`, where it is one of the kernel's [memory
/// devices](MEMORY_DEVICES), an empty write, which `/dev/full` refuses
/// (`ENOSPC`): a command writing there fails before its work, not after.
/// Other devices are not opened here (an open may do something: a
/// watchdog is armed by it), nor FIFOs (their reader would see the end).
fn check_memory_device(p: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let Ok(m) = std::fs::metadata(p) else {
        return Ok(());
    };
    let rdev = m.rdev();
    if !m.file_type().is_char_device()
        || libc::major(rdev) != 1
        || !MEMORY_DEVICES.contains(&u64::from(libc::minor(rdev)))
    {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(p)?;
    f.write(&[]).map(drop)
}

/// Refuses an output that is one of the command's inputs (each a flag and
/// a path): writing it would destroy what the command reads (`check
/// --baseline b.json -o b.json`). The same file is the same device and
/// inode, however the paths are spelt (links followed); a path where no
/// file is yet cannot be an input, and a character device (a terminal as
/// both standard input and output) is not one file.
pub fn check_not_inputs(outputs: &[(&str, &Path)], inputs: &[(&str, &Path)]) -> Result<()> {
    let inputs: Vec<_> = inputs
        .iter()
        .filter_map(|(flag, p)| Some((*flag, *p, file_identity(p)?)))
        .collect();
    for (oflag, o) in outputs {
        let Some(id) = file_identity(o) else { continue };
        if let Some((iflag, i, _)) = inputs.iter().find(|(_, _, i)| *i == id) {
            anyhow::bail!(
                "{oflag} {} is the input {iflag} {}: writing it would destroy what is read; \
                 give the output another name",
                o.display(),
                i.display()
            );
        }
    }
    Ok(())
}

/// The device and inode of the file at `p` (links followed); None where
/// there is none, or it is a character device.
fn file_identity(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(p).ok()?;
    (!m.file_type().is_char_device()).then(|| (m.dev(), m.ino()))
}

/// [`check_output`] for each of one command's outputs, and that no two of
/// them name the same file.
pub fn check_outputs(outputs: &[(&str, &Path)]) -> Result<()> {
    for (flag, p) in outputs {
        check_output(flag, p)?;
    }
    bootscope_model::output::check_distinct(outputs).map_err(anyhow::Error::new)
}

/// [`check_outputs`], and that none of the outputs is one of the
/// command's `inputs` ([`check_not_inputs`]).
pub fn check_outputs_of(outputs: &[(&str, &Path)], inputs: &[(&str, &Path)]) -> Result<()> {
    check_outputs(outputs)?;
    check_not_inputs(outputs, inputs)
}

/// Writes an output file by the rules of [`bootscope_model::output`]:
/// atomically (no reader sees half of it) where it is a regular file, in
/// place where it is a device or FIFO.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<()> {
    bootscope_model::output::write_file(path, bytes).map_err(anyhow::Error::new)
}

/// The default guest: Debian's kernel and the project's busybox initramfs.
pub(crate) fn default_guest() -> Result<(PathBuf, PathBuf)> {
    default_guest_at(None)
}

/// The default guest with its initramfs written to `initrd`, or to
/// bootscope's own cache where `None`.
pub(crate) fn default_guest_at(initrd: Option<PathBuf>) -> Result<(PathBuf, PathBuf)> {
    let kernel = bootscope_lab::guest::find_debian_kernel().context("no default guest kernel")?;
    let initrd = match initrd {
        Some(path) => path,
        // bootscope's own cache, private and checked (no shared fallback):
        // the initramfs written there is booted as root.
        None => bootscope_model::cache::cache_dir("")?.join("default-guest.cpio"),
    };
    bootscope_lab::guest::build_default_initramfs(&initrd)
        .context("cannot build the default guest initramfs")?;
    Ok((kernel.vmlinuz, initrd))
}

/// Whether the `bootscope` executable `exe` (`bench` and `advise --prove`
/// run it) profiles itself in `run` by default (it then
/// has `--no-profile`, and `--output` for the profile).
pub(crate) fn run_profiles_itself(exe: &Path) -> bool {
    std::process::Command::new(exe)
        .args(["run", "--help"])
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("--no-profile"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_seconds("600").unwrap(), Duration::from_secs(600));
        for bad in [
            "0",
            "-1",
            "nan",
            "inf",
            "1e30",
            "18446744073709551616",
            "x",
            "",
        ] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        assert!(parse_seconds("2592001").unwrap_err().contains("too long"));
    }

    #[test]
    fn an_output_may_not_be_an_input() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.json");
        std::fs::write(&input, "{}").unwrap();
        let same = d.path().join(".").join("in.json");
        let e = check_not_inputs(&[("-o", &same)], &[("IN", &input)]).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("-o") && e.contains("IN") && e.contains("destroy"),
            "{e}"
        );
        // A path where nothing is yet is no input, even if an input is
        // named so too (it would fail to be read, not be overwritten).
        let new = d.path().join("new.json");
        assert!(check_not_inputs(&[("-o", &new)], &[("IN", &new)]).is_ok());
        // A character device is not one file (a terminal both ways).
        let null = Path::new("/dev/null");
        assert!(check_not_inputs(&[("-o", null)], &[("IN", null)]).is_ok());
        assert!(check_not_inputs(&[("-o", &input)], &[]).is_ok());
    }

    #[test]
    fn memory_devices_that_take_nothing_are_refused() {
        assert!(check_memory_device(Path::new("/dev/null")).is_ok());
        let e = check_memory_device(Path::new("/dev/full")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        let e = check_output("--output", Path::new("/dev/full")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--output: cannot write /dev/full"),
            "{e}"
        );
    }
}
