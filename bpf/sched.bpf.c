// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Sched collector: how long each thread of the target waited for a host
 * CPU, runnable but not running (the run-queue wait that
 * /proc/PID/task/TID/schedstat's second field sums), by boot phase and as
 * a log2 histogram, aggregated here.
 *
 * A thread's wait starts when the scheduler queues it: woken
 * (sched:sched_wakeup, or sched:sched_wakeup_new for a new task), or
 * switched out while still runnable (preempted, or yielding: sched_switch
 * with no sleep state in prev_state). It ends when sched_switch switches
 * it in. Threads are looked up by thread id in `sched_tasks`: userspace
 * seeds the threads that exist when profiling starts, sched_switch adds
 * every thread of a followed process it switches out, and
 * sched_wakeup_new adds the new tasks of followed processes before they
 * first run. A new task's process is known for sure only once it runs
 * (the record has no process id): until its first switch out, its wait is
 * kept in its entry, then counted or, for a child process nobody follows,
 * dropped with the entry. The records' fields are loaded straight from them (BS_CTX):
 * these run on every wake-up and switch of the host.
 */
#include "common.bpf.h"
#include "sched.h"

BS_MAP(sched_tasks, BPF_MAP_TYPE_HASH, 16384, __u32, struct bs_sched_task);

BS_MAP(sched_waits, BPF_MAP_TYPE_HASH, 16384, struct bs_sched_key, struct bs_hist);

/* Runs of a watched thread that no wait of the profile led to: switched
 * in with no wait open, its queueing not seen (a program run the kernel
 * skipped, a wake-up or switch out not seen, a thread seeded while it
 * waited). The kernel's own account (schedstat) has such a wait; the
 * profile says how many it lacks. */
BS_MAP(sched_unseen, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);

/* A followed thread was queued now, unless it already waits (a wake-up of
 * a task still queued does not restart its wait). */
static __always_inline void bs_sched_queued(__u32 tid)
{
	struct bs_sched_task *t;

	if (tid == 0)
		return;
	t = bpf_map_lookup_elem(&sched_tasks, &tid);
	if (t && t->queued_ns == 0)
		t->queued_ns = bpf_ktime_get_ns();
}

SEC("tracepoint/sched/sched_wakeup")
int bs_sched_wakeup(void *ctx)
{
	bs_sched_queued(BS_CTX(ctx, BS_P_SCHED_WAKEUP_PID));
	return 0;
}

/* Fires in the parent (current) once the new task is queued: a new process
 * the threads collector follows, or a new task of a followed process
 * (its process known at its first switch out). */
SEC("tracepoint/sched/sched_wakeup_new")
int bs_sched_wakeup_new(void *ctx)
{
	__u32 tid = BS_CTX(ctx, BS_P_SCHED_WAKEUP_NEW_PID);
	__u32 parent = bpf_get_current_pid_tgid() >> 32, phase;
	struct bs_sched_task t = {};

	if (tid == 0)
		return 0;
	if (bs_follow(tid, &phase))
		t.tgid = tid;
	else if (!bs_follow(parent, &phase))
		return 0;
	t.queued_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&sched_tasks, &tid, &t, BPF_ANY) != 0)
		bs_percpu_inc(&map_overflows, 0);
	return 0;
}

/* Adds one wait to its thread's histogram for the phase its process is
 * in now. */
static __always_inline void bs_sched_wait(__u32 tgid, __u32 tid, __u64 ns)
{
	struct bs_sched_key key = {};
	__u32 phase;

	if (!bs_follow(tgid, &phase))
		return;
	key.tgid = tgid;
	key.tid = tid;
	key.phase = phase;
	bs_hist_count(&sched_waits, &key, ns);
}

/* Fires in prev (current), before the switch. */
SEC("tracepoint/sched/sched_switch")
int bs_sched_wait_switch(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	__u64 state = BS_CTX(ctx, BS_P_SCHED_SWITCH_PREV_STATE);
	__u32 tgid = id >> 32, tid = (__u32)id, next = BS_CTX(ctx, BS_P_SCHED_SWITCH_NEXT_PID);
	struct bs_sched_task *t;
	__u32 phase;

	/* prev: queued again if still runnable, its entry gone on its last
	 * switch. */
	if (tid != 0 && bs_follow(tgid, &phase)) {
		t = bpf_map_lookup_elem(&sched_tasks, &tid);
		if (t && t->tgid == 0 && t->pending_ns != 0) {
			/* A new task's first run ends: its process is known. */
			bs_sched_wait(tgid, tid, t->pending_ns);
			t->pending_ns = 0;
		}
		if (state & BS_TASK_REPORT_EXITED) {
			bpf_map_delete_elem(&sched_tasks, &tid);
		} else if (t) {
			t->tgid = tgid;
			t->queued_ns = (state & BS_TASK_REPORT_SLEEP) ? 0 : now;
		} else {
			struct bs_sched_task init = { .tgid = tgid };

			init.queued_ns = (state & BS_TASK_REPORT_SLEEP) ? 0 : now;
			if (bpf_map_update_elem(&sched_tasks, &tid, &init, BPF_ANY) != 0)
				bs_percpu_inc(&map_overflows, 0);
		}
	}
	/* next: its wait ends. */
	if (next == 0)
		return 0;
	t = bpf_map_lookup_elem(&sched_tasks, &next);
	if (!t)
		return 0;
	if (t->queued_ns == 0) {
		bs_percpu_inc(&sched_unseen, 0);
		return 0;
	}
	if (t->tgid == 0 && t->pending_ns != 0) {
		/* Ran before, and its switch out was not one of a followed
		 * process: a child process nobody follows. */
		bpf_map_delete_elem(&sched_tasks, &next);
		return 0;
	}
	if (now > t->queued_ns) {
		if (t->tgid != 0)
			bs_sched_wait(t->tgid, next, now - t->queued_ns);
		else
			t->pending_ns += now - t->queued_ns;
	}
	t->queued_ns = 0;
	return 0;
}
