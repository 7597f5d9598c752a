//! Initcalls from the kernel's own `initcall` tracepoints, recorded into its
//! trace ring buffer during the boot and read out of guest memory after it
//! (`run --initcalls`, the default method).
//!
//! `trace_event=initcall:*` enables the system's three events
//! (`initcall_level`, `initcall_start`, `initcall_finish`) from
//! `start_kernel` on, in the fewest bytes (the kernel echoes its command
//! line twice on the console, each byte a port exit); `trace_clock=perf`
//! stamps them with `local_clock()`, the clock of printk's timestamps, so
//! the console lines align them to the VMM's clock as they do the log
//! ([`super::align`]). Each event is a few dozen bytes written into a
//! per-CPU page: no formatting, no symbol lookup, no console.
//!
//! Reading them needs what VMCOREINFO does not state: the address of
//! `global_trace` and of the three events' `trace_event_call`s (the
//! kernel's symbol table, [`GuestKernel`]), and the layout of the trace
//! structures (the kernel's BTF).

use std::collections::HashMap;

use super::btf::Btf;
use super::initcalls::GuestInitcall;
use super::ringbuffer::VirtMemory;
use super::trace_ring::{self, RawEvent, TraceLayout, TraceRead};

/// What `--initcalls` adds to the kernel command line for this method:
/// every event of the `initcall` system (the three the reader reads).
pub const TRACE_EVENTS: &str = "initcall:*";
/// The events one by one, as a `trace_event=` list may name them.
const EACH_EVENT: [&str; 3] = [
    "initcall:initcall_level",
    "initcall:initcall_start",
    "initcall:initcall_finish",
];

/// Whether a kernel command line enables the initcall trace events (the
/// system, or its start event by name, in a `trace_event=` list).
pub fn has_trace_events(cmdline: &str) -> bool {
    cmdline
        .split(' ')
        .filter_map(|w| w.strip_prefix("trace_event="))
        .flat_map(|list| list.split(','))
        .any(|e| e == TRACE_EVENTS || e == EACH_EVENT[1] || e == "*:*")
}
/// The trace clock: `local_clock()`, as printk's.
pub const TRACE_CLOCK: &str = "perf";
/// Per-CPU trace buffer: about 14,000 initcalls' events.
pub const TRACE_BUF_SIZE: &str = "512K";

/// A kernel command line the trace method cannot use as it is.
#[derive(Debug, thiserror::Error)]
#[error("--initcalls: the kernel command line's `{param}` {why}: {fix}")]
pub struct TraceCmdline {
    pub param: String,
    pub why: &'static str,
    pub fix: &'static str,
}

/// `cmdline` with the trace method's parameters: the initcall events added
/// to a `trace_event=` list already there (or a new one), the trace clock
/// and buffer size unless given (a `trace_buf_size=` given is kept).
pub fn cmdline_with_trace(cmdline: &str) -> Result<String, TraceCmdline> {
    let mut events = TRACE_EVENTS.to_string();
    let mut out = Vec::new();
    let mut has_size = false;
    for word in cmdline.split(' ').filter(|w| !w.is_empty()) {
        match word.split_once('=') {
            Some(("trace_event", list)) => {
                for e in list.split(',').filter(|e| !e.is_empty()) {
                    if e != TRACE_EVENTS && !EACH_EVENT.contains(&e) {
                        events = format!("{e},{events}");
                    }
                }
                continue;
            }
            Some(("trace_clock", c)) if c != TRACE_CLOCK => {
                return Err(TraceCmdline {
                    param: word.to_string(),
                    why: "would stamp the events on another clock than printk's",
                    fix: "remove it (--initcalls sets trace_clock=perf)",
                });
            }
            Some(("trace_buf_size", _)) => has_size = true,
            None if word == "tp_printk" => {
                return Err(TraceCmdline {
                    param: word.into(),
                    why: "prints every trace event on the console (a port exit per byte)",
                    fix: "remove it",
                });
            }
            _ => {}
        }
        out.push(word.to_string());
    }
    out.retain(|w| !w.starts_with("trace_clock="));
    if !has_size {
        out.push(format!("trace_buf_size={TRACE_BUF_SIZE}"));
    }
    out.push(format!("trace_event={events}"));
    out.push(format!("trace_clock={TRACE_CLOCK}"));
    Ok(out.join(" "))
}

