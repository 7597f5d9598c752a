//! The kernel's trace ring buffer (`kernel/trace/ring_buffer.c`), read from
//! a stopped guest: the events the boot's `trace_event=` enabled, with
//! their timestamps on the trace clock.
//!
//! `global_trace.array_buffer.buffer` holds one `ring_buffer_per_cpu` per
//! CPU; each is a ring of `buffer_page`s linked through their `list`
//! (the pointer to the head page carries flags in its two low bits). The
//! events run from the head page (oldest) to the commit page; the spare
//! reader page holds events only when something read the buffer. A data
//! page is a `u64` timestamp, a committed length and the events, each a
//! 32-bit header (`type_len:5`, `time_delta:27`) and its data; time
//! extends carry the high bits of a long delta, time stamps an absolute
//! time. Field offsets come from the kernel's BTF ([`super::btf`]).

use super::btf::Btf;
use super::ringbuffer::{u64_at as ptr, VirtMemory};
use super::KernelLogError;

/// Event header types (`enum ring_buffer_type`); 1..=28 are data events
/// of that many 32-bit words.
const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
const TS_SHIFT: u32 = 27;
/// Bits of a page's `commit` that count bytes (the rest are flags).
const COMMIT_MASK: u64 = (1 << 30) - 1;
const PAGE: u64 = 4096;
/// Sanity limits: more CPUs or pages per CPU than any guest has.
const MAX_CPUS: u32 = 8192;
const MAX_PAGES: usize = 1 << 20;

/// Field offsets of the trace buffer's structures in one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceLayout {
    array_buffer: u64,
    cpus: u64,
    buffers: u64,
    head_page: u64,
    commit_page: u64,
    reader_page: u64,
    /// `ring_buffer_per_cpu.overrun`: events overwritten (not in every
    /// kernel).
    overrun: Option<u64>,
    list: u64,
    read: u64,
    page: u64,
    time_stamp: u64,
    commit: u64,
    data: u64,
    /// `trace_event_call.event.type`: an event's type number.
    pub event_type: u64,
}

impl TraceLayout {
    /// The offsets from the kernel's BTF. Err: the first field missing.
    pub fn from_btf(btf: &Btf) -> Result<Self, String> {
        let off = |s: &str, f: &str| btf.offset_of(s, f);
        Ok(Self {
            array_buffer: off("trace_array", "array_buffer.buffer")?,
            cpus: off("trace_buffer", "cpus")?,
            buffers: off("trace_buffer", "buffers")?,
            head_page: off("ring_buffer_per_cpu", "head_page")?,
            commit_page: off("ring_buffer_per_cpu", "commit_page")?,
            reader_page: off("ring_buffer_per_cpu", "reader_page")?,
            overrun: off("ring_buffer_per_cpu", "overrun").ok(),
            list: off("buffer_page", "list")?,
            read: off("buffer_page", "read")?,
            page: off("buffer_page", "page")?,
            time_stamp: off("buffer_data_page", "time_stamp")?,
            commit: off("buffer_data_page", "commit")?,
            data: off("buffer_data_page", "data")?,
            event_type: off("trace_event_call", "event.type")?,
        })
    }
}

/// One event: its CPU, its time on the trace clock and its data (a
/// `struct trace_entry` and the event's fields).
#[derive(Clone, Debug, PartialEq)]
pub struct RawEvent {
    pub cpu: u32,
    pub ts: u64,
    pub data: Vec<u8>,
}

impl RawEvent {
    /// The `trace_entry.type` (the first 16 bits).
    pub fn type_id(&self) -> Option<u16> {
        Some(u16::from_le_bytes(self.data.get(0..2)?.try_into().ok()?))
    }

    pub fn u32_at(&self, at: u64) -> Option<u32> {
        let at = usize::try_from(at).ok()?;
        Some(u32::from_le_bytes(
            self.data.get(at..at + 4)?.try_into().ok()?,
        ))
    }

    pub fn u64_at(&self, at: u64) -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        Some(u64::from_le_bytes(
            self.data.get(at..at + 8)?.try_into().ok()?,
        ))
    }

    /// A `__data_loc` string field: the `u32` at `at` holds its length
    /// (high 16 bits) and offset (low 16) in the event.
    pub fn data_loc_str(&self, at: u64) -> Option<String> {
        let loc = self.u32_at(at)?;
        let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
        let b = self.data.get(off..off + len)?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    }
}

