//! Fixes in each VMM's own terms ([`crate::rules::Change::InVmm`]): the
//! way of the VMM that booted (bootscope's for one advise does not know),
//! and a VMM command rewritten with it for `--prove-command`.

use bootscope_model::vmm::{qemu_machine, VmmKind};

use crate::evaluate::ConcreteChange;
use crate::evidence::Evidence;
use crate::rules::{InVmm, Way};

/// Whether QEMU's machine type `ty` (`None`: the default, `pc`) is one of
/// `types` (`pc` also standing for `pc-*` versions, `q35` for `pc-q35-*`).
fn machine_is(ty: Option<&str>, types: &[&str]) -> bool {
    let ty = ty.unwrap_or("pc");
    types.iter().any(|t| {
        ty == *t || ty.starts_with(&format!("{t}-")) || ty.starts_with(&format!("pc-{t}-"))
    })
}

/// QEMU's virtio transport for `{bus}`: virtio-mmio on microvm.
fn bus(command: &[String]) -> &'static str {
    if qemu_machine(command).as_deref() == Some("microvm") {
        "device"
    } else {
        "pci"
    }
}

/// Whether `command` holds `args` as consecutive words.
fn holds(command: &[String], args: &[String]) -> bool {
    !args.is_empty() && command.windows(args.len()).any(|w| w == args)
}

/// The fix in the terms of the VMM `ev` shows (bootscope's when it is
/// not known): `None` when that VMM has no way to do it, or it is done
/// already. A bootscope way is `run` options.
pub fn concrete(ways: &[InVmm], ev: &Evidence) -> Option<ConcreteChange> {
    let vmm = match ev.vmm {
        VmmKind::Other => VmmKind::Bootscope,
        v => v,
    };
    let way = ways.iter().find(|w| w.vmm == vmm)?.way;
    match way {
        Way::Manual { how } => Some(ConcreteChange::Advice(format!("{}: {how}", vmm.name()))),
        Way::Options { args, replace, .. } if vmm == VmmKind::Bootscope => {
            let args = match with_files(args, ev, vmm) {
                Ok(args) => args,
                Err(advice) => return Some(advice),
            };
            if replace.is_empty() {
                return Some(ConcreteChange::RunFlags(args));
            }
            Some(ConcreteChange::VmmOptions {
                vmm,
                args,
                replace: replace.iter().map(|s| (*s).to_string()).collect(),
                machine: None,
                kernel: String::new(),
            })
        }
        Way::Options {
            args,
            replace,
            machine,
            kernel,
        } => {
            let cmd = &ev.vmm_command;
            if let Some((props, types)) = machine {
                let ty = qemu_machine(cmd);
                let has = bootscope_model::argv::flag_value(cmd, &["-M", "-machine"])
                    .is_some_and(|m| m.split(',').any(|p| p == props));
                if has || !ev.vmm_command.is_empty() && !machine_is(ty.as_deref(), types) {
                    return None;
                }
            }
            let args = match with_files(args, ev, vmm) {
                Ok(args) => args,
                Err(advice) => return Some(advice),
            };
            let args: Vec<String> = args.iter().map(|a| a.replace("{bus}", bus(cmd))).collect();
            if machine.is_none() && holds(cmd, &args) {
                return None;
            }
            Some(ConcreteChange::VmmOptions {
                vmm,
                args,
                replace: replace.iter().map(|s| (*s).to_string()).collect(),
                machine: machine.map(|(p, _)| p.to_string()),
                kernel: kernel.to_string(),
            })
        }
    }
}

/// `args` with the files advise made in place of their placeholders
/// (`{vmlinux}`: the bzImage's decompressed payload; `{initrd_cpio}`: the
/// initrd as one uncompressed archive; `{initrd_modules}`: that archive
/// with only the boot's modules); a file that was not made turns the fix
/// into advice (`Err`).
fn with_files(args: &[&str], ev: &Evidence, vmm: VmmKind) -> Result<Vec<String>, ConcreteChange> {
    let uses = |p: &str| args.iter().any(|a| a.contains(p));
    let vmlinux = ev.vmm_kernel.as_ref().and_then(|k| k.vmlinux.as_ref());
    if uses("{vmlinux}") && vmlinux.is_none() {
        return Err(ConcreteChange::Advice(format!(
            "{}: -kernel VMLINUX, the bzImage's decompressed payload (an ELF with a PVH note; `bootscope advise` keeps one in its kernel cache where it can read the bzImage)",
            vmm.name()
        )));
    }
    let cpio = ev.initrd.as_ref().and_then(|i| i.cpio.as_ref());
    if uses("{initrd_cpio}") && cpio.is_none() {
        let why = ev
            .initrd
            .as_ref()
            .and_then(|i| i.cpio_error.as_deref())
            .map(|why| format!(" (none was made here: {why})"))
            .unwrap_or_default();
        return Err(ConcreteChange::Advice(format!(
            "{}: give the initramfs as one uncompressed cpio archive (`bootscope advise` keeps one in its cache where it can read the initrd){why}",
            vmm.name()
        )));
    }
    let modules = ev.initrd.as_ref().and_then(|i| i.modules_cpio.as_ref());
    if uses("{initrd_modules}") && modules.is_none() {
        let why = ev
            .initrd
            .as_ref()
            .and_then(|i| i.modules_cpio_error.clone())
            .or_else(|| {
                ev.guest_modules.is_none().then(|| {
                    "the boot's loaded modules were not read (a profile with --exit-sites, or of another VMM with its guest memory read, has them)".to_string()
                })
            })
            .map(|why| format!(" (none was made here: {why})"))
            .unwrap_or_default();
        return Err(ConcreteChange::Advice(format!(
            "{}: give an initramfs with only the modules this boot loaded (`bootscope advise` makes one in its cache from the initrd and the profile's module list){why}",
            vmm.name()
        )));
    }
    let show =
        |p: Option<&std::path::PathBuf>| p.map(|v| v.display().to_string()).unwrap_or_default();
    let (vmlinux, cpio, modules) = (show(vmlinux), show(cpio), show(modules));
    Ok(args
        .iter()
        .map(|a| {
            a.replace("{vmlinux}", &vmlinux)
                .replace("{initrd_cpio}", &cpio)
                .replace("{initrd_modules}", &modules)
        })
        .collect())
}

