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

#endif /* BOOTSCOPE_PHASES_H */
