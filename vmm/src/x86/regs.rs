//! Boot-time register state: GDT, identity page tables, segment and control
//! registers, general registers, FPU, MSRs and the local APIC's LINT pins.

use kvm_bindings::{
    kvm_fpu, kvm_lapic_state, kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, Msrs,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout;
use crate::loader::EntryMode;

const X86_CR0_PE: u64 = 0x1;
const X86_CR0_ET: u64 = 0x10;
const X86_CR0_PG: u64 = 0x8000_0000;
const X86_CR4_PAE: u64 = 0x20;
const EFER_LME: u64 = 0x100;
const EFER_LMA: u64 = 0x400;

/// GDT selectors: null, code, data, TSS (the layout Firecracker uses).
pub const CODE_SELECTOR: u16 = 0x08;
pub const DATA_SELECTOR: u16 = 0x10;
pub const TSS_SELECTOR: u16 = 0x18;

/// Packs a segment descriptor (flags in the 0xF0FF layout of the access
/// byte and the granularity nibble).
pub const fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((base as u64 & 0xff00_0000) << (56 - 24))
        | ((flags as u64 & 0x0000_f0ff) << 40)
        | ((limit as u64 & 0x000f_0000) << (48 - 16))
        | ((base as u64 & 0x00ff_ffff) << 16)
        | (limit as u64 & 0x0000_ffff)
}

/// The GDT for an entry mode: 64-bit code for the Linux protocol, 32-bit
/// code for PVH.
pub fn gdt(mode: EntryMode) -> [u64; 4] {
    let code = match mode {
        EntryMode::Linux64 => gdt_entry(0xa09b, 0, 0xfffff),
        EntryMode::Pvh => gdt_entry(0xc09b, 0, 0xfffff),
    };
    [
        0,
        code,
        gdt_entry(0xc093, 0, 0xfffff),
        gdt_entry(0x808b, 0, 0xfffff),
    ]
}

/// Unpacks a descriptor into KVM's segment form.
pub fn kvm_segment_from_gdt(entry: u64, table_index: u8) -> kvm_segment {
    let base = ((entry >> 16) & 0x00ff_ffff) | ((entry >> 32) & 0xff00_0000);
    let raw_limit = ((entry & 0xffff) | ((entry >> 32) & 0x000f_0000)) as u32;
    let g = ((entry >> 55) & 1) as u8;
    let limit = if g == 1 {
        (raw_limit << 12) | 0xfff
    } else {
        raw_limit
    };
    kvm_segment {
        base,
        limit,
        selector: u16::from(table_index) * 8,
        type_: ((entry >> 40) & 0xf) as u8,
        present: ((entry >> 47) & 1) as u8,
        dpl: ((entry >> 45) & 3) as u8,
        db: ((entry >> 54) & 1) as u8,
        s: ((entry >> 44) & 1) as u8,
        l: ((entry >> 53) & 1) as u8,
        g,
        avl: ((entry >> 52) & 1) as u8,
        unusable: u8::from(((entry >> 47) & 1) == 0),
        padding: 0,
    }
}

/// Page-table entries identity-mapping the first 4 GiB with 2 MiB pages:
/// (address, value) pairs for the PML4, the PDPT and four page directories.
pub fn identity_page_tables() -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(2 + 4 + 2048);
    // present | writable
    out.push((layout::PML4_START, layout::PDPTE_START | 0x3));
    for i in 0..4u64 {
        out.push((
            layout::PDPTE_START + i * 8,
            (layout::PDE_START + i * 0x1000) | 0x3,
        ));
    }
    for i in 0..2048u64 {
        // present | writable | page size (2 MiB)
        out.push((layout::PDE_START + i * 8, (i << 21) | 0x83));
    }
    out
}

