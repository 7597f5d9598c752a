//! Guest kernel symbols for exit sites: a table from a `vmlinux` (ELF with
//! symbols), a `System.map`, a kallsyms dump, or a stock kernel image
//! (bzImage or stripped ELF) whose own kallsyms tables are recovered
//! ([`kallsyms`]); the guest's KASLR slide inferred from the exits
//! themselves ([`slide`]); the naming itself done by blazesym from the
//! table in kallsyms form. Sites in the module area are named from the
//! guest's module list, where bootscope's VMM read one ([`modules`]).

pub mod image;
pub mod kallsyms;
pub mod modules;
pub mod slide;
pub mod tail_sites;

use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;
use thiserror::Error;

use crate::sites::{in_module_space, ExitSites, SiteSymbols, KERNEL_HALF};
use kallsyms::KernelSymbol;

/// Why a symbol file cannot be used.
#[derive(Debug, Error)]
pub enum SymbolsError {
    #[error("cannot read guest symbols {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a guest symbol file: {why}; give a vmlinux, a bzImage, a System.map or a kallsyms dump")]
    NotSymbols { path: String, why: String },
    #[error("{source}")]
    Input {
        path: String,
        #[source]
        source: bootscope_model::input::InputError,
    },
    #[error("cannot write the guest symbol table to {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The fewest symbols a kernel table has: fewer is a stub or another file.
const MIN_SYMBOLS: usize = 1000;

/// A guest kernel's symbol table, ready to name addresses.
pub struct SymbolTable {
    /// What it came from, for `exits.sites.symbols.source`.
    pub source: String,
    /// Link-time addresses, sorted.
    symbols: Vec<KernelSymbol>,
    /// The decompressed kernel ELF, when the table came from an image: its
    /// instructions confirm a KASLR slide.
    pub image: Option<image::KernelImage>,
    /// The table in kallsyms form, as blazesym reads it: a private
    /// temporary file (mode 0600, an unpredictable name made with
    /// `O_EXCL`), removed when the table is dropped or a signal ends the
    /// process.
    kallsyms_file: bootscope_model::output::Temporary,
}

impl SymbolTable {
    /// Reads a vmlinux, a bzImage, a `System.map` or a kallsyms dump.
    pub fn load(path: &Path) -> Result<Self, SymbolsError> {
        Self::load_with(path, None)
    }

    /// As [`SymbolTable::load`], for an image whose content never changes
    /// under its name (the VMM's kernel cache file, named by its content):
    /// a table recovered from it is kept in `table_cache` (kallsyms form)
    /// and read from there the next time, instead of searching the image
    /// again (seconds of CPU in a nested guest). A cache that cannot be
    /// written or read is only a slower load.
    pub fn load_cached(path: &Path, table_cache: &Path) -> Result<Self, SymbolsError> {
        Self::load_with(path, Some(table_cache))
    }

    fn load_with(path: &Path, table_cache: Option<&Path>) -> Result<Self, SymbolsError> {
        let shown = path.display().to_string();
        let bytes = bootscope_model::input::read_input(path).map_err(|e| SymbolsError::Input {
            path: shown.clone(),
            source: e,
        })?;
        let not = |why: String| SymbolsError::NotSymbols {
            path: shown.clone(),
            why,
        };
        let (symbols, image, what) = if let Some(img) = image::KernelImage::parse(&bytes) {
            let img = img.map_err(not)?;
            let (symbols, what) = match img.elf_symbols() {
                Some(s) if s.len() >= MIN_SYMBOLS => (s, "ELF symbols of"),
                _ => match table_cache.and_then(read_table) {
                    Some(s) => (s, "kallsyms recovered (cached) from"),
                    None => {
                        let s = kallsyms::recover(img.bytes()).map_err(|e| not(e.to_string()))?;
                        if let Some(c) = table_cache {
                            keep_table(c, &s);
                        }
                        (s, "kallsyms recovered from")
                    }
                },
            };
            (symbols, Some(img), what)
        } else {
            let text = String::from_utf8_lossy(&bytes);
            (parse_map(&text).map_err(not)?, None, "symbol map")
        };
        let mut symbols = symbols;
        symbols.retain(|s| s.addr >= KERNEL_HALF);
        symbols.sort_by_key(|s| s.addr);
        if symbols.len() < MIN_SYMBOLS {
            return Err(not(format!(
                "it holds {} kernel symbols, a kernel has tens of thousands (Debian's \
                 /boot/System.map-* is a stub: give /boot/vmlinuz-* instead)",
                symbols.len()
            )));
        }
        let kallsyms_file = kallsyms_temporary(&symbols)?;
        Ok(SymbolTable {
            source: format!("{what} {shown}"),
            symbols,
            image,
            kallsyms_file,
        })
    }

