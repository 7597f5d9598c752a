//! What the VMM reads of an x86-64 ELF kernel: its entry address, its
//! loadable segments and the Xen notes that name a PVH entry or the guest
//! OS. The headers are parsed by the `object` crate; the same reader serves
//! an ELF `vmlinux` file (probed before loading, through
//! [`object::ReadCache`] so only the headers are read) and the vmlinux
//! decompressed from a bzImage (in memory).

use object::elf::{FileHeader64, ELFCLASS64, ELFMAG, EM_X86_64, PT_LOAD, PT_NOTE};
use object::read::elf::{FileHeader, NoteIterator, ProgramHeader};
use object::{Endianness, ReadRef};

/// ELF note type of the PVH 32-bit entry point (`XEN_ELFNOTE_PHYS32_ENTRY`).
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
/// ELF note type naming the guest OS (`XEN_ELFNOTE_GUEST_OS`).
const XEN_ELFNOTE_GUEST_OS: u32 = 6;
/// Note segments larger than this are not read (a kernel's are a few
/// hundred bytes).
const MAX_NOTE_SEGMENT: u64 = 64 << 10;

/// How the boot vCPU enters the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryMode {
    /// 64-bit Linux boot protocol: long mode, RSI = zero page.
    Linux64,
    /// PVH: 32-bit protected mode, paging off, EBX = `hvm_start_info`.
    Pvh,
}

/// A loadable ELF segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElfSegment {
    pub offset: u64,
    pub paddr: u64,
    pub filesz: u64,
    /// Bytes it occupies in memory (at least `filesz`).
    pub memsz: u64,
}

impl ElfSegment {
    /// The guest-physical bytes it occupies, `[start, end)`.
    pub fn range(&self) -> (u64, u64) {
        (
            self.paddr,
            self.paddr.saturating_add(self.memsz.max(self.filesz)),
        )
    }
}

/// Why an ELF file's headers cannot be read as an x86-64 kernel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfError {
    /// No ELF magic.
    NotElf,
    /// The file header is cut short.
    Truncated,
    /// An ELF32 file.
    Not64,
    /// Byte order or ELF version this reader does not know.
    Unsupported,
    /// For another machine than x86-64.
    WrongMachine(u16),
    /// The program header table lies (partly) outside the file or has
    /// entries of the wrong size.
    ProgramHeaders,
}

/// What an ELF64 x86-64 kernel's headers say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfHeaders {
    pub entry: u64,
    /// Entries in the program header table.
    pub program_headers: usize,
    /// The `PT_LOAD` segments, in header order.
    pub segments: Vec<ElfSegment>,
    /// Its notes name the guest OS as Linux (`XEN_ELFNOTE_GUEST_OS`
    /// "linux", which every x86 vmlinux built with PVH or Xen support
    /// carries): `e_entry` is then the 64-bit `startup_64`.
    pub linux: bool,
    /// The PVH entry address from its notes.
    pub pvh_entry: Option<u64>,
    /// Segments whose file bytes run past the end of the file: their index
    /// in the header table and whether they are loadable.
    pub past_end: Vec<(usize, bool)>,
}

