/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Exits collector: types shared with profiler/src/bpf.rs. */
#ifndef BOOTSCOPE_EXITS_H
#define BOOTSCOPE_EXITS_H

/* kvm_exit's `isa` field (arch/x86/kvm/trace.h KVM_ISA_VMX/KVM_ISA_SVM). */
#define BS_ISA_VMX 1
#define BS_ISA_SVM 2
/* VMX: basic exit reason plus the failed-VM-entry bit; the other high bits
 * would only split counts of the same reason. */
#define BS_VMX_REASON_MASK 0x8000ffffu
/* kvm_userspace_exit with errno < 0: code = flag | -errno. */
#define BS_UEXIT_ERRNO_FLAG 0x80000000u

/* kvm:kvm_exit key: an exit's count and its latency (kvm_exit -> next
 * kvm_entry on the same thread) histogram share one entry (struct bs_hist,
 * whose count is the exit count). */
struct bs_exit_key {
	__u32 tgid;
	__u32 vcpu_id;
	__u32 reason;
	__u32 isa;
	__u32 phase;
};

/* Per-thread exit, counted when the thread enters the guest again (or, if
 * no entry closed it, at the next exit; userspace adds the ones still
 * open, ts_ns != 0, when it reads). */
struct bs_exit_start {
	__u64 ts_ns;
	__u32 reason;
	__u32 isa;
	__u32 vcpu_id;
	__u32 phase;
	__u32 tgid;
	__u32 pad;
	/* With exit sites on: the guest RIP of the exit and, for a nested
	 * page fault on SVM, the faulting guest-physical address (else 0). */
	__u64 rip;
	__u64 gpa;
};

/* SVM's exit code of a nested page fault (kvm_exit's info2 is then the
 * faulting guest-physical address). */
#define BS_SVM_EXIT_NPF 0x400
/* The exit codes of an I/O instruction (VMX EXIT_REASON_IO_INSTRUCTION,
 * SVM_EXIT_IOIO): their guest RIP is kept even with exit sites off, for
 * the phases collector to tell who wrote a marker port. */
#define BS_VMX_EXIT_IO 30
#define BS_SVM_EXIT_IOIO 0x7b
/* Nested page faults are counted by guest-physical range of this size
 * (2 MiB, a large page: the kernel's text, its initrd and its page tables
 * fall in different ones). */
#define BS_NPF_RANGE_SHIFT 21

/* Exit-site key: an exit's count and latency by the guest code that made
 * it. Only with exit sites on (const volatile exit_sites). */
struct bs_site_key {
	__u32 tgid;
	__u32 vcpu_id;
	__u32 reason;
	__u32 isa;
	__u32 phase;
	__u32 pad;
	__u64 rip;
};

/* Nested page faults in one guest-physical range: all of them, those whose
 * latency was measured (ended by kvm_entry), and that latency's sum. (An
 * exit site's entry is a struct bs_hist, as its reason's would be.) */
struct bs_site_val {
	__u64 count;
	__u64 timed;
	__u64 total_ns;
};

/* Nested page faults by guest-physical range (gpa >> BS_NPF_RANGE_SHIFT). */
struct bs_npf_key {
	__u32 tgid;
	__u32 phase;
	__u64 range;
};

/* vCPU index -> thread id. */
struct bs_vcpu_key {
	__u32 tgid;
	__u32 vcpu_id;
};

/* kvm:kvm_userspace_exit count key (the PVM fallback's exit reasons). */
struct bs_uexit_key {
	__u32 tgid;
	__u32 tid;
	__u32 code;
	__u32 phase;
};

/* kvm:kvm_pio count key; rw 1 = write (OUT). */
struct bs_pio_key {
	__u32 tgid;
	__u32 port;
	__u32 rw;
	__u32 size;
	__u32 phase;
};

/* kvm:kvm_mmio count key; type 0 unsatisfied read, 1 read, 2 write. */
struct bs_mmio_key {
	__u32 tgid;
	__u32 type;
	__u64 gpa;
};

/* kvm:kvm_msr count key. */
struct bs_msr_key {
	__u32 tgid;
	__u32 msr;
	__u32 write;
	__u32 exception;
};

/* kvm:kvm_cpuid count key. */
struct bs_cpuid_key {
	__u32 tgid;
	__u32 function;
	__u32 index;
	__u32 pad;
};

/* kvm:kvm_emulate_insn count key. */
struct bs_emulate_key {
	__u32 tgid;
	__u32 phase;
	__u32 failed;
};

#endif /* BOOTSCOPE_EXITS_H */
