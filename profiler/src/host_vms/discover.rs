//! Finding the VMMs on the host: every process holding a KVM VM (a
//! descriptor linking to `anon_inode:kvm-vm`), with what names it.

use std::path::Path;

use bootscope_model::proc::argv_of;
use bootscope_model::proc::stat_field;

/// A process holding a KVM VM.
#[derive(Clone, Debug, PartialEq)]
pub struct VmProcess {
    pub pid: u32,
    /// The kernel's name of the process (`/proc/PID/comm`).
    pub comm: String,
    /// The VM's name from the command line, where the VMM takes one
    /// (QEMU `-name`, Firecracker `--id`, cloud-hypervisor `--name`); empty
    /// otherwise.
    pub name: String,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_s: f64,
}

/// Whether `pid` holds a KVM VM: one of its descriptors links to
/// `anon_inode:kvm-vm`. A process that ends meanwhile holds none.
pub fn holds_kvm_vm(proc_root: &Path, pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .map(|l| l.as_os_str() == "anon_inode:kvm-vm")
            .unwrap_or(false)
    })
}

/// Processes of `proc_root` (a procfs) that hold a KVM VM, ascending by
/// pid (this process left out).
pub fn scan(proc_root: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir(proc_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != std::process::id())
        .filter(|&pid| holds_kvm_vm(proc_root, pid))
        .collect();
    pids.sort_unstable();
    pids
}

/// The VM's name in a VMM's command line: QEMU's `-name NAME` or
/// `-name guest=NAME,...`, Firecracker's `--id ID`, cloud-hypervisor's
/// `--name NAME` (each also as `--flag=VALUE`); empty when there is none.
pub fn vm_name(argv: &[String]) -> String {
    for (i, arg) in argv.iter().enumerate() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        if !matches!(flag, "-name" | "--name" | "--id") {
            continue;
        }
        let Some(value) = inline.or_else(|| argv.get(i + 1).cloned()) else {
            continue;
        };
        if flag == "-name" || flag == "--name" {
            // QEMU: `guest=NAME,process=...,debug-threads=on`, or a bare
            // name before the first comma.
            let mut bare = None;
            for part in value.split(',') {
                match part.split_once('=') {
                    Some(("guest", g)) => return g.to_string(),
                    Some(_) => {}
                    None if bare.is_none() => bare = Some(part.to_string()),
                    None => {}
                }
            }
            if let Some(b) = bare.filter(|b| !b.is_empty()) {
                return b;
            }
            continue;
        }
        return value;
    }
    String::new()
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes a constant and has no other preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Seconds since the epoch at boot (`btime` of /proc/stat).
fn boot_time_s(proc_root: &Path) -> f64 {
    std::fs::read_to_string(proc_root.join("stat"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

/// What names process `pid`; None once it has ended.
pub fn describe(proc_root: &Path, pid: u32) -> Option<VmProcess> {
    let dir = proc_root.join(pid.to_string());
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let comm = std::fs::read_to_string(dir.join("comm"))
        .map(|s| s.trim_end_matches('\n').to_string())
        .unwrap_or_default();
    let argv = argv_of(&dir);
    let start_ticks: f64 = stat_field(&stat, 22)?.parse().ok()?;
    Some(VmProcess {
        pid,
        comm,
        name: vm_name(&argv),
        start_time_s: boot_time_s(proc_root) + start_ticks / clock_ticks(),
    })
}

/// What names a VM the eBPF programs found, as read when they found it
/// (the process may be gone since, or its pid reused).
pub fn from_followed(proc_root: &Path, vm: &crate::collector::FollowedVm) -> VmProcess {
    VmProcess {
        pid: vm.tgid,
        comm: vm.comm.clone(),
        name: vm_name(&vm.cmdline),
        start_time_s: vm
            .start_ticks
            .map_or(0.0, |t| boot_time_s(proc_root) + t as f64 / clock_ticks()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn names_from_command_lines() {
        let q = "qemu-system-x86_64 -enable-kvm -name guest=web1,debug-threads=on -m 1G";
        assert_eq!(vm_name(&argv(q)), "web1");
        assert_eq!(vm_name(&argv("qemu -name db -m 1G")), "db");
        assert_eq!(vm_name(&argv("qemu -name debug-threads=on,x")), "x");
        assert_eq!(vm_name(&argv("firecracker --id fc7 --api-sock /s")), "fc7");
        assert_eq!(vm_name(&argv("cloud-hypervisor --name=ch2")), "ch2");
        assert_eq!(vm_name(&argv("bootscope run --kernel k")), "");
        assert_eq!(vm_name(&argv("qemu -name")), "");
        assert_eq!(vm_name(&argv("qemu -name debug-threads=on")), "");
    }

    /// A process holding a VM is found, one holding none is not; on a host
    /// without /dev/kvm only the second half runs.
    #[test]
    fn finds_this_process_only_while_it_holds_a_vm() {
        let proc_root = Path::new("/proc");
        let me = std::process::id();
        assert!(!holds_kvm_vm(proc_root, me));
        let me_described = describe(proc_root, me).expect("this process");
        assert!(me_described.start_time_s > 1.0e9, "{me_described:?}");
        let Ok(kvm) = std::fs::File::open("/dev/kvm") else {
            return;
        };
        // SAFETY: KVM_CREATE_VM (_IO(0xAE, 1)) on an open /dev/kvm with
        // machine type 0; it returns a new descriptor or -1.
        let vm = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&kvm), 0xAE01, 0) };
        if vm < 0 {
            return;
        }
        assert!(holds_kvm_vm(proc_root, me));
        // SAFETY: closing the descriptor KVM_CREATE_VM just returned.
        unsafe { libc::close(vm) };
        assert!(!holds_kvm_vm(proc_root, me));
    }
}
