//! What a hostile guest can leave on its disk: crafted superblocks, a
//! record inode claiming a terabyte, oversized records, tens of thousands
//! of chained units, a record whose clock wraps. Images are the committed
//! `testdata/record.img` with bytes patched (how it was made:
//! `testdata/README.md`), or made here with mkfs.ext4.

use std::io::Write as _;

use super::image::{self, ReadStats, MAX_BLOCK_GROUPS, MAX_RECORD_BYTES};
use super::record::{parse, RecordError, MAX_UNITS};
use super::*;
use bootscope_model::units::ChainLink;

const IMAGE: &[u8] = include_bytes!("testdata/record.img");
const RECORD: &str = include_str!("testdata/debian12-units.txt");
/// The record's inode in `record.img` (`debugfs -R 'stat ...'`).
const RECORD_INODE: usize = 15;

fn get32(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn set32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Sets a 32-bit superblock field (`at`: its offset in the superblock).
fn sb32(img: &mut [u8], at: usize, v: u32) {
    set32(img, 1024 + at, v);
}

/// Where an inode lies in the image (one block group, 32-byte descriptors).
fn inode_offset(img: &[u8], ino: usize) -> usize {
    let sb = &img[1024..2048];
    let block = 1024 << get32(sb, 0x18);
    let inode_size = usize::from(u16::from_le_bytes([sb[0x58], sb[0x59]]));
    let descriptors = (get32(sb, 0x14) + 1) * block;
    get32(img, descriptors + 8) * block + (ino - 1) * inode_size
}

/// Sets the size the record's inode claims.
fn record_size(img: &mut [u8], size: u64) {
    let at = inode_offset(img, RECORD_INODE);
    set32(img, at + 0x4, size as u32);
    set32(img, at + 0x6c, (size >> 32) as u32);
}

fn read(img: &[u8]) -> (Result<Option<Vec<u8>>, String>, ReadStats) {
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(img).unwrap();
    image::read_file_counted(file, img.len() as u64, RECORD_PATH)
}

fn refused(img: &[u8], why: &str) -> ReadStats {
    let (got, stats) = read(img);
    let e = got.expect_err("refused");
    assert!(e.contains(why), "{e}");
    stats
}

#[test]
fn the_fixture_image_holds_the_record_and_it_is_read_once() {
    let at = inode_offset(IMAGE, RECORD_INODE);
    assert_eq!(get32(IMAGE, at + 4), RECORD.len(), "the record's inode");
    let (got, stats) = read(IMAGE);
    assert_eq!(got.unwrap().unwrap(), RECORD.as_bytes());
    // The record (46 blocks), its directories and the metadata: about
    // the image, not more.
    assert!(stats.bytes <= IMAGE.len() as u64, "{stats:?}");
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(IMAGE).unwrap();
    assert_eq!(read_record_file(file.path()).unwrap().unwrap(), RECORD);
}

#[test]
fn a_4_kib_image_with_a_crafted_superblock_is_refused_before_the_crate() {
    // The fixture's first 4 KiB: its superblock claims 128 KiB.
    let mut img = IMAGE[..4096].to_vec();
    let stats = refused(
        &img,
        "claims 128 blocks of 1024 bytes, more than the image's 4096",
    );
    assert_eq!(stats, ReadStats::default(), "the crate read nothing");
    // 2^32-1 blocks, one group each: 64 GB of descriptors in the crate.
    sb32(&mut img, 0x4, u32::MAX);
    sb32(&mut img, 0x20, 1);
    refused(&img, "claims 4294967295 blocks");
    // Counts that fit 4 KiB, but one block a group.
    sb32(&mut img, 0x4, 4);
    refused(&img, "1 blocks per group");
    // A superblock that holds together in 4 KiB: the crate finds nothing
    // (its descriptors and inodes are not there), and says so.
    sb32(&mut img, 0x20, 8);
    sb32(&mut img, 0x0, 16);
    let (got, stats) = read(&img);
    assert!(!matches!(got, Ok(Some(_))), "{got:?}");
    assert!(stats.bytes <= 4096 * 4, "{stats:?}");
    // Not ext4 at all (no magic, or shorter than a superblock): no record.
    assert_eq!(read(&[0; 4096]).0, Ok(None));
    assert_eq!(read(&IMAGE[..1500]).0, Ok(None));
}

#[test]
fn blocks_count_2_32_minus_1_and_other_implausible_superblocks_are_refused() {
    let patched = |at: usize, v: u32| {
        let mut img = IMAGE.to_vec();
        sb32(&mut img, at, v);
        img
    };
    refused(&patched(0x4, u32::MAX), "claims 4294967295 blocks");
    refused(&patched(0x150, u32::MAX), "more than the image's");
    refused(&patched(0x4, 129), "claims 129 blocks");
    assert!(
        read(&patched(0x4, 128)).0.unwrap().is_some(),
        "exactly the image"
    );
    refused(&patched(0x18, 7), "block size is 2^17");
    refused(&patched(0x18, u32::MAX), "block size");
    refused(&patched(0x20, 7), "7 blocks per group");
    refused(&patched(0x20, 8193), "8193 blocks per group");
    refused(&patched(0x14, 5), "first data block is 5");
    refused(&patched(0x28, 0), "0 inodes per group");
    refused(&patched(0x28, 8193), "8193 inodes per group");
    refused(&patched(0x0, 17), "counts 17 inodes");
    let mut img = IMAGE.to_vec();
    img[1024 + 0x58..1024 + 0x5a].copy_from_slice(&100u16.to_le_bytes());
    refused(&img, "inodes are 100 bytes");
    // 64-bit descriptors of 48 bytes.
    let mut img = patched(0x60, get32(IMAGE, 1024 + 0x60) as u32 | 0x80);
    img[1024 + 0xfe..1024 + 0x100].copy_from_slice(&48u16.to_le_bytes());
    refused(&img, "descriptors are 48 bytes");
}

#[test]
fn the_group_count_is_bounded_whatever_the_image_s_size() {
    // 2^20 groups of 8 blocks of 64 KiB: a 512 GiB file system.
    let mut sb = IMAGE[1024..2048].to_vec();
    set32(&mut sb, 0x18, 6);
    set32(&mut sb, 0x14, 0);
    set32(&mut sb, 0x20, 8);
    set32(&mut sb, 0x4, 8 << 20);
    set32(&mut sb, 0x0, 16 << 20);
    let e = image::check_superblock(&sb, u64::MAX).unwrap_err();
    assert!(e.contains(&format!("at most {MAX_BLOCK_GROUPS}")), "{e}");
    // As many as allowed: accepted.
    set32(&mut sb, 0x4, (MAX_BLOCK_GROUPS * 8) as u32);
    set32(&mut sb, 0x0, (MAX_BLOCK_GROUPS * 16) as u32);
    image::check_superblock(&sb, u64::MAX).unwrap();
}

#[test]
fn a_record_inode_claiming_a_terabyte_is_refused_unread() {
    let mut img = IMAGE.to_vec();
    record_size(&mut img, 1 << 40);
    let stats = refused(&img, "is 1099511627776 bytes, more than the 4194304");
    let whole = read(IMAGE).1;
    assert!(
        stats.calls < whole.calls,
        "the record was not read: {stats:?}"
    );
    record_size(&mut img, MAX_RECORD_BYTES + 1);
    refused(&img, "is 4194305 bytes");
    // At the limit it is read (its holes as zeros), and only that.
    record_size(&mut img, MAX_RECORD_BYTES);
    let (got, stats) = read(&img);
    assert_eq!(got.unwrap().unwrap().len() as u64, MAX_RECORD_BYTES);
    assert!(stats.bytes < 2 * MAX_RECORD_BYTES, "{stats:?}");
    // Shorter than its blocks: cut, so the record is truncated.
    record_size(&mut img, 1000);
    let text = String::from_utf8(read(&img).0.unwrap().unwrap()).unwrap();
    assert_eq!(parse(&text), Err(RecordError::Truncated));
}

/// A record of `n` units, each after the one before, the workload last.
fn chained(n: usize) -> String {
    let mut s = String::from(
        "bootscope-units 1\nmarker_value=0x60\nmarker_monotonic_ns=5000000000 5000001000\n[manager]\nUserspaceTimestampMonotonic=1000\nFinishTimestampMonotonic=4000000\n[units]\n",
    );
    for i in 0..n {
        let id = if i + 1 == n {
            WORKLOAD_UNIT.to_string()
        } else {
            format!("u{i}.service")
        };
        let after = i
            .checked_sub(1)
            .map_or(String::new(), |p| format!("u{p}.service"));
        s += &format!("Id={id}\nActiveState=active\nInactiveExitTimestampMonotonic={}\nActiveEnterTimestampMonotonic={}\nAfter={after}\n\n", 1000 + i * 2, 1001 + i * 2);
    }
    s + "[analyze]\n[end]\n"
}

/// The summary is bounded: lines, indentation and bytes.
fn assert_bounded(text: &str) {
    assert!(text.len() < 16 << 10, "{} bytes", text.len());
    assert!(text.lines().count() <= summary::MAX_CHAIN_LINES + 16);
    let indent = text.lines().map(|l| l.len() - l.trim_start().len()).max();
    assert!(indent <= Some(2 + 2 * summary::MAX_INDENT), "{indent:?}");
}

#[test]
fn forty_thousand_chained_units_are_refused_and_the_chain_is_linear() {
    // 5 MB, as the guest writes it: too large.
    let text = chained(40_000);
    assert_eq!(parse(&text), Err(RecordError::TooLarge(text.len())));
    // One unit more than allowed, in far less.
    let mut text = chained(1).replace("[analyze]\n", "");
    text.truncate(text.len() - "[end]\n".len());
    for i in 0..MAX_UNITS {
        text += &format!("Id=u{i}\n\n");
    }
    text += "[end]\n";
    assert_eq!(parse(&text), Err(RecordError::TooManyUnits));
    let fewer = text.replacen("Id=u0\n\n", "", 1);
    assert_eq!(parse(&fewer).unwrap().units.len(), MAX_UNITS);
    // The same chain built directly: one lookup a link, a bounded summary.
    let mut record = parse(&chained(3)).unwrap();
    record.units = (0..40_000)
        .map(|i| record::UnitProps {
            id: format!("u{i}"),
            inactive_exit_us: 1 + 2 * i,
            active_enter_us: 2 + 2 * i,
            after: i
                .checked_sub(1)
                .map(|p| format!("u{p}"))
                .into_iter()
                .collect(),
            ..Default::default()
        })
        .collect();
    record
        .manager
        .insert("FinishTimestampMonotonic".into(), "0".into());
    let (chain, lookups) = chain::critical_chain_counted(&record, "u39999");
    assert_eq!(chain.len(), 40_000);
    assert_eq!(lookups, 39_999);
    let doc = UnitsDoc {
        critical_chain: chain
            .iter()
            .map(|l| ChainLink {
                name: l.name.clone(),
                active_ns: l.activated_us * 1000,
                duration_ns: 1000,
            })
            .collect(),
        units: vec![Default::default(); 40_000],
        ..Default::default()
    };
    let text = summary(&doc, 0);
    assert_bounded(&text);
    assert!(text.contains("… 39968 more units down the chain"), "{text}");
}

#[test]
fn as_many_units_as_allowed_go_on_the_timeline_with_a_bounded_summary() {
    let text = chained(MAX_UNITS);
    let marks = vec![TimelineMark {
        name: bootscope_model::mark::debug_port_mark_name(0x60),
        source: MarkSource::DebugPort,
        t_ns: 9_000_000_000,
        value: Some(0x60),
        vcpu: Some(0),
    }];
    let doc = units_doc(&text, "chained", &marks, None);
    assert_eq!(doc.error, None);
    assert_eq!(doc.units.len(), MAX_UNITS);
    assert_eq!(doc.critical_chain.len(), MAX_UNITS);
    assert_bounded(&summary(&doc, 0));
}

#[test]
fn a_misaligned_record_saturates_instead_of_wrapping() {
    let text = "bootscope-units 1\nmarker_value=0x60\nmarker_monotonic_ns=18446744073709551000 18446744073709551615\n[manager]\nUserspaceTimestampMonotonic=1\nFinishTimestampMonotonic=18446744073709551615\n[units]\nId=bootscope-workload.service\nInactiveExitTimestampMonotonic=1\nActiveEnterTimestampMonotonic=18446744073709551615\n\n[analyze]\nStartup finished in 99999999999999999999h (kernel) + 99999999999999999999h (userspace) = 1s\n[end]\n";
    let marks = vec![TimelineMark {
        name: bootscope_model::mark::debug_port_mark_name(0x60),
        source: MarkSource::DebugPort,
        t_ns: 1000,
        value: Some(0x60),
        vcpu: Some(0),
    }];
    let doc = units_doc(text, "misaligned", &marks, None);
    assert_eq!(doc.error, None);
    assert_eq!(doc.clock.as_ref().unwrap().offset_ns, i64::MIN);
    let unit = &doc.units[0];
    assert_eq!((unit.start_ns, unit.duration_ns), (0, u64::MAX));
    assert_eq!(doc.critical_chain[0].duration_ns, u64::MAX);
    // No first KVM_RUN: no startup comparison; with one, saturated figures.
    assert!(doc.startup.is_none());
    let mut marks = marks;
    marks.push(TimelineMark {
        name: vmm_marks::FIRST_KVM_RUN.into(),
        source: MarkSource::Vmm,
        t_ns: 500,
        value: None,
        vcpu: None,
    });
    let doc = units_doc(text, "misaligned", &marks, None);
    let s = doc.startup.as_ref().unwrap();
    assert_eq!((s.kernel_ns, s.userspace_ns), (u64::MAX, u64::MAX));
    assert_eq!(s.kernel_before_clock_ns, i64::MIN);
    let text = summary(&doc, u64::MAX);
    assert!(text.contains("bootscope-workload.service @0.0 +"), "{text}");
}

#[test]
fn what_the_summary_shows_of_the_guest_s_strings_is_escaped_and_cut() {
    let doc = UnitsDoc {
        systemd_version: "\u{1b}]0;PWN\u{7}".repeat(1000),
        chain_target: "x".repeat(10_000),
        critical_chain: vec![ChainLink {
            name: "a\u{1b}[2J".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let text = summary(&doc, 0);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text}"
    );
    assert!(text.len() < 8 << 10, "{}", text.len());
    let err = UnitsDoc {
        error: Some("\u{1b}[2J".repeat(10_000)),
        ..Default::default()
    };
    let text = summary(&err, 0);
    assert!(!text.contains('\u{1b}') && text.len() < 8 << 10);
}

#[test]
fn units_ids_longer_than_systemd_s_are_refused() {
    let text = chained(2).replace("Id=u0.service", &format!("Id={}", "u".repeat(257)));
    assert!(
        matches!(parse(&text), Err(RecordError::Line { problem, .. }) if problem.contains("257 bytes")),
    );
    let text = chained(2).replace(
        "ActiveState=active",
        &format!("ActiveEnterTimestampMonotonic={}", "9".repeat(100_000)),
    );
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.len() < 200, "{e}");
}

fn timeline(marks: &[TimelineMark]) -> Timeline {
    serde_json::from_value(serde_json::json!({
        "schema": "bootscope.timeline", "version": 2, "clock": "", "vmm": "", "host_kvm": "svm",
        "guest": {"kernel": "k", "kernel_format": "bzimage", "cmdline": "", "memory_bytes": 1, "vcpus": 1},
        "outcome": {"reason": "acpi_power_off", "clean": true, "detail": ""},
        "marks": marks, "phases": derive_phases(marks, None), "kvm_stats": {}
    }))
    .unwrap()
}

#[test]
fn a_hostile_image_after_the_boot_leaves_the_timeline_whole() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(IMAGE).unwrap();
    let probe = RecordProbe::before_boot(file.path());
    // The guest crafts its superblock, then the record's inode.
    let mut img = IMAGE.to_vec();
    sb32(&mut img, 0x4, u32::MAX);
    sb32(&mut img, 0x20, 1);
    let mut big = IMAGE.to_vec();
    record_size(&mut big, 1 << 40);
    for (crafted, why) in [(img, "implausible"), (big, "more than the 4194304")] {
        std::fs::write(file.path(), &crafted).unwrap();
        let marks = vec![TimelineMark {
            name: vmm_marks::FIRST_KVM_RUN.into(),
            source: MarkSource::Vmm,
            t_ns: 500,
            value: None,
            vcpu: None,
        }];
        let mut doc = timeline(&marks);
        let before = serde_json::to_value(&doc).unwrap();
        probe.clone().after_boot(&mut doc, None);
        let units = doc.units.take().unwrap();
        let error = units.error.unwrap();
        assert!(error.contains(why), "{error}");
        assert!(units.units.is_empty() && units.critical_chain.is_empty());
        assert_eq!(serde_json::to_value(&doc).unwrap(), before);
    }
}

