/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* NUMA collector: types shared with profiler/src/bpf.rs. */
#ifndef BOOTSCOPE_NUMA_H
#define BOOTSCOPE_NUMA_H

#define BS_MAX_PFN_RANGES 64
#define BS_MAX_CPUS 1024
#define BS_NODE_UNKNOWN 0xffffffffu

/* Page frames [start_pfn, end_pfn) belong to node `node`. */
struct bs_pfn_range {
	__u64 start_pfn;
	__u64 end_pfn;
	__u32 node;
	__u32 pad;
};

/* Pages allocated by one thread from one node while on a CPU of another
 * (or the same) node. */
struct bs_numa_key {
	__u32 tgid;
	__u32 tid;
	__u32 page_node;
	__u32 cpu_node;
};

struct bs_numa_val {
	/* Base pages: an order-n allocation counts 2^n. */
	__u64 pages;
	/* Allocation calls; pages > allocs means huge or multi-page blocks. */
	__u64 allocs;
};

#endif /* BOOTSCOPE_NUMA_H */
