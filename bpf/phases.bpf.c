// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Phases collector: guest writes to the boot marker ports, seen by
 * kvm:kvm_pio (which fires on PVM hosts too).
 *
 * Port 0x80 is the debug port (Cloud Hypervisor's ranges: 0x00-1f firmware,
 * 0x20-3f boot loader, 0x40-5f kernel, 0x60-7f userspace); port 0xf4 is
 * qemu-boot-time's (6 = kernel start, 7 = userspace start). Every write is
 * counted per {port, value}; only a change of value (or of who wrote it:
 * code in the upper, kernel half of the address space or below it) is
 * streamed as a mark, so a guest hammering the port cannot flood the ring
 * buffer. A streamed mark that opens a phase switches its process to it
 * right here (bs_switch_phase), so what follows the write is filed under
 * the new phase exactly.
 *
 * Who wrote it: kvm_pio carries no guest RIP, but on VMX/SVM hosts the
 * exits collector's kvm_exit program has just noted the I/O exit's RIP in
 * the thread's exit_start entry (kvm_pio fires while KVM handles that
 * exit, on the same thread). The mark carries it when it is there, so
 * userspace can tell the kernel's io_delay writes (0x00 from kernel text)
 * from firmware's markers.
 */
#include "common.bpf.h"
#include "exits.h"
#include "hold.bpf.h"
#include "phases.h"

const volatile __u32 marker_port_debug = 0x80;
const volatile __u32 marker_port_boot_time = 0xf4;
/* The guest's serial console (the 8250's transmit register); 0: its lines
 * are not streamed. */
const volatile __u32 serial_port = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct bs_marker_key);
	__type(value, __u64);
} marker_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct bs_marker_last_key);
	__type(value, __u64);
} marker_last SEC(".maps");

/* The phase each port write opens (see BS_MARK_SLOTS); userspace fills
 * it before attaching. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BS_MARK_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} mark_phases SEC(".maps");

/* Each followed process's boot progress (struct bs_phase_state). LRU: an
 * ended process's entry goes when room is needed. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct bs_phase_state);
} phase_state SEC(".maps");

/* Each followed process's serial line in progress. LRU like phase_state. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct bs_serial_line);
} serial_line SEC(".maps");

/* The exits collector's map (exits.bpf.c defines it; this weak copy of its
 * definition lets the linker join the two). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct bs_exit_start);
} exit_start SEC(".maps") __weak;

/* The guest RIP of the I/O exit this kvm_pio belongs to, if the exits
 * collector noted one (0 and *known = 0 otherwise). */
static __always_inline __u64 bs_pio_rip(__u32 tgid, __u32 tid, __u32 *known)
{
	struct bs_exit_start *ex = bpf_map_lookup_elem(&exit_start, &tid);

	*known = 0;
	if (!ex || !ex->ts_ns || ex->tgid != tgid)
		return 0;
	if (!((ex->isa == BS_ISA_VMX && ex->reason == BS_VMX_EXIT_IO) ||
	      (ex->isa == BS_ISA_SVM && ex->reason == BS_SVM_EXIT_IOIO)))
		return 0;
	*known = 1;
	return ex->rip;
}

/* Switches process tgid to the phase the port write of mark_phases slot
 * `slot` opens, there and then: the exits, faults and waits that follow
 * it are filed under the new phase however late userspace reads the
 * mark. A boot phase before the one reached opens nothing (as
 * profiler/src/phases.rs PhaseTracker decides for the same marks). */
static __always_inline void bs_switch_phase(__u32 tgid, __u32 slot)
{
	struct bs_phase_state fresh = {}, *st;
	__u32 zero = 0, *entry, phase, rank;
	struct bs_target *t;

	entry = bpf_map_lookup_elem(&mark_phases, &slot);
	if (!entry || !(*entry & BS_MARK_PHASE_MASK))
		return;
	phase = (*entry & BS_MARK_PHASE_MASK) - 1;
	rank = *entry >> BS_MARK_RANK_SHIFT;
	st = bpf_map_lookup_elem(&phase_state, &tgid);
	if (!st) {
		bpf_map_update_elem(&phase_state, &tgid, &fresh, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&phase_state, &tgid);
	}
	if (st) {
		if (rank && st->reached > rank)
			return;
		if (rank)
			st->reached = rank;
		st->switched_ns = bpf_ktime_get_ns();
	}
	t = bpf_map_lookup_elem(&target, &zero);
	if (t && t->tgid == tgid && tgid != 0)
		t->phase = phase;
	if (bpf_map_lookup_elem(&followed, &tgid))
		bpf_map_update_elem(&followed, &tgid, &phase, BPF_EXIST);
}

/* The first port I/O the guest's kernel makes (a guest RIP in the kernel
 * half, on any port but the marker ports), streamed once per process: the
 * kernel is running by then, which its console says only once its console
 * driver is up. Noted in marker_last under a key no port has. */
