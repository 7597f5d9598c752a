//! The fault-tail collector's part (bpf/tail.bpf.c): the window armed
//! before the target runs, closed at the guest's next mark, and the
//! in-kernel counts read into the profile's `fault_tail`.

use std::collections::BTreeMap;

use aya::maps::{Array, MapData};
use aya::Ebpf;
use bootscope_model::fault_tail::{
    FaultTail, TailBucket, TailHost, TailKind, TailThread, TailWhere, TailWindow, WorkingSet,
    KINDS, PAGE_BYTES,
};
use bootscope_model::hist;

use super::maps::{array_entries, hash_entries, percpu_sum};
use super::state::State;
use crate::bpf::tail::{self as t, total};
use crate::bpf::{self, BsHist, Source};
use crate::profile::{Mark, MarkSource};

const WINDOW_MAP: &str = "tail_window";
const TOTALS_MAP: &str = "tail_totals";
/// A window program's `sources[].detail` once the window's end detached it.
const DETACHED: &str = "detached at the window's end (its counts are the window's)";
/// The VMM's mark of its first `KVM_RUN` (bootscope's own VMM).
pub(super) const FIRST_KVM_RUN: &str = "vmm: first KVM_RUN";

/// The curve's bucket width: a millisecond.
pub(super) const BUCKET_NS: u64 = 1_000_000;

/// Guest pages per entry of the distinct-page set (one bit each).
const PAGES_PER_WORD: u64 = 64;
/// The guest-physical range the set covers beyond the guest's RAM: VMMs
/// put RAM past the 32-bit hole below 4 GiB, firmware and ROM just under
/// 4 GiB, their own small regions near it.
const RANGE_SLACK: u64 = 4 << 30;
/// The set's range when the guest's memory is not known (another VMM
/// profiled from outside): 64 GiB of guest-physical space, 2 MiB of bits.
/// Pages above it are counted in `working_set.uncounted`.
const RANGE_UNKNOWN: u64 = 64 << 30;
/// The largest set made: 1 TiB of guest-physical space (32 MiB of bits).
const RANGE_MOST: u64 = 1 << 40;
/// Per-region counts (an array, one entry per 2 MiB region and kind over
/// the same range as the page set): the most made, 4 MiB of entries
/// (102 GiB of guest-physical space); a fault above is a map overflow.
const REGIONS_MOST: u32 = 1 << 18;
/// Thread entries: the object's size (preallocated), the most made.
const THREADS_MOST: u32 = 1024;

