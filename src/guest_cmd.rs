//! `bootscope guest build debian`: a Debian guest image with systemd
//! (docs/guest.md); the work is `bootscope_lab::debian`'s.
//! `bootscope guest build default`: the default guest's initramfs, and the
//! paths of its kernel and initramfs for scripts (`bootscope_lab::guest`).
//! `bootscope guest build restore`: the restore guest's initramfs
//! (`bootscope_lab::restore_guest`), the same way.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::{Args, Subcommand};

use bootscope_lab::debian::{self, DebianImageSpec};

use crate::common::{usage, Failure};

#[derive(Args)]
pub struct GuestArgs {
    #[command(subcommand)]
    command: GuestCommand,
}

#[derive(Subcommand)]
enum GuestCommand {
    /// Build a guest disk image.
    Build {
        #[command(subcommand)]
        distro: Distro,
    },
}

#[derive(Subcommand)]
enum Distro {
    /// Debian 12 with systemd from Debian's packages (mmdebstrap), as a raw
    /// ext4 image for `run --disk`; its workload unit marks port 0x80 once
    /// multi-user.target is reached, records the units' times for the host
    /// and powers off. Cached by its inputs.
    #[command(after_help = "Boot it with Debian's own kernel and initrd:
  bootscope run --kernel /boot/vmlinuz-VERSION --initrd /boot/initrd.img-VERSION \\
      --disk debian-12.raw --cmdline 'console=ttyS0 root=/dev/vda rw quiet'")]
    Debian(DebianArgs),
    /// The default guest (the one `demo` and `run` without `--kernel` boot):
    /// Debian's kernel from /boot and the project's busybox initramfs, which
    /// prints its hello line and powers off. Prints the kernel's path and
    /// the initramfs's path, one per line, for scripts.
    #[command(after_help = "In a script:
  mapfile -t guest < <(bootscope guest build default --out target/bench/guest.cpio)
  bootscope bench -- run --kernel \"${guest[0]}\" --initrd \"${guest[1]}\"")]
    Default(DefaultArgs),
    /// The restore guest: Debian's kernel from /boot and a busybox
    /// initramfs that fills 64 MiB of its page cache, marks port 0x80 with
    /// 0x61 (the snapshot point: `run --snapshot-at 0x61`), reads them back,
    /// marks 0x62, prints their checksum and powers off. Prints the
    /// kernel's path and the initramfs's path, one per line, for scripts.
    #[command(after_help = "In a script:
  mapfile -t guest < <(bootscope guest build restore --out target/bench/restore.cpio)
  bootscope run --kernel \"${guest[0]}\" --initrd \"${guest[1]}\" --snapshot snap --snapshot-at 0x61
  bootscope run --restore snap --memory-restore uffd")]
    Restore(RestoreArgs),
}

#[derive(Args)]
struct RestoreArgs {
    /// Where to write the initramfs (replaced atomically).
    #[arg(long, short)]
    out: PathBuf,
    /// Carry the kernel's virtio-mmio and virtio-blk modules: with `run
    /// --disk` the guest writes a line to its disk before the mark and
    /// another after it.
    #[arg(long)]
    disk: bool,
}

#[derive(Args)]
struct DefaultArgs {
    /// Where to write the initramfs (replaced atomically); by default
    /// bootscope's own cache, the file `run` without `--kernel` boots.
    #[arg(long, short)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct DebianArgs {
    /// Where to write the image (replaced atomically).
    #[arg(long, short, default_value = "debian-12.raw")]
    out: PathBuf,
    /// Image size (K, M, G, T suffixes; a bare number is MiB), 512M to 1T.
    #[arg(long, default_value = "2G")]
    size: String,
    /// The workload stays up instead of powering off (root logs in on the
    /// serial console without a password).
    #[arg(long)]
    keep_running: bool,
}

