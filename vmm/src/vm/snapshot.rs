//! A run that takes a snapshot at a point, and a run restored from one
//! (`crate::snapshot`): the same build stages as a boot, with the
//! snapshot point installed, or with the saved state loaded over the
//! set-up before the first `KVM_RUN`.

use std::sync::Arc;
use std::time::Duration;

use kvm_bindings::KVM_MAX_CPUID_ENTRIES;
use kvm_ioctls::{Kvm, VcpuFd};

use crate::devices::Devices;
use crate::snapshot::images::SavedImages;
use crate::snapshot::state::{FileIdentity, Identity, MachineState, Manifest};
use crate::snapshot::state::{MANIFEST_FILE, MEMORY_FILE, SCHEMA, STATE_FILE, VERSION};
use crate::snapshot::vm_state::VmState;
use crate::snapshot::{self, files, memory, CpuidLeaf, SnapshotError};
use crate::snapshot::{SnapshotPoint, SnapshotRequest};
use crate::timeline::{vmm_marks, Recorder};

use super::builder::{GuestRam, VmBuilder};
use super::images::BootImages;
use super::{RunReport, VmConfig, VmError};

pub use crate::timeline::restore_marks;

/// How long the vCPUs may take to park.
const PARK_LIMIT: Duration = Duration::from_secs(5);

/// What the run loop does after the snapshot point.
pub(super) enum SnapshotStep {
    /// No snapshot was asked for.
    NotAsked,
    /// Taken; the guest goes on.
    Resumed,
    /// Taken; the run ends (the detail says where it went).
    Ended(String),
    /// It failed; the run ends.
    Failed(String),
}

pub(super) fn cpuid_of(vcpu: &VcpuFd) -> Result<Vec<CpuidLeaf>, kvm_ioctls::Error> {
    let c = vcpu.get_cpuid2(KVM_MAX_CPUID_ENTRIES)?;
    Ok(c.as_slice()
        .iter()
        .map(|e| CpuidLeaf {
            function: e.function,
            index: e.index,
            flags: e.flags,
            eax: e.eax,
            ebx: e.ebx,
            ecx: e.ecx,
            edx: e.edx,
        })
        .collect())
}

fn io_error(what: &'static str) -> impl Fn(std::io::Error) -> SnapshotError {
    move |source| SnapshotError::Io {
        path: what.into(),
        what: "use",
        source,
    }
}

/// Boots the guest with the snapshot point of `request` installed: at the
/// point the VMM writes the snapshot, then ends the run or goes on.
pub fn run_with_snapshot(
    cfg: VmConfig,
    recorder: Arc<Recorder>,
    request: SnapshotRequest,
) -> Result<RunReport, VmError> {
    files::check_target(&request.dir, cfg.memory_bytes)?;
    let kvm = Kvm::new().map_err(VmError::OpenKvm)?;
    let msrs = kvm
        .get_msr_index_list()
        .map_err(|e| SnapshotError::Stopping(format!("KVM_GET_MSR_INDEX_LIST failed: {e}")))?;
    let mut vm = VmBuilder::new(cfg, recorder.clone())?;
    let ram = vm.memory()?;
    recorder.vmm(vmm_marks::MEMORY_READY);
    vm.irqchip()?;
    let images = vm.load_kernel(&ram)?;
    vm.boot_data(&ram, &images)?;
    recorder.vmm(vmm_marks::KERNEL_LOADED);
    let devices = vm.devices(&ram)?;
    let vcpus = vm.vcpus(&ram, Some(&images.kernel))?;
    let cpuid = match vcpus.fds.first() {
        Some(v) => {
            cpuid_of(v).map_err(|e| SnapshotError::Stopping(format!("KVM_GET_CPUID2: {e}")))?
        }
        None => Vec::new(),
    };
    let point = Arc::new(SnapshotPoint::new(
        request,
        msrs.as_slice().to_vec(),
        cpuid,
        vcpus.fds.len() as u32,
    ));
    let on_mark = point.clone();
    recorder.set_snapshot_trigger(Box::new(move |m| on_mark.on_mark(m)));
    devices.set_snapshot_point(point);
    recorder.vmm(vmm_marks::VCPUS_CREATED);
    if let Some(hook) = vm.cfg.before_first_run.take() {
        hook();
    }
    Ok(vm.run(ram, images, devices, vcpus)?)
}

