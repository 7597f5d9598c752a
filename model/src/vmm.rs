//! Which VMM a command is, and that VMM's command line in its own terms:
//! where it takes the guest's kernel command line (QEMU `-append`, Cloud
//! Hypervisor `--cmdline`, Firecracker's `boot_args` in its config file)
//! and which disk images it names. `profile --initcalls` rewrites a
//! launched command with it, `advise` speaks each VMM's language by it,
//! and readers of a guest's disk find the image by it.
//!
//! * [`kind_of`], [`locate`]: the VMM behind wrappers (`sudo`, `env`,
//!   `taskset`, `numactl`).
//! * [`with_kernel_cmdline`]: the command with its kernel command line
//!   edited ([`Rewritten`]; Firecracker's config rewritten into a private
//!   copy, the user's file never written).
//! * [`kernel_cmdline_of`], [`disks::disk_images`]: what a command names.
//! * [`VmmRun`]: what a profile records about the VMM it followed.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod disks;
pub mod firecracker;
mod wrappers;

pub use disks::disk_images;

/// Which VMM a command runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmmKind {
    /// `bootscope run`: bootscope's own VMM.
    Bootscope,
    /// `qemu-system-*`, `qemu-kvm`.
    Qemu,
    /// `cloud-hypervisor`.
    CloudHypervisor,
    /// `firecracker` (release binaries are named `firecracker-vX.Y.Z-ARCH`).
    Firecracker,
    /// Anything else.
    #[default]
    Other,
}

impl VmmKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [Self; 5] = [
        Self::Bootscope,
        Self::Qemu,
        Self::CloudHypervisor,
        Self::Firecracker,
        Self::Other,
    ];

    /// The VMM's name as its users write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bootscope => "bootscope",
            Self::Qemu => "QEMU",
            Self::CloudHypervisor => "Cloud Hypervisor",
            Self::Firecracker => "Firecracker",
            Self::Other => "another VMM",
        }
    }

    /// Where this VMM takes the guest's kernel command line, in words.
    pub fn cmdline_place(self) -> &'static str {
        match self {
            Self::Bootscope => "bootscope run's --cmdline",
            Self::Qemu => "QEMU's -append",
            Self::CloudHypervisor => "Cloud Hypervisor's --cmdline",
            Self::Firecracker => {
                "boot_args of boot-source in Firecracker's --config-file (or its PUT /boot-source)"
            }
            Self::Other => "the VMM's kernel command line",
        }
    }

    /// The kind of a program by its file name.
    fn of_program(program: &str) -> Self {
        let base = Path::new(program)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(program);
        if base.starts_with("qemu-system-") || base == "qemu-kvm" {
            Self::Qemu
        } else if base.starts_with("cloud-hypervisor") {
            Self::CloudHypervisor
        } else if base.starts_with("firecracker") {
            Self::Firecracker
        } else if base == "bootscope" {
            Self::Bootscope
        } else {
            Self::Other
        }
    }
}

impl fmt::Display for VmmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The VMM a command runs and the index of its program in the command
/// (after wrappers such as `sudo -u u taskset -c 0 qemu-system-x86_64`).
/// A command that is only wrappers, or empty, is `Other` at its end.
pub fn locate<S: AsRef<str>>(argv: &[S]) -> (VmmKind, usize) {
    let at = wrappers::program_index(argv);
    let kind = argv
        .get(at)
        .map_or(VmmKind::Other, |p| VmmKind::of_program(p.as_ref()));
    (kind, at)
}

/// The VMM a command runs ([`locate`]).
pub fn kind_of<S: AsRef<str>>(argv: &[S]) -> VmmKind {
    locate(argv).0
}

/// What a profile records about the VMM it followed (`target.vmm`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmmRun {
    pub kind: VmmKind,
    /// The guest's kernel command line as the VMM was given it (after what
    /// `--initcalls` added), when its command names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// The words bootscope added to it (`profile --initcalls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
}

impl VmmRun {
    /// The record of a command as it ran: its kind and kernel command line
    /// (a Firecracker config that cannot be read leaves it out).
    pub fn of_command<S: AsRef<str>>(argv: &[S], added: Vec<String>) -> Self {
        Self {
            kind: kind_of(argv),
            cmdline: kernel_cmdline_of(argv).ok().flatten(),
            added,
        }
    }
}

