use super::super::ringbuffer::tests::FlatVirt;
use super::*;
use bootscope_testkit::btf::BtfWriter;

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
    let guest = StoppedGuest::new(&mem);
    let kernel = Kernel {
        slide: 0x2e00_0000,
        with_modules: true,
    };
    let got = collect(&guest, Ok(&kernel));
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
    let got = collect(&guest, Ok(&other));
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
    let got = collect(&guest, Ok(&none));
    assert!(got.warnings[0].contains("CONFIG_MODULES"), "{got:?}");
    let got = collect(&guest, Err("the image is gone".into()));
    assert!(got.warnings[0].ends_with("the image is gone"), "{got:?}");
}

#[test]
fn memory_without_a_kernel_says_why() {
    let mem = super::super::phys::tests::FlatMemory::new(1 << 20);
    let got = collect(&StoppedGuest::new(&mem), Err("no kernel".into()));
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