impl VmBuilder {
    /// After the run loop woke: when the snapshot point was reached, parks
    /// every vCPU, writes the snapshot and releases them (to go on or to
    /// end).
    pub(super) fn snapshot_if_asked(
        &self,
        ram: &GuestRam,
        images: &BootImages,
        devices: &Devices,
    ) -> SnapshotStep {
        let Some(point) = devices.snapshot_point().filter(|p| p.requested()) else {
            return SnapshotStep::NotAsked;
        };
        let kick = |t: libc::pthread_t| {
            // SAFETY: `t` is a vCPU thread registered with the point, which
            // deregisters it (under the lock `gather` holds) before it ends.
            unsafe { libc::pthread_kill(t, super::vcpu::kick_signal()) };
        };
        // Room for the memory file, checked again before the guest stops.
        if let Err(e) = files::check_target(&point.request.dir, self.cfg.memory_bytes) {
            point.release(true);
            return SnapshotStep::Failed(e.to_string());
        }
        let taken = point
            .gather(kick, PARK_LIMIT)
            .map_err(SnapshotError::Stopping)
            .and_then(|vcpus| self.write_snapshot(point, ram, images, devices, vcpus));
        let keep = point.request.keep_running;
        point.release(!keep || taken.is_err());
        match taken {
            Ok(dir) if keep => {
                self.recorder.vmm(restore_marks::SNAPSHOT_WRITTEN);
                let _ = dir;
                SnapshotStep::Resumed
            }
            Ok(dir) => {
                self.recorder.vmm(restore_marks::SNAPSHOT_WRITTEN);
                SnapshotStep::Ended(format!(
                    "stopped for the snapshot at {} (written to {})",
                    point.at,
                    dir.display()
                ))
            }
            Err(e) => SnapshotStep::Failed(e.to_string()),
        }
    }

    fn identity(&self, ram: &GuestRam, cpuid: Vec<CpuidLeaf>) -> Result<Identity, SnapshotError> {
        let cfg = &self.cfg;
        let file = |p: &std::path::Path, digest| {
            FileIdentity::of(p, digest).map_err(|source| SnapshotError::Io {
                path: p.to_path_buf(),
                what: "look at",
                source,
            })
        };
        Ok(Identity {
            kernel: file(&cfg.kernel, true)?,
            initrd: cfg.initrd.as_deref().map(|p| file(p, true)).transpose()?,
            disks: (cfg.virtio.disks.iter())
                .map(|d| file(&d.path, false))
                .collect::<Result<_, _>>()?,
            disks_readonly: cfg.virtio.disks.iter().map(|d| d.readonly).collect(),
            cmdline: cfg.cmdline.clone(),
            memory_bytes: cfg.memory_bytes,
            vcpus: cfg.vcpus,
            acpi: cfg.acpi,
            rng: cfg.virtio.rng,
            virtio_console: cfg.virtio.console,
            regions: memory::layout(ram.backing.guest_memory()),
            cpuid,
        })
    }

    /// Writes the snapshot of the parked VM into a temporary directory and
    /// renames it into place.
    fn write_snapshot(
        &self,
        point: &SnapshotPoint,
        ram: &GuestRam,
        images: &BootImages,
        devices: &Devices,
        vcpus: Vec<snapshot::vcpu::VcpuState>,
    ) -> Result<std::path::PathBuf, SnapshotError> {
        if vcpus.len() != self.cfg.vcpus as usize {
            return Err(SnapshotError::Stopping(format!(
                "{} of {} vCPUs were still running (the others had ended)",
                vcpus.len(),
                self.cfg.vcpus
            )));
        }
        let dir = &point.request.dir;
        let staging = files::Staging::new(dir)?;
        // Requests served now raise their interrupts before the irqchip
        // is saved.
        devices.drain_virtio();
        let vm = VmState::save(&self.vm)?;
        let mem_file = staging.create(MEMORY_FILE)?;
        let written = memory::write(ram.backing.guest_memory(), &mem_file)
            .and_then(|w| mem_file.sync_all().map(|()| w))
            .map_err(io_error("the snapshot's memory file"))?;
        let state = MachineState {
            taken_at: point.at.to_string(),
            identity: self.identity(ram, point.cpuid.clone())?,
            images: SavedImages::of(&images.kernel, images.initrd.as_ref()),
            vcpus,
            vm,
            devices: devices.save_state(),
            memory_data_bytes: written.data_bytes,
        };
        let state_bytes = serde_json::to_vec(&state)
            .map_err(|e| SnapshotError::Stopping(format!("state: {e}")))?;
        let manifest = Manifest {
            schema: SCHEMA.into(),
            version: VERSION,
            state_sha256: {
                use sha2::Digest;
                snapshot::state::hex(&sha2::Sha256::digest(&state_bytes))
            },
            memory_bytes: written.bytes,
            memory_xxh3: written.digest,
        };
        staging.write(STATE_FILE, &state_bytes)?;
        let mut manifest_bytes = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| SnapshotError::Stopping(format!("manifest: {e}")))?;
        manifest_bytes.push(b'\n');
        staging.write(MANIFEST_FILE, &manifest_bytes)?;
        staging.finish()
    }
}
