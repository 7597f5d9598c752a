//! The guest kernel's own type information (BTF, `CONFIG_DEBUG_INFO_BTF`):
//! where a field sits in a kernel structure, for the structures no
//! VMCOREINFO line describes (the trace ring buffer's).
//!
//! Only what a field's offset needs is read: the type section's records
//! (every kind, to step over them) and, of structs and unions, their
//! members. Anonymous members (`struct { ... };` inside a struct) are
//! searched through, as C lets a field of one be named directly.
//!
//! The format is the kernel's (Documentation/bpf/btf.rst). aya's BTF
//! parser keeps its type lookups to itself, and the other BTF crate is
//! LGPL, which this Apache-2.0 workspace does not link statically.

use std::collections::HashMap;

const MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Clone, Debug)]
struct Member {
    name: u32,
    ty: u32,
    /// Offset in bits from the start of the struct.
    bit_offset: u32,
}

#[derive(Clone, Debug)]
struct Type {
    kind: u32,
    name: u32,
    /// Size in bytes (structs, unions, ints), the type referred to, or an
    /// array's element type.
    size_or_type: u32,
    members: Vec<Member>,
}

/// A parsed BTF blob.
#[derive(Debug)]
pub struct Btf {
    /// Index 0 is `void`.
    types: Vec<Type>,
    strings: Vec<u8>,
    /// Struct and union type ids by name.
    composites: HashMap<String, Vec<u32>>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl Btf {
    /// Parses a little-endian BTF blob (the `.BTF` section of a vmlinux, or
    /// `/sys/kernel/btf/vmlinux`).
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        let magic = b
            .get(0..2)
            .map(|m| u16::from_le_bytes([m[0], m[1]]))
            .ok_or("shorter than a BTF header")?;
        if magic != MAGIC {
            return Err(format!("no BTF magic (found {magic:#06x})"));
        }
        let field = |i: usize| u32_at(b, 4 + 4 * i).ok_or("BTF header cut short");
        let hdr_len = field(0)? as usize;
        let (type_off, type_len) = (field(1)? as usize, field(2)? as usize);
        let (str_off, str_len) = (field(3)? as usize, field(4)? as usize);
        let section = |off: usize, len: usize, what: &str| {
            hdr_len
                .checked_add(off)
                .and_then(|s| Some(s..s.checked_add(len)?))
                .and_then(|r| b.get(r))
                .ok_or(format!("the BTF {what} section lies outside the blob"))
        };
        let type_bytes = section(type_off, type_len, "type")?;
        let strings = section(str_off, str_len, "string")?.to_vec();
        let mut types = vec![Type {
            kind: 0,
            name: 0,
            size_or_type: 0,
            members: Vec::new(),
        }];
        let mut at = 0usize;
        while at < type_bytes.len() {
            let (ty, next) = parse_type(type_bytes, at)
                .ok_or_else(|| format!("BTF type {} at byte {at} is cut short", types.len()))?;
            types.push(ty);
            at = next;
        }
        let mut btf = Btf {
            types,
            strings,
            composites: HashMap::new(),
        };
        for (id, t) in btf.types.iter().enumerate() {
            if matches!(t.kind, KIND_STRUCT | KIND_UNION) && t.name != 0 {
                let name = btf.string(t.name).to_string();
                btf.composites.entry(name).or_default().push(id as u32);
            }
        }
        Ok(btf)
    }

