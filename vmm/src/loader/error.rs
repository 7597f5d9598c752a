//! The loader's errors, each naming the file and what to do.

use std::path::PathBuf;

/// Errors of kernel, initrd and command line loading.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The kernel file cannot be opened or read.
    #[error("cannot read kernel {path}: {source} (check the path and its permissions)")]
    KernelRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is neither a bzImage nor an ELF kernel.
    #[error(
        "{path} is not a Linux kernel: {detail}; pass a bzImage (such as /boot/vmlinuz-*) \
         or an ELF vmlinux"
    )]
    NotAKernel { path: PathBuf, detail: String },
    /// The bzImage is shorter than its own header says.
    #[error(
        "{path} is a truncated bzImage: the header describes {expected} bytes but the file has \
         {actual}; copy the kernel again"
    )]
    TruncatedBzImage {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    /// The bzImage predates the 64-bit boot protocol.
    #[error(
        "{path} uses boot protocol {version:#06x} without a 64-bit entry point; bootscope needs \
         a 64-bit kernel with boot protocol 2.12 or later"
    )]
    No64BitEntry { path: PathBuf, version: u16 },
    /// The ELF has neither a PVH note nor an entry address.
    #[error(
        "{path} is an ELF file without an entry point (no PVH note and e_entry is 0); pass a \
         vmlinux built with CONFIG_PVH=y or a bzImage"
    )]
    ElfNoEntry { path: PathBuf },
    /// Two loadable segments share guest memory.
    #[error(
        "{path} has overlapping loadable segments (guest-physical {:#x}..{:#x} and {:#x}..{:#x}): \
         one would overwrite the other; relink the kernel so each PT_LOAD has its own addresses",
        first.0, first.1, second.0, second.1
    )]
    ElfOverlappingSegments {
        path: PathBuf,
        first: (u64, u64),
        second: (u64, u64),
    },
    /// A loadable segment lies below 1 MiB, over the boot structures.
    #[error(
        "{path} has a loadable segment at guest-physical {start:#x}..{end:#x}, below 1 MiB where \
         the VMM puts the boot structures (page tables, zero page, command line, ACPI tables); \
         relink the kernel to load at 1 MiB or above"
    )]
    ElfLowSegment { path: PathBuf, start: u64, end: u64 },
    /// The entry point is not inside any loaded segment.
    #[error(
        "{path}: its entry point {entry:#x} ({kind}) lies outside every loadable segment, so the \
         guest would start in empty memory; pass a vmlinux whose entry is inside its code"
    )]
    ElfEntryOutside {
        path: PathBuf,
        entry: u64,
        kind: &'static str,
    },
    /// The ELF is not for x86-64.
    #[error("{path} is an ELF file for machine {machine}, not x86-64")]
    ElfWrongMachine { path: PathBuf, machine: u16 },
    /// linux-loader refused the image.
    #[error("cannot load kernel {path}: {source}")]
    Loader {
        path: PathBuf,
        #[source]
        source: linux_loader::loader::Error,
    },
    /// The kernel does not fit in guest memory.
    #[error(
        "guest memory ({memory_mib} MiB) is too small for kernel {path}: it needs at least \
         {needed_mib} MiB; raise --memory"
    )]
    MemoryTooSmall {
        path: PathBuf,
        memory_mib: u64,
        needed_mib: u64,
    },
    /// The initrd cannot be opened or read.
    #[error("cannot read initrd {path}: {source} (check the path and its permissions)")]
    InitrdRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The initrd is a FIFO, device or directory.
    #[error("initrd {path} is a {kind}, not a regular file; give an initramfs file")]
    InitrdNotRegular { path: PathBuf, kind: &'static str },
    /// The initrd does not fit where the kernel can reach it.
    #[error(
        "initrd {path} ({size_mib} MiB) does not fit in guest memory below the kernel's limit \
         ({available_mib} MiB free after the kernel); raise --memory or shrink the initrd"
    )]
    InitrdTooLarge {
        path: PathBuf,
        size_mib: u64,
        available_mib: u64,
    },
    /// The command line is longer than the kernel accepts.
    #[error(
        "the kernel command line is {len} bytes but this kernel accepts at most {max}; shorten \
         --cmdline"
    )]
    CmdlineTooLong { len: usize, max: usize },
    /// The command line contains a byte the kernel cannot take.
    #[error("the kernel command line contains a NUL or non-ASCII byte; remove it")]
    CmdlineInvalid,
    /// The bzImage's compressed kernel is damaged.
    #[error(
        "{path} cannot be booted: {compression} payload is corrupt ({detail}); the kernel \
         would not decompress in the guest either. Copy or reinstall the kernel image"
    )]
    CorruptPayload {
        path: PathBuf,
        compression: &'static str,
        detail: String,
    },
    /// Writing to guest memory failed.
    #[error("cannot write {what} to guest memory: {detail}")]
    GuestWrite { what: &'static str, detail: String },
}