/// `words` with `key=value` words of `kernel` in place of that key's
/// words (the first kept in place, the others dropped), other words
/// appended.
pub fn set_kernel_words(cmdline: &str, kernel: &str) -> String {
    let mut words: Vec<String> = cmdline.split_whitespace().map(str::to_string).collect();
    for k in kernel.split_whitespace() {
        let key = k.split_once('=').map_or(k, |(key, _)| key);
        let same = |w: &String| w == k || w.split_once('=').is_some_and(|(wk, _)| wk == key);
        match words.iter().position(same) {
            Some(i) => {
                words[i] = k.to_string();
                let mut j = i + 1;
                while j < words.len() {
                    if same(&words[j]) {
                        words.remove(j);
                    } else {
                        j += 1;
                    }
                }
            }
            None => words.push(k.to_string()),
        }
    }
    words.join(" ")
}

/// A VMM command (after its program) with `args` added, its options in
/// `replace` removed with their values, and QEMU machine `props` added to
/// its `-M` (or a new `-M props`). QEMU with `-nographic` and no monitor
/// of its own gets `-monitor none` when the options take standard input
/// (its default monitor would hold it).
pub fn apply_options(
    words: &[String],
    args: &[String],
    replace: &[String],
    machine: Option<&str>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let name = w.split_once('=').map_or(w.as_str(), |(n, _)| n);
        if i > 0 && replace.iter().any(|r| r == name) {
            i += if w.contains('=') { 1 } else { 2 };
            continue;
        }
        out.push(w.clone());
        i += 1;
    }
    if let Some(props) = machine {
        let at = (1..out.len()).rev().find(|&j| {
            (out[j] == "-M" || out[j] == "-machine" || out[j] == "--machine") && j + 1 < out.len()
        });
        match at {
            Some(j) => out[j + 1] = format!("{},{props}", out[j + 1]),
            None => out.extend(["-M".to_string(), props.to_string()]),
        }
    }
    let stdio = args.iter().any(|a| a.starts_with("stdio"));
    let monitor = out
        .iter()
        .any(|w| w == "-monitor" || w == "-mon" || w == "-qmp");
    if stdio && !monitor && out.iter().any(|w| w == "-nographic") {
        out.extend(["-monitor".to_string(), "none".to_string()]);
    }
    out.extend(args.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn kernel_words_replace_their_key() {
        assert_eq!(
            set_kernel_words("console=tty0 quiet console=ttyS0", "console=hvc0"),
            "console=hvc0 quiet"
        );
        assert_eq!(
            set_kernel_words("quiet", "console=hvc0 8250.nr_uarts=0"),
            "quiet console=hvc0 8250.nr_uarts=0"
        );
    }

    #[test]
    fn qemu_command_rewritten() {
        let w = words("qemu-system-x86_64 -M microvm -nographic -serial stdio -kernel k");
        let args = words("-serial none -chardev stdio,id=c");
        assert_eq!(
            apply_options(&w, &args, &["-serial".into()], Some("isa-serial=off")),
            words("qemu-system-x86_64 -M microvm,isa-serial=off -nographic -kernel k -monitor none -serial none -chardev stdio,id=c")
        );
        let w = words("qemu-system-x86_64 -kernel k");
        assert_eq!(
            apply_options(&w, &[], &[], Some("i8042=off")),
            words("qemu-system-x86_64 -kernel k -M i8042=off")
        );
        let w = words("cloud-hypervisor --serial=tty --console off --kernel k");
        assert_eq!(
            apply_options(
                &w,
                &words("--serial off --console tty"),
                &["--serial".into(), "--console".into()],
                None
            ),
            words("cloud-hypervisor --kernel k --serial off --console tty")
        );
    }

    #[test]
    fn machine_types() {
        assert!(machine_is(None, &["pc"]));
        assert!(machine_is(Some("pc-q35-7.2"), &["q35"]));
        assert!(machine_is(Some("pc-i440fx-7.2"), &["pc"]));
        assert!(!machine_is(Some("microvm"), &["q35", "pc"]));
    }
}
