//! The guest kernel's log, read out of guest memory when the guest has
//! stopped, and the initcalls in it placed on the timeline's clock
//! (`bootscope run --initcalls`).
//!
//! The kernel keeps `initcall_debug`'s lines in its printk ring buffer at
//! `KERN_DEBUG`, below the console's log level, so they cost the guest no
//! serial port exits. At shutdown the VMM finds the kernel's VMCOREINFO text
//! in guest RAM ([`vmcoreinfo`]), walks the kernel's page tables from
//! `init_top_pgt` ([`phys`]), reads the ring buffer with the layout
//! VMCOREINFO states ([`ringbuffer`]), parses the initcalls ([`initcalls`])
//! and maps their guest timestamps onto the VMM's clock ([`align`]).
//! The same means read the kernel's loaded modules for naming exit sites
//! in them ([`modules`]).

pub mod align;
pub mod btf;
pub mod console_log;
pub mod initcalls;
pub mod modules;
pub mod phys;
pub mod ringbuffer;
mod summary;
pub mod trace_ring;
pub mod traced;
pub mod vmcoreinfo;

use std::collections::HashMap;
use std::time::Instant;

use crate::console::ConsoleLine;
pub use bootscope_model::initcalls::{
    ClockAlignment, DurationCheck, Initcall, InitcallLevel, InitcallsDoc, IntervalCounts,
    SampledCounts,
};
pub use initcalls::{cmdline_with_initcalls, GuestInitcall, NoisyCmdline, CMDLINE_PARAMS, LEVELS};
use phys::{KernelVirt, PhysMemory};
use ringbuffer::{LogRead, RingLayout};
pub use summary::summary;
pub use traced::{GuestKernel, GuestKernelLoader};
pub use vmcoreinfo::StoppedGuest;
use vmcoreinfo::VmcoreInfo;

/// Why the kernel log could not be read.
#[derive(Clone, Debug, thiserror::Error)]
pub enum KernelLogError {
    /// No VMCOREINFO in guest RAM: the kernel lacks `CONFIG_CRASH_CORE`, or
    /// it stopped before building it (early in boot).
    #[error(
        "no VMCOREINFO text in guest memory (the kernel needs CONFIG_CRASH_CORE, and must get \
         past its early set-up)"
    )]
    NoVmcoreInfo,
    /// VMCOREINFO lacks a key the reader needs (a kernel older than 5.10
    /// has no lockless ring buffer).
    #[error("VMCOREINFO has no {key} (a kernel before 5.10 keeps its log differently)")]
    MissingKey { key: String },
    /// A VMCOREINFO value is not a number.
    #[error("VMCOREINFO {key}={value:?} is not a number")]
    BadValue { key: String, value: String },
    /// A kernel address did not translate or read.
    #[error("{what} at {address:#x} is not mapped in the guest's kernel page tables")]
    Unmapped { what: &'static str, address: u64 },
    /// The ring buffer's header makes no sense.
    #[error("the printk ring buffer looks corrupt: {0}")]
    Corrupt(String),
}

/// Gives each initcall and level of `doc` the port I/O and MMIO exits the
/// VMM counted during it.
pub fn count_exits(doc: &mut InitcallsDoc, slots: &crate::exit_slots::ExitSlots) {
    for c in &mut doc.initcalls {
        let n = slots.between(c.start_ns, c.start_ns + c.duration_ns);
        c.io_exits = Some(n.io);
        c.mmio_exits = Some(n.mmio);
    }
    for l in &mut doc.levels {
        let n = slots.between(l.start_ns, l.end_ns);
        l.io_exits = Some(n.io);
        l.mmio_exits = Some(n.mmio);
    }
}

/// Whether a traced duration agrees with the kernel's own figure: within
/// 10 % of it or 50 µs (its microsecond rounding and the log line's own
/// cost between the two clocks' readings).
pub fn durations_agree(traced_ns: u64, kernel_ns: u64) -> bool {
    traced_ns.abs_diff(kernel_ns) <= (kernel_ns / 10).max(50_000)
}

