//! `run`'s virtio device options: `--disk PATH[,readonly]` (repeatable),
//! `--rng`/`--no-rng`, `--console serial|virtio`.

use bootscope_vmm::virtio::DiskSpec;

/// Which device carries the guest's console.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ConsoleKind {
    /// COM1, the 8250 UART (`console=ttyS0`): one exit per byte.
    #[default]
    Serial,
    /// A virtio console (`console=hvc0`): one queue notification per write.
    Virtio,
}

#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct DeviceArgs {
    /// A virtio-blk disk from a raw image or an unmounted block device
    /// (repeatable; the guest sees /dev/vda, /dev/vdb, ... in this order).
    /// The image is locked (OFD lock and flock): exclusively, or shared
    /// with other readers when `,readonly`; a block device is held
    /// exclusively. An image no one may write needs `,readonly`.
    #[arg(long = "disk", value_name = "PATH[,readonly]", value_parser = parse_disk)]
    pub disks: Vec<DiskSpec>,
    /// Give the guest a virtio-rng device (the default when it has ACPI).
    #[arg(long, overrides_with = "no_rng")]
    pub rng: bool,
    /// Leave the virtio-rng device out.
    #[arg(long)]
    pub no_rng: bool,
    /// The guest's console device: serial (ttyS0) or virtio (hvc0; the
    /// default command line then says console=hvc0). Both feed --serial.
    #[arg(long, value_enum, default_value = "serial")]
    pub console: ConsoleKind,
}

fn parse_disk(s: &str) -> Result<DiskSpec, String> {
    s.parse::<DiskSpec>().map_err(|e| e.to_string())
}

impl DeviceArgs {
    /// Whether the guest gets a virtio-rng: asked for, or by default when
    /// it has ACPI tables to find it in.
    pub fn rng(&self, acpi: bool) -> bool {
        if self.no_rng {
            false
        } else {
            self.rng || acpi
        }
    }

    pub fn virtio_console(&self) -> bool {
        self.console == ConsoleKind::Virtio
    }

    /// The command line for `--console`: a virtio console turns the
    /// default command line's `console=ttyS0` into `console=hvc0`; a
    /// command line given is left as it is.
    pub fn cmdline(&self, cmdline: &str) -> String {
        if self.virtio_console() && cmdline == crate::common::DEFAULT_CMDLINE {
            cmdline.replacen("console=ttyS0", "console=hvc0", 1)
        } else {
            cmdline.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_defaults_to_acpi_and_obeys_the_flags() {
        let mut a = DeviceArgs::default();
        assert!(a.rng(true));
        assert!(!a.rng(false));
        a.rng = true;
        assert!(a.rng(false));
        a.no_rng = true;
        assert!(!a.rng(true));
    }

    #[test]
    fn virtio_console_changes_only_the_default_cmdline() {
        let mut a = DeviceArgs::default();
        let d = crate::common::DEFAULT_CMDLINE;
        assert_eq!(a.cmdline(d), d);
        a.console = ConsoleKind::Virtio;
        assert!(a.cmdline(d).starts_with("console=hvc0 "));
        assert_eq!(a.cmdline("console=ttyS0 quiet"), "console=ttyS0 quiet");
    }
}