/// Writes GDT, IDT and (for long mode) page tables; returns the special
/// registers that go with them.
pub fn setup_memory_and_sregs(
    mem: &GuestMemoryMmap,
    mode: EntryMode,
    mut sregs: kvm_sregs,
) -> Result<kvm_sregs, vm_memory::GuestMemoryError> {
    let table = gdt(mode);
    for (i, e) in table.iter().enumerate() {
        mem.write_obj(*e, GuestAddress(layout::GDT_START + i as u64 * 8))?;
    }
    mem.write_obj(0u64, GuestAddress(layout::IDT_START))?;
    let code = kvm_segment_from_gdt(table[1], 1);
    let data = kvm_segment_from_gdt(table[2], 2);
    let tss = kvm_segment_from_gdt(table[3], 3);
    sregs.gdt.base = layout::GDT_START;
    sregs.gdt.limit = (table.len() * 8 - 1) as u16;
    sregs.idt.base = layout::IDT_START;
    sregs.idt.limit = 7;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    match mode {
        EntryMode::Linux64 => {
            for (addr, val) in identity_page_tables() {
                mem.write_obj(val, GuestAddress(addr))?;
            }
            sregs.cr3 = layout::PML4_START;
            sregs.cr4 |= X86_CR4_PAE;
            sregs.cr0 |= X86_CR0_PE | X86_CR0_ET | X86_CR0_PG;
            sregs.efer |= EFER_LME | EFER_LMA;
        }
        EntryMode::Pvh => {
            sregs.cr0 = (sregs.cr0 & !X86_CR0_PG) | X86_CR0_PE | X86_CR0_ET;
            sregs.cr4 = 0;
            sregs.efer = 0;
        }
    }
    Ok(sregs)
}

/// General registers at entry.
pub fn boot_regs(mode: EntryMode, entry: u64) -> kvm_regs {
    let mut regs = kvm_regs {
        rflags: 0x2,
        rip: entry,
        ..Default::default()
    };
    match mode {
        EntryMode::Linux64 => {
            regs.rsp = layout::BOOT_STACK_POINTER;
            regs.rbp = layout::BOOT_STACK_POINTER;
            regs.rsi = layout::ZERO_PAGE_START;
        }
        EntryMode::Pvh => {
            regs.rbx = layout::PVH_INFO_START;
        }
    }
    regs
}

/// Default x87/SSE state.
pub fn boot_fpu() -> kvm_fpu {
    kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    }
}

pub const MSR_IA32_SYSENTER_CS: u32 = 0x174;
pub const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
pub const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
pub const MSR_STAR: u32 = 0xc000_0081;
pub const MSR_LSTAR: u32 = 0xc000_0082;
pub const MSR_CSTAR: u32 = 0xc000_0083;
pub const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
pub const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
pub const MSR_IA32_TSC: u32 = 0x10;
pub const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
pub const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
const MISC_ENABLE_FAST_STRING: u64 = 1;
/// MTRRs enabled, default type write-back.
const MTRR_DEF_ENABLE_WB: u64 = (1 << 11) | 6;

/// The MSRs a freshly reset CPU would have, as a boot loader leaves them.
pub fn boot_msr_entries() -> Vec<kvm_msr_entry> {
    let e = |index, data| kvm_msr_entry {
        index,
        data,
        ..Default::default()
    };
    vec![
        e(MSR_IA32_SYSENTER_CS, 0),
        e(MSR_IA32_SYSENTER_ESP, 0),
        e(MSR_IA32_SYSENTER_EIP, 0),
        e(MSR_STAR, 0),
        e(MSR_CSTAR, 0),
        e(MSR_KERNEL_GS_BASE, 0),
        e(MSR_SYSCALL_MASK, 0),
        e(MSR_LSTAR, 0),
        e(MSR_IA32_TSC, 0),
        e(MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING),
        e(MSR_MTRR_DEF_TYPE, MTRR_DEF_ENABLE_WB),
    ]
}

/// Keeps the boot MSRs this KVM supports (from KVM_GET_MSR_INDEX_LIST).
pub fn supported_boot_msrs(supported: &[u32]) -> Result<Msrs, vmm_sys_util::fam::Error> {
    let entries: Vec<_> = boot_msr_entries()
        .into_iter()
        .filter(|e| supported.contains(&e.index))
        .collect();
    Msrs::from_entries(&entries)
}

const APIC_LVT0: usize = 0x350;
const APIC_LVT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

