/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Guest memory collector: types shared with profiler/src/collector/memslots.rs. */
#ifndef BOOTSCOPE_MEMSLOTS_H
#define BOOTSCOPE_MEMSLOTS_H

/* _IOW(KVMIO, 0x46, struct kvm_userspace_memory_region) */
#define BS_KVM_SET_USER_MEMORY_REGION 0x4020ae46u
/* _IOW(KVMIO, 0x49, struct kvm_userspace_memory_region2) */
#define BS_KVM_SET_USER_MEMORY_REGION2 0x40a0ae49u

/* Why a followed VMM was stopped (SIGSTOP) for its memory to be read. */
enum bs_hold_why {
	BS_HOLD_I8042_RESET = 1, /* 0xfe to port 0x64 */
	BS_HOLD_CF9_RESET = 2,   /* the reset bit to port 0xcf9 */
	BS_HOLD_SHUTDOWN = 3,    /* KVM_EXIT_SHUTDOWN (triple fault) */
	BS_HOLD_SYSTEM_EVENT = 4, /* KVM_EXIT_SYSTEM_EVENT */
	BS_HOLD_ACPI_SLEEP = 5,  /* S5 asked of the ACPI sleep registers */
};

/* ACPI sleep: SLP_EN, and the SLP_TYP of S5 as the VMM's \_S5 object
 * gives it, in a PM1 control register (16 bits: SLP_TYP in bits 10-12,
 * SLP_EN bit 13; QEMU's q35 and i440fx give S5 as 0, and QEMU's PM1
 * control powers off on 0) or a hardware-reduced sleep control register
 * (8 bits: SLP_TYP in bits 2-4, SLP_EN bit 5; QEMU microvm's generic
 * event device and Cloud Hypervisor give S5 as 5). */
#define BS_PM1_SLP_EN (1u << 13)
#define BS_PM1_SLP_TYP(v) (((v) >> 10) & 7)
#define BS_SLEEP_CTL_SLP_EN (1u << 5)
#define BS_SLEEP_CTL_SLP_TYP(v) (((v) >> 2) & 7)
#define BS_S5 5
#define BS_S5_QEMU_PM1 0
/* PM1a control: QEMU q35 (ICH9, PM base 0x600) and i440fx (PIIX4, PM
 * base 0xb000). */
#define BS_PM1A_CNT_Q35 0x604
#define BS_PM1A_CNT_PIIX4 0xb004
/* Sleep control: Cloud Hypervisor's port, QEMU microvm's GED register. */
#define BS_SLEEP_CTL_PORT_CH 0x600
#define BS_SLEEP_CTL_MMIO_MICROVM 0xfea00200ULL
/* kvm_mmio's type of a write. */
#define BS_KVM_TRACE_MMIO_WRITE 2

struct bs_memslot_key {
	__u32 tgid;
	__u32 slot;
};

/* The first 32 bytes of both region structs, and when it was set. */
struct bs_memslot {
	__u32 slot;
	__u32 flags;
	__u64 gpa;
	__u64 size;
	__u64 uaddr;
	__u64 ts_ns;
	__u64 calls;
};

struct bs_held {
	__u64 ts_ns;
	__u32 why;
	__u32 signalled;
};

struct bs_memslot_config {
	/* Stop a followed VMM at the exit that ends its guest. */
	__u32 hold_at_shutdown;
	__u32 pad;
};

#endif /* BOOTSCOPE_MEMSLOTS_H */
