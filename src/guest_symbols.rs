//! The guest kernel's symbols for `run`, `profile` and `lab`:
//! `--exit-sites` and `--guest-symbols` (the table loaded before anything
//! runs, a bad file is bad input; the sites named and their guest-physical
//! ranges labelled once the profile is final), the table kept beside the
//! VMM's decompressed kernel, and the booted kernel's symbols and types
//! for `run --initcalls`' trace method.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bootscope_profiler::guest_symbols::{kernel_of_command, SymbolTable, SymbolsError};
use bootscope_profiler::sites::GuestRegion;
use bootscope_profiler::Profile;
use bootscope_vmm::kernel_log::{GuestKernel, GuestKernelLoader};

/// The symbol table to name sites with: `--guest-symbols`, else the guest
/// kernel the command boots when it can be read. Err: the file given is
/// not usable (bad input).
pub fn load_symbols(
    given: Option<&Path>,
    kernel: Option<PathBuf>,
) -> Result<Option<SymbolTable>, String> {
    if let Some(path) = given {
        return SymbolTable::load(path)
            .map(Some)
            .map_err(|e| format!("--guest-symbols: {e}"));
    }
    let Some(kernel) = kernel else {
        return Ok(None);
    };
    match SymbolTable::load(&kernel) {
        Ok(t) => Ok(Some(t)),
        Err(e) => {
            eprintln!(
                "bootscope: exit sites stay unnamed: {e} (give --guest-symbols to name them)"
            );
            Ok(None)
        }
    }
}

/// The symbols of the kernel a `run` booted, once it has: from the
/// vmlinux the VMM decompressed (its kernel cache file) when there is one,
/// which saves decompressing the payload a second time, else from the
/// kernel file. None (said why): they could not be read.
pub fn booted_kernel_symbols(
    guest: &bootscope_vmm::timeline::TimelineGuest,
) -> Option<SymbolTable> {
    let kernel = PathBuf::from(&guest.kernel);
    let cached = guest
        .kernel_boot
        .as_ref()
        .and_then(|b| b.cache_file.as_ref())
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if let Some(Ok(mut t)) = cached.as_deref().map(cache_file_symbols) {
        t.source = format!(
            "{} (the payload of {}, decompressed by the VMM)",
            t.source,
            kernel.display()
        );
        return Some(t);
    }
    load_symbols(None, Some(kernel)).ok().flatten()
}

/// The symbols of the VMM's kernel cache file `vmlinux`: named by its
/// content, so the table recovered from it is kept beside it
/// (`FILE.kallsyms`) and read from there next time.
pub fn cache_file_symbols(vmlinux: &Path) -> Result<SymbolTable, SymbolsError> {
    SymbolTable::load_cached(vmlinux, &kept_table(vmlinux))
}

/// The VMM's kernel cache entry of the bzImage `kernel` (its payload
/// decompressed, named by its digest; made on first use, found by the
/// file's identity after): the image whose recovered symbol table is kept
/// beside it, so a profile of another VMM booting the same kernel loads
/// the table instead of decompressing and searching the bzImage again.
/// None for what is not a bzImage or where the cache is not usable.
pub fn cached_image(kernel: &Path) -> Option<PathBuf> {
    use bootscope_vmm::kernel::cache;
    use bootscope_vmm::loader::{probe_kernel, KernelFormat};
    let probe = probe_kernel(kernel).ok()?;
    let (KernelFormat::BzImage, Some(hdr)) = (probe.format, probe.setup_header) else {
        return None;
    };
    let dir = cache::user_cache_dir().ok()?;
    let k = cache::host_kernel(kernel, &hdr, Some(&dir)).ok()?;
    k.cache_file.filter(|f| f.is_file())
}

/// Where the symbol table recovered from the kernel cache file `vmlinux`
/// is kept: `FILE.kallsyms`.
pub fn kept_table(vmlinux: &Path) -> PathBuf {
    let mut name = vmlinux.as_os_str().to_owned();
    name.push(".kallsyms");
    PathBuf::from(name)
}

