//! Host-side preparation of a lab run: work the program in the lab machine
//! would do on every run, because the lab machine starts with an empty
//! home directory, done here natively and carried in where the program
//! looks for it.
//!
//! For `run` of a bzImage decompressed on the host (the default), the
//! kernel is decompressed into this host's kernel cache (or found there)
//! and that cache entry is carried into the lab machine's kernel cache.
//! The program there finds it by the payload's digest and verifies it as
//! it does any cache entry, so the lab's timeline shows `vmm setup` as a
//! warm cache makes it, not QEMU emulating the decompression. With
//! `--initcalls` (the trace method) or `--exit-sites` the kernel's symbol
//! table is recovered here too and kept beside the entry, as the program
//! keeps it after its first such run, so `vmm teardown` reads the table
//! instead of searching the image for it. The same for the kernel of a
//! VMM that `profile` launches (QEMU's `-kernel`, Cloud Hypervisor's
//! `--kernel`): its symbols name what is read of the guest's memory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bootscope_lab::outer::{InputFile, GUEST_HOME};
use bootscope_vmm::kernel::cache::{self, CacheUse};
use bootscope_vmm::loader::{probe_kernel, KernelFormat};

/// What was prepared: the files to carry in at the lab machine's paths.
#[derive(Default)]
pub(crate) struct Prepared {
    pub(crate) placed: Vec<InputFile>,
    /// The cache directory made for this run when this host has none of
    /// its own; removed when the run is over.
    _scratch: Option<tempfile::TempDir>,
}

/// The kernel a lab command boots from a bzImage decompressed on the host,
/// and whether it reads the kernel's symbols after the boot.
#[derive(Debug, PartialEq, Eq)]
struct KernelUse {
    kernel: PathBuf,
    symbols: bool,
}

/// What `bootscope ARGS` in the lab does with a kernel, if it is a `run`
/// that decompresses one on the host.
fn kernel_use(cli: &clap::Command, args: &[OsString]) -> Option<KernelUse> {
    let argv = std::iter::once(OsString::from("bootscope")).chain(args.iter().cloned());
    let matches = cli.clone().try_get_matches_from(argv).ok()?;
    let (name, run) = matches.subcommand()?;
    if name == "profile" {
        return profiled_kernel_use(run);
    }
    if name != "run" {
        return None;
    }
    let kernel = PathBuf::from(run.get_raw("kernel")?.next()?);
    let memory_only = run
        .get_raw("stop_after")
        .is_some_and(|mut v| v.any(|s| s == "memory"));
    if run.get_flag("guest_decompress") || memory_only {
        return None;
    }
    let traced = run.get_flag("initcalls")
        && run
            .get_raw("initcalls_method")
            .is_none_or(|mut v| v.all(|m| m == "trace"));
    Some(KernelUse {
        kernel,
        symbols: traced || run.get_flag("exit_sites"),
    })
}

/// The kernel of the VMM `profile` launches (`-kernel`, `--kernel`: QEMU,
/// Cloud Hypervisor), whose symbols the profile reads from its guest's
/// memory unless told not to.
fn profiled_kernel_use(profile: &clap::ArgMatches) -> Option<KernelUse> {
    if profile.get_flag("no_guest_memory") {
        return None;
    }
    let command: Vec<String> = profile
        .get_raw("command")?
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let kernel = bootscope_model::argv::flag_value(&command, &["-kernel", "--kernel"])?;
    Some(KernelUse {
        kernel: PathBuf::from(kernel),
        symbols: true,
    })
}

/// Prepares what the lab command `args` (bootscope's arguments) can use;
/// says on stderr what was carried in. Nothing here is fatal: what cannot
/// be prepared is done in the lab machine as before, and bad input is the
/// command's own to report there.
pub(crate) fn prepare(cli: &clap::Command, args: &[OsString]) -> Prepared {
    let Some(usage) = kernel_use(cli, args) else {
        return Prepared::default();
    };
    match prepare_kernel(&usage) {
        Ok(Some(prepared)) => prepared,
        Ok(None) => Prepared::default(),
        Err(why) => {
            eprintln!(
                "bootscope lab: {} is decompressed in the lab machine: {why}",
                usage.kernel.display()
            );
            Prepared::default()
        }
    }
}

