//! The guest kernel's loaded modules, read out of guest memory when the
//! guest has stopped (`run --exit-sites`): their names, where their code
//! is, and their symbols, so exit sites in the kernel's module area can be
//! named `function [module]`.
//!
//! The kernel keeps its modules on the list `modules` (a `struct
//! list_head`, found through the kernel's symbol table and KASLR slide as
//! the initcall reader finds `global_trace`), each a `struct module` whose
//! layout comes from the kernel's BTF:
//!
//! - `list` links the modules, `name` is the module's name, `state` skips
//!   those still being loaded (`MODULE_STATE_UNFORMED`);
//! - the core text: `core_layout.base` and `core_layout.text_size` before
//!   Linux 6.4, `mem[MOD_TEXT].base` and `.size` from 6.4 on (`MOD_TEXT` is
//!   the array's first element);
//! - the module's own kallsyms (`kallsyms`, which points at `core_kallsyms`
//!   once the module's init has run): `symtab` (ELF64 symbols whose values
//!   the module loader made runtime addresses), `num_symtab`, `strtab` and
//!   `typetab` (the `t`/`T` type letters `/proc/kallsyms` shows). This
//!   table is exact and needs no `.ko` file.
//!
//! Everything read is checked: the walk is bounded and stops at a loop, an
//! unmapped link or a record that is no module; a module whose symbols
//! cannot be read is listed without them. What was left out is said in
//! [`GuestModules::warnings`].

use std::collections::HashSet;

use bootscope_model::modules::{GuestModule, GuestModules, ModuleSymbol};

use super::btf::Btf;
use super::ringbuffer::VirtMemory;
use super::traced::GuestKernel;
use super::vmcoreinfo::StoppedGuest;

/// The most modules walked: a list longer than this is taken as corrupt.
pub const MAX_MODULES: usize = 4096;
/// The most symbols one module's table may claim (the largest modules
/// have a few thousand).
pub const MAX_MODULE_SYMBOLS: u32 = 1 << 18;
/// The largest core text believed (the largest modules have a few MiB).
const MAX_TEXT: u64 = 256 << 20;
/// `MODULE_NAME_LEN` on 64-bit kernels: `64 - sizeof(unsigned long)`.
const MODULE_NAME_LEN: usize = 56;
/// `KSYM_NAME_LEN`: the longest symbol name kallsyms keeps.
const KSYM_NAME_LEN: usize = 512;
/// `sizeof(Elf64_Sym)`.
const ELF64_SYM: usize = 24;
/// The kernel's half of the address space (x86-64's upper canonical half).
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;
/// `STT_FUNC`, for a table without type letters.
const STT_FUNC: u8 = 2;
/// `enum module_state`'s `MODULE_STATE_UNFORMED`: a module still being
/// set up, which the kernel itself skips.
const MODULE_STATE_UNFORMED: u32 = 3;

/// Where the fields the reader needs sit in `struct module` and `struct
/// mod_kallsyms`, from the kernel's BTF.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleLayout {
    pub state: u64,
    pub list: u64,
    pub name: u64,
    /// The core text's base pointer and its size (`unsigned int`).
    pub text_base: u64,
    pub text_size: u64,
    /// Which layout the kernel has: `core_layout` or `mem[MOD_TEXT]`.
    pub text_fields: &'static str,
    /// None: a kernel without `CONFIG_KALLSYMS` (modules without symbols).
    pub kallsyms: Option<KallsymsLayout>,
}

/// The module's kallsyms pointers and `struct mod_kallsyms`' fields.
#[derive(Clone, Debug, PartialEq)]
pub struct KallsymsLayout {
    /// `struct module`'s `kallsyms` pointer and its `core_kallsyms`.
    pub pointer: u64,
    pub core: u64,
    pub symtab: u64,
    pub num_symtab: u64,
    pub strtab: u64,
    pub typetab: Option<u64>,
}

impl ModuleLayout {
    /// The layout from the kernel's BTF. Err: what the BTF lacks.
    pub fn from_btf(btf: &Btf) -> Result<Self, String> {
        let off = |f: &str| btf.offset_of("module", f);
        let (text_base, text_size, text_fields) = match (off("mem.base"), off("mem.size")) {
            (Ok(b), Ok(s)) => (b, s, "mem[MOD_TEXT]"),
            _ => match (off("core_layout.base"), off("core_layout.text_size")) {
                (Ok(b), Ok(s)) => (b, s, "core_layout"),
                (Err(e), _) | (_, Err(e)) => {
                    return Err(format!(
                        "neither struct module.mem[MOD_TEXT] (Linux 6.4 on) nor \
                         core_layout (before 6.4): {e}"
                    ))
                }
            },
        };
        Ok(Self {
            state: off("state")?,
            list: off("list")?,
            name: off("name")?,
            text_base,
            text_size,
            text_fields,
            kallsyms: KallsymsLayout::from_btf(btf).ok(),
        })
    }
}

