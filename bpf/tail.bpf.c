// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Fault-tail collector: the page faults of a restored guest in the window
 * from its first KVM_RUN to its next mark, each guest fault with what its
 * service cost on the host.
 *
 * A guest fault KVM serves begins with kvmmmu:kvm_mmu_pagetable_walk (the
 * shadow MMU's walk of the guest's tables: PVM) or kvm:kvm_page_fault (an
 * EPT violation or NPF: VMX/SVM) and ends with kvmmmu:kvm_mmu_spte_requested
 * (KVM about to map the page, its host page in hand). Between the two, KVM
 * got the host page through get_user_pages, which raises no exception:
 * the host faults it took are read from the thread's own fault counters
 * (task_struct min_flt, maj_flt: what /proc/PID/task/TID/stat reports),
 * before and after. A fault that went through the page cache
 * (filemap:mm_filemap_fault or mm_filemap_map_pages in between) is
 * file-backed. Host faults of the VM's threads outside a guest fault (the
 * VMM's own threads, KVM's other work) are the counters' rest.
 *
 * The window opens at the first guest fault of a followed VM after
 * userspace armed it, and closes at the guest's next mark (userspace sets
 * end_ns). Everything is aggregated here: a curve of faults per time
 * bucket and kind, faults per 2 MiB guest-physical region and per exit
 * site (the guest RIP the exits collector noted, VMX/SVM with exit sites
 * on), a service-time histogram per kind, and the distinct guest pages.
 */
#include "common.bpf.h"
#include "exits.h"
#include "tail.h"

/* Set by userspace: the curve's bucket width, and whether the task
 * counters can be read, at which offsets of task_struct (found in the
 * kernel's BTF by profiler/src/task_fields.rs; no CO-RE relocation, so the
 * loader need not parse all of it). */
const volatile __u64 tail_bucket_ns = 1000000;
const volatile __u32 read_fault_counters = 0;
const volatile __u32 task_min_flt_off = 0;
const volatile __u32 task_maj_flt_off = 0;

BS_FIELD(kvm_mmu_spte_requested, gfn);

BS_MAP(tail_window, BPF_MAP_TYPE_ARRAY, 1, __u32, struct bs_tail_window);

/* Where and when the window opened (key 0; tgid 0 until it opens). An
 * array: its lookup is a load, on every fault. */
BS_MAP(tail_start, BPF_MAP_TYPE_ARRAY, 1, __u32, struct bs_tail_start);

BS_MAP(tail_totals, BPF_MAP_TYPE_PERCPU_ARRAY, BS_TT_COUNT, __u32, __u64);

BS_MAP(tail_threads, BPF_MAP_TYPE_HASH, 1024, __u32, struct bs_tail_thread);

/* The curve, regions and sites fill as faults come: not preallocated, so
 * that creating them at start-up costs only their buckets (preallocating
 * their 98,304 entries was most of the collector's start-up). */
#define BS_TAIL_MAP(name, entries, key_t, value_t) \
	struct {                                   \
		__uint(type, BPF_MAP_TYPE_HASH);   \
		__uint(max_entries, entries);      \
		__uint(map_flags, BPF_F_NO_PREALLOC); \
		__type(key, key_t);                \
		__type(value, value_t);            \
	} name SEC(".maps")

BS_TAIL_MAP(tail_curve, 65536, struct bs_tail_curve_key, __u64);

BS_TAIL_MAP(tail_sites, 16384, struct bs_tail_where_key, struct bs_tail_where);

/* Faults per 2 MiB guest-physical region and kind: entry
 * region * BS_TAIL_KINDS + kind, from guest-physical 0 over the range the
 * loader sets for the guest (profiler/src/collector/tail.rs, map_sizes); a
 * fault above it is counted in map_overflows. An array, as the histograms
 * below: the window has one process, so a fault's entry is found by index
 * (a load the verifier inlines), not hashed. */
BS_MAP(tail_regions, BPF_MAP_TYPE_ARRAY, 16384, __u32, struct bs_tail_where);

/* The service-time histogram of each kind (entry: the kind). */
BS_MAP(tail_latency, BPF_MAP_TYPE_ARRAY, BS_TAIL_KINDS, __u32, struct bs_hist);

/* The distinct guest pages (gfn) faulted in the window, one bit per page
 * from guest-physical 0: entry i holds pages 64 i to 64 i + 63. A page's
 * first fault sets its bit and is counted (BS_TT_PAGES); a page beyond
 * the set's range, in BS_TT_PAGES_BEYOND. An array, so a fault costs a
 * lookup and no allocation; its range is set at load for the guest's
 * memory (profiler/src/collector/tail.rs, map_sizes), as are the sizes of
 * tail_regions and tail_threads. */
