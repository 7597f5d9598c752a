//! Sets of CPU or NUMA node numbers in the kernel's list format
//! (`0-3,8,10-11`), as sysfs prints them and as users type them.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// A CPU or node list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// A CPU or node list with a malformed item.
    #[error(
        "{list:?}: {item:?} is not a number or a low-high range; write lists like 0-3,8,10-11"
    )]
    BadIdList { list: String, item: String },
    /// A CPU or node number beyond any real host.
    #[error("{list:?}: {id} is larger than any CPU or node number (at most {MAX_ID})")]
    IdTooLarge { list: String, id: u32 },
}

/// Highest CPU or node number accepted. The kernel's own limits are lower
/// (NR_CPUS is at most 8192, MAX_NUMNODES 1024); the cap keeps a typo such as
/// `0-4000000000` from building a huge set.
pub const MAX_ID: u32 = 1 << 16;

/// A set of CPU or node numbers. Printed and serialized in list format.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdSet(BTreeSet<u32>);

/// Host or guest CPU numbers.
pub type CpuSet = IdSet;
/// Host NUMA node numbers.
pub type NodeSet = IdSet;

impl IdSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the list format: comma-separated numbers and inclusive ranges,
    /// surrounding white space ignored. An empty (or all-blank) string is the
    /// empty set, as sysfs prints for a node without CPUs.
    pub fn parse(s: &str) -> Result<Self, CpuListError> {
        let mut set = BTreeSet::new();
        let trimmed = s.trim();
        if trimmed.is_empty() {
            return Ok(Self(set));
        }
        for item in trimmed.split(',') {
            let item = item.trim();
            let bad = || CpuListError::BadIdList {
                list: s.trim().to_string(),
                item: item.to_string(),
            };
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (
                    a.trim().parse::<u32>().map_err(|_| bad())?,
                    b.trim().parse::<u32>().map_err(|_| bad())?,
                ),
                None => {
                    let v = item.parse::<u32>().map_err(|_| bad())?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(bad());
            }
            if hi > MAX_ID {
                return Err(CpuListError::IdTooLarge {
                    list: s.trim().to_string(),
                    id: hi,
                });
            }
            set.extend(lo..=hi);
        }
        Ok(Self(set))
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u32) -> bool {
        self.0.contains(&id)
    }

    /// Adds `id`.
    pub fn insert(&mut self, id: u32) {
        self.0.insert(id);
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// Largest member.
    pub fn highest(&self) -> Option<u32> {
        self.0.last().copied()
    }

    /// Members of `self` that are not in `other`.
    pub fn difference(&self, other: &IdSet) -> IdSet {
        Self(self.0.difference(&other.0).copied().collect())
    }

    /// Members of `self` that are also in `other`.
    pub fn intersection(&self, other: &IdSet) -> IdSet {
        Self(self.0.intersection(&other.0).copied().collect())
    }

    /// Adds every member of `other`.
    pub fn extend(&mut self, other: &IdSet) {
        self.0.extend(other.0.iter().copied());
    }

    /// Whether every member is also in `other`.
    pub fn is_subset(&self, other: &IdSet) -> bool {
        self.0.is_subset(&other.0)
    }
}

impl FromIterator<u32> for IdSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl FromStr for IdSet {
    type Err = CpuListError;
    fn from_str(s: &str) -> Result<Self, CpuListError> {
        Self::parse(s)
    }
}

impl fmt::Display for IdSet {
    /// Compact list format: `0-3,8,10-11`; the empty set prints nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut it = self.0.iter().copied().peekable();
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi += 1;
                it.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl Serialize for IdSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &str) -> Vec<u32> {
        IdSet::parse(s).unwrap().iter().collect()
    }

    #[test]
    fn parses_list_format() {
        assert_eq!(ids("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(ids("5"), vec![5]);
        assert_eq!(ids("0-1\n"), vec![0, 1]);
        assert_eq!(ids(" 2 , 0 - 1 "), vec![0, 1, 2]);
        assert_eq!(ids("3,1,1-2"), vec![1, 2, 3]);
        assert!(ids("").is_empty());
        assert!(ids("\n").is_empty());
    }

    #[test]
    fn rejects_bad_lists() {
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "1-2-3", "0x1", "1.5"] {
            let e = IdSet::parse(bad).unwrap_err();
            assert!(matches!(e, CpuListError::BadIdList { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("0-3,8"), "{e}");
        }
        let e = IdSet::parse("0-4000000000").unwrap_err();
        assert!(
            matches!(e, CpuListError::IdTooLarge { id: 4000000000, .. }),
            "{e}"
        );
    }

    #[test]
    fn prints_compact_ranges() {
        for s in ["0-3,8,10-11", "0", "0-1", "1,3,5", ""] {
            assert_eq!(IdSet::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(IdSet::parse("3,2,1,0,7").unwrap().to_string(), "0-3,7");
        assert_eq!(
            serde_json::to_string(&IdSet::parse("0-2,4").unwrap()).unwrap(),
            "\"0-2,4\""
        );
    }

    #[test]
    fn set_operations() {
        let a = IdSet::parse("0-3").unwrap();
        let b = IdSet::parse("2-5").unwrap();
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert!(IdSet::parse("1-2").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert_eq!(b.highest(), Some(5));
        let mut c = a.clone();
        c.extend(&b);
        assert_eq!(c.to_string(), "0-5");
    }
}
