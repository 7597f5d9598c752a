// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* NUMA collector: where the pages the target's threads allocate land
 * (kmem:mm_page_alloc, which fires in the allocating task), against the node
 * of the CPU that allocated them.
 *
 * Userspace computes both lookups from sysfs before load: the node of each
 * CPU (cpu_nodes) and the node of each page frame range (pfn_ranges, from
 * /sys/devices/system/node/nodeN/memoryM or /proc/zoneinfo).
 */
#include "common.bpf.h"
#include "numa.h"

/* Entries of pfn_ranges in use. */
const volatile __u32 nr_pfn_ranges = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BS_MAX_PFN_RANGES);
	__type(key, __u32);
	__type(value, struct bs_pfn_range);
} pfn_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BS_MAX_CPUS);
	__type(key, __u32);
	__type(value, __u32);
} cpu_nodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct bs_numa_key);
	__type(value, struct bs_numa_val);
} numa_pages SEC(".maps");

/* Linear search of the (few, merged) ranges. Unrolled: older verifiers
 * (Linux 6.1) reject this loop as "infinite" when its counter is spilled to
 * the stack for the lookup key. */
static __always_inline __u32 bs_pfn_node(__u64 pfn)
{
	__u32 n = nr_pfn_ranges;

#pragma clang loop unroll(full)
	for (__u32 i = 0; i < BS_MAX_PFN_RANGES; i++) {
		struct bs_pfn_range *r;
		__u32 key = i;

		if (i >= n)
			break;
		r = bpf_map_lookup_elem(&pfn_ranges, &key);
		if (!r)
			break;
		if (pfn >= r->start_pfn && pfn < r->end_pfn)
			return r->node;
	}
	return BS_NODE_UNKNOWN;
}

SEC("tracepoint/kmem/mm_page_alloc")
int bs_mm_page_alloc(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, cpu = bpf_get_smp_processor_id();
	struct bs_numa_key key = {};
	struct bs_numa_val *val;
	__u32 *cpu_node, order;
	__u64 pfn, pages;

	if (!bs_followed(tgid))
		return 0;
	pfn = BS_CTX(ctx, BS_P_MM_PAGE_ALLOC_PFN);
	if (pfn == (__u64)-1) /* failed allocation */
		return 0;
	order = BS_CTX(ctx, BS_P_MM_PAGE_ALLOC_ORDER);
	pages = 1ULL << (order & 31);

	cpu_node = bpf_map_lookup_elem(&cpu_nodes, &cpu);
	key.tgid = tgid;
	key.tid = (__u32)id;
	key.page_node = bs_pfn_node(pfn);
	key.cpu_node = cpu_node ? *cpu_node : BS_NODE_UNKNOWN;
	val = bpf_map_lookup_elem(&numa_pages, &key);
	if (!val) {
		struct bs_numa_val init = {};

		bpf_map_update_elem(&numa_pages, &key, &init, BPF_NOEXIST);
		val = bpf_map_lookup_elem(&numa_pages, &key);
		if (!val) {
			bs_percpu_inc(&map_overflows, 0);
			return 0;
		}
	}
	__sync_fetch_and_add(&val->pages, pages);
	__sync_fetch_and_add(&val->allocs, 1);
	return 0;
}
