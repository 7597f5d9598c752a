//! A run restored from a snapshot: the VM built as for a boot (memory,
//! irqchip, devices, vCPUs) but with no kernel loaded (its identity is
//! checked, its bytes are in the snapshot's memory), then the snapshot's
//! memory, VM state, devices and vCPUs loaded over that set-up before the
//! first `KVM_RUN`.

use std::sync::Arc;

use kvm_bindings::{kvm_cpuid_entry2, CpuId};

use crate::snapshot::state::FileIdentity;
use crate::snapshot::{self, memory, MemoryRestore, RestoreRequest, SnapshotError};
use crate::timeline::{vmm_marks, Recorder};
use vm_memory::GuestMemoryMmap;

use super::builder::VmBuilder;
use super::images::BootImages;
use super::snapshot::restore_marks;
use super::{RunReport, VmConfig, VmError};

fn mismatch(what: &'static str, snapshot: String, given: String) -> SnapshotError {
    SnapshotError::Mismatch {
        what,
        snapshot,
        given,
    }
}

/// The file at `path` is the one the snapshot recorded.
fn same_file(
    what: &'static str,
    id: &FileIdentity,
    path: &std::path::Path,
) -> Result<(), SnapshotError> {
    match id.matches(path) {
        Ok(true) => Ok(()),
        _ => Err(SnapshotError::Changed {
            what,
            path: path.to_path_buf(),
        }),
    }
}

/// Checks the configuration against what the snapshot was made for.
pub fn check_identity(cfg: &VmConfig, req: &RestoreRequest) -> Result<(), SnapshotError> {
    let id = &req.snapshot.state.identity;
    same_file("the kernel", &id.kernel, &cfg.kernel)?;
    match (&id.initrd, &cfg.initrd) {
        (Some(i), Some(p)) => same_file("the initrd", i, p)?,
        (None, None) => {}
        (i, p) => {
            return Err(mismatch(
                "initrd",
                i.as_ref().map_or("none".into(), |i| i.path.clone()),
                p.as_ref()
                    .map_or("none".into(), |p| p.display().to_string()),
            ))
        }
    }
    if cfg.memory_bytes != id.memory_bytes {
        return Err(mismatch(
            "memory size",
            format!("{} MiB", id.memory_bytes >> 20),
            format!("{} MiB", cfg.memory_bytes >> 20),
        ));
    }
    if cfg.vcpus != id.vcpus {
        return Err(mismatch(
            "vCPU count",
            id.vcpus.to_string(),
            cfg.vcpus.to_string(),
        ));
    }
    if cfg.cmdline != id.cmdline {
        return Err(mismatch(
            "command line",
            id.cmdline.clone(),
            cfg.cmdline.clone(),
        ));
    }
    if cfg.acpi != id.acpi || cfg.virtio.rng != id.rng || cfg.virtio.console != id.virtio_console {
        return Err(mismatch(
            "devices",
            format!(
                "acpi {} rng {} virtio console {}",
                id.acpi, id.rng, id.virtio_console
            ),
            format!(
                "acpi {} rng {} virtio console {}",
                cfg.acpi, cfg.virtio.rng, cfg.virtio.console
            ),
        ));
    }
    if cfg.virtio.disks.len() != id.disks.len() {
        return Err(mismatch(
            "disks",
            id.disks.len().to_string(),
            cfg.virtio.disks.len().to_string(),
        ));
    }
    if !req.force {
        for (d, spec) in id.disks.iter().zip(&cfg.virtio.disks) {
            same_file("the disk", d, &spec.path)?;
        }
    }
    Ok(())
}

fn kvm_cpuid(leaves: &[snapshot::CpuidLeaf]) -> Result<CpuId, SnapshotError> {
    let entries: Vec<kvm_cpuid_entry2> = leaves
        .iter()
        .map(|l| kvm_cpuid_entry2 {
            function: l.function,
            index: l.index,
            flags: l.flags,
            eax: l.eax,
            ebx: l.ebx,
            ecx: l.ecx,
            edx: l.edx,
            ..Default::default()
        })
        .collect();
    CpuId::from_entries(&entries)
        .map_err(|_| SnapshotError::Stopping("the saved CPUID has too many leaves".into()))
}

fn kvm_failed(what: &'static str) -> impl Fn(kvm_ioctls::Error) -> SnapshotError {
    move |e| SnapshotError::Stopping(format!("{what} failed: {e}"))
}

/// Tells each vCPU's guest that the host stopped it (`KVM_KVMCLOCK_CTRL`,
/// as QEMU does when a VM runs again): its kvm-clock page then carries
/// `PVCLOCK_GUEST_STOPPED`, which Linux's RCU stall, soft-lockup and
/// workqueue watchdogs check before they take the clock's step over the
/// time the snapshot sat for a stall (and print stack dumps on the
/// console, hundreds of milliseconds on a serial port). True when every
/// vCPU took it; false when the guest had no kvm-clock set up (EINVAL:
/// nothing to tell).
fn tell_guest_paused(fds: &[kvm_ioctls::VcpuFd]) -> Result<bool, SnapshotError> {
    for fd in fds {
        match fd.kvmclock_ctrl() {
            Ok(()) => {}
            Err(e) if e.errno() == libc::EINVAL => return Ok(false),
            Err(e) => return Err(kvm_failed("KVM_KVMCLOCK_CTRL")(e)),
        }
    }
    Ok(!fds.is_empty())
}

