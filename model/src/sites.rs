//! Exit sites: which guest code made the exits (`exits.sites` in a
//! profile, collected with `--exit-sites`), and the views every consumer
//! shares: the top functions of a reason, the folded stacks, the totals.
//!
//! A site is one guest RIP of one reason, vCPU and phase. The sites of a
//! reason always add up to that reason's count: exits the in-kernel map had
//! no room for are one row with no RIP, the reason's unattributed rest.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The name of the rest of a reason no site could take (a full map).
pub const UNATTRIBUTED: &str = "[unattributed]";
/// The name of every guest address in the lower canonical half: guest
/// user space, and code that runs before the kernel maps itself high (the
/// bzImage decompressor, the first instructions of a PVH entry).
pub const GUEST_USER: &str = "[guest user]";
/// Guest addresses at or above this are kernel addresses (x86-64's upper
/// canonical half).
pub const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

/// x86-64 Linux's module area, `[MODULES_VADDR, MODULES_END)`: loaded
/// modules' code lives here, above the (randomized) kernel image's 1 GiB.
pub const MODULE_SPACE: std::ops::Range<u64> = 0xffff_ffff_c000_0000..0xffff_ffff_ff00_0000;
/// What follows the address of a site in module space that no symbol
/// names.
pub const MODULE_TAG: &str = "[module]";

/// True for a guest address in the kernel's module area.
pub fn in_module_space(rip: u64) -> bool {
    MODULE_SPACE.contains(&rip)
}

/// Exits by site, nested page faults by guest-physical range, and how the
/// sites' addresses were named.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitSites {
    pub sites: Vec<ExitSite>,
    /// SVM nested page faults by 2 MiB guest-physical range.
    #[serde(default)]
    pub npf_ranges: Vec<NpfRange>,
    /// Exits the site map had no room for (in the unattributed rows).
    #[serde(default)]
    pub overflows: u64,
    /// How the addresses were named; absent when they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<SiteSymbols>,
}

/// Exits of one reason at one guest RIP, on one vCPU, in one phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitSite {
    pub reason: String,
    pub vcpu: u32,
    pub phase: String,
    /// The guest RIP of the exits; absent for the reason's unattributed
    /// rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rip: Option<u64>,
    pub count: u64,
    /// Of `count`, the exits whose latency was measured.
    pub timed: u64,
    /// Sum of their latencies.
    pub latency_total_ns: u64,
    /// The guest function (`[guest user]` for user-space addresses);
    /// absent when not symbolized or not found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The RIP's offset into `function`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The guest kernel module whose `function` it is (`virtio_blk`);
    /// absent for the kernel image's own functions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
}

impl ExitSite {
    /// The function (`function [module]` for a module's, as perf shows
    /// them), `[guest user]`, `[unattributed]` or the RIP in hex (followed
    /// by `[module]` in the kernel's module area): what flame graphs and
    /// pprof group by.
    pub fn function_name(&self) -> String {
        match (self.rip, &self.function) {
            (None, _) => UNATTRIBUTED.into(),
            (_, Some(f)) => match &self.module {
                Some(m) => format!("{f} [{m}]"),
                None => f.clone(),
            },
            (Some(rip), None) if rip < KERNEL_HALF => GUEST_USER.into(),
            (Some(rip), None) if in_module_space(rip) => format!("{rip:#x} {MODULE_TAG}"),
            (Some(rip), None) => format!("{rip:#x}"),
        }
    }

    /// `function+0xoff` (`function+0xoff [module]` for a module's), or
    /// what [`Self::function_name`] says.
    pub fn label(&self) -> String {
        match (&self.function, self.offset, &self.module) {
            (Some(f), Some(off), Some(m)) => format!("{f}+{off:#x} [{m}]"),
            (Some(f), Some(off), None) if f != GUEST_USER => format!("{f}+{off:#x}"),
            _ => self.function_name(),
        }
    }
}

/// SVM nested page faults in one guest-physical range and phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NpfRange {
    pub gpa_start: u64,
    pub gpa_end: u64,
    pub phase: String,
    pub count: u64,
    pub timed: u64,
    pub latency_total_ns: u64,
    /// What the range holds (`kernel image`, `initrd`, `boot page tables,
    /// RAM`, ...): the regions it overlaps, from the layout of bootscope's
    /// own VMM; absent for other VMMs, whose layout is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// A named piece of guest-physical memory, as a VMM laid it out (the