/// The guest kernel's symbols and types, loaded from the image it booted
/// (by the VMM after its guest stopped; by `profile`'s guest memory reader
/// on a thread of its own while the traced guest runs, hence `Send`).
pub trait GuestKernel: Send {
    /// Link-time address of a symbol.
    fn address_of(&self, name: &str) -> Option<u64>;
    /// The function holding each link-time address.
    fn functions_at(&self, addrs: &[u64]) -> Vec<Option<String>>;
    /// The kernel's BTF (`.BTF` of its ELF image).
    fn btf(&self) -> Result<Vec<u8>, String>;
    /// Where the symbols came from, for the timeline.
    fn source(&self) -> String;
}

/// Loads a [`GuestKernel`] from the kernel image the VMM booted (the
/// decompressed vmlinux when there is one).
pub type GuestKernelLoader =
    std::sync::Arc<dyn Fn(&std::path::Path) -> Result<Box<dyn GuestKernel>, String> + Send + Sync>;

/// Field offsets in the three events' records and their type numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct InitcallEvents {
    pub start_type: u16,
    pub finish_type: u16,
    pub level_type: u16,
    pid: u64,
    start_func: u64,
    finish_func: u64,
    finish_ret: u64,
    level_name: u64,
}

impl InitcallEvents {
    /// The record layouts from BTF; the type numbers are read from the
    /// events' `trace_event_call`s in guest memory by the caller.
    pub fn from_btf(btf: &Btf, types: [u16; 3]) -> Result<Self, String> {
        let off = |s: &str, f: &str| btf.offset_of(s, f);
        Ok(Self {
            start_type: types[0],
            finish_type: types[1],
            level_type: types[2],
            pid: off("trace_entry", "pid")?,
            start_func: off("trace_event_raw_initcall_start", "func")?,
            finish_func: off("trace_event_raw_initcall_finish", "func")?,
            finish_ret: off("trace_event_raw_initcall_finish", "ret")?,
            level_name: off("trace_event_raw_initcall_level", "__data_loc_level")?,
        })
    }
}

/// The initcalls in the events, in the order they started; `name_of`
/// names a function by its (runtime) address. A start without its finish
/// (cut off by a panic, or still running) is left out; initcalls of a
/// process other than the boot's (`start_kernel`'s pid 0 and
/// `kernel_init`'s pid 1) are module inits, level `module`.
pub fn initcalls(
    events: &[RawEvent],
    ev: &InitcallEvents,
    name_of: &dyn Fn(u64) -> String,
) -> Vec<GuestInitcall> {
    let mut level = "early".to_string();
    let mut open: HashMap<(u32, u64), (u64, String)> = HashMap::new();
    let mut done = Vec::new();
    for e in events {
        let Some(t) = e.type_id() else { continue };
        let pid = e.u32_at(ev.pid).unwrap_or(0);
        if t == ev.level_type {
            if let Some(l) = e.data_loc_str(ev.level_name) {
                level = l;
            }
        } else if t == ev.start_type {
            let Some(func) = e.u64_at(ev.start_func) else {
                continue;
            };
            let lvl = if pid <= 1 {
                level.clone()
            } else {
                "module".into()
            };
            open.insert((pid, func), (e.ts, lvl));
        } else if t == ev.finish_type {
            let (Some(func), Some(ret)) = (e.u64_at(ev.finish_func), e.u32_at(ev.finish_ret))
            else {
                continue;
            };
            if let Some((start, lvl)) = open.remove(&(pid, func)) {
                done.push(GuestInitcall {
                    name: name_of(func),
                    level: lvl,
                    guest_start_ns: start,
                    duration_ns: e.ts.saturating_sub(start),
                    ret: i64::from(ret as i32),
                    pid,
                });
            }
        }
    }
    done.sort_by_key(|c| c.guest_start_ns);
    done
}

/// What reading the trace gave: the initcalls and the read's statistics.
pub struct TracedInitcalls {
    pub initcalls: Vec<GuestInitcall>,
    pub read: TraceRead,
}

