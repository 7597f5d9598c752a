//! Where a few `task_struct` fields lie in this kernel, found in its BTF
//! (`/sys/kernel/btf/vmlinux`) by one pass over the type records that
//! decodes only the structure asked for.
//!
//! The fault-tail collector reads the thread's fault counters
//! (`task_struct` `min_flt`, `maj_flt`) at offsets given to it as globals,
//! so the object is not relocated against the kernel's BTF (CO-RE): aya's
//! loader parses every type of the 5 MB file into memory for that, the
//! largest part of the profiler's start-up, where this pass only walks the
//! records (a few milliseconds) and keeps nothing but the offsets.

use std::path::Path;

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

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;
/// How many qualifiers and typedefs a member's type may go through.
const MAX_CHAIN: usize = 16;

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
    let btf = Btf::new(&data).map_err(|e| format!("{}: {e}", path.display()))?;
    let (record, fields, members) = btf
        .locate("task_struct", &COUNTERS)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for (name, f) in COUNTERS.iter().zip(&fields) {
        if f.size != 8 {
            return Err(format!(
                "{}: task_struct.{name} is {} bytes, not 8",
                path.display(),
                f.size
            ));
        }
    }
    let mut header = [0u8; 24];
    header.copy_from_slice(&data[..24]);
    let place = Place {
        header,
        len: data.len() as u64,
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
    let read = |at: u64, n: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, at).ok()?;
        Some(buf)
    };
    if file.metadata().ok()?.len() != place.len || read(0, 24)? != place.header {
        return None;
    }
    let field = |i: usize| u32_at(&place.header, 4 + 4 * i).map(u64::from);
    let (hdr_len, type_off, str_off) = (field(0)?, field(1)?, field(3)?);
    let at = hdr_len + type_off + place.record;
    let head = read(at, 12)?;
    let info = u32_at(&head, 4)?;
    let kind_flag = info >> 31 != 0;
    let name_is = |off: u32, want: &str| {
        read(hdr_len + str_off + u64::from(off), want.len() + 1)
            .is_some_and(|b| b[..want.len()] == *want.as_bytes() && b[want.len()] == 0)
    };
    if (info >> 24) & 0x1f != KIND_STRUCT || !name_is(u32_at(&head, 0)?, "task_struct") {
        return None;
    }
    for ((&i, &offset), want) in place.members.iter().zip(&place.offsets).zip(COUNTERS) {
        if i >= info & 0xffff {
            return None;
        }
        let m = read(at + 12 + 12 * u64::from(i), 12)?;
        let raw = u32_at(&m, 8)?;
        let (bits, bitfield) = match kind_flag {
            true => (raw & 0xff_ffff, raw >> 24),
            false => (raw, 0),
        };
        if !name_is(u32_at(&m, 0)?, want) || bitfield != 0 || bits != offset * 8 {
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

/// One BTF blob's type and string sections.
struct Btf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
}

/// A type record's header.
#[derive(Clone, Copy)]
struct Header {
    name_off: u32,
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    size_or_type: u32,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

impl<'a> Btf<'a> {
    fn new(data: &'a [u8]) -> Result<Self, String> {
        let magic = data.get(..2).map(|m| u16::from_le_bytes([m[0], m[1]]));
        if magic != Some(BTF_MAGIC) {
            return Err("not little-endian BTF (bad magic)".into());
        }
        let field = |i: usize| u32_at(data, 4 + 4 * i).ok_or("BTF header cut short");
        let hdr_len = field(0)? as usize;
        let (type_off, type_len) = (field(1)? as usize, field(2)? as usize);
        let (str_off, str_len) = (field(3)? as usize, field(4)? as usize);
        let section = |off: usize, len: usize, what: &str| {
            hdr_len
                .checked_add(off)
                .and_then(|s| Some(s..s.checked_add(len)?))
                .and_then(|r| data.get(r))
                .ok_or_else(|| format!("BTF {what} section past the end of the file"))
        };
        Ok(Btf {
            types: section(type_off, type_len, "type")?,
            strings: section(str_off, str_len, "string")?,
        })
    }

    fn name(&self, off: u32) -> &'a [u8] {
        let rest = self.strings.get(off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    /// The header at byte `at` of the type section and the offset of the
    /// next record.
    fn header(&self, at: usize) -> Result<(Header, usize), String> {
        let cut = || format!("BTF type record at byte {at} cut short");
        let info = u32_at(self.types, at + 4).ok_or_else(cut)?;
        let h = Header {
            name_off: u32_at(self.types, at).ok_or_else(cut)?,
            kind: (info >> 24) & 0x1f,
            vlen: info & 0xffff,
            kind_flag: info >> 31 != 0,
            size_or_type: u32_at(self.types, at + 8).ok_or_else(cut)?,
        };
        let v = h.vlen as usize;
        let extra = match h.kind {
            0 => return Err(format!("BTF type record at byte {at} of kind 0")),
            KIND_INT | 14 | 17 => 4, // INT, VAR, DECL_TAG
            3 => 12,                 // ARRAY
            KIND_STRUCT | KIND_UNION | 15 | KIND_ENUM64 => 12 * v, // members, DATASEC, ENUM64
            6 | 13 => 8 * v,         // ENUM, FUNC_PROTO
            2 | 7 | 8..=12 | 16 | 18 => 0,
            k => return Err(format!("BTF type record at byte {at} of unknown kind {k}")),
        };
        let next = at + 12 + extra;
        if next > self.types.len() {
            return Err(cut());
        }
        Ok((h, next))
    }

    /// Every record's start, in type id order (id 1 first).
    fn offsets(&self) -> Result<Vec<usize>, String> {
        let mut out = Vec::with_capacity(self.types.len() / 24);
        let mut at = 0;
        while at < self.types.len() {
            out.push(at);
            at = self.header(at)?.1;
        }
        Ok(out)
    }

    /// The byte size of type `id` through typedefs and qualifiers.
    fn size_of(&self, offsets: &[usize], mut id: u32) -> Result<u32, String> {
        for _ in 0..MAX_CHAIN {
            let at = *id
                .checked_sub(1)
                .and_then(|i| offsets.get(i as usize))
                .ok_or_else(|| format!("BTF type id {id} out of range"))?;
            let (h, _) = self.header(at)?;
            match h.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = h.size_or_type
                }
                KIND_INT | KIND_STRUCT | KIND_UNION | 6 | KIND_ENUM64 => return Ok(h.size_or_type),
                k => return Err(format!("BTF type id {id} of kind {k} has no size here")),
            }
        }
        Err(format!("BTF type chain longer than {MAX_CHAIN}"))
    }

    /// The fields `wanted` of the one structure named `name` (a structure
    /// declared once: a second definition is refused, not guessed among).
    #[cfg(test)]
    fn struct_fields(&self, name: &str, wanted: &[&str]) -> Result<Vec<Field>, String> {
        Ok(self.locate(name, wanted)?.1)
    }

    /// The fields `wanted` of the one structure named `name` (a structure
    /// declared once: a second definition is refused, not guessed among),
    /// with where its record is in the type section and the index of each
    /// field among its members.
    fn locate(&self, name: &str, wanted: &[&str]) -> Result<(usize, Vec<Field>, Vec<u32>), String> {
        let offsets = self.offsets()?;
        let mut found: Option<(usize, Header)> = None;
        for &at in &offsets {
            let (h, _) = self.header(at)?;
            if h.kind == KIND_STRUCT && self.name(h.name_off) == name.as_bytes() {
                if found.is_some() {
                    return Err(format!("struct {name} is defined more than once"));
                }
                found = Some((at, h));
            }
        }
        let (at, h) = found.ok_or_else(|| format!("no struct {name}"))?;
        let mut out = Vec::with_capacity(wanted.len());
        let mut indices = Vec::with_capacity(wanted.len());
        for w in wanted {
            let index = (0..h.vlen as usize)
                .find(|&i| {
                    u32_at(self.types, at + 12 + 12 * i)
                        .is_some_and(|n| self.name(n) == w.as_bytes())
                })
                .ok_or_else(|| format!("struct {name} has no member {w}"))?;
            indices.push(index as u32);
            let member = at + 12 + 12 * index;
            let ty = u32_at(self.types, member + 4).unwrap_or(0);
            let raw = u32_at(self.types, member + 8).unwrap_or(0);
            let (bits, bitfield) = if h.kind_flag {
                (raw & 0xff_ffff, raw >> 24)
            } else {
                (raw, 0)
            };
            if bitfield != 0 || bits % 8 != 0 {
                return Err(format!("{name}.{w} is a bit field"));
            }
            out.push(Field {
                offset: bits / 8,
                size: self.size_of(&offsets, ty)?,
            });
        }
        Ok((at, out, indices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of `types` (each record's words) and `strings`.
    fn blob(types: &[Vec<u32>], strings: &[u8]) -> Vec<u8> {
        let t: Vec<u8> = types
            .iter()
            .flatten()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        for w in [24, 0, t.len() as u32, t.len() as u32, strings.len() as u32] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&t);
        out.extend_from_slice(strings);
        out
    }

    const STRINGS: &[u8] = b"\0long unsigned int\0task_struct\0pid\0min_flt\0maj_flt\0int\0ulong\0";
    fn off(s: &str) -> u32 {
        let pos = STRINGS
            .windows(s.len() + 2)
            .position(|w| w[0] == 0 && &w[1..=s.len()] == s.as_bytes() && w[s.len() + 1] == 0)
            .expect("in STRINGS");
        pos as u32 + 1
    }
    fn info(kind: u32, vlen: u32) -> u32 {
        (kind << 24) | vlen
    }

    /// 1: unsigned long; 2: int; 3: typedef ulong -> 1; 4: const 3;
    /// 5: task_struct { int pid @0; const ulong min_flt @64; ulong maj_flt @128 }.
    fn task(min_bits: u32, extra: Vec<Vec<u32>>) -> Vec<u8> {
        let mut types = vec![
            vec![off("long unsigned int"), info(KIND_INT, 0), 8, 64],
            vec![off("int"), info(KIND_INT, 0), 4, 32],
            vec![off("ulong"), info(KIND_TYPEDEF, 0), 1],
            vec![0, info(KIND_CONST, 0), 3],
            vec![
                off("task_struct"),
                info(KIND_STRUCT, 3),
                24,
                off("pid"),
                2,
                0,
                off("min_flt"),
                4,
                min_bits,
                off("maj_flt"),
                1,
                128,
            ],
        ];
        types.extend(extra);
        blob(&types, STRINGS)
    }

    #[test]
    fn the_counters_offsets_through_typedefs_and_qualifiers() {
        let data = task(64, vec![]);
        let fields = Btf::new(&data)
            .unwrap()
            .struct_fields("task_struct", &["min_flt", "maj_flt", "pid"])
            .unwrap();
        assert_eq!(
            fields,
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
        let err = |data: &[u8], fields: &[&str]| {
            Btf::new(data)
                .and_then(|b| b.struct_fields("task_struct", fields))
                .unwrap_err()
        };
        assert!(err(&task(60, vec![]), &["min_flt"]).contains("bit field"));
        assert!(err(&task(64, vec![]), &["exit_code"]).contains("no member exit_code"));
        let twice = vec![vec![off("task_struct"), info(KIND_STRUCT, 0), 0]];
        assert!(err(&task(64, twice), &["min_flt"]).contains("more than once"));
        let mut cut = task(64, vec![]);
        cut.truncate(cut.len() - STRINGS.len() - 4);
        assert!(err(&cut, &["min_flt"]).contains("past the end"));
        assert!(err(b"\xeb\x9f", &["min_flt"]).contains("bad magic"));
        assert!(err(b"\x9f\xeb\x01\x00", &["min_flt"]).contains("header cut short"));
        let unknown = vec![vec![0, info(31, 0), 0]];
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
        std::fs::write(&btf, task(64, vec![])).unwrap();
        assert_eq!(fault_counters_cached(&btf, Some(&cache)), Ok(want));
        let text = std::fs::read_to_string(&cache).unwrap();
        let place = Place::from_text(&text).expect("the record reads back");
        assert_eq!(place.to_text(), text);
        assert_eq!(cached(&btf, &cache), Some(want));
        // Another kernel: min_flt elsewhere, the same length and header.
        std::fs::write(&btf, task(128, vec![])).unwrap();
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
        std::fs::write(&btf, task(64, vec![])).unwrap();
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
