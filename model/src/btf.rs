//! The kernel's own type information (BTF, `CONFIG_DEBUG_INFO_BTF`; the
//! format is Documentation/bpf/btf.rst): where a field sits in a kernel
//! structure and how big a type is. The VMM reads a guest kernel's (the
//! trace ring buffer's structures, the module list), the profiler the
//! host's (`task_struct`'s fault counters), both through this one reader.
//!
//! Parsing walks the type section once and keeps where each record starts
//! (4 bytes a type); a record, and a struct's members, are decoded when
//! asked for. Anonymous members (`struct { ... };` inside a struct) are
//! searched through, as C lets a field of one be named directly.
//!
//! A blob is input from outside (a guest's kernel, a file given on the
//! command line): every record must lie inside the type section, names
//! are read within the string section, and every walk is bounded (chains
//! of typedefs and qualifiers, arrays of arrays, the anonymous members
//! searched), so a damaged or crafted blob gives an error naming what is
//! wrong, never a panic, a hang or memory out of proportion to its size.
//!
//! aya's BTF parser keeps its type lookups to itself, and the other BTF
//! crate is LGPL, which this Apache-2.0 workspace does not link statically.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::OnceLock;

pub const MAGIC: u16 = 0xeb9f;
/// The header's fixed part: magic, version, flags, `hdr_len`, and the
/// type and string sections' offsets and lengths.
pub const HEADER_BYTES: usize = 24;
/// A type record's header: name, info, size or type.
pub const RECORD_BYTES: usize = 12;
/// A struct's or union's member: name, type, offset.
pub const MEMBER_BYTES: usize = 12;

/// The kinds of type record (`BTF_KIND_*`).
pub mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const FWD: u32 = 7;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const FLOAT: u32 = 16;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// How many typedefs and qualifiers a type may go through.
const MAX_CHAIN: usize = 32;
/// How many arrays of arrays a path may step into.
const MAX_ARRAY_DEPTH: usize = 8;
/// How deep anonymous members may nest, and how many members one name's
/// search may visit in all (a crafted blob could otherwise nest wide
/// anonymous structs into an exponential search).
const MAX_ANON_DEPTH: usize = 8;
const MAX_MEMBER_VISITS: usize = 1 << 16;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Where the type and string sections lie in a blob of `len` bytes whose
/// header is `header` (at least [`HEADER_BYTES`] of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub types: Range<usize>,
    pub strings: Range<usize>,
}

impl Layout {
    pub fn of(header: &[u8], len: usize) -> Result<Layout, String> {
        let magic = header.get(..2).map(|m| u16::from_le_bytes([m[0], m[1]]));
        match magic {
            None => return Err("shorter than a BTF header".into()),
            Some(MAGIC) => {}
            Some(m) => return Err(format!("not little-endian BTF (magic {m:#06x})")),
        }
        let field = |i: usize| u32_at(header, 4 + 4 * i).ok_or("BTF header cut short");
        let hdr_len = field(0)? as usize;
        if hdr_len < HEADER_BYTES {
            return Err(format!("BTF header length {hdr_len} below {HEADER_BYTES}"));
        }
        let section = |off: u32, n: u32, what: &str| {
            hdr_len
                .checked_add(off as usize)
                .and_then(|s| Some(s..s.checked_add(n as usize)?))
                .filter(|r| r.end <= len)
                .ok_or_else(|| format!("the BTF {what} section lies past the end of the blob"))
        };
        Ok(Layout {
            types: section(field(1)?, field(2)?, "type")?,
            strings: section(field(3)?, field(4)?, "string")?,
        })
    }
}

/// A type record's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub name_off: u32,
    pub kind: u32,
    /// Members, parameters, enumerators or variables that follow.
    pub vlen: u32,
    pub kind_flag: bool,
    /// A size in bytes (ints, structs, unions, enums) or the type referred
    /// to (typedefs, qualifiers, pointers).
    pub size_or_type: u32,
}

impl Record {
    /// The record whose header is the first [`RECORD_BYTES`] of `b`.
    pub fn decode(b: &[u8]) -> Option<Record> {
        let info = u32_at(b, 4)?;
        Some(Record {
            name_off: u32_at(b, 0)?,
            kind: (info >> 24) & 0x1f,
            vlen: info & 0xffff,
            kind_flag: info >> 31 != 0,
            size_or_type: u32_at(b, 8)?,
        })
    }

    /// The bytes that follow the header; None for a kind this reader does
    /// not know (its length is then unknown too).
    pub fn extra_bytes(&self) -> Option<usize> {
        let v = self.vlen as usize;
        Some(match self.kind {
            kind::INT | kind::VAR | kind::DECL_TAG => 4,
            kind::ARRAY => 12,
            kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * v,
            kind::ENUM | kind::FUNC_PROTO => 8 * v,
            kind::PTR | kind::FWD | kind::TYPEDEF..=kind::FUNC | kind::FLOAT | kind::TYPE_TAG => 0,
            _ => return None,
        })
    }

