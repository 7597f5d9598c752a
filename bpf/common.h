/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Types and constants shared by every collector and by the Rust side.
 * profiler/src/bpf.rs mirrors each struct (#[repr(C)], size-checked at
 * compile time); change both together and bump BS_ABI_VERSION.
 */
#ifndef BOOTSCOPE_COMMON_H
#define BOOTSCOPE_COMMON_H

#define BS_ABI_VERSION 11

#define BS_COMM_LEN 16
/* log2 latency slots: slot i holds values in [2^i, 2^(i+1)) ns, slot 0 also
 * holds 0; the last slot holds everything from 2^31 ns (about 2.1 s) up. */
#define BS_HIST_SLOTS 32

/* One tracepoint field as its tracefs format file describes it. Userspace
 * fills these before load (const volatile globals); size 0 means the field
 * does not exist on this kernel and reads as 0. */
struct bs_field {
	__u32 off;
	__u32 size;
};

/* Fields the hot programs load straight from their record (BS_CTX in
 * common.bpf.h). Each such load is compiled with a placeholder offset,
 * BS_PATCH_BASE + its slot below, and userspace rewrites the instruction
 * before load: the field's offset from the format file and a load of the
 * field's width, or `dst = 0` for a field this kernel lacks
 * (profiler/src/patch.rs, whose PATCH_SLOTS lists the same fields in the
 * same order). */
#define BS_PATCH_BASE 0x7e00

enum bs_patch_slot {
	BS_P_KVM_EXIT_EXIT_REASON,
	BS_P_KVM_EXIT_ISA,
	BS_P_KVM_EXIT_VCPU_ID,
	BS_P_KVM_USERSPACE_EXIT_REASON,
	BS_P_KVM_USERSPACE_EXIT_ERRNO,
	BS_P_KVM_PIO_RW,
	BS_P_KVM_PIO_PORT,
	BS_P_KVM_PIO_SIZE,
	BS_P_KVM_PIO_VAL,
	BS_P_KVM_MMIO_TYPE,
	BS_P_KVM_MMIO_GPA,
	BS_P_KVM_MSR_WRITE,
	BS_P_KVM_MSR_ECX,
	BS_P_KVM_MSR_EXCEPTION,
	BS_P_KVM_CPUID_FUNCTION,
	BS_P_KVM_CPUID_INDEX,
	BS_P_KVM_EMULATE_INSN_FAILED,
	BS_P_MM_PAGE_ALLOC_PFN,
	BS_P_MM_PAGE_ALLOC_ORDER,
	BS_P_KVM_EXIT_GUEST_RIP,
	BS_P_KVM_EXIT_INFO2,
	BS_P_SCHED_WAKEUP_PID,
	BS_P_SCHED_WAKEUP_NEW_PID,
	BS_P_SCHED_SWITCH_PREV_STATE,
	BS_P_SCHED_SWITCH_NEXT_PID,
	BS_P_KVM_MMIO_LEN,
	BS_P_KVM_MMIO_VAL,
	BS_P_COUNT,
};

/* The process being profiled, in an array map (one slot): its lookup is
 * inlined by the verifier, so events of the target cost no hash lookup.
 * Descendants are in `followed`. */
struct bs_target {
	__u32 tgid; /* 0: none (ended) */
	__u32 phase;
};

/* Index of each tracepoint program in the per-CPU `source_events` counter
 * array: how many events of followed processes each one saw. The programs
 * that run on every exit, fault, switch or allocation keep no counter there
 * (userspace sums what they counted); the index still names them. */