/// What was read: every CPU's events in time order, and how many the
/// kernel reports overwritten (the ring was too small).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceRead {
    pub events: Vec<RawEvent>,
    pub overrun: u64,
    pub pages: u64,
}

/// Reads every CPU's events from `global_trace` (its kernel address).
pub fn read_events(
    mem: &dyn VirtMemory,
    l: &TraceLayout,
    global_trace: u64,
) -> Result<TraceRead, KernelLogError> {
    let buffer = ptr(mem, global_trace + l.array_buffer, "global_trace's buffer")?;
    if buffer == 0 {
        return Err(KernelLogError::Corrupt(
            "the trace array has no ring buffer (tracing was never set up)".into(),
        ));
    }
    let cpus = ptr(mem, buffer + l.cpus, "the trace buffer's CPU count")? as u32;
    if cpus == 0 || cpus > MAX_CPUS {
        return Err(KernelLogError::Corrupt(format!(
            "the trace buffer says {cpus} CPUs"
        )));
    }
    let buffers = ptr(mem, buffer + l.buffers, "the per-CPU buffer array")?;
    let mut read = TraceRead::default();
    for cpu in 0..cpus {
        let cb = ptr(mem, buffers + 8 * u64::from(cpu), "a per-CPU buffer")?;
        if cb == 0 {
            continue;
        }
        if let Some(o) = l.overrun {
            read.overrun += ptr(mem, cb + o, "the overrun count")?;
        }
        let head = ptr(mem, cb + l.head_page, "the head page")?;
        let commit = ptr(mem, cb + l.commit_page, "the commit page")?;
        let reader = ptr(mem, cb + l.reader_page, "the reader page")?;
        let from = ptr(mem, reader + l.read, "the reader page's read offset")? & COMMIT_MASK;
        read_page(mem, l, reader, from, cpu, &mut read)?;
        let mut page = head;
        let mut walked = 0;
        loop {
            read_page(mem, l, page, 0, cpu, &mut read)?;
            if page == commit {
                break;
            }
            walked += 1;
            let next = ptr(mem, page + l.list, "a page link")? & !3;
            page = next.wrapping_sub(l.list);
            if walked > MAX_PAGES || page == head {
                return Err(KernelLogError::Corrupt(format!(
                    "CPU {cpu}'s pages never reach the commit page"
                )));
            }
        }
    }
    read.events.sort_by_key(|e| e.ts);
    Ok(read)
}

