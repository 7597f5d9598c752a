// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Exits collector.
 *
 * VMX/SVM hosts: kvm:kvm_exit counts by {tgid, vcpu, reason, isa, phase},
 * each with its kvm_exit -> kvm_entry latency as a log2 histogram.
 * PVM hosts, where kvm_exit never fires: kvm:kvm_userspace_exit reasons and
 * the instruction-level events kvm_pio, kvm_mmio, kvm_msr, kvm_cpuid and
 * kvm_emulate_insn. All of them are attached everywhere; userspace reports
 * which source each number came from.
 *
 * Exit sites (`--exit-sites`, the const volatile exit_sites): the same
 * exits, counted at the same two points, also by the guest RIP of the exit
 * and, for SVM nested page faults, by guest-physical range. Off, the
 * verifier drops that code: the programs are the same as without it.
 *
 * The guest RIP of an I/O instruction's exit is kept in the thread's
 * exit_start entry with exit sites off too: the phases collector reads it
 * there to tell firmware's marker-port writes from the kernel's.
 *
 * Time slots (`run --initcalls`, the const volatile time_slot_ns): each
 * exit is also counted by the time slot of its kvm_exit, at the same point
 * as its reason's count (common.bpf.h, bs_count_slot). Off, the verifier
 * drops that code too.
 *
 * These programs run on every exit: each event costs its fields, loaded
 * straight from the record (BS_CTX), and the lookups of its own map,
 * nothing more. How many events each saw is the
 * sum of its counts (userspace adds them up), not a separate counter.
 */
#include "common.bpf.h"
#include "exits.h"
#include "hold.bpf.h"

/* Exit counts and latency histograms. Not preallocated (a histogram is
 * 272 bytes): entries are added once per key, looked up on every exit. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct bs_exit_key);
	__type(value, struct bs_hist);
} exit_stats SEC(".maps");

/* Each vCPU thread's last exit. A plain hash, not an LRU one: an exit
 * still open here is counted only from here, and an LRU map evicts live
 * entries when another CPU needs a node and the free ones sit in other
 * CPUs' lists. Only threads that run a vCPU have an entry, and they are
 * few and long-lived; a full map is counted in map_overflows. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
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

/* Exits by guest RIP (with exit_sites only; made one entry big
 * otherwise): each site's count and latency histogram, which stand in for
 * its reason's exit_stats entry (userspace adds a reason's sites up), so an
 * exit costs one map lookup with sites as without. An exit whose site this
 * map has no room for is counted in exit_stats instead and in
 * exit_site_overflows, and reported as its reason's unattributed rest. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct bs_site_key);
	__type(value, struct bs_hist);
} exit_sites SEC(".maps");

/* SVM nested page faults by guest-physical range (with exit_sites only). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct bs_npf_key);
	__type(value, struct bs_site_val);
} npf_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} exit_site_overflows SEC(".maps");

/* Set by userspace before load: count exits by site too. */
const volatile __u32 exit_sites_on = 0;

/* Whether an exit is an I/O instruction's (its RIP is then kept). */
static __always_inline int bs_io_exit(__u32 isa, __u32 reason)
{
	return (isa == BS_ISA_VMX && reason == BS_VMX_EXIT_IO) ||
	       (isa == BS_ISA_SVM && reason == BS_SVM_EXIT_IOIO);
}

/* Initial value of a new histogram (read-only data). */
static const struct bs_hist bs_zero_hist;

/* The entry of an exit's key, created if needed (NULL, counted as an
 * overflow, if the map is full). */
static __always_inline struct bs_hist *bs_exit_stat(const struct bs_exit_start *e)
{
	struct bs_exit_key key = {
		.tgid = e->tgid,
		.vcpu_id = e->vcpu_id,
		.reason = e->reason,
		.isa = e->isa,
		.phase = e->phase,
	};
	struct bs_hist *h = bpf_map_lookup_elem(&exit_stats, &key);

	if (h)
		return h;
	/* Two CPUs may race to create it: the loser finds the winner's. */
	bpf_map_update_elem(&exit_stats, &key, &bs_zero_hist, BPF_NOEXIST);
	h = bpf_map_lookup_elem(&exit_stats, &key);
	if (!h)
		bs_percpu_inc(&map_overflows, 0);
	return h;
}

static const struct bs_site_val bs_zero_site;

/* Adds one exit (with its latency when timed) to the value at key in map,
 * creating it if needed; false if the map is full. */