/// Why a VMM command's kernel command line cannot be edited, or what it
/// names cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum VmmArgsError {
    #[error("{program} is not a VMM bootscope knows (QEMU, Cloud Hypervisor, Firecracker, bootscope run): add {params} to its guest's kernel command line yourself")]
    Unknown { program: String, params: String },
    #[error("{vmm} is given no {flag}: the guest's kernel command line then comes from its disk's boot loader, not the VMM; {hint}")]
    NoKernel {
        vmm: VmmKind,
        flag: &'static str,
        hint: String,
    },
    #[error("Cloud Hypervisor's --payload is not rewritten: give the kernel and its command line as --kernel and --cmdline")]
    Payload,
    #[error("Firecracker without --config-file takes its boot arguments through the API: add {params} to boot_args in its PUT /boot-source request")]
    ThroughApi { params: String },
    #[error("Firecracker's --config-file {}: {problem}; give a readable JSON config with a boot-source", .path.display())]
    Config { path: PathBuf, problem: String },
    #[error("bootscope run adds the trace parameters itself: give it --initcalls")]
    OwnFlag,
    #[error("the kernel command line {cmdline:?}: {why}")]
    Edit { cmdline: String, why: String },
    #[error("cannot write the private copy of Firecracker's config: {0}")]
    Write(#[source] std::io::Error),
}

/// A VMM command with its kernel command line edited.
pub struct Rewritten {
    pub kind: VmmKind,
    pub argv: Vec<String>,
    /// The kernel command line the guest is given.
    pub cmdline: String,
    /// Firecracker's rewritten config (a private temporary file the new
    /// command names): keep it until the VMM has read it.
    pub config: Option<firecracker::PrivateConfig>,
}

/// QEMU's option names: `-name` or `--name`, the value always the next
/// argument.
fn qemu_is(arg: &str, name: &str) -> bool {
    arg.strip_prefix('-')
        .map(|a| a.strip_prefix('-').unwrap_or(a))
        .is_some_and(|a| a == name)
}

/// The index of the last QEMU option of one of `names` that has a value.
fn qemu_last(args: &[String], names: &[&str]) -> Option<usize> {
    let mut i = 0;
    let mut last = None;
    while i + 1 < args.len() {
        if names.iter().any(|n| qemu_is(&args[i], n)) {
            last = Some(i);
            i += 2;
        } else {
            i += 1;
        }
    }
    last
}

/// A Cloud Hypervisor (clap) option: `--name VALUE` or `--name=VALUE`;
/// the index of the last and its value.
fn long_last<'a>(args: &'a [String], name: &str) -> Option<(usize, &'a str)> {
    crate::argv::flag_values(args, &[name]).last()
}

/// The kernel command line a VMM command gives its guest: `None` when it
/// names none (QEMU without `-append`, Firecracker through its API).
pub fn kernel_cmdline_of<S: AsRef<str>>(argv: &[S]) -> Result<Option<String>, VmmArgsError> {
    let (kind, at) = locate(argv);
    let args: Vec<String> = argv[at.min(argv.len())..]
        .iter()
        .map(|s| s.as_ref().to_string())
        .collect();
    Ok(match kind {
        VmmKind::Qemu => qemu_last(&args, &["append"]).map(|i| args[i + 1].clone()),
        VmmKind::CloudHypervisor | VmmKind::Bootscope => {
            long_last(&args, "--cmdline").map(|(_, v)| v.to_string())
        }
        VmmKind::Firecracker => match firecracker::config_path(&args) {
            Some(path) => firecracker::read_config(&path)?
                .pointer("/boot-source/boot_args")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            None => None,
        },
        VmmKind::Other => None,
    })
}

