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
use super::phys::PhysMemory;
use super::ringbuffer::VirtMemory;
use super::traced::GuestKernel;

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

/// The loaded modules of a stopped guest: its memory, and the symbols and
/// types of the kernel it booted. Never fails: what could not be read is
/// the list's warning.
pub fn collect(mem: &dyn PhysMemory, kernel: Result<&dyn GuestKernel, String>) -> GuestModules {
    try_collect(mem, kernel).unwrap_or_else(|e| GuestModules {
        modules: Vec::new(),
        warnings: vec![format!("the guest's modules were not read: {e}")],
    })
}

fn try_collect(
    mem: &dyn PhysMemory,
    kernel: Result<&dyn GuestKernel, String>,
) -> Result<GuestModules, String> {
    let info = super::vmcoreinfo::find(mem).map_err(|e| e.to_string())?;
    let kernel = kernel?;
    let kv = super::kernel_virt(mem, &info).map_err(|e| e.to_string())?;
    let slide = super::kaslr_slide(&info, kernel)?;
    let head = kernel.address_of("modules").ok_or(
        "the kernel's symbol table has no `modules` (a kernel without CONFIG_MODULES loads \
         none)",
    )?;
    let btf = Btf::parse(&kernel.btf()?).map_err(|e| format!("the kernel's BTF: {e}"))?;
    let layout = ModuleLayout::from_btf(&btf).map_err(|e| format!("the kernel's BTF has {e}"))?;
    Ok(read(&kv, &layout, head.wrapping_add(slide)))
}

#[cfg(test)]
mod tests {
    use super::super::btf::tests::BtfWriter;
    use super::super::ringbuffer::tests::FlatVirt;
    use super::*;

    /// Where the synthetic kernel's memory starts (the module area).
    const BASE: u64 = 0xffff_ffff_c000_0000;
    /// `&modules`, the list's head.
    const HEAD: u64 = BASE + 0x10;

    /// `struct module` of Linux 6.1 (`core_layout`) or 6.4 on (`mem[]`),
    /// the offsets the real kernels have for the fields read.
    fn btf(new_layout: bool) -> Vec<u8> {
        let mut w = BtfWriter::new();
        let long = w.int();
        let kallsyms = w.strukt(
            "mod_kallsyms",
            32,
            &[
                ("symtab", long, 0),
                ("num_symtab", long, 8),
                ("strtab", long, 16),
                ("typetab", long, 24),
            ],
        );
        let text = if new_layout {
            let m = w.strukt(
                "module_memory",
                16,
                &[("base", long, 0), ("is_rox", long, 8), ("size", long, 12)],
            );
            ("mem", w.array(m, 7), 320)
        } else {
            let l = w.strukt(
                "module_layout",
                80,
                &[
                    ("base", long, 0),
                    ("size", long, 8),
                    ("text_size", long, 12),
                ],
            );
            ("core_layout", l, 320)
        };
        w.strukt(
            "module",
            1024,
            &[
                ("state", long, 0),
                ("list", long, 8),
                ("name", long, 24),
                text,
                ("kallsyms", long, 600),
                ("core_kallsyms", kallsyms, 608),
            ],
        );
        w.finish()
    }

    fn layout(new_layout: bool) -> ModuleLayout {
        ModuleLayout::from_btf(&Btf::parse(&btf(new_layout)).unwrap()).unwrap()
    }

