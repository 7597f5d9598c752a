// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Phases collector: guest writes to the boot marker ports, seen by
 * kvm:kvm_pio (which fires on PVM hosts too).
 *
 * Port 0x80 is the debug port (Cloud Hypervisor's ranges: 0x00-1f firmware,
 * 0x20-3f boot loader, 0x40-5f kernel, 0x60-7f userspace); port 0xf4 is
 * qemu-boot-time's (6 = kernel start, 7 = userspace start). Every write is
 * counted per {port, value}; only a change of value is streamed as a mark,
 * so a guest hammering the port cannot flood the ring buffer.
 */
#include "common.bpf.h"
#include "phases.h"

const volatile __u32 marker_port_debug = 0x80;
const volatile __u32 marker_port_boot_time = 0xf4;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bs_marker_key);
	__type(value, __u64);
} marker_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct bs_marker_last_key);
	__type(value, __u32);
} marker_last SEC(".maps");

SEC("tracepoint/kvm/kvm_pio")
int bs_marker_pio(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct bs_marker_key key = {};
	struct bs_marker_last_key last_key = {};
	struct bs_event *e;
	__u32 port, size, value, stored, *last;

	if (!bs_followed_vm(tgid))
		return 0;
	if (!BS_CTX(ctx, BS_P_KVM_PIO_RW))
		return 0;
	port = BS_CTX(ctx, BS_P_KVM_PIO_PORT);
	if (port != marker_port_debug && port != marker_port_boot_time)
		return 0;
	bs_count_source(BS_SRC_MARKER_PIO);
	size = BS_CTX(ctx, BS_P_KVM_PIO_SIZE);
	value = BS_CTX(ctx, BS_P_KVM_PIO_VAL);
	if (size == 1)
		value &= 0xff;
	else if (size == 2)
		value &= 0xffff;

	key.tgid = tgid;
	key.port = port;
	key.value = value;
	bs_count(&marker_counts, &key, 1);

	last_key.tgid = tgid;
	last_key.port = port;
	stored = value + 1; /* 0 stays "nothing written yet" */
	last = bpf_map_lookup_elem(&marker_last, &last_key);
	if (last && *last == stored)
		return 0;
	bpf_map_update_elem(&marker_last, &last_key, &stored, BPF_ANY);

	e = bs_event_reserve(BS_EV_MARK, tgid, (__u32)id);
	if (!e)
		return 0;
	e->arg0 = port;
	e->arg1 = value;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return 0;
}
