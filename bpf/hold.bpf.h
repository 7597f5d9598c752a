/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* The hold of a followed VMM at the exit that ends its guest (SIGSTOP, so
 * that userspace reads the guest's memory before the VMM tears it down;
 * userspace continues it): the checks of each exit that can end a guest,
 * shared by the guest memory collector's own programs (memslots.bpf.c)
 * and the exit and marker programs that already run at those exits
 * (exits.bpf.c, phases.bpf.c), so that where those run no second program
 * runs at every port or MMIO exit. Weak maps, as every unit that includes
 * this header shares them. */
#ifndef BOOTSCOPE_HOLD_BPF_H
#define BOOTSCOPE_HOLD_BPF_H

#include "exits.h"
#include "memslots.h"

#define BS_SIGSTOP 19
#define BS_KVM_EXIT_SHUTDOWN 8
#define BS_KVM_EXIT_SYSTEM_EVENT 24
#define BS_KVM_PIO_OUT 1
/* The hardware's own shutdown exits (a triple fault): SVM's SHUTDOWN
 * intercept, VMX's TRIPLE_FAULT reason. */
#define BS_SVM_EXIT_SHUTDOWN 0x7f
#define BS_VMX_EXIT_TRIPLE_FAULT 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bs_held);
} held_vmms SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bs_memslot_config);
} memslot_config SEC(".maps") __weak;

/* Stops the current (followed) VMM once, if asked to. */
static __always_inline void bs_hold(__u32 why)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, zero = 0, phase;
	struct bs_memslot_config *c = bpf_map_lookup_elem(&memslot_config, &zero);
	struct bs_held h = {};
	struct bs_event *e;

	if (!c || !c->hold_at_shutdown || !bs_follow(tgid, &phase))
		return;
	h.ts_ns = bpf_ktime_get_ns();
	h.why = why;
	/* Once per VMM: userspace removes the record when it continued it. */
	if (bpf_map_update_elem(&held_vmms, &tgid, &h, BPF_NOEXIST) != 0)
		return;
	if (bpf_send_signal(BS_SIGSTOP) == 0) {
		h.signalled = 1;
		bpf_map_update_elem(&held_vmms, &tgid, &h, BPF_EXIST);
	}
	/* Wakes the reader, which otherwise looks only now and then. */
	e = bs_event_reserve(BS_EV_HELD, tgid, (__u32)bpf_get_current_pid_tgid());
	if (e) {
		e->arg0 = why;
		bpf_ringbuf_submit(e, 0);
	}
}

/* A port write that ends the guest: a reset by the i8042 or the reset
 * control register, or a power-off through the ACPI sleep registers. Any
 * other port returns at the first comparisons. */
static __always_inline void bs_hold_if_pio(__u32 rw, __u32 port, __u32 size, __u32 val)
{
	if (rw != BS_KVM_PIO_OUT)
		return;
	if (port != 0x64 && port != 0xcf9 && port != BS_PM1A_CNT_Q35 &&
	    port != BS_PM1A_CNT_PIIX4 && port != BS_SLEEP_CTL_PORT_CH)
		return;
	val &= size == 1 ? 0xff : 0xffff;
	if (port == 0x64 && val == 0xfe)
		bs_hold(BS_HOLD_I8042_RESET);
	else if (port == 0xcf9 && (val & 0x4))
		bs_hold(BS_HOLD_CF9_RESET);
	else if ((port == BS_PM1A_CNT_Q35 || port == BS_PM1A_CNT_PIIX4) && size == 2 &&
		 (val & BS_PM1_SLP_EN) && BS_PM1_SLP_TYP(val) == BS_S5_QEMU_PM1)
		bs_hold(BS_HOLD_ACPI_SLEEP);
	else if (port == BS_SLEEP_CTL_PORT_CH && size == 1 && (val & BS_SLEEP_CTL_SLP_EN) &&
		 BS_SLEEP_CTL_SLP_TYP(val) == BS_S5)
		bs_hold(BS_HOLD_ACPI_SLEEP);
}

/* An MMIO write that ends the guest: a power-off through a
 * hardware-reduced sleep control register (QEMU microvm's generic event
 * device). */
static __always_inline void bs_hold_if_mmio(__u32 type, __u32 len, __u64 gpa, __u64 val)
{
	if (type != BS_KVM_TRACE_MMIO_WRITE || len != 1 || gpa != BS_SLEEP_CTL_MMIO_MICROVM)
		return;
	if ((val & BS_SLEEP_CTL_SLP_EN) && BS_SLEEP_CTL_SLP_TYP(val) == BS_S5)
		bs_hold(BS_HOLD_ACPI_SLEEP);
}

/* A return to the VMM that ends the guest: a triple fault or a system
 * event (power-off, reset). */
static __always_inline void bs_hold_if_uexit(__u32 reason)
{
	if (reason == BS_KVM_EXIT_SHUTDOWN)
		bs_hold(BS_HOLD_SHUTDOWN);
	else if (reason == BS_KVM_EXIT_SYSTEM_EVENT)
		bs_hold(BS_HOLD_SYSTEM_EVENT);
}

/* A hardware exit that ends the guest: a triple fault (KVM then returns
 * KVM_EXIT_SHUTDOWN to the VMM). */
static __always_inline void bs_hold_if_exit(__u32 isa, __u32 reason)
{
	if ((isa == BS_ISA_SVM && reason == BS_SVM_EXIT_SHUTDOWN) ||
	    (isa == BS_ISA_VMX && reason == BS_VMX_EXIT_TRIPLE_FAULT))
		bs_hold(BS_HOLD_SHUTDOWN);
}

#endif /* BOOTSCOPE_HOLD_BPF_H */
