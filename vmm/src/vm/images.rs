//! What the kernel load stage leaves in guest memory: the kernel and the
//! initrd, which the later stages boot from and the timeline describes.

use crate::loader::{LoadedInitrd, LoadedKernel};

/// The kernel and initrd in guest memory.
pub(super) struct BootImages {
    pub(super) kernel: LoadedKernel,
    pub(super) initrd: Option<LoadedInitrd>,
}

impl BootImages {
    /// The kernel and initrd a snapshot's boot loaded, as its state file
    /// describes them: a restore places nothing (the snapshot's memory
    /// holds them) and describes them on its timeline.
    pub(super) fn saved(
        saved: &crate::snapshot::images::SavedImages,
    ) -> Result<Self, crate::snapshot::SnapshotError> {
        let kernel = saved
            .kernel()
            .map_err(|e| crate::snapshot::SnapshotError::Stopping(e.to_string()))?;
        Ok(Self {
            kernel,
            initrd: saved.initrd(),
        })
    }
}