    /// The kernel image, `[_text, _end)` (or the symbols' span): its init
    /// text, where much of a boot runs, lies beyond `_etext`.
    pub fn text_range(&self) -> (u64, u64) {
        let find = |n: &str| self.address_of(n);
        let first = self.symbols.first().map_or(0, |s| s.addr);
        let last = self.symbols.last().map_or(0, |s| s.addr);
        (
            find("_text").or(find("_stext")).unwrap_or(first),
            find("_end").unwrap_or(last),
        )
    }

    /// The link-time address of the symbol `name`.
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.symbols.iter().find(|s| s.name == name).map(|s| s.addr)
    }

    /// The function of each link-time address (None: outside the kernel's
    /// text, or not found), with the offset into it.
    pub fn names(&self, addrs: &[u64]) -> Vec<Option<(String, u64)>> {
        let (lo, hi) = self.text_range();
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Some(self.kallsyms_file.path().to_path_buf()),
            vmlinux: MaybeDefault::None,
            kaslr_offset: Some(0),
            debug_syms: false,
            ..Default::default()
        });
        let symbolizer = Symbolizer::new();
        let found = symbolizer
            .symbolize(&src, Input::AbsAddr(addrs))
            .unwrap_or_default();
        addrs
            .iter()
            .zip(found.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(&a, s)| match s {
                Some(Symbolized::Sym(sym)) if (lo..hi).contains(&a) => {
                    Some((sym.name.to_string(), sym.offset as u64))
                }
                _ => None,
            })
            .collect()
    }

    /// Names every kernel site of `sites` (a slide found or none), and says
    /// how in `sites.symbols`.
    pub fn annotate(&self, sites: &mut ExitSites) {
        let found = slide::infer(self, sites);
        let mut info = SiteSymbols {
            source: self.source.clone(),
            kaslr_offset: found.offset,
            kaslr: found.how.clone(),
            ..Default::default()
        };
        info.warnings.extend(found.warning.clone());
        // Module code is not in the image's table: counted apart.
        let image_site = |r: u64| r >= KERNEL_HALF && !in_module_space(r);
        info.in_modules = sites
            .sites
            .iter()
            .filter(|s| s.rip.is_some_and(in_module_space))
            .count() as u64;
        if let Some(offset) = found.offset {
            let kernel: Vec<usize> = (0..sites.sites.len())
                .filter(|&i| sites.sites[i].rip.is_some_and(image_site))
                .collect();
            let addrs: Vec<u64> = kernel
                .iter()
                .map(|&i| sites.sites[i].rip.unwrap_or(0).wrapping_sub(offset))
                .collect();
            for (i, name) in kernel.into_iter().zip(self.names(&addrs)) {
                match name {
                    Some((f, off)) => {
                        sites.sites[i].function = Some(f);
                        sites.sites[i].offset = Some(off);
                        info.resolved += 1;
                    }
                    None => info.unresolved += 1,
                }
            }
        } else {
            info.unresolved = sites
                .sites
                .iter()
                .filter(|s| s.rip.is_some_and(image_site))
                .count() as u64;
        }
        if info.unresolved > info.resolved && info.resolved + info.unresolved > 0 {
            info.warnings.push(format!(
                "{} of {} kernel sites are outside the kernel text of {}: the guest may \
                 run another kernel",
                info.unresolved,
                info.resolved + info.unresolved,
                self.source
            ));
        }
        sites.symbols = Some(info);
    }
}

/// Parses `System.map` / `/proc/kallsyms` text (`ADDR TYPE NAME [module]`).
/// The table in kallsyms form in a private temporary file, for blazesym.
fn kallsyms_temporary(
    symbols: &[KernelSymbol],
) -> Result<bootscope_model::output::Temporary, SymbolsError> {
    use std::io::Write;
    let dir = std::env::temp_dir();
    let write = || {
        let mut t = bootscope_model::output::Temporary::new_in(
            &dir,
            std::ffi::OsStr::new("bootscope-guest-kallsyms-"),
            "",
            0o600,
        )?;
        t.as_file_mut()
            .write_all(kallsyms::to_text(symbols).as_bytes())?;
        t.as_file_mut().flush()?;
        Ok(t)
    };
    write().map_err(|source| SymbolsError::Write {
        path: dir.display().to_string(),
        source,
    })
}

/// The largest kept table read back (Linux has about 200,000 symbols, some
/// 10 MB of text).
const MAX_KEPT_TABLE: u64 = 256 << 20;