    fn string(&self, off: u32) -> &str {
        let rest = self.strings.get(off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    /// The type `id` refers to with typedefs and qualifiers taken off.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            let t = self.types.get(id as usize)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type;
                }
                _ => return Some(t),
            }
        }
        None
    }

    /// The struct (or union) named `name` that has members (not a
    /// declaration only).
    fn composite(&self, name: &str) -> Option<&Type> {
        self.composites
            .get(name)?
            .iter()
            .map(|&id| &self.types[id as usize])
            .find(|t| !t.members.is_empty())
    }

    /// Size in bytes of `struct name`.
    pub fn size_of(&self, name: &str) -> Option<u64> {
        self.composite(name).map(|t| u64::from(t.size_or_type))
    }

    /// Byte offset of `path` (`a.b.c`: members of members) in `struct
    /// name`; a member of an array's element is that of its first element
    /// (`mem.base` is `mem[0].base`). Err: what is missing, for the
    /// message.
    pub fn offset_of(&self, name: &str, path: &str) -> Result<u64, String> {
        let mut t = self
            .composite(name)
            .ok_or_else(|| format!("struct {name}"))?;
        let mut total = 0u64;
        for part in path.split('.') {
            for _ in 0..8 {
                if t.kind != KIND_ARRAY {
                    break;
                }
                t = self
                    .resolve(t.size_or_type)
                    .ok_or_else(|| format!("{name}.{path} (array element type)"))?;
            }
            let (bits, ty) = self
                .member(t, part)
                .ok_or_else(|| format!("{name}.{path} (no member {part})"))?;
            if bits % 8 != 0 {
                return Err(format!("{name}.{path} (a bit field)"));
            }
            total += u64::from(bits / 8);
            t = self
                .resolve(ty)
                .ok_or_else(|| format!("{name}.{path} (type {ty})"))?;
        }
        Ok(total)
    }

    /// The member `field` of `t` (searching anonymous members): its bit
    /// offset and type.
    fn member(&self, t: &Type, field: &str) -> Option<(u32, u32)> {
        for m in &t.members {
            if m.name != 0 {
                if self.string(m.name) == field {
                    return Some((m.bit_offset, m.ty));
                }
                continue;
            }
            let inner = self.resolve(m.ty)?;
            if matches!(inner.kind, KIND_STRUCT | KIND_UNION) {
                if let Some((bits, ty)) = self.member(inner, field) {
                    return Some((m.bit_offset + bits, ty));
                }
            }
        }
        None
    }
}

