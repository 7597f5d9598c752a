//! Kernel images beyond what linux-loader parses: the ELF headers the VMM
//! checks before loading, and the compressed vmlinux inside a bzImage,
//! decompressed on the host (and cached) so the guest can be entered
//! directly.

pub mod cache;
pub mod decompress;
pub mod elf;
pub mod identity;
pub mod initrd;
pub mod initrd_modules;
