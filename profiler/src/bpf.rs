//! The compiled BPF object and the Rust mirrors of the types in `bpf/*.h`.
//!
//! One definition each: the C headers are the source, these mirrors are
//! `#[repr(C)]` with their sizes checked at compile time, and
//! [`BS_ABI_VERSION`] changes with them.

use aya::Pod;

pub mod tail;

/// The collectors, compiled and linked by build.rs, embedded once.
pub static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bootscope.bpf.o"));

/// `BS_ABI_VERSION` in bpf/common.h.
pub const BS_ABI_VERSION: u32 = 11;
pub const COMM_LEN: usize = 16;
pub const HIST_SLOTS: usize = bootscope_model::hist::HIST_SLOTS;
pub const MAX_PFN_RANGES: usize = 64;
pub const MAX_CPUS: u32 = 1024;
pub const NODE_UNKNOWN: u32 = u32::MAX;
pub const CLONE_THREAD: u64 = 0x0001_0000;
pub const CLONE_FLAGS_UNKNOWN: u64 = u64::MAX;

/// Ring buffer record kinds (`enum bs_event_kind`).
pub mod event_kind {
    pub const MARK: u32 = 1;
    pub const TASK_NEW: u32 = 2;
    pub const TASK_RENAME: u32 = 3;
    pub const TASK_EXIT: u32 = 4;
    pub const VM_NEW: u32 = 5;
    pub const SERIAL_LINE: u32 = 6;
    pub const HELD: u32 = 7;
}

/// Fault kinds (`enum bs_fault_kind`).
pub mod fault_kind {
    pub const GUEST: u32 = 0;
    pub const GUEST_MAP: u32 = 1;
    pub const GUEST_MMIO: u32 = 2;
    pub const HOST_USER: u32 = 3;
    pub const HOST_KERNEL: u32 = 4;
}

/// Per-time-slot count kinds (`enum bs_slot_kind`).
pub mod slot_kind {
    pub const EXIT: u32 = 0;
    pub const UEXIT: u32 = 1;
    pub const FAULT: u32 = 2;
    pub const KINDS: u32 = 3;
}

/// Which collector a program belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectorKind {
    Exits,
    /// The exits collector's latency (kvm_entry): left out by
    /// `--collect exit-counts`.
    ExitLatency,
    Faults,
    Threads,
    Numa,
    Phases,
    /// Run-queue waits (`--collect sched`).
    Sched,
    /// The page-fault tail of a restore (`--collect tail`; on by default
    /// for a restore).
    Tail,
    /// The tail's count of guest faults over the VM's life, a program on
    /// every guest fault for as long as the VM runs (`--collect
    /// tail-total`): for cross-checks against KVM's own statistics.
    TailTotal,
}

/// Index into `source_events` (`enum bs_source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum Source {
    KvmExit = 0,
    KvmEntry = 1,
    KvmUserspaceExit = 2,
    KvmPio = 3,
    KvmMmio = 4,
    KvmMsr = 5,
    KvmCpuid = 6,
    KvmEmulateInsn = 7,
    KvmPageFault = 8,
    KvmmmuSpteRequested = 9,
    KvmmmuMmioPageFault = 10,
    PageFaultUser = 11,
    PageFaultKernel = 12,
    SchedSwitch = 13,
    SchedProcessFork = 14,
    TaskNewtask = 15,
    TaskRename = 16,
    SchedProcessExit = 17,
    MmPageAlloc = 18,
    MarkerPio = 19,
    SchedWakeup = 20,
    SchedWakeupNew = 21,
    SchedWaitSwitch = 22,
    TailWalk = 23,
    TailNpf = 24,
    TailSpte = 25,
    TailFilemapFault = 26,
    TailFilemapMap = 27,
    TailExcUser = 28,
    TailExcKernel = 29,
    TailSpteAll = 30,
}

/// `BS_SRC_COUNT`.
pub const SOURCE_COUNT: usize = 31;

/// One BPF program: the tracepoint it attaches to and the fields it reads
/// (each becomes the global `EVENT__FIELD`).
#[derive(Clone, Copy, Debug)]
pub struct ProgramSpec {
    pub program: &'static str,
    pub system: &'static str,
    pub event: &'static str,
    pub source: Source,
    pub collector: CollectorKind,
    /// Fields it reads; all must exist for the program to be attached.
    pub fields: &'static [&'static str],
    /// Fields it reads when present (older kernels may lack them).
    pub optional_fields: &'static [&'static str],
    /// What it feeds in the profile.
    pub feeds: &'static str,
}

