//! The timeline's `restore_memory` object: how a restored run's guest got
//! its memory from the snapshot's memory file, in the window from the
//! first `KVM_RUN` to the guest's next mark (docs/timeline-schema.md,
//! "Restore"): the working set the guest touched, what a prefetch of a
//! recorded working set covered, and in `uffd` mode every fault the
//! handler served with its service time.

use serde::{Deserialize, Serialize};

use crate::hist::HistBucket;
use crate::human::{group_digits, human_ns, human_size};

/// `restore_memory`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RestoreMemoryDoc {
    /// `copy`, `mmap` or `uffd`.
    pub mode: String,
    /// Base page size of the counts below, bytes (4096; 2 MiB with huge
    /// pages for what the handler and the prefetch moved).
    pub page_bytes: u64,
    /// The mark that ended the window: the guest's first mark after the
    /// first `KVM_RUN`, else `vmm: guest shutdown`.
    pub window_end: String,
    /// First `KVM_RUN` to `window_end`, ns.
    pub window_ns: u64,
    /// The pages the guest touched in the window (4 KiB pages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set: Option<WorkingSetDoc>,
    /// The prefetch of a recorded working set (`--prefetch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<PrefetchDoc>,
    /// The faults the userfaultfd handler served (`uffd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsDoc>,
    /// Pages the background prefault loaded after resume (`--prefault-rest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_pages: Option<u64>,
    /// Why the memory failed the run (the handler thread died), when it
    /// did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What was ignored (a working-set record that could not be used).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `restore_memory.working_set`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkingSetDoc {
    pub pages: u64,
    pub bytes: u64,
    /// Where it was recorded (`DIR/working-set`), when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
    /// How it was found: `faults` (uffd) or `pagemap` (mmap).
    pub source: String,
}

/// `restore_memory.prefetch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefetchDoc {
    /// Pages of the record loaded (before the first `KVM_RUN`, or while
    /// the guest ran with `background`).
    pub pages: u64,
    pub bytes: u64,
    /// Contiguous ranges it was loaded in.
    pub batches: u64,
    /// How long the load took, ns.
    pub ns: u64,
    /// Loaded from a thread while the guest ran (`uffd`), its faults
    /// served on demand meanwhile.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// Faults on recorded pages the background load had not reached yet,
    /// filled by the handler (not counted in `misses`). This and `raced`
    /// and `misses` (`uffd`) count 4 KiB pages: a fault on a huge page
    /// counts its pages, and is on a recorded page when the huge page
    /// holds one (the load rounds the record out to whole huge pages).
    pub late: u64,
    /// Faults on recorded pages the background load filled while the
    /// handler came to serve them: the guest waited for the load (not
    /// counted in `late` or `misses`).
    pub raced: u64,
    /// Times such a fault moved the background load to the faulting run.
    pub jumps: u64,
    /// The background load went first through the runs the guest touched
    /// first, in the record's first-touch order (`first_touched` of the
    /// working-set record), then in file order; false: in file order.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub touch_order: bool,
    /// Touched pages the prefetch had loaded: the pages of the window's
    /// working set found in the record. None where the host cannot tell
    /// which loaded pages the guest touched (no idle page tracking).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hits: Option<u64>,
    /// Touched pages outside the record (served on demand).
    pub misses: u64,
    /// Prefetched pages the guest never touched in the window (None as
    /// for `hits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waste: Option<u64>,
}

/// `restore_memory.faults`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultsDoc {
    /// Faults served in the window.
    pub count: u64,
    /// Of them, served from the file's data (`UFFDIO_COPY`).
    pub copied: u64,
    /// Of them, served as holes (`UFFDIO_ZEROPAGE`).
    pub zero: u64,
    /// Faults served over the whole run.
    pub run_count: u64,
    /// Sum of the service times in the window, ns: the time the guest
    /// waited for memory (at most the window per vCPU).
    pub wait_ns: u64,
    /// Service times in the window.
    #[serde(deserialize_with = "crate::hist::deserialize_buckets")]
    pub latency: Vec<HistBucket>,
}

impl RestoreMemoryDoc {
    /// The summary's one line: the working set, the prefetch's hits,
    /// misses and waste, and the time spent waiting for memory.
    pub fn summary_line(&self) -> String {
        let mut parts = vec![format!(
            "restore memory ({}): to {} in {}",
            self.mode,
            self.window_end,
            human_ns(self.window_ns)
        )];
        if let Some(w) = &self.working_set {
            parts.push(format!(
                "working set {} pages ({})",
                group_digits(w.pages),
                human_size(w.bytes)
            ));
        }
        if let Some(p) = &self.prefetch {
            let opt = |v: Option<u64>| v.map_or("?".to_string(), group_digits);
            parts.push(format!(
                "prefetch {} pages in {}{}: {} hits, {} misses, {} waste",
                group_digits(p.pages),
                human_ns(p.ns),
                if p.background {
                    format!(
                        " while the guest ran{} ({} late faults, {} met the load)",
                        if p.touch_order {
                            " in first-touch order"
                        } else {
                            ""
                        },
                        group_digits(p.late),
                        group_digits(p.raced)
                    )
                } else {
                    String::new()
                },
                opt(p.hits),
                group_digits(p.misses),
                opt(p.waste)
            ));
        }
        if let Some(f) = &self.faults {
            let share = if self.window_ns > 0 {
                100.0 * f.wait_ns as f64 / self.window_ns as f64
            } else {
                0.0
            };
            parts.push(format!(
                "{} faults, {} waiting for memory ({share:.0} % of the window)",
                group_digits(f.count),
                human_ns(f.wait_ns)
            ));
        }
        if let Some(e) = &self.error {
            parts.push(format!("failed: {e}"));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_names_every_figure() {
        let doc = RestoreMemoryDoc {
            mode: "uffd".into(),
            page_bytes: 4096,
            window_end: "0x90".into(),
            window_ns: 2_000_000,
            working_set: Some(WorkingSetDoc {
                pages: 1200,
                bytes: 1200 * 4096,
                recorded: None,
                source: "faults".into(),
            }),
            prefetch: Some(PrefetchDoc {
                pages: 1250,
                hits: Some(1190),
                misses: 10,
                waste: Some(60),
                ..Default::default()
            }),
            faults: Some(FaultsDoc {
                count: 10,
                wait_ns: 500_000,
                ..Default::default()
            }),
            ..Default::default()
        };
        let line = doc.summary_line();
        for s in [
            "uffd",
            "1,200 pages",
            "1,190 hits",
            "10 misses",
            "60 waste",
            "10 faults",
            "25 %",
        ] {
            assert!(line.contains(s), "{s}: {line}");
        }
        assert!(!line.contains("late faults"), "{line}");
        let back: RestoreMemoryDoc =
            serde_json::from_str(&serde_json::to_string(&doc).unwrap()).unwrap();
        assert_eq!(back, doc);
        // Loaded while the guest ran: the faults it did not beat.
        let mut bg = doc.clone();
        let p = bg.prefetch.as_mut().unwrap();
        (p.background, p.late, p.raced) = (true, 7, 3);
        let line = bg.summary_line();
        assert!(
            line.contains("while the guest ran (7 late faults, 3 met the load)"),
            "{line}"
        );
        bg.prefetch.as_mut().unwrap().touch_order = true;
        let line = bg.summary_line();
        assert!(
            line.contains("while the guest ran in first-touch order (7 late faults"),
            "{line}"
        );
        let back: RestoreMemoryDoc =
            serde_json::from_str(&serde_json::to_string(&bg).unwrap()).unwrap();
        assert_eq!(back, bg);
    }
}