/// The kernel a launched command boots, for `profile -- COMMAND`: its
/// `--kernel`/`-kernel`, or Firecracker's `kernel_image_path` in its
/// `--config-file`.
pub fn command_kernel(command: &[String]) -> Option<PathBuf> {
    command_kernel_in(command, Path::new(""))
}

/// [`command_kernel`] of a command that runs in `cwd`: a relative
/// Firecracker config is read from there.
pub fn command_kernel_in(command: &[String], cwd: &Path) -> Option<PathBuf> {
    kernel_of_command(command)
        .or_else(|| bootscope_model::vmm::firecracker::kernel_of(command, cwd))
}

/// Names the profile's sites (if any): the kernel image's from `table`,
/// the module area's from the guest's `modules` (bootscope's own VMM read
/// them); prints the warnings about them.
pub fn annotate(
    profile: &mut Profile,
    table: Option<&SymbolTable>,
    modules: Option<&bootscope_model::modules::GuestModules>,
) {
    let Some(sites) = profile.exits.sites.as_mut() else {
        return;
    };
    match table {
        Some(t) => t.annotate(sites),
        None => eprintln!(
            "bootscope: no guest symbols (give --guest-symbols vmlinux, bzImage, System.map \
             or kallsyms): exit sites are addresses"
        ),
    }
    if let Some(m) = modules {
        bootscope_profiler::guest_symbols::modules::name_sites(sites, m);
    }
    if let Some(info) = &sites.symbols {
        for w in &info.warnings {
            eprintln!("bootscope: warning: exit sites: {w}");
        }
    }
    // The fault tail's sites are exit sites too: the same slide names them.
    let slide = sites.symbols.as_ref().and_then(|i| i.kaslr_offset);
    if let Some(tail) = profile.fault_tail.as_mut() {
        bootscope_profiler::guest_symbols::tail_sites::name_tail_sites(tail, table, slide, modules);
    }
}

/// Labels the profile's nested page fault ranges and MMIO addresses with
/// what bootscope's VMM placed there (its timeline's `guest.regions`):
/// a virtio device's accesses by device and register.
pub fn label_npf_ranges(profile: &mut Profile, regions: &[bootscope_vmm::layout::GuestRegion]) {
    let regions: Vec<GuestRegion> = regions
        .iter()
        .map(|g| GuestRegion {
            name: g.name.clone(),
            start: g.start,
            end: g.end,
        })
        .collect();
    if let Some(sites) = profile.exits.sites.as_mut().filter(|_| !regions.is_empty()) {
        sites.label_npf_ranges(&regions);
    }
    for m in &mut profile.exits.mmio {
        m.label = bootscope_profiler::sites::mmio_label(&regions, m.gpa);
    }
    // The fault tail's 2 MiB regions, by what the VMM placed there.
    let tail = profile.fault_tail.as_mut().filter(|_| !regions.is_empty());
    for r in tail.into_iter().flat_map(|t| t.regions.iter_mut()) {
        if let Some(gpa) = r.gpa {
            let end = gpa.saturating_add(bootscope_model::fault_tail::REGION_BYTES);
            r.label = Some(bootscope_profiler::sites::region_label(&regions, gpa, end));
        }
    }
}

/// The booted kernel's symbols and types, for `run --initcalls`' trace
/// method: the symbol table of the image (its ELF symbols, or its kallsyms
/// tables recovered) and the BTF section of its ELF.
struct BootedKernel {
    table: SymbolTable,
    btf: Option<Vec<u8>>,
}

impl GuestKernel for BootedKernel {
    fn address_of(&self, name: &str) -> Option<u64> {
        self.table.address_of(name)
    }

    fn functions_at(&self, addrs: &[u64]) -> Vec<Option<String>> {
        self.table
            .names(addrs)
            .into_iter()
            .map(|n| n.map(|(name, _)| name))
            .collect()
    }

    fn btf(&self) -> Result<Vec<u8>, String> {
        self.btf
            .clone()
            .or_else(|| {
                let image = self.table.image.as_ref()?;
                image.section(".BTF").map(<[u8]>::to_vec)
            })
            .ok_or_else(|| {
                "the kernel image has no .BTF section (the kernel needs CONFIG_DEBUG_INFO_BTF=y)"
                    .to_string()
            })
    }