/// timeline's `guest.regions`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestRegion {
    pub name: String,
    pub start: u64,
    /// First byte past the region.
    pub end: u64,
}

/// Regions that only say what is around the placed things.
const BACKGROUND: [&str; 2] = ["RAM", "MMIO gap"];

/// What `[start, end)` holds: the names of the placed regions it overlaps,
/// in address order, then the background (`RAM`, `MMIO gap`) if they do
/// not cover it all; `outside guest memory` when no region overlaps.
pub fn region_label(regions: &[GuestRegion], start: u64, end: u64) -> String {
    let overlapping = |g: &&GuestRegion| g.start < end && start < g.end;
    let mut names: Vec<&str> = Vec::new();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for g in regions.iter().filter(overlapping) {
        if !BACKGROUND.contains(&g.name.as_str()) {
            if !names.contains(&g.name.as_str()) {
                names.push(&g.name);
            }
            spans.push((g.start.max(start), g.end.min(end)));
        }
    }
    spans.sort_unstable();
    let mut covered_to = start;
    for (a, b) in spans {
        if a > covered_to {
            break;
        }
        covered_to = covered_to.max(b);
    }
    if covered_to < end {
        for bg in BACKGROUND {
            if regions.iter().filter(overlapping).any(|g| g.name == bg) {
                names.push(bg);
            }
        }
    }
    if names.is_empty() {
        "outside guest memory".into()
    } else {
        names.join(", ")
    }
}

/// The name of a virtio-mmio register at `offset` in its window.
fn virtio_register(offset: u64) -> &'static str {
    match offset {
        0x50 => "notify",
        0x60 => "interrupt status",
        0x64 => "interrupt ack",
        0x70 => "status",
        o if o >= 0x100 => "config",
        0x00..=0x0c => "identification",
        0x10..=0x24 => "features",
        _ => "queue set-up",
    }
}

/// What is at guest-physical address `gpa`: the smallest placed region
/// holding it; in a virtio device's window (`virtio-blk0 (MMIO)`) the
/// device and the register (`virtio-blk0 notify`).
pub fn mmio_label(regions: &[GuestRegion], gpa: u64) -> Option<String> {
    let r = regions
        .iter()
        .filter(|g| g.start <= gpa && gpa < g.end && !BACKGROUND.contains(&g.name.as_str()))
        .min_by_key(|g| g.end - g.start)?;
    Some(match r.name.strip_suffix(" (MMIO)") {
        Some(dev) if dev.starts_with("virtio-") => {
            format!("{dev} {}", virtio_register(gpa - r.start))
        }
        _ => r.name.clone(),
    })
}

/// How the sites were symbolized.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteSymbols {
    /// What the symbols came from (`kallsyms recovered from
    /// /boot/vmlinuz-6.1.0-56-amd64`, `System.map FILE`, ...).
    pub source: String,
    /// The guest kernel's KASLR slide (runtime minus link-time address),
    /// when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kaslr_offset: Option<u64>,
    /// How the slide was found, or why it is unknown.
    pub kaslr: String,
    /// Kernel-half sites named / left as hex.
    pub resolved: u64,
    pub unresolved: u64,
    /// Of the kernel-half sites, those in the module area (not counted in
    /// `resolved` or `unresolved`: the kernel image's symbols do not cover
    /// them).
    #[serde(default)]
    pub in_modules: u64,
    /// Of those, the ones named `function [module]` from the guest's
    /// module list (the rest stay hex, tagged `[module]`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub in_modules_named: u64,
    /// The guest kernel's loaded modules, as read from its memory after
    /// the run (bootscope's own VMM only): name, core text, symbols.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<crate::modules::GuestModule>,
    /// What the reader must know (an unknown slide, a table that looks
    /// like another kernel's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One row of a per-reason ranking.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteTotal {
    pub name: String,
    pub count: u64,
    pub timed: u64,
    pub latency_total_ns: u64,
}

impl SiteTotal {
    /// Mean latency of the timed exits (0 when none was timed).
    pub fn mean_ns(&self) -> u64 {
        self.latency_total_ns.checked_div(self.timed).unwrap_or(0)
    }
}

impl ExitSites {
    /// Labels every nested page fault range with what the VMM placed in it.
    pub fn label_npf_ranges(&mut self, regions: &[GuestRegion]) {
        for r in &mut self.npf_ranges {
            r.label = Some(region_label(regions, r.gpa_start, r.gpa_end));
        }
    }