BS_MAP(tail_pages, BPF_MAP_TYPE_ARRAY, 65536, __u32, __u64);

/* The exits collector's map (exits.bpf.c defines it). */
BS_MAP(exit_start, BPF_MAP_TYPE_HASH, 8192, __u32, struct bs_exit_start) __weak;

static __always_inline void bs_tail_add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&tail_totals, &idx);

	if (v)
		*v += n;
}

/* The window if it is open for tgid at now (*start_ns: its start), opening
 * an armed one when may_open (a guest fault's start): the first program to
 * set tail_start's time opens it, then names its process. */
static __always_inline int bs_tail_win(__u32 tgid, __u64 now, int may_open, __u64 *start_ns)
{
	__u32 zero = 0;
	struct bs_tail_window *w = bpf_map_lookup_elem(&tail_window, &zero);
	struct bs_tail_start *s;

	if (!w || w->state == BS_TAIL_OFF)
		return 0;
	s = bpf_map_lookup_elem(&tail_start, &zero);
	if (!s)
		return 0;
	if (!s->tgid) {
		/* Another CPU opening it at the same time wins or loses here;
		 * the loser's fault, in the instant before the winner names
		 * its process, is not the window's. */
		if (!may_open || w->state != BS_TAIL_ARMED ||
		    __sync_val_compare_and_swap(&s->start_ns, 0, now) != 0)
			return 0;
		s->tgid = tgid;
	}
	if (s->tgid != tgid || (w->end_ns && now > w->end_ns))
		return 0;
	*start_ns = s->start_ns;
	return 1;
}

/* The current thread's fault counters (0 when their offsets are unknown). */
static __always_inline void bs_tail_counters(__u64 *min, __u64 *maj)
{
	char *task;

	*min = 0;
	*maj = 0;
	if (!read_fault_counters)
		return;
	task = (char *)bpf_get_current_task();
	if (task_maj_flt_off == task_min_flt_off + sizeof(__u64)) {
		/* Side by side, as in every kernel so far: one read. */
		__u64 both[2] = {};

		if (!bpf_probe_read_kernel(both, sizeof(both), task + task_min_flt_off)) {
			*min = both[0];
			*maj = both[1];
		}
		return;
	}
	if (bpf_probe_read_kernel(min, sizeof(*min), task + task_min_flt_off))
		*min = 0;
	if (bpf_probe_read_kernel(maj, sizeof(*maj), task + task_maj_flt_off))
		*maj = 0;
}

/* The thread's entry (made at its first event in the window) with the
 * host faults since its last event in *dmin, *dmaj; its last counters
 * are moved to now. */
static __always_inline struct bs_tail_thread *bs_tail_step(__u32 tgid, __u32 tid, __u64 *dmin,
							   __u64 *dmaj)
{
	struct bs_tail_thread *t;
	__u64 min, maj;

	bs_tail_counters(&min, &maj);
	*dmin = 0;
	*dmaj = 0;
	t = bpf_map_lookup_elem(&tail_threads, &tid);
	if (!t) {
		struct bs_tail_thread init = {
			.first_min = min, .first_maj = maj,
			.last_min = min, .last_maj = maj, .tgid = tgid,
		};

		if (bpf_map_update_elem(&tail_threads, &tid, &init, BPF_NOEXIST) != 0)
			bs_percpu_inc(&map_overflows, 0);
		return bpf_map_lookup_elem(&tail_threads, &tid);
	}
	if (min > t->last_min)
		*dmin = min - t->last_min;
	if (maj > t->last_maj)
		*dmaj = maj - t->last_maj;
	t->last_min = min;
	t->last_maj = maj;
	return t;
}

/* A guest fault's service begins. */
static __always_inline int bs_tail_begin(void)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), dmin, dmaj, start;
	__u32 tgid = id >> 32, phase;
	struct bs_tail_thread *t;

	if (!bs_follow(tgid, &phase) || !bs_tail_win(tgid, now, 1, &start))
		return 0;
	t = bs_tail_step(tgid, (__u32)id, &dmin, &dmaj);
	bs_tail_add(BS_TT_MINOR_OTHER, dmin);
	bs_tail_add(BS_TT_MAJOR_OTHER, dmaj);
	if (t) {
		t->walk_ns = now;
		t->file = 0;
	}
	return 0;
}