pub fn run(args: GuestArgs) -> Result<i32, Failure> {
    let GuestCommand::Build { distro } = args.command;
    match distro {
        Distro::Debian(args) => debian_image(args),
        Distro::Default(args) => default_guest(args),
        Distro::Restore(args) => restore_guest(args),
    }
}

fn restore_guest(args: RestoreArgs) -> Result<i32, Failure> {
    crate::common::check_output("--out", &args.out).map_err(usage)?;
    let kernel = bootscope_lab::find_debian_kernel()
        .map_err(|e| usage(anyhow!("the restore guest boots Debian's kernel: {e}")))?;
    let built = if args.disk {
        bootscope_lab::restore_guest::build_restore_initramfs_with_disk(&args.out, &kernel)
    } else {
        bootscope_lab::restore_guest::build_restore_initramfs(&args.out)
    };
    built.map_err(|e| usage(anyhow!("cannot build the restore guest: {e}")))?;
    let text = format!("{}\n{}\n", kernel.vmlinuz.display(), args.out.display());
    crate::stdout::print(text).map_err(crate::stdout::failure)?;
    Ok(0)
}

fn default_guest(args: DefaultArgs) -> Result<i32, Failure> {
    if let Some(out) = &args.out {
        crate::common::check_output("--out", out).map_err(usage)?;
    }
    let (kernel, initrd) = crate::common::default_guest_at(args.out).map_err(usage)?;
    let text = format!("{}\n{}\n", kernel.display(), initrd.display());
    crate::stdout::print(text).map_err(crate::stdout::failure)?;
    Ok(0)
}

/// Refuses an image output that is not a regular file (or a path where
/// nothing is yet), before the build: an image is booted from a file
/// (`run --disk`), and the build takes minutes to find out that a device
/// or FIFO takes no image.
fn check_image_output(out: &Path) -> Result<(), Failure> {
    crate::common::check_output("--out", out).map_err(usage)?;
    match std::fs::metadata(out) {
        Ok(m) if !m.is_file() => Err(usage(anyhow!(
            "--out {} is a {}; the image goes to a regular file: give a file name",
            out.display(),
            bootscope_model::input::kind_name(m.file_type())
        ))),
        _ => Ok(()),
    }
}

fn debian_image(args: DebianArgs) -> Result<i32, Failure> {
    check_image_output(&args.out)?;
    let size = bootscope_model::size::parse_size(&args.size)
        .map_err(|e| usage(anyhow!("--size {:?}: {e}", args.size)))?;
    debian::check_size(size).map_err(|e| usage(e.into()))?;
    let kernel = bootscope_lab::find_debian_kernel()
        .map_err(|e| usage(anyhow!("the image needs the kernel it boots with: {e}")))?;
    let spec = DebianImageSpec {
        suite: debian::DEFAULT_SUITE.into(),
        size,
        keep_running: args.keep_running,
        kernel: kernel.clone(),
    };
    let started = std::time::Instant::now();
    let mut log = |line: &str| eprintln!("bootscope: {line}");
    let built = debian::build_debian_image(&spec, &args.out, &mut log).map_err(|e| {
        let bad = e.is_bad_input();
        let e = anyhow::Error::new(e);
        if bad {
            usage(e)
        } else {
            Failure::from(e.context("the guest image build failed"))
        }
    })?;
    let version = &kernel.version;
    let text = format!(
        "{} ({}, {:.1} s, sha256 of its data {})\n\
         boot it: bootscope run --kernel /boot/vmlinuz-{version} --initrd /boot/initrd.img-{version} \
         --disk {} --cmdline 'console=ttyS0 {} quiet'\n",
        built.path.display(),
        if built.cache_hit {
            "from the cache"
        } else {
            "built"
        },
        started.elapsed().as_secs_f64(),
        &built.digest[..16],
        built.path.display(),
        debian::ROOT_CMDLINE
    );
    crate::stdout::print(text).map_err(crate::stdout::failure)?;
    Ok(0)
}