/// Fills this host's kernel cache with the kernel (and its kept symbol
/// table) and places the entry in the lab machine's cache.
fn prepare_kernel(usage: &KernelUse) -> Result<Option<Prepared>, String> {
    let Ok(probe) = probe_kernel(&usage.kernel) else {
        // Not a kernel: the command in the lab says so.
        return Ok(None);
    };
    let (KernelFormat::BzImage, Some(hdr)) = (probe.format, probe.setup_header) else {
        return Ok(None);
    };
    let guest_dir = cache::cache_dir_for(None, Some(GUEST_HOME.as_ref()))
        .ok_or("the lab machine has no cache directory")?;
    let (host_dir, scratch) = match cache::user_cache_dir() {
        Ok(dir) => (dir, None),
        Err(_) => {
            let tmp = bootscope_model::output::private_temp_dir("bootscope-lab-kernel-")
                .map_err(|e| format!("cannot make a temporary cache directory: {e}"))?;
            (tmp.path().to_path_buf(), Some(tmp))
        }
    };
    let started = Instant::now();
    let kernel =
        cache::host_kernel(&usage.kernel, &hdr, Some(&host_dir)).map_err(|e| e.to_string())?;
    let Some(cache_file) = kernel.cache_file.clone() else {
        return Err(kernel
            .cache_note
            .unwrap_or_else(|| "this host's kernel cache is not usable".into()));
    };
    let how = match kernel.cache {
        CacheUse::Hit => "found in this host's kernel cache",
        _ => "decompressed on this host",
    };
    drop(kernel);
    let mut files = cache::entry_files(&cache_file);
    if usage.symbols {
        let kept = crate::guest_symbols::kept_table(&cache_file);
        match crate::guest_symbols::cache_file_symbols(&cache_file) {
            Ok(_) if kept.is_file() => {
                files.push(bootscope_model::cache::seal_path(&kept));
                files.push(kept);
            }
            // The image's own ELF symbols: nothing to keep.
            Ok(_) => {}
            Err(e) => eprintln!("bootscope lab: the kernel's symbols are read in the lab: {e}"),
        }
    }
    let placed = placed_in(&files, &guest_dir)?;
    eprintln!(
        "bootscope lab: kernel {how} in {:.1} s; its cache entry is carried into the lab machine ({})",
        started.elapsed().as_secs_f64(),
        placed
            .iter()
            .map(|p| p.guest.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Some(Prepared {
        placed,
        _scratch: scratch,
    }))
}

/// Each file under its own name in `guest_dir`.
fn placed_in(files: &[PathBuf], guest_dir: &Path) -> Result<Vec<InputFile>, String> {
    files
        .iter()
        .map(|host| {
            let name = host
                .file_name()
                .ok_or_else(|| format!("{} has no file name", host.display()))?;
            Ok(InputFile {
                host: host.clone(),
                guest: guest_dir.join(name),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_runs_that_decompress_on_the_host_are_prepared() {
        let k = |v: &[&str]| kernel_use(&crate::cli::command(), &os(v));
        let uses = |kernel: &str, symbols| {
            Some(KernelUse {
                kernel: kernel.into(),
                symbols,
            })
        };
        assert_eq!(
            k(&["run", "--kernel", "/k", "--timeout", "9"]),
            uses("/k", false)
        );
        assert_eq!(k(&["run", "--kernel=/k", "--initcalls"]), uses("/k", true));
        assert_eq!(
            k(&[
                "run",
                "--kernel",
                "/k",
                "--initcalls",
                "--initcalls-method",
                "log"
            ]),
            uses("/k", false)
        );
        assert_eq!(
            k(&["run", "--kernel", "/k", "--exit-sites"]),
            uses("/k", true)
        );
        assert_eq!(k(&["run", "--kernel", "/k", "--guest-decompress"]), None);
        assert_eq!(
            k(&["run", "--kernel", "/k", "--stop-after", "memory"]),
            None
        );
        assert_eq!(k(&["run"]), None);
        // A profiled VMM's kernel: its symbols name the guest's memory.
        assert_eq!(
            k(&["profile", "--", "qemu", "-kernel", "/k"]),
            uses("/k", true)
        );
        assert_eq!(
            k(&[
                "profile",
                "--initcalls",
                "--",
                "cloud-hypervisor",
                "--kernel",
                "/k"
            ]),
            uses("/k", true)
        );
        assert_eq!(
            k(&[
                "profile",
                "--no-guest-memory",
                "--",
                "qemu",
                "-kernel",
                "/k"
            ]),
            None
        );
        assert_eq!(k(&["profile", "--", "qemu", "-hda", "/d"]), None);
        assert_eq!(k(&["not-a-command"]), None);
    }

    #[test]
    fn entries_land_in_the_lab_machine_s_cache() {
        let guest = cache::cache_dir_for(None, Some(GUEST_HOME.as_ref())).unwrap();
        assert_eq!(guest, Path::new("/root/.cache/bootscope/kernels"));
        let placed = placed_in(
            &[
                PathBuf::from("/home/u/.cache/bootscope/kernels/vmlinux-ab"),
                PathBuf::from("/home/u/.cache/bootscope/kernels/vmlinux-ab.kallsyms"),
            ],
            &guest,
        )
        .unwrap();
        assert_eq!(
            placed.iter().map(|p| p.guest.clone()).collect::<Vec<_>>(),
            [guest.join("vmlinux-ab"), guest.join("vmlinux-ab.kallsyms")]
        );
    }

    /// This machine's Debian kernel, prepared twice: the first time fills
    /// a cache (or finds it full), the second finds the entry; both carry
    /// the same verified kernel file, which the lab machine's lookup takes.
    #[test]
    fn a_debian_kernel_is_prepared_into_the_cache() {
        let Ok(debian) = bootscope_lab::guest::find_debian_kernel() else {
            eprintln!("SKIP: no Debian kernel here");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let usage = KernelUse {
            kernel: debian.vmlinuz.clone(),
            symbols: false,
        };
        let probe = probe_kernel(&usage.kernel).unwrap();
        let hdr = probe.setup_header.unwrap();
        let first = cache::host_kernel(&usage.kernel, &hdr, Some(dir.path())).unwrap();
        let file = first.cache_file.clone().unwrap();
        let again = cache::host_kernel(&usage.kernel, &hdr, Some(dir.path())).unwrap();
        assert_eq!(again.cache, CacheUse::Hit);
        assert_eq!(again.cache_file.as_ref(), Some(&file));
        // A copy of the entry in another cache directory is found there by
        // a file of another identity (the lab machine's copy of the
        // bzImage): by digest, verified.
        let other = tempfile::tempdir().unwrap();
        for f in cache::entry_files(&file) {
            std::fs::copy(&f, other.path().join(f.file_name().unwrap())).unwrap();
        }
        let copy = other.path().join("vmlinuz");
        std::fs::copy(&usage.kernel, &copy).unwrap();
        let found = cache::host_kernel(&copy, &hdr, Some(other.path())).unwrap();
        assert_eq!(found.cache, CacheUse::Hit);
        assert_eq!(found.decompress_ns, 0);
    }
}