impl ProgramSpec {
    /// `tracepoint:SYSTEM:EVENT`, the name used in `sources[]`.
    pub fn source_name(&self) -> String {
        format!("tracepoint:{}:{}", self.system, self.event)
    }
}

macro_rules! spec {
    ($prog:literal, $sys:literal, $ev:literal, $src:ident, $col:ident, [$($f:literal),*], [$($o:literal),*], $feeds:literal) => {
        ProgramSpec {
            program: $prog,
            system: $sys,
            event: $ev,
            source: Source::$src,
            collector: CollectorKind::$col,
            fields: &[$($f),*],
            optional_fields: &[$($o),*],
            feeds: $feeds,
        }
    };
}

/// Every program in [`OBJECT`], in attach order (threads first, so that
/// children are followed before anything else of theirs is counted).
#[rustfmt::skip]
pub const PROGRAMS: &[ProgramSpec] = &[
    spec!("bs_task_newtask", "task", "task_newtask", TaskNewtask, Threads, ["pid", "comm", "clone_flags"], [], "threads (new threads and child processes, names at birth)"),
    spec!("bs_sched_process_fork", "sched", "sched_process_fork", SchedProcessFork, Threads, ["child_pid"], [], "counted; follows children only when task_newtask is missing"),
    spec!("bs_task_rename", "task", "task_rename", TaskRename, Threads, ["pid", "newcomm"], [], "threads[].name"),
    spec!("bs_sched_process_exit", "sched", "sched_process_exit", SchedProcessExit, Threads, [], ["group_dead"], "threads[].end_ns, exit_code; target.ended_ns"),
    spec!("bs_sched_switch", "sched", "sched_switch", SchedSwitch, Threads, [], [], "threads[].cpus (run time per CPU)"),
    spec!("bs_kvm_exit", "kvm", "kvm_exit", KvmExit, Exits, ["exit_reason", "vcpu_id"], ["isa", "guest_rip", "info2"], "exits.by_reason/by_vcpu/by_phase (VMX/SVM); exits.sites with --exit-sites"),
    spec!("bs_kvm_entry", "kvm", "kvm_entry", KvmEntry, ExitLatency, [], [], "exits.by_reason[].latency_hist (exit to next entry)"),
    spec!("bs_kvm_userspace_exit", "kvm", "kvm_userspace_exit", KvmUserspaceExit, Exits, ["reason", "errno"], [], "exits.by_reason when kvm_exit does not fire (PVM)"),
    spec!("bs_kvm_pio", "kvm", "kvm_pio", KvmPio, Exits, ["rw", "port", "size"], [], "exits.pio"),
    spec!("bs_kvm_mmio", "kvm", "kvm_mmio", KvmMmio, Exits, ["type", "gpa"], ["len", "val"], "exits.mmio"),
    spec!("bs_kvm_msr", "kvm", "kvm_msr", KvmMsr, Exits, ["write", "ecx"], ["exception"], "exits.msr"),
    spec!("bs_kvm_cpuid", "kvm", "kvm_cpuid", KvmCpuid, Exits, ["function", "index"], [], "exits.cpuid"),
    spec!("bs_kvm_emulate_insn", "kvm", "kvm_emulate_insn", KvmEmulateInsn, Exits, [], ["failed"], "exits.emulated_instructions"),
    spec!("bs_marker_pio", "kvm", "kvm_pio", MarkerPio, Phases, ["rw", "port", "size", "val"], [], "exits.marker_writes, marks (ports 0x80, 0xf4)"),
    spec!("bs_kvm_page_fault", "kvm", "kvm_page_fault", KvmPageFault, Faults, [], [], "page_faults.guest_total (VMX/SVM)"),
    spec!("bs_kvmmmu_spte_requested", "kvmmmu", "kvm_mmu_spte_requested", KvmmmuSpteRequested, Faults, [], [], "page_faults.guest_total when kvm_page_fault does not fire"),
    spec!("bs_kvmmmu_mmio_page_fault", "kvmmmu", "handle_mmio_page_fault", KvmmmuMmioPageFault, Faults, [], [], "page_faults.guest_mmio"),
    spec!("bs_page_fault_user", "exceptions", "page_fault_user", PageFaultUser, Faults, [], [], "page_faults.host_user"),
    spec!("bs_page_fault_kernel", "exceptions", "page_fault_kernel", PageFaultKernel, Faults, [], [], "page_faults.host_kernel"),
    spec!("bs_mm_page_alloc", "kmem", "mm_page_alloc", MmPageAlloc, Numa, ["pfn", "order"], [], "numa, threads[].pages_*"),
    spec!("bs_sched_wakeup", "sched", "sched_wakeup", SchedWakeup, Sched, ["pid"], [], "threads[].runqueue_wait (a wait starts when a thread is woken)"),
    spec!("bs_sched_wakeup_new", "sched", "sched_wakeup_new", SchedWakeupNew, Sched, ["pid"], [], "threads[].runqueue_wait (new threads, from their first queueing)"),
    spec!("bs_sched_wait_switch", "sched", "sched_switch", SchedWaitSwitch, Sched, ["prev_state", "next_pid"], [], "threads[].runqueue_wait (a wait ends at the switch in; a preempted thread waits again)"),
    spec!("bs_tail_walk", "kvmmmu", "kvm_mmu_pagetable_walk", TailWalk, Tail, [], [], "fault_tail (a guest fault's service begins: the shadow MMU's walk, PVM)"),
    spec!("bs_tail_npf", "kvm", "kvm_page_fault", TailNpf, Tail, [], [], "fault_tail (a guest fault's service begins: EPT violation or NPF, VMX/SVM)"),
    spec!("bs_tail_spte", "kvmmmu", "kvm_mmu_spte_requested", TailSpte, Tail, ["gfn"], [], "fault_tail (a guest fault served in the window: kind, service time, region, site, page)"),
    spec!("bs_tail_filemap_fault", "filemap", "mm_filemap_fault", TailFilemapFault, Tail, [], [], "fault_tail kinds (file-backed)"),
    spec!("bs_tail_filemap_map", "filemap", "mm_filemap_map_pages", TailFilemapMap, Tail, [], [], "fault_tail kinds (file-backed, fault-around)"),
    spec!("bs_tail_exc_user", "exceptions", "page_fault_user", TailExcUser, Tail, [], [], "fault_tail.host (the VM's own threads' faults in the window)"),
    spec!("bs_tail_exc_kernel", "exceptions", "page_fault_kernel", TailExcKernel, Tail, [], [], "fault_tail.host (kernel-mode faults of the VM's threads in the window)"),
    spec!("bs_tail_spte_all", "kvmmmu", "kvm_mmu_spte_requested", TailSpteAll, TailTotal, [], [], "fault_tail.guest_faults_total (every guest fault served, window or not; stays attached after the window)"),
];

