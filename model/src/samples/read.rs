//! Reading samples: a sample's fields and reason names are matched as the
//! bytes the document holds (no string of their own, no UTF-8 check of a
//! name already known), and each name is first compared with the name at
//! its place in the sample read before on this thread, which every sample
//! bootscope writes repeats. A name that differs is looked up among the
//! shared names ([`shared_name`]), so the result is the same either way:
//! the guess saves a lookup, it never decides what is read.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use serde::de::{DeserializeSeed, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{shared_name, ReasonCounts, Sample};

/// The most names remembered from the sample before (a sample of more
/// reasons is read all the same, its later names looked up).
const LAST_NAMES_MAX: usize = 256;

thread_local! {
    /// The names of the last sample read on this thread, in its order.
    static LAST_NAMES: RefCell<Vec<Arc<str>>> = const { RefCell::new(Vec::new()) };
}

impl<'de> Deserialize<'de> for ReasonCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(CountsVisitor)
    }
}

struct CountsVisitor;

impl<'de> Visitor<'de> for CountsVisitor {
    type Value = ReasonCounts;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of reasons to counts")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReasonCounts, A::Error> {
        // Taken for the read and put back after it (a read that fails
        // leaves the next one without a guess, nothing more).
        let mut last = LAST_NAMES.with(|l| std::mem::take(&mut *l.borrow_mut()));
        let hint = map.size_hint().unwrap_or(0);
        let mut pairs = Vec::with_capacity(last.len().max(hint).min(LAST_NAMES_MAX));
        while let Some(name) = map.next_key_seed(NameSeed {
            guess: last.get(pairs.len()),
        })? {
            let count: u64 = map.next_value()?;
            let i = pairs.len();
            match last.get_mut(i) {
                Some(known) if Arc::ptr_eq(known, &name) => {}
                Some(known) => *known = name.clone(),
                None if i < LAST_NAMES_MAX => last.push(name.clone()),
                None => {}
            }
            pairs.push((name, count));
        }
        last.truncate(pairs.len());
        LAST_NAMES.with(|l| *l.borrow_mut() = last);
        Ok(ReasonCounts::from_pairs(pairs))
    }
}

/// A reason name: the guessed one when the bytes are its, else the
/// shared one.
struct NameSeed<'a> {
    guess: Option<&'a Arc<str>>,
}

impl<'de> DeserializeSeed<'de> for NameSeed<'_> {
    type Value = Arc<str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Arc<str>, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl Visitor<'_> for NameSeed<'_> {
    type Value = Arc<str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a reason name")
    }

    fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Arc<str>, E> {
        match self.guess {
            Some(g) if g.as_bytes() == v => Ok(g.clone()),
            _ => std::str::from_utf8(v)
                .map(shared_name)
                .map_err(|_| E::custom("a reason name is not UTF-8")),
        }
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Arc<str>, E> {
        self.visit_bytes(v.as_bytes())
    }
}

/// The fields of a sample, in the order they are written.
const FIELDS: &[&str] = &[
    "t_ns",
    "exits_total",
    "exits_by_reason",
    "guest_faults",
    "host_faults",
];

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("Sample", FIELDS, SampleVisitor)
    }
}

/// A sample's field by its name ([`FIELDS`]'s index); `None` for a field
/// a sample does not have (skipped).
struct FieldSeed;

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl Visitor<'_> for FieldSeed {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Option<usize>, E> {
        Ok(FIELDS.iter().position(|f| f.as_bytes() == v))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Option<usize>, E> {
        self.visit_bytes(v.as_bytes())
    }
}

struct SampleVisitor;

impl<'de> Visitor<'de> for SampleVisitor {
    type Value = Sample;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct Sample")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sample, A::Error> {
        // The four counters by their index in FIELDS (2 is the reasons).
        let mut counters: [Option<u64>; 5] = [None; 5];
        let mut reasons: Option<ReasonCounts> = None;
        while let Some(field) = map.next_key_seed(FieldSeed)? {
            match field {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(2) if reasons.is_some() => return Err(A::Error::duplicate_field(FIELDS[2])),
                Some(2) => reasons = Some(map.next_value()?),
                Some(i) if counters[i].is_some() => {
                    return Err(A::Error::duplicate_field(FIELDS[i]))
                }
                Some(i) => counters[i] = Some(map.next_value()?),
            }
        }
        let counter = |i: usize| counters[i].ok_or_else(|| A::Error::missing_field(FIELDS[i]));
        Ok(Sample {
            t_ns: counter(0)?,
            exits_total: counter(1)?,
            exits_by_reason: reasons.ok_or_else(|| A::Error::missing_field(FIELDS[2]))?,
            guest_faults: counter(3)?,
            host_faults: counter(4)?,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Sample, A::Error> {
        fn next<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
            seq: &mut A,
            i: usize,
        ) -> Result<T, A::Error> {
            seq.next_element()?
                .ok_or_else(|| A::Error::invalid_length(i, &SampleVisitor))
        }
        // In the order of FIELDS (a struct literal's fields are read in
        // the order written).
        Ok(Sample {
            t_ns: next(&mut seq, 0)?,
            exits_total: next(&mut seq, 1)?,
            exits_by_reason: next(&mut seq, 2)?,
            guest_faults: next(&mut seq, 3)?,
            host_faults: next(&mut seq, 4)?,
        })
    }
}
