//! Exit reason names.
//!
//! The kernel's own tables are in the print fmt of `kvm:kvm_exit` (VMX and
//! SVM, as `__print_symbolic` tables) and `kvm:kvm_userspace_exit`
//! (`KVM_EXIT_*`): they are parsed at run time so new reasons get their
//! names without a bootscope update. The built-in tables below (from Linux
//! 6.18's `arch/x86/include/uapi/asm/{vmx,svm}.h` and
//! `include/uapi/linux/kvm.h`) are the fallback when a format file is
//! missing or unparsable.

use std::collections::BTreeMap;

use crate::tracefs::{parse_symbolic_tables, EventFormat};

/// Reason code -> name.
pub type NameTable = BTreeMap<u32, String>;

/// kvm_exit's `isa` field values (arch/x86/kvm/trace.h).
pub const ISA_VMX: u32 = 1;
pub const ISA_SVM: u32 = 2;
/// kvm_userspace_exit codes with this bit are `errno` values (see exits.h).
pub const UEXIT_ERRNO_FLAG: u32 = 0x8000_0000;
/// VMX exit reason bit 31: VM entry failed.
const VMX_FAILED_VMENTRY: u32 = 0x8000_0000;

/// Name tables and where each came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasonTables {
    pub vmx: BTreeMap<u32, String>,
    pub svm: BTreeMap<u32, String>,
    pub userspace: BTreeMap<u32, String>,
    /// `format` (parsed from tracefs) or `builtin`, per table.
    pub vmx_from: &'static str,
    pub svm_from: &'static str,
    pub userspace_from: &'static str,
}