static __always_inline void bs_first_kernel_pio(__u32 tgid, __u32 tid, __u32 port)
{
	struct bs_marker_last_key key = { .tgid = tgid, .port = BS_KERNEL_PIO_KEY };
	struct bs_event *e;
	__u64 rip, seen = 1;
	__u32 known;

	if (bpf_map_lookup_elem(&marker_last, &key))
		return;
	rip = bs_pio_rip(tgid, tid, &known);
	if (!known || rip < BS_KERNEL_HALF)
		return;
	/* Another vCPU may have been first. */
	if (bpf_map_update_elem(&marker_last, &key, &seen, BPF_NOEXIST))
		return;
	bs_switch_phase(tgid, BS_MARK_SLOT_KERNEL_FIRST);
	e = bs_event_reserve(BS_EV_MARK, tgid, tid);
	if (!e)
		return;
	e->arg0 = port | BS_MARK_RIP_KNOWN | BS_MARK_KERNEL_FIRST;
	e->arg1 = rip;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

/* A byte the guest wrote to its serial port: a line ends at '\n' and is
 * streamed (BS_EV_SERIAL_LINE) with the times of its first and last
 * bytes, so userspace can put the guest kernel's printk clock on the
 * profile's (a console line carries its record's timestamp). One event a
 * line: a guest printing without end costs a ring record per line, which
 * the ring's size bounds (lost events are counted). */
static __always_inline void bs_serial_byte(__u32 tgid, __u32 tid, __u8 byte)
{
	struct bs_serial_line fresh = {}, *line;
	struct bs_event *e;
	__u64 now = bpf_ktime_get_ns();

	line = bpf_map_lookup_elem(&serial_line, &tgid);
	if (!line) {
		bpf_map_update_elem(&serial_line, &tgid, &fresh, BPF_NOEXIST);
		line = bpf_map_lookup_elem(&serial_line, &tgid);
		if (!line)
			return;
	}
	if (line->len == 0)
		line->first_ns = now;
	if (line->len < sizeof(line->prefix))
		line->prefix[line->len & (sizeof(line->prefix) - 1)] = byte;
	line->len++;
	if (byte != '\n')
		return;
	e = bs_event_reserve(BS_EV_SERIAL_LINE, tgid, tid);
	if (e) {
		e->ts_ns = now;
		e->arg0 = line->first_ns;
		e->arg1 = line->len;
		__builtin_memcpy(e->comm, line->prefix, sizeof(e->comm));
		bpf_ringbuf_submit(e, 0);
	}
	line->len = 0;
	__builtin_memset(line->prefix, 0, sizeof(line->prefix));
}

SEC("tracepoint/kvm/kvm_pio")
int bs_marker_pio(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct bs_marker_key key = {};
	struct bs_marker_last_key last_key = {};
	struct bs_event *e;
	__u32 port, size, value, known, who;
	__u64 rip, stored, *last;

	if (!bs_followed_vm(tgid))
		return 0;
	port = BS_CTX(ctx, BS_P_KVM_PIO_PORT);
	if (serial_port && port == serial_port && BS_CTX(ctx, BS_P_KVM_PIO_RW) &&
	    BS_CTX(ctx, BS_P_KVM_PIO_SIZE) == 1)
		bs_serial_byte(tgid, (__u32)id, (__u8)BS_CTX(ctx, BS_P_KVM_PIO_VAL));
	if (port != marker_port_debug && port != marker_port_boot_time) {
		bs_first_kernel_pio(tgid, (__u32)id, port);
		bs_hold_if_pio(BS_CTX(ctx, BS_P_KVM_PIO_RW), port, BS_CTX(ctx, BS_P_KVM_PIO_SIZE),
			       BS_CTX(ctx, BS_P_KVM_PIO_VAL));
		return 0;
	}
	if (!BS_CTX(ctx, BS_P_KVM_PIO_RW))
		return 0;
	bs_count_source(BS_SRC_MARKER_PIO);
	size = BS_CTX(ctx, BS_P_KVM_PIO_SIZE);
	value = BS_CTX(ctx, BS_P_KVM_PIO_VAL);
	if (size == 1)
		value &= 0xff;
	else if (size == 2)
		value &= 0xffff;

	key.tgid = tgid;
	key.port = port;
	key.value = value;
	bs_count(&marker_counts, &key, 1);

	rip = bs_pio_rip(tgid, (__u32)id, &known);
	/* Who wrote it: 0 unknown, 1 below the kernel half, 2 in it. */
	who = known ? (rip >= BS_KERNEL_HALF ? 2 : 1) : 0;
	last_key.tgid = tgid;
	last_key.port = port;
	/* value + 1: 0 stays "nothing written yet" */
	stored = ((__u64)value + 1) | ((__u64)who << 40);
	last = bpf_map_lookup_elem(&marker_last, &last_key);
	if (last && *last == stored)
		return 0;
	bpf_map_update_elem(&marker_last, &last_key, &stored, BPF_ANY);
	bs_switch_phase(tgid, port == marker_port_debug ? BS_MARK_SLOT_DEBUG(who, value)
							: BS_MARK_SLOT_BOOT_TIME(value));

	e = bs_event_reserve(BS_EV_MARK, tgid, (__u32)id);
	if (!e)
		return 0;
	e->arg0 = port | (known ? BS_MARK_RIP_KNOWN : 0) | ((__u64)value << 32);
	e->arg1 = rip;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	return 0;
}