/// Compares `traced` initcalls with the `logged` ones of the same boot.
/// Also gives each traced initcall matched its kernel figure; `from_ns`:
/// the guest time from which the kernel's figures are fine.
pub fn check_durations(
    traced: &[GuestInitcall],
    logged: &[GuestInitcall],
    from_ns: u64,
) -> (DurationCheck, Vec<Option<u64>>) {
    let mut by_name: HashMap<&str, std::collections::VecDeque<u64>> = HashMap::new();
    for l in logged {
        by_name.entry(&l.name).or_default().push_back(l.duration_ns);
    }
    let mut check = DurationCheck {
        from_guest_ns: from_ns,
        ..DurationCheck::default()
    };
    let mut worst = 0;
    let mut figures = Vec::with_capacity(traced.len());
    for t in traced {
        let kernel = by_name.get_mut(t.name.as_str()).and_then(|q| q.pop_front());
        figures.push(kernel);
        let Some(kernel) = kernel else {
            continue;
        };
        if t.guest_start_ns < from_ns {
            check.coarse += 1;
            continue;
        }
        check.compared += 1;
        check.agree += u64::from(durations_agree(t.duration_ns, kernel));
        let diff = t.duration_ns.abs_diff(kernel);
        if check.worst.is_none() || diff > worst {
            worst = diff;
            check.worst = Some((t.name.clone(), t.duration_ns, kernel));
        }
    }
    (check, figures)
}

/// When the kernel switched to a clocksource finer than jiffies, by its
/// log (`clocksource: Switched to clocksource kvm-clock`); u64::MAX when
/// it never did.
pub fn fine_clock_from(records: &[ringbuffer::LogRecord]) -> u64 {
    records
        .iter()
        .find(|r| {
            r.text
                .split_once("Switched to clocksource ")
                .is_some_and(|(_, cs)| !cs.trim().ends_with("jiffies"))
        })
        .map_or(u64::MAX, |r| r.ts_nsec)
}

/// What the method field says for the in-memory reader.
pub const METHOD_GUEST_MEMORY: &str =
    "initcall_debug at KERN_DEBUG (not printed on the console), read from the printk ring \
     buffer in guest memory at shutdown";

/// What the method field says for the trace reader.
pub const METHOD_TRACE: &str =
    "the kernel's initcall tracepoints, recorded in its trace ring buffer (trace_clock=perf, \
     printk's clock) and read from guest memory at shutdown";

/// The kernel's memory as its own page tables map it, from VMCOREINFO.
fn kernel_virt<'a>(
    mem: &'a dyn PhysMemory,
    info: &VmcoreInfo,
) -> Result<KernelVirt<'a>, KernelLogError> {
    Ok(KernelVirt::new(
        mem,
        info.symbol("init_top_pgt")?,
        info.number("phys_base")?,
        info.number("pgtable_l5_enabled").unwrap_or(0) != 0,
        info.number("sme_mask").unwrap_or(0) as u64,
    ))
}

/// Reads the kernel log from a stopped guest.
pub fn read_log<'g>(guest: &'g StoppedGuest) -> Result<(&'g VmcoreInfo, LogRead), KernelLogError> {
    let info = guest.vmcoreinfo()?;
    let kv = kernel_virt(guest.memory(), info)?;
    let prb_sym = info.symbol("prb")?;
    let prb = kv.u64_at(prb_sym).ok_or(KernelLogError::Unmapped {
        what: "the prb pointer",
        address: prb_sym,
    })?;
    let layout = RingLayout::from_vmcoreinfo(info)?;
    let read = ringbuffer::read_records(&kv, &layout, prb)?;
    Ok((info, read))
}