fn table(entries: &[(u32, &str)]) -> BTreeMap<u32, String> {
    entries.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

impl ReasonTables {
    /// The built-in tables only.
    pub fn builtin() -> Self {
        Self {
            vmx: table(VMX_BUILTIN),
            svm: table(SVM_BUILTIN),
            userspace: table(USERSPACE_BUILTIN),
            vmx_from: "builtin",
            svm_from: "builtin",
            userspace_from: "builtin",
        }
    }

    /// Tables parsed from the format files where they parse, built-in
    /// otherwise.
    pub fn from_formats(kvm_exit: Option<&EventFormat>, uexit: Option<&EventFormat>) -> Self {
        let mut t = Self::builtin();
        if let Some(f) = kvm_exit {
            let (vmx, svm) = kvm_exit_tables(&f.print_fmt);
            if let Some(v) = vmx {
                t.vmx = v;
                t.vmx_from = "format";
            }
            if let Some(s) = svm {
                t.svm = s;
                t.svm_from = "format";
            }
        }
        if let Some(f) = uexit {
            if let Some(u) = userspace_table(&f.print_fmt) {
                t.userspace = u;
                t.userspace_from = "format";
            }
        }
        t
    }

    /// Name of a kvm_exit reason (`EPT_VIOLATION`, `npf`, `0x1234`).
    pub fn exit_name(&self, isa: u32, reason: u32) -> String {
        match isa {
            ISA_VMX => {
                let base = reason & 0xffff;
                let name = self
                    .vmx
                    .get(&base)
                    .cloned()
                    .unwrap_or_else(|| format!("vmx_0x{base:x}"));
                if reason & VMX_FAILED_VMENTRY != 0 {
                    format!("{name} FAILED_VMENTRY")
                } else {
                    name
                }
            }
            ISA_SVM => self
                .svm
                .get(&reason)
                .cloned()
                .unwrap_or_else(|| format!("svm_0x{reason:x}")),
            _ => format!("isa{isa}_0x{reason:x}"),
        }
    }

    /// Name of a kvm_userspace_exit code (`KVM_EXIT_IO`, `restart`).
    pub fn userspace_name(&self, code: u32) -> String {
        if code & UEXIT_ERRNO_FLAG != 0 {
            let errno = code & !UEXIT_ERRNO_FLAG;
            // Same words as the tracepoint's own print fmt.
            return if errno == 4 {
                "restart".into()
            } else {
                format!("error {errno}")
            };
        }
        self.userspace
            .get(&code)
            .cloned()
            .unwrap_or_else(|| format!("KVM_EXIT_{code}"))
    }
}

/// Reads the VMX and SVM tables from kvm_exit's print fmt. Each table is
/// recognised by what is in it, not by its position, so a reordered print
/// fmt still parses.
pub fn kvm_exit_tables(print_fmt: &str) -> (Option<NameTable>, Option<NameTable>) {
    let (mut vmx, mut svm) = (None, None);
    for t in parse_symbolic_tables(print_fmt) {
        let has = |n: &str| t.entries.iter().any(|(_, name)| name == n);
        // The u32 reason is compared after the kernel's own wrap (-1 ->
        // 0xffffffff for SVM's invalid_guest_state).
        let map = || -> BTreeMap<u32, String> {
            t.entries
                .iter()
                .map(|(v, n)| (*v as u32, n.clone()))
                .collect()
        };
        if vmx.is_none() && (has("EPT_VIOLATION") || has("IO_INSTRUCTION") || has("EXCEPTION_NMI"))
        {
            vmx = Some(map());
        } else if svm.is_none() && (has("npf") || has("vintr") || has("io")) {
            svm = Some(map());
        }
    }
    (vmx, svm)
}

/// Reads the `KVM_EXIT_*` table from kvm_userspace_exit's print fmt.
pub fn userspace_table(print_fmt: &str) -> Option<BTreeMap<u32, String>> {
    parse_symbolic_tables(print_fmt)
        .into_iter()
        .find(|t| t.entries.iter().any(|(_, n)| n.starts_with("KVM_EXIT_")))
        .map(|t| t.entries.into_iter().map(|(v, n)| (v as u32, n)).collect())
}

#[rustfmt::skip]
const USERSPACE_BUILTIN: &[(u32, &str)] = &[
    (0, "KVM_EXIT_UNKNOWN"), (1, "KVM_EXIT_EXCEPTION"), (2, "KVM_EXIT_IO"),
    (3, "KVM_EXIT_HYPERCALL"), (4, "KVM_EXIT_DEBUG"), (5, "KVM_EXIT_HLT"), (6, "KVM_EXIT_MMIO"),
    (7, "KVM_EXIT_IRQ_WINDOW_OPEN"), (8, "KVM_EXIT_SHUTDOWN"), (9, "KVM_EXIT_FAIL_ENTRY"),
    (10, "KVM_EXIT_INTR"), (11, "KVM_EXIT_SET_TPR"), (12, "KVM_EXIT_TPR_ACCESS"),
    (13, "KVM_EXIT_S390_SIEIC"), (14, "KVM_EXIT_S390_RESET"), (15, "KVM_EXIT_DCR"),
    (16, "KVM_EXIT_NMI"), (17, "KVM_EXIT_INTERNAL_ERROR"), (18, "KVM_EXIT_OSI"),
    (19, "KVM_EXIT_PAPR_HCALL"), (20, "KVM_EXIT_S390_UCONTROL"), (21, "KVM_EXIT_WATCHDOG"),
    (22, "KVM_EXIT_S390_TSCH"), (23, "KVM_EXIT_EPR"), (24, "KVM_EXIT_SYSTEM_EVENT"),
    (25, "KVM_EXIT_S390_STSI"), (26, "KVM_EXIT_IOAPIC_EOI"), (27, "KVM_EXIT_HYPERV"),
    (28, "KVM_EXIT_ARM_NISV"), (29, "KVM_EXIT_X86_RDMSR"), (30, "KVM_EXIT_X86_WRMSR"),
    (31, "KVM_EXIT_DIRTY_RING_FULL"), (32, "KVM_EXIT_AP_RESET_HOLD"),
    (33, "KVM_EXIT_X86_BUS_LOCK"), (34, "KVM_EXIT_XEN"), (35, "KVM_EXIT_RISCV_SBI"),
    (36, "KVM_EXIT_RISCV_CSR"), (37, "KVM_EXIT_NOTIFY"), (38, "KVM_EXIT_LOONGARCH_IOCSR"),
    (39, "KVM_EXIT_MEMORY_FAULT"), (40, "KVM_EXIT_TDX"),
];

#[rustfmt::skip]
const VMX_BUILTIN: &[(u32, &str)] = &[
    (0x0, "EXCEPTION_NMI"), (0x1, "EXTERNAL_INTERRUPT"), (0x2, "TRIPLE_FAULT"),
    (0x3, "INIT_SIGNAL"), (0x4, "SIPI_SIGNAL"), (0x7, "INTERRUPT_WINDOW"), (0x8, "NMI_WINDOW"),
    (0x9, "TASK_SWITCH"), (0xa, "CPUID"), (0xc, "HLT"), (0xd, "INVD"), (0xe, "INVLPG"),
    (0xf, "RDPMC"), (0x10, "RDTSC"), (0x12, "VMCALL"), (0x13, "VMCLEAR"), (0x14, "VMLAUNCH"),
    (0x15, "VMPTRLD"), (0x16, "VMPTRST"), (0x17, "VMREAD"), (0x18, "VMRESUME"), (0x19, "VMWRITE"),
    (0x1a, "VMOFF"), (0x1b, "VMON"), (0x1c, "CR_ACCESS"), (0x1d, "DR_ACCESS"),
    (0x1e, "IO_INSTRUCTION"), (0x1f, "MSR_READ"), (0x20, "MSR_WRITE"), (0x21, "INVALID_STATE"),
    (0x22, "MSR_LOAD_FAIL"), (0x24, "MWAIT_INSTRUCTION"), (0x25, "MONITOR_TRAP_FLAG"),
    (0x27, "MONITOR_INSTRUCTION"), (0x28, "PAUSE_INSTRUCTION"), (0x29, "MCE_DURING_VMENTRY"),
    (0x2b, "TPR_BELOW_THRESHOLD"), (0x2c, "APIC_ACCESS"), (0x2d, "EOI_INDUCED"),
    (0x2e, "GDTR_IDTR"), (0x2f, "LDTR_TR"), (0x30, "EPT_VIOLATION"), (0x31, "EPT_MISCONFIG"),
    (0x32, "INVEPT"), (0x33, "RDTSCP"), (0x34, "PREEMPTION_TIMER"), (0x35, "INVVPID"),
    (0x36, "WBINVD"), (0x37, "XSETBV"), (0x38, "APIC_WRITE"), (0x39, "RDRAND"), (0x3a, "INVPCID"),
    (0x3b, "VMFUNC"), (0x3c, "ENCLS"), (0x3d, "RDSEED"), (0x3e, "PML_FULL"), (0x3f, "XSAVES"),
    (0x40, "XRSTORS"), (0x43, "UMWAIT"), (0x44, "TPAUSE"), (0x4a, "BUS_LOCK"), (0x4b, "NOTIFY"),
    (0x4d, "TDCALL"), (0x54, "MSR_READ_IMM"), (0x55, "MSR_WRITE_IMM"),
];

#[rustfmt::skip]
const SVM_BUILTIN: &[(u32, &str)] = &[
    (0x0, "read_cr0"), (0x2, "read_cr2"), (0x3, "read_cr3"), (0x4, "read_cr4"), (0x8, "read_cr8"),
    (0x10, "write_cr0"), (0x12, "write_cr2"), (0x13, "write_cr3"), (0x14, "write_cr4"),
    (0x18, "write_cr8"), (0x20, "read_dr0"), (0x21, "read_dr1"), (0x22, "read_dr2"),
    (0x23, "read_dr3"), (0x24, "read_dr4"), (0x25, "read_dr5"), (0x26, "read_dr6"),
    (0x27, "read_dr7"), (0x30, "write_dr0"), (0x31, "write_dr1"), (0x32, "write_dr2"),
    (0x33, "write_dr3"), (0x34, "write_dr4"), (0x35, "write_dr5"), (0x36, "write_dr6"),
    (0x37, "write_dr7"), (0x40, "DE excp"), (0x41, "DB excp"), (0x43, "BP excp"),
    (0x44, "OF excp"), (0x45, "BR excp"), (0x46, "UD excp"), (0x47, "NM excp"), (0x48, "DF excp"),
    (0x4a, "TS excp"), (0x4b, "NP excp"), (0x4c, "SS excp"), (0x4d, "GP excp"), (0x4e, "PF excp"),
    (0x50, "MF excp"), (0x51, "AC excp"), (0x52, "MC excp"), (0x53, "XF excp"),
    (0x60, "interrupt"), (0x61, "nmi"), (0x62, "smi"), (0x63, "init"), (0x64, "vintr"),
    (0x65, "cr0_sel_write"), (0x66, "read_idtr"), (0x67, "read_gdtr"), (0x68, "read_ldtr"),
    (0x69, "read_rt"), (0x6a, "write_idtr"), (0x6b, "write_gdtr"), (0x6c, "write_ldtr"),
    (0x6d, "write_rt"), (0x6e, "rdtsc"), (0x6f, "rdpmc"), (0x70, "pushf"), (0x71, "popf"),
    (0x72, "cpuid"), (0x73, "rsm"), (0x74, "iret"), (0x75, "swint"), (0x76, "invd"),
    (0x77, "pause"), (0x78, "hlt"), (0x79, "invlpg"), (0x7a, "invlpga"), (0x7b, "io"),
    (0x7c, "msr"), (0x7d, "task_switch"), (0x7e, "ferr_freeze"), (0x7f, "shutdown"),
    (0x80, "vmrun"), (0x81, "hypercall"), (0x82, "vmload"), (0x83, "vmsave"), (0x84, "stgi"),
    (0x85, "clgi"), (0x86, "skinit"), (0x87, "rdtscp"), (0x88, "icebp"), (0x89, "wbinvd"),
    (0x8a, "monitor"), (0x8b, "mwait"), (0x8d, "xsetbv"), (0x8f, "write_efer_trap"),
    (0x90, "write_cr0_trap"), (0x94, "write_cr4_trap"), (0x98, "write_cr8_trap"),
    (0xa2, "invpcid"), (0xa5, "buslock"), (0xa6, "idle-halt"), (0x400, "npf"),
    (0x401, "avic_incomplete_ipi"), (0x402, "avic_unaccelerated_access"), (0x403, "vmgexit"),
    (0x80000001, "vmgexit_mmio_read"), (0x80000002, "vmgexit_mmio_write"),
    (0x80000003, "vmgexit_nmi_complete"), (0x80000004, "vmgexit_ap_hlt_loop"),
    (0x80000005, "vmgexit_ap_jump_table"), (0x80000010, "vmgexit_page_state_change"),
    (0x80000011, "vmgexit_guest_request"), (0x80000012, "vmgexit_ext_guest_request"),
    (0x80000013, "vmgexit_ap_creation"), (0x8000fffd, "vmgexit_hypervisor_feature"),
    (0xffffffff, "invalid_guest_state"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracefs::parse_format;

    /// kvm_exit's print fmt as Linux 6.18 writes it, shortened.
    const KVM_EXIT_FMT: &str = r#""vcpu %u reason %s%s%s rip 0x%lx", REC->vcpu_id, (REC->isa == 1) ? __print_symbolic(REC->exit_reason & 0xffff, { 0, "EXCEPTION_NMI" }, { 1, "EXTERNAL_INTERRUPT" }, { 30, "IO_INSTRUCTION" }, { 48, "EPT_VIOLATION" }, { 99, "FUTURE_REASON" }) : __print_symbolic(REC->exit_reason, { 0x000, "read_cr0" }, { 0x040 + 14, "PF excp" }, { 0x07b, "io" }, { 0x400, "npf" }, { 0x80000001, "vmgexit_mmio_read" }, { -1, "invalid_guest_state" }), (REC->isa == 1 && REC->exit_reason & ~0xffff) ? " " : "", (REC->isa == 1) ? __print_flags(REC->exit_reason & ~0xffff, " ", { 0x80000000, "FAILED_VMENTRY" }) : "", REC->guest_rip"#;

    #[test]
    fn parses_vmx_and_svm_tables_from_print_fmt() {
        let (vmx, svm) = kvm_exit_tables(KVM_EXIT_FMT);
        let vmx = vmx.unwrap();
        let svm = svm.unwrap();
        assert_eq!(vmx.len(), 5);
        assert_eq!(vmx[&48], "EPT_VIOLATION");
        assert_eq!(vmx[&99], "FUTURE_REASON");
        assert_eq!(svm[&0x4e], "PF excp");
        assert_eq!(svm[&0x400], "npf");
        assert_eq!(svm[&0x8000_0001], "vmgexit_mmio_read");
        assert_eq!(svm[&0xffff_ffff], "invalid_guest_state");
    }

    #[test]
    fn parsed_tables_win_and_builtin_fills_in() {
        let fmt = parse_format(&format!("name: kvm_exit\nprint fmt: {KVM_EXIT_FMT}\n")).unwrap();
        let t = ReasonTables::from_formats(Some(&fmt), None);
        assert_eq!(
            (t.vmx_from, t.svm_from, t.userspace_from),
            ("format", "format", "builtin")
        );
        assert_eq!(t.exit_name(ISA_VMX, 99), "FUTURE_REASON");
        assert_eq!(
            t.exit_name(ISA_VMX, 0x8000_0030),
            "EPT_VIOLATION FAILED_VMENTRY"
        );
        assert_eq!(t.exit_name(ISA_SVM, 0x7b), "io");
        assert_eq!(t.exit_name(ISA_SVM, 0x1234), "svm_0x1234");
        assert_eq!(t.exit_name(7, 3), "isa7_0x3");
        assert_eq!(t.userspace_name(2), "KVM_EXIT_IO");
        assert_eq!(t.userspace_name(UEXIT_ERRNO_FLAG | 4), "restart");
        assert_eq!(t.userspace_name(UEXIT_ERRNO_FLAG | 14), "error 14");
        assert_eq!(t.userspace_name(999), "KVM_EXIT_999");
    }

    #[test]
    fn builtin_tables_without_formats() {
        let t = ReasonTables::from_formats(None, None);
        assert_eq!(t, ReasonTables::builtin());
        assert_eq!(t.exit_name(ISA_VMX, 48), "EPT_VIOLATION");
        assert_eq!(t.exit_name(ISA_SVM, 0x400), "npf");
        assert_eq!(t.exit_name(ISA_SVM, 0xffff_ffff), "invalid_guest_state");
    }

    #[test]
    fn userspace_table_from_print_fmt() {
        let fmt = r#""reason %s (%d)", REC->errno < 0 ? (REC->errno == -4 ? "restart" : "error") : __print_symbolic(REC->reason, { 0, "KVM_EXIT_" "UNKNOWN" }, { 2, "KVM_EXIT_" "IO" }, { 41, "KVM_EXIT_" "NEW_ONE" }), REC->errno < 0 ? -REC->errno : REC->reason"#;
        let t = userspace_table(fmt).unwrap();
        assert_eq!(t[&41], "KVM_EXIT_NEW_ONE");
        assert_eq!(t.len(), 3);
        assert!(userspace_table("\"no tables\"").is_none());
    }
}