impl KallsymsLayout {
    /// The layout from the kernel's BTF. Err: a kernel without
    /// `CONFIG_KALLSYMS`, or another layout.
    fn from_btf(btf: &Btf) -> Result<Self, String> {
        let m = |f: &str| btf.offset_of("module", f);
        let k = |f: &str| btf.offset_of("mod_kallsyms", f);
        Ok(Self {
            pointer: m("kallsyms")?,
            core: m("core_kallsyms")?,
            symtab: k("symtab")?,
            num_symtab: k("num_symtab")?,
            strtab: k("strtab")?,
            typetab: k("typetab").ok(),
        })
    }
}

fn u64_at(mem: &dyn VirtMemory, va: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read(va, &mut b).then(|| u64::from_le_bytes(b))
}

fn u32_at(mem: &dyn VirtMemory, va: u64) -> Option<u32> {
    let mut b = [0u8; 4];
    mem.read(va, &mut b).then(|| u32::from_le_bytes(b))
}

/// The NUL-terminated string at `va`, at most `max` bytes, read a piece at
/// a time so that a short string at the end of a mapping reads.
fn c_string(mem: &dyn VirtMemory, va: u64, max: usize) -> Option<Vec<u8>> {
    const PIECE: u64 = 64;
    let mut out = Vec::new();
    while out.len() < max {
        let at = va.wrapping_add(out.len() as u64);
        let n = (PIECE - at % PIECE) as usize;
        let mut b = vec![0u8; n.min(max - out.len())];
        if !mem.read(at, &mut b) {
            return None;
        }
        if let Some(end) = b.iter().position(|&c| c == 0) {
            out.extend_from_slice(&b[..end]);
            return Some(out);
        }
        out.extend_from_slice(&b);
    }
    None
}

