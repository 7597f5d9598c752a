//! `bootscope initcalls CONSOLE-LOG`: the initcalls of a boot under another
//! VMM, from `initcall_debug` lines its guest printed on the console. The
//! fallback where bootscope cannot read guest memory (`run --initcalls`
//! reads the log from it instead and costs no console lines).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bootscope_profiler::guest_symbols::SymbolTable;
use bootscope_vmm::kernel_log::{GuestKernel, GuestKernelLoader};

use crate::cli::{check_output, usage, write_output, Failure};

#[derive(clap::Args)]
#[command(after_help = "Example (QEMU, profiled):
  bootscope profile -o qemu.json -- qemu-system-x86_64 ... \\
      -append \"console=ttyS0 initcall_debug ignore_loglevel\" -serial file:console.log
  bootscope initcalls console.log --output initcalls.json

Printing initcall_debug on the console costs the guest two console lines per
initcall (thousands of serial port exits); `bootscope run --initcalls` does
not (docs/initcalls.md).")]
pub struct InitcallsArgs {
    /// A guest console log with `initcall_debug` lines and printk
    /// timestamps (the kernel command line needs `initcall_debug
    /// ignore_loglevel`; add `dyndbg="func parse_args +p"` for the levels).
    #[arg(value_name = "CONSOLE-LOG")]
    pub console: PathBuf,
    /// Write the initcalls as JSON (the timeline's `initcalls` object,
    /// docs/timeline-schema.md).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// How many of the slowest initcalls to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

pub fn run(args: InitcallsArgs) -> Result<i32, Failure> {
    if let Some(o) = &args.output {
        check_output("--output", o).map_err(usage)?;
    }
    let bytes = bootscope_model::input::read_input(&args.console).map_err(|e| {
        usage(anyhow::anyhow!(
            "cannot read the console log {}: {e}",
            args.console.display()
        ))
    })?;
    let doc = bootscope_vmm::kernel_log::from_console(&String::from_utf8_lossy(&bytes))
        .map_err(|e| usage(anyhow::anyhow!("{}: {e}", args.console.display())))?;
    if doc.initcalls.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "{} has no initcall_debug lines with printk timestamps: boot the guest with \
             `initcall_debug ignore_loglevel` on its kernel command line and its console \
             written to a file (QEMU: -serial file:FILE)",
            args.console.display()
        )));
    }
    if let Some(o) = &args.output {
        write_output(o, &serde_json::to_vec_pretty(&doc)?)?;
    }
    let text = format!(
        "{}method: {}\n",
        bootscope_vmm::kernel_log::summary(&doc, args.top),
        doc.method
    );
    crate::stdout::print(text).map_err(crate::stdout::failure)?;
    Ok(0)
}

/// Gives the initcalls of a profiled `run --initcalls` what the profiler
/// counted during each (both are on the VMM's clock): exactly, from its
/// per-slot counts, where it has them; else its sampled counters (every exit
/// by reason, page faults) shared out between samples.
pub fn attribute_profile(
    initcalls: &mut bootscope_vmm::kernel_log::InitcallsDoc,
    profile: &bootscope_profiler::Profile,
) {
    attribute(initcalls, profile.time_slots.as_ref(), &profile.samples);
}

/// [`attribute_profile`] from the profile's parts.
pub fn attribute(
    initcalls: &mut bootscope_vmm::kernel_log::InitcallsDoc,
    slots: Option<&bootscope_profiler::profile::TimeSlots>,
    samples: &[bootscope_profiler::profile::Sample],
) {
    if let Some(slots) = slots {
        initcalls.attribute_counts(&ProfileSlots(slots));
    }
    let mut samples: Vec<_> = samples
        .iter()
        .map(|s| {
            (
                s.t_ns,
                bootscope_vmm::kernel_log::SampledCounts {
                    exits: s.exits_total,
                    exits_by_reason: s.exits_by_reason.clone(),
                    guest_faults: s.guest_faults,
                    host_faults: s.host_faults,
                },
            )
        })
        .collect();
    initcalls.attribute_samples(&mut samples);
}

/// The profiler's per-slot counts, as the VMM's initcalls ask for them.
struct ProfileSlots<'a>(&'a bootscope_profiler::profile::TimeSlots);

impl bootscope_vmm::kernel_log::IntervalCounts for ProfileSlots<'_> {
    fn slot_ns(&self) -> u64 {
        self.0.slot_ns
    }

    fn complete_until_ns(&self) -> Option<u64> {
        let s = self.0;
        s.full_from_slot.map(|slot| {
            let t = i128::from(s.start_ns) + i128::from(slot) * i128::from(s.slot_ns);
            u64::try_from(t.max(0)).unwrap_or(u64::MAX)
        })
    }

    fn between(&self, start_ns: u64, end_ns: u64) -> bootscope_vmm::kernel_log::SampledCounts {
        let t = self.0.between(start_ns, end_ns);
        bootscope_vmm::kernel_log::SampledCounts {
            exits: t.exits,
            exits_by_reason: t.exits_by_reason,
            guest_faults: t.guest_faults,
            host_faults: t.host_faults,
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
        let kept = crate::sites_cmd::kept_table(image);
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
            crate::sites_cmd::cache_file_symbols(image)
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
        assert!(crate::sites_cmd::kept_table(&cache_file).is_file());
        // Not an image at all: a clear error, nothing panics.
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"not a kernel").unwrap();
        assert!(load(&junk).is_err());
    }
}
