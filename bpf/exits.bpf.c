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
 * These programs run on every exit: each event costs its fields, loaded
 * straight from the record (BS_CTX), and the lookups of its own map,
 * nothing more. How many events each saw is the
 * sum of its counts (userspace adds them up), not a separate counter.
 */
#include "common.bpf.h"
#include "exits.h"

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

/* LRU: entries of threads that ended are evicted instead of filling it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct bs_exit_start);
} exit_start SEC(".maps");

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
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct bs_exit_key key = {};
	struct bs_exit_start *pending;
	__u32 phase;

	if (!bs_follow(tgid, &phase))
		return 0;
	key.tgid = tgid;
	key.isa = BS_CTX(ctx, BS_P_KVM_EXIT_ISA);
	key.reason = BS_CTX(ctx, BS_P_KVM_EXIT_EXIT_REASON);
	if (key.isa == BS_ISA_VMX)
		key.reason &= BS_VMX_REASON_MASK;
	key.vcpu_id = BS_CTX(ctx, BS_P_KVM_EXIT_VCPU_ID);
	key.phase = phase;
	bs_count(&exit_counts, &key, 1);

	/* A vCPU thread's entry stays in the map from exit to exit: writing
	 * it in place spares an LRU update (a free-list pop and a lock) on
	 * every exit. Only this thread writes it; kvm_entry reads it on this
	 * same thread. */
	pending = bpf_map_lookup_elem(&exit_start, &tid);
	if (pending && pending->vcpu_id == key.vcpu_id) {
		pending->reason = key.reason;
		pending->isa = key.isa;
		pending->ts_ns = bpf_ktime_get_ns();
	} else {
		/* This thread's first exit (or first as this vCPU): the one
		 * time its vCPU index is recorded. */
		struct bs_exit_start start = {
			.ts_ns = bpf_ktime_get_ns(),
			.reason = key.reason,
			.isa = key.isa,
			.vcpu_id = key.vcpu_id,
		};
		struct bs_vcpu_key vkey = { .tgid = tgid, .vcpu_id = key.vcpu_id };

		bpf_map_update_elem(&exit_start, &tid, &start, BPF_ANY);
		bpf_map_update_elem(&vcpu_tids, &vkey, &tid, BPF_ANY);
	}
	return 0;
}

SEC("raw_tp/kvm_entry")
int bs_kvm_entry(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct bs_exit_lat_key key = {};
	struct bs_exit_start *start;
	struct bs_hist *hist;
	__u64 now, delta;

	/* Only threads of followed processes have a pending exit. */
	start = bpf_map_lookup_elem(&exit_start, &tid);
	if (!start || !start->ts_ns)
		return 0;
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
	err = (__s32)BS_CTX(ctx, BS_P_KVM_USERSPACE_EXIT_ERRNO);
	key.tgid = tgid;
	key.tid = (__u32)id;
	key.code = err < 0 ? (BS_UEXIT_ERRNO_FLAG | (__u32)-err)
			   : (__u32)BS_CTX(ctx, BS_P_KVM_USERSPACE_EXIT_REASON);
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
	key.port = BS_CTX(ctx, BS_P_KVM_PIO_PORT);
	key.rw = BS_CTX(ctx, BS_P_KVM_PIO_RW);
	key.size = BS_CTX(ctx, BS_P_KVM_PIO_SIZE);
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
	key.type = BS_CTX(ctx, BS_P_KVM_MMIO_TYPE);
	key.gpa = BS_CTX(ctx, BS_P_KVM_MMIO_GPA);
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
	key.msr = BS_CTX(ctx, BS_P_KVM_MSR_ECX);
	key.write = BS_CTX(ctx, BS_P_KVM_MSR_WRITE) != 0;
	key.exception = BS_CTX(ctx, BS_P_KVM_MSR_EXCEPTION) != 0;
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
	key.function = BS_CTX(ctx, BS_P_KVM_CPUID_FUNCTION);
	key.index = BS_CTX(ctx, BS_P_KVM_CPUID_INDEX);
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
	key.failed = BS_CTX(ctx, BS_P_KVM_EMULATE_INSN_FAILED) != 0;
	bs_count(&emulate_counts, &key, 1);
	return 0;
}