/// The whole `--initcalls` result from a stopped guest's memory, the
/// console lines' host times and the VMM's first `KVM_RUN`.
pub fn collect(guest: &StoppedGuest, lines: &[ConsoleLine], first_run_ns: u64) -> InitcallsDoc {
    collect_with(guest, METHOD_GUEST_MEMORY, |doc, _, read| {
        fill(doc, read, lines, first_run_ns);
    })
}

/// Reads the log of a stopped guest and lets `body` fill the rest of the
/// document from it; the time taken is `read_ns`.
fn collect_with(
    guest: &StoppedGuest,
    method: &str,
    body: impl FnOnce(&mut InitcallsDoc, &VmcoreInfo, &LogRead),
) -> InitcallsDoc {
    let started = Instant::now();
    let mut doc = InitcallsDoc {
        method: method.to_string(),
        ..InitcallsDoc::default()
    };
    match read_log(guest) {
        Ok((info, read)) => {
            doc.os_release = info.os_release().map(str::to_string);
            body(&mut doc, info, &read);
        }
        Err(e) => doc.error = Some(e.to_string()),
    }
    doc.read_ns = started.elapsed().as_nanos() as u64;
    doc
}

/// The booted kernel's KASLR slide (runtime minus link-time addresses):
/// VMCOREINFO's `init_top_pgt` against the symbol table's. Err: the table
/// is another kernel's.
fn kaslr_slide(info: &VmcoreInfo, k: &dyn GuestKernel) -> Result<u64, String> {
    let runtime = info.symbol("init_top_pgt").map_err(|e| e.to_string())?;
    let linked = k
        .address_of("init_top_pgt")
        .ok_or("the kernel's symbol table has no init_top_pgt")?;
    // KASLR moves the kernel by whole 2 MiB pages: another slide means a
    // symbol table of another kernel.
    let slide = runtime.wrapping_sub(linked);
    if slide % (2 << 20) != 0 {
        return Err(format!(
            "the symbol table ({}) is not the booted kernel's: its init_top_pgt is \
             {linked:#x}, VMCOREINFO's {runtime:#x}",
            k.source()
        ));
    }
    Ok(slide)
}

/// The guest-physical address of the kernel's variable `name` (its
/// symbol in `kernel`'s table, moved by the booted kernel's KASLR slide,
/// through the kernel's page tables).
pub fn variable_phys(
    guest: &StoppedGuest,
    kernel: &dyn GuestKernel,
    name: &str,
) -> Result<u64, String> {
    let info = guest.vmcoreinfo().map_err(|e| e.to_string())?;
    let kv = kernel_virt(guest.memory(), info).map_err(|e| e.to_string())?;
    let linked = kernel
        .address_of(name)
        .ok_or_else(|| format!("the kernel's symbol table has no `{name}`"))?;
    let va = linked.wrapping_add(kaslr_slide(info, kernel)?);
    kv.translate(va)
        .ok_or_else(|| format!("`{name}` at {va:#x} is not mapped in the kernel's page tables"))
}

/// What to do instead when the trace method cannot read a kernel.
const TRACE_FALLBACK: &str =
    "boot with --initcalls-method log to read initcall_debug's lines from the kernel log instead";

