//! Where a few `task_struct` fields lie in this kernel, found in its BTF
//! (`/sys/kernel/btf/vmlinux`) by the workspace's BTF reader
//! ([`bootscope_model::btf`]), which indexes the type records in one pass
//! and decodes only the structure asked for.
//!
//! The fault-tail collector reads the thread's fault counters
//! (`task_struct` `min_flt`, `maj_flt`) at offsets given to it as globals,
//! so the object is not relocated against the kernel's BTF (CO-RE): aya's
//! loader parses every type of the 5 MB file into memory for that, the
//! largest part of the profiler's start-up, where this pass only walks the
//! records (a few milliseconds) and keeps nothing but the offsets.

use std::path::Path;

use bootscope_model::btf::{kind, Btf, Layout, Member, Record, MEMBER_BYTES, RECORD_BYTES};

/// A field of a structure: its byte offset and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

/// `task_struct`'s fault counters in this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultCounters {
    pub min_flt: Field,
    pub maj_flt: Field,
}

const COUNTERS: [&str; 2] = ["min_flt", "maj_flt"];

/// `task_struct`'s `min_flt` and `maj_flt` from the BTF at `path`: both
/// must be there, 8-byte integers on byte boundaries, else the reason.
pub fn fault_counters(path: &Path) -> Result<FaultCounters, String> {
    scan(path).map(|(c, _)| c)
}

/// [`fault_counters`] through a record of where they were found (`cache`,
/// a file of the cache directory), verified against the file before use:
/// the same BTF header and length, and at the place recorded a
/// `task_struct` record whose members there are `min_flt` and `maj_flt` at
/// the offsets recorded. That reads a few hundred bytes of the file
/// instead of all of it. A record that does not verify is replaced; one
/// that cannot be written only costs the next profile the whole pass.
pub fn fault_counters_cached(path: &Path, cache: Option<&Path>) -> Result<FaultCounters, String> {
    if let Some(found) = cache.and_then(|c| cached(path, c)) {
        return Ok(found);
    }
    let (found, place) = scan(path)?;
    if let Some(c) = cache {
        let _ = bootscope_model::output::write_file_with_mode(c, place.to_text().as_bytes(), 0o600);
    }
    Ok(found)
}

/// The whole pass over the file, with where the counters were found.
fn scan(path: &Path) -> Result<(FaultCounters, Place), String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = data.len() as u64;
    let header: Option<[u8; 24]> = data.get(..24).and_then(|h| h.try_into().ok());
    let btf = Btf::from_vec(data).map_err(|e| format!("{}: {e}", path.display()))?;
    let (record, fields, members) =
        locate(&btf, "task_struct", &COUNTERS).map_err(|e| format!("{}: {e}", path.display()))?;
    for (name, f) in COUNTERS.iter().zip(&fields) {
        if f.size != 8 {
            return Err(format!(
                "{}: task_struct.{name} is {} bytes, not 8",
                path.display(),
                f.size
            ));
        }
    }
    let place = Place {
        header: header.ok_or_else(|| format!("{}: shorter than a BTF header", path.display()))?,
        len,
        record: record as u64,
        members: [members[0], members[1]],
        offsets: [fields[0].offset, fields[1].offset],
    };
    let counters = FaultCounters {
        min_flt: fields[0],
        maj_flt: fields[1],
    };
    Ok((counters, place))
}

/// The fields `wanted` of the one structure named `name` (a structure
/// declared once: a second definition is refused, not guessed among),
/// with where its record is in the type section and the index of each
/// field among its members.
fn locate(btf: &Btf, name: &str, wanted: &[&str]) -> Result<(usize, Vec<Field>, Vec<u32>), String> {
    let mut ids = btf.ids_named(kind::STRUCT, name);
    let id = ids.next().ok_or_else(|| format!("no struct {name}"))?;
    if ids.next().is_some() {
        return Err(format!("struct {name} is defined more than once"));
    }
    let mut out = Vec::with_capacity(wanted.len());
    let mut indices = Vec::with_capacity(wanted.len());
    for w in wanted {
        let (index, m) = btf
            .member_named(id, w)
            .ok_or_else(|| format!("struct {name} has no member {w}"))?;
        if m.is_bitfield() {
            return Err(format!("{name}.{w} is a bit field"));
        }
        indices.push(index);
        out.push(Field {
            offset: m.bit_offset / 8,
            size: btf.type_size(m.ty)?,
        });
    }
    let record = btf.record_offset(id).unwrap_or(0);
    Ok((record, out, indices))
}

/// Where the counters were found in one BTF file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Place {
    /// The file's first 24 bytes (magic, version, flags, the sections'
    /// offsets and lengths) and its length.
    header: [u8; 24],
    len: u64,
    /// `task_struct`'s record: its byte offset in the type section.
    record: u64,
    /// The counters' member indices and byte offsets.
    members: [u32; 2],
    offsets: [u32; 2],
}

