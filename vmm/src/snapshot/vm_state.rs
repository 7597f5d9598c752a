//! The VM-wide state KVM keeps: the in-kernel interrupt controllers (the
//! two PICs and the I/O APIC), the PIT and the KVM clock.

use kvm_bindings::{
    kvm_clock_data, kvm_irqchip, kvm_pit_state2, KVM_CLOCK_REALTIME, KVM_IRQCHIP_IOAPIC,
    KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE,
};
use kvm_ioctls::VmFd;
use serde::{Deserialize, Serialize};

/// A KVM state ioctl failed on the VM.
#[derive(Debug, thiserror::Error)]
#[error("the VM's {what}: {ioctl} failed: {source}")]
pub struct VmStateError {
    pub what: &'static str,
    pub ioctl: &'static str,
    #[source]
    pub source: kvm_ioctls::Error,
}

/// The in-kernel devices' state.
#[derive(Clone, Serialize, Deserialize)]
pub struct VmState {
    pub pic_master: kvm_irqchip,
    pub pic_slave: kvm_irqchip,
    pub ioapic: kvm_irqchip,
    pub pit: kvm_pit_state2,
    pub clock: kvm_clock_data,
}

fn chip(vm: &VmFd, id: u32, what: &'static str) -> Result<kvm_irqchip, VmStateError> {
    let mut c = kvm_irqchip {
        chip_id: id,
        ..Default::default()
    };
    vm.get_irqchip(&mut c).map_err(|source| VmStateError {
        what,
        ioctl: "KVM_GET_IRQCHIP",
        source,
    })?;
    Ok(c)
}

impl VmState {
    /// Saves the VM's state; every vCPU is out of `KVM_RUN`.
    pub fn save(vm: &VmFd) -> Result<Self, VmStateError> {
        Ok(Self {
            pic_master: chip(vm, KVM_IRQCHIP_PIC_MASTER, "master PIC")?,
            pic_slave: chip(vm, KVM_IRQCHIP_PIC_SLAVE, "slave PIC")?,
            ioapic: chip(vm, KVM_IRQCHIP_IOAPIC, "I/O APIC")?,
            pit: vm.get_pit2().map_err(|source| VmStateError {
                what: "PIT",
                ioctl: "KVM_GET_PIT2",
                source,
            })?,
            clock: vm.get_clock().map_err(|source| VmStateError {
                what: "clock",
                ioctl: "KVM_GET_CLOCK",
                source,
            })?,
        })
    }

    /// Loads the state into a new VM whose irqchip and PIT exist, before
    /// any vCPU runs. The KVM clock (`KVM_SET_CLOCK`): when the host gave
    /// the host's real time with it at the snapshot (`KVM_CLOCK_REALTIME`,
    /// Linux 5.16 and later on a TSC clocksource), it is set with that flag,
    /// and KVM advances it by the real time that passed since: the guest's
    /// monotonic clock steps forward by the time the snapshot sat (never
    /// back), and its wall time (its boot time plus the KVM clock) is the
    /// host's again. Without it, the clock goes on from the saved value:
    /// still never back, but the guest's wall time then lags the host's by
    /// that time until it corrects it itself (NTP).
    pub fn restore(&self, vm: &VmFd) -> Result<(), VmStateError> {
        for (c, what) in [
            (&self.pic_master, "master PIC"),
            (&self.pic_slave, "slave PIC"),
            (&self.ioapic, "I/O APIC"),
        ] {
            vm.set_irqchip(c).map_err(|source| VmStateError {
                what,
                ioctl: "KVM_SET_IRQCHIP",
                source,
            })?;
        }
        vm.set_pit2(&self.pit).map_err(|source| VmStateError {
            what: "PIT",
            ioctl: "KVM_SET_PIT2",
            source,
        })?;
        let mut clock = self.clock;
        clock.flags &= KVM_CLOCK_REALTIME;
        vm.set_clock(&clock).map_err(|source| VmStateError {
            what: "clock",
            ioctl: "KVM_SET_CLOCK",
            source,
        })
    }
}
