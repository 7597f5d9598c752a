//! The working set of a restore (`DIR/working-set`, docs/snapshot-schema.md):
//! the 4 KiB pages of the memory file the guest touched from its first
//! `KVM_RUN` to its next mark, as ranges in file order. Versioned, sealed
//! with a SHA-256 of its body and tied to the snapshot's state digest, so
//! that a record of another snapshot, a truncated one or one naming pages
//! past the memory file is refused before it loads a single page.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::hex;
use super::OpenSnapshot;

pub const WORKING_SET_FILE: &str = "working-set";
pub const SCHEMA: &str = "bootscope-working-set";
/// The version this VMM writes and the only one it reads.
pub const VERSION: u32 = 2;
/// The versions read: 1 has no first-touch order (its pages load in file
/// order).
const READ_VERSIONS: [u64; 2] = [1, 2];
/// The record's page size.
pub const PAGE: u64 = 4096;
/// Largest record read: a range per page of a 64 GiB guest would not fit,
/// a real working set does.
const LIMIT: u64 = 256 << 20;

/// The sealed part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Body {
    schema: String,
    version: u32,
    /// The snapshot's `state_sha256` (snapshot.json).
    snapshot_state_sha256: String,
    memory_bytes: u64,
    page_bytes: u64,
    pages: u64,
    /// `[first page, pages]`, in file order, not touching one another.
    ranges: Vec<[u64; 2]>,
    /// Indices into `ranges` in the order the guest first touched them
    /// (from the recording restore's faults; some or all of them, each
    /// once). Absent: not known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    first_touched: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    body: Body,
    /// SHA-256 of the body's JSON as written, hex.
    sha256: String,
}

/// A working set: page numbers of the memory file, sorted, each once;
/// and where known, the order the guest first touched them in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkingSet {
    pub pages: Vec<u64>,
    /// Pages of the set in the order the guest first touched them, each
    /// once (a page per fault from a recording restore; read back, the
    /// first page of each range in its range's order). Empty: not known,
    /// and a background load goes in file order.
    pub order: Vec<u64>,
}

/// Why a record cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkingSetError {
    #[error("{}: no working set recorded; restore once without --prefetch to record it", .0.display())]
    Missing(PathBuf),
    #[error("{}: {why}; record it again (restore without --prefetch)", path.display())]
    Bad { path: PathBuf, why: String },
    #[error("{}: it is the working set of another snapshot (state digest {found}, this snapshot's is {want}); record it again (restore without --prefetch)", path.display())]
    OtherSnapshot {
        path: PathBuf,
        found: String,
        want: String,
    },
    #[error("{}: {why}", path.display())]
    Io { path: PathBuf, why: String },
}

impl WorkingSet {
    /// From page numbers in any order, with repeats.
    pub fn from_pages(mut pages: Vec<u64>) -> Self {
        pages.sort_unstable();
        pages.dedup();
        Self {
            pages,
            order: Vec::new(),
        }
    }

    /// The set with `touched` (pages in the order the guest touched them,
    /// with repeats and pages outside the set, which are left out) as its
    /// first-touch order.
    pub fn with_order(mut self, touched: impl IntoIterator<Item = u64>) -> Self {
        let mut seen = std::collections::HashSet::new();
        self.order = touched
            .into_iter()
            .filter(|&p| self.contains(p) && seen.insert(p))
            .collect();
        self
    }

    /// The indices of `ranges` (this set's [`Self::ranges`]) in first-touch
    /// order, each once.
    fn range_order(&self, ranges: &[[u64; 2]]) -> Vec<u32> {
        let mut seen = vec![false; ranges.len()];
        let mut out = Vec::new();
        for &p in &self.order {
            let i = ranges.partition_point(|r| r[0] + r[1] <= p);
            if i < ranges.len() && ranges[i][0] <= p && !seen[i] {
                seen[i] = true;
                out.push(i as u32);
            }
        }
        out
    }