const PLACE_VERSION: &str = "bootscope task_struct fault counters 1";

impl Place {
    fn to_text(&self) -> String {
        let hex: String = self.header.iter().map(|b| format!("{b:02x}")).collect();
        let [m0, m1] = self.members;
        let [o0, o1] = self.offsets;
        format!(
            "{PLACE_VERSION}\n{hex} {} {} {m0} {m1} {o0} {o1}\n",
            self.len, self.record
        )
    }

    fn from_text(text: &str) -> Option<Place> {
        let mut lines = text.lines();
        if lines.next()? != PLACE_VERSION {
            return None;
        }
        let mut w = lines.next()?.split(' ');
        let hex = w.next().filter(|h| h.len() == 48)?;
        let mut header = [0u8; 24];
        for (i, b) in header.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        let mut n = || w.next()?.parse::<u64>().ok();
        let (len, record) = (n()?, n()?);
        let mut small = || u32::try_from(n()?).ok();
        let members = [small()?, small()?];
        let offsets = [small()?, small()?];
        Some(Place {
            header,
            len,
            record,
            members,
            offsets,
        })
    }
}

/// The counters the record at `cache` names, if the BTF at `path` still
/// has them there.
fn cached(path: &Path, cache: &Path) -> Option<FaultCounters> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let (f, _) = bootscope_model::cache::open_file(cache).ok()??;
    let mut text = String::new();
    f.take(4096).read_to_string(&mut text).ok()?;
    let place = Place::from_text(&text)?;
    let file = std::fs::File::open(path).ok()?;
    let read = |at: usize, n: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, at as u64).ok()?;
        Some(buf)
    };
    if file.metadata().ok()?.len() != place.len || read(0, 24)? != place.header {
        return None;
    }
    let layout = Layout::of(&place.header, usize::try_from(place.len).ok()?).ok()?;
    // A range of the type or string section, read from the file.
    let within = |section: &std::ops::Range<usize>, off: usize, n: usize| {
        let at = section.start.checked_add(off)?;
        (at.checked_add(n)? <= section.end).then(|| read(at, n))?
    };
    let record = usize::try_from(place.record).ok()?;
    let head = Record::decode(&within(&layout.types, record, RECORD_BYTES)?)?;
    let name_is = |off: u32, want: &str| {
        within(&layout.strings, off as usize, want.len() + 1)
            .is_some_and(|b| b[..want.len()] == *want.as_bytes() && b[want.len()] == 0)
    };
    if head.kind != kind::STRUCT || !name_is(head.name_off, "task_struct") {
        return None;
    }
    for ((&i, &offset), want) in place.members.iter().zip(&place.offsets).zip(COUNTERS) {
        if i >= head.vlen {
            return None;
        }
        let at = record + RECORD_BYTES + MEMBER_BYTES * i as usize;
        let m = Member::decode(&within(&layout.types, at, MEMBER_BYTES)?, head.kind_flag)?;
        if !name_is(m.name_off, want) || m.bitfield_size != 0 || m.bit_offset != offset * 8 {
            return None;
        }
    }
    let field = |i: usize| Field {
        offset: place.offsets[i],
        size: 8,
    };
    Some(FaultCounters {
        min_flt: field(0),
        maj_flt: field(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use bootscope_testkit::btf::{BtfWriter, KIND_CONST, KIND_TYPEDEF};

    /// 1: unsigned long; 2: int; 3: typedef ulong -> 1; 4: const 3;
    /// 5: task_struct { int pid @0; const ulong min_flt @min_bits; ulong
    /// maj_flt @128 } (bit offsets, with the kind flag: bit field sizes in
    /// the top byte), then what `extra` adds.
    fn task(min_bits: u32, extra: impl FnOnce(&mut BtfWriter)) -> Vec<u8> {
        let mut w = BtfWriter::new();
        let ulong = w.int_named("long unsigned int", 8);
        let int = w.int_named("int", 4);
        let td = w.refer("ulong", KIND_TYPEDEF, ulong);
        let c = w.refer("", KIND_CONST, td);
        let members = [
            ("pid", int, 0),
            ("min_flt", c, min_bits),
            ("maj_flt", ulong, 128),
        ];
        w.composite("task_struct", kind::STRUCT, true, 24, &members);
        extra(&mut w);
        w.finish()
    }

    fn fields(data: &[u8], wanted: &[&str]) -> Result<Vec<Field>, String> {
        locate(&Btf::parse(data)?, "task_struct", wanted).map(|(_, f, _)| f)
    }

    #[test]
    fn the_counters_offsets_through_typedefs_and_qualifiers() {
        let data = task(64, |_| {});
        let found = fields(&data, &["min_flt", "maj_flt", "pid"]).unwrap();
        assert_eq!(
            found,
            [
                Field { offset: 8, size: 8 },
                Field {
                    offset: 16,
                    size: 8
                },
                Field { offset: 0, size: 4 },
            ]
        );
    }

    #[test]
    fn what_cannot_be_trusted_is_refused() {
        let err = |data: &[u8], wanted: &[&str]| fields(data, wanted).unwrap_err();
        assert!(err(&task(60, |_| {}), &["min_flt"]).contains("bit field"));
        assert!(err(&task((4 << 24) | 64, |_| {}), &["min_flt"]).contains("bit field"));
        assert!(err(&task(64, |_| {}), &["exit_code"]).contains("no member exit_code"));
        let twice = |w: &mut BtfWriter| {
            w.record("task_struct", kind::STRUCT, 0, 0);
        };
        assert!(err(&task(64, twice), &["min_flt"]).contains("more than once"));
        let mut cut = task(64, |_| {});
        cut.truncate(cut.len() - 10);
        assert!(err(&cut, &["min_flt"]).contains("past the end"));
        assert!(err(b"\xeb\x9f", &["min_flt"]).contains("magic"));
        assert!(err(b"\x9f\xeb\x01\x00", &["min_flt"]).contains("header cut short"));
        let unknown = |w: &mut BtfWriter| {
            w.raw(&[0, 31 << 24, 0]);
        };
        assert!(err(&task(64, unknown), &["min_flt"]).contains("unknown kind 31"));
    }

    #[test]
    fn a_record_is_used_only_while_the_file_still_has_the_counters_there() {
        let dir = tempfile::tempdir().unwrap();
        let (btf, cache) = (dir.path().join("vmlinux"), dir.path().join("counters"));
        let want = FaultCounters {
            min_flt: Field { offset: 8, size: 8 },
            maj_flt: Field {
                offset: 16,
                size: 8,
            },
        };
        std::fs::write(&btf, task(64, |_| {})).unwrap();
        assert_eq!(fault_counters_cached(&btf, Some(&cache)), Ok(want));
        let text = std::fs::read_to_string(&cache).unwrap();
        let place = Place::from_text(&text).expect("the record reads back");
        assert_eq!(place.to_text(), text);
        assert_eq!(cached(&btf, &cache), Some(want));
        // Another kernel: min_flt elsewhere, the same length and header.
        std::fs::write(&btf, task(128, |_| {})).unwrap();
        assert_eq!(cached(&btf, &cache), None);
        let moved = FaultCounters {
            min_flt: Field {
                offset: 16,
                size: 8,
            },
            ..want
        };
        assert_eq!(fault_counters_cached(&btf, Some(&cache)), Ok(moved));
        assert_eq!(cached(&btf, &cache), Some(moved));
        // Back to the first kernel: its record verifies again, the same
        // naming another member's index does not.
        std::fs::write(&btf, task(64, |_| {})).unwrap();
        std::fs::write(&cache, &text).unwrap();
        assert_eq!(cached(&btf, &cache), Some(want));
        let wrong = text.replace(" 1 2 8 16\n", " 0 2 8 16\n");
        assert_ne!(wrong, text);
        std::fs::write(&cache, wrong).unwrap();
        assert_eq!(cached(&btf, &cache), None);
        std::fs::write(&cache, "garbage").unwrap();
        assert_eq!(fault_counters_cached(&btf, Some(&cache)), Ok(want));
    }

    /// On this machine's kernel, the offsets found are the ones bpftool's
    /// own parse of the same file gives.
    #[test]
    fn this_kernels_counters_match_bpftool() {
        let path = Path::new("/sys/kernel/btf/vmlinux");
        if !path.exists() {
            bootscope_testkit::skip_test!("no {} on this host", path.display());
        }
        let dump = std::process::Command::new("bpftool")
            .args(["btf", "dump", "file"])
            .arg(path)
            .args(["format", "raw"])
            .output();
        let dump = match dump {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => bootscope_testkit::skip_test!("bpftool cannot dump {}", path.display()),
        };
        let c = fault_counters(path).expect("task_struct's fault counters");
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("counters");
        assert_eq!(fault_counters_cached(path, Some(&cache)), Ok(c));
        assert_eq!(cached(path, &cache), Some(c), "the record verifies");
        let members: Vec<&str> = dump
            .lines()
            .skip_while(|l| !l.contains("STRUCT 'task_struct' "))
            .skip(1)
            .take_while(|l| l.starts_with('\t'))
            .collect();
        let bits = |name: &str| -> u32 {
            let line = members
                .iter()
                .find(|l| l.trim_start().starts_with(&format!("'{name}' ")))
                .expect("member in bpftool's dump");
            line.rsplit("bits_offset=").next().unwrap().parse().unwrap()
        };
        assert_eq!(c.min_flt.offset * 8, bits("min_flt"));
        assert_eq!(c.maj_flt.offset * 8, bits("maj_flt"));
    }
}
