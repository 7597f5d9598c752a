//! The journal reader over files systemd itself wrote, and over those
//! files corrupted the ways a hostile guest could.
//!
//! `fixtures/compact.journal.gz` and `fixtures/regular.journal.gz` were
//! made from `fixtures/journal.export` (systemd's export format: two
//! boots, PID 1's unit messages, one 2,000-byte message that journald
//! compresses, a `Startup finished` line) with systemd 252's own writer:
//! `/lib/systemd/systemd-journal-remote -o compact.journal - <journal.export`
//! (compact is systemd 252's default) and the same with
//! `SYSTEMD_JOURNAL_COMPACT=0`, then `gzip -9`.

use std::io::Read;

use bootscope_model::journal::{self, boot_units, units::FIELDS, Limits};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

const BOOT: [u8; 16] = [
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
];

fn check_fixture(name: &str, compact: bool) {
    let bytes = fixture(name);
    let file = journal::parse(&bytes, FIELDS, &Limits::default()).unwrap();
    assert_eq!(file.compact, compact);
    assert_eq!(file.entries.len(), 8, "{name}");
    assert_eq!(file.tail_boot_id, BOOT);
    // journald compressed the long message; nothing else was skipped.
    assert_eq!(file.skipped.compressed, 1, "{:?}", file.skipped);
    assert_eq!(file.skipped.bad_items, 0);
    assert_eq!(file.skipped.stopped_at, None);
    let seq: Vec<u64> = file.entries.iter().map(|e| e.seqnum).collect();
    assert_eq!(seq, (1..=8).collect::<Vec<_>>());

    let boot = boot_units(&file.entries, None).unwrap();
    assert_eq!(boot.boot_id, BOOT);
    assert_eq!(boot.boots_seen, 2);
    assert_eq!(boot.entries, 7);
    assert_eq!(boot.init_run_us, Some(900), "the kernel's own time");
    assert_eq!(boot.systemd_start_us, Some(1400));
    assert_eq!(boot.systemd_version.as_deref(), Some("252.39-1~deb12u2"));
    let names: Vec<&str> = boot.units.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["a.service", "multi-user.target"]);
    assert_eq!(boot.units[0].starting_us, Some(2000));
    assert_eq!(boot.units[0].done_us, Some(3000));
    assert_eq!(boot.units[0].result, "done");
    assert_eq!(boot.units[1].starting_us, None);
    let startup = boot.startup.unwrap();
    assert_eq!(startup.kernel_us, 1_000_000);
    assert_eq!(startup.userspace_us, 2_000_000);
    assert_eq!(startup.initrd_us, None);
    assert_eq!(startup.at_us, 4000);
}

#[test]
fn compact_file_from_systemd_reads_whole() {
    check_fixture("compact.journal.gz", true);
}

#[test]
fn regular_file_from_systemd_reads_whole() {
    check_fixture("regular.journal.gz", false);
}

#[test]
fn not_a_journal_is_an_error_and_nothing_else_is() {
    assert_eq!(
        journal::parse(b"", FIELDS, &Limits::default()).unwrap_err(),
        journal::JournalError::Signature
    );
    let mut bytes = fixture("compact.journal.gz");
    bytes[12] |= 0x80;
    assert!(matches!(
        journal::parse(&bytes, FIELDS, &Limits::default()),
        Err(journal::JournalError::Incompatible(_))
    ));
    let mut bytes = fixture("compact.journal.gz");
    bytes[88..96].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        journal::parse(&bytes, FIELDS, &Limits::default()),
        Err(journal::JournalError::Header { .. })
    ));
}

/// Every prefix of a real file reads without a panic, and never yields
/// more entries than a longer prefix.
#[test]
fn truncated_files_read_what_they_hold() {
    let bytes = fixture("regular.journal.gz");
    let used = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    let mut last = 0;
    for len in (0..=used).step_by(8) {
        let n = journal::parse(&bytes[..len], FIELDS, &Limits::default())
            .map(|f| f.entries.len())
            .unwrap_or(0);
        assert!(n >= last, "prefix {len}: {n} entries after {last}");
        last = n;
    }
    assert_eq!(last, 8);
}

/// Every 8-byte word of a real file that holds something (the header, the
/// objects; not the zeroed room of its hash tables) set to hostile values:
/// never a panic, never more entries than the file has.
#[test]
fn corrupted_words_are_skipped_not_followed() {
    let mut bytes = fixture("compact.journal.gz");
    let words: Vec<usize> = (0..bytes.len() / 8)
        .map(|w| w * 8)
        .filter(|&at| at < 256 || bytes[at..at + 8] != [0; 8])
        .collect();
    assert!(words.len() > 100, "{} words", words.len());
    for at in words {
        let clean: [u8; 8] = bytes[at..at + 8].try_into().unwrap();
        for value in [
            0u64,
            1,
            7,
            8,
            15,
            16,
            u64::MAX,
            u64::MAX / 2,
            0x10_0000_0000,
            at as u64,
        ] {
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
            if let Ok(file) = journal::parse(&bytes, FIELDS, &Limits::default()) {
                assert!(file.entries.len() <= 8, "word {at} = {value:#x}");
                let _ = boot_units(&file.entries, None);
            }
        }
        bytes[at..at + 8].copy_from_slice(&clean);
    }
}

#[test]
fn limits_bound_what_is_kept() {
    let bytes = fixture("regular.journal.gz");
    let limits = Limits {
        max_entries: 3,
        ..Limits::default()
    };
    let file = journal::parse(&bytes, FIELDS, &limits).unwrap();
    assert_eq!(file.entries.len(), 3);
    assert_eq!(file.skipped.over_limit, 5);
    let limits = Limits {
        max_field_bytes: 8,
        ..Limits::default()
    };
    let file = journal::parse(&bytes, FIELDS, &limits).unwrap();
    assert!(file.skipped.long_fields > 0);
    assert!(file
        .entries
        .iter()
        .flat_map(|e| &e.fields)
        .all(|(_, v)| v.len() <= 8));
}
