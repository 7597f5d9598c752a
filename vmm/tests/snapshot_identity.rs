//! A fresh identity for each restore: the VM generation ID in guest memory
//! replaced and the generic event device's interrupt raised (the guest's
//! notification), and the KVM clock stepped by the real time a snapshot
//! sat, never back; under real KVM.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bootscope_testkit::{require_kvm, Capture};
use bootscope_vmm::devices::vmgenid;
use bootscope_vmm::layout;
use bootscope_vmm::snapshot::vm_state::VmState;
use bootscope_vmm::snapshot::{self, MemoryRestore, RestoreRequest, SnapshotAt, SnapshotRequest};
use bootscope_vmm::timeline::{Clock, Recorder};
use bootscope_vmm::vm::{restore, run_with_snapshot, VmConfig};
use kvm_bindings::{kvm_pit_config, KVM_CLOCK_REALTIME, KVM_IRQCHIP_IOAPIC};
use kvm_ioctls::Kvm;
use vm_memory::{GuestAddress, GuestMemoryMmap};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn config(kernel: &Path) -> VmConfig {
    let mut cfg = VmConfig::new(
        kernel.to_path_buf(),
        "console=ttyS0".into(),
        Box::new(Capture::default()),
    );
    cfg.memory_bytes = 64 << 20;
    cfg.timeout = Some(Duration::from_secs(20));
    cfg
}

fn recorder() -> Arc<Recorder> {
    Arc::new(Recorder::new(Clock::start()))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bootscope-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The generation ID in a snapshot's memory file (region 0 starts at
/// guest address 0 and file offset 0).
fn id_in(dir: &Path) -> Vec<u8> {
    let mem = std::fs::read(dir.join(snapshot::state::MEMORY_FILE)).unwrap();
    let at = layout::VMGENID_START as usize;
    mem[at..at + vmgenid::ID_BYTES].to_vec()
}

fn restore_once(kernel: &Path, dir: &Path) -> Vec<String> {
    let req = RestoreRequest {
        snapshot: snapshot::open(dir, false).unwrap(),
        memory: MemoryRestore::Copy,
        force: false,
        verify: false,
        lazy: Default::default(),
    };
    let r = restore(config(kernel), recorder(), req).unwrap();
    r.timeline.marks.iter().map(|m| m.name.clone()).collect()
}

#[test]
fn a_boot_writes_an_id_and_each_restore_renews_it() {
    require_kvm!();
    let tmp = scratch("vmgenid");
    let kernel = fixture("mini-bzimage-ports.bin");
    let dir = tmp.join("snap");
    let req = SnapshotRequest {
        dir: dir.clone(),
        at: SnapshotAt::DebugPort(0x60),
        keep_running: false,
        signal: None,
    };
    run_with_snapshot(config(&kernel), recorder(), req).unwrap();
    let id = id_in(&dir);
    assert_ne!(id, vec![0u8; vmgenid::ID_BYTES], "the boot wrote an ID");
    for _ in 0..2 {
        let marks = restore_once(&kernel, &dir);
        let new_id = marks.iter().position(|m| m == vmgenid::NEW_ID_MARK);
        let restored = marks.iter().position(|m| m == "restore: state restored");
        assert!(new_id.is_some() && new_id < restored, "{marks:?}");
    }
    // The snapshot itself is left as it was.
    assert_eq!(id_in(&dir), id);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The vector the test routes the generic event device's pin to.
const VECTOR: u8 = 0x51;

#[test]
fn renew_writes_a_fresh_id_and_raises_the_ged_interrupt() {
    require_kvm!();
    let kvm = Kvm::new().unwrap();
    let vm = kvm.create_vm().unwrap();
    vm.create_irq_chip().unwrap();
    // As a guest's GED driver leaves it: the pin unmasked, routed to a
    // vector of vCPU 0, whose local APIC is enabled.
    let mut chip = kvm_bindings::kvm_irqchip {
        chip_id: KVM_IRQCHIP_IOAPIC,
        ..Default::default()
    };
    vm.get_irqchip(&mut chip).unwrap();
    // SAFETY: chip_id says the union holds the I/O APIC's state.
    unsafe {
        chip.chip.ioapic.redirtbl[layout::GED_IRQ as usize].bits = u64::from(VECTOR);
    }
    vm.set_irqchip(&chip).unwrap();
    let vcpu = vm.create_vcpu(0).unwrap();
    let mut lapic = vcpu.get_lapic().unwrap();
    // Spurious interrupt vector register (0xf0): APIC software enabled.
    lapic.regs[0xf1] |= 1;
    vcpu.set_lapic(&lapic).unwrap();
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 2 << 20)]).unwrap();
    let a = vmgenid::renew(&vm, &mem).unwrap();
    assert_eq!(vmgenid::read_id(&mem).unwrap(), a);
    let b = vmgenid::renew(&vm, &mem).unwrap();
    assert_ne!(a, b, "two restores, two IDs");
    assert_eq!(vmgenid::read_id(&mem).unwrap(), b);
    // The interrupt is pending in vCPU 0's interrupt request register
    // (0x200 + 0x10 per 32 vectors).
    let lapic = vcpu.get_lapic().unwrap();
    let v = usize::from(VECTOR);
    let irr = lapic.regs[0x200 + (v / 32) * 0x10 + (v % 32) / 8] as u8;
    assert_ne!(irr & (1 << (v % 8)), 0, "IRR byte {irr:#x}");
}

#[test]
fn the_kvm_clock_steps_by_the_real_time_the_snapshot_sat() {
    require_kvm!();
    let kvm = Kvm::new().unwrap();
    let vm = kvm.create_vm().unwrap();
    vm.create_irq_chip().unwrap();
    vm.create_pit2(kvm_pit_config::default()).unwrap();
    let mut saved = VmState::save(&vm).unwrap();
    let sat = 5_000_000_000u64;
    let new_vm = || {
        let v = kvm.create_vm().unwrap();
        v.create_irq_chip().unwrap();
        v.create_pit2(kvm_pit_config::default()).unwrap();
        v
    };
    // Without the real time, it goes on from the saved value: not back.
    let mut plain = saved.clone();
    plain.clock.flags &= !KVM_CLOCK_REALTIME;
    let first = new_vm();
    plain.restore(&first).unwrap();
    let c = first.get_clock().unwrap().clock;
    assert!(c >= plain.clock.clock && c < plain.clock.clock + sat, "{c}");
    if saved.clock.flags & KVM_CLOCK_REALTIME == 0 {
        println!("SKIP: this host's KVM_GET_CLOCK gives no real time (KVM_CLOCK_REALTIME); the clock without it was checked");
        return;
    }
    // As if the snapshot had been taken 5 s ago.
    saved.clock.realtime -= sat;
    let other = new_vm();
    saved.restore(&other).unwrap();
    let now = other.get_clock().unwrap();
    assert!(
        now.clock >= saved.clock.clock + sat,
        "clock {} saved {}",
        now.clock,
        saved.clock.clock
    );
}
