//! One systemd journal file (systemd's `JOURNAL_FILE_FORMAT`), read from
//! bytes a guest wrote: every object is checked against the file's bounds
//! before it is read, the file is walked once from its header to its end
//! (object by object, each step at least one object header long), so a
//! crafted file cannot make the reader loop, read outside the bytes it was
//! given, or hold more than [`Limits`] allow. What cannot be read is counted
//! in [`Skipped`], never an error: an error is only a file that is not a
//! journal at all.
//!
//! Hash tables and entry-array chains are not followed: the entries are
//! taken in the order they were appended, which is the order journald
//! wrote them. Compressed data objects (journald compresses payloads above
//! 512 bytes) are counted and skipped: the fields the readers need are
//! short.

use std::collections::BTreeSet;

/// The file's first eight bytes.
pub const SIGNATURE: &[u8; 8] = b"LPKSHHRH";

const INCOMPATIBLE_COMPRESSED_XZ: u32 = 1 << 0;
const INCOMPATIBLE_COMPRESSED_LZ4: u32 = 1 << 1;
const INCOMPATIBLE_KEYED_HASH: u32 = 1 << 2;
const INCOMPATIBLE_COMPRESSED_ZSTD: u32 = 1 << 3;
const INCOMPATIBLE_COMPACT: u32 = 1 << 4;
const INCOMPATIBLE_KNOWN: u32 = INCOMPATIBLE_COMPRESSED_XZ
    | INCOMPATIBLE_COMPRESSED_LZ4
    | INCOMPATIBLE_KEYED_HASH
    | INCOMPATIBLE_COMPRESSED_ZSTD
    | INCOMPATIBLE_COMPACT;

/// The header up to `tail_entry_monotonic`, the oldest header systemd writes.
const HEADER_MIN: u64 = 208;
const OBJECT_HEADER: u64 = 16;
const OBJECT_DATA: u8 = 1;
const OBJECT_ENTRY: u8 = 3;
const OBJECT_COMPRESSED_MASK: u8 = 0x07;
/// Where an entry's items start, and a data object's payload.
const ENTRY_ITEMS: u64 = 64;
const DATA_PAYLOAD: u64 = 64;
const DATA_PAYLOAD_COMPACT: u64 = 72;

/// Why a file is not read at all.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error("it is not a systemd journal file (it does not start with \"LPKSHHRH\")")]
    Signature,
    #[error("its header claims {claimed} bytes, but the file has {len}")]
    Header { claimed: u64, len: u64 },
    #[error("it uses journal features this reader does not know (incompatible flags {0:#x})")]
    Incompatible(u32),
}

/// How much of a file is read: a guest writes it, so nothing in it decides
/// how much memory or time reading it takes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Entries kept; the rest are counted in [`Skipped::over_limit`].
    pub max_entries: usize,
    /// Items (fields) looked at in one entry.
    pub max_items_per_entry: usize,
    /// One field's value; longer ones are skipped.
    pub max_field_bytes: usize,
    /// Payload bytes looked at in all, kept or not: bounds the work a file
    /// whose entries all name one large data object can cause.
    pub max_payload_bytes_seen: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 200_000,
            max_items_per_entry: 512,
            max_field_bytes: 4096,
            max_payload_bytes_seen: 256 << 20,
        }
    }
}

/// One entry: its header and the wanted fields it carries, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub seqnum: u64,
    pub realtime_us: u64,
    /// The boot's `CLOCK_MONOTONIC` when journald received the entry (µs).
    pub monotonic_us: u64,
    pub boot_id: [u8; 16],
    /// `(FIELD, value)`, values as text (invalid UTF-8 replaced).
    pub fields: Vec<(String, String)>,
}

impl Entry {
    /// The first value of `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What was not read, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Entry items that point outside the file or at something that is
    /// not a data object.
    pub bad_items: u64,
    /// Compressed payloads (not decompressed).
    pub compressed: u64,
    /// Values longer than the limit.
    pub long_fields: u64,
    /// Entries past `max_entries`, or after `max_payload_bytes_seen`.
    pub over_limit: u64,
    /// The offset where the walk met an object it could not step over
    /// (a size that is too small or runs past the file): the rest of the
    /// file is not read.
    pub stopped_at: Option<u64>,
}

impl Skipped {
    /// True when everything in the file was read.
    pub fn is_empty(&self) -> bool {
        *self == Skipped::default()
    }
}

/// A journal file's entries and what was skipped.
#[derive(Clone, Debug, Default)]
pub struct JournalFile {
    /// The boot of the file's last entry, from its header.
    pub tail_boot_id: [u8; 16],
    pub compact: bool,
    pub entries: Vec<Entry>,
    pub skipped: Skipped,
}

fn le64(bytes: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    let b = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

fn le32(bytes: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u64::from(u32::from_le_bytes(b.try_into().ok()?)))
}

fn id128(bytes: &[u8], at: usize) -> [u8; 16] {
    let mut id = [0; 16];
    if let Some(b) = bytes.get(at..at + 16) {
        id.copy_from_slice(b);
    }
    id
}

/// The file's arena: `[start, end)` within the bytes given.
struct Arena<'a> {
    bytes: &'a [u8],
    start: u64,
    end: u64,
    compact: bool,
}

