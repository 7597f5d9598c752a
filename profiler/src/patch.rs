//! Patches the offsets of tracepoint fields into the BPF object before it
//! is loaded.
//!
//! The programs that run on every exit, fault or allocation load the fields
//! they need straight from the tracepoint record (`BS_CTX` in
//! bpf/common.bpf.h): no helper call per event. Record layouts differ
//! between kernels and come from the tracefs format files at run time, so
//! each such load is compiled as `dst = *(u64 *)(ctx + BS_PATCH_BASE +
//! slot)` and rewritten here: the offset becomes the field's, the width the
//! field's size, and a field this kernel lacks becomes `dst = 0`. What CO-RE
//! does for kernel structures against BTF, done for records against their
//! format files.

use thiserror::Error;

use crate::le::{u16_at, u32_at, u64_at};

use crate::bpf::BsField;

/// `BS_PATCH_BASE` in bpf/common.h.
pub const PATCH_BASE: i16 = 0x7e00;

/// `enum bs_patch_slot` in bpf/common.h, in order: the (event, field) each
/// slot loads.
pub const PATCH_SLOTS: &[(&str, &str)] = &[
    ("kvm_exit", "exit_reason"),
    ("kvm_exit", "isa"),
    ("kvm_exit", "vcpu_id"),
    ("kvm_userspace_exit", "reason"),
    ("kvm_userspace_exit", "errno"),
    ("kvm_pio", "rw"),
    ("kvm_pio", "port"),
    ("kvm_pio", "size"),
    ("kvm_pio", "val"),
    ("kvm_mmio", "type"),
    ("kvm_mmio", "gpa"),
    ("kvm_msr", "write"),
    ("kvm_msr", "ecx"),
    ("kvm_msr", "exception"),
    ("kvm_cpuid", "function"),
    ("kvm_cpuid", "index"),
    ("kvm_emulate_insn", "failed"),
    ("mm_page_alloc", "pfn"),
    ("mm_page_alloc", "order"),
    ("kvm_exit", "guest_rip"),
    ("kvm_exit", "info2"),
    ("sched_wakeup", "pid"),
    ("sched_wakeup_new", "pid"),
    ("sched_switch", "prev_state"),
    ("sched_switch", "next_pid"),
    ("kvm_mmio", "len"),
    ("kvm_mmio", "val"),
];

/// The slot of an (event, field), if programs load it directly.
pub fn slot_of(event: &str, field: &str) -> Option<usize> {
    PATCH_SLOTS
        .iter()
        .position(|&(e, f)| e == event && f == field)
}

/// The first bytes of a tracepoint record that a program may not read
/// directly (the kernel keeps a pointer to the registers there).
const CTX_RESERVED: u32 = 8;
/// `PERF_MAX_TRACE_SIZE`: a program reads a record below this offset.
const CTX_LIMIT: u32 = 2048;

/// Why a field cannot be loaded straight from its record on this kernel
/// (its programs are then not attached, with this as the reason).
pub fn check_field(event: &str, field: &str, f: BsField) -> Result<(), String> {
    if !matches!(f.size, 1 | 2 | 4 | 8) {
        return Err(format!(
            "its field {field} of the {event} record is {} bytes wide on this kernel; only \
             1, 2, 4 and 8 byte fields are read",
            f.size
        ));
    }
    if f.off % f.size != 0 {
        return Err(format!(
            "its field {field} ({} bytes at offset {}) is not aligned to its size in the \
             {event} record on this kernel",
            f.size, f.off
        ));
    }
    if f.off < CTX_RESERVED || f.off.saturating_add(f.size) > CTX_LIMIT {
        return Err(format!(
            "its field {field} lies at offset {} of the {event} record on this kernel, \
             outside the bytes {CTX_RESERVED}..{CTX_LIMIT} a program may read",
            f.off
        ));
    }
    Ok(())
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PatchError {
    #[error("the BPF object is not a 64-bit little-endian ELF file ({0})")]
    NotElf(&'static str),
    #[error("the BPF object's section headers lie outside it")]
    BadSections,
    #[error("the BPF object loads slot {0} directly, but bootscope knows only {1} slots: the object and the collector disagree (rebuild)")]
    UnknownSlot(usize, usize),
}

/// An ELF object in 8-byte aligned memory, as the object parser wants it.
pub struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    fn new(bytes: &[u8]) -> Self {
        let mut obj = AlignedObject {
            words: vec![0u64; bytes.len().div_ceil(8)],
            len: bytes.len(),
        };
        obj.bytes_mut().copy_from_slice(bytes);
        obj
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: u64 has no invalid bit patterns, so its memory may be
        // viewed and written as bytes; len is at most the vector's byte
        // length.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: as in `bytes_mut`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

/// What `patch` did: instructions rewritten per slot.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PatchReport {
    pub loads: Vec<usize>,
}

const BPF_LDX_MEM_DW: u8 = 0x79;
const BPF_LDX_MEM_W: u8 = 0x61;
const BPF_LDX_MEM_H: u8 = 0x69;
const BPF_LDX_MEM_B: u8 = 0x71;
const BPF_LD_IMM64: u8 = 0x18;
const BPF_ALU64_MOV_K: u8 = 0xb7;
const SHF_EXECINSTR: u64 = 0x4;
const SHT_PROGBITS: u32 = 1;

/// Executable sections of the object: (file offset, size).
fn code_sections(b: &[u8]) -> Result<Vec<(usize, usize)>, PatchError> {
    if b.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(PatchError::NotElf("no ELF magic"));
    }
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err(PatchError::NotElf("not 64-bit little-endian"));
    }
    let shoff = u64_at(b, 0x28).ok_or(PatchError::BadSections)? as usize;
    let shentsize = usize::from(u16_at(b, 0x3a).ok_or(PatchError::BadSections)?);
    let shnum = usize::from(u16_at(b, 0x3c).ok_or(PatchError::BadSections)?);
    if shentsize < 0x40 {
        return Err(PatchError::BadSections);
    }
    let mut out = Vec::new();
    for i in 0..shnum {
        let h = shoff
            .checked_add(i.checked_mul(shentsize).ok_or(PatchError::BadSections)?)
            .ok_or(PatchError::BadSections)?;
        let kind = u32_at(b, h + 4).ok_or(PatchError::BadSections)?;
        let flags = u64_at(b, h + 8).ok_or(PatchError::BadSections)?;
        let off = u64_at(b, h + 0x18).ok_or(PatchError::BadSections)? as usize;
        let size = u64_at(b, h + 0x20).ok_or(PatchError::BadSections)? as usize;
        if kind == SHT_PROGBITS && flags & SHF_EXECINSTR != 0 {
            if off.checked_add(size).is_none_or(|end| end > b.len()) {
                return Err(PatchError::BadSections);
            }
            out.push((off, size));
        }
    }
    Ok(out)
}