/// A table [`keep_table`] wrote, if it is there, whole, and can be
/// trusted: in a directory that is this user's own and writable by no one
/// else, a private file of this user's, matching its seal (XXH3 of its
/// contents). Any other file at that path is not read (and the table is
/// recovered again).
fn read_table(path: &Path) -> Option<Vec<KernelSymbol>> {
    use bootscope_model::cache;
    let dir = path.parent()?;
    cache::check_dir(dir, dir).ok()?;
    let bytes = cache::read_file(path, MAX_KEPT_TABLE).ok()??;
    if cache::verify(path, &bytes) != cache::Verdict::Sound {
        return None;
    }
    let text = String::from_utf8(bytes).ok()?;
    parse_map(&text).ok().filter(|s| s.len() >= MIN_SYMBOLS)
}

/// Writes a recovered table to `path` whole or not at all (a temporary
/// file beside it, renamed into place), sealed with its checksum; only in
/// a directory that is this user's own and writable by no one else (the
/// kernel cache's).
fn keep_table(path: &Path, symbols: &[KernelSymbol]) {
    use bootscope_model::cache;
    let Some(dir) = path.parent() else {
        return;
    };
    let written = cache::check_dir(dir, dir)
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|()| cache::store(path, kallsyms::to_text(symbols).as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "bootscope: the guest symbol table is not kept in {}: {e}",
            path.display()
        );
    }
}

fn parse_map(text: &str) -> Result<Vec<KernelSymbol>, String> {
    let mut out = Vec::new();
    let mut bad = 0usize;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.split_whitespace();
        let parsed = (|| {
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next().filter(|k| k.len() == 1)?.chars().next()?;
            let name = f.next()?.to_string();
            Some(KernelSymbol { addr, kind, name })
        })();
        match parsed {
            Some(s) => out.push(s),
            None => bad += 1,
        }
    }
    if out.is_empty() || bad > out.len() {
        return Err(format!(
            "it is neither an ELF file nor a kernel image, and {bad} of its lines are not \
             `ADDRESS TYPE NAME` symbol lines"
        ));
    }
    Ok(out)
}