/// The events of one `buffer_page` from byte `from` of its data on.
fn read_page(
    mem: &dyn VirtMemory,
    l: &TraceLayout,
    bpage: u64,
    from: u64,
    cpu: u32,
    out: &mut TraceRead,
) -> Result<(), KernelLogError> {
    let data_page = ptr(mem, bpage + l.page, "a buffer page's data")?;
    let mut page = vec![0u8; PAGE as usize];
    if !mem.read(data_page, &mut page) {
        return Err(KernelLogError::Unmapped {
            what: "a trace data page",
            address: data_page,
        });
    }
    out.pages += 1;
    let word = |at: u64| -> u64 {
        let at = at as usize;
        page.get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    let mut ts = word(l.time_stamp);
    let len = (word(l.commit) & COMMIT_MASK).min(PAGE.saturating_sub(l.data));
    let data = &page[l.data as usize..(l.data + len) as usize];
    decode(data, &mut ts, from, cpu, &mut out.events);
    Ok(())
}

/// Decodes the events of one page's committed data; `ts` starts at the
/// page's time stamp. Events before byte `from` only move the clock.
pub fn decode(data: &[u8], ts: &mut u64, from: u64, cpu: u32, out: &mut Vec<RawEvent>) {
    let u32_at = |at: usize| {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    };
    let mut at = 0usize;
    while let Some(header) = u32_at(at) {
        let (type_len, delta) = (header & 0x1f, u64::from(header >> 5));
        let (size, body) = match type_len {
            TYPE_PADDING => {
                // A null event: the rest of the page is empty.
                if delta == 0 {
                    return;
                }
                let Some(n) = u32_at(at + 4) else { return };
                (4 + n as usize, None)
            }
            TYPE_TIME_EXTEND | TYPE_TIME_STAMP => {
                let Some(high) = u32_at(at + 4) else { return };
                let t = (u64::from(high) << TS_SHIFT) | delta;
                if type_len == TYPE_TIME_EXTEND {
                    *ts += t;
                } else {
                    *ts = t;
                }
                (8, None)
            }
            0 => {
                let Some(n) = u32_at(at + 4) else { return };
                let n = n as usize;
                (4 + n, Some((at + 8, n.saturating_sub(4))))
            }
            words => {
                let n = 4 * words as usize;
                (4 + n, Some((at + 4, n)))
            }
        };
        if let Some((start, n)) = body {
            *ts += delta;
            let Some(bytes) = data.get(start..start + n) else {
                return;
            };
            if at as u64 >= from {
                out.push(RawEvent {
                    cpu,
                    ts: *ts,
                    data: bytes.to_vec(),
                });
            }
        }
        at += size;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Encodes events the way the kernel's writer does: a data event of
    /// `payload` bytes `delta` after the previous one (with a time extend
    /// before it when the delta needs more than 27 bits).
    pub fn encode(events: &[(u64, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for &(delta, payload) in events {
            let mut d = delta;
            if d >= 1 << TS_SHIFT {
                b.extend_from_slice(
                    &(TYPE_TIME_EXTEND | ((d as u32 & 0x7ff_ffff) << 5)).to_le_bytes(),
                );
                b.extend_from_slice(&((d >> TS_SHIFT) as u32).to_le_bytes());
                d = 0;
            }
            let words = payload.len().div_ceil(4);
            let mut padded = payload.to_vec();
            padded.resize(words * 4, 0);
            if words <= 28 {
                b.extend_from_slice(&((words as u32) | ((d as u32) << 5)).to_le_bytes());
            } else {
                b.extend_from_slice(&((d as u32) << 5).to_le_bytes());
                b.extend_from_slice(&(padded.len() as u32 + 4).to_le_bytes());
            }
            b.extend_from_slice(&padded);
        }
        b
    }

    #[test]
    fn decodes_data_events_time_extends_and_padding() {
        let long = [7u8; 200];
        let mut data = encode(&[(0, &[1, 0, 0, 0]), (10, &[2; 8]), (1 << 30, &long)]);
        // A discarded event (padding with a delta) and then a null event.
        data.extend_from_slice(&(TYPE_PADDING | (5 << 5)).to_le_bytes());
        data.extend_from_slice(&12u32.to_le_bytes());
        data.extend_from_slice(&[0; 8]);
        data.extend_from_slice(&encode(&[(3, &[9; 4])]));
        data.extend_from_slice(&TYPE_PADDING.to_le_bytes());
        data.extend_from_slice(&encode(&[(3, &[5; 4])]));
        let mut ts = 1_000;
        let mut out = Vec::new();
        decode(&data, &mut ts, 0, 2, &mut out);
        let got: Vec<(u64, usize)> = out.iter().map(|e| (e.ts, e.data.len())).collect();
        assert_eq!(
            got,
            [
                (1_000, 4),
                (1_010, 8),
                (1_010 + (1 << 30), 200),
                (1_013 + (1 << 30), 4)
            ]
        );
        assert_eq!(out[2].data, long);
        assert_eq!(out[0].cpu, 2);
        // From the second event on: the first still moves the clock.
        let (mut ts, mut out) = (1_000, Vec::new());
        decode(&data, &mut ts, 8, 0, &mut out);
        assert_eq!(out[0].ts, 1_010);
        // An absolute time stamp replaces the clock.
        let mut data = Vec::new();
        data.extend_from_slice(&(TYPE_TIME_STAMP | (4 << 5)).to_le_bytes());
        data.extend_from_slice(&1u32.to_le_bytes());
        data.extend_from_slice(&encode(&[(6, &[0; 4])]));
        let (mut ts, mut out) = (5, Vec::new());
        decode(&data, &mut ts, 0, 0, &mut out);
        assert_eq!(out[0].ts, (1 << TS_SHIFT) + 4 + 6);
        // Cut short: what is whole is kept, nothing panics.
        let data = encode(&[(1, &[1; 8]), (1, &[2; 8])]);
        let (mut ts, mut out) = (0, Vec::new());
        decode(&data[..data.len() - 3], &mut ts, 0, 0, &mut out);
        assert_eq!(out.len(), 1);
    }

    use super::super::ringbuffer::tests::FlatVirt;

    /// Zeroed kernel memory below 3 MiB, where the test rings live.
    pub fn memory() -> FlatVirt {
        FlatVirt::zeroed(3 << 20)
    }

    fn put_u64(m: &mut FlatVirt, at: u64, v: u64) {
        m.put(at, &v.to_le_bytes());
    }

    pub fn layout() -> TraceLayout {
        TraceLayout {
            array_buffer: 0x10,
            cpus: 0x8,
            buffers: 0x20,
            head_page: 0x30,
            commit_page: 0x38,
            reader_page: 0x40,
            overrun: Some(0x48),
            list: 0,
            read: 0x18,
            page: 0x20,
            time_stamp: 0,
            commit: 8,
            data: 16,
            event_type: 0x30,
        }
    }

    /// A trace array at 0x1000 with one CPU whose ring holds three pages
    /// (head 0x3000 -> 0x3100 -> 0x3200, the commit page, -> back), the
    /// spare reader page 0x3300 empty; each page's events as given.
    pub fn ring(pages: [&[u8]; 3], stamps: [u64; 3]) -> FlatVirt {
        let l = layout();
        let mut m = memory();
        put_u64(&mut m, 0x1000 + l.array_buffer, 0x2000);
        put_u64(&mut m, 0x2000 + l.cpus, 1);
        put_u64(&mut m, 0x2000 + l.buffers, 0x2100);
        put_u64(&mut m, 0x2100, 0x2200);
        let cb = 0x2200;
        put_u64(&mut m, cb + l.head_page, 0x3000);
        put_u64(&mut m, cb + l.commit_page, 0x3200);
        put_u64(&mut m, cb + l.reader_page, 0x3300);
        put_u64(&mut m, cb + l.overrun.unwrap(), 7);
        for (i, bp) in [0x3000u64, 0x3100, 0x3200].into_iter().enumerate() {
            let next = [0x3100u64, 0x3200, 0x3000 | 1][i];
            put_u64(&mut m, bp + l.list, next);
            let data = 0x10_0000 + 0x1000 * i as u64;
            put_u64(&mut m, bp + l.page, data);
            put_u64(&mut m, data + l.time_stamp, stamps[i]);
            put_u64(&mut m, data + l.commit, pages[i].len() as u64);
            m.put(data + l.data, pages[i]);
        }
        put_u64(&mut m, 0x3300 + l.page, 0x20_0000);
        m
    }

    #[test]
    fn walks_the_ring_from_the_head_to_the_commit_page() {
        let a = encode(&[(0, &[1; 8]), (5, &[2; 8])]);
        let b = encode(&[(3, &[3; 8])]);
        let c = encode(&[(0, &[4; 8])]);
        let m = ring([&a, &b, &c], [100, 200, 300]);
        let read = read_events(&m, &layout(), 0x1000).unwrap();
        let got: Vec<(u64, u8)> = read.events.iter().map(|e| (e.ts, e.data[0])).collect();
        assert_eq!(got, [(100, 1), (105, 2), (203, 3), (300, 4)]);
        assert_eq!(read.overrun, 7);
        assert_eq!(read.pages, 4);
        // A ring that never reaches its commit page is refused.
        let mut m = ring([&a, &b, &c], [100, 200, 300]);
        put_u64(&mut m, 0x2200 + layout().commit_page, 0x9000);
        let e = read_events(&m, &layout(), 0x1000).unwrap_err();
        assert!(e.to_string().contains("never reach"), "{e}");
        // No buffer: tracing never set up.
        let e = read_events(&memory(), &layout(), 0x1000).unwrap_err();
        assert!(e.to_string().contains("no ring buffer"), "{e}");
    }

    #[test]
    fn data_loc_strings_and_fields() {
        let mut data = vec![0u8; 12];
        data[0..2].copy_from_slice(&42u16.to_le_bytes());
        data[8..12].copy_from_slice(&((6u32 << 16) | 12).to_le_bytes());
        data.extend_from_slice(b"early\0");
        let e = RawEvent {
            cpu: 0,
            ts: 0,
            data,
        };
        assert_eq!(e.type_id(), Some(42));
        assert_eq!(e.data_loc_str(8).as_deref(), Some("early"));
        assert_eq!(e.u64_at(100), None);
        let bad = RawEvent {
            cpu: 0,
            ts: 0,
            data: vec![0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        };
        assert_eq!(bad.data_loc_str(4), None);
    }
}