/// The tail maps' sizes for a guest of `memory_bytes` whose VMM has at
/// most `threads` threads (each when known). The kernel zeroes a hash
/// map's buckets when it creates it, one per entry rounded up to a power
/// of two, preallocated or not, and an array's values: each map is made
/// for this guest. The distinct-page set is a bitmap over guest-physical
/// space from 0 to the guest's RAM and 4 GiB beyond (a 256 MiB guest's
/// is 136 KiB). Full maps are never silent: a page above the set's range
/// is counted in `working_set.uncounted`, any other entry in
/// `map_overflows`.
pub(super) fn map_sizes(
    memory_bytes: Option<u64>,
    threads: Option<u32>,
) -> [(&'static str, u32); 3] {
    let kinds = t::KINDS as u64;
    let words = |range: u64| {
        let words = range.min(RANGE_MOST) / PAGE_BYTES / PAGES_PER_WORD;
        u32::try_from(words).unwrap_or(u32::MAX)
    };
    let range = memory_bytes.map_or(RANGE_UNKNOWN, |b| b.saturating_add(RANGE_SLACK));
    let regions = (range.min(RANGE_MOST) >> t::REGION_SHIFT).saturating_mul(kinds);
    let (pages, regions) = (
        words(range),
        u32::try_from(regions).unwrap_or(u32::MAX).min(REGIONS_MOST),
    );
    let threads = threads.map_or(THREADS_MOST, |n| {
        n.saturating_mul(2)
            .checked_next_power_of_two()
            .unwrap_or(u32::MAX)
            .clamp(64, THREADS_MOST)
    });
    [
        ("tail_pages", pages),
        ("tail_regions", regions),
        ("tail_threads", threads),
    ]
}

/// Arms the window: the next guest fault of a followed VM opens it.
pub(super) fn arm(ebpf: &mut Ebpf) -> Result<(), String> {
    let map = ebpf
        .map_mut(WINDOW_MAP)
        .ok_or_else(|| format!("map {WINDOW_MAP} is not in the object"))?;
    let mut a = Array::<&mut MapData, t::BsTailWindow>::try_from(map).map_err(|e| e.to_string())?;
    let w = t::BsTailWindow {
        state: t::TAIL_ARMED,
        ..Default::default()
    };
    a.set(0, w, 0).map_err(|e| e.to_string())
}

impl State {
    fn tail_window(&self) -> Option<t::BsTailWindow> {
        let a = Array::<&MapData, t::BsTailWindow>::try_from(self.bpf.map(WINDOW_MAP)?).ok()?;
        a.get(&0, 0).ok()
    }

    fn tail_start(&self) -> Option<t::BsTailStart> {
        let a = Array::<&MapData, t::BsTailStart>::try_from(self.bpf.map("tail_start")?).ok()?;
        a.get(&0, 0).ok().filter(|s| s.tgid != 0)
    }

    /// Closes an open window at `mark` if it is the guest's first mark
    /// since the window opened (a mark of the VMM's own does not close it).
    pub(super) fn close_tail_window(&mut self, mark: &Mark) {
        if mark.source == MarkSource::Vmm || !self.attached(Source::TailSpte) || derived(mark) {
            return;
        }
        let Some(w) = self.tail_window() else { return };
        if w.state != t::TAIL_ARMED {
            return;
        }
        let Some(start) = self.tail_start() else {
            return;
        };
        let mono = self.clock.start_mono_ns + mark.t_ns;
        // A mark read after a later one (the console's lines and the port
        // writes arrive by different paths) still ends the window earlier.
        if !ends_window(mark, mono, &start) || (w.end_ns != 0 && mono >= w.end_ns) {
            return;
        }
        let Some(map) = self.bpf.map_mut(WINDOW_MAP) else {
            return;
        };
        if let Ok(mut a) = Array::<&mut MapData, t::BsTailWindow>::try_from(map) {
            if a.set(0, t::BsTailWindow { end_ns: mono, ..w }, 0).is_ok() {
                self.detach_window_programs();
            }
        }
    }

    /// Detaches the programs that only count in the window, once it has
    /// ended: attached, each ran on every guest and host fault for the
    /// rest of the target's life only to find the window closed (a classic
    /// tracepoint's record built each time). `bs_tail_spte_all` stays: the
    /// count over the VM's life. A mark read later that ends the window
    /// earlier still can (the window's counts are kept in its maps).
    fn detach_window_programs(&mut self) {
        let bpf = &mut self.bpf;
        let keep_runs = self.setup.bpf_stats.is_some();
        for p in self
            .setup
            .programs
            .iter_mut()
            .filter(|p| p.spec.collector == bpf::CollectorKind::Tail && p.is_attached())
        {
            // The kernel's run statistics go with the program: kept first.
            let runs = keep_runs
                .then(|| super::sources::RunStats::of(bpf, p.spec.program))
                .flatten();
            let unloaded = match bpf.program_mut(p.spec.program) {
                Some(aya::programs::Program::TracePoint(prog)) => prog.unload(),
                Some(aya::programs::Program::RawTracePoint(prog)) => prog.unload(),
                _ => continue,
            };
            // One that cannot be detached runs on (its early return is all
            // it costs); one detached already is no longer loaded.
            if unloaded.is_ok() {
                p.detail = DETACHED.into();
                if let Some(runs) = runs {
                    self.setup.detached_runs.insert(p.spec.program, runs);
                }
            }
        }
    }

    /// The profile's `fault_tail`, when the tail programs run; adds what
    /// they counted to their sources' events.
    pub(super) fn fault_tail(
        &self,
        marks: &[Mark],
        events: &mut [u64; bpf::SOURCE_COUNT],
    ) -> Option<FaultTail> {
        if !self.attached(Source::TailSpte) {
            return None;
        }
        let tot = |i: usize| percpu_sum(&self.bpf, TOTALS_MAP, i as u32);
        events[Source::TailSpteAll as usize] += tot(total::GUEST_ALL);
        events[Source::TailSpte as usize] += tot(total::GUEST);
        events[Source::TailExcUser as usize] += tot(total::EXC_USER);
        events[Source::TailExcKernel as usize] += tot(total::EXC_KERNEL);
        let start = self.tail_start();
        let window = self.tail_window().unwrap_or_default();
        let to_t = |mono: u64| self.clock.ktime_to_t(mono);
        let start_ns = start.map(|s| to_t(s.start_ns));
        let end_ns = (window.end_ns != 0).then(|| to_t(window.end_ns));
        let end_mark = end_ns.and_then(|e| {
            marks
                .iter()
                .find(|m| m.t_ns == e && m.source != MarkSource::Vmm)
                .map(|m| m.name.clone())
        });
        let first_kvm_run_ns = marks
            .iter()
            .find(|m| m.source == MarkSource::Vmm && m.name == FIRST_KVM_RUN)
            .map(|m| m.t_ns);
        let by_kind = self.tail_kinds();
        let pages = tot(total::PAGES);
        let kvm = self.sampler.kvm_stats.faults_of(None);
        Some(FaultTail {
            restore: None,
            window: TailWindow {
                start_ns,
                first_kvm_run_ns,
                end_ns,
                end_mark,
            },
            bucket_ns: BUCKET_NS,
            guest_faults: tot(total::GUEST),
            guest_faults_total: self
                .attached(Source::TailSpteAll)
                .then(|| tot(total::GUEST_ALL)),
            kvm_pf_fixed: kvm.map(|k| k[0]),
            kvm_pf_taken: kvm.map(|k| k[1]),
            wait_ns: by_kind.iter().map(|k| k.wait_ns).sum(),
            by_kind,
            host: TailHost {
                minor_in_guest_faults: tot(total::MINOR_IN_FAULT),
                major_in_guest_faults: tot(total::MAJOR_IN_FAULT),
                minor_other: tot(total::MINOR_OTHER),
                major_other: tot(total::MAJOR_OTHER),
                exceptions_user: tot(total::EXC_USER),
                exceptions_kernel: tot(total::EXC_KERNEL),
                threads: self.tail_threads(),
            },
            curve: curve(&hash_entries(&self.bpf, "tail_curve"), BUCKET_NS),
            regions: regions(&array_entries(&self.bpf, "tail_regions")),
            sites: sites(&hash_entries(&self.bpf, "tail_sites")),
            working_set: WorkingSet {
                pages,
                bytes: pages * PAGE_BYTES,
                uncounted: tot(total::PAGES_BEYOND),
            },
        })
    }

    fn tail_kinds(&self) -> Vec<TailKind> {
        kinds(&array_entries::<BsHist>(&self.bpf, "tail_latency"))
    }

    fn tail_threads(&self) -> Vec<TailThread> {
        let mut out: Vec<TailThread> =
            hash_entries::<u32, t::BsTailThread>(&self.bpf, "tail_threads")
                .into_iter()
                .map(|(tid, th)| TailThread {
                    tid,
                    minflt: th.last_min.saturating_sub(th.first_min),
                    majflt: th.last_maj.saturating_sub(th.first_maj),
                })
                .collect();
        out.sort_by_key(|th| th.tid);
        out
    }
}

/// Latency histograms per kind (entry: the kind), in [`KINDS`] order.
fn kinds(entries: &[(u32, BsHist)]) -> Vec<TailKind> {
    let mut slots = vec![vec![0u64; bpf::HIST_SLOTS]; t::KINDS];
    let mut sums = [(0u64, 0u64); t::KINDS];
    for (kind, h) in entries {
        let i = *kind as usize;
        if i >= t::KINDS {
            continue;
        }
        hist::add_slots(&mut slots[i], &h.slots);
        sums[i].0 += h.count;
        sums[i].1 += h.total_ns;
    }
    (0..t::KINDS)
        .filter(|&i| sums[i].0 > 0)
        .map(|i| TailKind {
            kind: KINDS[i].to_string(),
            count: sums[i].0,
            wait_ns: sums[i].1,
            hist: hist::buckets(&slots[i]),
        })
        .collect()
}

/// The curve: one bucket per time bucket with faults, in time order.
fn curve(entries: &[(t::BsTailCurveKey, u64)], bucket_ns: u64) -> Vec<TailBucket> {
    let mut by: BTreeMap<u32, [u64; 5]> = BTreeMap::new();
    for (k, n) in entries {
        if (k.kind as usize) < t::KINDS {
            by.entry(k.bucket).or_default()[k.kind as usize] += n;
        }
    }
    by.into_iter()
        .map(|(b, counts)| TailBucket {
            t_ns: u64::from(b) * bucket_ns,
            counts,
        })
        .collect()
}

/// Faults per region, from the array's entries (region * kinds + kind),
/// most first.
fn regions(entries: &[(u32, t::BsTailWhere)]) -> Vec<TailWhere> {
    let kinds = t::KINDS as u32;
    places(
        entries
            .iter()
            .filter(|(_, v)| v.count > 0)
            .map(|(i, v)| (i % kinds, u64::from(i / kinds), v)),
        true,
    )
}

/// Faults per exit site (guest RIP), most first.
fn sites(entries: &[(t::BsTailWhereKey, t::BsTailWhere)]) -> Vec<TailWhere> {
    places(entries.iter().map(|(k, v)| (k.kind, k.at, v)), false)
}

/// Faults per place (region index or site), from (kind, place, counts),
/// most first.
fn places<'a>(
    entries: impl IntoIterator<Item = (u32, u64, &'a t::BsTailWhere)>,
    regions: bool,
) -> Vec<TailWhere> {
    let mut by: BTreeMap<u64, TailWhere> = BTreeMap::new();
    for (kind, at, v) in entries {
        let w = by.entry(at).or_insert_with(|| TailWhere {
            gpa: regions.then_some(at << t::REGION_SHIFT),
            rip: (!regions).then_some(at),
            ..Default::default()
        });
        w.faults += v.count;
        if kind != 0 {
            w.host_faults += v.count;
        }
        w.wait_ns += v.total_ns;
    }
    let mut out: Vec<TailWhere> = by.into_values().collect();
    out.sort_by(|a, b| b.faults.cmp(&a.faults).then(a.gpa.cmp(&b.gpa)));
    out
}

/// A mark the profiler derives from what the guest does, not one the
/// guest writes to say where it is: the first port I/O of its kernel (a
/// restored kernel makes one at once: its first serial write), a port 0x80
/// write of 0x00 or one its kernel's code makes below the marks' range
/// (`io_delay`). Such a mark does not end a restore's window.
fn derived(mark: &Mark) -> bool {
    if mark.name.starts_with(crate::phases::FIRST_KERNEL_PIO) {
        return true;
    }
    mark.source == MarkSource::DebugPort
        && mark.value.is_some_and(|v| {
            v == 0
                || u8::try_from(v).is_ok_and(|v| crate::phases::io_delay_write(v, mark.guest_rip))
        })
}

/// Whether `mark` (at `mono_ns`, CLOCK_MONOTONIC) ends the window that
/// opened at `start`: the guest's first mark after the window opened, of
/// the process that opened it; not the VMM's own, nor a derived one.
fn ends_window(mark: &Mark, mono_ns: u64, start: &t::BsTailStart) -> bool {
    mark.source != MarkSource::Vmm
        && !derived(mark)
        && mono_ns >= start.start_ns
        && mark.tgid.is_none_or(|p| p == start.tgid)
}

#[cfg(test)]
mod tests {
    use super::super::maps::hist_of;
    use super::*;

    #[test]
    fn the_maps_are_sized_for_the_guest() {
        let sizes = |m, th| map_sizes(m, th).map(|(_, n)| n);
        let names = map_sizes(None, None).map(|(name, _)| name);
        assert_eq!(names, ["tail_pages", "tail_regions", "tail_threads"]);
        // 256 MiB: a bit for each page of guest-physical space up to 4
        // GiB above its RAM, 64 to an entry; over the same space, 2,176
        // regions of 2 MiB, each with 5 kinds.
        let mib = 1u64 << 20;
        let words = |bytes: u64| (bytes / 4096 / 64) as u32;
        assert_eq!(
            sizes(Some(256 * mib), Some(20)),
            [words((256 + 4096) * mib), 2176 * 5, 64]
        );
        assert_eq!(sizes(Some(256 * mib), Some(20))[0], 17_408);
        assert_eq!(sizes(Some(mib), Some(1)), [words(4097 * mib), 2048 * 5, 64]);
        // The largest guests are capped (1 TiB of space: 4 Mi entries), as
        // are the most threads.
        assert_eq!(
            sizes(Some(1 << 40), Some(100_000)),
            [1 << 22, REGIONS_MOST, THREADS_MOST]
        );
        assert_eq!(sizes(Some(u64::MAX), Some(u32::MAX))[0], 1 << 22);
        // Unknown: 64 GiB of space.
        assert_eq!(sizes(None, None), [1 << 18, 32768 * 5, THREADS_MOST]);
    }

    #[test]
    fn derived_marks_do_not_end_a_restores_window() {
        let first = crate::phases::first_kernel_pio_mark(0x3f9, 5, 1, 0xffff_ffff_8100_0000);
        assert!(derived(&first));
        let mark = |value| Mark {
            name: "port 0x80".into(),
            source: MarkSource::DebugPort,
            t_ns: 9,
            value: Some(value),
            tgid: Some(1),
            guest_rip: None,
        };
        assert!(derived(&mark(0)));
        assert!(!derived(&mark(0x62)));
        let serial = Mark {
            name: "serial: run init".into(),
            source: MarkSource::Serial,
            value: None,
            ..mark(0)
        };
        assert!(!derived(&serial));
    }

    /// A lab restore of the restore guest (testdata/lab-restore-marks.json):
    /// after its first `KVM_RUN` the guest's kernel makes its first port
    /// I/O (a serial write), and only then, its buffer read back, the guest
    /// marks 0x62: the window ends there, as the timeline's does, also
    /// with io_delay writes of its kernel in between.
    #[test]
    fn a_lab_restores_window_ends_at_the_guests_next_mark() {
        #[derive(serde::Deserialize)]
        struct Fixture {
            window_start_ns: u64,
            marks: Vec<Mark>,
        }
        let f: Fixture =
            serde_json::from_str(include_str!("testdata/lab-restore-marks.json")).unwrap();
        let tgid = f.marks[0].tgid.unwrap();
        let start = t::BsTailStart {
            tgid,
            pad: 0,
            start_ns: f.window_start_ns,
        };
        let end = |marks: &[Mark]| {
            marks
                .iter()
                .find(|m| ends_window(m, m.t_ns, &start))
                .map(|m| m.name.clone())
        };
        let next = Some("port 0x80: userspace 0x62".to_string());
        assert_eq!(end(&f.marks), next);
        // The first guest mark after the window opened is the derived one.
        let first = f
            .marks
            .iter()
            .find(|m| m.source != MarkSource::Vmm && m.t_ns >= f.window_start_ns);
        assert!(first
            .unwrap()
            .name
            .starts_with(crate::phases::FIRST_KERNEL_PIO));
        // The kernel's io_delay writes (0x00, and any value below the
        // marks' range from kernel code) in the window do not end it.
        let mut marks = f.marks.clone();
        let rip = Some(0xffff_ffff_8100_0000);
        for (i, v) in [(0u8, 1u64), (0x20, 2)] {
            marks.push(Mark {
                name: crate::phases::debug_port_write_name(i, rip),
                source: MarkSource::DebugPort,
                t_ns: f.window_start_ns + v,
                value: Some(u64::from(i)),
                tgid: Some(tgid),
                guest_rip: rip,
            });
        }
        marks.sort_by_key(|m| m.t_ns);
        assert_eq!(end(&marks), next);
        // Another process's mark, or one before the window, does not.
        let mark_62 = marks.iter().find(|m| m.value == Some(0x62)).unwrap();
        assert!(ends_window(mark_62, mark_62.t_ns, &start));
        let other = Mark {
            tgid: Some(tgid + 1),
            ..mark_62.clone()
        };
        assert!(!ends_window(&other, other.t_ns, &start));
        assert!(!ends_window(mark_62, f.window_start_ns - 1, &start));
    }

    #[test]
    fn kinds_keep_the_order_and_leave_out_empty_and_unknown_ones() {
        let k = kinds(&[
            (0, hist_of(&[1_000, 2_000, 3_000])),
            (1, hist_of(&[])),
            (3, hist_of(&[5_000_000])),
            (9, hist_of(&[1])),
        ]);
        let names: Vec<&str> = k.iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(names, ["resident", "major_anon"]);
        assert_eq!((k[0].count, k[0].wait_ns), (3, 6_000));
        let in_hist: u64 = k[0].hist.iter().map(|b| b.count).sum();
        assert_eq!(in_hist, 3);
    }

    #[test]
    fn regions_are_read_from_their_array_index() {
        let val = |count, total_ns| t::BsTailWhere { count, total_ns };
        let kinds = t::KINDS as u32;
        // Region 1 resident (2) and minor anonymous (3); region 5 resident
        // (9); the empty entries left out.
        let r = regions(&[
            (0, val(0, 0)),
            (kinds, val(2, 10)),
            (kinds + 1, val(3, 30)),
            (kinds + 2, val(0, 0)),
            (5 * kinds, val(9, 1)),
        ]);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].gpa, Some(5 << 21));
        assert_eq!(
            (r[1].gpa, r[1].faults, r[1].host_faults, r[1].wait_ns),
            (Some(1 << 21), 5, 3, 40)
        );
    }

    #[test]
    fn the_curve_is_in_time_order_by_kind() {
        let key = |bucket, kind| t::BsTailCurveKey {
            tgid: 1,
            bucket,
            kind,
            pad: 0,
        };
        let c = curve(&[(key(3, 1), 4), (key(0, 0), 2), (key(3, 0), 1)], 1_000);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].t_ns, c[0].counts), (0, [2, 0, 0, 0, 0]));
        assert_eq!((c[1].t_ns, c[1].total(), c[1].host()), (3_000, 5, 4));
    }

    #[test]
    fn places_add_kinds_up_most_first() {
        let key = |kind, at| t::BsTailWhereKey { tgid: 1, kind, at };
        let val = |count, total_ns| t::BsTailWhere { count, total_ns };
        let (a, b, c) = (val(2, 10), val(3, 30), val(9, 1));
        let r = places([(0, 1, &a), (1, 1, &b), (0, 5, &c)], true);
        assert_eq!(r[0].gpa, Some(5 << 21));
        assert_eq!((r[1].faults, r[1].host_faults, r[1].wait_ns), (5, 3, 40));
        let s = sites(&[(key(0, 0xffff_8000), val(1, 1))]);
        assert_eq!((s[0].rip, s[0].gpa), (Some(0xffff_8000), None));
    }
}
