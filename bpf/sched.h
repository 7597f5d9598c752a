/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Sched collector: types shared with profiler/src/bpf.rs. */
#ifndef BOOTSCOPE_SCHED_H
#define BOOTSCOPE_SCHED_H

/* The sleep states of sched_switch's prev_state (TASK_REPORT in
 * include/linux/sched.h, as the record reports them): none of them set
 * means the task stays runnable (0: running, TASK_REPORT_MAX: preempted). */
#define BS_TASK_REPORT_SLEEP 0xffULL
/* EXIT_DEAD | EXIT_ZOMBIE in prev_state: the task's last switch. */
#define BS_TASK_REPORT_EXITED 0x30ULL

/* A thread of a followed process the scheduler may queue: its process
 * (0 until known: a new task whose parent is followed may be a thread or a
 * child process), when it was queued (bpf_ktime_get_ns; 0: not waiting),
 * and the waits it had before its process was known. */
struct bs_sched_task {
	__u32 tgid;
	__u32 pad;
	__u64 queued_ns;
	__u64 pending_ns;
};

/* Run-queue waits of one thread in one boot phase (value: struct
 * bs_hist). tgid first, like every key the exporter splits by process. */
struct bs_sched_key {
	__u32 tgid;
	__u32 tid;
	__u32 phase;
};

#endif /* BOOTSCOPE_SCHED_H */
