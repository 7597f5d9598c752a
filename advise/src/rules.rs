//! The rules: one table ([`RULES`]), a row per rule, each saying what
//! evidence it looks for ([`Detector`]), which data that needs
//! ([`Need`]), the fixes it proposes ([`Fix`]: the change, what it risks
//! or gives up) and the documentation that justifies it. Adding a rule is
//! adding a row; [`crate::evaluate::evaluate`] is the one function that
//! evaluates any of them, and docs/advise.md is generated from this table
//! ([`crate::docs::rules_markdown`], kept in sync by a test).

use serde::Serialize;

pub use crate::detector::Detector;

/// Data a rule needs, and the flag that records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// Exits by reason: a profile.
    Exits,
    /// Exits by guest function, or at least port I/O by port.
    ExitSitesOrPorts,
    /// Initcalls and their durations.
    Initcalls,
    /// The boot's phases (a timeline, or a profile's phases).
    Phases,
    /// The kernel command line.
    Cmdline,
    /// How the kernel was loaded and the initrd given (a timeline).
    Guest,
    /// A systemd guest's units and critical chain (a timeline's `units`).
    Units,
}

impl Need {
    /// What records the data.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Exits => "a profile: `bootscope run --output P.json` (run profiles itself), or `bootscope profile --output P.json -- VMM ...`",
            Self::ExitSitesOrPorts => "`run --exit-sites` (VMX/SVM hosts) names the guest functions; any profile has exits by port",
            Self::Initcalls => "`run --initcalls`, or `bootscope profile --initcalls -- VMM ...` (QEMU, Cloud Hypervisor, Firecracker: the trace parameters in the VMM's own options)",
            Self::Phases => "a timeline: `bootscope run --timeline T.json`",
            Self::Cmdline => "a timeline (`run --timeline`), or a profile of a command that names its kernel command line (`-append`, `--cmdline`)",
            Self::Guest => "a timeline: `bootscope run --timeline T.json`",
            Self::Units => "a timeline of a systemd guest booted from its disk: `bootscope run --disk IMAGE --timeline T.json` (a `guest build` image, or any image with a persistent journal, booted with console=ttyS0 or --initcalls)",
        }
    }
}

/// How much a rule trusts a change not to cost anything but time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Nothing the guest relies on is lost.
    Low,
    /// Something is given up (messages, a device, a check): the fix says what.
    GivesUp,
    /// Weakens the guest's security: listed, tried only with `--allow-unsafe`.
    Unsafe,
}

/// A concrete change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Change {
    /// Words added to the kernel command line (any VMM, through its
    /// command line or the `{cmdline}` template). `{initcall}` is replaced
    /// by the initcall the finding names.
    KernelArgs(&'static str),
    /// Options added to `bootscope run` (bootscope's VMM only).
    RunFlags(&'static [&'static str]),
    /// A change to the kernel, its configuration, the initramfs or the
    /// VMM's set-up that cannot be tried automatically.
    Advice(&'static str),
    /// A VMM option: how each VMM does it (a VMM not listed cannot).
    InVmm(&'static [InVmm]),
}

pub use bootscope_model::vmm::VmmKind;

/// How one VMM does a fix ([`Change::InVmm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct InVmm {
    pub vmm: VmmKind,
    pub way: Way,
}

/// A fix in one VMM's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Way {
    /// `args` added to the VMM's command line, its options named in
    /// `replace` removed first (with their values); QEMU's `{bus}` is
    /// `device` (virtio-mmio) on microvm, `pci` elsewhere. `machine`:
    /// QEMU machine properties added to `-M`, for the machine types
    /// listed (`pc` also stands for QEMU's default and `pc-*`). `kernel`:
    /// words set on the kernel command line with it (`key=value` in place
    /// of that key's words).
    Options {
        args: &'static [&'static str],
        replace: &'static [&'static str],
        machine: Option<(&'static str, &'static [&'static str])>,
        kernel: &'static str,
    },
    /// Not an option of that VMM: what to do there instead (not tried).
    Manual { how: &'static str },
}

/// [`Way::Options`] without machine properties.
const fn opts(
    vmm: VmmKind,
    args: &'static [&'static str],
    replace: &'static [&'static str],
    kernel: &'static str,
) -> InVmm {
    InVmm {
        vmm,
        way: Way::Options {
            args,
            replace,
            machine: None,
            kernel,
        },
    }
}

