//! `bootscope run`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::{parse_seconds, DEFAULT_CMDLINE};

#[derive(clap::Args, Clone)]
pub(crate) struct RunArgs {
    /// Kernel image (bzImage or ELF vmlinux with a PVH note); default: the
    /// Debian kernel with the project's default initramfs.
    #[arg(long)]
    pub(crate) kernel: Option<PathBuf>,
    /// Initial ramdisk.
    #[arg(long)]
    pub(crate) initrd: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, default_value = DEFAULT_CMDLINE)]
    pub(crate) cmdline: String,
    /// Guest memory (e.g. 512M, 2G; a bare number is MiB).
    #[arg(long)]
    pub(crate) memory: Option<String>,
    /// Number of vCPUs [default: 1; with --restore, the snapshot's].
    #[arg(long)]
    pub(crate) vcpus: Option<u32>,
    /// Where the guest console goes: stdout, null or a file path.
    #[arg(long, default_value = "stdout")]
    pub(crate) serial: String,
    /// Write the boot timeline (JSON, schema in docs/timeline-schema.md).
    #[arg(long)]
    pub(crate) timeline: Option<PathBuf>,
    /// Extra console milestone NAME=REGEX (repeatable; a default's name
    /// replaces it).
    #[arg(long = "serial-pattern", value_name = "NAME=REGEX")]
    pub(crate) serial_patterns: Vec<String>,
    /// Do not match the built-in console milestones.
    #[arg(long)]
    pub(crate) no_default_patterns: bool,
    /// Stop the guest after this many seconds (exit status 1).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub(crate) timeout: Option<Duration>,
    /// On a PVM host, run a non-PVM kernel anyway through the instruction
    /// emulator (very slow).
    #[arg(long)]
    pub(crate) allow_emulation: bool,
    /// Do not print the summary table.
    #[arg(long)]
    pub(crate) no_summary: bool,
    /// Show the boot live in a terminal UI (docs/tui.md); a console on
    /// stdout then goes to a file, shown in a pane.
    #[arg(long)]
    pub(crate) tui: bool,
    /// Refresh the terminal UI this often, in milliseconds (up to a minute).
    #[arg(long, default_value_t = crate::live_tui::DEFAULT_REFRESH_MS,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub(crate) refresh_ms: u64,
    /// Map the initrd from its file (copy-on-write) instead of copying it
    /// into guest RAM: VMs started from one image then share its page
    /// cache, at the price of a nested page fault per 4 KiB page the guest
    /// reads or frees (a copy sits in huge pages).
    #[arg(long)]
    pub(crate) map_initrd: bool,
    /// Boot a bzImage the classic way: its own decompressor runs in the
    /// guest (with KASLR, if the kernel has it). By default the VMM
    /// decompresses the kernel on the host, keeps it in
    /// ~/.cache/bootscope/kernels, and enters it directly.
    #[arg(long)]
    pub(crate) guest_decompress: bool,
    /// A guest NUMA node bound to host nodes (repeatable):
    /// node=ID,cpus=LIST,memory=SIZE,host-nodes=LIST,policy=bind|preferred|interleave
    #[arg(long = "numa", value_name = "SPEC")]
    pub(crate) numa: Vec<String>,
    /// Preallocate (fault in) all guest memory before boot.
    #[arg(long)]
    pub(crate) prealloc: bool,
    /// Preallocation threads per region.
    #[arg(long, default_value_t = 1)]
    pub(crate) prealloc_threads: usize,
    /// CPUs for the preallocation thread contexts (default: the CPUs of the
    /// region's host nodes).
    #[arg(long, value_name = "LIST")]
    pub(crate) prealloc_cpus: Option<String>,
    /// Back guest memory with huge pages from the hugetlb pool: 2M or 1G.
    #[arg(long, value_name = "SIZE")]
    pub(crate) hugepages: Option<String>,
    /// Require transparent huge pages (madvise) on guest memory; fail where
    /// the host has them off. By default guest memory is advised whenever
    /// the host's THP mode allows it.
    #[arg(long, conflicts_with = "no_thp")]
    pub(crate) thp: bool,
    /// Back guest memory with base pages only (no MADV_HUGEPAGE).
    #[arg(long)]
    pub(crate) no_thp: bool,
    /// After set-up, install a seccomp filter that denies what a running VMM
    /// does not need (including changing CPU affinity).
    #[arg(long)]
    pub(crate) sandbox: bool,
    /// Give the guest no ACPI tables (MP table only): it then probes for an
    /// i8042 controller and can only halt, not power off.
    #[arg(long)]
    pub(crate) no_acpi: bool,
    /// Run only the set-up phases and report their timeline: memory or load.
    #[arg(long, value_name = "PHASE")]
    pub(crate) stop_after: Option<String>,
    /// Do not profile the VMM with eBPF (on by default where BPF works).
    #[arg(long)]
    pub(crate) no_profile: bool,
    /// Profile the VMM with eBPF and fail if the profiler cannot start
    /// (by default a run without BPF goes on unprofiled, with a warning).
    #[arg(long, conflicts_with = "no_profile")]
    pub(crate) profile: bool,
    /// Write the eBPF profile of the run (schema in docs/profile-schema.md).
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "no_profile")]
    pub(crate) output: Option<PathBuf>,
    /// Have the kernel count and time every run of the eBPF programs
    /// (`sources[].runs`, `run_ns` in the profile).
    #[arg(long, conflicts_with = "no_profile")]
    pub(crate) bpf_stats: bool,
    /// Profile with these collectors only (comma-separated: exits, faults,
    /// threads, numa, phases, sched, tail; all; default all but sched, the
    /// run-queue waits of the VMM's threads, and tail, a restore's page-fault
    /// tail, on for restores only): each one left out is eBPF
    /// programs not run on its events. exit-counts: the exits without their
    /// latency (one program per exit instead of two). tail-total: the tail
    /// with its guest faults also counted over the VM's life (a program on
    /// every guest fault after the window too: for checks against KVM's
    /// own statistics).
    #[arg(long, value_name = "LIST", value_parser = bootscope_profiler::CollectorSet::parse, conflicts_with = "no_profile")]
    pub(crate) collect: Option<bootscope_profiler::CollectorSet>,
    /// Count exits by the guest code that made them (`exits.sites`), named
    /// with the guest kernel's symbols.
    #[arg(long, conflicts_with = "no_profile")]
    pub(crate) exit_sites: bool,
    /// The guest kernel's symbols for --exit-sites: a vmlinux, a bzImage,
    /// a System.map or a kallsyms dump (default: the kernel booted).
    #[arg(long, value_name = "PATH", requires = "exit_sites")]
    pub(crate) guest_symbols: Option<PathBuf>,
    /// Record every kernel initcall (name, level, start, duration) as
    /// sub-phases of `kernel`: the kernel logs them below the console's log
    /// level and bootscope reads its log from guest memory at shutdown
    /// (docs/initcalls.md).
    #[arg(long, conflicts_with = "stop_after")]
    pub(crate) initcalls: bool,
    /// How --initcalls records them: `trace`, the kernel's initcall
    /// tracepoints into its trace buffer (needs the kernel's BTF and symbol
    /// table, which bootscope reads from the image after the boot), or
    /// `log`, `initcall_debug`'s lines into its printk log (any kernel with
    /// VMCOREINFO; costs the boot more).
    #[arg(long, value_enum, default_value = "trace", requires = "initcalls")]
    pub(crate) initcalls_method: InitcallMethod,
    /// The systemd unit the critical chain ends at (the guest's workload,
    /// such as myapp.service), for an image whose workload is not
    /// bootscope-workload.service nor the unit that writes the port 0x80
    /// marker; default: that unit, else the default target.
    #[arg(long, value_name = "UNIT", value_parser = crate::common::parse_unit_name, requires = "disks")]
    pub(crate) workload_unit: Option<String>,
    #[command(flatten)]
    pub(crate) devices: crate::device_args::DeviceArgs,
    #[command(flatten)]
    pub(crate) snapshot: Box<crate::snapshot_args::SnapshotArgs>,
}

/// `run --initcalls-method`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum InitcallMethod {
    Trace,
    Log,
}
