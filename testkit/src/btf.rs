//! BTF blobs built for tests (the format: Documentation/bpf/btf.rst):
//! strings, type records and the header, including records no compiler
//! would emit, for the readers' tests of damaged input.

const MAGIC: u16 = 0xeb9f;
pub const KIND_INT: u32 = 1;
pub const KIND_ARRAY: u32 = 3;
pub const KIND_STRUCT: u32 = 4;
pub const KIND_UNION: u32 = 5;
pub const KIND_TYPEDEF: u32 = 8;
pub const KIND_CONST: u32 = 10;

/// Builds a BTF blob: each method appends a type and returns its id.
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

    /// `s` in the string section (0 for the empty name).
    pub fn name(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }

    /// Appends raw 32-bit words to the type section, as one record.
    pub fn raw(&mut self, words: &[u32]) -> u32 {
        for w in words {
            self.types.extend_from_slice(&w.to_le_bytes());
        }
        self.count += 1;
        self.count
    }

    /// A record's header: its name, `kind`, `vlen` and size or type.
    pub fn record(&mut self, name: &str, kind: u32, vlen: u32, size_or_type: u32) -> u32 {
        let n = self.name(name);
        self.raw(&[n, (kind << 24) | vlen, size_or_type])
    }

    /// An 8-byte integer type.
    pub fn int(&mut self) -> u32 {
        self.int_named("long", 8)
    }

    /// An integer type of `bytes` bytes.
    pub fn int_named(&mut self, name: &str, bytes: u32) -> u32 {
        let id = self.record(name, KIND_INT, 0, bytes);
        self.types.extend_from_slice(&(bytes * 8).to_le_bytes());
        id
    }

    /// A typedef or qualifier (`kind`) of `ty`.
    pub fn refer(&mut self, name: &str, kind: u32, ty: u32) -> u32 {
        self.record(name, kind, 0, ty)
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
        let bits: Vec<(&str, u32, u32)> = members.iter().map(|&(m, t, o)| (m, t, o * 8)).collect();
        self.composite(name, KIND_STRUCT, false, size, &bits)
    }

    /// A struct or union (`kind`) with `(name, type, offset word)` members:
    /// the word is the bit offset, with `kind_flag` the bit field's size
    /// in its top byte.
    pub fn composite(
        &mut self,
        name: &str,
        kind: u32,
        kind_flag: bool,
        size: u32,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let n = self.name(name);
        let info = (u32::from(kind_flag) << 31) | (kind << 24) | members.len() as u32;
        let id = self.raw(&[n, info, size]);
        for &(m, ty, word) in members {
            let n = self.name(m);
            for v in [n, ty, word] {
                self.types.extend_from_slice(&v.to_le_bytes());
            }
        }
        id
    }

    /// The blob: header, type section, string section.
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
