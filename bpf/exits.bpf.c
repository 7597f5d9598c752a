// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Exits collector.
 *
 * VMX/SVM hosts: kvm:kvm_exit counts by {tgid, vcpu, reason, isa, phase}
 * and kvm_exit -> kvm_entry latency per reason as log2 histograms.
 * PVM hosts, where kvm_exit never fires: kvm:kvm_userspace_exit reasons and
 * the instruction-level events kvm_pio, kvm_mmio, kvm_msr, kvm_cpuid and
 * kvm_emulate_insn. All of them are attached everywhere; userspace reports
 * which source each number came from.
 *
 * These programs run on every exit: each event costs its fields' loads
 * (straight from the record, see bs_ctx_field) and the lookups of its own
 * maps, nothing more. How many events each saw is the
 * sum of its counts (userspace adds them up), not a separate counter.
 */
#include "common.bpf.h"
#include "exits.h"

BS_FIELD(kvm_exit, exit_reason);
BS_FIELD(kvm_exit, isa);
BS_FIELD(kvm_exit, vcpu_id);
BS_FIELD(kvm_userspace_exit, reason);
BS_FIELD(kvm_userspace_exit, errno);
BS_FIELD(kvm_pio, rw);
BS_FIELD(kvm_pio, port);
BS_FIELD(kvm_pio, size);
BS_FIELD(kvm_mmio, type);
BS_FIELD(kvm_mmio, gpa);
BS_FIELD(kvm_msr, write);
BS_FIELD(kvm_msr, ecx);
BS_FIELD(kvm_msr, exception);
BS_FIELD(kvm_cpuid, function);
BS_FIELD(kvm_cpuid, index);
BS_FIELD(kvm_emulate_insn, failed);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct bs_exit_key);
	__type(value, __u64);
} exit_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, struct bs_exit_lat_key);
	__type(value, struct bs_hist);
} exit_latency SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bs_vcpu_key);
	__type(value, __u32);
} vcpu_tids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct bs_uexit_key);
	__type(value, __u64);
} uexit_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct bs_pio_key);
	__type(value, __u64);
} pio_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct bs_mmio_key);
	__type(value, __u64);
} mmio_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bs_msr_key);
	__type(value, __u64);
} msr_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bs_cpuid_key);
	__type(value, __u64);
} cpuid_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bs_emulate_key);
	__type(value, __u64);
} emulate_counts SEC(".maps");

/* Initial value of a new histogram (read-only data). */
static const struct bs_hist bs_zero_hist;

SEC("tracepoint/kvm/kvm_exit")
int bs_kvm_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id, zero = 0;
	struct bs_exit_key key = {};
	struct bs_exit_start *slot;
	__u32 phase;

	if (!bs_follow(tgid, &phase))
		return 0;
	key.tgid = tgid;
	key.isa = BS_READ(ctx, kvm_exit, isa);
	key.reason = BS_READ(ctx, kvm_exit, exit_reason);
	if (key.isa == BS_ISA_VMX)
		key.reason &= BS_VMX_REASON_MASK;
	key.vcpu_id = BS_READ(ctx, kvm_exit, vcpu_id);
	key.phase = phase;
	bs_count(&exit_counts, &key, 1);

	/* This CPU's slot: any pending exit of another thread was handed off
	 * when that thread was switched out (sched_switch). */
	slot = bpf_map_lookup_elem(&exit_slot, &zero);
	if (!slot)
		return 0;
	if (slot->tid != tid || slot->vcpu_id != key.vcpu_id) {
		/* The first exit here since another thread's (or this thread's
		 * first): the only time its vCPU index is looked at. */
		struct bs_vcpu_key vkey = { .tgid = tgid, .vcpu_id = key.vcpu_id };
		__u32 *known = bpf_map_lookup_elem(&vcpu_tids, &vkey);

		if (!known || *known != tid)
			bpf_map_update_elem(&vcpu_tids, &vkey, &tid, BPF_ANY);
		slot->tid = tid;
		slot->vcpu_id = key.vcpu_id;
	}
	slot->reason = key.reason;
	slot->isa = key.isa;
	slot->ts_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tracepoint/kvm/kvm_entry")
