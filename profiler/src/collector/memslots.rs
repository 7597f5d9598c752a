//! The guest memory collector's side in userspace (bpf/memslots.bpf.c):
//! its programs attached on request, the memory slots the followed VMMs
//! set, and the VMMs it stopped at their guest's end.
//!
//! The programs are in the object but not in [`crate::bpf::PROGRAMS`]:
//! they feed no count of the profile, only the reading of guest memory
//! (`bootscope profile`, src/guest_mem/), which attaches them.

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use aya::programs::Program;
use aya::Pod;

use super::maps::hash_entries;
use super::Collector;

/// `struct bs_memslot_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsMemslotKey {
    pub tgid: u32,
    pub slot: u32,
}

/// `struct bs_memslot`: a slot as the VMM last set it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsMemslot {
    pub slot: u32,
    pub flags: u32,
    pub gpa: u64,
    pub size: u64,
    pub uaddr: u64,
    pub ts_ns: u64,
    /// How many times the VMM set this slot.
    pub calls: u64,
}

/// `struct bs_held`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsHeld {
    pub ts_ns: u64,
    pub why: u32,
    /// 1 when the SIGSTOP was sent.
    pub signalled: u32,
}

/// `struct bs_memslot_config`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct BsMemslotConfig {
    hold_at_shutdown: u32,
    pad: u32,
}

const _: () = assert!(size_of::<BsMemslotKey>() == 8);
const _: () = assert!(size_of::<BsMemslot>() == 48);
const _: () = assert!(size_of::<BsHeld>() == 16);
const _: () = assert!(size_of::<BsMemslotConfig>() == 8);

// SAFETY: #[repr(C)] structs of integers without padding (sizes asserted
// above): every bit pattern is valid.
unsafe impl Pod for BsMemslotKey {}
// SAFETY: as above.
unsafe impl Pod for BsMemslot {}
// SAFETY: as above.
unsafe impl Pod for BsHeld {}
// SAFETY: as above.
unsafe impl Pod for BsMemslotConfig {}

/// The programs: the ioctl catcher and the three that hold a VMM, each
/// with where it attaches (a tracepoint's system and event; a raw
/// tracepoint's event; a kprobe's function).
pub const MEMSLOT_PROGRAMS: [(&str, &str, &str); 4] = [
    ("bs_memslot_kvm_ioctl", "", "kvm_vm_ioctl"),
    ("bs_hold_pio", "", "kvm_pio"),
    ("bs_hold_mmio", "", "kvm_mmio"),
    ("bs_hold_exit", "", "kvm_userspace_exit"),
];

/// The ioctl catcher where its kprobe cannot be attached: at every
/// ioctl's entry (a system call tracepoint sends every system call of
/// every process through the kernel's slow path: the fallback only).
const IOCTL_FALLBACK: (&str, &str, &str) = ("bs_memslot_ioctl", "syscalls", "sys_enter_ioctl");

/// The programs of the profile that check the exits hold program `name`
/// checks (bpf/hold.bpf.h), where it need not run beside them (any one
/// of them attached does): the marker program sees every port write, the
/// exits collector every MMIO access and every exit's reason (a triple
/// fault as SVM's SHUTDOWN or VMX's TRIPLE_FAULT on those hosts, the
/// return to the VMM on PVM). On VMX and SVM hosts a
/// `KVM_EXIT_SYSTEM_EVENT` (x86 makes it only for SEV and Hyper-V guests)
/// is then not a hold: the VMM is read when profiling stops.
fn hold_checked_by(name: &str) -> &'static [&'static str] {
    match name {
        "bs_hold_pio" => &["bs_marker_pio"],
        "bs_hold_mmio" => &["bs_kvm_mmio"],
        "bs_hold_exit" => &["bs_kvm_exit", "bs_kvm_userspace_exit"],
        _ => &[],
    }
}

/// Loads and attaches program `name` of `ebpf` at `system`/`event`.
fn attach(ebpf: &mut aya::Ebpf, (name, system, event): (&str, &str, &str)) -> Result<(), String> {
    match ebpf.program_mut(name) {
        Some(Program::TracePoint(p)) => p
            .load()
            .and_then(|_| p.attach(system, event).map(|_| ()))
            .map_err(|e| e.to_string()),
        Some(Program::RawTracePoint(p)) => p
            .load()
            .and_then(|_| p.attach(event).map(|_| ()))
            .map_err(|e| e.to_string()),
        Some(Program::KProbe(p)) => p
            .load()
            .and_then(|_| p.attach(event, 0).map(|_| ()))
            .map_err(|e| e.to_string()),
        _ => Err(format!("program {name} is not in the object")),
    }
}

/// Why a VMM was held, by `enum bs_hold_why`.
pub fn hold_reason(why: u32) -> &'static str {
    match why {
        1 => "the guest reset through the i8042 (0xfe to port 0x64)",
        2 => "the guest reset through port 0xcf9",
        3 => "the guest shut down (triple fault: KVM_EXIT_SHUTDOWN)",
        4 => "the guest asked for a power-off or reset (KVM_EXIT_SYSTEM_EVENT)",
        5 => "the guest powered off through its ACPI sleep registers (S5)",
        _ => "the guest ended",
    }
}