    /// Nested page faults by range (across phases), most first: range,
    /// label, count.
    pub fn npf_by_range(&self) -> Vec<(u64, u64, Option<String>, u64)> {
        let mut by: BTreeMap<(u64, u64), (Option<String>, u64)> = BTreeMap::new();
        for r in &self.npf_ranges {
            let e = by.entry((r.gpa_start, r.gpa_end)).or_default();
            e.0 = e.0.take().or_else(|| r.label.clone());
            e.1 += r.count;
        }
        let mut v: Vec<_> = by
            .into_iter()
            .map(|((a, b), (l, n))| (a, b, l, n))
            .collect();
        v.sort_by(|x, y| y.3.cmp(&x.3).then(x.0.cmp(&y.0)));
        v
    }

    /// Each reason's exits, sites added up (the same number as the reason's
    /// count in `exits.by_reason`).
    pub fn reason_totals(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for s in &self.sites {
            *out.entry(s.reason.clone()).or_default() += s.count;
        }
        out
    }

    /// The sites of `reason` added up by `key` (across vCPUs and phases),
    /// most exits first.
    pub fn ranked(&self, reason: &str, key: impl Fn(&ExitSite) -> String) -> Vec<SiteTotal> {
        let mut by: BTreeMap<String, SiteTotal> = BTreeMap::new();
        for s in self.sites.iter().filter(|s| s.reason == reason) {
            let name = key(s);
            let t = by.entry(name.clone()).or_insert_with(|| SiteTotal {
                name,
                ..Default::default()
            });
            t.count += s.count;
            t.timed += s.timed;
            t.latency_total_ns += s.latency_total_ns;
        }
        let mut v: Vec<SiteTotal> = by.into_values().collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
        v
    }

    /// The functions of `reason`, most exits first.
    pub fn top_functions(&self, reason: &str) -> Vec<SiteTotal> {
        self.ranked(reason, ExitSite::function_name)
    }

    /// The sites (`function+offset`) of `reason`, most exits first.
    pub fn top_sites(&self, reason: &str) -> Vec<SiteTotal> {
        self.ranked(reason, ExitSite::label)
    }

