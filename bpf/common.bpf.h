/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* State and helpers every collector shares. The collectors are compiled one
 * by one and linked into one object (`bpftool gen object`); the maps here are
 * weak definitions, so the linker keeps one copy that all programs use. */
#ifndef BOOTSCOPE_COMMON_BPF_H
#define BOOTSCOPE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "common.h"

/* GPL: the programs use GPL-only helpers (bpf_probe_read_kernel); the C
 * sources are dual licensed (see each file's SPDX line). Weak, as every
 * collector includes this header. */
char LICENSE[] SEC("license") __weak = "GPL";

/* Declares the run-time layout of one tracepoint field: a global named
 * EVENT__FIELD that userspace sets from the tracefs format file. Weak, so
 * two collectors reading the same field share one global. */
#define BS_FIELD(event, field) \
	const volatile struct bs_field event##__##field __weak = {}

/* Reads a tracepoint field (unsigned, at most 8 bytes) at its run-time
 * offset; an absent field (size 0) reads as 0. One helper call per field:
 * for programs that run rarely. */
#define BS_READ(ctx, event, field) \
	bs_read_field((ctx), event##__##field.off, event##__##field.size)

/* A field of the record, loaded straight from it: the load is compiled
 * with the placeholder offset BS_PATCH_BASE + slot (enum bs_patch_slot) and
 * userspace patches in the field's offset and width before load, so an
 * event costs no helper call for its fields. The verifier accepts any
 * aligned read of a tracepoint record past its first 8 bytes; userspace
 * has checked both for each field. Unsigned: narrower fields arrive
 * zero-extended. */
#define BS_CTX(ctx, slot)                                                    \
	({                                                                   \
		__u64 __v;                                                   \
		asm volatile("%[v] = *(u64 *)(%[c] + %[o])"                  \
			     : [v] "=r"(__v)                                 \
			     : [c] "r"(ctx), [o] "i"(BS_PATCH_BASE + (slot))); \
		__v;                                                         \
	})

/* A map of the usual shape: its type, its size (userspace may resize it
 * before load, by name), its key and value types. Maps with flags spell
 * their definition out. */
#define BS_MAP(name, map_type, entries, key_t, value_t) \
	struct {                                       \
		__uint(type, map_type);                \
		__uint(max_entries, entries);          \
		__type(key, key_t);                    \
		__type(value, value_t);                \
	} name SEC(".maps")

/* The process being profiled (see struct bs_target); userspace sets it
 * before attaching. Its phase changes at a port mark in the phases
 * collector (bs_switch_phase), and from userspace at the VMM's and the
 * console's marks. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bs_target);
} target SEC(".maps") __weak;

/* Processes (tgids) being profiled: the target and its descendants, each
 * with its boot phase index (0 = before the first phase mark). Userspace
 * adds the target; phases change as the target's do; task_newtask adds
 * new child processes, in their parent's phase. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} followed SEC(".maps") __weak;

/* What must be streamed: marks and thread lifetimes. Userspace sets the
 * size before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps") __weak;

/* Ring buffer records that could not be reserved (buffer full). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost_events SEC(".maps") __weak;

/* Events not counted because an aggregation map was full. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} map_overflows SEC(".maps") __weak;

/* Events each program saw from followed processes (enum bs_source). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BS_SRC_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} source_events SEC(".maps") __weak;

/* Per-slot counts (struct bs_slot_key): set before load. Width 0 (the
 * default) turns them off, and the verifier drops their code. Weak: every
 * collector that counts per slot includes this header. */
const volatile __u64 time_slot_ns __weak = 0;
/* bpf_ktime_get_ns() at the start of slot 0 (the profile's zero). */
const volatile __u64 time_slot_base_ns __weak = 0;

/* Counts per {run of slots, kind, code, isa} (struct bs_slot_run). Not
 * preallocated, and one entry big unless slots are on: entries are added
 * in time order, so when it is full the slots that lose counts are the
 * latest ones. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct bs_slot_key);
	__type(value, struct bs_slot_run);
} time_slots SEC(".maps") __weak;

/* Events not counted per slot because time_slots was full, by
 * enum bs_slot_kind (they are in the totals all the same). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BS_SLOT_KINDS);
	__type(key, __u32);
	__type(value, __u64);
} time_slot_overflows SEC(".maps") __weak;

/* The first slot an event could not be counted in (key 0; the first
 * insert wins): slots before it are complete. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} time_slot_full_at SEC(".maps") __weak;

static __always_inline __u64 bs_read_field(void *ctx, __u32 off, __u32 size)
{
	__u64 v = 0;

	if (size > sizeof(v))
		size = sizeof(v);
	bpf_probe_read_kernel(&v, size, (char *)ctx + off);
	return v;
}

/* Whether tgid is profiled, and its phase: the target from the array slot
 * (no helper call), descendants from the hash. */
static __always_inline int bs_follow(__u32 tgid, __u32 *phase)
{
	__u32 zero = 0, *p;
	struct bs_target *t = bpf_map_lookup_elem(&target, &zero);

	if (t && t->tgid == tgid && tgid != 0) {
		*phase = t->phase;
		return 1;
	}
	p = bpf_map_lookup_elem(&followed, &tgid);
	if (!p)
		return 0;
	*phase = *p;
	return 1;
}

static __always_inline int bs_followed(__u32 tgid)
{
	__u32 phase;

	return bs_follow(tgid, &phase);
}

static __always_inline void bs_percpu_inc(void *map, __u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(map, &idx);

	if (v)
		*v += 1;
}

static __always_inline void bs_count_source(__u32 src)
{
	bs_percpu_inc(&source_events, src);
}

/* Adds n to the u64 counter at key, creating it if needed; two CPUs may
 * race to create it, so a failed insert looks the key up again. */
static __always_inline void bs_count(void *map, const void *key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, key);

	if (v) {
		__sync_fetch_and_add(v, n);
		return;
	}
	if (bpf_map_update_elem(map, key, &n, BPF_NOEXIST) == 0)
		return;
	v = bpf_map_lookup_elem(map, key);
	if (v) {
		__sync_fetch_and_add(v, n);
		return;
	}
	bs_percpu_inc(&map_overflows, 0);
}