enum bs_source {
	BS_SRC_KVM_EXIT = 0,
	BS_SRC_KVM_ENTRY = 1,
	BS_SRC_KVM_USERSPACE_EXIT = 2,
	BS_SRC_KVM_PIO = 3,
	BS_SRC_KVM_MMIO = 4,
	BS_SRC_KVM_MSR = 5,
	BS_SRC_KVM_CPUID = 6,
	BS_SRC_KVM_EMULATE_INSN = 7,
	BS_SRC_KVM_PAGE_FAULT = 8,
	BS_SRC_KVMMMU_SPTE_REQUESTED = 9,
	BS_SRC_KVMMMU_MMIO_PAGE_FAULT = 10,
	BS_SRC_PAGE_FAULT_USER = 11,
	BS_SRC_PAGE_FAULT_KERNEL = 12,
	BS_SRC_SCHED_SWITCH = 13,
	BS_SRC_SCHED_PROCESS_FORK = 14,
	BS_SRC_TASK_NEWTASK = 15,
	BS_SRC_TASK_RENAME = 16,
	BS_SRC_SCHED_PROCESS_EXIT = 17,
	BS_SRC_MM_PAGE_ALLOC = 18,
	BS_SRC_MARKER_PIO = 19,
	BS_SRC_SCHED_WAKEUP = 20,
	BS_SRC_SCHED_WAKEUP_NEW = 21,
	BS_SRC_SCHED_WAIT_SWITCH = 22,
	/* The fault-tail collector (tail.bpf.c). */
	BS_SRC_TAIL_WALK = 23,
	BS_SRC_TAIL_NPF = 24,
	BS_SRC_TAIL_SPTE = 25,
	BS_SRC_TAIL_FILEMAP_FAULT = 26,
	BS_SRC_TAIL_FILEMAP_MAP = 27,
	BS_SRC_TAIL_EXC_USER = 28,
	BS_SRC_TAIL_EXC_KERNEL = 29,
	BS_SRC_TAIL_SPTE_ALL = 30,
	BS_SRC_COUNT = 31,
};

/* What a ring buffer record reports. */
enum bs_event_kind {
	/* A guest write to a marker port: arg0 = port, value and whether
	 * arg1 is the guest RIP of the write (phases.h). */
	BS_EV_MARK = 1,
	/* A new task of a followed process: arg0 = parent tid,
	 * arg1 = clone flags (BS_CLONE_FLAGS_UNKNOWN when only the fork
	 * tracepoint was available). */
	BS_EV_TASK_NEW = 2,
	/* A task got a new name (prctl, /proc/TID/comm, exec). */
	BS_EV_TASK_RENAME = 3,
	/* A task ended: arg0 = its exit code, arg1 = 1 if it was the last of
	 * its process. */
	BS_EV_TASK_EXIT = 4,
	/* A process not followed before ran a KVM guest (follow_any_vm):
	 * followed from this event on; comm = the thread's name. */
	BS_EV_VM_NEW = 5,
	/* A line the guest wrote to its serial port (phases.bpf.c): ts_ns =
	 * its last byte ('\n'), arg0 = the bpf_ktime_get_ns() of its first
	 * byte, arg1 = its length in bytes, comm = its first 16 bytes. */
	BS_EV_SERIAL_LINE = 6,
	/* A followed VMM was stopped at its guest's end (memslots.bpf.c's
	 * hold; the record is in held_vmms): userspace reads it at once. */
	BS_EV_HELD = 7,
};

#define BS_CLONE_FLAGS_UNKNOWN 0xffffffffffffffffULL

/* One ring buffer record (56 bytes). */
struct bs_event {
	__u32 kind;
	__u32 tgid;
	__u32 tid;
	__u32 cpu;
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 arg0;
	__u64 arg1;
	char comm[BS_COMM_LEN];
};

/* Per-time-slot counts (`run --initcalls`: time_slot_ns set before load):
 * each exit and fault is also counted by the slot of its time,
 * slot = (bpf_ktime_get_ns() - time_slot_base_ns) / time_slot_ns, so that
 * any interval of the boot (an initcall) can be given its own counts. */
enum bs_slot_kind {
	/* kvm:kvm_exit: code = exit reason, isa = kvm_exit's isa. */
	BS_SLOT_EXIT = 0,
	/* kvm:kvm_userspace_exit (the PVM fallback): code as in
	 * struct bs_uexit_key. */
	BS_SLOT_UEXIT = 1,
	/* A page fault: code = enum bs_fault_kind. */
	BS_SLOT_FAULT = 2,
	BS_SLOT_KINDS = 3,
};

/* Slots are counted in runs of BS_SLOT_RUN: one map entry per run, kind,
 * code and isa, so that a new entry is made once per run (3.2 ms at
 * 100 us slots) and not for almost every exit. */
#define BS_SLOT_RUN 32

struct bs_slot_key {
	/* The run's first slot (a multiple of BS_SLOT_RUN). */
	__u32 slot;
	__u32 kind;
	__u32 code;
	__u32 isa;
};

/* Counts of the run's slots: n[i] is slot (key.slot + i). */
struct bs_slot_run {
	__u32 n[BS_SLOT_RUN];
};

/* A log2 histogram of nanoseconds, updated with atomic adds. */
struct bs_hist {
	__u64 slots[BS_HIST_SLOTS];
	__u64 count;
	__u64 total_ns;
};

#endif /* BOOTSCOPE_COMMON_H */
