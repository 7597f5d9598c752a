//! The page-fault tail of a restore (`Profile::fault_tail`,
//! docs/profile-schema.md): from the restored guest's first `KVM_RUN` to its
//! next mark, every guest fault KVM served and what serving it cost on the
//! host, as a curve over time, by guest-physical region and exit site, with
//! a service-time histogram per kind and the working set's size.

use serde::{Deserialize, Serialize};

use crate::hist::HistBucket;
use crate::human::{group_digits, human_ns, human_size};

/// The kinds of a guest fault, by what its service took on the host, in
/// the order of [`TailBucket::counts`].
pub const KINDS: [&str; 5] = [
    "resident",
    "minor_anon",
    "minor_file",
    "major_anon",
    "major_file",
];

/// The guest page size the working set is counted in.
pub const PAGE_BYTES: u64 = 4096;

/// The size of a guest-physical region of `regions` (2 MiB).
pub const REGION_BYTES: u64 = 2 << 20;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultTail {
    /// What restored the guest, when the profiler recognised it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreOf>,
    pub window: TailWindow,
    /// Width of the curve's buckets.
    pub bucket_ns: u64,
    /// Guest faults KVM served in the window.
    pub guest_faults: u64,
    /// Guest faults KVM served since the programs attached, window or not
    /// (the interval of KVM's own statistics, for cross-checks); counted
    /// only with `--collect tail-total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_faults_total: Option<u64>,
    /// KVM's own `pf_fixed` and `pf_taken` statistics of the same VMs over
    /// the same interval (debugfs, read when each VM ended or when the
    /// profile was built); None where debugfs is unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_pf_fixed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_pf_taken: Option<u64>,
    /// Summed service time of the window's guest faults (vCPU time spent
    /// waiting for memory).
    pub wait_ns: u64,
    /// Per kind (in [`KINDS`] order, kinds with faults only).
    pub by_kind: Vec<TailKind>,
    pub host: TailHost,
    /// The fault-rate curve: one entry per bucket with faults, by kind.
    pub curve: Vec<TailBucket>,
    /// Faults per 2 MiB guest-physical region, most first.
    pub regions: Vec<TailWhere>,
    /// Faults per guest exit site (VMX/SVM with exit sites), most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<TailWhere>,
    pub working_set: WorkingSet,
}

/// The restore the profiler recognised from the command line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RestoreOf {
    /// `bootscope`, `cloud-hypervisor` or `firecracker`.
    pub vmm: String,
    /// The memory restore mode asked for, when the command line says
    /// (`copy`, `mmap`, `ondemand`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mode: Option<String>,
}

/// The window on the profile's clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailWindow {
    /// The first guest fault (the guest runs from its first `KVM_RUN`,
    /// at most one fault earlier); None: no fault yet.
    pub start_ns: Option<u64>,
    /// The VMM's `first KVM_RUN` mark, when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kvm_run_ns: Option<u64>,
    /// The guest's next mark, which closed the window; None: still open.
    pub end_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_mark: Option<String>,
}