static const struct bs_slot_run bs_zero_run;

/* Counts one event of kind/code/isa that happened at ts (bpf_ktime_get_ns)
 * in its time slot, in the entry of the slot's run (made, zeroed, by the
 * run's first event); a full map is counted in time_slot_overflows, never
 * silently. Nothing at all when slots are off. */
static __always_inline void bs_count_slot(__u64 ts, __u32 kind, __u32 code, __u32 isa)
{
	struct bs_slot_key key = {};
	struct bs_slot_run *v;
	__u64 slot;
	__u32 zero = 0, i;

	if (!time_slot_ns)
		return;
	slot = ts > time_slot_base_ns ? (ts - time_slot_base_ns) / time_slot_ns : 0;
	if (slot > 0xffffffffULL)
		slot = 0xffffffffULL;
	i = (__u32)slot & (BS_SLOT_RUN - 1);
	key.slot = (__u32)slot & ~(__u32)(BS_SLOT_RUN - 1);
	key.kind = kind;
	key.code = code;
	key.isa = isa;
	v = bpf_map_lookup_elem(&time_slots, &key);
	if (!v) {
		/* Another CPU may make it first: either way, look it up again. */
		bpf_map_update_elem(&time_slots, &key, &bs_zero_run, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&time_slots, &key);
	}
	if (v) {
		__sync_fetch_and_add(&v->n[i], 1);
		return;
	}
	bs_percpu_inc(&time_slot_overflows, kind);
	bpf_map_update_elem(&time_slot_full_at, &zero, &slot, BPF_NOEXIST);
}

/* Keeps the compiler from reasoning about (and dropping) a bounds check the
 * verifier needs to see. */
#define BS_BARRIER_VAR(v) asm volatile("" : "+r"(v))

/* 1 when x is not 0, else 0, with no branch: x | -x has its top bit set
 * for every x but 0. The barrier keeps the compiler from turning it back
 * into a comparison, which the BPF backend makes a branch. */
static __always_inline __u64 bs_nonzero(__u64 x)
{
	__u64 t = x | -x;

	BS_BARRIER_VAR(t);
	return t >> 63;
}

/* floor(log2(v)) for v > 0, 0 for v == 0, by halving the range five times
 * (as bcc's bits.bpf.h log2l) with no branch: the verifier walks it once,
 * where a branch per step made 32 paths of everything after it. */
