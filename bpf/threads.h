/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Threads collector: types shared with profiler/src/bpf.rs. */
#ifndef BOOTSCOPE_THREADS_H
#define BOOTSCOPE_THREADS_H

/* include/uapi/linux/sched.h: the new task shares its parent's process. */
#define BS_CLONE_THREAD 0x00010000ULL

/* When the task running on this CPU was switched in (0: not seen yet). */
struct bs_oncpu {
	__u64 ts_ns;
};

/* Run time of one thread on one CPU. */
struct bs_run_key {
	__u32 tid;
	__u32 cpu;
};

struct bs_run_val {
	__u64 run_ns;
	__u64 slices;
	__u32 tgid;
	__u32 pad;
};

#endif /* BOOTSCOPE_THREADS_H */