/// A module name as the kernel makes them: letters, digits, `_` and `-`.
fn module_name(raw: &[u8]) -> Option<String> {
    let end = raw.iter().position(|&c| c == 0)?;
    let name = &raw[..end];
    (!name.is_empty()
        && name
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-'))
    .then(|| String::from_utf8_lossy(name).into_owned())
}

/// Reads the module list whose head (`&modules`) is at `head`.
pub fn read(mem: &dyn VirtMemory, layout: &ModuleLayout, head: u64) -> GuestModules {
    let mut out = GuestModules::default();
    let Some(mut link) = u64_at(mem, head) else {
        out.warnings
            .push(format!("the module list's head at {head:#x} is not mapped"));
        return out;
    };
    let mut seen = HashSet::new();
    while link != head {
        if !seen.insert(link) {
            out.warnings.push(format!(
                "the module list loops back to {link:#x} without reaching its head: \
                 read up to there"
            ));
            break;
        }
        if seen.len() > MAX_MODULES {
            out.warnings.push(format!(
                "the module list does not end within {MAX_MODULES} modules: read up to there"
            ));
            break;
        }
        let module = link.wrapping_sub(layout.list);
        match read_module(mem, layout, module) {
            Ok((m, warning)) => {
                out.warnings.extend(warning);
                out.modules.extend(m);
            }
            Err(e) => {
                out.warnings
                    .push(format!("the module list is cut at {link:#x}: {e}"));
                break;
            }
        }
        match u64_at(mem, link) {
            Some(next) => link = next,
            None => {
                out.warnings.push(format!(
                    "the module list is cut at {link:#x}: its link is not mapped"
                ));
                break;
            }
        }
    }
    out.modules.sort_by_key(|m| m.text_base);
    out
}

/// One module at `at` (None: one still being set up, or one whose text
/// makes no sense) and what to warn of (its symbols could not be read, it
/// was left out). Err: no module there.
fn read_module(
    mem: &dyn VirtMemory,
    l: &ModuleLayout,
    at: u64,
) -> Result<(Option<GuestModule>, Option<String>), String> {
    let unmapped = |what: &str, va: u64| format!("the module's {what} at {va:#x} is not mapped");
    let state = u32_at(mem, at + l.state).ok_or_else(|| unmapped("state", at + l.state))?;
    let mut raw = [0u8; MODULE_NAME_LEN];
    if !mem.read(at + l.name, &mut raw) {
        return Err(unmapped("name", at + l.name));
    }
    let name = module_name(&raw).ok_or_else(|| {
        format!(
            "no module name at {:#x} ({:?}): not a module",
            at + l.name,
            String::from_utf8_lossy(&raw[..raw.iter().position(|&c| c == 0).unwrap_or(16)])
        )
    })?;
    if state == MODULE_STATE_UNFORMED {
        return Ok((None, None));
    }
    let text_base =
        u64_at(mem, at + l.text_base).ok_or_else(|| unmapped("text", at + l.text_base))?;
    let text_size = u64::from(
        u32_at(mem, at + l.text_size).ok_or_else(|| unmapped("text size", at + l.text_size))?,
    );
    let mut m = GuestModule {
        name,
        text_base,
        text_size,
        ..GuestModule::default()
    };
    if text_size > MAX_TEXT || text_base < KERNEL_HALF {
        let why = format!(
            "module {}: its text ({text_size} bytes at {text_base:#x}) is not kernel code: \
             left out",
            m.name
        );
        return Ok((None, Some(why)));
    }
    let warning = match &l.kallsyms {
        None => Some(format!(
            "module {}: the kernel keeps no module symbols (CONFIG_KALLSYMS)",
            m.name
        )),
        Some(k) => match symbols(mem, k, at, &m) {
            Ok(s) => {
                m.text_symbols = s.len() as u64;
                m.symbols = s;
                None
            }
            Err(e) => Some(format!("module {}: no symbols: {e}", m.name)),
        },
    };
    Ok((Some(m), warning))
}

/// The text symbols of the module at `at` from its kallsyms, sorted by
/// address (one name per address: the first in the table).
fn symbols(
    mem: &dyn VirtMemory,
    k: &KallsymsLayout,
    at: u64,
    m: &GuestModule,
) -> Result<Vec<ModuleSymbol>, String> {
    let table = u64_at(mem, at + k.pointer)
        .filter(|&p| p != 0)
        .unwrap_or(at + k.core);
    let field = |off: u64| {
        u64_at(mem, table + off).ok_or_else(|| format!("its kallsyms at {table:#x} are not mapped"))
    };
    let symtab = field(k.symtab)?;
    let strtab = field(k.strtab)?;
    let typetab = match k.typetab {
        Some(off) => field(off)?,
        None => 0,
    };
    let count = u32_at(mem, table + k.num_symtab)
        .ok_or_else(|| format!("its kallsyms at {table:#x} are not mapped"))?;
    if count > MAX_MODULE_SYMBOLS {
        return Err(format!("its kallsyms claim {count} symbols"));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let n = count as usize;
    let mut syms = vec![0u8; n * ELF64_SYM];
    if !mem.read(symtab, &mut syms) {
        return Err(format!(
            "its symbol table ({n} symbols at {symtab:#x}) is not mapped"
        ));
    }
    let mut types = vec![0u8; if typetab != 0 { n } else { 0 }];
    if typetab != 0 && !mem.read(typetab, &mut types) {
        return Err(format!("its symbol types at {typetab:#x} are not mapped"));
    }
    let mut out = Vec::new();
    for (i, s) in syms.chunks_exact(ELF64_SYM).enumerate() {
        let name_off = u32::from_le_bytes(s[0..4].try_into().expect("4 bytes"));
        let info = s[4];
        let value = u64::from_le_bytes(s[8..16].try_into().expect("8 bytes"));
        let code = match types.get(i) {
            Some(t) => matches!(t, b't' | b'T' | b'w' | b'W'),
            None => info & 0xf == STT_FUNC,
        };
        if !code || name_off == 0 || !m.holds(value) {
            continue;
        }
        let at = strtab.wrapping_add(u64::from(name_off));
        let name = c_string(mem, at, KSYM_NAME_LEN)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("the name of its symbol {i} at {at:#x} does not read"))?;
        out.push(ModuleSymbol {
            addr: value,
            name: String::from_utf8_lossy(&name).into_owned(),
        });
    }
    out.sort_by_key(|s| s.addr);
    out.dedup_by_key(|s| s.addr);
    Ok(out)
}

/// The loaded modules of a stopped guest (its memory and VMCOREINFO), by
/// the symbols and types of the kernel it booted. Never fails: what could
/// not be read is the list's warning.
pub fn collect(guest: &StoppedGuest, kernel: Result<&dyn GuestKernel, String>) -> GuestModules {
    try_collect(guest, kernel).unwrap_or_else(|e| GuestModules {
        modules: Vec::new(),
        warnings: vec![format!("the guest's modules were not read: {e}")],
    })
}

fn try_collect(
    guest: &StoppedGuest,
    kernel: Result<&dyn GuestKernel, String>,
) -> Result<GuestModules, String> {
    let info = guest.vmcoreinfo().map_err(|e| e.to_string())?;
    let kernel = kernel?;
    let kv = super::kernel_virt(guest.memory(), info).map_err(|e| e.to_string())?;
    let slide = super::kaslr_slide(info, kernel)?;
    let head = kernel.address_of("modules").ok_or(
        "the kernel's symbol table has no `modules` (a kernel without CONFIG_MODULES loads \
         none)",
    )?;
    let btf = Btf::parse(&kernel.btf()?).map_err(|e| format!("the kernel's BTF: {e}"))?;
    let layout = ModuleLayout::from_btf(&btf).map_err(|e| format!("the kernel's BTF has {e}"))?;
    Ok(read(&kv, &layout, head.wrapping_add(slide)))
}

#[cfg(test)]
mod tests;
