//! What this host offers the profiler: tracefs with the KVM events, BPF
//! rights, the kernel's BTF. `bootscope doctor` prints these beside the
//! VMM's own findings.

use std::path::PathBuf;

use bootscope_model::host::{Finding, HostRoot, KvmFlavour};

/// Finds the tracefs mount (either location).
pub fn tracefs(root: &HostRoot) -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(|p| root.path(p))
        .find(|p| p.join("events").is_dir())
}

/// Tries to create a tiny BPF map: the only reliable test of BPF rights.
pub fn bpf_works() -> Result<(), String> {
    #[repr(C)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
    }
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_TYPE_ARRAY: u32 = 2;
    let attr = MapCreate {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: 8,
        max_entries: 1,
        map_flags: 0,
    };
    // SAFETY: bpf(BPF_MAP_CREATE) reads `size` bytes of a properly laid out
    // attribute struct that lives across the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            &attr as *const MapCreate,
            std::mem::size_of::<MapCreate>() as u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: fd is a descriptor we own and close once.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

/// `bootscope doctor`'s profiler lines: tracefs and its KVM events, BPF,
/// BTF. `flavour` is the host's KVM, whose tracepoints differ.
pub fn findings(root: &HostRoot, flavour: KvmFlavour) -> Vec<Finding> {
    let mut out = Vec::new();
    let tf = tracefs(root);
    out.push(Finding {
        item: "tracefs".into(),
        ok: tf.is_some(),
        detail: match &tf {
            Some(p) => {
                let exit = p.join("events/kvm/kvm_exit").is_dir();
                let pio = p.join("events/kvm/kvm_pio").is_dir();
                format!(
                    "{} (kvm:kvm_exit {}, kvm:kvm_pio {}){}",
                    p.display(),
                    if exit { "present" } else { "missing" },
                    if pio { "present" } else { "missing" },
                    if flavour == KvmFlavour::Pvm {
                        "; on PVM kvm:kvm_exit never fires"
                    } else {
                        ""
                    }
                )
            }
            None => "not mounted: mount -t tracefs nodev /sys/kernel/tracing".into(),
        },
    });
    let bpf = bpf_works();
    out.push(Finding {
        item: "bpf".into(),
        ok: bpf.is_ok(),
        detail: match bpf {
            Ok(()) => "can create BPF maps".into(),
            Err(e) => format!("cannot create a BPF map: {e} (needs root or CAP_BPF)"),
        },
    });
    let btf = root.path("/sys/kernel/btf/vmlinux");
    out.push(Finding {
        item: "btf".into(),
        ok: btf.exists(),
        detail: if btf.exists() {
            format!(
                "{} present (the profiler reads threads' exit codes through CO-RE)",
                btf.display()
            )
        } else {
            "no /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF): profiles lack threads' exit codes"
                .into()
        },
    });
    out
}