static __always_inline int bs_site_add(void *map, const void *key, __u64 timed, __u64 delta)
{
	struct bs_site_val *v = bpf_map_lookup_elem(map, key);

	if (!v) {
		bpf_map_update_elem(map, key, &bs_zero_site, BPF_NOEXIST);
		v = bpf_map_lookup_elem(map, key);
		if (!v)
			return 0;
	}
	__sync_fetch_and_add(&v->count, 1);
	if (timed) {
		__sync_fetch_and_add(&v->timed, 1);
		__sync_fetch_and_add(&v->total_ns, delta);
	}
	return 1;
}

/* The histogram of an exit's site, created if needed (NULL, counted as a
 * site overflow, if the map is full). */
static __always_inline struct bs_hist *bs_site_stat(const struct bs_exit_start *e)
{
	struct bs_site_key key = {
		.tgid = e->tgid,
		.vcpu_id = e->vcpu_id,
		.reason = e->reason,
		.isa = e->isa,
		.phase = e->phase,
		.rip = e->rip,
	};
	struct bs_hist *h = bpf_map_lookup_elem(&exit_sites, &key);

	if (h)
		return h;
	bpf_map_update_elem(&exit_sites, &key, &bs_zero_hist, BPF_NOEXIST);
	h = bpf_map_lookup_elem(&exit_sites, &key);
	if (!h)
		bs_percpu_inc(&exit_site_overflows, 0);
	return h;
}

/* Where an exit is counted: its site's histogram with sites on (its
 * reason's entry when the site map is full), else its reason's. */
static __always_inline struct bs_hist *bs_exit_hist(const struct bs_exit_start *e)
{
	struct bs_hist *h;

	if (exit_sites_on) {
		h = bs_site_stat(e);
		if (h)
			return h;
	}
	return bs_exit_stat(e);
}

/* Counts an SVM NPF by its guest-physical range (with sites on), at the
 * same point as its count. */
static __always_inline void bs_count_npf(const struct bs_exit_start *e, __u64 timed, __u64 delta)
{
	if (e->isa == BS_ISA_SVM && e->reason == BS_SVM_EXIT_NPF) {
		struct bs_npf_key nkey = {
			.tgid = e->tgid,
			.phase = e->phase,
			.range = e->gpa >> BS_NPF_RANGE_SHIFT,
		};

		if (!bs_site_add(&npf_ranges, &nkey, timed, delta))
			bs_percpu_inc(&exit_site_overflows, 0);
	}
}

/* Counts a thread's exit that no kvm_entry ended (if it is open), without
 * a latency: before its entry is reused for a new exit. */
static __always_inline void bs_count_unended(const struct bs_exit_start *e)
{
	struct bs_hist *h;

	if (!e->ts_ns)
		return;
	h = bs_exit_hist(e);
	if (!h)
		return;
	__sync_fetch_and_add(&h->count, 1);
	if (exit_sites_on)
		bs_count_npf(e, 0, 0);
	bs_count_slot(e->ts_ns, BS_SLOT_EXIT, e->reason, e->isa);
}

/* An exit is counted once, with its latency, by the kvm_entry that ends it:
 * one map lookup for both. kvm_exit only notes it in the thread's entry. */
SEC("tracepoint/kvm/kvm_exit")
int bs_kvm_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct bs_exit_start *pending;
	__u32 phase, reason, isa, vcpu_id;
	__u64 rip = 0, gpa = 0;

	if (!bs_follow_vm(tgid, &phase))
		return 0;
	isa = BS_CTX(ctx, BS_P_KVM_EXIT_ISA);
	reason = BS_CTX(ctx, BS_P_KVM_EXIT_EXIT_REASON);
	if (isa == BS_ISA_VMX)
		reason &= BS_VMX_REASON_MASK;
	bs_hold_if_exit(isa, reason);
	vcpu_id = BS_CTX(ctx, BS_P_KVM_EXIT_VCPU_ID);
	if (exit_sites_on) {
		rip = BS_CTX(ctx, BS_P_KVM_EXIT_GUEST_RIP);
		if (isa == BS_ISA_SVM && reason == BS_SVM_EXIT_NPF)
			gpa = BS_CTX(ctx, BS_P_KVM_EXIT_INFO2);
	} else if (bs_io_exit(isa, reason)) {
		rip = BS_CTX(ctx, BS_P_KVM_EXIT_GUEST_RIP);
	}

	/* A vCPU thread's entry stays in the map from exit to exit: writing
	 * it in place spares a map update (a free-list pop and a lock) on
	 * every exit. Only this thread writes it; kvm_entry reads it on this
	 * same thread. */
	pending = bpf_map_lookup_elem(&exit_start, &tid);
	if (pending && pending->vcpu_id == vcpu_id && pending->tgid == tgid) {
		/* The previous exit if no entry ended it (kvm_entry not
		 * attached, or attached after that exit). */
		bs_count_unended(pending);
		pending->reason = reason;
		pending->isa = isa;
		pending->phase = phase;
		pending->rip = rip;
		if (exit_sites_on)
			pending->gpa = gpa;
		pending->ts_ns = bpf_ktime_get_ns();
	} else {
		/* This thread's first exit (or first as this vCPU): the one
		 * time its vCPU index is recorded. An entry of another vCPU
		 * still open is counted first. */
		struct bs_exit_start start = {
			.ts_ns = bpf_ktime_get_ns(),
			.reason = reason,
			.isa = isa,
			.vcpu_id = vcpu_id,
			.phase = phase,
			.tgid = tgid,
			.rip = rip,
			.gpa = gpa,
		};
		struct bs_vcpu_key vkey = { .tgid = tgid, .vcpu_id = vcpu_id };

		if (pending)
			bs_count_unended(pending);
		if (bpf_map_update_elem(&exit_start, &tid, &start, BPF_ANY))
			bs_percpu_inc(&map_overflows, 0);
		bpf_map_update_elem(&vcpu_tids, &vkey, &tid, BPF_ANY);
	}
	return 0;
}

