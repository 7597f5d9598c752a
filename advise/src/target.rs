//! The boot `--prove` measures, and how a fix changes it: `bootscope run`
//! arguments (the kernel command line in `--cmdline`, VMM options
//! appended) or another VMM's command line as a template with
//! `{cmdline}`.

use std::ffi::OsString;

use bootscope_model::vmm::{self, VmmKind};

use crate::error::AdviseError;
use crate::evaluate::ConcreteChange;

/// `run`'s option for a virtio console.
const VIRTIO_CONSOLE: [&str; 2] = ["--console", "virtio"];

/// The placeholder a `--prove-command` template must hold.
pub const PLACEHOLDER: &str = "{cmdline}";

/// What is booted.
#[derive(Clone, Debug)]
pub enum ProveTarget {
    /// `bootscope run ARGS` (without `run`).
    Bootscope {
        args: Vec<String>,
        /// The kernel command line `run` uses without `--cmdline`.
        default_cmdline: String,
    },
    /// Another VMM: its words, one of which holds `{cmdline}`, or a QEMU
    /// or Cloud Hypervisor command whose own kernel command line is
    /// rewritten (`placeholder` false).
    Template {
        words: Vec<String>,
        cmdline: String,
        placeholder: bool,
    },
}

/// Splits a command template into words as a POSIX shell would for
/// quotes and backslashes (no variables, globs or operators).
pub fn split_words(s: &str) -> Result<Vec<String>, AdviseError> {
    shlex::split(s).ok_or_else(|| {
        AdviseError::Usage(format!(
            "--prove-command {s:?}: a quote is not closed, or it ends in a lone backslash"
        ))
    })
}

impl ProveTarget {
    /// A template target: `{cmdline}` where the VMM takes the kernel
    /// command line (the original's is `given`, else the documents'), or a
    /// QEMU or Cloud Hypervisor command that boots its own `-kernel` (its
    /// `-append`/`--cmdline` is the original's unless `given`); refuses
    /// anything else.
    pub fn template(
        template: &str,
        given: Option<String>,
        documents: Option<String>,
    ) -> Result<Self, AdviseError> {
        let words = split_words(template)?;
        if words.is_empty() {
            return Err(AdviseError::Usage("--prove-command is empty: give the VMM's command line with {cmdline} where the kernel command line goes".into()));
        }
        if words.iter().any(|w| w.contains(PLACEHOLDER)) {
            return Ok(Self::Template {
                words,
                cmdline: given.or(documents).unwrap_or_default(),
                placeholder: true,
            });
        }
        let kind = vmm::kind_of(&words);
        let own = match kind {
            VmmKind::Qemu | VmmKind::CloudHypervisor => {
                vmm::with_kernel_cmdline(&words, |c| Ok::<_, String>(c.to_string()))
                    .map(|r| r.cmdline)
                    .map_err(|e| e.to_string())
            }
            _ => Err(format!("{kind} is not rewritten by advise")),
        };
        match own {
            Ok(own) => Ok(Self::Template {
                words,
                cmdline: given.unwrap_or(own),
                placeholder: false,
            }),
            Err(why) => Err(AdviseError::Usage(format!(
                "--prove-command {template:?} has no {PLACEHOLDER} ({why}): put it where the VMM takes the kernel command line, e.g. QEMU's -append \"{PLACEHOLDER}\" or Cloud Hypervisor's --cmdline \"{PLACEHOLDER}\""
            ))),
        }
    }

    /// Which VMM boots.
    pub fn vmm(&self) -> VmmKind {
        match self {
            Self::Bootscope { .. } => VmmKind::Bootscope,
            Self::Template { words, .. } => vmm::kind_of(words),
        }
    }

    /// Why `change` cannot be tried on this boot, if so: another VMM's
    /// option.
    pub fn refuses(&self, change: &ConcreteChange) -> Option<String> {
        match change {
            ConcreteChange::VmmOptions { vmm, .. } if *vmm != self.vmm() => Some(format!(
                "a {} option: the boot to prove is {}'s",
                vmm.name(),
                self.vmm().name()
            )),
            _ => None,
        }
    }

    /// The kernel command line of the original boot.
    pub fn cmdline(&self) -> String {
        match self {
            Self::Bootscope {
                args,
                default_cmdline,
            } => cmdline_arg(args).map_or_else(|| default_cmdline.clone(), |(_, v)| v),
            Self::Template { cmdline, .. } => cmdline.clone(),
        }
    }