/// The `--initcalls` result of the trace method from a stopped guest's
/// memory: the initcalls from its trace buffer (`kernel`: its symbols and
/// types), their clock aligned through its log and the console lines.
pub fn collect_traced(
    guest: &StoppedGuest,
    lines: &[ConsoleLine],
    first_run_ns: u64,
    kernel: Result<&dyn GuestKernel, String>,
) -> InitcallsDoc {
    collect_with(guest, METHOD_TRACE, |doc, info, read| {
        let traced = kernel.and_then(|k| {
            doc.symbols = Some(k.source());
            let kv = kernel_virt(guest.memory(), info).map_err(|e| e.to_string())?;
            traced::read(&kv, k, kaslr_slide(info, k)?)
        });
        match traced {
            Ok(t) => {
                doc.trace_events = Some(t.read.events.len() as u64);
                doc.trace_overrun = Some(t.read.overrun);
                fill_with(doc, read, lines, first_run_ns, &t.initcalls);
                let logged = initcalls::parse(&read.records);
                if !logged.is_empty() {
                    let (check, figures) =
                        check_durations(&t.initcalls, &logged, fine_clock_from(&read.records));
                    for (c, k) in doc.initcalls.iter_mut().zip(figures) {
                        c.kernel_duration_ns = k;
                    }
                    doc.kernel_durations = Some(check);
                }
                if t.initcalls.is_empty() {
                    doc.error = Some(format!(
                        "the trace buffer has no initcall events (was trace_event={} on the \
                         command line?)",
                        traced::TRACE_EVENTS
                    ));
                }
            }
            Err(e) => {
                doc.error = Some(format!("initcall events not read: {e}; {TRACE_FALLBACK}"));
            }
        }
    })
}

/// [`collect`] (or, with `kernel`, [`collect_traced`]) for a run that just
/// ended: the console lines kept and the first `KVM_RUN` mark; `kernel`
/// the symbols and types of the image booted, as loaded, and the time the
/// load took.
pub fn collect_after_run(
    guest: &StoppedGuest,
    events: &crate::console::ConsoleEvents,
    marks: &[crate::timeline::TimelineMark],
    kernel: Option<(Result<&dyn GuestKernel, String>, u64)>,
) -> InitcallsDoc {
    let first_run = marks
        .iter()
        .find(|m| m.name == crate::timeline::vmm_marks::FIRST_KVM_RUN)
        .map_or(0, |m| m.t_ns);
    let lines = events.lines.lock().unwrap_or_else(|e| e.into_inner());
    match kernel {
        Some((kernel, loaded_ns)) => {
            let mut doc = collect_traced(guest, &lines, first_run, kernel);
            doc.read_ns += loaded_ns;
            doc
        }
        None => collect(guest, &lines, first_run),
    }
}

/// Initcalls from a console log (the fallback for another VMM): guest
/// times, no alignment, no exits. Err: a timestamp or duration out of
/// range (said where).
pub fn from_console(console: &str) -> Result<InitcallsDoc, String> {
    let records = console_log::records(console).map_err(|e| e.to_string())?;
    let mut doc = InitcallsDoc {
        method: console_log::METHOD_CONSOLE.to_string(),
        ..InitcallsDoc::default()
    };
    let read = LogRead {
        first_seq: 0,
        data_ring_bytes: 0,
        records,
    };
    fill(&mut doc, &read, &[], 0);
    if let Some(c) = doc.initcalls.iter().find(|c| {
        c.duration_ns > console_log::MAX_TIMESTAMP_NS
            || c.start_ns.checked_add(c.duration_ns).is_none()
    }) {
        return Err(format!(
            "the initcall {} lasts {} ns from {} ns: out of range (is this a kernel console log?)",
            bootscope_model::text::printable(&c.name),
            c.duration_ns,
            c.start_ns
        ));
    }
    Ok(doc)
}

/// Fills the log statistics, alignment, initcalls and levels from a log.
pub fn fill(doc: &mut InitcallsDoc, read: &LogRead, lines: &[ConsoleLine], first_run_ns: u64) {
    let guest = initcalls::parse(&read.records);
    if guest.is_empty() && doc.error.is_none() {
        doc.error = Some(
            "the kernel log has no initcall lines (was initcall_debug on the command line?)"
                .to_string(),
        );
    }
    fill_with(doc, read, lines, first_run_ns, &guest);
}