/// QEMU machine properties (`-M TYPE,PROPS`) for the machine `types`,
/// with `args` and `kernel` words as [`Way::Options`].
const fn qemu_machine(
    props: &'static str,
    types: &'static [&'static str],
    args: &'static [&'static str],
    replace: &'static [&'static str],
    kernel: &'static str,
) -> InVmm {
    InVmm {
        vmm: VmmKind::Qemu,
        way: Way::Options {
            args,
            replace,
            machine: Some((props, types)),
            kernel,
        },
    }
}

const fn manual(vmm: VmmKind, how: &'static str) -> InVmm {
    InVmm {
        vmm,
        way: Way::Manual { how },
    }
}

/// QEMU's virtio console in place of the 8250 (QEMU's microvm
/// documentation, docs/system/i386/microvm.rst).
const QEMU_VIRTCONSOLE: &[&str] = &[
    "-serial",
    "none",
    "-chardev",
    "stdio,id=virtiocon0",
    "-device",
    "virtio-serial-{bus}",
    "-device",
    "virtconsole,chardev=virtiocon0",
];
/// Cloud Hypervisor's virtio console in place of its 8250.
const CH_VIRTCONSOLE: &[&str] = &["--serial", "off", "--console", "tty"];

/// One candidate fix of a rule.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Fix {
    pub change: Change,
    pub risk: Risk,
    /// What it risks or gives up.
    pub gives_up: &'static str,
    /// The documentation that says what the change does.
    pub source: &'static str,
}

/// One rule.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rule {
    /// Stable name (JSON, docs).
    pub id: &'static str,
    /// What the finding is about, in a few words.
    pub title: &'static str,
    pub detector: Detector,
    /// Data the detector cannot do without.
    pub needs: &'static [Need],
    /// Kernel command-line words that switch off what the rule looks for:
    /// with one of them given, the time it sees is not that cause's and
    /// the rule is clear (e.g. `crypto_algapi_init` still registers the
    /// algorithms under `cryptomgr.notests`, without their self-tests).
    pub off_with: &'static [&'static str],
    pub fixes: &'static [Fix],
}

/// The kernel's parameter reference, cited by most rows.
pub const KERNEL_PARAMETERS: &str = "Documentation/admin-guide/kernel-parameters.txt";

/// Initcalls other rows name; the failed-probe row leaves them alone.
pub const NAMED_INITCALLS: &[&str] = &[
    "serial8250_init",
    "crypto_algapi_init",
    "alg_test_init",
    "populate_rootfs",
    "i8042_init",
    "pci_subsys_init",
    "pcibios_init",
    "pci_arch_init",
    "raid6_select_algo",
    "calibrate_xor_blocks",
];

