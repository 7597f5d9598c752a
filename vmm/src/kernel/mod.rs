//! Kernel images beyond what linux-loader parses: the compressed vmlinux
//! inside a bzImage, decompressed on the host so the guest can be entered
//! directly.

pub mod decompress;
pub mod identity;