int bs_kvm_entry(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, zero = 0;
	struct bs_exit_lat_key key = {};
	struct bs_exit_start *start;
	struct bs_hist *hist;
	__u64 now, delta;

	/* Usually the exit this thread left in this CPU's slot; else one
	 * handed off when it was switched out. Threads of processes not
	 * followed have neither. */
	start = bpf_map_lookup_elem(&exit_slot, &zero);
	if (!start || start->tid != tid || !start->ts_ns) {
		start = bpf_map_lookup_elem(&exit_start, &tid);
		if (!start || !start->ts_ns)
			return 0;
	}
	now = bpf_ktime_get_ns();
	delta = now > start->ts_ns ? now - start->ts_ns : 0;
	start->ts_ns = 0;

	key.tgid = id >> 32;
	key.reason = start->reason;
	key.isa = start->isa;
	hist = bpf_map_lookup_elem(&exit_latency, &key);
	if (!hist) {
		bpf_map_update_elem(&exit_latency, &key, &bs_zero_hist, BPF_NOEXIST);
		hist = bpf_map_lookup_elem(&exit_latency, &key);
		if (!hist) {
			bs_percpu_inc(&map_overflows, 0);
			return 0;
		}
	}
	__sync_fetch_and_add(&hist->slots[bs_hist_slot(delta)], 1);
	__sync_fetch_and_add(&hist->count, 1);
	__sync_fetch_and_add(&hist->total_ns, delta);
	return 0;
}

SEC("tracepoint/kvm/kvm_userspace_exit")
int bs_kvm_userspace_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, phase;
	struct bs_uexit_key key = {};
	__s32 err;

	if (!bs_follow(tgid, &phase))
		return 0;
	err = (__s32)BS_READ(ctx, kvm_userspace_exit, errno);
	key.tgid = tgid;
	key.tid = (__u32)id;
	key.code = err < 0 ? (BS_UEXIT_ERRNO_FLAG | (__u32)-err)
			   : (__u32)BS_READ(ctx, kvm_userspace_exit, reason);
	key.phase = phase;
	bs_count(&uexit_counts, &key, 1);
	return 0;
}

SEC("tracepoint/kvm/kvm_pio")
int bs_kvm_pio(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, phase;
	struct bs_pio_key key = {};

	if (!bs_follow(tgid, &phase))
		return 0;
	key.tgid = tgid;
	key.port = BS_READ(ctx, kvm_pio, port);
	key.rw = BS_READ(ctx, kvm_pio, rw);
	key.size = BS_READ(ctx, kvm_pio, size);
	key.phase = phase;
	bs_count(&pio_counts, &key, 1);
	return 0;
}

SEC("tracepoint/kvm/kvm_mmio")
int bs_kvm_mmio(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct bs_mmio_key key = {};

	if (!bs_followed(tgid))
		return 0;
	key.tgid = tgid;
	key.type = BS_READ(ctx, kvm_mmio, type);
	key.gpa = BS_READ(ctx, kvm_mmio, gpa);
	bs_count(&mmio_counts, &key, 1);
	return 0;
}

SEC("tracepoint/kvm/kvm_msr")
int bs_kvm_msr(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct bs_msr_key key = {};

	if (!bs_followed(tgid))
		return 0;
	key.tgid = tgid;
	key.msr = BS_READ(ctx, kvm_msr, ecx);
	key.write = BS_READ(ctx, kvm_msr, write) != 0;
	key.exception = BS_READ(ctx, kvm_msr, exception) != 0;
	bs_count(&msr_counts, &key, 1);
	return 0;
}

SEC("tracepoint/kvm/kvm_cpuid")
int bs_kvm_cpuid(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct bs_cpuid_key key = {};

	if (!bs_followed(tgid))
		return 0;
	key.tgid = tgid;
	key.function = BS_READ(ctx, kvm_cpuid, function);
	key.index = BS_READ(ctx, kvm_cpuid, index);
	bs_count(&cpuid_counts, &key, 1);
	return 0;
}

SEC("tracepoint/kvm/kvm_emulate_insn")
int bs_kvm_emulate_insn(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, phase;
	struct bs_emulate_key key = {};

	if (!bs_follow(tgid, &phase))
		return 0;
	key.tgid = tgid;
	key.phase = phase;
	key.failed = BS_READ(ctx, kvm_emulate_insn, failed) != 0;
	bs_count(&emulate_counts, &key, 1);
	return 0;
}