/// `struct bs_field`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsField {
    pub off: u32,
    pub size: u32,
}

/// `struct bs_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsEvent {
    pub kind: u32,
    pub tgid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub ts_ns: u64,
    pub arg0: u64,
    pub arg1: u64,
    pub comm: [u8; COMM_LEN],
}

impl BsEvent {
    /// Reads a record from ring buffer bytes (None if too short).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: the slice holds at least size_of::<BsEvent>() bytes, the
        // read is unaligned-safe, and every bit pattern is a valid BsEvent
        // (integers and a byte array only).
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Self>()) })
    }

    /// The task name, up to its NUL.
    pub fn comm(&self) -> String {
        comm_to_string(&self.comm)
    }
}

/// A NUL-padded kernel task name as a string.
pub fn comm_to_string(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// `struct bs_hist`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsHist {
    pub slots: [u64; HIST_SLOTS],
    pub count: u64,
    pub total_ns: u64,
}

impl BsHist {
    /// Adds another histogram's counts into this one.
    pub fn add(&mut self, other: &BsHist) {
        bootscope_model::hist::add_slots(&mut self.slots, &other.slots);
        self.count = self.count.saturating_add(other.count);
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
    }
}

/// `struct bs_exit_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BsExitKey {
    pub tgid: u32,
    pub vcpu_id: u32,
    pub reason: u32,
    pub isa: u32,
    pub phase: u32,
}

/// `struct bs_exit_start`: a thread's last exit; `ts_ns != 0` while no
/// kvm_entry has ended (and counted) it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsExitStart {
    pub ts_ns: u64,
    pub reason: u32,
    pub isa: u32,
    pub vcpu_id: u32,
    pub phase: u32,
    pub tgid: u32,
    pub pad: u32,
    pub rip: u64,
    pub gpa: u64,
}

/// `BS_NPF_RANGE_SHIFT`: nested page faults are counted by guest-physical
/// ranges of this many bits.
pub const NPF_RANGE_SHIFT: u32 = 21;

/// `struct bs_site_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BsSiteKey {
    pub tgid: u32,
    pub vcpu_id: u32,
    pub reason: u32,
    pub isa: u32,
    pub phase: u32,
    pub pad: u32,
    pub rip: u64,
}