/// Rewrites every placeholder load: `fields[slot]` is the field's layout
/// on this kernel, `None` if it lacks the field (or its programs are not
/// attached: the load then reads 0, which the verifier accepts anyway).
/// Every field given must have passed [`check_field`].
pub fn patch(
    object: &[u8],
    fields: &[Option<BsField>],
) -> Result<(AlignedObject, PatchReport), PatchError> {
    let mut obj = AlignedObject::new(object);
    let sections = code_sections(obj.bytes())?;
    let mut report = PatchReport {
        loads: vec![0; PATCH_SLOTS.len()],
    };
    let b = obj.bytes_mut();
    for (start, size) in sections {
        let mut at = start;
        while at + 8 <= start + size {
            let code = b[at];
            if code == BPF_LD_IMM64 {
                // Two slots; the second is not an instruction of its own.
                at += 16;
                continue;
            }
            let off = i16::from_le_bytes([b[at + 2], b[at + 3]]);
            let slot = usize::try_from(i32::from(off) - i32::from(PATCH_BASE)).ok();
            match slot {
                Some(slot) if code == BPF_LDX_MEM_DW && off >= PATCH_BASE => {
                    if slot >= PATCH_SLOTS.len() {
                        return Err(PatchError::UnknownSlot(slot, PATCH_SLOTS.len()));
                    }
                    report.loads[slot] += 1;
                    match fields.get(slot).copied().flatten() {
                        Some(f) => {
                            b[at] = match f.size {
                                1 => BPF_LDX_MEM_B,
                                2 => BPF_LDX_MEM_H,
                                4 => BPF_LDX_MEM_W,
                                _ => BPF_LDX_MEM_DW,
                            };
                            let off = f.off as i16;
                            b[at + 2..at + 4].copy_from_slice(&off.to_le_bytes());
                        }
                        None => {
                            // dst = 0: keep the destination register only.
                            b[at] = BPF_ALU64_MOV_K;
                            b[at + 1] &= 0x0f;
                            b[at + 2..at + 8].fill(0);
                        }
                    }
                }
                _ => {}
            }
            at += 8;
        }
    }
    Ok((obj, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(off: u32, size: u32) -> BsField {
        BsField { off, size }
    }

    #[test]
    fn slots_match_the_c_enum() {
        let header = include_str!("../../bpf/common.h");
        let start = header.find("enum bs_patch_slot {").unwrap();
        let body = &header[start..header[start..].find("};").unwrap() + start];
        let names: Vec<&str> = body
            .lines()
            .skip(1)
            .map(|l| l.trim().trim_end_matches(','))
            .filter(|l| l.starts_with("BS_P_") && *l != "BS_P_COUNT")
            .collect();
        assert_eq!(names.len(), PATCH_SLOTS.len());
        for (name, (event, field)) in names.iter().zip(PATCH_SLOTS) {
            let want = format!("BS_P_{}_{}", event, field).to_uppercase();
            assert_eq!(*name, want);
        }
        assert!(header.contains(&format!("#define BS_PATCH_BASE {:#x}", PATCH_BASE)));
    }

    /// The real object: every slot is loaded somewhere, every placeholder
    /// is rewritten, and nothing else changes.
    #[test]
    fn every_placeholder_in_the_object_is_patched() {
        let object = crate::bpf::OBJECT;
        let fields: Vec<Option<BsField>> = PATCH_SLOTS
            .iter()
            .enumerate()
            .map(|(i, _)| {
                if i == 2 {
                    None
                } else {
                    Some(f(8 + 8 * i as u32, 4))
                }
            })
            .collect();
        let (patched, report) = patch(object, &fields).unwrap();
        assert!(report.loads.iter().all(|&n| n > 0), "{report:?}");
        let after = patched.bytes();
        assert_eq!(after.len(), object.len());
        // Nothing placeholder-like is left, and only the counted
        // instructions changed.
        let (_, again) = patch(after, &fields).unwrap();
        assert!(again.loads.iter().all(|&n| n == 0), "{again:?}");
        let changed = object
            .chunks(8)
            .zip(after.chunks(8))
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(changed, report.loads.iter().sum::<usize>());
    }

    #[test]
    fn a_load_becomes_the_fields_width_and_offset_or_zero() {
        // A minimal ELF: header, one executable section, section headers.
        let code: Vec<u8> = [
            // r2 = *(u64 *)(r1 + BASE + 0)
            [0x79, 0x12, 0x00, 0x7e, 0, 0, 0, 0],
            // r3 = *(u64 *)(r1 + BASE + 1)
            [0x79, 0x13, 0x01, 0x7e, 0, 0, 0, 0],
            // ld_imm64 whose second half looks like a load
            [0x18, 0x01, 0, 0, 0, 0, 0, 0],
            [0x79, 0x12, 0x00, 0x7e, 0, 0, 0, 0],
            // an ordinary load at offset 16: untouched
            [0x79, 0x14, 0x10, 0x00, 0, 0, 0, 0],
            [0x95, 0, 0, 0, 0, 0, 0, 0],
        ]
        .concat();
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        let code_off = elf.len();
        elf.extend_from_slice(&code);
        let shoff = elf.len();
        elf[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        elf.extend_from_slice(&[0u8; 64]); // null section
        let mut sh = [0u8; 64];
        sh[4..8].copy_from_slice(&SHT_PROGBITS.to_le_bytes());
        sh[8..16].copy_from_slice(&(SHF_EXECINSTR | 2).to_le_bytes());
        sh[0x18..0x20].copy_from_slice(&(code_off as u64).to_le_bytes());
        sh[0x20..0x28].copy_from_slice(&(code.len() as u64).to_le_bytes());
        elf.extend_from_slice(&sh);

        let (out, report) = patch(&elf, &[Some(f(24, 2)), None]).unwrap();
        assert_eq!(report.loads[..2], [1, 1]);
        let c = &out.bytes()[code_off..code_off + code.len()];
        assert_eq!(c[0..8], [0x69, 0x12, 24, 0, 0, 0, 0, 0], "u16 at 24");
        assert_eq!(c[8..16], [0xb7, 0x03, 0, 0, 0, 0, 0, 0], "r3 = 0");
        assert_eq!(c[16..32], code[16..32], "ld_imm64 untouched");
        assert_eq!(c[32..48], code[32..48]);

        // A slot the collector does not know is refused.
        let mut bad = elf.clone();
        bad[code_off + 2] = 0x40;
        assert_eq!(
            patch(&bad, &[]).err(),
            Some(PatchError::UnknownSlot(0x40, PATCH_SLOTS.len()))
        );
        assert!(matches!(
            patch(b"not an object", &[]).err(),
            Some(PatchError::NotElf(_))
        ));
    }

    #[test]
    fn fields_that_cannot_be_loaded_directly_are_named() {
        assert!(check_field("kvm_exit", "isa", f(8, 4)).is_ok());
        assert!(check_field("kvm_mmio", "gpa", f(16, 8)).is_ok());
        let e = check_field("kvm_exit", "isa", f(10, 4)).unwrap_err();
        assert!(e.contains("not aligned"), "{e}");
        let e = check_field("kvm_exit", "isa", f(8, 16)).unwrap_err();
        assert!(e.contains("16 bytes wide"), "{e}");
        let e = check_field("kvm_exit", "isa", f(4, 4)).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        // An offset near u32::MAX (a format file says so) does not wrap
        // around into the readable bytes.
        assert!(check_field("kvm_exit", "isa", f(u32::MAX, 1)).is_err());
        assert!(check_field("kvm_exit", "isa", f(u32::MAX - 3, 4)).is_err());
        let e = check_field("kvm_exit", "isa", f(2048, 4)).unwrap_err();
        assert!(e.contains("outside"), "{e}");
    }
}
