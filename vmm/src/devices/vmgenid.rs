//! The VM generation ID (`crate::x86::vmgenid` describes it in the DSDT):
//! 16 random bytes at [`layout::VMGENID_START`] in guest memory, written
//! at boot and again, fresh, on every restore, followed by the generic
//! event device's interrupt, so that each guest restored from one snapshot
//! learns it is a new VM and reseeds its random number generator. Its
//! state is the ID itself, which lives in guest memory: a snapshot's
//! memory file carries it, and a restore replaces it.

use kvm_ioctls::VmFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout;

/// The ID's size in bytes.
pub const ID_BYTES: usize = 16;

/// The VMM's mark when a restore gave the guest a new generation ID and
/// raised the notification.
pub const NEW_ID_MARK: &str = "restore: new VM generation ID";

/// Writing the ID or raising the interrupt failed.
#[derive(Debug, thiserror::Error)]
pub enum VmGenIdError {
    #[error("cannot draw a VM generation ID from getrandom: {0}")]
    Random(#[source] std::io::Error),
    #[error("cannot write the VM generation ID into guest memory at {addr:#x}: {source}")]
    Write {
        addr: u64,
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    #[error(
        "cannot raise the generic event device's interrupt {irq}: KVM_IRQ_LINE failed: {source}"
    )]
    Notify {
        irq: u32,
        #[source]
        source: kvm_ioctls::Error,
    },
}

/// Writes a fresh random ID into guest memory and returns it.
pub fn write_new_id(mem: &GuestMemoryMmap) -> Result<[u8; ID_BYTES], VmGenIdError> {
    let mut id = [0u8; ID_BYTES];
    crate::virtio::rng::getrandom(&mut id).map_err(VmGenIdError::Random)?;
    mem.write_slice(&id, GuestAddress(layout::VMGENID_START))
        .map_err(|source| VmGenIdError::Write {
            addr: layout::VMGENID_START,
            source,
        })?;
    Ok(id)
}

/// The ID in guest memory now.
pub fn read_id(mem: &GuestMemoryMmap) -> Result<[u8; ID_BYTES], VmGenIdError> {
    let mut id = [0u8; ID_BYTES];
    mem.read_slice(&mut id, GuestAddress(layout::VMGENID_START))
        .map_err(|source| VmGenIdError::Write {
            addr: layout::VMGENID_START,
            source,
        })?;
    Ok(id)
}

/// Raises the generic event device's edge-triggered interrupt (a rising
/// then a falling edge on its I/O APIC pin): the guest's GED driver runs
/// `_EVT`, which notifies `VGEN` (0x80). Called once every vCPU's state is
/// loaded, before the first `KVM_RUN`: the interrupt waits in the I/O APIC
/// and local APIC until the guest takes it.
pub fn notify(vm: &VmFd) -> Result<(), VmGenIdError> {
    let irq = layout::GED_IRQ;
    for level in [true, false] {
        vm.set_irq_line(irq, level)
            .map_err(|source| VmGenIdError::Notify { irq, source })?;
    }
    Ok(())
}

/// After a restore: a fresh ID in guest memory and the guest notified.
pub fn renew(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<[u8; ID_BYTES], VmGenIdError> {
    let id = write_new_id(mem)?;
    notify(vm)?;
    Ok(id)
}
