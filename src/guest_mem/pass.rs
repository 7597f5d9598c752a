//! One reading of a traced VM's memory, and what the passes have found.

use std::collections::BTreeSet;
use std::time::Instant;

use bootscope_model::guest_read::{
    GuestMemoryMap, GuestRead, KernelLogLine, KernelLogRead, ModulesRead, ReadPass,
};
use bootscope_model::modules::GuestModules;
use bootscope_profiler::collector::SerialLine;
use bootscope_profiler::Collector;
use bootscope_vmm::console::ConsoleLine;
use bootscope_vmm::kernel_log::phys::PhysMemory;
use bootscope_vmm::kernel_log::{self, GuestKernel, StoppedGuest};

use super::hold::{Held, Watchdog};
use super::layout;
use super::process::ProcessMemory;
use super::symbols::KernelSymbols;
use super::{Outcome, Plan};

/// The most one pass reads of guest memory in all.
const PASS_BUDGET: u64 = 2 << 30;
/// The low memory where VMMs put the boot parameters.
const LOW: (u64, u64) = (0, 1 << 20);
/// How much of the kernel image is searched for its own copy of them.
const IMAGE_SPAN: u64 = 64 << 20;
/// The most a held VMM's memory copy takes (the pages it touched, the
/// kernel's first: see [`scan_order`]).
const COPY_BUDGET: u64 = 1 << 30;
/// Where the kernel image starts above `phys_base`
/// (`CONFIG_PHYSICAL_START`'s default).
const PHYSICAL_START: u64 = 16 << 20;

/// A held VMM's memory, copied while the symbols were still being
/// loaded, to be decoded once they are.
struct Pending {
    mem: ProcessMemory,
    at: String,
    serial: Vec<SerialLine>,
    /// Its pass in `doc.passes`.
    pass: usize,
}

pub(super) struct Reader {
    plan: Plan,
    pending: Option<Pending>,
    pub(super) doc: GuestRead,
    modules: Option<GuestModules>,
    /// Guest-physical address of the VMCOREINFO text, once found.
    vmcoreinfo: Option<u64>,
    /// The guest kernel's symbols, loaded on a thread of their own.
    pub(super) symbols: KernelSymbols,
    holds: BTreeSet<u32>,
    watchdog: Option<Watchdog>,
    /// The boot parameters were searched for (at the first pass that
    /// found the kernel's data).
    boot_params_searched: bool,
}

