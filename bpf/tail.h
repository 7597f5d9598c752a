/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Fault-tail collector: types shared with profiler/src/bpf.rs. */
#ifndef BOOTSCOPE_TAIL_H
#define BOOTSCOPE_TAIL_H

/* The window's state (struct bs_tail_window.state). */
enum bs_tail_state {
	/* Not watching: nothing is counted. */
	BS_TAIL_OFF = 0,
	/* Opens at the next guest fault of a followed VM (its first KVM_RUN
	 * is at most one fault earlier: a restored guest faults at once). */
	BS_TAIL_ARMED = 1,
};

/* Set by userspace: armed, and end_ns (bpf_ktime_get_ns) once the guest's
 * next mark closed the window (0 while open). */
struct bs_tail_window {
	__u32 state;
	__u32 pad;
	__u64 end_ns;
};

/* Made by the guest fault that opens the window: the VM's process and the
 * fault's time (bpf_ktime_get_ns), the curve's zero. */
struct bs_tail_start {
	__u32 tgid;
	__u32 pad;
	__u64 start_ns;
};

/* What serving a guest fault took on the host: the kind of a guest fault
 * (its counts, curve, regions and latency are kept per kind). */
enum bs_tail_kind {
	/* KVM mapped the page without a host fault (already resident). */
	BS_TAIL_RESIDENT = 0,
	BS_TAIL_MINOR_ANON = 1,
	BS_TAIL_MINOR_FILE = 2,
	BS_TAIL_MAJOR_ANON = 3,
	BS_TAIL_MAJOR_FILE = 4,
	BS_TAIL_KINDS = 5,
};

/* Totals (per-CPU array, summed by userspace). */
enum bs_tail_total {
	/* Guest faults KVM mapped (kvm_mmu_spte_requested) of followed VMs
	 * since the programs attached, window or not: KVM's own statistics'
	 * interval, for the cross-check. */
	BS_TT_GUEST_ALL = 0,
	/* In the window: guest faults, host minor and major faults (the
	 * kernel's own task counters: in guest fault service and outside),
	 * the host exceptions of the VM's threads, distinct guest pages. */
	BS_TT_GUEST = 1,
	BS_TT_MINOR_IN_FAULT = 2,
	BS_TT_MAJOR_IN_FAULT = 3,
	BS_TT_MINOR_OTHER = 4,
	BS_TT_MAJOR_OTHER = 5,
	BS_TT_EXC_USER = 6,
	BS_TT_EXC_KERNEL = 7,
	BS_TT_PAGES = 8,
	BS_TT_PAGES_BEYOND = 9, /* faults on pages the full set had no room for */
	BS_TT_COUNT = 10,
};

/* Each vCPU (or VMM) thread in the window: the open guest fault (walk_ns:
 * when its service began, 0 when none) and the thread's fault counters
 * (task_struct min_flt/maj_flt) at its first and last event. */
struct bs_tail_thread {
	__u64 walk_ns;
	__u64 first_min;
	__u64 first_maj;
	__u64 last_min;
	__u64 last_maj;
	__u32 tgid;
	__u32 file; /* the open fault went through the page cache */
};

/* The fault-rate curve: faults per {process, time bucket, kind}. */
struct bs_tail_curve_key {
	__u32 tgid;
	__u32 bucket;
	__u32 kind;
	__u32 pad;
};

/* Faults per exit site (guest RIP). */
struct bs_tail_where_key {
	__u32 tgid;
	__u32 kind;
	__u64 at; /* guest RIP */
};

/* A site's or a region's faults and their service time. */
struct bs_tail_where {
	__u64 count;
	__u64 total_ns;
};

#define BS_TAIL_REGION_SHIFT 21

#endif /* BOOTSCOPE_TAIL_H */