    pub fn len(&self) -> u64 {
        self.pages.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    pub fn contains(&self, page: u64) -> bool {
        self.pages.binary_search(&page).is_ok()
    }

    /// True when the set holds a page of `[first, first + n)`.
    pub fn holds_any(&self, first: u64, n: u64) -> bool {
        let i = self.pages.partition_point(|&p| p < first);
        self.pages.get(i).is_some_and(|&p| p < first + n)
    }

    /// `[first page, pages]` runs of consecutive pages.
    pub fn ranges(&self) -> Vec<[u64; 2]> {
        let mut out: Vec<[u64; 2]> = Vec::new();
        for &p in &self.pages {
            match out.last_mut() {
                Some(r) if r[0] + r[1] == p => r[1] += 1,
                _ => out.push([p, 1]),
            }
        }
        out
    }
}

fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// The record's bytes for `set`, of the snapshot whose manifest says
/// `state_sha256`, with `memory_bytes` of memory.
pub fn encode(set: &WorkingSet, state_sha256: &str, memory_bytes: u64) -> Vec<u8> {
    let body = Body {
        schema: SCHEMA.into(),
        version: VERSION,
        snapshot_state_sha256: state_sha256.into(),
        memory_bytes,
        page_bytes: PAGE,
        pages: set.len(),
        first_touched: set.range_order(&set.ranges()),
        ranges: set.ranges(),
    };
    let text = serde_json::to_vec(&body).expect("a working set serializes");
    let sealed = Sealed {
        sha256: digest(&text),
        body,
    };
    let mut out = serde_json::to_vec(&sealed).expect("a working set serializes");
    out.push(b'\n');
    out
}

/// Reads a record's bytes, with every check: schema, version, seal, the
/// snapshot's digest, pages inside `memory_bytes`, ranges in order.
pub fn decode(
    bytes: &[u8],
    path: &Path,
    state_sha256: &str,
    memory_bytes: u64,
) -> Result<WorkingSet, WorkingSetError> {
    let bad = |why: String| WorkingSetError::Bad {
        path: path.to_path_buf(),
        why,
    };
    let head: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| bad(format!("not a working-set record (truncated?): {e}")))?;
    let body = head.get("body");
    if body.and_then(|b| b.get("schema")).and_then(|s| s.as_str()) != Some(SCHEMA) {
        return Err(bad(format!("not a {SCHEMA} document")));
    }
    let version = body.and_then(|b| b.get("version")).and_then(|v| v.as_u64());
    if !version.is_some_and(|v| READ_VERSIONS.contains(&v)) {
        return Err(bad(format!(
            "version {} is not one this bootscope reads (1 to {VERSION})",
            version.map_or("none".into(), |v| v.to_string())
        )));
    }
    let sealed: Sealed = serde_json::from_value(head).map_err(|e| bad(e.to_string()))?;
    let text = serde_json::to_vec(&sealed.body).expect("a working set serializes");
    if digest(&text) != sealed.sha256 {
        return Err(bad("its SHA-256 is not its own (changed or cut)".into()));
    }
    let b = sealed.body;
    if b.snapshot_state_sha256 != state_sha256 {
        return Err(WorkingSetError::OtherSnapshot {
            path: path.to_path_buf(),
            found: b.snapshot_state_sha256,
            want: state_sha256.into(),
        });
    }
    if b.page_bytes != PAGE || b.memory_bytes != memory_bytes {
        return Err(bad(format!(
            "it is for {} bytes of memory in {}-byte pages; this snapshot has {memory_bytes} in {PAGE}",
            b.memory_bytes, b.page_bytes
        )));
    }
    let limit = memory_bytes / PAGE;
    let mut pages = Vec::new();
    let mut next = 0u64;
    for &[first, n] in &b.ranges {
        let end = first.checked_add(n).filter(|&e| e <= limit && n > 0);
        let Some(end) = end else {
            return Err(bad(format!(
                "it lists pages {first}..+{n}, outside the guest's {limit} pages"
            )));
        };
        if first < next {
            return Err(bad(format!(
                "its ranges are not in file order at page {first}"
            )));
        }
        pages.extend(first..end);
        next = end;
    }
    if pages.len() as u64 != b.pages {
        return Err(bad(format!(
            "it says {} pages but lists {}",
            b.pages,
            pages.len()
        )));
    }
    let mut seen = vec![false; b.ranges.len()];
    let mut order = Vec::with_capacity(b.first_touched.len());
    for &i in &b.first_touched {
        match seen.get_mut(i as usize) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(bad(format!(
                    "its first-touch order names range {i} twice or past its {} ranges",
                    b.ranges.len()
                )))
            }
        }
        order.push(b.ranges[i as usize][0]);
    }
    Ok(WorkingSet { pages, order })
}

/// Reads `DIR/working-set` of an opened snapshot: this user's, writable by
/// no one else, bounded, and all [`decode`]'s checks.
pub fn read(snapshot: &OpenSnapshot) -> Result<WorkingSet, WorkingSetError> {
    use std::io::Read;
    let path = snapshot.dir.join(WORKING_SET_FILE);
    let (f, m) = match bootscope_model::input::open_nonblocking(&path, libc::O_NOFOLLOW) {
        Ok(x) => x,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(WorkingSetError::Missing(path))
        }
        Err(e) => {
            return Err(WorkingSetError::Io {
                path,
                why: format!("cannot open it: {e}"),
            })
        }
    };
    super::files::check_owner(&path, &m, m.is_file()).map_err(|e| WorkingSetError::Bad {
        path: path.clone(),
        why: e.to_string(),
    })?;
    if m.len() > LIMIT {
        return Err(WorkingSetError::Bad {
            path,
            why: format!("it is {} bytes, more than a record can be", m.len()),
        });
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    (&f).read_to_end(&mut bytes)
        .map_err(|e| WorkingSetError::Io {
            path: path.clone(),
            why: format!("cannot read it: {e}"),
        })?;
    decode(
        &bytes,
        &path,
        &snapshot.manifest.state_sha256,
        snapshot.manifest.memory_bytes,
    )
}

