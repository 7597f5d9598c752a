/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Page faults collector: types shared with profiler/src/bpf.rs. */
#ifndef BOOTSCOPE_FAULTS_H
#define BOOTSCOPE_FAULTS_H

enum bs_fault_kind {
	/* kvm:kvm_page_fault: a guest fault KVM handles (EPT violation/NPF). */
	BS_FAULT_GUEST = 0,
	/* kvmmmu:kvm_mmu_spte_requested: KVM's MMU maps a guest page. */
	BS_FAULT_GUEST_MAP = 1,
	/* kvmmmu:handle_mmio_page_fault: a guest access to emulated MMIO. */
	BS_FAULT_GUEST_MMIO = 2,
	/* exceptions:page_fault_user: a host fault in user mode. */
	BS_FAULT_HOST_USER = 3,
	/* exceptions:page_fault_kernel: a host fault in kernel mode. */
	BS_FAULT_HOST_KERNEL = 4,
	BS_FAULT_KINDS = 5,
};

struct bs_fault_key {
	__u32 tgid;
	__u32 tid;
	__u32 phase;
	__u32 kind;
};

#endif /* BOOTSCOPE_FAULTS_H */