/// `struct bs_site_val`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsSiteVal {
    pub count: u64,
    pub timed: u64,
    pub total_ns: u64,
}

/// `struct bs_npf_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsNpfKey {
    pub tgid: u32,
    pub phase: u32,
    pub range: u64,
}

/// `struct bs_vcpu_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsVcpuKey {
    pub tgid: u32,
    pub vcpu_id: u32,
}

/// `struct bs_uexit_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsUexitKey {
    pub tgid: u32,
    pub tid: u32,
    pub code: u32,
    pub phase: u32,
}

/// `struct bs_pio_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsPioKey {
    pub tgid: u32,
    pub port: u32,
    pub rw: u32,
    pub size: u32,
    pub phase: u32,
}

/// `struct bs_mmio_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsMmioKey {
    pub tgid: u32,
    pub kind: u32,
    pub gpa: u64,
}

/// `struct bs_msr_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsMsrKey {
    pub tgid: u32,
    pub msr: u32,
    pub write: u32,
    pub exception: u32,
}

/// `struct bs_cpuid_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsCpuidKey {
    pub tgid: u32,
    pub function: u32,
    pub index: u32,
    pub pad: u32,
}

/// `struct bs_emulate_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsEmulateKey {
    pub tgid: u32,
    pub phase: u32,
    pub failed: u32,
}

/// `struct bs_marker_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsMarkerKey {
    pub tgid: u32,
    pub port: u32,
    pub value: u32,
}

/// A mark event's `arg0` (bpf/phases.h): the port in bits 0-15, this
/// flag when `arg1` is the guest RIP of the write, the value in bits 32-63.
pub const MARK_RIP_KNOWN: u64 = 1 << 16;
/// ... and this one on the mark of the first port I/O the guest's kernel
/// made (any port, no value).
pub const MARK_KERNEL_FIRST: u64 = 1 << 17;

/// The `mark_phases` table (bpf/phases.h): a slot per {port 0x80, who
/// wrote it (0 unknown, 1 below the kernel half, 2 in it), value}, per
/// port 0xf4 value, and one for the first port I/O of the guest's kernel.
pub const MARK_SLOTS: u32 = 4 * 256 + 1;
/// The slot of the first port I/O of the guest's kernel.
pub const MARK_SLOT_KERNEL_FIRST: u32 = 4 * 256;
/// The slot of a port 0x80 write of `value` by `who`.
pub const fn mark_slot_debug(who: u32, value: u8) -> u32 {
    who * 256 + value as u32
}
/// The slot of a port 0xf4 write of `value`.
pub const fn mark_slot_boot_time(value: u8) -> u32 {
    3 * 256 + value as u32
}
/// A slot's value: the phase index + 1 in bits 0-15, the boot rank from
/// bit 16 (`BS_MARK_RANK_SHIFT`); 0 opens nothing.
pub const MARK_RANK_SHIFT: u32 = 16;

/// `struct bs_phase_state`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsPhaseState {
    pub reached: u32,
    pub pad: u32,
    pub switched_ns: u64,
}

/// `struct bs_marker_last_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsMarkerLastKey {
    pub tgid: u32,
    pub port: u32,
}

/// `struct bs_fault_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsFaultKey {
    pub tgid: u32,
    pub tid: u32,
    pub phase: u32,
    pub kind: u32,
}

/// `struct bs_slot_key`: `slot` is the first slot of a run of
/// [`SLOT_RUN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BsSlotKey {
    pub slot: u32,
    pub kind: u32,
    pub code: u32,
    pub isa: u32,
}

/// `BS_SLOT_RUN`: slots counted in one map entry.
pub const SLOT_RUN: usize = 32;

/// `struct bs_slot_run`: `n[i]` counts slot `key.slot + i`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsSlotRun {
    pub n: [u32; SLOT_RUN],
}

/// `struct bs_run_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsRunKey {
    pub tid: u32,
    pub cpu: u32,
}

/// `struct bs_run_val`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsRunVal {
    pub run_ns: u64,
    pub slices: u64,
    pub tgid: u32,
    pub pad: u32,
}

/// `struct bs_sched_task`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsSchedTask {
    pub tgid: u32,
    pub pad: u32,
    pub queued_ns: u64,
    pub pending_ns: u64,
}

/// `struct bs_sched_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BsSchedKey {
    pub tgid: u32,
    pub tid: u32,
    pub phase: u32,
}

/// `struct bs_target`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsTarget {
    pub tgid: u32,
    pub phase: u32,
}

