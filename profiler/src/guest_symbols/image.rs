//! A kernel image as the guest runs it: a bzImage's payload decompressed
//! (xz or gzip, with maintained crates), or an ELF vmlinux as it is. Takes
//! bytes and returns bytes, so that whatever else must unpack a bzImage
//! can share it.

use std::io::Read;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use super::kallsyms::KernelSymbol;

/// A decompressed kernel (ELF) and where its loaded sections lie.
pub struct KernelImage {
    elf: Vec<u8>,
    /// Loaded sections: link-time address, size, file offset.
    sections: Vec<(u64, u64, u64)>,
    text_start: Option<u64>,
}

/// The contents of the ELF section `name` of the file at `path`, reading
/// only the ELF's headers and that section (not a whole 60 MB image).
/// None: not an ELF, or no such section.
pub fn file_section(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let data = elf.section_by_name(name)?.data().ok()?;
    Some(data.to_vec())
}

/// bzImage header fields (Documentation/arch/x86/boot.rst).
const SETUP_SECTS: usize = 0x1f1;
const HEADER_MAGIC: usize = 0x202;
const PAYLOAD_OFFSET: usize = 0x248;
const PAYLOAD_LENGTH: usize = 0x24c;

/// The ELF inside a bzImage: its payload, decompressed.
pub fn bzimage_payload(b: &[u8]) -> Result<Vec<u8>, String> {
    let u32_at = |at: usize| {
        b.get(at..at + 4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap_or_default()) as usize)
    };
    let sects = match b.get(SETUP_SECTS) {
        Some(0) => 4,
        Some(&n) => usize::from(n),
        None => return Err("it is too short for a bzImage header".into()),
    };
    let (Some(off), Some(len)) = (u32_at(PAYLOAD_OFFSET), u32_at(PAYLOAD_LENGTH)) else {
        return Err("its bzImage header is cut short".into());
    };
    let start = (sects + 1) * 512 + off;
    let payload = b
        .get(start..start + len)
        .ok_or("its bzImage payload lies outside the file")?;
    let mut out = Vec::new();
    let res = if payload.starts_with(b"\xfd7zXZ\0") {
        xz2::read::XzDecoder::new(payload).read_to_end(&mut out)
    } else if payload.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(payload).read_to_end(&mut out)
    } else {
        return Err(
            "its bzImage payload is neither xz nor gzip (other compressions are not read)".into(),
        );
    };
    // A payload may carry trailing bytes after the stream.
    if out.is_empty() {
        if let Err(e) = res {
            return Err(format!("its bzImage payload does not decompress: {e}"));
        }
    }
    Ok(out)
}

impl KernelImage {
    /// None: neither an ELF file nor a bzImage. Some(Err): one that cannot
    /// be read as a kernel.
    pub fn parse(b: &[u8]) -> Option<Result<Self, String>> {
        if b.starts_with(b"\x7fELF") {
            Some(Self::from_elf(b.to_vec()))
        } else if b.get(HEADER_MAGIC..HEADER_MAGIC + 4) == Some(b"HdrS") {
            Some(bzimage_payload(b).and_then(Self::from_elf))
        } else {
            None
        }
    }

    /// A kernel ELF (decompressed, the bytes a VMM loads).
    pub fn from_elf(elf: Vec<u8>) -> Result<Self, String> {
        let file =
            object::File::parse(&*elf).map_err(|e| format!("not a readable ELF file ({e})"))?;
        let mut sections = Vec::new();
        let mut text_start = None;
        for s in file.sections() {
            let Some((off, size)) = s.file_range() else {
                continue;
            };
            if s.address() == 0 {
                continue;
            }
            if s.name() == Ok(".text") {
                text_start = Some(s.address());
            }
            sections.push((s.address(), size, off));
        }
        if sections.is_empty() {
            return Err("an ELF file with no loaded sections".into());
        }
        drop(file);
        Ok(KernelImage {
            elf,
            sections,
            text_start,
        })
    }

    /// The decompressed ELF.
    pub fn bytes(&self) -> &[u8] {
        &self.elf
    }

    /// The link-time address of `.text`.
    pub fn text_start(&self) -> Option<u64> {
        self.text_start
    }

    /// Up to `n` bytes at a link-time address (None outside the sections).
    pub fn at(&self, addr: u64, n: usize) -> Option<&[u8]> {
        let &(start, size, off) = self
            .sections
            .iter()
            .find(|(s, len, _)| (*s..s + len).contains(&addr))?;
        let from = (off + addr - start) as usize;
        let to = (off + size) as usize;
        self.elf.get(from..to.min(from + n))
    }

    /// The contents of the ELF section `name` (`.BTF`: the kernel's type
    /// information), if the image has it.
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        let file = object::File::parse(&*self.elf).ok()?;
        let data = file.section_by_name(name)?.data().ok()?;
        // The same bytes, borrowed from the image rather than the parse.
        let start = data.as_ptr() as usize - self.elf.as_ptr() as usize;
        self.elf.get(start..start + data.len())
    }

    /// The ELF's own symbol table (an unstripped vmlinux), if it has one.
    pub fn elf_symbols(&self) -> Option<Vec<KernelSymbol>> {
        let file = object::File::parse(&*self.elf).ok()?;
        let out: Vec<KernelSymbol> = file
            .symbols()
            .filter(|s| s.address() != 0)
            .filter_map(|s| {
                let kind = match (s.kind(), s.is_global()) {
                    (SymbolKind::Text, true) => 'T',
                    (SymbolKind::Text, false) => 't',
                    (SymbolKind::Data, true) => 'D',
                    (SymbolKind::Data, false) => 'd',
                    _ => return None,
                };
                Some(KernelSymbol {
                    addr: s.address(),
                    kind,
                    name: s.name().ok()?.to_string(),
                })
            })
            .collect();
        (!out.is_empty()).then_some(out)
    }
}
