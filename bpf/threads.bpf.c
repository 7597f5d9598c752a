// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Threads collector: which threads the target has (short-lived ones
 * included), their names, where they ran and for how long.
 *
 * - sched:sched_switch: run time per {thread, CPU}, aggregated here;
 * - task:task_newtask: new threads and processes (clone flags tell which);
 *   new child processes join `followed`;
 * - sched:sched_process_fork: counted, and follows children when
 *   task_newtask is missing (userspace sets fork_follows);
 * - task:task_rename: names set with prctl, /proc/TID/comm or exec;
 * - sched:sched_process_exit: end of each thread, with its exit code (read
 *   from task_struct with CO-RE: the tracepoint has no such field).
 * Lifetimes and names are streamed; run time stays in a map.
 */
#include "common.bpf.h"
#include "threads.h"

BS_FIELD(task_newtask, pid);
BS_FIELD(task_newtask, comm);
BS_FIELD(task_newtask, clone_flags);
BS_FIELD(sched_process_fork, child_pid);
BS_FIELD(task_rename, pid);
BS_FIELD(task_rename, newcomm);
BS_FIELD(sched_process_exit, group_dead);

/* Set when task:task_newtask is missing: sched_process_fork then follows
 * every child it sees (threads included: harmless, just more keys). */
const volatile __u32 fork_follows = 0;

/* Set when the loader relocated this object against the kernel's BTF: only
 * then is task_struct's exit_code at the right offset (CO-RE). Without it
 * the read below is never reached and exit codes are left unknown. */
const volatile __u32 read_exit_code = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bs_oncpu);
} oncpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct bs_run_key);
	__type(value, struct bs_run_val);
} run_time SEC(".maps");

/* Threads of followed processes (tid -> tgid), so that a rename done by
 * another process (writing /proc/TID/comm) is still attributed. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, __u32);
} threads SEC(".maps");

static __always_inline void bs_read_comm(void *ctx, char *dst, __u32 off, __u32 size)
{
	if (size > BS_COMM_LEN)
		size = BS_COMM_LEN;
	bpf_probe_read_kernel(dst, size, (char *)ctx + off);
}

SEC("raw_tp/sched_switch")
int bs_sched_switch(void *ctx)
{
	__u32 zero = 0;
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct bs_oncpu *on = bpf_map_lookup_elem(&oncpu, &zero);
	struct bs_run_key key = {};
	struct bs_run_val *val;

	if (!on)
		return 0;
	/* The current task is the one switched out, and it has run since the
	 * previous switch on this CPU (the one that switched it in): no field
	 * of the record is needed (so it attaches raw: no record is built). Events: the sum of slices (userspace adds
	 * them up). */
	if (on->ts_ns && tid != 0 && bs_followed(tgid)) {
		__u64 ran = now > on->ts_ns ? now - on->ts_ns : 0;

		key.tid = tid;
		key.cpu = bpf_get_smp_processor_id();
		val = bpf_map_lookup_elem(&run_time, &key);
		if (!val) {
			struct bs_run_val init = { .tgid = tgid };

			bpf_map_update_elem(&run_time, &key, &init, BPF_NOEXIST);
			val = bpf_map_lookup_elem(&run_time, &key);
		}
		if (val) {
			__sync_fetch_and_add(&val->run_ns, ran);
			__sync_fetch_and_add(&val->slices, 1);
		} else {
			bs_percpu_inc(&map_overflows, 0);
		}
	}
	on->ts_ns = now;
	return 0;
}

/* Fires in the parent, before the child first runs. */
SEC("tracepoint/task/task_newtask")
int bs_task_newtask(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, phase;
	__u32 pid, child_tgid;
	__u64 flags;
	struct bs_event *e;

	if (!bs_follow(tgid, &phase))
		return 0;
	bs_count_source(BS_SRC_TASK_NEWTASK);
	pid = BS_READ(ctx, task_newtask, pid);
	flags = BS_READ(ctx, task_newtask, clone_flags);
	if (flags & BS_CLONE_THREAD) {
		child_tgid = tgid;
	} else {
		/* A child process starts in its parent's phase. */
		child_tgid = pid;
		bpf_map_update_elem(&followed, &pid, &phase, BPF_ANY);
	}
	bpf_map_update_elem(&threads, &pid, &child_tgid, BPF_ANY);

	e = bs_event_reserve(BS_EV_TASK_NEW, child_tgid, pid);
	if (!e)
		return 0;
	e->arg0 = (__u32)id;
	e->arg1 = flags;
	bs_read_comm(ctx, e->comm, task_newtask__comm.off, task_newtask__comm.size);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/sched/sched_process_fork")
int bs_sched_process_fork(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, phase;
	__u32 child;
	struct bs_event *e;

	if (!bs_follow(tgid, &phase))
		return 0;
	bs_count_source(BS_SRC_SCHED_PROCESS_FORK);
	if (!fork_follows)
		return 0;
	child = BS_READ(ctx, sched_process_fork, child_pid);
	bpf_map_update_elem(&followed, &child, &phase, BPF_ANY);
	bpf_map_update_elem(&threads, &child, &child, BPF_NOEXIST);

	e = bs_event_reserve(BS_EV_TASK_NEW, 0, child);
	if (!e)
		return 0;
	e->arg0 = (__u32)id;
	e->arg1 = BS_CLONE_FLAGS_UNKNOWN;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/task/task_rename")
int bs_task_rename(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = BS_READ(ctx, task_rename, pid);
	__u32 *known = bpf_map_lookup_elem(&threads, &pid);
	__u32 tgid;
	struct bs_event *e;

	if (known)
		tgid = *known;
	else if (pid == (__u32)id && bs_followed(id >> 32))
		tgid = id >> 32;
	else
		return 0;
	bs_count_source(BS_SRC_TASK_RENAME);
	e = bs_event_reserve(BS_EV_TASK_RENAME, tgid, pid);
	if (!e)
		return 0;
	bs_read_comm(ctx, e->comm, task_rename__newcomm.off, task_rename__newcomm.size);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* Fires in the exiting task. */
SEC("tracepoint/sched/sched_process_exit")
int bs_sched_process_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct task_struct *task;
	struct bs_event *e;
	__u32 group_dead;

	if (!bs_followed(tgid))
		return 0;
	bs_count_source(BS_SRC_SCHED_PROCESS_EXIT);
	group_dead = BS_READ(ctx, sched_process_exit, group_dead) != 0;
	bpf_map_delete_elem(&threads, &tid);
	e = bs_event_reserve(BS_EV_TASK_EXIT, tgid, tid);
	if (e) {
		task = (struct task_struct *)bpf_get_current_task();
		e->arg0 = read_exit_code ? (__u32)BPF_CORE_READ(task, exit_code) : 0;
		e->arg1 = group_dead;
		bpf_get_current_comm(e->comm, sizeof(e->comm));
		bpf_ringbuf_submit(e, 0);
	}
	if (group_dead) {
		/* The pid may be reused by an unrelated process. */
		__u32 zero = 0;
		struct bs_target *t = bpf_map_lookup_elem(&target, &zero);

		if (t && t->tgid == tgid)
			t->tgid = 0;
		bpf_map_delete_elem(&followed, &tgid);
	}
	return 0;
}
