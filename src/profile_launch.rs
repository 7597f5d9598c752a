//! What `profile` launches and records about the VMM: with `--initcalls`
//! the command rewritten so that its guest's kernel command line carries
//! the initcall trace parameters (`run --initcalls`' trace method,
//! `bootscope_vmm::kernel_log::traced`) in the VMM's own options (QEMU
//! `-append`, Cloud Hypervisor `--cmdline`, Firecracker `boot_args` in a
//! private copy of its config; `bootscope run` gets `--initcalls`), and
//! which VMM ran for the profile's `target.vmm` (`bootscope_model::vmm`).

use anyhow::{anyhow, bail, Result};
use bootscope_model::vmm::{self, VmmKind, VmmRun};

/// The command to launch, and what the profile records about it.
pub struct Launch {
    pub command: Vec<String>,
    pub vmm: VmmRun,
    /// Firecracker's rewritten config: kept until the profile ends.
    _config: Option<bootscope_model::vmm::firecracker::PrivateConfig>,
}

/// The trace method's edit of a kernel command line.
fn trace(cmdline: &str) -> Result<String, String> {
    bootscope_vmm::kernel_log::traced::cmdline_with_trace(cmdline).map_err(|e| e.to_string())
}

/// `command` as `profile` launches it: as given, or with `initcalls` its
/// kernel command line carrying the trace parameters. Bad input (a VMM
/// bootscope does not know, QEMU without `-kernel`, an unreadable
/// Firecracker config, a command line the trace method cannot use) is an
/// error naming the input and what to add.
pub fn prepare(command: &[String], initcalls: bool) -> Result<Launch> {
    if !initcalls {
        return Ok(Launch {
            command: command.to_vec(),
            vmm: VmmRun::of_command(command, Vec::new()),
            _config: None,
        });
    }
    let (kind, at) = vmm::locate(command);
    if kind == VmmKind::Bootscope {
        return bootscope_run(command, at);
    }
    let before = vmm::kernel_cmdline_of(command)
        .map_err(|e| anyhow!("--initcalls: {e}"))?
        .unwrap_or_default();
    let r = vmm::with_kernel_cmdline(command, trace).map_err(|e| anyhow!("--initcalls: {e}"))?;
    let added = vmm::added_words(&before, &r.cmdline);
    let words: Vec<std::ffi::OsString> = r.argv.iter().map(Into::into).collect();
    eprintln!(
        "bootscope: --initcalls: {} gets {} on {}: launching {}",
        kind.name(),
        added.join(" "),
        kind.cmdline_place(),
        bootscope_model::text::printable(&bootscope_bench::runner::shell_words(&words))
    );
    Ok(Launch {
        vmm: VmmRun {
            kind,
            cmdline: Some(r.cmdline),
            added,
        },
        command: r.argv,
        _config: r.config,
    })
}

/// `bootscope run` traces its own initcalls: `--initcalls` added after
/// `run` unless given.
fn bootscope_run(command: &[String], at: usize) -> Result<Launch> {
    let Some(run) = command[at..]
        .iter()
        .position(|a| a == "run")
        .map(|i| at + i)
    else {
        bail!("--initcalls: {} is bootscope but not `bootscope run`: give the run command whose guest to trace", command.join(" "));
    };
    let mut out = command.to_vec();
    if !out[run..].iter().any(|a| a == "--initcalls") {
        out.insert(run + 1, "--initcalls".into());
        eprintln!("bootscope: --initcalls: bootscope run gets --initcalls");
    }
    Ok(Launch {
        vmm: VmmRun::of_command(&out, Vec::new()),
        command: out,
        _config: None,
    })
}

/// The guest kernel a running VMM was started with (its `-kernel` or
/// `--kernel` in `/proc/PID/cmdline`, Firecracker's `kernel_image_path`
/// in its `--config-file`), a relative path taken from the VMM's working
/// directory (`/proc/PID/cwd`).
pub fn pid_kernel(pid: u32) -> Option<std::path::PathBuf> {
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
    let base = cwd.clone().unwrap_or_default();
    let kernel = crate::guest_symbols::command_kernel_in(&pid_command(pid), &base)?;
    if kernel.is_absolute() {
        return Some(kernel);
    }
    Some(cwd?.join(kernel))
}

/// The guest kernel's command line in a running VMM's options (QEMU's
/// `-append`, Cloud Hypervisor's `--cmdline`, ...).
pub fn pid_kernel_cmdline(pid: u32) -> Option<String> {
    bootscope_model::vmm::kernel_cmdline_of(&pid_command(pid))
        .ok()
        .flatten()
}