/// Reads the headers and notes of an x86-64 ELF64 kernel from `data` (a
/// byte slice, or a [`object::ReadCache`] over a file).
pub fn read_headers<'d, R: ReadRef<'d>>(data: R) -> Result<ElfHeaders, ElfError> {
    let ident = data.read_bytes_at(0, 5).map_err(|()| ElfError::NotElf)?;
    if ident[..4] != ELFMAG {
        return Err(ElfError::NotElf);
    }
    let len = data.len().map_err(|()| ElfError::Truncated)?;
    if len < std::mem::size_of::<FileHeader64<Endianness>>() as u64 {
        return Err(ElfError::Truncated);
    }
    if ident[4] != ELFCLASS64 {
        return Err(ElfError::Not64);
    }
    let header = FileHeader64::<Endianness>::parse(data).map_err(|_| ElfError::Unsupported)?;
    let endian = header.endian().map_err(|_| ElfError::Unsupported)?;
    let machine = header.e_machine(endian);
    if machine != EM_X86_64 {
        return Err(ElfError::WrongMachine(machine));
    }
    let table = header
        .program_headers(endian, data)
        .map_err(|_| ElfError::ProgramHeaders)?;
    let mut out = ElfHeaders {
        entry: header.e_entry(endian),
        program_headers: table.len(),
        ..ElfHeaders::default()
    };
    for (i, ph) in table.iter().enumerate() {
        let (offset, filesz) = (ph.p_offset(endian), ph.p_filesz(endian));
        let p_type = ph.p_type(endian);
        if offset.saturating_add(filesz) > len {
            out.past_end.push((i, p_type == PT_LOAD));
        }
        match p_type {
            PT_LOAD => out.segments.push(ElfSegment {
                offset,
                paddr: ph.p_paddr(endian),
                filesz,
                memsz: ph.p_memsz(endian),
            }),
            PT_NOTE if filesz <= MAX_NOTE_SEGMENT => {
                if let Ok(Some(notes)) = ph.notes(endian, data) {
                    let found = xen_notes(notes, endian);
                    out.linux |= found.linux;
                    out.pvh_entry = out.pvh_entry.or(found.pvh_entry);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// What a note segment's Xen notes say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XenNotes {
    /// The first guest-OS note says "linux".
    pub linux: bool,
    /// The first PVH entry note's address.
    pub pvh_entry: Option<u64>,
}

/// Walks the notes (up to the first malformed one) for the Xen notes the
/// loader cares about.
fn xen_notes<E: object::Endian>(
    mut notes: NoteIterator<'_, FileHeader64<E>>,
    endian: E,
) -> XenNotes {
    let mut out = XenNotes::default();
    let (mut guest_os_seen, mut pvh_seen) = (false, false);
    while let Ok(Some(note)) = notes.next() {
        if note.name_bytes() != b"Xen\0" {
            continue;
        }
        let desc = note.desc();
        match note.n_type(endian) {
            XEN_ELFNOTE_GUEST_OS if !guest_os_seen => {
                guest_os_seen = true;
                out.linux = desc.starts_with(b"linux");
            }
            XEN_ELFNOTE_PHYS32_ENTRY if !pvh_seen => {
                pvh_seen = true;
                out.pvh_entry = address(desc);
            }
            _ => {}
        }
    }
    out
}

/// A PVH entry note's address: four or eight little-endian bytes.
fn address(desc: &[u8]) -> Option<u64> {
    match desc.len() {
        4 => Some(u64::from(u32::from_le_bytes(desc.try_into().ok()?))),
        8 => Some(u64::from_le_bytes(desc.try_into().ok()?)),
        _ => None,
    }
}

/// The Xen notes in a little-endian note segment's bytes (4-byte aligned).
#[cfg(test)]
pub(crate) fn xen_notes_in(notes: &[u8]) -> XenNotes {
    use object::LittleEndian;
    match NoteIterator::<FileHeader64<LittleEndian>>::new(LittleEndian, 4, notes) {
        Ok(it) => xen_notes(it, LittleEndian),
        Err(_) => XenNotes::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn pvh_elf() -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mini-pvh.elf");
        std::fs::read(path).unwrap()
    }

    #[test]
    fn linux_guest_os_note() {
        let note = |name: &[u8], kind: u32, desc: &[u8]| {
            let mut n = Vec::new();
            n.extend_from_slice(&(name.len() as u32).to_le_bytes());
            n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            n.extend_from_slice(&kind.to_le_bytes());
            n.extend_from_slice(name);
            n.resize(n.len().next_multiple_of(4), 0);
            n.extend_from_slice(desc);
            n.resize(n.len().next_multiple_of(4), 0);
            n
        };
        let mut notes = note(b"Xen\0", 7, b"2.6\0");
        notes.extend(note(b"Xen\0", 6, b"linux\0"));
        let linux = |n: &[u8]| xen_notes_in(n).linux;
        assert!(linux(&notes));
        assert!(!linux(&note(b"Xen\0", 6, b"freebsd\0")));
        assert!(!linux(&note(b"GNU\0", 6, b"linux\0")));
        // The fixture's only note is its PVH entry.
        let fixture = xen_notes_in(&pvh_elf()[0x174..0x188]);
        assert!(!fixture.linux);
        assert_eq!(fixture.pvh_entry, Some(0x100000));
        // The whole file read through its headers says the same.
        let h = read_headers(pvh_elf().as_slice()).unwrap();
        assert_eq!((h.linux, h.pvh_entry), (false, Some(0x100000)));
        assert_eq!(
            (h.entry, h.program_headers, h.segments.len()),
            (0x100000, 2, 1)
        );
        assert!(h.past_end.is_empty());
    }

    #[test]
    fn refuses_what_is_not_an_x86_64_elf64() {
        let elf = pvh_elf();
        assert_eq!(read_headers(&b"plain text"[..]), Err(ElfError::NotElf));
        assert_eq!(read_headers(&elf[..40]), Err(ElfError::Truncated));
        let mut e32 = elf.clone();
        e32[4] = 1;
        assert_eq!(read_headers(e32.as_slice()), Err(ElfError::Not64));
        let mut arm = elf.clone();
        arm[18..20].copy_from_slice(&183u16.to_le_bytes());
        assert_eq!(
            read_headers(arm.as_slice()),
            Err(ElfError::WrongMachine(183))
        );
        // The program header table cut off.
        assert_eq!(read_headers(&elf[..100]), Err(ElfError::ProgramHeaders));
        // Both segments cut off: reported, the notes unread.
        let h = read_headers(&elf[..0x180]).unwrap();
        assert_eq!(h.past_end, vec![(0, true), (1, false)]);
        assert_eq!(h.pvh_entry, None);
    }
}