SEC("raw_tp/kvm_entry")
int bs_kvm_entry(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct bs_exit_start *start;
	struct bs_hist *hist;
	__u64 now, delta, exited;

	/* Only threads of followed processes have an exit open (the tgid
	 * check: a thread id reused by another process). */
	start = bpf_map_lookup_elem(&exit_start, &tid);
	if (!start || !start->ts_ns || start->tgid != (__u32)(id >> 32))
		return 0;
	now = bpf_ktime_get_ns();
	delta = now > start->ts_ns ? now - start->ts_ns : 0;
	hist = bs_exit_hist(start);
	exited = start->ts_ns;
	start->ts_ns = 0;
	if (!hist)
		return 0;
	__sync_fetch_and_add(&hist->count, 1);
	__sync_fetch_and_add(&hist->slots[bs_hist_slot(delta)], 1);
	__sync_fetch_and_add(&hist->total_ns, delta);
	if (exit_sites_on)
		bs_count_npf(start, 1, delta);
	bs_count_slot(exited, BS_SLOT_EXIT, start->reason, start->isa);
	return 0;
}

SEC("tracepoint/kvm/kvm_userspace_exit")
int bs_kvm_userspace_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, phase;
	struct bs_uexit_key key = {};
	__s32 err;

	if (!bs_follow_vm(tgid, &phase))
		return 0;
	err = (__s32)BS_CTX(ctx, BS_P_KVM_USERSPACE_EXIT_ERRNO);
	key.tgid = tgid;
	key.tid = (__u32)id;
	key.code = err < 0 ? (BS_UEXIT_ERRNO_FLAG | (__u32)-err)
			   : (__u32)BS_CTX(ctx, BS_P_KVM_USERSPACE_EXIT_REASON);
	key.phase = phase;
	bs_count(&uexit_counts, &key, 1);
	if (err >= 0)
		bs_hold_if_uexit(key.code);
	if (time_slot_ns)
		bs_count_slot(bpf_ktime_get_ns(), BS_SLOT_UEXIT, key.code, 0);
	return 0;
}

SEC("tracepoint/kvm/kvm_pio")
int bs_kvm_pio(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, phase;
	struct bs_pio_key key = {};

	if (!bs_follow_vm(tgid, &phase))
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

	if (!bs_followed_vm(tgid))
		return 0;
	key.tgid = tgid;
	key.type = BS_CTX(ctx, BS_P_KVM_MMIO_TYPE);
	key.gpa = BS_CTX(ctx, BS_P_KVM_MMIO_GPA);
	bs_count(&mmio_counts, &key, 1);
	bs_hold_if_mmio(key.type, BS_CTX(ctx, BS_P_KVM_MMIO_LEN), key.gpa,
			BS_CTX(ctx, BS_P_KVM_MMIO_VAL));
	return 0;
}

SEC("tracepoint/kvm/kvm_msr")
int bs_kvm_msr(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct bs_msr_key key = {};

	if (!bs_followed_vm(tgid))
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

	if (!bs_followed_vm(tgid))
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

	if (!bs_follow_vm(tgid, &phase))
		return 0;
	key.tgid = tgid;
	key.phase = phase;
	key.failed = BS_CTX(ctx, BS_P_KVM_EMULATE_INSN_FAILED) != 0;
	bs_count(&emulate_counts, &key, 1);
	return 0;
}