#[test]
fn mkfs_images_with_a_journal_and_checksums_read_and_an_oversized_record_is_refused() {
    let Some(mkfs) = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        bootscope_testkit::skip_test!("mkfs.ext4 is missing (apt-get install e2fsprogs)");
    };
    let dir = tempfile::tempdir().unwrap();
    // mkfs.ext4's defaults (a journal, metadata checksums, 64-bit), as
    // `bootscope guest build debian` makes its image.
    for (name, size) in [("small", RECORD.len()), ("big", 5 << 20)] {
        let root = dir.path().join(name);
        std::fs::create_dir_all(root.join("var/lib/bootscope")).unwrap();
        let record = RECORD.repeat(size.div_ceil(RECORD.len()));
        std::fs::write(root.join("var/lib/bootscope/units.txt"), &record[..size]).unwrap();
        let img = dir.path().join(format!("{name}.img"));
        std::fs::File::create(&img)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        let out = std::process::Command::new(mkfs)
            .args(["-q", "-F", "-d"])
            .arg(&root)
            .arg(&img)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let file = std::fs::File::open(&img).unwrap();
        let (got, stats) = image::read_file_counted(file, 16 << 20, RECORD_PATH);
        if size == RECORD.len() {
            assert_eq!(got.unwrap().unwrap(), RECORD.as_bytes());
        } else {
            assert!(got.unwrap_err().contains("is 5242880 bytes, more than"));
            assert!(stats.bytes < 1 << 20, "not read: {stats:?}");
        }
    }
}