/// Fills the log statistics, the alignment (the log's records against the
/// console lines) and the levels of `guest` initcalls on the log's clock.
fn fill_with(
    doc: &mut InitcallsDoc,
    read: &LogRead,
    lines: &[ConsoleLine],
    first_run_ns: u64,
    guest: &[GuestInitcall],
) {
    doc.log_records = read.records.len() as u64;
    doc.log_first_seq = read.first_seq;
    doc.log_bytes = read.data_ring_bytes;
    doc.clock = align::align(&read.records, lines, first_run_ns);
    let offset = doc.clock.as_ref().map_or(0, |c| c.offset_ns);
    doc.initcalls = place(guest, offset);
    doc.levels = levels(&doc.initcalls);
}

/// Guest initcalls moved onto the timeline by `offset`.
pub fn place(guest: &[GuestInitcall], offset: i64) -> Vec<Initcall> {
    guest
        .iter()
        .map(|g| Initcall {
            name: g.name.clone(),
            level: g.level.clone(),
            start_ns: (g.guest_start_ns as i64).saturating_add(offset).max(0) as u64,
            duration_ns: g.duration_ns,
            ret: g.ret,
            guest_start_ns: g.guest_start_ns,
            kernel_duration_ns: None,
            io_exits: None,
            mmio_exits: None,
            counted: None,
            sampled: None,
        })
        .collect()
}

/// The level groups, in the order the levels ran.
pub fn levels(calls: &[Initcall]) -> Vec<InitcallLevel> {
    let mut out: Vec<InitcallLevel> = Vec::new();
    for c in calls {
        let end = c.start_ns.saturating_add(c.duration_ns);
        match out.iter_mut().find(|l| l.level == c.level) {
            Some(l) => {
                l.start_ns = l.start_ns.min(c.start_ns);
                l.end_ns = l.end_ns.max(end);
                l.initcalls += 1;
                l.initcalls_ns = l.initcalls_ns.saturating_add(c.duration_ns);
            }
            None => out.push(InitcallLevel {
                level: c.level.clone(),
                start_ns: c.start_ns,
                end_ns: end,
                duration_ns: 0,
                initcalls: 1,
                initcalls_ns: c.duration_ns,
                io_exits: None,
                mmio_exits: None,
                counted: None,
                sampled: None,
            }),
        }
    }
    for l in &mut out {
        l.duration_ns = l.end_ns - l.start_ns;
    }
    out.sort_by_key(|l| l.start_ns);
    out
}

#[cfg(test)]
mod tests {
    use super::ringbuffer::tests::{read_synthetic, synthetic_ring};
    use super::*;