/// Writes `DIR/working-set` (0600, a temporary name renamed into place).
pub fn write(snapshot: &OpenSnapshot, set: &WorkingSet) -> Result<PathBuf, WorkingSetError> {
    let path = snapshot.dir.join(WORKING_SET_FILE);
    let bytes = encode(
        set,
        &snapshot.manifest.state_sha256,
        snapshot.manifest.memory_bytes,
    );
    bootscope_model::output::write_file_with_mode(&path, &bytes, 0o600).map_err(|e| {
        WorkingSetError::Io {
            path: path.clone(),
            why: e.to_string(),
        }
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATE: &str = "ab12";

    fn decoded(bytes: &[u8]) -> Result<WorkingSet, WorkingSetError> {
        decode(bytes, Path::new("ws"), STATE, 64 * PAGE)
    }

    #[test]
    fn a_record_comes_back_and_bad_ones_are_refused() {
        let set = WorkingSet::from_pages(vec![5, 1, 2, 3, 9, 2, 63]);
        assert_eq!(set.ranges(), [[1, 3], [5, 1], [9, 1], [63, 1]]);
        let bytes = encode(&set, STATE, 64 * PAGE);
        assert_eq!(decoded(&bytes).unwrap(), set);
        // Another snapshot's.
        let e = decode(&bytes, Path::new("ws"), "ffff", 64 * PAGE).unwrap_err();
        assert!(e.to_string().contains("another snapshot"), "{e}");
        // Cut short.
        let e = decoded(&bytes[..bytes.len() / 2]).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        // A page changed: the seal breaks.
        let text = String::from_utf8(bytes.clone()).unwrap();
        let e = decoded(text.replace("[9,1]", "[8,1]").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("SHA-256"), "{e}");
        // Pages past the memory, sealed anew: refused by range.
        let big = WorkingSet::from_pages(vec![1, 64]);
        let e = decoded(&encode(&big, STATE, 64 * PAGE)).unwrap_err();
        assert!(e.to_string().contains("outside the guest"), "{e}");
        let huge = WorkingSet::from_pages(vec![u64::MAX - 1]);
        assert!(decoded(&encode(&huge, STATE, 64 * PAGE)).is_err());
        // Another memory size.
        let e = decode(&bytes, Path::new("ws"), STATE, 128 * PAGE).unwrap_err();
        assert!(e.to_string().contains("bytes of memory"), "{e}");
    }

    #[test]
    fn the_first_touch_order_comes_back_by_range_and_bad_orders_are_refused() {
        // Touched: 9, then 2 (range [1, 3]), 63, 2 again, 40 (not in the set).
        let set = WorkingSet::from_pages(vec![5, 1, 2, 3, 9, 63]).with_order([9, 2, 63, 2, 40]);
        assert_eq!(set.order, [9, 2, 63]);
        let bytes = encode(&set, STATE, 64 * PAGE);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains("\"first_touched\":[2,0,3]"), "{text}");
        let back = decoded(&bytes).unwrap();
        assert_eq!(back.pages, set.pages);
        // Read back: each range's first page, in the ranges' order.
        assert_eq!(back.order, [9, 1, 63]);
        // Without an order none is written, and none comes back.
        let plain = WorkingSet::from_pages(vec![1, 2]);
        let text = String::from_utf8(encode(&plain, STATE, 64 * PAGE)).unwrap();
        assert!(!text.contains("first_touched"), "{text}");
        assert!(decoded(text.as_bytes()).unwrap().order.is_empty());
        // A version 1 record (no order) is read.
        let v1 = text.replace("\"version\":2", "\"version\":1");
        let v1 = reseal(&v1);
        assert_eq!(decoded(v1.as_bytes()).unwrap().pages, [1, 2]);
        // An order naming a range twice, or past the ranges, sealed anew.
        for bad in ["[2,0,2]", "[7]"] {
            let t = reseal(
                &String::from_utf8(bytes.clone())
                    .unwrap()
                    .replace("[2,0,3]", bad),
            );
            let e = decoded(t.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("first-touch order"), "{bad}: {e}");
        }
    }

    /// `text` (a record) with its seal made anew for its body.
    fn reseal(text: &str) -> String {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        let body: Body = serde_json::from_value(v["body"].clone()).unwrap();
        let body_text = serde_json::to_vec(&body).unwrap();
        let sealed = Sealed {
            sha256: digest(&body_text),
            body,
        };
        serde_json::to_string(&sealed).unwrap()
    }

    #[test]
    fn a_range_holds_a_page_when_any_of_its_pages_is_in_the_set() {
        let set = WorkingSet::from_pages(vec![5, 600, 1023]);
        assert!(set.holds_any(0, 512));
        assert!(set.holds_any(512, 512));
        assert!(set.holds_any(1023, 1));
        assert!(!set.holds_any(6, 594));
        assert!(!set.holds_any(1024, 512));
        assert!(!WorkingSet::default().holds_any(0, 512));
    }
}
