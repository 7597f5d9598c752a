//! The QEMU command line of the lab machine: its CPUs, memory and NUMA
//! nodes, the kernel and initramfs, and its three serial ports.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::LabConfig;
use crate::{LabError, Result};

/// Outer kernel command line: console on the first serial port; `quiet`
/// and `loglevel=3` keep kernel messages from mixing with the program's
/// output; `panic=-1` reboots at once on a panic, which `-no-reboot` turns
/// into a QEMU exit instead of a hang. `numa_balancing=disable`: with two
/// or more nodes the kernel would otherwise unmap and migrate the running
/// program's pages between nodes by itself (a nested guest's memory
/// included, under its running vCPUs), which moves the pages placement
/// tests look at and, with two lab CPUs, stalls two-vCPU nested guests
/// (docs/architecture.md, "Two nested vCPUs at once"). No effect on one
/// node. `no_timer_check`: at boot the kernel checks that the I/O APIC
/// delivers timer ticks by counting them over a short busy wait, and panics
/// ("IO-APIC + timer doesn't work!") when too few arrive; under the
/// emulator on a loaded host the emulated CPU can run too slowly for the
/// ticks to land in that window although the timer works, so the check is
/// skipped, as it is for most virtual machines.
const KERNEL_CMDLINE: &str =
    "console=ttyS0 quiet loglevel=3 panic=-1 numa_balancing=disable no_timer_check";

/// The QEMU command line of the outer guest.
///
/// `-nodefaults` drops the default devices (VGA, network, the monitor
/// multiplexed onto stdio); three ISA serial ports remain: ttyS0 on QEMU's
/// stdio (pipes: we read its output, and with `terminal` write the host's
/// keys to its input; without, its input is /dev/null), ttyS1 on the
/// result file and ttyS2 on the heartbeat pipe. QEMU never touches a
/// terminal itself.
pub(super) fn qemu_command(
    qemu: &Path,
    shape: &MachineShape,
    vmlinuz: &Path,
    initrd: &Path,
    stream: &Path,
    heartbeat: &Path,
    terminal: bool,
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
        .stdin(if terminal {
            Stdio::piped()
        } else {
            Stdio::null()
        })
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
pub(super) struct MachineShape {
    memory_mib: u64,
    cpus: u32,
    /// Per node (none without NUMA): its first CPU, CPU count and MiB.
    nodes: Vec<(u32, u32, u64)>,
}

impl MachineShape {
    pub(super) fn of(cfg: &LabConfig) -> Self {
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
pub(super) fn check_numa(cfg: &LabConfig) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
                false,
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
        // The lab kernel never moves pages between nodes by itself.
        let append = after(&two, "-append");
        assert!(
            append.split(' ').any(|p| p == "numa_balancing=disable"),
            "{append}"
        );
        // A slow emulated CPU on a loaded host never fails the timer check.
        assert!(append.split(' ').any(|p| p == "no_timer_check"), "{append}");
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
    fn chardev_paths_escape_commas() {
        assert_eq!(
            chardev_file_option("lab0", Path::new("/tmp/a,b/out.bin")),
            OsString::from("file,id=lab0,path=/tmp/a,,b/out.bin")
        );
    }
}