/// Reads the initcall events of a stopped guest: `mem` its kernel memory,
/// `slide` its KASLR offset (runtime minus link-time addresses).
pub fn read(
    mem: &dyn VirtMemory,
    kernel: &dyn GuestKernel,
    slide: u64,
) -> Result<TracedInitcalls, String> {
    let btf = Btf::parse(&kernel.btf()?).map_err(|e| format!("the kernel's BTF: {e}"))?;
    let layout = TraceLayout::from_btf(&btf).map_err(|e| format!("the kernel's BTF has no {e}"))?;
    let symbol = |name: &str| {
        kernel
            .address_of(name)
            .map(|a| a.wrapping_add(slide))
            .ok_or_else(|| format!("the kernel's symbol table has no {name} (CONFIG_FTRACE?)"))
    };
    let mut types = [0u16; 3];
    for (t, name) in types.iter_mut().zip([
        "event_initcall_start",
        "event_initcall_finish",
        "event_initcall_level",
    ]) {
        let at = symbol(name)? + layout.event_type;
        let mut b = [0u8; 4];
        if !mem.read(at, &mut b) {
            return Err(format!("{name} at {at:#x} is not mapped"));
        }
        *t = u32::from_le_bytes(b) as u16;
    }
    if types.contains(&0) {
        return Err(
            "the initcall events have no type numbers (tracing never registered them)".into(),
        );
    }
    let events = InitcallEvents::from_btf(&btf, types)
        .map_err(|e| format!("the kernel's BTF has no {e}"))?;
    let read = trace_ring::read_events(mem, &layout, symbol("global_trace")?)
        .map_err(|e| e.to_string())?;
    // Every function started, named at once (runtime addresses).
    let mut funcs: Vec<u64> = read
        .events
        .iter()
        .filter(|e| e.type_id() == Some(events.start_type))
        .filter_map(|e| e.u64_at(events.start_func))
        .collect();
    funcs.sort_unstable();
    funcs.dedup();
    let linked: Vec<u64> = funcs.iter().map(|f| f.wrapping_sub(slide)).collect();
    let names: HashMap<u64, String> = funcs
        .iter()
        .zip(kernel.functions_at(&linked))
        .filter_map(|(&f, n)| Some((f, n?)))
        .collect();
    let name_of = |func: u64| {
        names
            .get(&func)
            .cloned()
            .unwrap_or_else(|| format!("{func:#x}"))
    };
    Ok(TracedInitcalls {
        initcalls: initcalls(&read.events, &events, &name_of),
        read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_events_are_recognised_on_a_command_line() {
        assert!(has_trace_events(&cmdline_with_trace("quiet").unwrap()));
        for yes in [
            "quiet trace_event=initcall:*",
            "trace_event=irq:irq_handler_entry,initcall:initcall_start x",
            "trace_event=*:*",
        ] {
            assert!(has_trace_events(yes), "{yes}");
        }
        for no in [
            "quiet",
            "initcall_debug",
            "trace_event=irq:* initcall:*",
            "trace_event=initcall:initcall_level",
        ] {
            assert!(!has_trace_events(no), "{no}");
        }
    }

    #[test]
    fn the_command_line_gets_the_events_clock_and_buffer() {
        let c = cmdline_with_trace("console=ttyS0 quiet").unwrap();
        assert_eq!(
            c,
            format!(
                "console=ttyS0 quiet trace_buf_size=512K trace_event={TRACE_EVENTS} \
                 trace_clock=perf"
            )
        );
        // Applied twice: the same line.
        assert_eq!(cmdline_with_trace(&c).unwrap(), c);
        // Events of the user's own are kept, in one list (the kernel keeps
        // only the last trace_event=), and so is their buffer size.
        let c = cmdline_with_trace("trace_event=sched:sched_switch trace_buf_size=8M x").unwrap();
        assert!(
            c.starts_with("trace_buf_size=8M x trace_event=sched:sched_switch,initcall:"),
            "{c}"
        );
        assert_eq!(c.matches("trace_buf_size").count(), 1);
        // The events named one by one become the system's one entry.
        let c = cmdline_with_trace(
            "trace_event=initcall:initcall_start,initcall:initcall_finish,irq:irq_handler_entry",
        )
        .unwrap();
        assert!(
            c.contains(" trace_event=irq:irq_handler_entry,initcall:* "),
            "{c}"
        );
        let e = cmdline_with_trace("quiet trace_clock=global").unwrap_err();
        assert!(e.to_string().contains("`trace_clock=global`"), "{e}");
        assert!(cmdline_with_trace("tp_printk").is_err());
        assert!(cmdline_with_trace("trace_clock=perf").is_ok());
    }

    /// A record of `struct trace_entry` (type, flags, preempt count, pid)
    /// and the fields after it.
    fn entry(ty: u16, pid: u32, fields: &[u8]) -> Vec<u8> {
        let mut b = ty.to_le_bytes().to_vec();
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(fields);
        b
    }

    pub(crate) fn start(func: u64, pid: u32) -> Vec<u8> {
        entry(1, pid, &func.to_le_bytes())
    }

    pub(crate) fn finish(func: u64, ret: i32, pid: u32) -> Vec<u8> {
        let mut f = func.to_le_bytes().to_vec();
        f.extend_from_slice(&ret.to_le_bytes());
        entry(2, pid, &f)
    }

    pub(crate) fn level(name: &str) -> Vec<u8> {
        let mut f = (((name.len() as u32 + 1) << 16) | 12)
            .to_le_bytes()
            .to_vec();
        f.extend_from_slice(name.as_bytes());
        f.push(0);
        entry(3, 1, &f)
    }

    pub(crate) fn events() -> InitcallEvents {
        InitcallEvents {
            start_type: 1,
            finish_type: 2,
            level_type: 3,
            pid: 4,
            start_func: 8,
            finish_func: 8,
            finish_ret: 16,
            level_name: 8,
        }
    }

    #[test]
    fn events_pair_into_initcalls_with_their_levels() {
        let ev = |ts: u64, data: Vec<u8>| RawEvent { cpu: 0, ts, data };
        let log = [
            ev(10, level("console")),
            ev(11, start(0xa0, 0)),
            ev(15, finish(0xa0, 0, 0)),
            ev(20, level("early")),
            ev(21, start(0xb0, 1)),
            // Moved to another CPU, finished there.
            RawEvent {
                cpu: 1,
                ts: 40,
                data: finish(0xb0, -19, 1),
            },
            ev(50, level("device")),
            ev(51, start(0xc0, 1)),
            // A module's init from another process, inside the device one.
            ev(52, start(0xd0, 77)),
            ev(53, finish(0xd0, 0, 77)),
            ev(90, finish(0xc0, 0, 1)),
            // Started, never finished (a panic): left out.
            ev(95, start(0xe0, 1)),
            ev(96, vec![1]),
        ];
        let name = |f: u64| format!("fn_{f:x}");
        let got = initcalls(&log, &events(), &name);
        let summary: Vec<_> = got
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.level.as_str(),
                    c.guest_start_ns,
                    c.duration_ns,
                    c.ret,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("fn_a0", "console", 11, 4, 0),
                ("fn_b0", "early", 21, 19, -19),
                ("fn_c0", "device", 51, 39, 0),
                ("fn_d0", "module", 52, 1, 0),
            ]
        );
    }

    /// A kernel with the given BTF blob and no symbols.
    struct NoSymbols(Result<Vec<u8>, String>);

    impl GuestKernel for NoSymbols {
        fn address_of(&self, _: &str) -> Option<u64> {
            None
        }
        fn functions_at(&self, addrs: &[u64]) -> Vec<Option<String>> {
            vec![None; addrs.len()]
        }
        fn btf(&self) -> Result<Vec<u8>, String> {
            self.0.clone()
        }
        fn source(&self) -> String {
            "test".into()
        }
    }

    #[test]
    fn what_is_missing_is_named() {
        let mem = super::super::trace_ring::tests::memory();
        let e = read(&mem, &NoSymbols(Err("no .BTF section".into())), 0)
            .err()
            .unwrap();
        assert_eq!(e, "no .BTF section");
        let e = read(&mem, &NoSymbols(Ok(b"junk".to_vec())), 0)
            .err()
            .unwrap();
        assert!(e.starts_with("the kernel's BTF:"), "{e}");
        let mut w = bootscope_testkit::btf::BtfWriter::new();
        let long = w.int();
        w.strukt("trace_array", 8, &[("list", long, 0)]);
        let e = read(&mem, &NoSymbols(Ok(w.finish())), 0).err().unwrap();
        assert!(e.contains("trace_array.array_buffer.buffer"), "{e}");
    }
}