static __always_inline __u32 bs_log2(__u64 v)
{
	__u64 r, shift;

	r = bs_nonzero(v >> 32) << 5;
	v >>= r;
	shift = bs_nonzero(v >> 16) << 4;
	v >>= shift;
	r |= shift;
	shift = bs_nonzero(v >> 8) << 3;
	v >>= shift;
	r |= shift;
	shift = bs_nonzero(v >> 4) << 2;
	v >>= shift;
	r |= shift;
	shift = bs_nonzero(v >> 2) << 1;
	v >>= shift;
	r |= shift;
	r |= v >> 1;
	return (__u32)r;
}

/* The histogram slot of a value: log2, clamped to the last slot, then
 * masked so that even older verifiers see it in bounds (BS_HIST_SLOTS is a
 * power of two). */
static __always_inline __u64 bs_hist_slot(__u64 ns)
{
	__u64 slot = bs_log2(ns);

	if (slot >= BS_HIST_SLOTS)
		slot = BS_HIST_SLOTS - 1;
	BS_BARRIER_VAR(slot);
	return slot & (BS_HIST_SLOTS - 1);
}

/* The value at key in map, created from init if absent; two CPUs may race
 * to create it, so the loser finds the winner's. NULL, counted in
 * map_overflows, when the map is full. */
static __always_inline void *bs_lookup_or_init(void *map, const void *key, const void *init)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, key);
	if (!v)
		bs_percpu_inc(&map_overflows, 0);
	return v;
}

/* Adds one value of ns to the log2 histogram at key in map (struct
 * bs_hist values), creating it if needed; a full map is counted in
 * map_overflows. */
static __always_inline void bs_hist_count(void *map, const void *key, __u64 ns)
{
	struct bs_hist zero = {};
	struct bs_hist *h = bs_lookup_or_init(map, key, &zero);

	if (!h)
		return;
	__sync_fetch_and_add(&h->slots[bs_hist_slot(ns)], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->total_ns, ns);
}

/* Reserves a ring buffer record with the common header filled in, or
 * counts it as lost. */
static __always_inline struct bs_event *bs_event_reserve(__u32 kind, __u32 tgid, __u32 tid)
{
	struct bs_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		bs_percpu_inc(&lost_events, 0);
		return NULL;
	}
	e->kind = kind;
	e->tgid = tgid;
	e->tid = tid;
	e->cpu = bpf_get_smp_processor_id();
	e->ts_ns = bpf_ktime_get_ns();
	e->arg0 = 0;
	e->arg1 = 0;
	__builtin_memset(e->comm, 0, sizeof(e->comm));
	return e;
}

/* Set before load: follow every process that runs a KVM guest, from its
 * first KVM event on (`bootscope exporter`). 0: only the target and its
 * descendants, and the verifier drops the code below. */
const volatile __u32 follow_any_vm __weak = 0;

/* bs_follow for the programs of KVM's own events (they fire only in a
 * process running a guest): with follow_any_vm, a process not followed yet
 * is from now on, in phase 0, and userspace hears of it (BS_EV_VM_NEW).
 * Two CPUs may race to add it: the one whose insert wins reports it. */
static __always_inline int bs_follow_vm(__u32 tgid, __u32 *phase)
{
	__u32 zero = 0;
	struct bs_event *e;

	if (bs_follow(tgid, phase))
		return 1;
	if (!follow_any_vm || tgid == 0)
		return 0;
	*phase = 0;
	if (bpf_map_update_elem(&followed, &tgid, &zero, BPF_NOEXIST) != 0)
	{
		/* Added by another CPU meanwhile, or the map is full. */
		if (bpf_map_lookup_elem(&followed, &tgid))
			return 1;
		bs_percpu_inc(&map_overflows, 0);
		return 0;
	}
	e = bs_event_reserve(BS_EV_VM_NEW, tgid, (__u32)bpf_get_current_pid_tgid());
	if (e) {
		bpf_get_current_comm(e->comm, sizeof(e->comm));
		bpf_ringbuf_submit(e, 0);
	}
	return 1;
}

static __always_inline int bs_followed_vm(__u32 tgid)
{
	__u32 phase;

	return bs_follow_vm(tgid, &phase);
}

#endif /* BOOTSCOPE_COMMON_BPF_H */
