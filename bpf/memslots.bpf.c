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
 * profiler/src/collector/memslots.rs when guest memory is to be read; a
 * hold program only where no exit or marker program already checks its
 * exits (hold.bpf.h).
 */
#include "common.bpf.h"
#include <bpf/bpf_tracing.h>
#include "hold.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct bs_memslot_key);
	__type(value, struct bs_memslot);
} memslots SEC(".maps");

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
	if (bpf_probe_read_kernel(&val, size >= 2 ? 2 : 1, (const void *)ctx[4]) != 0)
		return 0;
	bs_hold_if_pio(rw, port, size, val);
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
	bs_hold_if_mmio(type, len, gpa, val);
	return 0;
}

/* kvm_userspace_exit(reason, errno): a triple fault or a system event
 * (power-off, reset) handed to the VMM. */
SEC("raw_tp/kvm_userspace_exit")
int bs_hold_exit(__u64 *ctx)
{
	bs_hold_if_uexit(ctx[0]);
	return 0;
}
