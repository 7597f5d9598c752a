/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/* Phases collector: types shared with profiler/src/bpf.rs. */
#ifndef BOOTSCOPE_PHASES_H
#define BOOTSCOPE_PHASES_H

/* Writes of one value to one marker port. */
struct bs_marker_key {
	__u32 tgid;
	__u32 port;
	__u32 value;
};

/* A mark event's arg0: the port in bits 0-15, this flag when arg1 holds
 * the guest RIP of the write, the value in bits 32-63. */
#define BS_MARK_RIP_KNOWN (1ULL << 16)
/* ... and this one on the mark of the first port I/O the guest's kernel
 * made (any port; no value). */
#define BS_MARK_KERNEL_FIRST (1ULL << 17)
/* The marker_last key (port) that notes that mark as sent. */
#define BS_KERNEL_PIO_KEY 0x10000
/* Guest code at or above this address is the kernel's (the upper half of
 * x86-64's canonical addresses); firmware and boot loaders run below. */
#define BS_KERNEL_HALF 0xffff800000000000ULL

/* Last value written to a marker port (value + 1, and who wrote it in
 * bits 40 and up), to stream only changes. */
struct bs_marker_last_key {
	__u32 tgid;
	__u32 port;
};

/* The phase a port write opens by itself, decided at the write (the
 * mark_phases table, filled by userspace before attach from
 * profiler/src/phases.rs): a slot per {port 0x80, who wrote it, value},
 * per port 0xf4 value, and one for the first port I/O of the guest's
 * kernel. */
#define BS_MARK_SLOT_DEBUG(who, value) ((who) * 256 + ((value) & 0xff))
#define BS_MARK_SLOT_BOOT_TIME(value) (3 * 256 + ((value) & 0xff))
#define BS_MARK_SLOT_KERNEL_FIRST (4 * 256)
#define BS_MARK_SLOTS (4 * 256 + 1)
/* A slot's value: 0 opens nothing; else the phase index + 1 in bits 0-15
 * and the boot phase's rank (1 firmware .. 4 userspace; 0 for a phase
 * outside the boot's order) in bits 16-23. */
#define BS_MARK_PHASE_MASK 0xffffU
#define BS_MARK_RANK_SHIFT 16

/* How far a followed process's boot got by its marks: the highest boot
 * rank reached (0: none), and when its phase last changed at a port write
 * (bpf_ktime_get_ns; 0: never). Userspace reads it to not undo, with a
 * mark it read late, a switch made since. */
struct bs_phase_state {
	__u32 reached;
	__u32 pad;
	__u64 switched_ns;
};

/* The serial line a followed process's guest is writing (its transmit
 * register, one byte per port write): when its first byte came, how many
 * bytes so far, and the first 16 of them. */
struct bs_serial_line {
	__u64 first_ns;
	__u32 len;
	__u32 pad;
	char prefix[16];
};

#endif /* BOOTSCOPE_PHASES_H */
