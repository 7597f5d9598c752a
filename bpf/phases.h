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

/* Last value written to a marker port, to stream only changes. */
struct bs_marker_last_key {
	__u32 tgid;
	__u32 port;
};

#endif /* BOOTSCOPE_PHASES_H */