/// `struct bs_pfn_range`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsPfnRange {
    pub start_pfn: u64,
    pub end_pfn: u64,
    pub node: u32,
    pub pad: u32,
}

/// `struct bs_numa_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BsNumaKey {
    pub tgid: u32,
    pub tid: u32,
    pub page_node: u32,
    pub cpu_node: u32,
}

/// `struct bs_numa_val`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsNumaVal {
    pub pages: u64,
    pub allocs: u64,
}

// The C structs' sizes (no implicit padding anywhere).
const _: () = assert!(size_of::<BsField>() == 8);
const _: () = assert!(size_of::<BsEvent>() == 56);
const _: () = assert!(size_of::<BsHist>() == 8 * (HIST_SLOTS + 2));
const _: () = assert!(size_of::<BsExitKey>() == 20);
const _: () = assert!(size_of::<BsExitStart>() == 48);
const _: () = assert!(size_of::<BsSiteKey>() == 32);
const _: () = assert!(size_of::<BsSiteVal>() == 24);
const _: () = assert!(size_of::<BsNpfKey>() == 16);
const _: () = assert!(size_of::<BsVcpuKey>() == 8);
const _: () = assert!(size_of::<BsUexitKey>() == 16);
const _: () = assert!(size_of::<BsPioKey>() == 20);
const _: () = assert!(size_of::<BsMmioKey>() == 16);
const _: () = assert!(size_of::<BsMsrKey>() == 16);
const _: () = assert!(size_of::<BsCpuidKey>() == 16);
const _: () = assert!(size_of::<BsEmulateKey>() == 12);
const _: () = assert!(size_of::<BsMarkerKey>() == 12);
const _: () = assert!(size_of::<BsFaultKey>() == 16);
const _: () = assert!(size_of::<BsSlotKey>() == 16);
const _: () = assert!(size_of::<BsSlotRun>() == 128);
const _: () = assert!(size_of::<BsRunKey>() == 8);
const _: () = assert!(size_of::<BsMarkerLastKey>() == 8);
const _: () = assert!(size_of::<BsRunVal>() == 24);
const _: () = assert!(size_of::<BsPfnRange>() == 24);
const _: () = assert!(size_of::<BsTarget>() == 8);
const _: () = assert!(size_of::<BsPhaseState>() == 16);
const _: () = assert!(size_of::<BsNumaKey>() == 16);
const _: () = assert!(size_of::<BsNumaVal>() == 16);
const _: () = assert!(size_of::<BsSchedTask>() == 24);
const _: () = assert!(size_of::<BsSchedKey>() == 12);

macro_rules! pod {
    ($($t:ty),*) => {
        $(
            // SAFETY: a #[repr(C)] struct of integers (and byte arrays) with
            // no padding (sizes asserted above): every bit pattern is valid
            // and it can be copied to and from the kernel as bytes.
            unsafe impl Pod for $t {}
        )*
    };
}

pod!(
    BsPhaseState,
    BsField,
    BsEvent,
    BsHist,
    BsExitKey,
    BsExitStart,
    BsSiteKey,
    BsSiteVal,
    BsNpfKey,
    BsVcpuKey,
    BsUexitKey,
    BsPioKey,
    BsMmioKey,
    BsMsrKey,
    BsCpuidKey,
    BsEmulateKey,
    BsMarkerKey,
    BsMarkerLastKey,
    BsFaultKey,
    BsSlotKey,
    BsSlotRun,
    BsRunKey,
    BsRunVal,
    BsPfnRange,
    BsTarget,
    BsNumaKey,
    BsNumaVal,
    BsSchedTask,
    BsSchedKey
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_from_bytes() {
        let mut b = vec![0u8; 56];
        b[0..4].copy_from_slice(&2u32.to_ne_bytes());
        b[8..12].copy_from_slice(&77u32.to_ne_bytes());
        b[40..51].copy_from_slice(b"touch_pages");
        let e = BsEvent::from_bytes(&b).unwrap();
        assert_eq!((e.kind, e.tid), (event_kind::TASK_NEW, 77));
        assert_eq!(e.comm(), "touch_pages");
        assert!(BsEvent::from_bytes(&b[..55]).is_none());
    }

    #[test]
    fn program_table_is_consistent() {
        let mut seen = std::collections::HashSet::new();
        for p in PROGRAMS {
            assert!(seen.insert(p.program), "{} twice", p.program);
            assert!((p.source as usize) < SOURCE_COUNT);
        }
        assert_eq!(PROGRAMS.len(), SOURCE_COUNT);
        assert_eq!(comm_to_string(b"abc\0\0def"), "abc");
    }
}