    fn is_composite(&self) -> bool {
        matches!(self.kind, kind::STRUCT | kind::UNION)
    }
}

/// A member of a struct or union.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub name_off: u32,
    pub ty: u32,
    /// From the start of the struct.
    pub bit_offset: u32,
    /// A bit field's width (0: not a bit field, or unknown without the
    /// record's kind flag).
    pub bitfield_size: u32,
}

impl Member {
    /// The member in the first [`MEMBER_BYTES`] of `b`, of a record with
    /// `kind_flag` (then the offset's top byte is the bit field's size).
    pub fn decode(b: &[u8], kind_flag: bool) -> Option<Member> {
        let raw = u32_at(b, 8)?;
        let (bit_offset, bitfield_size) = match kind_flag {
            true => (raw & 0xff_ffff, raw >> 24),
            false => (raw, 0),
        };
        Some(Member {
            name_off: u32_at(b, 0)?,
            ty: u32_at(b, 4)?,
            bit_offset,
            bitfield_size,
        })
    }

    /// Whether the member is a bit field or does not start on a byte.
    pub fn is_bitfield(&self) -> bool {
        self.bitfield_size != 0 || self.bit_offset % 8 != 0
    }
}

/// A parsed BTF blob. Type ids start at 1 (0 is `void`).
#[derive(Debug)]
pub struct Btf {
    data: Vec<u8>,
    layout: Layout,
    /// Where each type's record starts in the type section, by id - 1.
    records: Vec<u32>,
    /// Struct and union ids by name, made at the first lookup by name.
    composites: OnceLock<HashMap<Vec<u8>, Vec<u32>>>,
}