impl Arena<'_> {
    /// The object at `at` when it lies whole inside the arena: its type,
    /// flags and size.
    fn object(&self, at: u64) -> Option<(u8, u8, u64)> {
        if at % 8 != 0 || at < self.start || at.checked_add(OBJECT_HEADER)? > self.end {
            return None;
        }
        let i = usize::try_from(at).ok()?;
        let kind = *self.bytes.get(i)?;
        let flags = *self.bytes.get(i + 1)?;
        let size = le64(self.bytes, at + 8)?;
        if size < OBJECT_HEADER || at.checked_add(size)? > self.end {
            return None;
        }
        Some((kind, flags, size))
    }
}

/// Reads the entries of a journal file, keeping the fields named in
/// `wanted` (all fields when it is empty).
pub fn parse(bytes: &[u8], wanted: &[&str], limits: &Limits) -> Result<JournalFile, JournalError> {
    if bytes.get(..8) != Some(SIGNATURE.as_slice()) {
        return Err(JournalError::Signature);
    }
    let len = bytes.len() as u64;
    let incompatible = le32(bytes, 12).unwrap_or(0) as u32;
    if incompatible & !INCOMPATIBLE_KNOWN != 0 {
        return Err(JournalError::Incompatible(incompatible));
    }
    let header_size = le64(bytes, 88).unwrap_or(0);
    if header_size < HEADER_MIN || header_size > len {
        return Err(JournalError::Header {
            claimed: header_size,
            len,
        });
    }
    // A file that was cut short (or whose header overstates its arena) is
    // read as far as it goes.
    let arena_size = le64(bytes, 96).unwrap_or(0);
    let end = header_size.saturating_add(arena_size).min(len);
    let arena = Arena {
        bytes,
        start: header_size,
        end,
        compact: incompatible & INCOMPATIBLE_COMPACT != 0,
    };
    let wanted: BTreeSet<&str> = wanted.iter().copied().collect();
    let mut file = JournalFile {
        tail_boot_id: id128(bytes, 56),
        compact: arena.compact,
        ..JournalFile::default()
    };
    let mut walk = Walk {
        arena: &arena,
        wanted: &wanted,
        limits,
        seen: 0,
    };
    let mut at = header_size.next_multiple_of(8);
    while at.saturating_add(OBJECT_HEADER) <= end {
        let kind = bytes[at as usize];
        let size = le64(bytes, at + 8).unwrap_or(0);
        if kind == 0 && size == 0 {
            // The zeroed room after the last object.
            break;
        }
        let Some((kind, _, size)) = arena.object(at) else {
            file.skipped.stopped_at = Some(at);
            break;
        };
        if kind == OBJECT_ENTRY {
            if file.entries.len() >= limits.max_entries || walk.seen > limits.max_payload_bytes_seen
            {
                file.skipped.over_limit += 1;
            } else {
                let entry = walk.entry(at, size, &mut file.skipped);
                file.entries.push(entry);
            }
        }
        at = match at.checked_add(size.next_multiple_of(8)) {
            Some(next) => next,
            None => break,
        };
    }
    Ok(file)
}

struct Walk<'a> {
    arena: &'a Arena<'a>,
    wanted: &'a BTreeSet<&'a str>,
    limits: &'a Limits,
    /// Payload bytes looked at so far.
    seen: u64,
}

impl Walk<'_> {
    fn entry(&mut self, at: u64, size: u64, skipped: &mut Skipped) -> Entry {
        let bytes = self.arena.bytes;
        let mut entry = Entry {
            seqnum: le64(bytes, at + 16).unwrap_or(0),
            realtime_us: le64(bytes, at + 24).unwrap_or(0),
            monotonic_us: le64(bytes, at + 32).unwrap_or(0),
            boot_id: id128(bytes, at as usize + 40),
            fields: Vec::new(),
        };
        let item_size = if self.arena.compact { 4 } else { 16 };
        let items = size.saturating_sub(ENTRY_ITEMS) / item_size;
        let items = items.min(self.limits.max_items_per_entry as u64);
        for i in 0..items {
            let item = at + ENTRY_ITEMS + i * item_size;
            let data = if self.arena.compact {
                le32(bytes, item)
            } else {
                le64(bytes, item)
            };
            match data.and_then(|d| self.field(d, skipped)) {
                Some(Some(field)) => entry.fields.push(field),
                Some(None) => {}
                None => skipped.bad_items += 1,
            }
        }
        entry
    }

    /// The field a data object holds: `None` when the object is not a
    /// data object inside the file, `Some(None)` when it is skipped.
    fn field(&mut self, at: u64, skipped: &mut Skipped) -> Option<Option<(String, String)>> {
        let (kind, flags, size) = self.arena.object(at)?;
        if kind != OBJECT_DATA {
            return None;
        }
        let start = at
            + if self.arena.compact {
                DATA_PAYLOAD_COMPACT
            } else {
                DATA_PAYLOAD
            };
        let end = at + size;
        if start > end {
            return None;
        }
        if flags & OBJECT_COMPRESSED_MASK != 0 {
            skipped.compressed += 1;
            return Some(None);
        }
        let payload = self.arena.bytes.get(start as usize..end as usize)?;
        let eq = payload.iter().take(64).position(|&b| b == b'=')?;
        let name = std::str::from_utf8(&payload[..eq]).ok()?;
        if !self.wanted.is_empty() && !self.wanted.contains(name) {
            return Some(None);
        }
        self.seen += payload.len() as u64;
        let value = &payload[eq + 1..];
        if value.len() > self.limits.max_field_bytes {
            skipped.long_fields += 1;
            return Some(None);
        }
        Some(Some((
            name.to_string(),
            String::from_utf8_lossy(value).into_owned(),
        )))
    }
}

/// A boot id as journalctl prints it (32 hex digits).
pub fn boot_id_hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}