SEC("raw_tp/kvm_mmu_pagetable_walk")
int bs_tail_walk(void *ctx)
{
	return bs_tail_begin();
}

SEC("raw_tp/kvm_page_fault")
int bs_tail_npf(void *ctx)
{
	return bs_tail_begin();
}

static __always_inline void bs_tail_where(void *map, __u32 tgid, __u32 kind, __u64 at, __u64 ns)
{
	struct bs_tail_where_key key = { .tgid = tgid, .kind = kind, .at = at };
	struct bs_tail_where zero = {};
	struct bs_tail_where *v = bs_lookup_or_init(map, &key, &zero);

	if (!v)
		return;
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->total_ns, ns);
}

/* A fault of kind at 2 MiB region `region`, served in ns. */
static __always_inline void bs_tail_region(__u32 kind, __u64 region, __u64 ns)
{
	struct bs_tail_where *v = NULL;
	__u32 idx;

	if (region < 0xffffffffULL / BS_TAIL_KINDS) {
		idx = (__u32)region * BS_TAIL_KINDS + kind;
		v = bpf_map_lookup_elem(&tail_regions, &idx);
	}
	if (!v) {
		bs_percpu_inc(&map_overflows, 0);
		return;
	}
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->total_ns, ns);
}

static __always_inline __u32 bs_tail_kind(__u64 dmin, __u64 dmaj, __u32 file)
{
	if (dmaj)
		return file ? BS_TAIL_MAJOR_FILE : BS_TAIL_MAJOR_ANON;
	if (dmin)
		return file ? BS_TAIL_MINOR_FILE : BS_TAIL_MINOR_ANON;
	return BS_TAIL_RESIDENT;
}

/* Every guest fault KVM serves for a followed VM, window or not (the
 * count compared with KVM's own statistics). It reads no field of the
 * record, so it attaches raw and stays attached when the window's
 * programs are detached at its end. */
SEC("raw_tp/kvm_mmu_spte_requested")
int bs_tail_spte_all(void *ctx)
{
	__u32 phase;

	if (bs_follow(bpf_get_current_pid_tgid() >> 32, &phase))
		bs_tail_add(BS_TT_GUEST_ALL, 1);
	return 0;
}

/* What a served guest fault adds to the window's counts, its kind and
 * service time known: the latency histogram, the curve, its region, its
 * exit site and its page. A global function, so the verifier checks it
 * once for any kind and time, not again on each of the caller's paths
 * (five kinds, each with its own known constant): that was most of the
 * collector's verification, the larger part of its start-up. */
__attribute__((noinline)) int bs_tail_account(__u64 id, __u32 kind, __u64 ns, __u64 gfn,
					      __u64 bucket)
{
	__u32 tgid = id >> 32, tid = (__u32)id, word;
	struct bs_exit_start *ex;
	__u64 *bits = NULL;

	if (kind >= BS_TAIL_KINDS)
		return 0;
	{
		struct bs_tail_curve_key ck = {
			.tgid = tgid,
			.bucket = bucket > 0xffffffffULL ? 0xffffffffU : (__u32)bucket,
			.kind = kind,
		};

		bs_count(&tail_curve, &ck, 1);
	}
	bs_tail_region(kind, gfn >> (BS_TAIL_REGION_SHIFT - 12), ns);
	ex = bpf_map_lookup_elem(&exit_start, &tid);
	if (ex && ex->rip && ex->tgid == tgid)
		bs_tail_where(&tail_sites, tgid, kind, ex->rip, ns);
	if ((gfn >> 6) <= 0xffffffffULL) {
		word = (__u32)(gfn >> 6);
		bits = bpf_map_lookup_elem(&tail_pages, &word);
	}
	if (!bits) {
		bs_tail_add(BS_TT_PAGES_BEYOND, 1);
	} else {
		__u64 bit = 1ULL << (gfn & 63);

		/* Set already: no atomic. Two vCPUs on one new page: the
		 * fetch tells which set it first. */
		if (!(*bits & bit) && !(__sync_fetch_and_or(bits, bit) & bit))
			bs_tail_add(BS_TT_PAGES, 1);
	}
	/* The service-time histogram of the fault's kind (kind checked above). */
	bs_hist_count(&tail_latency, &kind, ns);
	return 0;
}

/* A guest fault of the window served: its kind (from the host faults the
 * thread took since it began) and service time, then what it adds. A
 * global function too: verified once, whatever the caller knows. */
