//! A profile's samples (`samples[]`), held compactly: a profile of a
//! million samples is read into less memory than its file takes.
//!
//! A sample is five numbers and its exits by reason; the reasons are a few
//! dozen names repeated in every sample, so each is held once
//! ([`ReasonCounts`] shares the names it reads) and a sample's counts are
//! one sorted slice of (name, count) pairs, not a tree of strings.
//! Written back, a sample is the same JSON as a map of its reasons: the
//! names in byte order, as a `BTreeMap<String, u64>` writes them.
//!
//! Reading them is [`read`]'s: a sample's fields and names are matched as
//! bytes, each name first against the one at its place in the sample read
//! before (the same names, in the same order, in every sample bootscope
//! writes).

mod read;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// Cumulative counters at one instant.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Sample {
    pub t_ns: u64,
    pub exits_total: u64,
    pub exits_by_reason: ReasonCounts,
    pub guest_faults: u64,
    pub host_faults: u64,
}

/// Counts by reason name: a map of names to counts, in name order, held
/// as one slice whose names are shared between samples.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ReasonCounts(Box<[(Arc<str>, u64)]>);

impl ReasonCounts {
    /// No reasons.
    pub fn new() -> Self {
        Self::default()
    }

    /// From (name, count) pairs in any order; of two with the same name,
    /// the later one counts (as a map's insert).
    fn from_pairs(mut pairs: Vec<(Arc<str>, u64)>) -> Self {
        // As bootscope writes them: in order, each name once.
        if pairs.is_sorted_by(|a, b| a.0 < b.0) {
            return Self(pairs.into_boxed_slice());
        }
        pairs.reverse();
        // Stable: of equal names the later pair (now first) is kept.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|a, b| a.0 == b.0);
        Self(pairs.into_boxed_slice())
    }

    /// The number of reasons.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The count of `reason`.
    pub fn get(&self, reason: &str) -> Option<&u64> {
        self.0
            .binary_search_by(|(n, _)| (**n).cmp(reason))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Whether `reason` has a count.
    pub fn contains_key(&self, reason: &str) -> bool {
        self.get(reason).is_some()
    }

    /// (name, count), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.0.iter().map(|(n, c)| (&**n, *c))
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.iter().map(|(n, _)| &**n)
    }

    /// The counts, in name order.
    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|(_, c)| *c)
    }

    /// As a map.
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        self.iter().map(|(n, c)| (n.to_string(), c)).collect()
    }
}

impl std::ops::Index<&str> for ReasonCounts {
    type Output = u64;
    fn index(&self, reason: &str) -> &u64 {
        self.get(reason)
            .unwrap_or_else(|| panic!("no reason {reason:?} in the counts"))
    }
}

impl fmt::Debug for ReasonCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<(S, u64)> for ReasonCounts {
    fn from_iter<I: IntoIterator<Item = (S, u64)>>(iter: I) -> Self {
        Self::from_pairs(
            iter.into_iter()
                .map(|(n, c)| (shared_name(n.as_ref()), c))
                .collect(),
        )
    }
}

impl From<BTreeMap<String, u64>> for ReasonCounts {
    fn from(map: BTreeMap<String, u64>) -> Self {
        map.into_iter().collect()
    }
}

