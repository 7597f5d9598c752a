// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* Guest memory collector: the VM's memory slots as the followed VMM sets
 * them (KVM_SET_USER_MEMORY_REGION and ..._REGION2, caught at the entry of
 * KVM's VM ioctl handler, else of the ioctl system call: what the VMM
 * asked for, whether or not KVM accepted it), and the VMM stopped
 * (SIGSTOP) at the exit that ends its guest, so that userspace reads the
 * guest's memory before the VMM tears it down and continues it (SIGCONT)
 * after. Nothing is written into the VMM.
 *
 * Not part of the programs table (src/bpf.rs PROGRAMS): attached by
 * profiler/src/collector/memslots.rs when guest memory is to be read.
 */
#include "common.bpf.h"
#include <bpf/bpf_tracing.h>
#include "memslots.h"

#define BS_SIGSTOP 19
#define BS_KVM_EXIT_SHUTDOWN 8
#define BS_KVM_EXIT_SYSTEM_EVENT 24
#define BS_KVM_PIO_OUT 1

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct bs_memslot_key);
	__type(value, struct bs_memslot);
} memslots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bs_held);
} held_vmms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bs_memslot_config);
} memslot_config SEC(".maps");

/* Records the slot a followed VMM sets with `cmd` and the user pointer
 * `arg` (KVM_SET_USER_MEMORY_REGION or ..._REGION2; any other ioctl is
 * left alone). */
static __always_inline void bs_memslot_set(__u32 cmd, const void *arg)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, phase;
	struct bs_memslot_key key = {};
	struct bs_memslot r = {}, *old;

	if (cmd != BS_KVM_SET_USER_MEMORY_REGION && cmd != BS_KVM_SET_USER_MEMORY_REGION2)
		return;
	if (!bs_follow(tgid, &phase))
		return;
	/* slot, flags, guest_phys_addr, memory_size, userspace_addr */
	if (bpf_probe_read_user(&r, 32, arg) != 0)
		return;
	key.tgid = tgid;
	key.slot = r.slot;
	r.ts_ns = bpf_ktime_get_ns();
	old = bpf_map_lookup_elem(&memslots, &key);
	r.calls = old ? old->calls + 1 : 1;
	if (bpf_map_update_elem(&memslots, &key, &r, BPF_ANY) != 0)
		bs_percpu_inc(&map_overflows, 0);
}

/* kvm_vm_ioctl(filp, ioctl, arg): KVM's handler of the ioctls on a VM's
 * file, where the memory slots are set. It runs only for those (a VMM's
 * vCPU ioctls, KVM_RUN among them, are kvm_vcpu_ioctl's), so a profile
 * that reads guest memory adds nothing to the exits the VMM handles in
 * userspace, nor to any other process's system calls. */
SEC("kprobe/kvm_vm_ioctl")
int bs_memslot_kvm_ioctl(struct pt_regs *ctx)
{
	bs_memslot_set((__u32)PT_REGS_PARM2(ctx), (const void *)PT_REGS_PARM3(ctx));
	return 0;
}

/* The record of syscalls:sys_enter_ioctl: the common header, the syscall
 * number, then its arguments (fd, cmd, arg), each 8 bytes: the layout
 * every syscall entry event shares. */
struct bs_sys_enter_ioctl {
	__u64 common;
	__s64 nr;
	__u64 args[3];
};

/* Every ioctl's entry: where the kprobe cannot be attached (no kprobes,
 * KVM's handler not found). Enabling a system call's tracepoint sends
 * every system call of every process through the kernel's slow path, and
 * this program runs at every KVM_RUN: the fallback only. */
SEC("tracepoint/syscalls/sys_enter_ioctl")
int bs_memslot_ioctl(struct bs_sys_enter_ioctl *ctx)
{
	bs_memslot_set((__u32)ctx->args[1], (const void *)ctx->args[2]);
	return 0;
}

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

/* kvm_pio(rw, port, size, count, data): a guest's reset by the i8042 or
 * the reset control register, or its power-off through the ACPI sleep
 * registers. */
SEC("raw_tp/kvm_pio")
int bs_hold_pio(__u64 *ctx)
{
	__u32 rw = ctx[0], port = ctx[1], size = ctx[2];
	__u16 val = 0;

	if (rw != BS_KVM_PIO_OUT)
		return 0;
	if (port != 0x64 && port != 0xcf9 && port != BS_PM1A_CNT_Q35 &&
	    port != BS_PM1A_CNT_PIIX4 && port != BS_SLEEP_CTL_PORT_CH)
		return 0;
	if (bpf_probe_read_kernel(&val, size >= 2 ? 2 : 1, (const void *)ctx[4]) != 0)
		return 0;
	if (size == 1)
		val &= 0xff;
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
	return 0;
}

/* kvm_mmio(type, len, gpa, val): a power-off through a hardware-reduced
 * sleep control register in MMIO (QEMU microvm's generic event device). */
SEC("raw_tp/kvm_mmio")
int bs_hold_mmio(__u64 *ctx)
{
	__u32 type = ctx[0], len = ctx[1];
	__u64 gpa = ctx[2];
	__u8 val = 0;

	if (type != BS_KVM_TRACE_MMIO_WRITE || len != 1 || gpa != BS_SLEEP_CTL_MMIO_MICROVM)
		return 0;
	if (bpf_probe_read_kernel(&val, 1, (const void *)ctx[3]) != 0)
		return 0;
	if ((val & BS_SLEEP_CTL_SLP_EN) && BS_SLEEP_CTL_SLP_TYP(val) == BS_S5)
		bs_hold(BS_HOLD_ACPI_SLEEP);
	return 0;
}

/* kvm_userspace_exit(reason, errno): a triple fault or a system event
 * (power-off, reset) handed to the VMM. */
SEC("raw_tp/kvm_userspace_exit")
int bs_hold_exit(__u64 *ctx)
{
	__u32 reason = ctx[0];

	if (reason == BS_KVM_EXIT_SHUTDOWN)
		bs_hold(BS_HOLD_SHUTDOWN);
	else if (reason == BS_KVM_EXIT_SYSTEM_EVENT)
		bs_hold(BS_HOLD_SYSTEM_EVENT);
	return 0;
}
