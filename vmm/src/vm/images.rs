//! What the kernel load stage leaves in guest memory: the kernel and the
//! initrd, which the later stages boot from and the timeline describes.

use crate::loader::{LoadedInitrd, LoadedKernel};

/// The kernel and initrd in guest memory.
pub(super) struct BootImages {
    pub(super) kernel: LoadedKernel,
    pub(super) initrd: Option<LoadedInitrd>,
}
