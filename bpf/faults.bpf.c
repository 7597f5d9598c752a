// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Page faults collector: guest-side faults KVM handles, and host-side faults
 * of the target's own threads, by {thread, phase, kind}.
 *
 * None of these programs reads a tracepoint field: the faulting thread is
 * the current task and the kind is the tracepoint itself. Host faults KVM
 * resolves through get_user_pages (guest memory first touched by a vCPU)
 * do not raise an exception and appear only as guest faults.
 */
#include "common.bpf.h"
#include "faults.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct bs_fault_key);
	__type(value, __u64);
} fault_counts SEC(".maps");

static __always_inline int bs_fault(__u32 kind, __u32 src)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct bs_fault_key key = {};

	if (!bs_followed(tgid))
		return 0;
	bs_count_source(src);
	key.tgid = tgid;
	key.tid = (__u32)id;
	key.phase = bs_phase(tgid);
	key.kind = kind;
	bs_count(&fault_counts, &key, 1);
	return 0;
}

SEC("tracepoint/kvm/kvm_page_fault")
int bs_kvm_page_fault(void *ctx)
{
	return bs_fault(BS_FAULT_GUEST, BS_SRC_KVM_PAGE_FAULT);
}

SEC("tracepoint/kvmmmu/kvm_mmu_spte_requested")
int bs_kvmmmu_spte_requested(void *ctx)
{
	return bs_fault(BS_FAULT_GUEST_MAP, BS_SRC_KVMMMU_SPTE_REQUESTED);
}

SEC("tracepoint/kvmmmu/handle_mmio_page_fault")
int bs_kvmmmu_mmio_page_fault(void *ctx)
{
	return bs_fault(BS_FAULT_GUEST_MMIO, BS_SRC_KVMMMU_MMIO_PAGE_FAULT);
}

SEC("tracepoint/exceptions/page_fault_user")
int bs_page_fault_user(void *ctx)
{
	return bs_fault(BS_FAULT_HOST_USER, BS_SRC_PAGE_FAULT_USER);
}

SEC("tracepoint/exceptions/page_fault_kernel")
int bs_page_fault_kernel(void *ctx)
{
	return bs_fault(BS_FAULT_HOST_KERNEL, BS_SRC_PAGE_FAULT_KERNEL);
}