    /// A module for [`Guest::module`]: its name, text and symbols
    /// (`(offset in text, type letter, name)`).
    struct Spec<'a> {
        name: &'a str,
        text: u64,
        size: u32,
        symbols: &'a [(u64, u8, &'a str)],
    }

    /// A stopped guest's kernel memory with modules on the list.
    struct Guest {
        mem: FlatVirt,
        layout: ModuleLayout,
        /// Where the next structure goes.
        next: u64,
        /// The `list` of each module added, in list order.
        links: Vec<u64>,
    }

    impl Guest {
        fn new(new_layout: bool) -> Self {
            let mut mem = FlatVirt::zeroed(8 << 20);
            mem.base = BASE;
            Self {
                mem,
                layout: layout(new_layout),
                next: BASE + 0x1000,
                links: Vec::new(),
            }
        }

        fn alloc(&mut self, len: u64) -> u64 {
            let at = self.next;
            self.next += len.div_ceil(64) * 64;
            at
        }

        fn u64(&mut self, at: u64, v: u64) {
            self.mem.put(at, &v.to_le_bytes());
        }

        fn u32(&mut self, at: u64, v: u32) {
            self.mem.put(at, &v.to_le_bytes());
        }

        /// Adds a module (state `state`); its kallsyms pointer at the
        /// core table unless `pointer_null`.
        fn module(&mut self, spec: &Spec, state: u32, pointer_null: bool) -> u64 {
            let l = self.layout.clone();
            let k = l.kallsyms.clone().unwrap();
            let m = self.alloc(1024);
            self.u32(m + l.state, state);
            self.mem.put(m + l.name, spec.name.as_bytes());
            self.u64(m + l.text_base, spec.text);
            self.u32(m + l.text_size, spec.size);
            // The table: a null symbol first, as every ELF symbol table.
            let n = spec.symbols.len() + 1;
            let symtab = self.alloc((n * ELF64_SYM) as u64);
            let strtab = self.alloc(4096);
            let typetab = self.alloc(n as u64);
            let mut str_at = 1u32;
            for (i, (off, kind, name)) in spec.symbols.iter().enumerate() {
                let e = symtab + ((i + 1) * ELF64_SYM) as u64;
                self.u32(e, str_at);
                self.mem.put(e + 4, &[STT_FUNC]);
                self.u64(e + 8, spec.text + off);
                self.mem.put(strtab + u64::from(str_at), name.as_bytes());
                str_at += name.len() as u32 + 1;
                self.mem.put(typetab + i as u64 + 1, &[*kind]);
            }
            let table = m + k.core;
            self.u64(table + k.symtab, symtab);
            self.u32(table + k.num_symtab, n as u32);
            self.u64(table + k.strtab, strtab);
            self.u64(table + k.typetab.unwrap(), typetab);
            if !pointer_null {
                self.u64(m + k.pointer, table);
            }
            self.links.push(m + l.list);
            m
        }

        /// Links the modules added into a list from `HEAD` and back.
        fn link(&mut self) {
            let mut all = vec![HEAD];
            all.extend(self.links.clone());
            all.push(HEAD);
            for w in all.windows(2) {
                self.u64(w[0], w[1]);
                self.u64(w[1] + 8, w[0]);
            }
        }

        fn read(&self) -> GuestModules {
            read(&self.mem, &self.layout, HEAD)
        }
    }

    const BLK: Spec = Spec {
        name: "virtio_blk",
        text: BASE + 0x20_0000,
        size: 0x3000,
        symbols: &[
            (0x10, b't', "virtblk_remove"),
            (0x1000, b't', "virtblk_probe"),
            (0x2000, b'T', "virtblk_exported"),
            // Not code, or not in the core text: not a function.
            (0x2800, b'd', "virtblk_data"),
            (0x4000, b't', "virtblk_init"),
        ],
    };
    const EXT4: Spec = Spec {
        name: "ext4",
        text: BASE + 0x10_0000,
        size: 0x8000,
        symbols: &[(0x100, b't', "ext4_fill_super")],
    };

    #[test]
    fn both_struct_layouts_are_found_in_btf() {
        let old = layout(false);
        assert_eq!(old.text_fields, "core_layout");
        assert_eq!((old.text_base, old.text_size), (320, 332));
        let new = layout(true);
        assert_eq!(new.text_fields, "mem[MOD_TEXT]");
        assert_eq!((new.text_base, new.text_size), (320, 332));
        assert_eq!(new.kallsyms.unwrap().core, 608);
        // Neither: both named.
        let mut w = BtfWriter::new();
        let long = w.int();
        w.strukt("module", 64, &[("state", long, 0), ("list", long, 8)]);
        let e = ModuleLayout::from_btf(&Btf::parse(&w.finish()).unwrap()).unwrap_err();
        assert!(
            e.contains("mem[MOD_TEXT]") && e.contains("core_layout"),
            "{e}"
        );
    }

    #[test]
    fn modules_and_their_text_symbols_are_read_in_both_layouts() {
        for new_layout in [false, true] {
            let mut g = Guest::new(new_layout);
            g.module(&BLK, 0, false);
            // Still in its init: the kallsyms pointer not yet at the core
            // table is followed all the same; here it is null.
            g.module(&EXT4, 1, true);
            g.link();
            let got = g.read();
            assert!(got.warnings.is_empty(), "{:?}", got.warnings);
            let names: Vec<_> = got.modules.iter().map(|m| m.name.as_str()).collect();
            assert_eq!(names, ["ext4", "virtio_blk"], "sorted by text");
            let blk = &got.modules[1];
            assert_eq!((blk.text_base, blk.text_size), (BLK.text, 0x3000));
            let syms: Vec<_> = blk.symbols.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(
                syms,
                ["virtblk_remove", "virtblk_probe", "virtblk_exported"]
            );
            assert_eq!(blk.text_symbols, 3);
            assert_eq!(
                got.locate(BLK.text + 0x1012).unwrap().1,
                Some(("virtblk_probe", 0x12))
            );
            assert_eq!(got.modules[0].symbols[0].name, "ext4_fill_super");
        }
    }

    #[test]
    fn modules_being_set_up_are_skipped() {
        let mut g = Guest::new(false);
        g.module(&BLK, MODULE_STATE_UNFORMED, false);
        g.module(&EXT4, 0, false);
        g.link();
        let got = g.read();
        assert_eq!(got.modules.len(), 1);
        assert_eq!(got.modules[0].name, "ext4");
    }

    #[test]
    fn a_list_that_loops_is_read_once_and_said() {
        let mut g = Guest::new(true);
        g.module(&BLK, 0, false);
        g.module(&EXT4, 0, false);
        g.link();
        // ext4's next goes back to virtio_blk, never to the head.
        let (first, second) = (g.links[0], g.links[1]);
        g.u64(second, first);
        let got = g.read();
        assert_eq!(got.modules.len(), 2);
        assert!(got.warnings[0].contains("loops back"), "{:?}", got.warnings);
    }

    #[test]
    fn an_endless_list_is_cut_at_the_bound() {
        let mut g = Guest::new(false);
        let l = g.layout.clone();
        let mut prev = HEAD;
        for _ in 0..=MAX_MODULES {
            let m = g.alloc(1024);
            g.mem.put(m + l.name, b"m");
            g.u64(m + l.text_base, BASE);
            g.u64(prev, m + l.list);
            prev = m + l.list;
        }
        // The last one points at itself: never the head.
        g.u64(prev, prev);
        let got = g.read();
        assert_eq!(got.modules.len(), MAX_MODULES);
        let last = got.warnings.last().unwrap();
        assert!(last.contains(&format!("within {MAX_MODULES}")), "{last}");
    }

    #[test]
    fn unmapped_and_corrupt_links_cut_the_list_and_say_where() {
        // A link out of mapped memory: what was read before it is kept.
        let mut g = Guest::new(false);
        g.module(&BLK, 0, false);
        g.link();
        g.u64(g.links[0], 0xffff_ffff_f000_0000);
        let got = g.read();
        assert_eq!(got.modules.len(), 1);
        assert!(
            got.warnings[0].contains("is not mapped"),
            "{:?}",
            got.warnings
        );
        // A link into memory that holds no module (no name).
        let mut g = Guest::new(false);
        g.module(&BLK, 0, false);
        g.link();
        g.u64(g.links[0], BASE + 0x3_0000);
        let got = g.read();
        assert_eq!(got.modules.len(), 1);
        assert!(
            got.warnings[0].contains("not a module"),
            "{:?}",
            got.warnings
        );
        // The head itself unmapped.
        let g = Guest::new(false);
        let got = read(&g.mem, &g.layout, 0x1000);
        assert!(got.modules.is_empty());
        assert!(got.warnings[0].contains("head"), "{:?}", got.warnings);
    }

    #[test]
    fn a_module_whose_symbols_do_not_read_is_listed_without_them() {
        let mut g = Guest::new(true);
        let m = g.module(&BLK, 0, false);
        let k = g.layout.kallsyms.clone().unwrap();
        g.u64(m + k.core + k.symtab, 0xffff_ffff_f000_0000);
        let other = g.module(&EXT4, 0, false);
        g.u32(other + k.core + k.num_symtab, MAX_MODULE_SYMBOLS + 1);
        // A module whose text is no kernel code: left out.
        let bad = Spec {
            name: "bad",
            text: 0x1000,
            ..BLK
        };
        g.module(&bad, 0, false);
        g.link();
        let got = g.read();
        let names: Vec<_> = got.modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["ext4", "virtio_blk"]);
        assert!(got.modules.iter().all(|m| m.symbols.is_empty()));
        let w = got.warnings.join("\n");
        assert!(w.contains("module virtio_blk: no symbols"), "{w}");
        assert!(
            w.contains("module ext4: no symbols: its kallsyms claim"),
            "{w}"
        );
        assert!(w.contains("module bad: its text"), "{w}");
    }

    /// The booted kernel's symbols as a table at a KASLR slide and its
    /// BTF; `modules` absent when `with_modules` is false.
    struct Kernel {
        slide: u64,
        with_modules: bool,
    }

    /// The synthetic guest's `init_top_pgt` (runtime) and `&modules`.
    const TOP_PGT: u64 = 0xffff_ffff_8000_1000;
    const REAL_HEAD: u64 = 0xffff_ffff_c000_0010;

    impl GuestKernel for Kernel {
        fn address_of(&self, name: &str) -> Option<u64> {
            match name {
                "init_top_pgt" => Some(TOP_PGT - self.slide),
                "modules" if self.with_modules => Some(REAL_HEAD - self.slide),
                _ => None,
            }
        }
        fn functions_at(&self, addrs: &[u64]) -> Vec<Option<String>> {
            vec![None; addrs.len()]
        }
        fn btf(&self) -> Result<Vec<u8>, String> {
            Ok(btf(false))
        }
        fn source(&self) -> String {
            "a test table".into()
        }
    }

    /// Guest RAM with VMCOREINFO, page tables from `init_top_pgt` (phys
    /// 0x1000) and one page of the module area (phys 0x20_0000) holding
    /// the list's head and one module with one symbol.
    fn guest_ram() -> super::super::phys::tests::FlatMemory {
        use super::super::phys::tests::{map, FlatMemory};
        let mut mem = FlatMemory::new(4 << 20);
        let mut next = 0x2000;
        let page = REAL_HEAD & !0xfff;
        map(&mut mem, &mut next, 0x1000, page, 0x20_0000);
        mem.write(
            0x30_0000,
            format!(
                "OSRELEASE=6.1.0\nSYMBOL(init_top_pgt)={TOP_PGT:x}\nNUMBER(phys_base)=0\n\
                 SYMBOL(prb)=ffffffff82000000\n\0"
            )
            .as_bytes(),
        );
        let l = layout(false);
        let k = l.kallsyms.clone().unwrap();
        let phys = |va: u64| va - page + 0x20_0000;
        let (module, symtab, strtab) = (page + 0x100, page + 0x600, page + 0x700);
        mem.write_u64(phys(REAL_HEAD), module + l.list);
        mem.write_u64(phys(module + l.list), REAL_HEAD);
        mem.write(phys(module + l.name), b"virtio_blk\0");
        mem.write_u64(phys(module + l.text_base), 0xffff_ffff_c100_0000);
        mem.write(phys(module + l.text_size), &0x1000u32.to_le_bytes());
        mem.write_u64(phys(module + k.core + k.symtab), symtab);
        mem.write(phys(module + k.core + k.num_symtab), &2u32.to_le_bytes());
        mem.write_u64(phys(module + k.core + k.strtab), strtab);
        // Symbol 1: virtblk_probe, a function (no type letters).
        mem.write(phys(symtab + 24), &1u32.to_le_bytes());
        mem.write(phys(symtab + 28), &[STT_FUNC]);
        mem.write_u64(phys(symtab + 32), 0xffff_ffff_c100_0040);
        mem.write(phys(strtab + 1), b"virtblk_probe\0");
        mem
    }

    #[test]
    fn a_stopped_guests_modules_are_found_through_its_symbols_and_slide() {
        let mem = guest_ram();
        let kernel = Kernel {
            slide: 0x2e00_0000,
            with_modules: true,
        };
        let got = collect(&mem, Ok(&kernel));
        assert!(got.warnings.is_empty(), "{:?}", got.warnings);
        assert_eq!(got.modules.len(), 1);
        assert_eq!(
            got.locate(0xffff_ffff_c100_0052).unwrap().1,
            Some(("virtblk_probe", 0x12))
        );
        // Another kernel's table: its init_top_pgt is not 2 MiB away.
        let other = Kernel {
            slide: 0x2e00_1000,
            with_modules: true,
        };
        let got = collect(&mem, Ok(&other));
        assert!(got.modules.is_empty());
        assert!(
            got.warnings[0].contains("not the booted kernel's"),
            "{got:?}"
        );
        // A kernel without modules.
        let none = Kernel {
            slide: 0,
            with_modules: false,
        };
        let got = collect(&mem, Ok(&none));
        assert!(got.warnings[0].contains("CONFIG_MODULES"), "{got:?}");
        let got = collect(&mem, Err("the image is gone".into()));
        assert!(got.warnings[0].ends_with("the image is gone"), "{got:?}");
    }

    #[test]
    fn memory_without_a_kernel_says_why() {
        let mem = super::super::phys::tests::FlatMemory::new(1 << 20);
        let got = collect(&mem, Err("no kernel".into()));
        assert!(got.modules.is_empty());
        assert!(got.warnings[0].contains("VMCOREINFO"), "{:?}", got.warnings);
    }

    #[test]
    fn the_host_kernel_btf_has_the_fields_when_there_is_one() {
        let Ok(b) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            eprintln!("SKIP: no /sys/kernel/btf/vmlinux on this host");
            return;
        };
        let btf = Btf::parse(&b).unwrap();
        let l = ModuleLayout::from_btf(&btf).unwrap();
        assert!(l.kallsyms.is_some(), "{l:?}");
        assert!(l.name > l.list, "{l:?}");
        // Linux 6.4 on has struct module_memory, and the reader uses it.
        assert_eq!(
            l.text_fields == "mem[MOD_TEXT]",
            btf.size_of("module_memory").is_some(),
            "{l:?}"
        );
        eprintln!("the host kernel's struct module: {l:?}");
    }
}