/// `argv` with its kernel command line replaced by `edit` of it (an empty
/// string when the command names none but boots a kernel): QEMU's last
/// `-append` (or a new one after `-kernel`), Cloud Hypervisor's
/// `--cmdline` (or a new one after `--kernel`), Firecracker's `boot_args`
/// in a private copy of its `--config-file`. Refused: a VMM bootscope does
/// not know, one booting no kernel of its own (the boot loader on its disk
/// has the command line), Firecracker configured through its API only.
pub fn with_kernel_cmdline<S: AsRef<str>, E: fmt::Display>(
    argv: &[S],
    edit: impl FnOnce(&str) -> Result<String, E>,
) -> Result<Rewritten, VmmArgsError> {
    let (kind, at) = locate(argv);
    let mut out: Vec<String> = argv.iter().map(|s| s.as_ref().to_string()).collect();
    let args: Vec<String> = out[at.min(out.len())..].to_vec();
    let program = args.first().cloned().unwrap_or_default();
    match kind {
        VmmKind::Qemu => {
            if let Some(i) = qemu_last(&args, &["append"]) {
                let cmdline = apply(&args[i + 1], edit)?;
                out[at + i + 1].clone_from(&cmdline);
                return Ok(rewritten(kind, out, cmdline, None));
            }
            let Some(k) = qemu_last(&args, &["kernel"]) else {
                return Err(VmmArgsError::NoKernel {
                    vmm: kind,
                    flag: "-kernel",
                    hint: "give -kernel and -append, or add the parameters in the boot loader's configuration".into(),
                });
            };
            let cmdline = apply("", edit)?;
            let pos = at + k + 2;
            out.splice(pos..pos, ["-append".to_string(), cmdline.clone()]);
            Ok(rewritten(kind, out, cmdline, None))
        }
        VmmKind::CloudHypervisor => {
            if let Some((i, old)) = long_last(&args, "--cmdline") {
                let cmdline = apply(old, edit)?;
                if args[i] == "--cmdline" {
                    out[at + i + 1].clone_from(&cmdline);
                } else {
                    out[at + i] = format!("--cmdline={cmdline}");
                }
                return Ok(rewritten(kind, out, cmdline, None));
            }
            let Some((k, _)) = long_last(&args, "--kernel") else {
                if long_last(&args, "--payload").is_some() {
                    return Err(VmmArgsError::Payload);
                }
                return Err(VmmArgsError::NoKernel {
                    vmm: kind,
                    flag: "--kernel",
                    hint: "give --kernel and --cmdline, or add the parameters in the boot loader's configuration".into(),
                });
            };
            let cmdline = apply("", edit)?;
            let pos = at + k + if args[k] == "--kernel" { 2 } else { 1 };
            out.splice(pos..pos, ["--cmdline".to_string(), cmdline.clone()]);
            Ok(rewritten(kind, out, cmdline, None))
        }
        VmmKind::Firecracker => {
            let Some((i, path)) = firecracker::config_arg(&args) else {
                let params = apply("", edit)?;
                return Err(VmmArgsError::ThroughApi { params });
            };
            let mut config = firecracker::read_config(&path)?;
            let old = config
                .pointer("/boot-source/boot_args")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            let cmdline = apply(&old, edit)?;
            let temp = firecracker::write_private(&path, &mut config, &cmdline)?;
            let new_path = temp.path().display().to_string();
            if args[i] == "--config-file" {
                out[at + i + 1] = new_path;
            } else {
                out[at + i] = format!("--config-file={new_path}");
            }
            Ok(rewritten(kind, out, cmdline, Some(temp)))
        }
        VmmKind::Bootscope => Err(VmmArgsError::OwnFlag),
        VmmKind::Other => {
            let params = apply("", edit)?;
            Err(VmmArgsError::Unknown { program, params })
        }
    }
}

/// `edit` of a kernel command line, its refusal in words.
fn apply<E: fmt::Display>(
    old: &str,
    edit: impl FnOnce(&str) -> Result<String, E>,
) -> Result<String, VmmArgsError> {
    edit(old).map_err(|e| VmmArgsError::Edit {
        cmdline: old.to_string(),
        why: e.to_string(),
    })
}

fn rewritten(
    kind: VmmKind,
    argv: Vec<String>,
    cmdline: String,
    config: Option<firecracker::PrivateConfig>,
) -> Rewritten {
    Rewritten {
        kind,
        argv,
        cmdline,
        config,
    }
}

/// The words of `after` that `before` does not have, in order: what an
/// edit of a kernel command line added.
pub fn added_words(before: &str, after: &str) -> Vec<String> {
    let had: Vec<&str> = before.split_whitespace().collect();
    after
        .split_whitespace()
        .filter(|w| !had.contains(w))
        .map(str::to_string)
        .collect()
}

/// QEMU's machine type in a command (`-M microvm,rtc=off`,
/// `-machine type=q35`): `None` without `-M`/`-machine` (QEMU's default,
/// `pc`).
pub fn qemu_machine<S: AsRef<str>>(argv: &[S]) -> Option<String> {
    let (_, at) = locate(argv);
    let args: Vec<String> = argv[at.min(argv.len())..]
        .iter()
        .map(|s| s.as_ref().to_string())
        .collect();
    let i = qemu_last(&args, &["M", "machine"])?;
    let value = &args[i + 1];
    value
        .split(',')
        .find_map(|p| match p.split_once('=') {
            None => Some(p.to_string()),
            Some(("type", t)) => Some(t.to_string()),
            Some(_) => None,
        })
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests;
