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
/// Where the kernel image starts above `phys_base`
/// (`CONFIG_PHYSICAL_START`'s default).
const PHYSICAL_START: u64 = 16 << 20;

pub(super) struct Reader {
    plan: Plan,
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
        let symbols = KernelSymbols::start(plan.kernel.clone());
        Self {
            plan,
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
                    let (serial, _) = collector.serial_lines(pid);
                    self.read_all(&mut mem, at, &serial);
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
            .is_none_or(|c| c.contains("initcall:initcall_start"));
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
    /// continued when it was dropped), the symbols' thread ended (what it
    /// loaded is dropped here, its temporary files with it).
    pub(super) fn finish(mut self) -> Outcome {
        if let Some(w) = self.watchdog.take() {
            w.release();
        }
        self.symbols.wait();
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
    use bootscope_vmm::kernel_log::phys::PhysMemory;
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
