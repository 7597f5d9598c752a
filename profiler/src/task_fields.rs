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

/// `task_struct`'s `min_flt` and `maj_flt` from the BTF at `path`: both
/// must be there, 8-byte integers on byte boundaries, else the reason.
pub fn fault_counters(path: &Path) -> Result<FaultCounters, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let btf = Btf::new(&data).map_err(|e| format!("{}: {e}", path.display()))?;
    let fields = btf
        .struct_fields("task_struct", &["min_flt", "maj_flt"])
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for (name, f) in ["min_flt", "maj_flt"].iter().zip(&fields) {
        if f.size != 8 {
            return Err(format!(
                "{}: task_struct.{name} is {} bytes, not 8",
                path.display(),
                f.size
            ));
        }
    }
    Ok(FaultCounters {
        min_flt: fields[0],
        maj_flt: fields[1],
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
    fn struct_fields(&self, name: &str, wanted: &[&str]) -> Result<Vec<Field>, String> {
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
        for w in wanted {
            let member = (0..h.vlen as usize)
                .map(|i| at + 12 + 12 * i)
                .find(|&m| u32_at(self.types, m).is_some_and(|n| self.name(n) == w.as_bytes()))
                .ok_or_else(|| format!("struct {name} has no member {w}"))?;
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
        Ok(out)
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