impl TailWindow {
    /// Resume to ready: the first `KVM_RUN` (or first fault) to the mark.
    pub fn duration_ns(&self) -> Option<u64> {
        let start = self.first_kvm_run_ns.or(self.start_ns)?;
        Some(self.end_ns?.saturating_sub(start))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailKind {
    pub kind: String,
    pub count: u64,
    pub wait_ns: u64,
    /// Service time, log2 buckets.
    pub hist: Vec<HistBucket>,
}

/// Host page faults of the VM's threads in the window, from the kernel's
/// own per-thread counters (`min_flt`/`maj_flt`, what
/// `/proc/PID/task/TID/stat` reports).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailHost {
    /// Taken by KVM while serving guest faults (get_user_pages on guest
    /// memory).
    pub minor_in_guest_faults: u64,
    pub major_in_guest_faults: u64,
    /// Taken by the VM's threads between guest faults.
    pub minor_other: u64,
    pub major_other: u64,
    /// Host exceptions of the VM's threads in the window (user, kernel mode).
    pub exceptions_user: u64,
    pub exceptions_kernel: u64,
    /// Each thread's counters over the window: its first event to its last.
    pub threads: Vec<TailThread>,
}

impl TailHost {
    pub fn minor(&self) -> u64 {
        self.minor_in_guest_faults + self.minor_other
    }
    pub fn major(&self) -> u64 {
        self.major_in_guest_faults + self.major_other
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailThread {
    pub tid: u32,
    /// The kernel's counters' growth from the thread's first event in the
    /// window to its last.
    pub minflt: u64,
    pub majflt: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailBucket {
    /// Bucket start, from the window's start.
    pub t_ns: u64,
    /// Faults per kind, in [`KINDS`] order.
    pub counts: [u64; 5],
}

impl TailBucket {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
    /// Faults that needed a host fault (every kind but resident).
    pub fn host(&self) -> u64 {
        self.total() - self.counts[0]
    }
}

/// Faults at one place: a region (`gpa`, 2 MiB) or an exit site (`rip`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailWhere {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpa: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rip: Option<u64>,
    /// What is there: the VMM's region label, or the guest function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub faults: u64,
    /// Of them, faults that needed a host fault.
    pub host_faults: u64,
    pub wait_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkingSet {
    /// Distinct guest pages faulted in the window.
    pub pages: u64,
    pub bytes: u64,
    /// Faults on pages above the in-kernel set's range (not in `pages`).
    #[serde(default)]
    pub uncounted: u64,
}

impl FaultTail {
    /// The summary's line: how much of resume-to-ready was spent waiting
    /// for memory.
    pub fn summary_line(&self) -> String {
        let mut ws = format!(
            "working set {} pages ({})",
            group_digits(self.working_set.pages),
            human_size(self.working_set.bytes)
        );
        if self.working_set.uncounted > 0 {
            ws += &format!(
                " and more: {} faults on pages above the set's range",
                group_digits(self.working_set.uncounted)
            );
        }
        let faults = format!(
            "{} guest faults ({} host minor, {} major)",
            group_digits(self.guest_faults),
            group_digits(self.host.minor_in_guest_faults),
            group_digits(self.host.major_in_guest_faults)
        );
        match self.window.duration_ns() {
            Some(d) if d > 0 => format!(
                "fault tail: {:.1} % of resume-to-ready ({}) waiting for memory ({} of vCPU time); {faults}; {ws}",
                100.0 * self.wait_ns as f64 / d as f64,
                human_ns(d),
                human_ns(self.wait_ns),
            ),
            _ if self.window.start_ns.is_none() => {
                "fault tail: no guest fault seen after the restore".to_string()
            }
            _ => format!(
                "fault tail: window still open (no guest mark after the restore): {} waiting for memory; {faults}; {ws}",
                human_ns(self.wait_ns)
            ),
        }
    }
}

impl TailWhere {
    /// What to call the place: its label, else its address.
    pub fn place(&self) -> String {
        match (&self.label, self.rip, self.gpa) {
            (Some(l), _, _) => l.clone(),
            (None, Some(rip), _) => format!("0x{rip:x}"),
            (None, None, Some(gpa)) => format!("gpa 0x{gpa:x}"),
            (None, None, None) => "?".into(),
        }
    }
}

impl FaultTail {
    /// The summary's line on the guest code that faulted most in the
    /// window (its `n` first sites, most first; `sites` is sorted so):
    /// faults and the vCPU time they waited. None without sites (they need
    /// the exits collector's exit sites: VMX/SVM, `--exit-sites`).
    pub fn top_sites_line(&self, n: usize) -> Option<String> {
        if self.sites.is_empty() {
            return None;
        }
        let shown: Vec<String> = self
            .sites
            .iter()
            .take(n)
            .map(|s| {
                format!(
                    "{} {} ({})",
                    s.place(),
                    group_digits(s.faults),
                    human_ns(s.wait_ns)
                )
            })
            .collect();
        let rest = self.sites.len().saturating_sub(n);
        let more = if rest > 0 {
            format!("; {} more sites", group_digits(rest as u64))
        } else {
            String::new()
        };
        Some(format!(
            "fault tail by guest code: {}{more}",
            shown.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_sites_line_names_the_most_faulting_code_first() {
        let site = |label: Option<&str>, rip, faults, wait_ns| TailWhere {
            rip: Some(rip),
            label: label.map(String::from),
            faults,
            wait_ns,
            ..Default::default()
        };
        let mut t = FaultTail::default();
        assert_eq!(t.top_sites_line(3), None);
        t.sites = vec![
            site(Some("copy_user_generic+0x1a"), 1, 15_000, 1_200_000_000),
            site(None, 0xffff_ffff_8100_1234, 300, 2_000_000),
            site(Some("filemap_read+0x40"), 3, 20, 10_000),
        ];
        let line = t.top_sites_line(2).unwrap();
        assert_eq!(
            line,
            "fault tail by guest code: copy_user_generic+0x1a 15,000 (1.20 s), \
             0xffffffff81001234 300 (2.0 ms); 1 more sites"
        );
        assert!(!t.top_sites_line(3).unwrap().contains("more"));
    }

    #[test]
    fn the_summary_line_says_the_share_spent_waiting() {
        let mut t = FaultTail {
            guest_faults: 1200,
            wait_ns: 25_000_000,
            window: TailWindow {
                start_ns: Some(1_000_000),
                first_kvm_run_ns: Some(900_000),
                end_ns: Some(100_900_000),
                end_mark: Some("port 0x80: 0x90".into()),
            },
            working_set: WorkingSet {
                pages: 1000,
                bytes: 1000 * PAGE_BYTES,
                uncounted: 0,
            },
            ..Default::default()
        };
        t.host.minor_in_guest_faults = 900;
        let line = t.summary_line();
        assert!(
            line.starts_with("fault tail: 25.0 % of resume-to-ready (100"),
            "{line}"
        );
        assert!(
            line.contains("1,200 guest faults (900 host minor, 0 major)"),
            "{line}"
        );
        assert!(line.contains("1,000 pages"), "{line}");
        assert!(!line.contains("no room"), "{line}");
        t.working_set.uncounted = 3_000;
        let line = t.summary_line();
        assert!(
            line.contains("and more: 3,000 faults on pages above the set's range"),
            "{line}"
        );
        t.window.end_ns = None;
        assert!(t.summary_line().contains("still open"));
        t.window.start_ns = None;
        t.window.first_kvm_run_ns = None;
        assert!(t.summary_line().contains("no guest fault"));
    }

    #[test]
    fn buckets_split_host_faults_from_resident_ones() {
        let b = TailBucket {
            t_ns: 0,
            counts: [5, 3, 2, 1, 0],
        };
        assert_eq!((b.total(), b.host()), (11, 6));
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(v["counts"][1], 3);
    }
}