impl<S: AsRef<str>, const N: usize> From<[(S, u64); N]> for ReasonCounts {
    fn from(pairs: [(S, u64); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl Serialize for ReasonCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (n, c) in self.iter() {
            m.serialize_entry(n, &c)?;
        }
        m.end()
    }
}

/// The most names [`shared_name`] keeps per thread; past it, a name not
/// kept is held on its own (correct, only less compact), so a document of
/// endless distinct names does not grow the table.
const SHARED_NAMES_MAX: usize = 4096;

thread_local! {
    static NAMES: RefCell<HashSet<Arc<str>>> = RefCell::new(HashSet::new());
}

/// `name`, shared with every other use of it on this thread.
pub(crate) fn shared_name(name: &str) -> Arc<str> {
    NAMES.with(|names| {
        let mut names = names.borrow_mut();
        if let Some(n) = names.get(name) {
            return n.clone();
        }
        let n: Arc<str> = Arc::from(name);
        if names.len() < SHARED_NAMES_MAX {
            names.insert(n.clone());
        }
        n
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_held_in_a_few_words() {
        // Five counters and one slice: no tree per sample.
        assert_eq!(std::mem::size_of::<ReasonCounts>(), 16);
        assert_eq!(std::mem::size_of::<Sample>(), 48);
        // A reason is a shared name and a count.
        assert_eq!(std::mem::size_of::<(Arc<str>, u64)>(), 24);
    }

    #[test]
    fn reasons_read_as_a_map_and_write_back_the_same() {
        let text = r#"{"npf":3,"io":1,"hlt":2,"io":5}"#;
        let c: ReasonCounts = serde_json::from_str(text).unwrap();
        let m: BTreeMap<String, u64> = serde_json::from_str(text).unwrap();
        assert_eq!(c.to_map(), m);
        assert_eq!(c["io"], 5);
        assert_eq!(c.get("vmcall"), None);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            serde_json::to_string(&m).unwrap()
        );
        assert_eq!(c.keys().collect::<Vec<_>>(), ["hlt", "io", "npf"]);
        assert_eq!(c.values().sum::<u64>(), 10);
        // Names are shared between samples.
        let d: ReasonCounts = serde_json::from_str(r#"{"io":7}"#).unwrap();
        assert!(Arc::ptr_eq(&c.0[1].0, &d.0[0].0));
        assert!(serde_json::from_str::<ReasonCounts>(r#"{"io":-1}"#).is_err());
    }

    #[test]
    fn samples_read_whatever_the_names_of_the_sample_before() {
        // Each sample's names against the one before: the same, fewer,
        // more, other names, another order, a repeated name.
        let text = r#"[
            {"t_ns": 1, "exits_total": 3, "exits_by_reason": {"hlt": 1, "io": 2}, "guest_faults": 4, "host_faults": 5},
            {"t_ns": 2, "exits_total": 4, "exits_by_reason": {"hlt": 1, "io": 3}, "guest_faults": 4, "host_faults": 5},
            {"t_ns": 3, "exits_total": 1, "exits_by_reason": {"io": 1}, "guest_faults": 4, "host_faults": 5},
            {"exits_by_reason": {"npf": 2, "io": 1, "cpuid": 7, "io": 9}, "host_faults": 5, "guest_faults": 6, "exits_total": 19, "t_ns": 4, "other": [1, {"a": 2}]},
            {"t_ns": 5, "exits_total": 0, "exits_by_reason": {}, "guest_faults": 0, "host_faults": 0},
            [6, 2, {"i\u006f": 2}, 1, 1]
        ]"#;
        let samples: Vec<Sample> = serde_json::from_str(text).unwrap();
        let reasons: Vec<BTreeMap<String, u64>> =
            samples.iter().map(|s| s.exits_by_reason.to_map()).collect();
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect()
        };
        assert_eq!(
            reasons,
            [
                map(&[("hlt", 1), ("io", 2)]),
                map(&[("hlt", 1), ("io", 3)]),
                map(&[("io", 1)]),
                map(&[("cpuid", 7), ("io", 9), ("npf", 2)]),
                map(&[]),
                map(&[("io", 2)]),
            ]
        );
        let s = &samples[3];
        assert_eq!(
            (s.t_ns, s.exits_total, s.guest_faults, s.host_faults),
            (4, 19, 6, 5)
        );
        assert_eq!((samples[5].t_ns, samples[5].host_faults), (6, 1));
        // One name, one string: shared by every sample that has it.
        assert!(Arc::ptr_eq(
            &samples[0].exits_by_reason.0[1].0,
            &samples[5].exits_by_reason.0[0].0
        ));
        // Written back as a map of reasons, in name order.
        let back: Vec<Sample> =
            serde_json::from_slice(&serde_json::to_vec(&samples).unwrap()).unwrap();
        assert_eq!(back, samples);
    }

    #[test]
    fn a_sample_with_a_field_missing_repeated_or_wrong_is_refused() {
        let full =
            r#""t_ns": 1, "exits_total": 3, "exits_by_reason": {"io": 2}, "guest_faults": 4"#;
        for (text, says) in [
            (format!("{{{full}}}"), "missing field `host_faults`"),
            (
                format!("{{{full}, \"host_faults\": 1, \"t_ns\": 2}}"),
                "duplicate field `t_ns`",
            ),
            (
                format!("{{{full}, \"host_faults\": 1, \"exits_by_reason\": {{}}}}"),
                "duplicate field `exits_by_reason`",
            ),
            (
                r#"{"t_ns": -1, "exits_total": 3, "exits_by_reason": {}, "guest_faults": 4, "host_faults": 5}"#.into(),
                "invalid value",
            ),
            (
                r#"{"t_ns": 1, "exits_total": 3, "exits_by_reason": {"io": "2"}, "guest_faults": 4, "host_faults": 5}"#.into(),
                "invalid type",
            ),
            (
                r#"{"t_ns": 1, "exits_total": 3, "exits_by_reason": {"\udc00": 1}, "guest_faults": 4, "host_faults": 5}"#.into(),
                "not UTF-8",
            ),
            ("[1, 2, {}]".into(), "invalid length 3"),
            ("7".into(), "expected struct Sample"),
        ] {
            let e = serde_json::from_str::<Sample>(&text).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn many_samples_take_less_memory_than_their_text() {
        let reasons = ["io", "npf", "hlt", "msr", "EXTERNAL_INTERRUPT", "cpuid"];
        let samples: Vec<Sample> = (0..200_000u64)
            .map(|i| Sample {
                t_ns: i * 1000,
                exits_total: i * 6,
                exits_by_reason: reasons.iter().map(|r| (*r, i)).collect(),
                guest_faults: i,
                host_faults: i,
            })
            .collect();
        let text = serde_json::to_vec(&samples).unwrap().len();
        // What the samples hold: the vector and each sample's slice (the
        // names are shared).
        let held: usize = samples.len() * std::mem::size_of::<Sample>()
            + samples
                .iter()
                .map(|s| s.exits_by_reason.len() * 24)
                .sum::<usize>();
        assert!(held < text, "{held} bytes held for {text} bytes of JSON");
        let back: Vec<Sample> =
            serde_json::from_slice(&serde_json::to_vec(&samples).unwrap()).unwrap();
        assert_eq!(back, samples);
    }
}
