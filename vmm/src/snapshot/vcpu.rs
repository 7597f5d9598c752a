//! One vCPU's architectural state as KVM keeps it: saved on the vCPU's own
//! thread once it is out of `KVM_RUN` with its last exit completed, and
//! loaded into a new vCPU before its first `KVM_RUN`.

use kvm_bindings::{
    kvm_debugregs, kvm_lapic_state, kvm_mp_state, kvm_regs, kvm_sregs, kvm_vcpu_events, kvm_xcrs,
    kvm_xsave, Msrs,
};
use kvm_ioctls::VcpuFd;
use serde::{Deserialize, Serialize};

/// A KVM state ioctl failed on a vCPU.
#[derive(Debug, thiserror::Error)]
#[error("vcpu{vcpu}: {ioctl} failed: {source}")]
pub struct VcpuStateError {
    pub vcpu: u32,
    pub ioctl: &'static str,
    #[source]
    pub source: kvm_ioctls::Error,
}

/// One model-specific register and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsrValue {
    pub index: u32,
    pub data: u64,
}

/// Everything KVM holds of one vCPU. The KVM structures are kept as KVM
/// lays them out (their bytes, `kvm-bindings`' serde form).
#[derive(Serialize, Deserialize)]
pub struct VcpuState {
    pub index: u32,
    pub regs: kvm_regs,
    pub sregs: kvm_sregs,
    pub xsave: kvm_xsave,
    pub xcrs: kvm_xcrs,
    /// The MSRs of `KVM_GET_MSR_INDEX_LIST` that this vCPU could read.
    pub msrs: Vec<MsrValue>,
    pub lapic: kvm_lapic_state,
    pub events: kvm_vcpu_events,
    pub mp_state: kvm_mp_state,
    pub debugregs: kvm_debugregs,
}

fn fail(vcpu: u32, ioctl: &'static str) -> impl Fn(kvm_ioctls::Error) -> VcpuStateError {
    move |source| VcpuStateError {
        vcpu,
        ioctl,
        source,
    }
}

/// Completes the vCPU's last exit (a port or MMIO access is finished, and
/// its instruction pointer moved past it, only by the next `KVM_RUN`):
/// enters with `immediate_exit` set, which returns at once with `EINTR`.
pub fn complete_pending_exit(vcpu: &mut VcpuFd, index: u32) -> Result<(), VcpuStateError> {
    vcpu.set_kvm_immediate_exit(1);
    let r = vcpu.run().map(|_| ());
    vcpu.set_kvm_immediate_exit(0);
    match r {
        Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => Ok(()),
        Err(source) => Err(VcpuStateError {
            vcpu: index,
            ioctl: "KVM_RUN (immediate exit)",
            source,
        }),
        Ok(()) => Ok(()),
    }
}

/// Reads every MSR of `indices` the vCPU lets us read: `KVM_GET_MSRS`
/// stops at the first it refuses, which is left out.
fn read_msrs(vcpu: &VcpuFd, index: u32, indices: &[u32]) -> Result<Vec<MsrValue>, VcpuStateError> {
    let mut out = Vec::with_capacity(indices.len());
    let mut rest = indices;
    while !rest.is_empty() {
        let entries: Vec<kvm_bindings::kvm_msr_entry> = rest
            .iter()
            .map(|&i| kvm_bindings::kvm_msr_entry {
                index: i,
                ..Default::default()
            })
            .collect();
        let mut msrs = Msrs::from_entries(&entries).map_err(|_| VcpuStateError {
            vcpu: index,
            ioctl: "KVM_GET_MSRS (list too long)",
            source: kvm_ioctls::Error::new(libc::E2BIG),
        })?;
        let n = vcpu
            .get_msrs(&mut msrs)
            .map_err(fail(index, "KVM_GET_MSRS"))?;
        out.extend(msrs.as_slice()[..n].iter().map(|e| MsrValue {
            index: e.index,
            data: e.data,
        }));
        // Entry n was refused: skip it.
        rest = rest.get(n + 1..).unwrap_or(&[]);
    }
    Ok(out)
}