/// A running process's command line (`/proc/PID/cmdline`).
fn pid_command(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What `--pid` records about the VMM it follows: its kind, and the
/// kernel command line its command names (not a Firecracker config, whose
/// path is the process's own). Read from `/proc/PID/cmdline`, so while the
/// process runs: once it has ended there is nothing to read.
pub fn pid_vmm(pid: u32) -> VmmRun {
    let command = pid_command(pid);
    let kind = vmm::kind_of(&command);
    if kind == VmmKind::Firecracker {
        return VmmRun {
            kind,
            ..VmmRun::default()
        };
    }
    VmmRun::of_command(&command, Vec::new())
}

/// The profile's `target.vmm`: the launched command's, or `--pid`'s,
/// read while the process ran ([`pid_vmm`]).
pub fn record(launch: Option<&Launch>, pid_vmm: Option<VmmRun>) -> VmmRun {
    match launch {
        Some(l) => l.vmm.clone(),
        None => pid_vmm.unwrap_or_default(),
    }
}

/// `--pid` with `--initcalls`: a running VMM's kernel command line cannot
/// change; the message names what to add to it, in that VMM's terms.
pub fn pid_initcalls(pid: u32) -> anyhow::Error {
    let command = pid_command(pid);
    let kind = vmm::kind_of(&command);
    if kind == VmmKind::Bootscope {
        return anyhow!("--initcalls with --pid {pid}: the guest of a running VMM has booted with the command line it had; restart it as `bootscope run --initcalls ...` (or profile it with `bootscope profile --initcalls -- bootscope run ...`)");
    }
    let before = match vmm::kernel_cmdline_of(&command) {
        Ok(c) if kind != VmmKind::Firecracker => c.unwrap_or_default(),
        _ => String::new(),
    };
    let what = match trace(&before) {
        Ok(after) => format!(
            "add `{}` to {}",
            vmm::added_words(&before, &after).join(" "),
            kind.cmdline_place()
        ),
        Err(e) => e,
    };
    anyhow!(
        "--initcalls with --pid {pid} ({}): the guest has booted with the kernel command line it had; {what} and start it again, or launch it under `bootscope profile --initcalls -- COMMAND`, which adds them",
        kind.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--pid`'s VMM is read from the running process: this test's own
    /// (no VMM, so `Other` with its command), and for a pid that has
    /// ended, nothing; the profile records what was read at its start.
    #[test]
    fn a_pid_is_known_by_its_command_while_it_runs() {
        let me = pid_vmm(std::process::id());
        assert_eq!(me.kind, VmmKind::Other);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(pid_command(pid), Vec::<String>::new());
        let read_before = VmmRun {
            kind: VmmKind::Firecracker,
            ..VmmRun::default()
        };
        assert_eq!(record(None, Some(read_before.clone())), read_before);
        assert_eq!(record(None, None).kind, VmmKind::Other);
    }

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn commands_rewritten_for_the_trace() {
        let l = prepare(&words("qemu-system-x86_64 -kernel k -append quiet"), true).unwrap();
        assert_eq!(l.vmm.kind, VmmKind::Qemu);
        assert_eq!(
            l.command[4],
            "quiet trace_buf_size=512K trace_event=initcall:* trace_clock=perf"
        );
        assert_eq!(l.vmm.added.len(), 3);
        let l = prepare(&words("bootscope run --kernel k"), true).unwrap();
        assert_eq!(l.command, words("bootscope run --initcalls --kernel k"));
        let l = prepare(&words("bootscope run --initcalls"), true).unwrap();
        assert_eq!(l.command, words("bootscope run --initcalls"));
        let l = prepare(&words("true"), false).unwrap();
        assert_eq!(l.vmm.kind, VmmKind::Other);
        for bad in [
            "true",
            "qemu-system-x86_64 -hda d.img",
            "qemu-system-x86_64 -kernel k -append tp_printk",
            "bootscope lab",
        ] {
            assert!(prepare(&words(bad), true).is_err(), "{bad}");
        }
        let e = prepare(&words("qemu-system-x86_64 -hda d.img"), true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("no -kernel"), "{e}");
    }

    #[test]
    fn a_running_vmm_is_told_what_to_add() {
        // This test process is no VMM: the parameters in general terms.
        let e = pid_initcalls(std::process::id()).to_string();
        assert!(e.contains("add `trace_buf_size=512K trace_event="), "{e}");
        assert!(e.contains("the VMM's kernel command line"), "{e}");
    }

    /// A running VMM's kernel, from its command line, a relative path
    /// taken from its working directory.
    #[test]
    fn a_running_vmms_kernel_is_found_from_its_own_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "echo up; read -r _",
                "vmm",
                "-kernel",
                "images/vmlinuz",
            ])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Its line says it runs with its own command line.
        let mut up = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut up,
        )
        .unwrap();
        assert_eq!(up, "up\n");
        let found = pid_kernel(child.id());
        drop(child.stdin.take());
        child.wait().unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(found, Some(cwd.join("images/vmlinuz")));
        // A process without one: none.
        assert_eq!(pid_kernel(std::process::id()), None);
    }
}
