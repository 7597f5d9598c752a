//! The units record a systemd guest leaves on its disk image, read back by
//! the VMM after the guest stopped: the bounded ext4 image reader
//! (`bootscope_vmm::units::image`), the record parser, the units document
//! (alignment, critical chain, systemd's figures), its place on a timeline
//! and the run summary.
//!
//! Input layout, by its first byte:
//! - `0`: the rest is a record (`units.txt`);
//! - `1`: the rest is a whole disk image;
//! - anything else: the rest changes the committed fixture image
//!   (`vmm/src/units/testdata/record.img`, a 128 KiB ext4 file system
//!   holding a real record): a little-endian `u32` gives the image's
//!   length (modulo twice the fixture's plus one: cut, or grown with
//!   zeros), then patches follow, each a little-endian `u32` offset
//!   (modulo the length), a length byte and that many bytes.

use bootscope_model::mark::MarkSource;
use bootscope_model::timeline::Timeline;
use bootscope_vmm::timeline::{vmm_marks, TimelineMark};
use bootscope_vmm::units::{self, image, record, summary, RECORD_PATH};

use crate::memfile::MemFile;

/// The fixture image the patches apply to.
pub const FIXTURE: &[u8] = include_bytes!("../../vmm/src/units/testdata/record.img");

/// The image an input describes (modes 1 and 2).
fn image_of(mode: u8, rest: &[u8]) -> Vec<u8> {
    if mode == 1 {
        return rest.to_vec();
    }
    let Some((len, mut patches)) = rest.split_first_chunk::<4>() else {
        return FIXTURE.to_vec();
    };
    let len = u32::from_le_bytes(*len) as usize % (2 * FIXTURE.len() + 1);
    let mut img = FIXTURE.to_vec();
    img.resize(len, 0);
    while let Some((at, tail)) = patches.split_first_chunk::<4>() {
        let Some((&n, tail)) = tail.split_first() else {
            break;
        };
        let bytes = &tail[..usize::from(n).min(tail.len())];
        patches = &tail[bytes.len()..];
        if img.is_empty() {
            continue;
        }
        let at = u32::from_le_bytes(*at) as usize % img.len();
        let end = (at + bytes.len()).min(img.len());
        img[at..end].copy_from_slice(&bytes[..end - at]);
    }
    img
}

/// The marks of a boot in which the guest wrote 0x60 to port 0x80.
fn marks() -> Vec<TimelineMark> {
    let mark = |name: String, source, t_ns, value| TimelineMark {
        name,
        source,
        t_ns,
        value,
        vcpu: None,
    };
    vec![
        mark(
            vmm_marks::FIRST_KVM_RUN.into(),
            MarkSource::Vmm,
            1_000_000,
            None,
        ),
        mark(
            bootscope_model::mark::debug_port_mark_name(0x60),
            MarkSource::DebugPort,
            9_000_000_000,
            Some(0x60),
        ),
    ]
}

/// A record through the parser, the units document, a timeline and the
/// summary: the units and the summary stay bounded.
fn record_text(text: &str) {
    let parsed = record::parse(text);
    if let Ok(r) = &parsed {
        assert!(r.units.len() <= record::MAX_UNITS);
    }
    let marks = marks();
    let doc = units::units_doc(text, "fuzz", &marks, None);
    if doc.error.is_none() {
        assert!(parsed.is_ok() && doc.clock.is_some());
    }
    assert!(doc.units.len() <= record::MAX_UNITS);
    assert!(doc.critical_chain.len() <= record::MAX_UNITS);
    let text = units::summary(&doc, 1_000_000);
    let lines = text.lines().count();
    assert!(lines <= summary::MAX_CHAIN_LINES + 16, "{lines} lines");
    assert!(text.len() <= 64 << 10, "a summary of {} bytes", text.len());
    let mut timeline = Timeline {
        marks,
        ..Default::default()
    };
    units::apply(&mut timeline, doc, None);
    assert!(timeline.marks.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
}

/// The fuzz target: a record, or a disk image holding one.
pub fn record_or_image(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode == 0 {
        record_text(&String::from_utf8_lossy(rest));
        return;
    }
    let img = image_of(mode, rest);
    let file = MemFile::new(&img);
    let clone = file.file().try_clone().expect("a memfd's descriptor");
    let (got, stats) = image::read_file_counted(clone, img.len() as u64, RECORD_PATH);
    assert!(stats.bytes <= image::READ_BUDGET_BYTES && stats.calls <= image::READ_BUDGET_CALLS);
    if let Ok(Some(bytes)) = got {
        assert!(bytes.len() as u64 <= image::MAX_RECORD_BYTES);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            record_text(text);
        }
    }
}