impl Reader {
    pub(super) fn new(plan: Plan, watchdog: Option<Watchdog>) -> Self {
        let doc = GuestRead {
            pid: plan.pid,
            ..GuestRead::default()
        };
        let symbols = KernelSymbols::deferred(plan.kernel.clone());
        Self {
            plan,
            pending: None,
            doc,
            modules: None,
            vmcoreinfo: None,
            symbols,
            holds: BTreeSet::new(),
            watchdog,
            boot_params_searched: false,
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.plan.pid
    }

    /// The VMM is the process that set memory slots, when one did.
    pub(super) fn learn_pid(&mut self, collector: &Collector) {
        let owners = collector.memory_slot_owners();
        if let Some(&p) = owners.first().filter(|&&p| p != self.plan.pid) {
            self.plan.pid = p;
            self.doc.pid = p;
            if let Some(w) = self.watchdog.as_mut() {
                w.watch(&p.to_string());
            }
        }
    }

    /// True when `tgid`'s hold was read already.
    pub(super) fn handled_hold(&self, tgid: u32) -> bool {
        self.holds.contains(&tgid)
    }

    /// Records that `tgid`'s hold (for `why`) was read.
    pub(super) fn note_hold(&mut self, tgid: u32, why: &str) {
        self.holds.insert(tgid);
        if let Some(p) = self.doc.passes.last_mut().filter(|p| p.at == "shutdown") {
            p.held_at = Some(why.to_string());
        }
    }

    /// The map of `pid`'s VM: its ioctls when seen, else inferred.
    fn memory_map(&mut self, collector: &Collector, pid: u32) -> GuestMemoryMap {
        let maps = layout::read_maps(pid);
        let captured = collector.memory_slots(pid);
        if !captured.is_empty() {
            return layout::from_ioctls(&captured, &maps);
        }
        if self.doc.memory_map.source == "inferred" {
            return self.doc.memory_map.clone();
        }
        let (map, at) = layout::infer(pid, &maps);
        if at.is_some() {
            self.vmcoreinfo = at;
        }
        map
    }

    /// Reads what there is to read now; `held` the VMM's hold, if held.
    pub(super) fn pass(
        &mut self,
        collector: &Collector,
        pid: u32,
        at: &str,
        t_ns: u64,
        held: Option<&Held>,
    ) {
        let started = Instant::now();
        self.symbols.ready();
        let map = self.memory_map(collector, pid);
        let (serial, _) = collector.serial_lines(pid);
        self.pass_with(map, serial, pid, (at, t_ns, started), held);
    }

    /// [`Self::pass`] with the map and serial lines learned: `when` is
    /// the pass's name, its time on the profile's clock, when it started.
    fn pass_with(
        &mut self,
        map: GuestMemoryMap,
        serial: Vec<SerialLine>,
        pid: u32,
        (at, t_ns, started): (&str, u64, Instant),
        held: Option<&Held>,
    ) {
        let mut pass = ReadPass {
            at: at.into(),
            t_ns,
            ..ReadPass::default()
        };
        self.doc.pid = pid;
        if map.slots.is_empty() {
            self.doc.memory_map = map.clone();
            self.doc.missing("memory_map", map.detail);
            pass.error = Some("the VM's memory map is not known".into());
        } else {
            self.doc.found("memory_map");
            self.doc.memory_map = map.clone();
            match ProcessMemory::open(pid, map.slots, PASS_BUDGET) {
                Ok(mut mem) => {
                    if held.is_some() && !self.symbols.ready() {
                        self.copy_for_later(&mem, at, serial, &mut pass);
                    } else {
                        self.read_all(&mut mem, at, &serial);
                    }
                    pass.bytes_read = mem.bytes_read();
                    pass.failed_reads = mem.failed_reads();
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let why = format!(
                        "process {pid} ended before its memory was read (it was not held \
                         at its guest's end: the guest stopped in a way the hold does not know)"
                    );
                    self.doc.missing("memory", why.clone());
                    pass.error = Some(why);
                }
                Err(e) => {
                    let why = format!(
                        "cannot open /proc/{pid}/mem read-only: {e} (reading another \
                         process's memory needs root or CAP_SYS_PTRACE)"
                    );
                    self.doc.missing("memory", why.clone());
                    pass.error = Some(why);
                }
            }
        }
        pass.read_ns = started.elapsed().as_nanos() as u64;
        pass.held_ns = held.map(Held::held_ns);
        self.doc.passes.push(pass);
    }

    /// Copies what the VMM touched of its guest's RAM (bounded), to be
    /// decoded by [`Self::decode_pending`] once the symbols are loaded:
    /// the VMM held is continued without waiting for them.
    fn copy_for_later(
        &mut self,
        mem: &ProcessMemory,
        at: &str,
        serial: Vec<SerialLine>,
        pass: &mut ReadPass,
    ) {
        let (copy, copied) = mem.copy_touched(&scan_order(mem.ranges()), COPY_BUDGET, PASS_BUDGET);
        if copied.pages_left > 0 {
            pass.error = Some(format!(
                "{} touched pages of guest memory were not copied (the copy's budget is {} \
                 MiB): what the readers find there is missing",
                copied.pages_left,
                COPY_BUDGET >> 20
            ));
        }
        self.pending = Some(Pending {
            mem: copy,
            at: at.into(),
            serial,
            pass: self.doc.passes.len(),
        });
    }

    /// Waits for the symbols' load, at most the plan's time.
    pub(super) fn wait_symbols(&mut self) {
        self.symbols.wait_for(self.plan.symbols_wait);
    }

    /// True while a copy waits to be decoded.
    pub(super) fn pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Decodes the copy a hold took (with the symbols as they are now:
    /// what needs them and has none names why).
    pub(super) fn decode_pending(&mut self) {
        let Some(mut p) = self.pending.take() else {
            return;
        };
        self.symbols.ready();
        let started = Instant::now();
        self.read_all(&mut p.mem, &p.at, &p.serial);
        if let Some(pass) = self.doc.passes.get_mut(p.pass) {
            pass.failed_reads += p.mem.failed_reads();
            pass.read_ns += started.elapsed().as_nanos() as u64;
        }
    }

    fn kernel(&self) -> Result<&dyn GuestKernel, String> {
        self.symbols.get()
    }

    /// Everything the readers find in `mem` now.
    /// `serial`: the guest's serial lines so far, which put its kernel's
    /// clock on the profile's.
    fn read_all(&mut self, mem: &mut ProcessMemory, at: &str, serial: &[SerialLine]) {
        if self.vmcoreinfo.is_none() {
            self.vmcoreinfo = find_vmcoreinfo(mem);
        }
        // The readers scan only where the text is (nowhere when it is not).
        mem.scan_only(
            self.vmcoreinfo
                .map_or_else(Vec::new, |g| vec![(g & !0xfff, 8192)]),
        );
        // Searched once: what is not there at the first pass is not there
        // later (and a search of the image would lengthen a hold); again
        // when the first search had no symbols yet and found nothing.
        if !self.boot_params_searched {
            self.read_boot_params(mem);
            self.boot_params_searched = self.doc.boot_params.is_some() || !self.symbols.loading();
        }
        let guest = StoppedGuest::new(mem);
        let console;
        match kernel_log::read_log(&guest) {
            Ok((info, read)) => {
                console = super::console::console_lines(serial, &read.records);
                self.doc.found("kernel_log");
                self.doc.kernel_log = Some(KernelLogRead {
                    os_release: info.os_release().map(str::to_string),
                    at: at.into(),
                    first_seq: read.first_seq,
                    records: read
                        .records
                        .iter()
                        .take(MAX_RECORDS)
                        .map(|r| KernelLogLine {
                            ts_ns: r.ts_nsec,
                            text: r.text.clone(),
                        })
                        .collect(),
                });
            }
            Err(e) => {
                if self.doc.kernel_log.is_none() {
                    self.doc.missing("kernel_log", e.to_string());
                }
                return;
            }
        }
        self.read_initcalls(&guest, &console);
        self.read_modules(&guest);
    }

    /// The boot parameters: the kernel's own copy by its symbol, else a
    /// search of the low megabyte (the VMM's copy) and the kernel image.
    fn read_boot_params(&mut self, mem: &ProcessMemory) {
        let guest = StoppedGuest::new(mem);
        let info = guest.vmcoreinfo().ok().cloned();
        let mut ranges = vec![LOW];
        if let Some(i) = &info {
            let base = i.number("phys_base").unwrap_or(0);
            let start = i
                .symbol("_stext")
                .map(|s| bootscope_vmm::kernel_log::phys::image_to_phys(s, base) & !0xfff)
                .unwrap_or_else(|_| (base as u64).wrapping_add(PHYSICAL_START));
            ranges.push((start, IMAGE_SPAN));
        }
        let by_symbol = self.kernel().and_then(|k| {
            let gpa = kernel_log::variable_phys(&guest, k, "boot_params")?;
            super::boot_params::read_at(guest.memory(), gpa)
        });
        let why_not = by_symbol.as_ref().err().cloned();
        self.doc.boot_params = by_symbol.ok().or_else(|| {
            let touched = touched_pieces(mem, &ranges);
            super::boot_params::find(mem, &touched)
        });
        match &self.doc.boot_params {
            Some(_) => self.doc.found("boot_params"),
            None => self.doc.missing(
                "boot_params",
                format!(
                    "the kernel's `boot_params`: {}; and no struct boot_params (boot flag \
                     0xAA55, HdrS, an e820 table) in the low megabyte or the kernel image",
                    why_not.unwrap_or_default()
                ),
            ),
        }
    }

    /// The initcalls, on the profile's clock where `console` anchors it.
    fn read_initcalls(&mut self, guest: &StoppedGuest, console: &[ConsoleLine]) {
        let cmdline = self
            .doc
            .boot_params
            .as_ref()
            .and_then(|b| b.cmdline.clone())
            .or_else(|| self.plan.cmdline.clone());
        let traced = cmdline
            .as_deref()
            .is_none_or(kernel_log::traced::has_trace_events);
        let logged = cmdline
            .as_deref()
            .is_some_and(|c| c.contains("initcall_debug"));
        let doc = if traced && (cmdline.is_some() || self.kernel().is_ok()) {
            kernel_log::collect_traced(guest, console, 0, self.kernel())
        } else if logged {
            kernel_log::collect(guest, console, 0)
        } else {
            self.doc.missing(
                "initcalls",
                "the guest's command line has neither the kernel's initcall trace events \
                 (trace_event=initcall:... as `profile --initcalls` adds them) nor \
                 initcall_debug",
            );
            return;
        };
        let better = self
            .doc
            .initcalls
            .as_ref()
            .is_none_or(|old| doc.initcalls.len() >= old.initcalls.len());
        if !better {
            return;
        }
        match (&doc.error, doc.initcalls.is_empty()) {
            (Some(e), true) => self.doc.missing("initcalls", e.clone()),
            _ => self.doc.found("initcalls"),
        }
        self.doc.initcalls = Some(doc);
    }

    fn read_modules(&mut self, guest: &StoppedGuest) {
        let kernel = self.kernel();
        if let Err(e) = &kernel {
            // What an earlier pass read stays (this one had no symbols).
            if self.doc.modules.is_none() {
                self.doc.missing("modules", e.clone());
            }
            return;
        }
        let m = kernel_log::modules::collect(guest, kernel);
        if m.modules.is_empty() && !m.warnings.is_empty() {
            self.doc.missing("modules", m.warnings.join("; "));
        } else {
            self.doc.found("modules");
        }
        self.doc.modules = Some(ModulesRead {
            modules: m.modules.clone(),
            warnings: m.warnings.clone(),
        });
        self.modules = Some(m);
    }

    /// The reading's outcome; the watchdog released (every hold was
    /// continued when it was dropped); what the symbols' thread loaded is
    /// dropped here, its temporary files with it.
    pub(super) fn finish(mut self) -> Outcome {
        if let Some(w) = self.watchdog.take() {
            w.release();
        }
        Outcome {
            read: self.doc,
            modules: self.modules,
        }
    }
}

/// `ranges` cut in 1 MiB pieces, those the VMM never touched left out.
fn touched_pieces(mem: &ProcessMemory, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    const PIECE: u64 = 1 << 20;
    let mut out = Vec::new();
    for &(start, len) in ranges {
        let mut at = start;
        while at < start.saturating_add(len) {
            let n = PIECE.min(start + len - at);
            if mem.touched(at, n) {
                out.push((at, n));
            }
            at += n;
        }
    }
    out
}

/// The most kernel log records kept.
const MAX_RECORDS: usize = 50_000;

/// The guest-physical address of the VMCOREINFO text, searching all RAM
/// (within the pass's budget).
fn find_vmcoreinfo(mem: &ProcessMemory) -> Option<u64> {
    scan_order(mem.ranges())
        .into_iter()
        .find_map(|(start, len)| {
            layout::scan(len, |off, buf| mem.read_touched(start + off, buf))
                .map(|f| start + f.offset)
        })
}

/// RAM in the order it is searched for the kernel's data: from where
/// kernels load (`CONFIG_PHYSICAL_START`) upwards first, the memory below
/// it last, so the search mostly ends within the kernel image.
fn scan_order(ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let (mut high, mut low) = (Vec::new(), Vec::new());
    for (start, len) in ranges {
        let end = start.saturating_add(len);
        if start >= PHYSICAL_START {
            high.push((start, len));
        } else if end <= PHYSICAL_START {
            low.push((start, len));
        } else {
            high.push((PHYSICAL_START, end - PHYSICAL_START));
            low.push((start, PHYSICAL_START - start));
        }
    }
    high.sort_unstable();
    low.sort_unstable();
    high.extend(low);
    high
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_mem::boot_params::{BOOT_FLAG, CMD_LINE_PTR, E820_ENTRIES, HEADER};
    use crate::guest_mem::SYMBOLS_WAIT;
    use bootscope_model::guest_read::MemorySlot;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A guest's RAM (2 MiB) with the VMM's boot parameters at 0x7000.
    fn guest_ram(cmdline: &str) -> Vec<u8> {
        let mut m = vec![0u8; 2 << 20];
        let p = &mut m[0x7000..0x8000];
        p[BOOT_FLAG..BOOT_FLAG + 2].copy_from_slice(&[0x55, 0xaa]);
        p[HEADER..HEADER + 4].copy_from_slice(b"HdrS");
        p[E820_ENTRIES] = 1;
        // One e820 entry: all 2 MiB usable RAM.
        let e = super::super::boot_params::E820_TABLE;
        p[e + 8..e + 16].copy_from_slice(&(2u64 << 20).to_le_bytes());
        p[e + 16..e + 20].copy_from_slice(&1u32.to_le_bytes());
        p[CMD_LINE_PTR..CMD_LINE_PTR + 4].copy_from_slice(&0x2_0000u32.to_le_bytes());
        m[0x2_0000..0x2_0000 + cmdline.len()].copy_from_slice(cmdline.as_bytes());
        m
    }

    /// The map of a "VMM" that is this process, its guest's RAM `ram`.
    fn map_of(ram: &[u8]) -> GuestMemoryMap {
        GuestMemoryMap {
            source: "ioctl".into(),
            detail: String::new(),
            slots: vec![MemorySlot {
                size: ram.len() as u64,
                hva: ram.as_ptr() as u64,
                kind: "ram".into(),
                ..MemorySlot::default()
            }],
        }
    }

    struct Kernel;

    impl GuestKernel for Kernel {
        fn address_of(&self, _: &str) -> Option<u64> {
            None
        }
        fn functions_at(&self, addrs: &[u64]) -> Vec<Option<String>> {
            vec![None; addrs.len()]
        }
        fn btf(&self) -> Result<Vec<u8>, String> {
            Err("none".into())
        }
        fn source(&self) -> String {
            "a test kernel".into()
        }
    }

    /// A reader whose symbols load only when the test sends on the
    /// returned channel (a cold kernel cache, as slow as the test wants).
    fn slow_reader(wait: Duration) -> (Reader, mpsc::Sender<()>) {
        let plan = Plan {
            pid: std::process::id(),
            kernel: None,
            cmdline: None,
            pgid: None,
            symbols_wait: wait,
        };
        let mut r = Reader::new(plan, None);
        let (go, gate) = mpsc::channel::<()>();
        r.symbols = KernelSymbols::spawn(move || {
            gate.recv().map_err(|e| e.to_string())?;
            Ok(Box::new(Kernel) as Box<dyn GuestKernel>)
        });
        (r, go)
    }

    /// A held pass of the "VMM" (this process: the hold continues it).
    fn held_pass(r: &mut Reader, ram: &[u8]) {
        let held = Held::adopt(std::process::id(), Instant::now());
        let when = ("shutdown", 1, Instant::now());
        r.pass_with(
            map_of(ram),
            Vec::new(),
            std::process::id(),
            when,
            Some(&held),
        );
    }

    #[test]
    fn a_held_vmm_is_copied_without_waiting_and_decoded_once_the_symbols_load() {
        let (mut r, go) = slow_reader(SYMBOLS_WAIT);
        let mut ram = guest_ram("console=ttyS0 held");
        // The load has not ended (it waits for `go`): the pass returns,
        // its copy pending, nothing decoded yet.
        held_pass(&mut r, &ram);
        assert!(r.symbols.loading() && r.pending());
        assert!(r.doc.boot_params.is_none());
        let pass = &r.doc.passes[0];
        // The pages written, not the 2 MiB (huge pages aside).
        assert!(pass.bytes_read >= 2 * 4096, "{pass:?}");
        assert!(pass.held_ns.is_some() && pass.error.is_none(), "{pass:?}");
        // Continued, the VMM changes its memory (or exits): the copy
        // keeps what the hold saw.
        ram.fill(0);
        go.send(()).unwrap();
        r.wait_symbols();
        assert!(!r.symbols.loading());
        r.decode_pending();
        assert!(!r.pending());
        let b = r.doc.boot_params.as_ref().expect("read from the copy");
        assert_eq!(b.cmdline.as_deref(), Some("console=ttyS0 held"));
        assert_eq!(b.gpa, 0x7000);
        // The decode had the symbols: what is missing is for the guest's
        // want of a kernel log, not the load.
        let why = |part: &str| {
            r.doc
                .missing
                .iter()
                .find(|m| m.part == part)
                .map(|m| &m.why)
        };
        let log = why("kernel_log").expect("no kernel log in this guest");
        assert!(!log.contains("still being loaded"), "{log}");
        assert!(r.kernel().is_ok());
    }

    #[test]
    fn symbols_still_loading_past_the_wait_are_named_with_the_limit() {
        let (mut r, _go) = slow_reader(Duration::from_millis(1));
        // No boot parameters: the symbol's reason is what is left.
        let ram = vec![0x5au8; 1 << 20];
        held_pass(&mut r, &ram);
        assert!(r.pending());
        r.wait_symbols();
        r.decode_pending();
        let m = r.doc.missing.iter().find(|m| m.part == "boot_params");
        let why = &m.expect("boot parameters missing").why;
        assert!(why.contains("waited 1ms for them, the limit"), "{why}");
        assert!(r.symbols.loading());
    }

    #[test]
    fn the_search_starts_where_kernels_load() {
        let m = 1u64 << 20;
        assert_eq!(
            scan_order(vec![(0, 15 * m), (15 * m, 241 * m), (4096 * m, 64 * m)]),
            vec![
                (16 * m, 240 * m),
                (4096 * m, 64 * m),
                (0, 15 * m),
                (15 * m, m)
            ]
        );
        assert_eq!(scan_order(vec![]), vec![]);
    }
}