/// The guest kernel a command line boots (`--kernel PATH`, QEMU's
/// `-kernel PATH`), for finding symbols without being told.
pub fn kernel_of_command(command: &[String]) -> Option<PathBuf> {
    bootscope_model::argv::flag_value(command, &["--kernel", "-kernel"]).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parse_and_stubs_are_refused() {
        let syms =
            parse_map("ffffffff81000000 T _text\nffffffff81000010 t io_serial_out\n").unwrap();
        assert_eq!(syms[1].name, "io_serial_out");
        let stub =
            "ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n";
        let path = std::env::temp_dir().join(format!("bootscope-stub-map-{}", std::process::id()));
        std::fs::write(&path, stub).unwrap();
        let e = SymbolTable::load(&path).err().unwrap().to_string();
        let _ = std::fs::remove_file(&path);
        assert!(e.contains("stub") && e.contains("vmlinuz"), "{e}");
        assert!(parse_map("hello\nworld\n").is_err());
        let cmd: Vec<String> = ["bootscope", "run", "--kernel", "/k", "--initrd", "/i"]
            .map(String::from)
            .to_vec();
        assert_eq!(kernel_of_command(&cmd), Some(PathBuf::from("/k")));
        assert_eq!(kernel_of_command(&cmd[..2]), None);
    }

    /// Sites in the module area are counted apart, not as kernel sites
    /// the table failed to name.
    #[test]
    fn module_sites_are_counted_apart() {
        use std::fmt::Write as _;
        let mut map = String::from("ffffffff81000000 T _text\n");
        for i in 0..1200u64 {
            let _ = writeln!(map, "{:x} T f{i}", 0xffff_ffff_8100_0100 + i * 0x100);
        }
        let _ = writeln!(map, "ffffffff81100000 T _end");
        let path = std::env::temp_dir().join(format!("bootscope-mod-map-{}", std::process::id()));
        std::fs::write(&path, map).unwrap();
        let table = SymbolTable::load(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let site = |rip: u64| crate::sites::ExitSite {
            reason: "io".into(),
            rip: Some(rip),
            count: 1,
            ..Default::default()
        };
        let mut sites = ExitSites {
            sites: vec![
                site(0xffff_ffff_8100_0210),
                site(0xffff_ffff_c05f_e0d3),
                site(0x1000),
            ],
            ..Default::default()
        };
        table.annotate(&mut sites);
        let info = sites.symbols.as_ref().unwrap();
        assert_eq!(info.in_modules, 1, "{info:?}");
        assert_eq!(info.resolved + info.unresolved, 1, "{info:?}");
        assert_eq!(
            sites.sites[1].function_name(),
            "0xffffffffc05fe0d3 [module]"
        );
    }

    /// The table of the machine's own Debian kernel image, recovered from
    /// the image: the symbols its boot code names, where the image's ELF
    /// headers put its text.
    fn debian_kernel() -> Option<PathBuf> {
        let found = std::fs::read_dir("/boot").ok().and_then(|d| {
            d.flatten().map(|e| e.path()).find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
            })
        });
        if found.is_none() {
            eprintln!("SKIP: no /boot/vmlinuz-* here");
        }
        found
    }

    #[test]
    fn a_debian_kernel_image_yields_its_kallsyms() {
        let Some(kernel) = debian_kernel() else {
            return;
        };
        let t = SymbolTable::load(&kernel).unwrap();
        assert!(
            t.source.starts_with("kallsyms recovered from"),
            "{}",
            t.source
        );
        assert!(t.symbols.len() > 50_000, "{}", t.symbols.len());
        let img = t.image.as_ref().unwrap();
        let (lo, hi) = t.text_range();
        assert_eq!(
            Some(lo),
            img.text_start(),
            "_text is where the ELF's text starts"
        );
        assert!(hi > lo);
        let addr = |n: &str| {
            t.symbols
                .iter()
                .find(|s| s.name == n)
                .map(|s| s.addr)
                .unwrap()
        };
        let names = t.names(&[addr("start_kernel") + 3, addr("serial8250_console_putchar")]);
        assert_eq!(names[0], Some(("start_kernel".to_string(), 3)));
        assert_eq!(names[1].as_ref().unwrap().0, "serial8250_console_putchar");
    }

    /// A table recovered once is kept and read back the next time: the
    /// same symbols, said to come from the cache; a damaged cache is
    /// recovered again and rewritten whole.
    #[test]
    fn a_recovered_table_is_kept_and_read_back() {
        let Some(kernel) = debian_kernel() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("vmlinux.kallsyms");
        let first = SymbolTable::load_cached(&kernel, &cache).unwrap();
        assert!(first.source.starts_with("kallsyms recovered from"));
        assert!(cache.is_file());
        let second = SymbolTable::load_cached(&kernel, &cache).unwrap();
        assert!(
            second
                .source
                .starts_with("kallsyms recovered (cached) from"),
            "{}",
            second.source
        );
        assert!(first.symbols == second.symbols, "the same table");
        assert!(second.image.is_some(), "the image still confirms slides");
        std::fs::write(&cache, "ffffffff81000000 T _text\n").unwrap();
        let third = SymbolTable::load_cached(&kernel, &cache).unwrap();
        assert!(third.source.starts_with("kallsyms recovered from"));
        assert!(third.symbols == first.symbols, "the same table");
        let kept = read_table(&cache).unwrap();
        assert!(kept.len() >= first.symbols.len(), "{}", kept.len());
    }

    /// A kept table is read only when it is the one bootscope sealed, in a
    /// private directory: a foreign table of the right form (a thousand
    /// made-up lines, or the real table with a name changed) is not used.
    #[test]
    fn a_foreign_kept_table_is_not_used() {
        use bootscope_model::cache;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("vmlinux.kallsyms");
        let foreign: String = (0..1000)
            .map(|i| format!("ffffffff{:08x} T planted_{i}\n", 0x8100_0000u32 + i * 16))
            .collect();
        std::fs::write(&table, &foreign).unwrap();
        assert!(read_table(&table).is_none(), "unsealed");
        cache::store(&table, foreign.as_bytes()).unwrap();
        assert_eq!(read_table(&table).map(|t| t.len()), Some(1000), "sealed");
        // Changed after it was sealed.
        let changed = foreign.replace("planted_5\n", "planted_X\n");
        cache::write_private(&table, changed.as_bytes()).unwrap();
        assert!(read_table(&table).is_none(), "checksum mismatch");
        // Sealed, but others may write the file or its directory.
        cache::store(&table, foreign.as_bytes()).unwrap();
        std::fs::set_permissions(&table, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read_table(&table).is_none(), "writable by others");
        std::fs::set_permissions(&table, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(read_table(&table).is_none(), "in a shared directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(read_table(&table).is_some());
    }

    #[test]
    fn the_table_for_blazesym_is_a_private_unpredictable_file() {
        use std::os::unix::fs::MetadataExt;
        let syms: Vec<KernelSymbol> = parse_map("ffffffff81000000 T _text\n").unwrap();
        let a = kallsyms_temporary(&syms).unwrap();
        let b = kallsyms_temporary(&syms).unwrap();
        assert_ne!(a.path(), b.path());
        let m = std::fs::symlink_metadata(a.path()).unwrap();
        assert!(m.is_file());
        assert_eq!(m.mode() & 0o777, 0o600);
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains(&std::process::id().to_string()), "{name}");
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists(), "removed with the table");
    }
}