impl Btf {
    /// Parses a little-endian BTF blob (the `.BTF` section of a vmlinux,
    /// or `/sys/kernel/btf/vmlinux`).
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        Self::from_vec(b.to_vec())
    }

    /// [`Btf::parse`], keeping `data` rather than a copy.
    pub fn from_vec(data: Vec<u8>) -> Result<Self, String> {
        let layout = Layout::of(&data, data.len())?;
        let types = &data[layout.types.clone()];
        if u32::try_from(types.len()).is_err() {
            return Err("BTF type section of 4 GiB or more".into());
        }
        let mut records = Vec::with_capacity(types.len() / 16);
        let mut at = 0usize;
        while at < types.len() {
            let id = records.len() + 1;
            let cut = || format!("BTF type {id} at byte {at} is cut short");
            let r = Record::decode(types.get(at..).unwrap_or(&[])).ok_or_else(cut)?;
            let extra = r.extra_bytes().ok_or_else(|| {
                format!("BTF type {id} at byte {at} is of unknown kind {}", r.kind)
            })?;
            let next = at + RECORD_BYTES + extra;
            if next > types.len() {
                return Err(cut());
            }
            records.push(at as u32);
            at = next;
        }
        Ok(Btf {
            data,
            layout,
            records,
            composites: OnceLock::new(),
        })
    }

    fn types(&self) -> &[u8] {
        &self.data[self.layout.types.clone()]
    }

    /// The number of types (not counting `void`).
    pub fn type_count(&self) -> u32 {
        self.records.len() as u32
    }

    /// Where type `id`'s record starts in the type section.
    pub fn record_offset(&self, id: u32) -> Option<usize> {
        let i = id.checked_sub(1)? as usize;
        self.records.get(i).map(|&at| at as usize)
    }

    /// Type `id`'s record (None for `void` and ids past the last).
    pub fn record(&self, id: u32) -> Option<Record> {
        Record::decode(&self.types()[self.record_offset(id)?..])
    }

    /// The string at `off` of the string section (empty past its end).
    pub fn name(&self, off: u32) -> &[u8] {
        let strings = &self.data[self.layout.strings.clone()];
        let rest = strings.get(off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    /// The members of struct or union `id` (none for another kind).
    pub fn members(&self, id: u32) -> impl Iterator<Item = Member> + '_ {
        let found = self
            .record_offset(id)
            .zip(self.record(id))
            .filter(|(_, r)| r.is_composite());
        let (at, vlen, flag) = found.map_or((0, 0, false), |(at, r)| (at, r.vlen, r.kind_flag));
        let types = self.types();
        (0..vlen as usize).filter_map(move |i| {
            Member::decode(&types[at + RECORD_BYTES + MEMBER_BYTES * i..], flag)
        })
    }

    /// The ids of the records of `kind` named `name`, in id order.
    pub fn ids_named<'a>(&'a self, kind: u32, name: &'a str) -> impl Iterator<Item = u32> + 'a {
        (1..=self.type_count()).filter(move |&id| {
            self.record(id)
                .is_some_and(|r| r.kind == kind && self.name(r.name_off) == name.as_bytes())
        })
    }

    /// The type `id` refers to with typedefs and qualifiers taken off
    /// (`void` is id 0); None past a chain of [`MAX_CHAIN`] or an id out
    /// of range.
    pub fn resolve(&self, mut id: u32) -> Option<(u32, Record)> {
        for _ in 0..MAX_CHAIN {
            let r = match id {
                0 => Record::decode(&[0; RECORD_BYTES])?,
                _ => self.record(id)?,
            };
            match r.kind {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = r.size_or_type
                }
                _ => return Some((id, r)),
            }
        }
        None
    }

    /// The size in bytes of type `id` (an integer, enum, struct or union
    /// through typedefs and qualifiers), else why not.
    pub fn type_size(&self, id: u32) -> Result<u32, String> {
        let (rid, r) = self
            .resolve(id)
            .ok_or_else(|| format!("BTF type {id}: out of range or a chain over {MAX_CHAIN}"))?;
        match r.kind {
            kind::INT | kind::STRUCT | kind::UNION | kind::ENUM | kind::ENUM64 | kind::FLOAT => {
                Ok(r.size_or_type)
            }
            k => Err(format!("BTF type {rid} of kind {k} has no size here")),
        }
    }

    /// The struct (or union) named `name` that has members (not a
    /// declaration only), the first such one.
    fn composite(&self, name: &str) -> Option<(u32, Record)> {
        let by_name = self.composites.get_or_init(|| {
            let mut m: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
            for id in 1..=self.type_count() {
                if let Some(r) = self
                    .record(id)
                    .filter(|r| r.is_composite() && r.name_off != 0)
                {
                    m.entry(self.name(r.name_off).to_vec())
                        .or_default()
                        .push(id);
                }
            }
            m
        });
        by_name
            .get(name.as_bytes())?
            .iter()
            .filter_map(|&id| Some((id, self.record(id)?)))
            .find(|(_, r)| r.vlen > 0)
    }

    /// Size in bytes of `struct name`.
    pub fn size_of(&self, name: &str) -> Option<u64> {
        self.composite(name).map(|(_, r)| u64::from(r.size_or_type))
    }

    /// Byte offset of `path` (`a.b.c`: members of members) in `struct
    /// name`; a member of an array's element is that of its first element
    /// (`mem.base` is `mem[0].base`). Err: what is missing, for the
    /// message.
    pub fn offset_of(&self, name: &str, path: &str) -> Result<u64, String> {
        let (mut id, mut t) = self
            .composite(name)
            .ok_or_else(|| format!("struct {name}"))?;
        let mut total = 0u64;
        for part in path.split('.') {
            for _ in 0..MAX_ARRAY_DEPTH {
                if t.kind != kind::ARRAY {
                    break;
                }
                let elem = self
                    .types()
                    .get(self.record_offset(id).unwrap_or(0) + RECORD_BYTES..)
                    .and_then(|b| u32_at(b, 0))
                    .unwrap_or(0);
                (id, t) = self
                    .resolve(elem)
                    .ok_or_else(|| format!("{name}.{path} (array element type)"))?;
            }
            let mut visits = 0;
            let (bits, ty) = self
                .member(id, part, 0, &mut visits)
                .ok_or_else(|| format!("{name}.{path} (no member {part})"))?;
            if bits % 8 != 0 {
                return Err(format!("{name}.{path} (a bit field)"));
            }
            total += bits / 8;
            (id, t) = self
                .resolve(ty)
                .ok_or_else(|| format!("{name}.{path} (type {ty})"))?;
        }
        Ok(total)
    }

    /// The member `field` of composite `id` (searching anonymous members,
    /// within the bounds): its bit offset and type.
    fn member(&self, id: u32, field: &str, depth: usize, visits: &mut usize) -> Option<(u64, u32)> {
        for m in self.members(id) {
            *visits += 1;
            if *visits > MAX_MEMBER_VISITS {
                return None;
            }
            if m.name_off != 0 {
                if self.name(m.name_off) == field.as_bytes() {
                    return Some((u64::from(m.bit_offset), m.ty));
                }
                continue;
            }
            let Some((inner, r)) = self.resolve(m.ty) else {
                continue;
            };
            if r.is_composite() && depth < MAX_ANON_DEPTH {
                if let Some((bits, ty)) = self.member(inner, field, depth + 1, visits) {
                    return Some((u64::from(m.bit_offset) + bits, ty));
                }
            }
        }
        None
    }

    /// Member `field` of struct or union `id` by name (not searching
    /// anonymous members): its index among the members and the member.
    pub fn member_named(&self, id: u32, field: &str) -> Option<(u32, Member)> {
        self.members(id)
            .enumerate()
            .find(|(_, m)| self.name(m.name_off) == field.as_bytes())
            .map(|(i, m)| (i as u32, m))
    }
}

#[cfg(test)]
mod tests;