/// The rules, in no particular order (findings are ranked by the time
/// their evidence accounts for).
pub const RULES: &[Rule] = &[
    Rule {
        id: "serial-console",
        title: "kernel messages written to the serial console, one port exit per byte",
        detector: Detector::ExitsAt {
            functions: &["io_serial_out", "io_serial_in", "serial8250_console_putchar", "wait_for_xmitr"],
            ports: (0x3f8, 0x3ff),
            min_ns: 0,
        },
        needs: &[Need::ExitSitesOrPorts],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::KernelArgs("quiet"),
                risk: Risk::GivesUp,
                gives_up: "the console shows only warnings and worse (loglevel 4); the messages stay in the kernel log (dmesg); console patterns on informational lines (\"Run /init as init process\") no longer match",
                source: "Documentation/admin-guide/kernel-parameters.txt: quiet, loglevel",
            },
            Fix {
                change: Change::InVmm(&[
                    opts(VmmKind::Bootscope, &["--console", "virtio"], &[], "console=hvc0"),
                    opts(VmmKind::Qemu, QEMU_VIRTCONSOLE, &["-serial"], "console=hvc0"),
                    opts(VmmKind::CloudHypervisor, CH_VIRTCONSOLE, &["--serial", "--console"], "console=hvc0"),
                    manual(VmmKind::Firecracker, "Firecracker has no virtio console: keep quiet (or loglevel=4) on the kernel command line"),
                ]),
                risk: Risk::Low,
                gives_up: "needs a kernel with virtio-console (CONFIG_VIRTIO_CONSOLE, hvc0); the command line's console=ttyS0 becomes console=hvc0; the earliest messages, before the driver, are not shown",
                source: "Documentation/admin-guide/serial-console.rst; QEMU docs/system/i386/microvm.rst (virtconsole, console=hvc0); Cloud Hypervisor docs: --serial off --console tty",
            },
        ],
    },
    Rule {
        id: "cmos-rtc",
        title: "the CMOS RTC polled for the wall clock, one port exit per read",
        detector: Detector::ExitsAt {
            functions: &["mach_get_cmos_time", "mc146818_get_time", "mc146818_avoid_UIP", "rtc_cmos_read", "cmos_read"],
            ports: (0x70, 0x71),
            min_ns: 50_000_000,
        },
        needs: &[Need::ExitSitesOrPorts],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::KernelArgs("initcall_blacklist=cmos_init"),
                risk: Risk::GivesUp,
                gives_up: "no RTC driver: no /dev/rtc0 for hwclock or RTC wake alarms; the wall clock from kvmclock (KVM only); only the rtc_cmos driver's probe (the cmos_init initcall, where a lab boot of QEMU microvm polled 0x70/0x71 40,001 times, rtc=off or not) is left out: a read of the CMOS clock by the kernel's own timekeeping before the initcalls stays; needs a kernel with kallsyms (initcall names)",
                source: "Documentation/admin-guide/kernel-parameters.txt: initcall_blacklist",
            },
            Fix {
                change: Change::InVmm(&[qemu_machine("rtc=off", &["microvm"], &[], &[], "")]),
                risk: Risk::GivesUp,
                gives_up: "no RTC: the guest takes the wall clock from kvmclock (KVM only); no /dev/rtc0 for hwclock; an x86 kernel still registers its rtc_cmos device (QEMU 7.2 microvm does not set the FADT's no-CMOS-RTC flag), and where that device's probe is what polls (`rtc_cmos: broken or not accessible` in the log) it polls 0xff just as long: measured no saving (docs/benchmarks.md)",
                source: "QEMU docs/system/i386/microvm.rst: rtc=off, the guest relying on kvmclock",
            },
        ],
    },
    Rule {
        id: "legacy-uarts",
        title: "8250 driver probing legacy UARTs the VM does not have",
        detector: Detector::SlowInitcalls { names: &["serial8250_init"], min_ns: 1_000_000 },
        needs: &[Need::Initcalls],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::KernelArgs("8250.nr_uarts=1"),
                risk: Risk::Low,
                gives_up: "only ttyS0 is registered",
                source: "Documentation/admin-guide/kernel-parameters.txt: 8250.nr_uarts",
            },
            Fix {
                change: Change::InVmm(&[
                    qemu_machine("isa-serial=off", &["microvm"], QEMU_VIRTCONSOLE, &["-serial"], "console=hvc0 8250.nr_uarts=0"),
                    opts(VmmKind::CloudHypervisor, CH_VIRTCONSOLE, &["--serial", "--console"], "console=hvc0 8250.nr_uarts=0"),
                ]),
                risk: Risk::GivesUp,
                gives_up: "no UART at all: the console is the virtio console (hvc0, CONFIG_VIRTIO_CONSOLE), which shows nothing before its driver",
                source: "QEMU docs/system/i386/microvm.rst: isa-serial=off; Documentation/admin-guide/kernel-parameters.txt: 8250.nr_uarts",
            },
        ],
    },
    Rule {
        id: "crypto-self-tests",
        title: "crypto algorithm self-tests at boot",
        detector: Detector::SlowInitcalls { names: &["crypto_algapi_init", "alg_test_init"], min_ns: 5_000_000 },
        needs: &[Need::Initcalls],
        off_with: &["cryptomgr.notests"],
        fixes: &[
            Fix {
                change: Change::KernelArgs("cryptomgr.notests"),
                risk: Risk::GivesUp,
                gives_up: "crypto implementations are not self-tested at registration (a FIPS requirement where FIPS mode is used)",
                source: "Documentation/admin-guide/kernel-parameters.txt: cryptomgr.notests",
            },
            Fix {
                change: Change::Advice("build the kernel with CONFIG_CRYPTO_MANAGER_DISABLE_TESTS=y"),
                risk: Risk::GivesUp,
                gives_up: "as cryptomgr.notests, for every boot of that kernel",
                source: "crypto/Kconfig: CRYPTO_MANAGER_DISABLE_TESTS",
            },
        ],
    },
    Rule {
        id: "raid-benchmarks",
        title: "RAID6 and XOR algorithm benchmarks at boot",
        detector: Detector::SlowInitcalls { names: &["raid6_select_algo", "calibrate_xor_blocks"], min_ns: 5_000_000 },
        needs: &[Need::Initcalls],
        off_with: &[],
        fixes: &[Fix {
            change: Change::Advice("build RAID6/XOR as modules (CONFIG_RAID6_PQ=m, CONFIG_XOR_BLOCKS=m), or with CONFIG_RAID6_PQ_BENCHMARK=n"),
            risk: Risk::Low,
            gives_up: "a fixed algorithm choice instead of the fastest measured one",
            source: "lib/raid6/Kconfig: RAID6_PQ_BENCHMARK",
        }],
    },
    Rule {
        id: "i8042-probe",
        title: "probing a PS/2 controller the VM does not have",
        detector: Detector::SlowInitcalls { names: &["i8042_init"], min_ns: 1_000_000 },
        needs: &[Need::Initcalls],
        off_with: &[],
        fixes: &[
        Fix {
            change: Change::KernelArgs("i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd"),
            risk: Risk::Low,
            gives_up: "no PS/2 mouse; the keyboard is not probed",
            source: "Documentation/admin-guide/kernel-parameters.txt: i8042.noaux, i8042.nomux, i8042.nopnp, i8042.dumbkbd",
        },
        Fix {
            change: Change::InVmm(&[qemu_machine("i8042=off", &["q35", "pc"], &[], &[], "")]),
            risk: Risk::GivesUp,
            gives_up: "no PS/2 controller: no PS/2 keyboard or mouse (QEMU's microvm has none already)",
            source: "qemu-system-x86_64 -M q35,help (QEMU 7.2): i8042",
        }],
    },
    Rule {
        id: "pci-probe",
        title: "scanning a PCI bus",
        detector: Detector::SlowInitcalls { names: &["pci_subsys_init", "pcibios_init", "pci_arch_init"], min_ns: 1_000_000 },
        needs: &[Need::Initcalls],
        off_with: &[],
        fixes: &[Fix {
            change: Change::KernelArgs("pci=off"),
            risk: Risk::GivesUp,
            gives_up: "no PCI device is found: only for VMs whose devices are all virtio-mmio or legacy",
            source: "Documentation/admin-guide/kernel-parameters.txt: pci=off",
        }],
    },
    Rule {
        id: "failed-probe",
        title: "an initcall probing hardware the VM does not have (returned -ENODEV)",
        detector: Detector::FailedProbes { min_ns: 1_000_000 },
        needs: &[Need::Initcalls],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::KernelArgs("initcall_blacklist={initcall}"),
                risk: Risk::GivesUp,
                gives_up: "the initcall never runs: its driver finds no device even where there is one",
                source: "Documentation/admin-guide/kernel-parameters.txt: initcall_blacklist",
            },
            Fix {
                change: Change::Advice("build the driver as a module, or leave it out of the kernel configuration"),
                risk: Risk::Low,
                gives_up: "the driver must be loaded where the hardware exists",
                source: "Documentation/kbuild/kconfig.rst",
            },
        ],
    },
    Rule {
        id: "compressed-initramfs",
        title: "the kernel decompressing the initramfs (populate_rootfs)",
        detector: Detector::CompressedInitramfs,
        needs: &[Need::Initcalls],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::InVmm(&[
                    opts(VmmKind::Bootscope, &["--initrd", "{initrd_cpio}"], &["--initrd"], ""),
                    opts(VmmKind::Qemu, &["-initrd", "{initrd_cpio}"], &["-initrd"], ""),
                    opts(VmmKind::CloudHypervisor, &["--initramfs", "{initrd_cpio}"], &["--initramfs"], ""),
                    manual(VmmKind::Firecracker, "give the uncompressed archive as boot-source's initrd_path (bootscope advise keeps one in its cache)"),
                ]),
                risk: Risk::Low,
                gives_up: "a larger file to store, read and copy into guest memory: the same initramfs as one uncompressed cpio archive, kept in bootscope's cache (made once from the initrd, named by its SHA-256)",
                source: "Documentation/driver-api/early-userspace/buffer-format.rst (concatenated and compressed archives unpack to the same files); init/initramfs.c: do_populate_rootfs, wait_for_initramfs",
            },
            Fix {
                change: Change::Advice("build the image's initramfs uncompressed for good: COMPRESS=none in /etc/initramfs-tools/initramfs.conf, then update-initramfs -u (dracut: --no-compress; or lz4, the fastest to unpack)"),
                risk: Risk::Low,
                gives_up: "a larger file to store and read (the VMM copies or maps it)",
                source: "man initramfs.conf(5): COMPRESS; man dracut(8): --no-compress; Documentation/filesystems/ramfs-rootfs-initramfs.rst",
            },
        ],
    },
    Rule {
        id: "copied-initrd",
        title: "the VMM copying a large initrd into guest memory",
        detector: Detector::CopiedInitrd { min_bytes: 32 << 20 },
        needs: &[Need::Guest],
        off_with: &[],
        fixes: &[Fix {
            change: Change::RunFlags(&["--map-initrd"]),
            risk: Risk::Low,
            gives_up: "a nested page fault per 4 KiB page the guest reads (the copy sits in huge pages)",
            source: "bootscope run --help: --map-initrd",
        }],
    },
    Rule {
        id: "guest-decompression",
        title: "the kernel's own decompressor running in the guest",
        detector: Detector::GuestDecompression,
        needs: &[Need::Guest],
        off_with: &[],
        fixes: &[Fix {
            change: Change::Advice("boot without --guest-decompress (the VMM decompresses once and caches), or an uncompressed vmlinux with a PVH entry (CONFIG_PVH)"),
            risk: Risk::GivesUp,
            gives_up: "no KASLR (the decompressor randomizes the kernel's address)",
            source: "Documentation/arch/x86/boot.rst; Firecracker and Cloud Hypervisor boot uncompressed vmlinux/PVH kernels",
        }],
    },
    Rule {
        id: "compressed-vmm-kernel",
        title: "a compressed bzImage given to QEMU, decompressed by the guest under emulation",
        detector: Detector::CompressedVmmKernel { min_ns: 200_000_000 },
        needs: &[Need::Phases],
        off_with: &[],
        fixes: &[Fix {
            change: Change::InVmm(&[opts(VmmKind::Qemu, &["-kernel", "{vmlinux}"], &["-kernel"], "")]),
            risk: Risk::GivesUp,
            gives_up: "no KASLR (the decompressor randomizes the kernel's address); needs a kernel with a PVH entry (CONFIG_PVH, an ELF note QEMU boots directly); the vmlinux is the decompressed payload, kept in bootscope's kernel cache (about 8 times the bzImage's size)",
            source: "QEMU docs/system/i386/microvm.rst and hw/i386/x86.c (an ELF -kernel with a PVH note is entered at its PVH entry); Documentation/arch/x86/boot.rst",
        }],
    },
    Rule {
        id: "serial-prealloc",
        title: "guest memory preallocated by one thread",
        detector: Detector::SerialPrealloc { min_ns: 20_000_000 },
        needs: &[Need::Phases],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::InVmm(&[
                    opts(VmmKind::Bootscope, &["--prealloc-threads", "2"], &[], ""),
                    manual(VmmKind::Qemu, "preallocate with several threads: -object memory-backend-ram,id=mem,size=SIZE,prealloc=on,prealloc-threads=4 -machine memory-backend=mem"),
                ]),
                risk: Risk::Low,
                gives_up: "more host CPUs busy during set-up",
                source: "bootscope run --help: --prealloc-threads; QEMU's memory-backend prealloc-threads",
            },
            Fix {
                change: Change::InVmm(&[
                    opts(VmmKind::Bootscope, &["--hugepages", "2M"], &[], ""),
                    manual(VmmKind::Qemu, "-mem-path /dev/hugepages (or memory-backend-file,mem-path=/dev/hugepages)"),
                    manual(VmmKind::CloudHypervisor, "--memory size=SIZE,hugepages=on"),
                    manual(VmmKind::Firecracker, "\"huge_pages\": \"2M\" in machine-config"),
                ]),
                risk: Risk::GivesUp,
                gives_up: "needs a hugetlb pool as large as guest memory (vm.nr_hugepages); the memory is not swappable",
                source: "Documentation/admin-guide/mm/hugetlbpage.rst; Firecracker docs/hugepages.md",
            },
        ],
    },
    Rule {
        id: "msr-exits",
        title: "MSR accesses trapping to the hypervisor (speculation-control MSRs among them)",
        detector: Detector::ExitReasons { reasons: &["msr", "MSR_READ", "MSR_WRITE", "KVM_EXIT_X86_RDMSR", "KVM_EXIT_X86_WRMSR"] },
        needs: &[Need::Exits],
        off_with: &[],
        fixes: &[Fix {
            change: Change::KernelArgs("mitigations=off"),
            risk: Risk::Unsafe,
            gives_up: "turns off every CPU vulnerability mitigation (Spectre, Meltdown, MDS, ...): the guest's processes and kernel are exposed",
            source: "Documentation/admin-guide/kernel-parameters.txt: mitigations; Documentation/admin-guide/hw-vuln/",
        }],
    },
    Rule {
        id: "kaslr",
        title: "the decompressor randomizing the kernel's address (KASLR)",
        detector: Detector::GuestDecompression,
        needs: &[Need::Guest],
        off_with: &[],
        fixes: &[Fix {
            change: Change::KernelArgs("nokaslr"),
            risk: Risk::Unsafe,
            gives_up: "the kernel runs at a predictable address, which eases exploits",
            source: "Documentation/admin-guide/kernel-parameters.txt: nokaslr",
        }],
    },
    Rule {
        id: "no-entropy-source",
        title: "no entropy source for the guest's random number generator",
        detector: Detector::CmdlineLacks { absent: &["random.trust_cpu=on", "random.trust_bootloader=on"] },
        needs: &[Need::Cmdline],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::InVmm(&[
                    opts(VmmKind::Bootscope, &["--rng"], &[], ""),
                    opts(VmmKind::Qemu, &["-device", "virtio-rng-{bus}"], &[], ""),
                    manual(VmmKind::Firecracker, "an entropy device: \"entropy\": {} in the config file"),
                ]),
                risk: Risk::Low,
                gives_up: "needs a kernel with virtio-rng (CONFIG_HW_RANDOM_VIRTIO)",
                source: "Documentation/admin-guide/hw_random.rst; QEMU's virtio-rng-device; Firecracker docs/entropy.md",
            },
            Fix {
                change: Change::KernelArgs("random.trust_cpu=on"),
                risk: Risk::Unsafe,
                gives_up: "the CPU's RDRAND alone may seed the kernel's random generator",
                source: "Documentation/admin-guide/kernel-parameters.txt: random.trust_cpu",
            },
        ],
    },
    Rule {
        id: "slow-unit-on-chain",
        title: "a slow unit on the critical chain to the workload",
        detector: Detector::SlowChainUnits { min_ns: 20_000_000 },
        needs: &[Need::Units],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::KernelArgs("systemd.mask={unit}"),
                risk: Risk::GivesUp,
                gives_up: "{unit} does not start in this boot: it {what}; units that require it fail, units ordered after it start sooner",
                source: "man kernel-command-line(7), systemd(1): systemd.mask=",
            },
            Fix {
                change: Change::Advice("mask it in the image for good: systemctl --root=MOUNTED-IMAGE mask {unit}"),
                risk: Risk::GivesUp,
                gives_up: "as systemd.mask=, for every boot of the image",
                source: "man systemctl(1): mask, --root",
            },
        ],
    },
    Rule {
        id: "wait-units",
        title: "units waiting for devices or the network (udev settle, wait-online)",
        detector: Detector::WaitUnits { names: crate::userspace::WAIT_UNITS },
        needs: &[Need::Units],
        off_with: &[],
        fixes: &[Fix {
            change: Change::KernelArgs("systemd.mask={unit}"),
            risk: Risk::GivesUp,
            gives_up: "{unit} does not run: it {what}; units ordered after it may start before the devices or the network are ready",
            source: "man kernel-command-line(7): systemd.mask=; man systemd-udev-settle.service(8), systemd-networkd-wait-online.service(8)",
        }],
    },
    Rule {
        id: "rarely-needed-units",
        title: "units a VM rarely needs (gettys on virtual terminals, e2scrub_reap, utmp, early module loads, debugfs and other special mounts, timers)",
        detector: Detector::RarelyNeededUnits,
        needs: &[Need::Units],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::KernelArgs("systemd.mask={unit}"),
                risk: Risk::GivesUp,
                gives_up: "none of {unit} runs in this boot: {what}",
                source: "man kernel-command-line(7), systemd(1): systemd.mask=",
            },
            Fix {
                change: Change::Advice("mask them in the image for good: systemctl --root=MOUNTED-IMAGE mask {unit}"),
                risk: Risk::GivesUp,
                gives_up: "as systemd.mask=, for every boot of the image",
                source: "man systemctl(1): mask, --root",
            },
        ],
    },
    Rule {
        id: "systemd-status-on-serial",
        title: "systemd's status lines written to the serial console",
        detector: Detector::StatusOnConsole,
        needs: &[Need::Units, Need::Cmdline],
        off_with: &["quiet", "systemd.show_status"],
        fixes: &[
            Fix {
                change: Change::KernelArgs("systemd.show_status=false"),
                risk: Risk::GivesUp,
                gives_up: "no unit status lines on the console (they stay in the journal); failures are still shown",
                source: "man kernel-command-line(7), systemd(1): systemd.show_status=",
            },
            Fix {
                change: Change::KernelArgs("quiet"),
                risk: Risk::GivesUp,
                gives_up: "the kernel's informational messages leave the console too (they stay in dmesg and the journal); console patterns on them (\"Run /init as init process\") no longer match",
                source: "Documentation/admin-guide/kernel-parameters.txt: quiet; systemd(1): quiet also sets systemd.show_status=auto",
            },
        ],
    },
    Rule {
        id: "initramfs-stage",
        title: "the initramfs stage before the real root",
        detector: Detector::InitramfsStage { min_ns: 50_000_000 },
        needs: &[Need::Units],
        off_with: &[],
        fixes: &[
            Fix {
                change: Change::InVmm(&[
                    opts(VmmKind::Bootscope, &["--initrd", "{initrd_modules}"], &["--initrd"], ""),
                    opts(VmmKind::Qemu, &["-initrd", "{initrd_modules}"], &["-initrd"], ""),
                    opts(VmmKind::CloudHypervisor, &["--initramfs", "{initrd_modules}"], &["--initramfs"], ""),
                    manual(VmmKind::Firecracker, "give the archive with only this boot's modules as boot-source's initrd_path (bootscope advise keeps one in its cache)"),
                ]),
                risk: Risk::Low,
                gives_up: "the initramfs keeps only the modules this boot loaded and what they need (as MODULES=dep would): it boots only hardware like this VM's; one uncompressed cpio archive in bootscope's cache, made from the initrd (named by its SHA-256 and the modules')",
                source: "man initramfs.conf(5): MODULES; Documentation/driver-api/early-userspace/buffer-format.rst; modules.dep(5)",
            },
            Fix {
                change: Change::Advice("include only the modules this machine needs: MODULES=dep in /etc/initramfs-tools/initramfs.conf, then update-initramfs -u (dracut: --hostonly)"),
                risk: Risk::Low,
                gives_up: "the initramfs boots only hardware like this machine's (another disk controller needs MODULES=most again)",
                source: "man initramfs.conf(5): MODULES; man dracut(8): --hostonly",
            },
            Fix {
                change: Change::Advice("boot without an initramfs: a kernel with the root's disk and file system drivers built in (CONFIG_VIRTIO_BLK=y, CONFIG_EXT4_FS=y), root=/dev/vda1 on its command line and no --initrd"),
                risk: Risk::GivesUp,
                gives_up: "no early userspace: no root on LVM, LUKS, RAID or the network, no resume from hibernation, no fsck before the root is mounted (systemd-fsck-root does it after)",
                source: "Documentation/admin-guide/initrd.rst; Documentation/filesystems/ramfs-rootfs-initramfs.rst",
            },
        ],
    },
    Rule {
        id: "workload-behind-default-target",
        title: "the workload waits for the default target's other units",
        detector: Detector::WorkloadBehindTarget { min_ns: 100_000_000 },
        needs: &[Need::Units],
        off_with: &["systemd.unit"],
        fixes: &[
            Fix {
                change: Change::KernelArgs("systemd.unit={unit}"),
                risk: Risk::GivesUp,
                gives_up: "systemd boots to {unit} instead of the default target: it starts {unit} with what it requires and wants (sysinit.target, basic.target, its own Requires= and Wants=), and none of the units only the default target wants (logins, gettys, cron, ssh) in this boot",
                source: "man kernel-command-line(7), systemd(1): systemd.unit=; systemd.special(7): default.target",
            },
            Fix {
                change: Change::Advice("order {unit} after what it uses, not after the default target: in its unit file replace After=multi-user.target with the units it needs (systemctl --root=MOUNTED-IMAGE edit --full {unit})"),
                risk: Risk::Low,
                gives_up: "{unit} starts as soon as what it needs is up, beside the default target's other units instead of after them",
                source: "man systemd.unit(5): After=, Wants=; systemd.special(7): multi-user.target",
            },
        ],
    },
    Rule {
        id: "root-fsck",
        title: "fsck of the root file system at boot",
        detector: Detector::RootFsck,
        needs: &[Need::Units],
        off_with: &["fsck.mode"],
        fixes: &[Fix {
            change: Change::KernelArgs("fsck.mode=skip"),
            risk: Risk::GivesUp,
            gives_up: "the root file system is not checked at boot: damage is found later, or not at all",
            source: "man systemd-fsck@.service(8): fsck.mode=; initramfs-tools honours it too",
        }],
    },
];