    #[test]
    fn a_synthetic_log_becomes_initcalls_and_levels_on_the_vmm_clock() {
        let texts = [
            "Linux version 6.1.0",
            "calling  init_a+0x0/0x10 @ 1",
            "initcall init_a+0x0/0x10 returned 0 after 5 usecs",
            "doing core, parsing ARGS: 'x'",
            "calling  init_b+0x0/0x10 @ 1",
            "initcall init_b+0x0/0x10 returned 0 after 20 usecs",
        ];
        let m = synthetic_ring(&texts[..6], 0, 0, |i| 1_000_000_000 + 10_000 * i as u64);
        let read = read_synthetic(&m);
        let lines = [ConsoleLine {
            text: "[    1.000000] Linux version 6.1.0".into(),
            first_byte_ns: 5_000_000,
            last_byte_ns: 5_100_000,
        }];
        let mut doc = InitcallsDoc::default();
        fill(&mut doc, &read, &lines, 1_000);
        assert!(doc.error.is_none(), "{:?}", doc.error);
        let clock = doc.clock.clone().unwrap();
        assert_eq!(clock.anchors, 1);
        let names: Vec<_> = doc.initcalls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["init_a", "init_b"]);
        let a = &doc.initcalls[0];
        assert_eq!(a.guest_start_ns, 1_000_010_000);
        assert_eq!(a.start_ns as i64, 1_000_010_000 + clock.offset_ns);
        assert_eq!(doc.levels.len(), 2);
        assert_eq!(doc.levels[0].level, "early");
        assert_eq!(doc.levels[1].level, "core");
        assert_eq!(doc.levels[1].initcalls_ns, 20_000);
        let s = summary(&doc, 5);
        assert!(s.contains("initcalls: 2 in 2 levels"), "{s}");
        assert!(s.contains("init_b"), "{s}");
        assert!(!s.contains("most io exits"), "{s}");
        // Exits the VMM counted while init_b ran (its 20 µs) and after.
        let mut slots = crate::exit_slots::ExitSlots::default();
        let at = doc.initcalls[1].start_ns;
        for t in [at, at + 5_000, at + 500_000] {
            slots.count(t, &kvm_ioctls::VcpuExit::IoOut(0x70, &[0]));
        }
        count_exits(&mut doc, &slots);
        assert!(doc.initcalls[1].io_exits.unwrap() <= 2);
        assert_eq!(doc.levels[1].io_exits, doc.initcalls[1].io_exits);
        let s = summary(&doc, 5);
        assert!(s.contains("most io exits"), "{s}");
    }

    /// A device-level initcall of `kernel_init` on the guest's clock.
    fn call(name: &str, start: u64, len: u64) -> GuestInitcall {
        GuestInitcall {
            name: name.into(),
            level: "device".into(),
            guest_start_ns: start,
            duration_ns: len,
            ret: 0,
            pid: 1,
        }
    }

    #[test]
    fn sampled_counters_are_shared_out_by_time() {
        let counts = |exits: u64, npf: u64, faults: u64| SampledCounts {
            exits,
            exits_by_reason: [("npf".to_string(), npf)].into(),
            guest_faults: faults,
            host_faults: 0,
        };
        let mut doc = InitcallsDoc {
            initcalls: place(
                &[GuestInitcall {
                    name: "slow_init".into(),
                    level: "device".into(),
                    guest_start_ns: 15,
                    duration_ns: 20,
                    ret: 0,
                    pid: 1,
                }],
                0,
            ),
            ..InitcallsDoc::default()
        };
        doc.levels = levels(&doc.initcalls);
        let mut samples = vec![
            (30, counts(300, 30, 9)),
            (10, counts(100, 10, 3)),
            (50, counts(500, 50, 15)),
        ];
        doc.attribute_samples(&mut samples);
        // 15..35: exits 150 -> 350, npf 15 -> 35, faults 4.5 -> 10.5.
        let s = doc.initcalls[0].sampled.clone().unwrap();
        assert_eq!(s.exits, 200);
        assert_eq!(s.exits_by_reason["npf"], 20);
        assert_eq!(s.guest_faults, 11 - 5);
        assert_eq!(doc.sample_spacing_ns, Some(20));
        assert_eq!(doc.levels[0].sampled.as_ref().unwrap().exits, 200);
    }

    /// Counts of one exit per nanosecond from 0 on, complete up to 30.
    struct PerNs;

    impl IntervalCounts for PerNs {
        fn slot_ns(&self) -> u64 {
            1
        }
        fn complete_until_ns(&self) -> Option<u64> {
            Some(30)
        }
        fn between(&self, start_ns: u64, end_ns: u64) -> SampledCounts {
            SampledCounts {
                exits: end_ns - start_ns,
                exits_by_reason: [("io".to_string(), end_ns - start_ns)].into(),
                guest_faults: 1,
                host_faults: 0,
            }
        }
    }

    #[test]
    fn counted_exits_replace_samples_where_the_counts_are_complete() {
        let mut doc = InitcallsDoc {
            initcalls: place(&[call("early_one", 10, 15), call("late_one", 40, 10)], 0),
            ..InitcallsDoc::default()
        };
        doc.levels = levels(&doc.initcalls);
        doc.attribute_counts(&PerNs);
        let counted = doc.initcalls[0].counted.clone().unwrap();
        assert_eq!(counted.exits, 15);
        assert_eq!(counted.exits_by_reason["io"], 15);
        assert_eq!(doc.slot_ns, Some(1));
        assert_eq!(doc.slots_complete_until_ns, Some(30));
        // Past the complete slots: nothing counted, the samples fill in.
        assert!(doc.initcalls[1].counted.is_none());
        assert!(doc.levels[0].counted.is_none());
        let counts = |exits: u64| SampledCounts {
            exits,
            ..SampledCounts::default()
        };
        doc.attribute_samples(&mut [(0, counts(0)), (100, counts(100))]);
        assert!(doc.initcalls[0].sampled.is_none());
        assert_eq!(doc.initcalls[1].sampled.as_ref().unwrap().exits, 10);
        assert_eq!(doc.initcalls[1].profiled().unwrap().exits, 10);
        assert_eq!(doc.initcalls[0].profiled().unwrap().exits, 15);
        assert_eq!(doc.sample_spacing_ns, Some(100));
        let s = summary(&doc, 5);
        assert!(s.contains("per 0 µs slot; sampled 0 ms apart"), "{s}");
        // Serialized: both kinds, each where it applies.
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["initcalls"][0]["counted"]["exits"], 15);
        assert!(v["initcalls"][0].get("sampled").is_none());
        assert_eq!(v["slot_ns"], 1);
    }

    #[test]
    fn traced_durations_are_checked_against_the_kernels_own() {
        let traced = [
            call("a", 0, 1_000_000),
            call("b", 10, 30_000),
            call("a", 20, 500_000),
            call("c", 30, 5_000_000),
            call("only_traced", 40, 1),
        ];
        let logged = [
            call("a", 0, 1_050_000),
            call("b", 10, 0),
            call("a", 20, 700_000),
            call("c", 30, 5_400_000),
        ];
        let (c, figures) = check_durations(&traced, &logged, 0);
        assert_eq!(figures[2], Some(700_000));
        assert_eq!(figures[4], None);
        // a: 5 % off; b: 30 µs off; a again: 200 µs and 29 % off;
        // c: 400 µs and 7 % off.
        assert_eq!((c.compared, c.agree), (4, 3));
        assert_eq!(c.worst, Some(("c".into(), 5_000_000, 5_400_000)));
        // Before the fine clock: matched, not compared.
        let (late, _) = check_durations(&traced, &logged, 15);
        assert_eq!((late.coarse, late.compared), (2, 2));
        let rec = |ts: u64, text: &str| ringbuffer::LogRecord {
            seq: 0,
            ts_nsec: ts,
            caller_id: 0,
            text: text.into(),
        };
        let log = [
            rec(5, "clocksource: Switched to clocksource refined-jiffies"),
            rec(9, "clocksource: Switched to clocksource kvm-clock"),
        ];
        assert_eq!(fine_clock_from(&log), 9);
        assert_eq!(fine_clock_from(&log[..1]), u64::MAX);
        assert!(durations_agree(50_000, 0));
        assert!(!durations_agree(50_001, 0));
        let mut doc = InitcallsDoc {
            initcalls: place(&traced, 0),
            kernel_durations: Some(c),
            trace_overrun: Some(3),
            ..InitcallsDoc::default()
        };
        doc.levels = levels(&doc.initcalls);
        let s = summary(&doc, 3);
        assert!(s.contains("3 of 4 durations within 10 %"), "{s}");
        assert!(s.contains("overwrote 3 events"), "{s}");
    }

    #[test]
    fn memory_without_a_kernel_says_why() {
        let mem = phys::tests::FlatMemory::new(1 << 20);
        let guest = StoppedGuest::new(&mem);
        let doc = collect(&guest, &[], 0);
        assert!(doc.error.unwrap().contains("VMCOREINFO"));
        assert!(doc.initcalls.is_empty());
        let doc = collect_traced(&guest, &[], 0, Err("no kernel".into()));
        assert!(doc.error.unwrap().contains("VMCOREINFO"));
        assert_eq!(doc.method, METHOD_TRACE);
    }
}