/// The type record at `at` and where the next one starts.
fn parse_type(b: &[u8], at: usize) -> Option<(Type, usize)> {
    let name = u32_at(b, at)?;
    let info = u32_at(b, at + 4)?;
    let kind = (info >> 24) & 0x1f;
    let size_or_type = if kind == KIND_ARRAY {
        // struct btf_array: the element type first.
        u32_at(b, at + 12)?
    } else {
        u32_at(b, at + 8)?
    };
    let vlen = (info & 0xffff) as usize;
    let kind_flag = info >> 31 == 1;
    let body = at + 12;
    let extra = match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
        0 | 20.. => return None,
        _ => 0,
    };
    let mut members = Vec::new();
    if matches!(kind, KIND_STRUCT | KIND_UNION) {
        for i in 0..vlen {
            let m = body + 12 * i;
            let offset = u32_at(b, m + 8)?;
            members.push(Member {
                name: u32_at(b, m)?,
                ty: u32_at(b, m + 4)?,
                // With kind_flag the top byte is the bit field's size.
                bit_offset: if kind_flag {
                    offset & 0xff_ffff
                } else {
                    offset
                },
            });
        }
    }
    let next = body + extra;
    (next <= b.len()).then_some((
        Type {
            kind,
            name,
            size_or_type,
            members,
        },
        next,
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds BTF blobs for tests: strings, types, the header.
    #[derive(Default)]
    pub struct BtfWriter {
        strings: Vec<u8>,
        types: Vec<u8>,
        count: u32,
    }

    impl BtfWriter {
        pub fn new() -> Self {
            Self {
                strings: vec![0],
                ..Self::default()
            }
        }

        fn name(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }

        fn record(&mut self, name: &str, kind: u32, vlen: u32, size_or_type: u32) -> u32 {
            let n = self.name(name);
            for v in [n, (kind << 24) | vlen, size_or_type] {
                self.types.extend_from_slice(&v.to_le_bytes());
            }
            self.count += 1;
            self.count
        }

        /// An 8-byte integer type.
        pub fn int(&mut self) -> u32 {
            let id = self.record("long", KIND_INT, 0, 8);
            self.types.extend_from_slice(&(64u32).to_le_bytes());
            id
        }

        /// An array of `n` elements of type `elem`.
        pub fn array(&mut self, elem: u32, n: u32) -> u32 {
            let id = self.record("", KIND_ARRAY, 0, 0);
            for v in [elem, 1, n] {
                self.types.extend_from_slice(&v.to_le_bytes());
            }
            id
        }

        /// A struct with `(name, type, byte offset)` members.
        pub fn strukt(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
            let id = self.record(name, KIND_STRUCT, members.len() as u32, size);
            for &(m, ty, off) in members {
                let n = self.name(m);
                for v in [n, ty, off * 8] {
                    self.types.extend_from_slice(&v.to_le_bytes());
                }
            }
            id
        }

        pub fn finish(&self) -> Vec<u8> {
            let mut b = Vec::new();
            b.extend_from_slice(&MAGIC.to_le_bytes());
            b.extend_from_slice(&[1, 0]);
            let tl = self.types.len() as u32;
            for v in [24u32, 0, tl, tl, self.strings.len() as u32] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&self.types);
            b.extend_from_slice(&self.strings);
            b
        }
    }

    #[test]
    fn finds_fields_through_members_and_anonymous_structs() {
        let mut w = BtfWriter::new();
        let long = w.int();
        let inner = w.strukt("array_buffer", 16, &[("tr", long, 0), ("buffer", long, 8)]);
        let anon = w.strukt("", 8, &[("hidden", long, 0)]);
        // A declaration only: skipped for the full definition.
        w.record("trace_array", KIND_STRUCT, 0, 0);
        w.strukt(
            "trace_array",
            64,
            &[
                ("list", long, 0),
                ("array_buffer", inner, 16),
                ("", anon, 40),
            ],
        );
        let btf = Btf::parse(&w.finish()).unwrap();
        assert_eq!(btf.offset_of("trace_array", "array_buffer.buffer"), Ok(24));
        assert_eq!(btf.offset_of("trace_array", "hidden"), Ok(40));
        assert_eq!(btf.size_of("trace_array"), Some(64));
        let e = btf
            .offset_of("trace_array", "array_buffer.nope")
            .unwrap_err();
        assert!(e.contains("no member nope"), "{e}");
        assert!(btf
            .offset_of("nothing", "x")
            .unwrap_err()
            .contains("struct nothing"));
    }

    #[test]
    fn a_member_of_an_array_is_that_of_its_first_element() {
        let mut w = BtfWriter::new();
        let long = w.int();
        let mem = w.strukt(
            "module_memory",
            16,
            &[("base", long, 0), ("size", long, 12)],
        );
        let arr = w.array(mem, 7);
        w.strukt("module", 200, &[("state", long, 0), ("mem", arr, 64)]);
        let btf = Btf::parse(&w.finish()).unwrap();
        assert_eq!(btf.offset_of("module", "mem.base"), Ok(64));
        assert_eq!(btf.offset_of("module", "mem.size"), Ok(76));
        assert!(btf.offset_of("module", "mem.nope").is_err());
    }

    #[test]
    fn damaged_blobs_are_refused() {
        assert!(Btf::parse(b"").is_err());
        assert!(Btf::parse(&[0u8; 24]).unwrap_err().contains("magic"));
        let mut w = BtfWriter::new();
        let long = w.int();
        w.strukt("s", 8, &[("a", long, 0)]);
        let mut b = w.finish();
        b.truncate(b.len() - 10);
        assert!(Btf::parse(&b).is_err());
        // A type record cut in the middle.
        let mut b = w.finish();
        let tl = u32::from_le_bytes(b[12..16].try_into().unwrap());
        b[12..16].copy_from_slice(&(tl - 4).to_le_bytes());
        assert!(Btf::parse(&b).unwrap_err().contains("cut short"));
    }

    #[test]
    fn reads_the_host_kernel_btf_when_there_is_one() {
        let Ok(b) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            eprintln!("SKIP: no /sys/kernel/btf/vmlinux on this host");
            return;
        };
        let btf = Btf::parse(&b).unwrap();
        // Fields the trace reader needs, in a real kernel's types.
        assert!(btf.offset_of("trace_array", "array_buffer.buffer").is_ok());
        assert!(btf.offset_of("ring_buffer_per_cpu", "head_page").is_ok());
        assert_eq!(btf.offset_of("buffer_data_page", "time_stamp"), Ok(0));
        assert_eq!(btf.offset_of("trace_entry", "type"), Ok(0));
    }
}