fn lapic_reg(state: &kvm_lapic_state, offset: usize) -> u32 {
    let b = &state.regs[offset..offset + 4];
    u32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

fn set_lapic_reg(state: &mut kvm_lapic_state, offset: usize, value: u32) {
    for (i, b) in value.to_le_bytes().iter().enumerate() {
        state.regs[offset + i] = *b as _;
    }
}

/// Wires LINT0 to ExtINT (the PIC) and LINT1 to NMI, as a BIOS does.
pub fn configure_lint(state: &mut kvm_lapic_state) {
    let set_mode = |reg: u32, mode: u32| (reg & !0x700) | (mode << 8);
    let lvt0 = lapic_reg(state, APIC_LVT0);
    set_lapic_reg(state, APIC_LVT0, set_mode(lvt0, APIC_MODE_EXTINT));
    let lvt1 = lapic_reg(state, APIC_LVT1);
    set_lapic_reg(state, APIC_LVT1, set_mode(lvt1, APIC_MODE_NMI));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdt_entries_match_known_encodings() {
        assert_eq!(gdt_entry(0xa09b, 0, 0xfffff), 0x00af_9b00_0000_ffff);
        assert_eq!(gdt_entry(0xc093, 0, 0xfffff), 0x00cf_9300_0000_ffff);
        assert_eq!(gdt_entry(0xc09b, 0, 0xfffff), 0x00cf_9b00_0000_ffff);
    }

    #[test]
    fn segments_decode() {
        let code64 = kvm_segment_from_gdt(gdt(EntryMode::Linux64)[1], 1);
        assert_eq!(
            (code64.l, code64.db, code64.g, code64.present),
            (1, 0, 1, 1)
        );
        assert_eq!(
            (code64.selector, code64.limit, code64.type_),
            (CODE_SELECTOR, 0xffff_ffff, 0xb)
        );
        let code32 = kvm_segment_from_gdt(gdt(EntryMode::Pvh)[1], 1);
        assert_eq!((code32.l, code32.db), (0, 1));
        let data = kvm_segment_from_gdt(gdt(EntryMode::Pvh)[2], 2);
        assert_eq!((data.selector, data.type_, data.s), (DATA_SELECTOR, 3, 1));
        let tss = kvm_segment_from_gdt(gdt(EntryMode::Pvh)[3], 3);
        assert_eq!(
            (tss.selector, tss.type_, tss.s, tss.unusable),
            (TSS_SELECTOR, 0xb, 0, 0)
        );
        let null = kvm_segment_from_gdt(0, 0);
        assert_eq!(null.unusable, 1);
    }

    #[test]
    fn page_tables_identity_map_4gib() {
        let pt = identity_page_tables();
        assert_eq!(pt[0], (layout::PML4_START, layout::PDPTE_START | 3));
        assert_eq!(pt[1], (layout::PDPTE_START, layout::PDE_START | 3));
        assert_eq!(
            pt[4],
            (layout::PDPTE_START + 24, (layout::PDE_START + 0x3000) | 3)
        );
        let pdes = &pt[5..];
        assert_eq!(pdes.len(), 2048);
        assert_eq!(pdes[0], (layout::PDE_START, 0x83));
        let last = pdes[2047];
        assert_eq!(last.1 & !0xfff, (4u64 << 30) - (2 << 20));
        // Tables must not overlap the command line or the zero page.
        assert!(last.0 < layout::CMDLINE_START);
    }

    #[test]
    fn boot_registers() {
        let r = boot_regs(EntryMode::Linux64, 0x100200);
        assert_eq!(
            (r.rip, r.rsi, r.rsp, r.rflags),
            (
                0x100200,
                layout::ZERO_PAGE_START,
                layout::BOOT_STACK_POINTER,
                2
            )
        );
        let p = boot_regs(EntryMode::Pvh, 0x100000);
        assert_eq!((p.rip, p.rbx, p.rsi), (0x100000, layout::PVH_INFO_START, 0));
    }

    #[test]
    fn msrs_filtered_by_support() {
        let msrs = supported_boot_msrs(&[MSR_IA32_TSC, MSR_LSTAR, 0x1234]).unwrap();
        let idx: Vec<u32> = msrs.as_slice().iter().map(|e| e.index).collect();
        assert_eq!(idx, [MSR_LSTAR, MSR_IA32_TSC]);
        assert!(boot_msr_entries()
            .iter()
            .any(|e| e.index == MSR_MTRR_DEF_TYPE && e.data == 0x806));
    }

    #[test]
    fn lint_pins() {
        let mut s = kvm_lapic_state::default();
        set_lapic_reg(&mut s, APIC_LVT0, 0x0001_0700);
        configure_lint(&mut s);
        assert_eq!(lapic_reg(&s, APIC_LVT0), 0x0001_0700);
        assert_eq!(lapic_reg(&s, APIC_LVT1), 0x400);
    }
}
