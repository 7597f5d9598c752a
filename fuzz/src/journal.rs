//! The journal reader over a journal file a guest wrote
//! (`bootscope_model::journal`), and the units of its last boot.

use bootscope_model::journal::{self, units::FIELDS, Limits};

/// The smallest entry object: its header, sequence number, timestamps,
/// boot id and hash, with no item.
const MIN_ENTRY: usize = 64;

/// Parses the input as a journal file and reads its last boot: never a
/// panic, never more entries than the file has room for, every unit with
/// a time.
pub fn file_and_units(data: &[u8]) {
    let limits = Limits {
        max_entries: 4096,
        max_items_per_entry: 64,
        max_field_bytes: 1024,
        max_payload_bytes_seen: 1 << 20,
    };
    let Ok(file) = journal::parse(data, FIELDS, &limits) else {
        return;
    };
    assert!(file.entries.len() <= data.len() / MIN_ENTRY);
    assert!(file.entries.iter().all(|e| e.fields.len() <= 64));
    if let Some(boot) = journal::boot_units(&file.entries, None) {
        assert!(boot.entries <= file.entries.len());
        assert!(boot.units.len() <= boot.entries);
        for u in &boot.units {
            assert!(u.starting_us.is_some() || u.done_us.is_some(), "{u:?}");
        }
    }
}