/// Fills guest memory from the snapshot's memory file, as `req.memory`
/// says; with `req.verify` checks it against the snapshot's digest.
fn restore_memory(mem: &GuestMemoryMmap, req: &RestoreRequest) -> Result<(), SnapshotError> {
    let snap = &req.snapshot;
    let path = snap.dir.join(snapshot::state::MEMORY_FILE);
    let regions = &snap.state.identity.regions;
    let io = |what: &'static str| {
        let path = path.clone();
        move |source| SnapshotError::Io { path, what, source }
    };
    match req.memory {
        MemoryRestore::Copy => {
            memory::copy_in(mem, &snap.memory, regions).map_err(io("read"))?;
        }
        // Registered with userfaultfd by `restore_memory::Session::start`.
        MemoryRestore::Uffd => {}
        MemoryRestore::Mmap => {
            for r in regions {
                let at = vm_memory::GuestAddress(r.guest_addr);
                crate::loader::map_file_over_guest(mem, at, &snap.memory, r.file_offset, r.bytes)
                    .map_err(io("map over guest memory"))?;
            }
        }
    }
    if req.verify {
        let digest = memory::guest_digest(mem).map_err(io("check"))?;
        if digest != snap.manifest.memory_xxh3 {
            return Err(SnapshotError::Corrupt {
                path,
                why: "guest memory after the restore is not the snapshot's (--verify)".into(),
            });
        }
    }
    Ok(())
}

/// Builds the VM the snapshot describes, loads its state and runs the
/// guest on from where it stopped. Every check that needs no VM was made
/// when the snapshot was opened; the configuration's and the CPU's are
/// made here, before any vCPU runs.
pub fn restore(
    mut cfg: VmConfig,
    recorder: Arc<Recorder>,
    req: RestoreRequest,
) -> Result<RunReport, VmError> {
    check_identity(&cfg, &req)?;
    let run_stop = cfg.stop.get_or_insert_with(Default::default).clone();
    let huge = cfg.memory.hugepages.map(|h| h.bytes());
    let state = &req.snapshot.state;
    // The kernel is neither read nor placed: its identity was checked
    // above, and the snapshot's memory holds it.
    let mut vm = VmBuilder::with_kernel(cfg, recorder.clone(), false)?;
    let ram = vm.memory()?;
    recorder.vmm(vmm_marks::MEMORY_READY);
    let mem = ram.backing.guest_memory();
    let layout = memory::layout(mem);
    if layout != state.identity.regions {
        return Err(SnapshotError::Mismatch {
            what: "memory layout",
            snapshot: format!("{:?}", state.identity.regions),
            given: format!("{layout:?}"),
        }
        .into());
    }
    vm.irqchip()?;
    let images = BootImages::saved(&state.images)?;
    let devices = vm.devices(&ram)?;
    let vcpus = vm.vcpus(&ram, None)?;
    if let Some(v) = vcpus.fds.first() {
        let host = super::snapshot::cpuid_of(v).map_err(kvm_failed("KVM_GET_CPUID2"))?;
        snapshot::check_cpu(&state.identity.cpuid, &host)?;
    }
    recorder.vmm(restore_marks::VMM_SETUP);
    let mut lazy = super::restore_memory::Session::start(mem, &req, &recorder, run_stop, huge)?;
    restore_memory(mem, &req)?;
    lazy.loaded(&req, &recorder)?;
    let cpuid = kvm_cpuid(&state.identity.cpuid)?;
    state.vm.restore(&vm.vm).map_err(SnapshotError::from)?;
    devices
        .restore_state(&state.devices)
        .map_err(SnapshotError::from)?;
    if state.vcpus.len() != vcpus.fds.len() {
        return Err(SnapshotError::Mismatch {
            what: "vCPU states",
            snapshot: state.vcpus.len().to_string(),
            given: vcpus.fds.len().to_string(),
        }
        .into());
    }
    for (fd, s) in vcpus.fds.iter().zip(&state.vcpus) {
        fd.set_cpuid2(&cpuid)
            .map_err(kvm_failed("KVM_SET_CPUID2"))?;
        s.restore(fd).map_err(SnapshotError::from)?;
    }
    if tell_guest_paused(&vcpus.fds)? {
        recorder.vmm(restore_marks::GUEST_PAUSED);
    }
    if state.identity.acpi {
        crate::devices::vmgenid::renew(&vm.vm, mem)
            .map_err(|e| SnapshotError::Stopping(e.to_string()))?;
        recorder.vmm(crate::devices::vmgenid::NEW_ID_MARK);
    }
    recorder.vmm(restore_marks::STATE_RESTORED);
    recorder.vmm(vmm_marks::VCPUS_CREATED);
    if let Some(hook) = vm.cfg.before_first_run.take() {
        hook();
    }
    lazy.resume(&req);
    let mut report = vm.run(ram, images, devices, vcpus)?;
    lazy.finish(&mut report.timeline, &req);
    Ok(report)
}