__attribute__((noinline)) int bs_tail_served(__u64 id, __u64 now, __u64 start, __u64 gfn)
{
	__u32 tgid = id >> 32, tid = (__u32)id, kind;
	__u64 dmin, dmaj, ns = 0, bucket;
	struct bs_tail_thread *t;

	t = bs_tail_step(tgid, tid, &dmin, &dmaj);
	if (!t)
		return 0;
	kind = bs_tail_kind(dmin, dmaj, t->file);
	if (t->walk_ns && now > t->walk_ns)
		ns = now - t->walk_ns;
	t->walk_ns = 0;
	t->file = 0;
	bs_tail_add(BS_TT_GUEST, 1);
	bs_tail_add(BS_TT_MINOR_IN_FAULT, dmin);
	bs_tail_add(BS_TT_MAJOR_IN_FAULT, dmaj);
	bucket = now > start ? (now - start) / (tail_bucket_ns ? tail_bucket_ns : 1) : 0;
	return bs_tail_account(id, kind, ns, gfn, bucket);
}

/* Where struct kvm_page_fault's gfn is (from the kernel's BTF), set
 * before load when bs_tail_spte_raw replaces bs_tail_spte. */
const volatile __u32 spte_gfn_off = 0;

/* A guest fault's service ends: KVM maps the page. The frame is read from
 * the classic record's gfn field, or (raw) from the struct kvm_page_fault
 * that is the raw tracepoint's argument, only once the fault is known to
 * be one of the window's. */
static __always_inline int bs_tail_end(void *ctx, int raw)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), start, gfn = 0;
	__u32 phase;

	if (!bs_follow(id >> 32, &phase) || !bs_tail_win(id >> 32, now, 0, &start))
		return 0;
	if (raw)
		bpf_probe_read_kernel(&gfn, sizeof(gfn),
				      (void *)((struct bpf_raw_tracepoint_args *)ctx)->args[0] +
					      spte_gfn_off);
	else
		gfn = BS_READ(ctx, kvm_mmu_spte_requested, gfn);
	bs_tail_served(id, now, start, gfn);
	return 0;
}

SEC("tracepoint/kvmmmu/kvm_mmu_spte_requested")
int bs_tail_spte(void *ctx)
{
	return bs_tail_end(ctx, 0);
}

/* The same, attached raw: no record is built for it, and the kernel's
 * perf tracepoint machinery is never engaged (in the lab, a classic
 * tracepoint program attached there slowed the guest's faults after it
 * was detached). */
SEC("raw_tp/kvm_mmu_spte_requested")
int bs_tail_spte_raw(void *ctx)
{
	return bs_tail_end(ctx, 1);
}

/* A fault of the thread's open guest fault went through the page cache. */
static __always_inline int bs_tail_filemap(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bs_tail_thread *t = bpf_map_lookup_elem(&tail_threads, &tid);

	if (t && t->walk_ns)
		t->file = 1;
	return 0;
}

SEC("raw_tp/mm_filemap_fault")
int bs_tail_filemap_fault(void *ctx)
{
	return bs_tail_filemap();
}

SEC("raw_tp/mm_filemap_map_pages")
int bs_tail_filemap_map(void *ctx)
{
	return bs_tail_filemap();
}

/* A host exception of one of the VM's threads in the window: counted;
 * the faults before it, outside a guest fault, go to the rest. */
static __always_inline int bs_tail_exception(__u32 idx)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), dmin, dmaj, start;
	__u32 tgid = id >> 32, tid = (__u32)id, phase;
	struct bs_tail_thread *t;

	if (!bs_follow(tgid, &phase) || !bs_tail_win(tgid, now, 0, &start))
		return 0;
	bs_tail_add(idx, 1);
	t = bpf_map_lookup_elem(&tail_threads, &tid);
	if (t && t->walk_ns)
		return 0; /* inside a guest fault's service: counted at its end */
	bs_tail_step(tgid, tid, &dmin, &dmaj);
	bs_tail_add(BS_TT_MINOR_OTHER, dmin);
	bs_tail_add(BS_TT_MAJOR_OTHER, dmaj);
	return 0;
}

SEC("raw_tp/page_fault_user")
int bs_tail_exc_user(void *ctx)
{
	return bs_tail_exception(BS_TT_EXC_USER);
}

SEC("raw_tp/page_fault_kernel")
int bs_tail_exc_kernel(void *ctx)
{
	return bs_tail_exception(BS_TT_EXC_KERNEL);
}
