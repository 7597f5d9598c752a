//! Where the boot put the kernel and initrd, saved in the state file so
//! that a restore describes them on its timeline without loading them
//! again: the snapshot's memory holds them already.

use serde::{Deserialize, Serialize};

use crate::loader::{EntryMode, KernelFormat, LoadedInitrd, LoadedKernel};
use crate::timeline::TimelineKernelBoot;

/// The loaded kernel and initrd, as the timeline describes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedImages {
    /// `bzimage` or `elf`.
    pub kernel_format: String,
    /// `linux64` or `pvh`.
    pub entry_mode: String,
    pub entry: u64,
    pub kernel_start: u64,
    pub kernel_end: u64,
    pub cmdline_max: u64,
    pub kernel_mapped_bytes: u64,
    pub kernel_boot: Option<TimelineKernelBoot>,
    pub initrd: Option<SavedInitrd>,
}

/// Where the initrd was put.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedInitrd {
    pub addr: u64,
    pub size: u64,
    pub mapped_from_file: bool,
}

/// A state file names a format or entry this VMM does not know.
#[derive(Debug, thiserror::Error)]
#[error("the saved kernel's {what} {value:?} is not one this VMM knows")]
pub struct UnknownImage {
    pub what: &'static str,
    pub value: String,
}

fn mode_name(m: EntryMode) -> &'static str {
    match m {
        EntryMode::Linux64 => "linux64",
        EntryMode::Pvh => "pvh",
    }
}

impl SavedImages {
    /// What the boot loaded.
    pub fn of(kernel: &LoadedKernel, initrd: Option<&LoadedInitrd>) -> Self {
        Self {
            kernel_format: kernel.format.name().into(),
            entry_mode: mode_name(kernel.mode).into(),
            entry: kernel.entry.0,
            kernel_start: kernel.start,
            kernel_end: kernel.end,
            cmdline_max: kernel.cmdline_max as u64,
            kernel_mapped_bytes: kernel.mapped_from_file,
            kernel_boot: kernel.boot.clone(),
            initrd: initrd.map(|i| SavedInitrd {
                addr: i.addr,
                size: i.size,
                mapped_from_file: i.mapped_from_file,
            }),
        }
    }

    /// The kernel as loaded, without its setup header (a restore writes no
    /// zero page).
    pub fn kernel(&self) -> Result<LoadedKernel, UnknownImage> {
        let format = [KernelFormat::BzImage, KernelFormat::Elf]
            .into_iter()
            .find(|f| f.name() == self.kernel_format)
            .ok_or_else(|| UnknownImage {
                what: "format",
                value: self.kernel_format.clone(),
            })?;
        let mode = [EntryMode::Linux64, EntryMode::Pvh]
            .into_iter()
            .find(|m| mode_name(*m) == self.entry_mode)
            .ok_or_else(|| UnknownImage {
                what: "entry",
                value: self.entry_mode.clone(),
            })?;
        Ok(LoadedKernel {
            format,
            entry: vm_memory::GuestAddress(self.entry),
            mode,
            start: self.kernel_start,
            end: self.kernel_end,
            setup_header: None,
            cmdline_max: self.cmdline_max as usize,
            mapped_from_file: self.kernel_mapped_bytes,
            boot: self.kernel_boot.clone(),
        })
    }

    /// The initrd as loaded.
    pub fn initrd(&self) -> Option<LoadedInitrd> {
        self.initrd.map(|i| LoadedInitrd {
            addr: i.addr,
            size: i.size,
            mapped_from_file: i.mapped_from_file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_reads_back_as_saved_and_an_unknown_format_is_refused() {
        let k = LoadedKernel {
            format: KernelFormat::BzImage,
            entry: vm_memory::GuestAddress(0x10_0200),
            mode: EntryMode::Pvh,
            start: 0x10_0000,
            end: 0x20_0000,
            setup_header: None,
            cmdline_max: 2048,
            mapped_from_file: 0,
            boot: None,
        };
        let i = LoadedInitrd {
            addr: 0x300_0000,
            size: 4096,
            mapped_from_file: true,
        };
        let saved = SavedImages::of(&k, Some(&i));
        let json = serde_json::to_string(&saved).unwrap();
        let back: SavedImages = serde_json::from_str(&json).unwrap();
        let k2 = back.kernel().unwrap();
        assert_eq!(
            (
                k2.format,
                k2.mode,
                k2.entry,
                k2.start,
                k2.end,
                k2.cmdline_max
            ),
            (k.format, k.mode, k.entry, k.start, k.end, k.cmdline_max)
        );
        assert_eq!(back.initrd(), Some(i));
        let mut bad = back;
        bad.kernel_format = "uImage".into();
        assert!(bad.kernel().unwrap_err().to_string().contains("uImage"));
    }
}