impl Collector {
    /// Attaches the guest memory programs; gives each one's name and
    /// error, if it failed.
    pub fn attach_memslot_programs(&self) -> Vec<(&'static str, Option<String>)> {
        let mut st = self.lock();
        let Some(mut ebpf) = st.bpf.take_programs() else {
            return MEMSLOT_PROGRAMS
                .iter()
                .map(|(p, _, _)| (*p, Some("the programs are being attached elsewhere".into())))
                .collect();
        };
        let planned = |name: &str| {
            st.setup
                .programs
                .iter()
                .any(|p| p.spec.program == name && p.is_attached())
        };
        let folded: Vec<&str> = MEMSLOT_PROGRAMS
            .iter()
            .map(|(p, _, _)| *p)
            .filter(|p| hold_checked_by(p).iter().any(|by| planned(by)))
            .collect();
        let out = MEMSLOT_PROGRAMS
            .iter()
            .map(|&program| {
                if folded.contains(&program.0) {
                    return (program.0, None);
                }
                let mut r = attach(&mut ebpf, program);
                if let (Err(e), true) = (&r, program.0 == "bs_memslot_kvm_ioctl") {
                    r = attach(&mut ebpf, IOCTL_FALLBACK).map_err(|e2| {
                        format!("kprobe on kvm_vm_ioctl: {e}; sys_enter_ioctl: {e2}")
                    });
                }
                (program.0, r.err())
            })
            .collect();
        st.bpf.put_programs(ebpf);
        out
    }

    /// Asks the kernel to stop (SIGSTOP) a followed VMM at the exit that
    /// ends its guest, or not; false when the setting could not be made.
    pub fn hold_at_shutdown(&self, on: bool) -> bool {
        let mut st = self.lock();
        let Some(map) = st.bpf.map_mut("memslot_config") else {
            return false;
        };
        let Ok(mut a) = Array::<&mut MapData, BsMemslotConfig>::try_from(map) else {
            return false;
        };
        let c = BsMemslotConfig {
            hold_at_shutdown: u32::from(on),
            pad: 0,
        };
        a.set(0, c, 0).is_ok()
    }

    /// The memory slots process `tgid` set, by slot number.
    pub fn memory_slots(&self, tgid: u32) -> Vec<BsMemslot> {
        let st = self.lock();
        let mut v: Vec<BsMemslot> = hash_entries::<BsMemslotKey, BsMemslot>(&st.bpf, "memslots")
            .into_iter()
            .filter(|(k, _)| k.tgid == tgid)
            .map(|(_, v)| v)
            .collect();
        v.sort_by_key(|s| s.slot);
        v
    }

    /// The processes that have set memory slots.
    pub fn memory_slot_owners(&self) -> Vec<u32> {
        let st = self.lock();
        let mut v: Vec<u32> = hash_entries::<BsMemslotKey, BsMemslot>(&st.bpf, "memslots")
            .into_iter()
            .map(|(k, _)| k.tgid)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The VMMs the kernel stopped at their guest's end and not yet
    /// released, with the record.
    pub fn held_vmms(&self) -> Vec<(u32, BsHeld)> {
        let st = self.lock();
        hash_entries::<u32, BsHeld>(&st.bpf, "held_vmms")
    }

    /// Forgets the hold of `tgid` (it was continued); a VMM is held once:
    /// the record stays to say so when `keep` is true.
    pub fn release_held(&self, tgid: u32, keep: bool) {
        if keep {
            return;
        }
        let mut st = self.lock();
        if let Some(map) = st.bpf.map_mut("held_vmms") {
            if let Ok(mut h) = BpfHashMap::<&mut MapData, u32, BsHeld>::try_from(map) {
                let _ = h.remove(&tgid);
            }
        }
    }

    /// The profile's clock (ns since profiling started) of a kernel
    /// CLOCK_MONOTONIC timestamp.
    pub fn ktime_to_profile_ns(&self, ts_ns: u64) -> u64 {
        self.lock().ktime_to_t(ts_ns)
    }

    /// True once a guest has run: a mark of the guest's own (a port
    /// write, the first port I/O of its kernel, a console line) or the
    /// VMM's own mark of its first `KVM_RUN`. Before it, the VMM is
    /// setting up.
    pub fn guest_started(&self) -> bool {
        let st = self.lock();
        st.log.marks.iter().any(|m| {
            m.source != crate::profile::MarkSource::Vmm || m.name == super::tail::FIRST_KVM_RUN
        })
    }

    /// A process (among the target and those followed) in boot phase
    /// `phase` or past it by its marks, if any: a phase the guest's own
    /// marks open after `userspace` (its workload's) is past it.
    pub fn in_phase(&self, phase: &str) -> Option<u32> {
        let st = self.lock();
        let names = &st.log.phase_names;
        let rank = crate::phases::boot_rank(phase);
        st.log
            .current_phase
            .iter()
            .find(|(_, (idx, tracker))| {
                names.name(*idx) == phase
                    || rank.is_some_and(|r| tracker.reached().is_some_and(|got| got >= r))
            })
            .map(|(tgid, _)| *tgid)
    }
}