    fn source(&self) -> String {
        self.table.source.clone()
    }
}

/// Loads the symbols and types of the image a run booted (`kernel`, the
/// file given, or the VMM's decompressed copy of it). For the copy, once
/// its symbol table has been recovered and kept beside it, only that table
/// and the image's `.BTF` section are read, not the whole image: this runs
/// after every `--initcalls` boot.
pub fn kernel_loader(kernel: PathBuf) -> GuestKernelLoader {
    Arc::new(move |image: &Path| {
        let kept = kept_table(image);
        if image != kernel && kept.is_file() {
            if let (Ok(table), Some(btf)) = (
                SymbolTable::load(&kept),
                bootscope_profiler::guest_symbols::image::file_section(image, ".BTF"),
            ) {
                return Ok(Box::new(BootedKernel {
                    table,
                    btf: Some(btf),
                }) as Box<dyn GuestKernel>);
            }
        }
        let table = if image == kernel {
            SymbolTable::load(image)
        } else {
            cache_file_symbols(image)
        };
        table
            .map(|table| Box::new(BootedKernel { table, btf: None }) as Box<dyn GuestKernel>)
            .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_profiler::guest_symbols::image::KernelImage;
    use bootscope_vmm::kernel_log::btf::Btf;
    use bootscope_vmm::kernel_log::modules::ModuleLayout;
    use bootscope_vmm::kernel_log::trace_ring::TraceLayout;
    use bootscope_vmm::kernel_log::traced::InitcallEvents;

    /// The machine's own Debian kernel: its decompressed image stands in
    /// for the VMM's kernel cache file. The first load recovers the symbol
    /// table and keeps it beside the file; the second reads only that
    /// table and the `.BTF` section. Both find what the trace reader needs:
    /// `global_trace`, the three events, and every field in the BTF.
    #[test]
    fn the_booted_kernel_gives_the_trace_readers_symbols_and_types() {
        let Some(kernel) = std::fs::read_dir("/boot").ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .find(|p| p.to_string_lossy().contains("/vmlinuz-"))
        }) else {
            eprintln!("SKIP: no /boot/vmlinuz-* here");
            return;
        };
        let image = KernelImage::parse(&std::fs::read(&kernel).unwrap())
            .unwrap()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache_file = dir.path().join("vmlinux-test");
        std::fs::write(&cache_file, image.bytes()).unwrap();
        let load = kernel_loader(kernel);
        let mut seen = Vec::new();
        for round in ["recovered", "kept"] {
            let k = load(&cache_file).unwrap();
            let source = k.source();
            match round {
                "recovered" => assert!(source.contains("recovered from"), "{source}"),
                _ => assert!(source.starts_with("symbol map") && source.ends_with(".kallsyms")),
            }
            let btf = Btf::parse(&k.btf().unwrap()).unwrap();
            TraceLayout::from_btf(&btf).unwrap();
            InitcallEvents::from_btf(&btf, [1, 2, 3]).unwrap();
            // The module list reader's fields: Linux 6.1's layout.
            let modules = ModuleLayout::from_btf(&btf).unwrap();
            assert_eq!(modules.text_fields, "core_layout", "{modules:?}");
            assert!(modules.kallsyms.is_some(), "{modules:?}");
            assert!(k.address_of("modules").is_some(), "{round}");
            let addrs: Vec<u64> = [
                "global_trace",
                "event_initcall_start",
                "event_initcall_finish",
                "event_initcall_level",
                "init_top_pgt",
                "serial8250_init",
            ]
            .iter()
            .map(|n| k.address_of(n).unwrap_or_else(|| panic!("{n} ({round})")))
            .collect();
            let names = k.functions_at(&addrs[5..]);
            assert_eq!(names, [Some("serial8250_init".to_string())], "{round}");
            seen.push(addrs);
        }
        assert_eq!(seen[0], seen[1]);
        assert!(kept_table(&cache_file).is_file());
        // Not an image at all: a clear error, nothing panics.
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"not a kernel").unwrap();
        assert!(load(&junk).is_err());
    }
}