impl VcpuState {
    /// Saves vCPU `index`, which is out of `KVM_RUN` with its last exit
    /// completed ([`complete_pending_exit`]).
    pub fn save(vcpu: &VcpuFd, index: u32, msr_indices: &[u32]) -> Result<Self, VcpuStateError> {
        // The MP state first: reading it makes KVM settle pending APIC
        // events (as QEMU and Firecracker order it).
        let mp_state = vcpu
            .get_mp_state()
            .map_err(fail(index, "KVM_GET_MP_STATE"))?;
        Ok(Self {
            index,
            mp_state,
            regs: vcpu.get_regs().map_err(fail(index, "KVM_GET_REGS"))?,
            sregs: vcpu.get_sregs().map_err(fail(index, "KVM_GET_SREGS"))?,
            xsave: vcpu.get_xsave().map_err(fail(index, "KVM_GET_XSAVE"))?,
            xcrs: vcpu.get_xcrs().map_err(fail(index, "KVM_GET_XCRS"))?,
            debugregs: vcpu
                .get_debug_regs()
                .map_err(fail(index, "KVM_GET_DEBUGREGS"))?,
            lapic: vcpu.get_lapic().map_err(fail(index, "KVM_GET_LAPIC"))?,
            msrs: read_msrs(vcpu, index, msr_indices)?,
            events: vcpu
                .get_vcpu_events()
                .map_err(fail(index, "KVM_GET_VCPU_EVENTS"))?,
        })
    }

    /// Loads the state into a new vCPU (its CPUID already set), in the
    /// order Firecracker restores: registers before the APIC, MSRs after
    /// the APIC (the TSC deadline needs the APIC's mode), events last.
    pub fn restore(&self, vcpu: &VcpuFd) -> Result<(), VcpuStateError> {
        let i = self.index;
        vcpu.set_mp_state(self.mp_state)
            .map_err(fail(i, "KVM_SET_MP_STATE"))?;
        vcpu.set_regs(&self.regs).map_err(fail(i, "KVM_SET_REGS"))?;
        vcpu.set_sregs(&self.sregs)
            .map_err(fail(i, "KVM_SET_SREGS"))?;
        // SAFETY: the buffer is a whole `kvm_xsave` that KVM_GET_XSAVE
        // filled on a vCPU of the same CPUID (checked before the restore).
        unsafe { vcpu.set_xsave(&self.xsave) }.map_err(fail(i, "KVM_SET_XSAVE"))?;
        vcpu.set_xcrs(&self.xcrs).map_err(fail(i, "KVM_SET_XCRS"))?;
        vcpu.set_debug_regs(&self.debugregs)
            .map_err(fail(i, "KVM_SET_DEBUGREGS"))?;
        vcpu.set_lapic(&self.lapic)
            .map_err(fail(i, "KVM_SET_LAPIC"))?;
        let entries: Vec<kvm_bindings::kvm_msr_entry> = self
            .msrs
            .iter()
            .map(|m| kvm_bindings::kvm_msr_entry {
                index: m.index,
                data: m.data,
                ..Default::default()
            })
            .collect();
        let msrs = Msrs::from_entries(&entries).map_err(|_| VcpuStateError {
            vcpu: i,
            ioctl: "KVM_SET_MSRS (list too long)",
            source: kvm_ioctls::Error::new(libc::E2BIG),
        })?;
        let n = vcpu.set_msrs(&msrs).map_err(fail(i, "KVM_SET_MSRS"))?;
        if n != entries.len() {
            let refused = entries.get(n).map_or(0, |e| e.index);
            return Err(VcpuStateError {
                vcpu: i,
                ioctl: if refused == 0 {
                    "KVM_SET_MSRS"
                } else {
                    "KVM_SET_MSRS (an MSR refused)"
                },
                source: kvm_ioctls::Error::new(libc::EINVAL),
            });
        }
        vcpu.set_vcpu_events(&self.events)
            .map_err(fail(i, "KVM_SET_VCPU_EVENTS"))
    }
}
