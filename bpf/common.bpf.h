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
#include "exits.h"

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
 * offset, straight from the record: no helper call (see bs_ctx_field). An
 * absent field (size 0) reads as 0. */
#define BS_READ(ctx, event, field) \
	bs_ctx_field((ctx), event##__##field.off, event##__##field.size, \
		     event##__##field.end)

/* The process being profiled (see struct bs_target); userspace sets it
 * before attaching and writes its phase when a phase mark arrives. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bs_target);
} target SEC(".maps") __weak;

/* Processes (tgids) being profiled: the target and its descendants, each
 * with its boot phase index (0 = before the first phase mark). Userspace
 * adds the target and writes phases; task_newtask adds new child
 * processes, in their parent's phase. */
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

/* The exit each CPU's vCPU thread is handling (exits collector): kvm_exit
 * writes it and kvm_entry, on the same CPU unless the thread was switched
 * out in between, reads it back. A per-CPU slot costs no hashing on the two
 * events every exit raises. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bs_exit_start);
} exit_slot SEC(".maps") __weak;

/* Pending exits of threads switched out between kvm_exit and kvm_entry
 * (halts, userspace exits, preemption), by thread: they may come back on
 * another CPU. sched_switch moves them here from exit_slot. LRU: entries
 * of threads that ended are evicted instead of filling it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct bs_exit_start);
} exit_start SEC(".maps") __weak;

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

/* A field copied with a helper call: for layouts the direct loads below do
 * not cover (a field far into the record, one not aligned to its size). */
static __always_inline __u64 bs_probe_field(void *ctx, __u32 off, __u32 size)
{
	__u64 v = 0;

	if (size > sizeof(v))
		size = sizeof(v);
	bpf_probe_read_kernel(&v, size, (char *)ctx + off);
	return v;
}

/* One load from the record at a constant offset. Tracepoint programs may
 * read their record directly, but only at offsets written in the
 * instruction (the verifier refuses a context pointer moved by a register),
 * so the loads are written out: asm, so that the compiler cannot merge the
 * cases below into one load at a variable offset. */
#define BS_LDX(width, ctx, o)                                                \
	({                                                                   \
		__u64 __v;                                                   \
		asm volatile("%0 = *(" #width " *)(%1 + " #o ")"             \
			     : "=r"(__v)                                     \
			     : "r"(ctx));                                    \
		__v;                                                         \
	})
#define BS_B(o) \
	case o: \
		return BS_LDX(u8, ctx, o);
#define BS_W(o) \
	case o: \
		return BS_LDX(u32, ctx, o);
#define BS_D(o) \
	case o: \
		return BS_LDX(u64, ctx, o);

/* The aligned 32-bit word at off (a multiple of 4, 8..124). */
static __always_inline __u64 bs_ctx_word(void *ctx, __u32 off)
{
	switch (off) {
	BS_W(8) BS_W(12) BS_W(16) BS_W(20) BS_W(24) BS_W(28) BS_W(32) BS_W(36)
	BS_W(40) BS_W(44) BS_W(48) BS_W(52) BS_W(56) BS_W(60) BS_W(64) BS_W(68)
	BS_W(72) BS_W(76) BS_W(80) BS_W(84) BS_W(88) BS_W(92) BS_W(96)
	BS_W(100) BS_W(104) BS_W(108) BS_W(112) BS_W(116) BS_W(120) BS_W(124)
	default:
		return bs_probe_field(ctx, off, 4);
	}
}

/* The aligned 64-bit word at off (a multiple of 8, 8..120). */
static __always_inline __u64 bs_ctx_dword(void *ctx, __u32 off)
{
	switch (off) {
	BS_D(8) BS_D(16) BS_D(24) BS_D(32) BS_D(40) BS_D(48) BS_D(56) BS_D(64)
	BS_D(72) BS_D(80) BS_D(88) BS_D(96) BS_D(104) BS_D(112) BS_D(120)
	default:
		return bs_probe_field(ctx, off, 8);
	}
}

/* The byte at off (8..63): flags such as kvm_msr's exception sit last in
 * their record, where the word holding them would reach past its end. */
static __always_inline __u64 bs_ctx_byte(void *ctx, __u32 off)
{
	switch (off) {
	BS_B(8) BS_B(9) BS_B(10) BS_B(11) BS_B(12) BS_B(13) BS_B(14) BS_B(15)
	BS_B(16) BS_B(17) BS_B(18) BS_B(19) BS_B(20) BS_B(21) BS_B(22) BS_B(23)
	BS_B(24) BS_B(25) BS_B(26) BS_B(27) BS_B(28) BS_B(29) BS_B(30) BS_B(31)
	BS_B(32) BS_B(33) BS_B(34) BS_B(35) BS_B(36) BS_B(37) BS_B(38) BS_B(39)
	BS_B(40) BS_B(41) BS_B(42) BS_B(43) BS_B(44) BS_B(45) BS_B(46) BS_B(47)
	BS_B(48) BS_B(49) BS_B(50) BS_B(51) BS_B(52) BS_B(53) BS_B(54) BS_B(55)
	BS_B(56) BS_B(57) BS_B(58) BS_B(59) BS_B(60) BS_B(61) BS_B(62) BS_B(63)
	default:
		return bs_probe_field(ctx, off, 1);
	}
}

/* A field (unsigned, 1 to 8 bytes) of the record at ctx, which is end bytes
 * long. off, size and end come from read-only data, so they are constants
 * to the verifier: it follows only the branches they take (for a
 * privileged loader it also drops the code no branch reaches), leaving one
 * load. A load must stay inside the record (the kernel refuses to attach a
 * program that reads past it). Layouts the loads do not cover fall back to
 * a helper copy; an absent field (size 0) reads as 0. */
static __always_inline __u64 bs_ctx_field(void *ctx, __u32 off, __u32 size, __u32 end)
{
	__u32 word = off & ~3u;

	if (size == 0)
		return 0;
	if (off < 8 || off + size > end)
		return bs_probe_field(ctx, off, size);
	if (size == 8 && (off & 7) == 0 && off <= 120)
		return bs_ctx_dword(ctx, off);
	if (size == 4 && (off & 3) == 0 && off <= 124)
		return bs_ctx_word(ctx, off);
	if (size == 1 && off <= 63)
		return bs_ctx_byte(ctx, off);
	if (size <= 2 && (off & 3) + size <= 4 && word + 4 <= end && word <= 124)
		return (bs_ctx_word(ctx, word) >> ((off & 3) * 8)) & ((1u << (size * 8)) - 1);
	return bs_probe_field(ctx, off, size);
}

/* The switched-out thread tid (the current task) leaves this CPU: a pending
 * exit of its moves from the CPU's slot to exit_start, where kvm_entry
 * finds it on whichever CPU the thread resumes. */
static __always_inline void bs_exit_hand_off(__u32 tid)
{
	__u32 zero = 0;
	struct bs_exit_start *slot = bpf_map_lookup_elem(&exit_slot, &zero);

	if (!slot || !slot->ts_ns || slot->tid != tid)
		return;
	bpf_map_update_elem(&exit_start, &tid, slot, BPF_ANY);
	slot->ts_ns = 0;
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

/* floor(log2(v)) for v > 0, 0 for v == 0 (bcc's bits.bpf.h log2l). */
static __always_inline __u32 bs_log2(__u64 v)
{
	__u32 r, shift;

	r = (v > 0xFFFFFFFFULL) << 5;
	v >>= r;
	shift = (v > 0xFFFF) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xFF) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xF) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	r |= (v >> 1);
	return r;
}

/* Keeps the compiler from reasoning about (and dropping) a bounds check the
 * verifier needs to see. */
#define BS_BARRIER_VAR(v) asm volatile("" : "+r"(v))

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

#endif /* BOOTSCOPE_COMMON_BPF_H */