    /// `reason;function count` lines, one per reason and function, as
    /// flame graph tools read them (sorted, so equal profiles give equal
    /// text).
    pub fn folded(&self) -> String {
        let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
        for s in &self.sites {
            *by.entry((s.reason.clone(), s.function_name())).or_default() += s.count;
        }
        let mut out = String::new();
        for ((reason, function), n) in by {
            // Flame graph tools split frames at ';', the count at the last
            // space and lines at a newline; the names come from the guest,
            // so their control characters are shown escaped (the text rule).
            let clean = |t: &str| crate::text::printable(&t.replace([';', ' '], "_")).into_owned();
            out.push_str(&format!("{};{} {n}\n", clean(&reason), clean(&function)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(reason: &str, rip: Option<u64>, function: Option<&str>, count: u64) -> ExitSite {
        ExitSite {
            reason: reason.into(),
            vcpu: 0,
            phase: "kernel".into(),
            rip,
            count,
            timed: count,
            latency_total_ns: count * 100,
            function: function.map(Into::into),
            offset: function.map(|_| 0x1a),
            module: None,
        }
    }

    #[test]
    fn module_addresses_are_tagged() {
        let name = |rip| site("npf", Some(rip), None, 1).function_name();
        assert_eq!(name(0xffff_ffff_c05f_e0d3), "0xffffffffc05fe0d3 [module]");
        // The kernel image's own range and the direct map are not modules.
        assert_eq!(name(0xffff_ffff_8100_0000), "0xffffffff81000000");
        assert_eq!(name(0xffff_8880_0000_1000), "0xffff888000001000");
        assert_eq!(name(0xffff_ffff_ff00_0000), "0xffffffffff000000");
        assert_eq!(name(0x7fff_0000), GUEST_USER);
        let named = site("npf", Some(0xffff_ffff_c05f_e0d3), Some("virtblk_probe"), 1);
        assert_eq!(named.function_name(), "virtblk_probe");
        let in_module = ExitSite {
            module: Some("virtio_blk".into()),
            ..named
        };
        assert_eq!(in_module.function_name(), "virtblk_probe [virtio_blk]");
        assert_eq!(in_module.label(), "virtblk_probe+0x1a [virtio_blk]");
        let sites = ExitSites {
            sites: vec![in_module],
            ..Default::default()
        };
        assert_eq!(sites.folded(), "npf;virtblk_probe_[virtio_blk] 1\n");
    }

    #[test]
    fn mmio_addresses_named_by_device_and_register() {
        let r = |name: &str, start: u64, end: u64| GuestRegion {
            name: name.into(),
            start,
            end,
        };
        let regions = [
            r("MMIO gap", 0xc000_0000, 0x1_0000_0000),
            r("boot timer (MMIO)", 0xd000_0000, 0xd000_1000),
            r("virtio-blk0 (MMIO)", 0xd000_1000, 0xd000_2000),
        ];
        assert_eq!(
            mmio_label(&regions, 0xd000_1050).as_deref(),
            Some("virtio-blk0 notify")
        );
        assert_eq!(
            mmio_label(&regions, 0xd000_1060).as_deref(),
            Some("virtio-blk0 interrupt status")
        );
        assert_eq!(
            mmio_label(&regions, 0xd000_1108).as_deref(),
            Some("virtio-blk0 config")
        );
        assert_eq!(
            mmio_label(&regions, 0xd000_0000).as_deref(),
            Some("boot timer (MMIO)")
        );
        assert_eq!(mmio_label(&regions, 0xd100_0000), None, "the gap alone");
    }

    #[test]
    fn npf_ranges_labelled_by_the_regions_they_overlap() {
        let g = |name: &str, start: u64, end: u64| GuestRegion {
            name: name.into(),
            start,
            end,
        };
        const M: u64 = 1 << 20;
        let regions = [
            g("RAM", 0, 256 * M),
            g("boot page tables", 0x9000, 0xf000),
            g("kernel image", 16 * M, 47 * M),
            g("initrd", 200 * M, 210 * M),
            g("MMIO gap", 3072 * M, 4096 * M),
            g("local APIC (MMIO)", 0xfee0_0000, 0xfee0_1000),
        ];
        let label = |a: u64| region_label(&regions, a, a + 2 * M);
        assert_eq!(label(0), "boot page tables, RAM");
        assert_eq!(label(16 * M), "kernel image");
        assert_eq!(label(46 * M), "kernel image, RAM");
        assert_eq!(label(208 * M), "initrd");
        assert_eq!(label(100 * M), "RAM");
        assert_eq!(label(0xfee0_0000), "local APIC (MMIO), MMIO gap");
        assert_eq!(label(8192 * M), "outside guest memory");
        let mut s = ExitSites {
            npf_ranges: vec![
                NpfRange {
                    gpa_start: 16 * M,
                    gpa_end: 18 * M,
                    phase: "a".into(),
                    count: 2,
                    ..Default::default()
                },
                NpfRange {
                    gpa_start: 0,
                    gpa_end: 2 * M,
                    phase: "a".into(),
                    count: 1,
                    ..Default::default()
                },
                NpfRange {
                    gpa_start: 16 * M,
                    gpa_end: 18 * M,
                    phase: "b".into(),
                    count: 3,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        s.label_npf_ranges(&regions);
        let by = s.npf_by_range();
        assert_eq!(by[0], (16 * M, 18 * M, Some("kernel image".into()), 5));
        assert_eq!(by[1].2.as_deref(), Some("boot page tables, RAM"));
    }

    #[test]
    fn sites_rank_by_function_and_fold() {
        let s = ExitSites {
            sites: vec![
                site("io", Some(0xffff_ffff_8100_0010), Some("io_serial_out"), 40),
                site("io", Some(0xffff_ffff_8100_0020), Some("io_serial_out"), 2),
                site("io", Some(0x40_1000), None, 3),
                site("io", None, None, 5),
                site("msr", Some(0xffff_ffff_8200_0000), None, 7),
            ],
            ..Default::default()
        };
        let top = s.top_functions("io");
        assert_eq!(top[0].name, "io_serial_out");
        assert_eq!((top[0].count, top[0].mean_ns()), (42, 100));
        assert_eq!(top[1].name, UNATTRIBUTED);
        assert_eq!(top[2].name, GUEST_USER);
        assert_eq!(s.top_sites("io")[0].name, "io_serial_out+0x1a");
        assert_eq!(s.reason_totals()["io"], 50);
        assert_eq!(
            s.folded(),
            "io;[guest_user] 3\nio;[unattributed] 5\nio;io_serial_out 42\nmsr;0xffffffff82000000 7\n"
        );
    }
}