    /// The kernel command line with `changes` applied: their words
    /// appended, and with `run --console virtio` the console moved from
    /// the 8250 (`console=ttyS0`) to the virtio console (`console=hvc0`),
    /// which `run` does itself only to its default command line.
    pub fn cmdline_with(&self, changes: &[&ConcreteChange]) -> String {
        let mut cmdline = self.cmdline();
        for c in changes {
            match c {
                ConcreteChange::KernelArgs(a) => {
                    cmdline = if cmdline.trim().is_empty() {
                        a.clone()
                    } else {
                        format!("{} {a}", cmdline.trim_end())
                    };
                }
                ConcreteChange::RunFlags(f) if f.windows(2).any(|w| w == VIRTIO_CONSOLE) => {
                    cmdline = cmdline
                        .split(' ')
                        .map(|w| {
                            if w == "console=ttyS0" {
                                "console=hvc0"
                            } else {
                                w
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(" ");
                }
                ConcreteChange::VmmOptions { kernel, .. } if !kernel.is_empty() => {
                    cmdline = crate::vmm_terms::set_kernel_words(&cmdline, kernel);
                }
                ConcreteChange::RunFlags(_)
                | ConcreteChange::Advice(_)
                | ConcreteChange::VmmOptions { .. } => {}
            }
        }
        cmdline
    }

    /// The arguments (bootscope: after `run`) with `changes` applied.
    pub fn argv(&self, changes: &[&ConcreteChange]) -> Vec<OsString> {
        let cmdline = self.cmdline_with(changes);
        let flags: Vec<String> = changes
            .iter()
            .filter_map(|c| match c {
                ConcreteChange::RunFlags(f) => Some(f.iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect();
        match self {
            Self::Bootscope { args, .. } => {
                // `run` options in place of others (`--initrd FILE`).
                let mut out: Vec<String> = args.clone();
                for c in changes {
                    if let ConcreteChange::VmmOptions {
                        vmm: VmmKind::Bootscope,
                        args,
                        replace,
                        ..
                    } = c
                    {
                        let run: Vec<String> = std::iter::once("run".to_string())
                            .chain(out.iter().cloned())
                            .collect();
                        out = crate::vmm_terms::apply_options(&run, args, replace, None)[1..]
                            .to_vec();
                    }
                }
                match cmdline_arg(&out) {
                    Some((i, _)) if out[i] == "--cmdline" => out[i + 1] = cmdline,
                    Some((i, _)) => out[i] = format!("--cmdline={cmdline}"),
                    None => {
                        out.push("--cmdline".into());
                        out.push(cmdline);
                    }
                }
                out.extend(flags);
                out.into_iter().map(OsString::from).collect()
            }
            Self::Template {
                words, placeholder, ..
            } => {
                let mut words = words.clone();
                for c in changes {
                    if let ConcreteChange::VmmOptions {
                        args,
                        replace,
                        machine,
                        ..
                    } = c
                    {
                        words = crate::vmm_terms::apply_options(
                            &words,
                            args,
                            replace,
                            machine.as_deref(),
                        );
                    }
                }
                if !placeholder {
                    // Checked in `template`: the command names its kernel.
                    if let Ok(r) =
                        vmm::with_kernel_cmdline(&words, |_| Ok::<_, String>(cmdline.clone()))
                    {
                        words = r.argv;
                    }
                }
                words
                    .iter()
                    .map(|w| OsString::from(w.replace(PLACEHOLDER, &cmdline)))
                    .collect()
            }
        }
    }
}

/// Where `--cmdline` is in `run` arguments, and its value.
fn cmdline_arg(args: &[String]) -> Option<(usize, String)> {
    bootscope_model::argv::flag_values(args, &["--cmdline"])
        .next()
        .map(|(i, v)| (i, v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: Vec<OsString>) -> Vec<String> {
        v.into_iter().map(|s| s.into_string().unwrap()).collect()
    }

    #[test]
    fn words_as_a_shell_splits_them() {
        assert_eq!(
            split_words(r#"qemu -append "{cmdline} x" -name 'a b' c\ d"#).unwrap(),
            ["qemu", "-append", "{cmdline} x", "-name", "a b", "c d"]
        );
        assert!(split_words("qemu -append \"x").is_err());
        assert!(split_words("qemu -append 'x").is_err());
    }

    #[test]
    fn template_needs_the_placeholder() {
        let e = ProveTarget::template("myvmm -append quiet", None, None).unwrap_err();
        assert!(e.to_string().contains("has no {cmdline}"), "{e}");
        assert!(e.is_bad_input());
        let t = ProveTarget::template(
            "qemu -append \"{cmdline}\"",
            None,
            Some("console=ttyS0".into()),
        )
        .unwrap();
        let quiet = ConcreteChange::KernelArgs("quiet".into());
        assert_eq!(
            strings(t.argv(&[&quiet])),
            ["qemu", "-append", "console=ttyS0 quiet"]
        );
        assert_eq!(strings(t.argv(&[])), ["qemu", "-append", "console=ttyS0"]);
    }

    #[test]
    fn run_arguments_get_the_changes() {
        let quiet = ConcreteChange::KernelArgs("quiet".into());
        let map = ConcreteChange::RunFlags(vec!["--map-initrd".into()]);
        let t = ProveTarget::Bootscope {
            args: vec!["--kernel".into(), "k".into()],
            default_cmdline: "console=ttyS0".into(),
        };
        assert_eq!(
            strings(t.argv(&[&quiet, &map])),
            [
                "--kernel",
                "k",
                "--cmdline",
                "console=ttyS0 quiet",
                "--map-initrd"
            ]
        );
        let t = ProveTarget::Bootscope {
            args: vec!["--cmdline=a b".into(), "--memory".into(), "256M".into()],
            default_cmdline: "x".into(),
        };
        assert_eq!(
            strings(t.argv(&[&quiet])),
            ["--cmdline=a b quiet", "--memory", "256M"]
        );
        assert_eq!(t.cmdline(), "a b");
        // A virtio console takes the console off the 8250 on a command
        // line of one's own too (run does so only to its default).
        let virtio = ConcreteChange::RunFlags(vec!["--console".into(), "virtio".into()]);
        let t = ProveTarget::Bootscope {
            args: vec!["--cmdline".into(), "console=ttyS0 quiet".into()],
            default_cmdline: "x".into(),
        };
        assert_eq!(
            strings(t.argv(&[&virtio])),
            ["--cmdline", "console=hvc0 quiet", "--console", "virtio"]
        );
        assert_eq!(t.cmdline_with(&[&virtio]), "console=hvc0 quiet");
        // A run option in place of another (the initrd as one archive),
        // before or after the command line, in either spelling.
        let cpio = ConcreteChange::VmmOptions {
            vmm: VmmKind::Bootscope,
            args: vec!["--initrd".into(), "/c/i.cpio".into()],
            replace: vec!["--initrd".into()],
            machine: None,
            kernel: String::new(),
        };
        for (args, want) in [
            (
                vec!["--initrd", "i.img", "--cmdline", "q", "--kernel", "k"],
                vec![
                    "--cmdline",
                    "q quiet",
                    "--kernel",
                    "k",
                    "--initrd",
                    "/c/i.cpio",
                ],
            ),
            (
                vec!["--kernel", "k", "--initrd=i.img"],
                vec![
                    "--kernel",
                    "k",
                    "--initrd",
                    "/c/i.cpio",
                    "--cmdline",
                    "x quiet",
                ],
            ),
        ] {
            let t = ProveTarget::Bootscope {
                args: args.into_iter().map(String::from).collect(),
                default_cmdline: "x".into(),
            };
            assert_eq!(strings(t.argv(&[&cpio, &quiet])), want);
            assert!(t.refuses(&cpio).is_none());
        }
        let qemu = ProveTarget::template(
            "qemu-system-x86_64 -kernel k -append '{cmdline}'",
            None,
            None,
        );
        assert!(qemu.unwrap().refuses(&cpio).unwrap().contains("bootscope"));
    }

    #[test]
    fn a_qemu_command_rewritten_by_its_own_options() {
        let t = ProveTarget::template(
            "qemu-system-x86_64 -M microvm -nographic -serial stdio -kernel k -append 'console=ttyS0 quiet'",
            None,
            Some("ignored".into()),
        )
        .unwrap();
        assert_eq!(t.vmm(), VmmKind::Qemu);
        assert_eq!(t.cmdline(), "console=ttyS0 quiet");
        let hvc = ConcreteChange::VmmOptions {
            vmm: VmmKind::Qemu,
            args: vec!["-chardev".into(), "stdio,id=c".into()],
            replace: vec!["-serial".into()],
            machine: Some("isa-serial=off".into()),
            kernel: "console=hvc0".into(),
        };
        let nr = ConcreteChange::KernelArgs("8250.nr_uarts=1".into());
        assert_eq!(
            strings(t.argv(&[&hvc, &nr])),
            [
                "qemu-system-x86_64",
                "-M",
                "microvm,isa-serial=off",
                "-nographic",
                "-kernel",
                "k",
                "-append",
                "console=hvc0 quiet 8250.nr_uarts=1",
                "-monitor",
                "none",
                "-chardev",
                "stdio,id=c"
            ]
        );
        assert_eq!(t.refuses(&hvc), None);
        let ch = ConcreteChange::VmmOptions {
            vmm: VmmKind::CloudHypervisor,
            args: Vec::new(),
            replace: Vec::new(),
            machine: None,
            kernel: String::new(),
        };
        assert!(t
            .refuses(&ch)
            .unwrap()
            .contains("a Cloud Hypervisor option"));
        // Without {cmdline} and without -kernel: refused.
        let e = ProveTarget::template("qemu-system-x86_64 -hda d.img", None, None).unwrap_err();
        assert!(e.to_string().contains("QEMU is given no -kernel"), "{e}");
    }
}
