// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Page faults collector: guest-side faults KVM handles, and host-side faults
 * of the target's own threads, by {thread, phase, kind}.
 *
 * None of these programs reads a tracepoint field: the faulting thread is
 * the current task and the kind is the tracepoint itself. So they attach
 * as raw tracepoints, and the kernel builds no record for them. Host faults KVM
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

/* How many events each program saw is the sum of its kind's counts.
 * in_guest: KVM's own fault events (a process running a guest). */
static __always_inline int bs_fault(__u32 kind, int in_guest)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, phase;
	struct bs_fault_key key = {};

	if (!(in_guest ? bs_follow_vm(tgid, &phase) : bs_follow(tgid, &phase)))
		return 0;
	key.tgid = tgid;
	key.tid = (__u32)id;
	key.phase = phase;
	key.kind = kind;
	bs_count(&fault_counts, &key, 1);
	/* Per time slot too with `run --initcalls` (dropped otherwise). */
	if (time_slot_ns)
		bs_count_slot(bpf_ktime_get_ns(), BS_SLOT_FAULT, kind, 0);
	return 0;
}

SEC("raw_tp/kvm_page_fault")
int bs_kvm_page_fault(void *ctx)
{
	return bs_fault(BS_FAULT_GUEST, 1);
}

SEC("raw_tp/kvm_mmu_spte_requested")
int bs_kvmmmu_spte_requested(void *ctx)
{
	return bs_fault(BS_FAULT_GUEST_MAP, 1);
}

SEC("raw_tp/handle_mmio_page_fault")
int bs_kvmmmu_mmio_page_fault(void *ctx)
{
	return bs_fault(BS_FAULT_GUEST_MMIO, 1);
}

SEC("raw_tp/page_fault_user")
int bs_page_fault_user(void *ctx)
{
	return bs_fault(BS_FAULT_HOST_USER, 0);
}

SEC("raw_tp/page_fault_kernel")
int bs_page_fault_kernel(void *ctx)
{
	return bs_fault(BS_FAULT_HOST_KERNEL, 0);
}
