//! Per-vCPU CPUID: KVM's supported set with a consistent topology of one
//! socket, `n` cores, one thread per core, and the hypervisor bit set.

use kvm_bindings::kvm_cpuid_entry2;

const LEAF_FEATURES: u32 = 0x1;
const LEAF_CACHE_PARAMS: u32 = 0x4;
const LEAF_EXT_TOPOLOGY: u32 = 0xb;
const LEAF_V2_EXT_TOPOLOGY: u32 = 0x1f;
const LEAF_AMD_ADDR_SIZES: u32 = 0x8000_0008;
const LEAF_AMD_EXT_APIC_ID: u32 = 0x8000_001e;

const ECX_HYPERVISOR: u32 = 1 << 31;
const ECX_X2APIC: u32 = 1 << 21;
const ECX_TSC_DEADLINE: u32 = 1 << 24;
const EDX_HTT: u32 = 1 << 28;
/// Topology level types of leaf 0xb/0x1f.
const LEVEL_SMT: u32 = 1;
const LEVEL_CORE: u32 = 2;

/// Bits of an APIC ID needed to number `n` items.
pub fn id_bits(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// Offers the local APIC's TSC-deadline timer mode, which KVM emulates
/// when it has `KVM_CAP_TSC_DEADLINE_TIMER` but leaves out of its supported
/// CPUID. A Linux guest then programs its timer with one MSR write per
/// event, as with the one-shot mode, but skips the calibration of the APIC
/// timer against the TSC (a tenth of a second of busy waiting with an APIC
/// counter read per tick).
pub fn offer_tsc_deadline(entries: &mut [kvm_cpuid_entry2]) {
    for e in entries.iter_mut().filter(|e| e.function == LEAF_FEATURES) {
        e.ecx |= ECX_TSC_DEADLINE;
    }
}

/// Withdraws x2APIC, for a guest with one vCPU on hardware-virtualized
/// KVM. Such a guest gains nothing from x2APIC mode (it sends no IPIs, its
/// timer is the TSC-deadline MSR and its end of interrupt a memory write
/// through KVM's PV EOI), while a Linux guest that finds the feature saves,
/// masks and restores all 24 I/O APIC pins around switching to it: about
/// 200 trapped MMIO accesses in every boot.
pub fn withdraw_x2apic(entries: &mut [kvm_cpuid_entry2]) {
    for e in entries.iter_mut().filter(|e| e.function == LEAF_FEATURES) {
        e.ecx &= !ECX_X2APIC;
    }
}

/// Rewrites KVM's supported CPUID entries for vCPU `index` of `count`.
pub fn configure_vcpu_cpuid(entries: &mut [kvm_cpuid_entry2], index: u32, count: u32) {
    let apic_id = index;
    let core_bits = id_bits(count);
    for e in entries.iter_mut() {
        match e.function {
            LEAF_FEATURES => {
                // EBX[31:24] initial APIC id, EBX[23:16] logical processors.
                e.ebx = (e.ebx & 0x0000_ffff) | (apic_id << 24) | ((count.min(255)) << 16);
                e.ecx |= ECX_HYPERVISOR;
                if count > 1 {
                    e.edx |= EDX_HTT;
                } else {
                    e.edx &= !EDX_HTT;
                }
            }
            // EAX[31:26]: cores per package - 1; EAX[25:14]: logical
            // processors sharing this cache - 1 (1 for L1/L2, all cores for
            // L3). A null descriptor (type 0) ends the list.
            LEAF_CACHE_PARAMS if e.eax & 0x1f != 0 => {
                let level = (e.eax >> 5) & 0x7;
                let sharing = if level >= 3 { count - 1 } else { 0 };
                e.eax = (e.eax & 0x3fff) | ((count - 1) << 26) | (sharing << 14);
            }
            LEAF_EXT_TOPOLOGY | LEAF_V2_EXT_TOPOLOGY => {
                e.edx = apic_id;
                match e.index {
                    0 => {
                        e.eax = 0;
                        e.ebx = 1;
                        e.ecx = (LEVEL_SMT << 8) | e.index;
                    }
                    1 => {
                        e.eax = core_bits;
                        e.ebx = count;
                        e.ecx = (LEVEL_CORE << 8) | e.index;
                    }
                    _ => {
                        e.eax = 0;
                        e.ebx = 0;
                        e.ecx = e.index;
                    }
                }
            }
            LEAF_AMD_ADDR_SIZES => {
                // ECX[15:12] APIC id size, ECX[7:0] cores - 1.
                e.ecx = (e.ecx & !0xf0ff) | (core_bits.max(1) << 12) | (count - 1);
            }
            LEAF_AMD_EXT_APIC_ID => {
                e.eax = apic_id;
                // One thread per core; compute unit id = core.
                e.ebx = apic_id & 0xff;
                e.ecx = 0;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        function: u32,
        index: u32,
        eax: u32,
        ebx: u32,
        ecx: u32,
        edx: u32,
    ) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            eax,
            ebx,
            ecx,
            edx,
            ..Default::default()
        }
    }

    #[test]
    fn id_bits_rounds_up() {
        assert_eq!(
            [id_bits(1), id_bits(2), id_bits(3), id_bits(4), id_bits(5)],
            [0, 1, 2, 2, 3]
        );
    }

    #[test]
    fn leaf1_apic_id_and_flags() {
        let mut e = [entry(1, 0, 0x800f12, 0x0000_0800, 0, 0)];
        configure_vcpu_cpuid(&mut e, 2, 4);
        assert_eq!(e[0].ebx >> 24, 2);
        assert_eq!((e[0].ebx >> 16) & 0xff, 4);
        assert_eq!(e[0].ebx & 0xffff, 0x0800);
        assert_ne!(e[0].ecx & ECX_HYPERVISOR, 0);
        assert_ne!(e[0].edx & EDX_HTT, 0);
        let mut one = [entry(1, 0, 0, 0, 0, EDX_HTT)];
        configure_vcpu_cpuid(&mut one, 0, 1);
        assert_eq!(one[0].edx & EDX_HTT, 0);
    }

    #[test]
    fn extended_topology_levels() {
        let mut e = [
            entry(0xb, 0, 9, 9, 9, 9),
            entry(0xb, 1, 9, 9, 9, 9),
            entry(0xb, 2, 9, 9, 9, 9),
        ];
        configure_vcpu_cpuid(&mut e, 3, 6);
        assert_eq!((e[0].eax, e[0].ebx, e[0].ecx, e[0].edx), (0, 1, 0x100, 3));
        assert_eq!((e[1].eax, e[1].ebx, e[1].ecx, e[1].edx), (3, 6, 0x201, 3));
        assert_eq!((e[2].eax, e[2].ebx, e[2].ecx), (0, 0, 2));
    }

    #[test]
    fn tsc_deadline_offered_and_x2apic_withdrawn_in_leaf_one_only() {
        let mut e = [
            entry(1, 0, 0, 0, ECX_X2APIC, 0),
            entry(7, 0, 0, 0, ECX_X2APIC, 0),
        ];
        offer_tsc_deadline(&mut e);
        withdraw_x2apic(&mut e);
        assert_eq!(e[0].ecx, ECX_TSC_DEADLINE);
        assert_eq!(e[1].ecx, ECX_X2APIC, "other leaves untouched");
    }

    #[test]
    fn cache_and_amd_leaves() {
        // L1 data cache (type 1, level 1) and L3 (type 3, level 3).
        let mut e = [
            entry(4, 0, 0x21, 0, 0, 0),
            entry(4, 3, 0x63, 0, 0, 0),
            entry(4, 4, 0, 0, 0, 0),
            entry(0x8000_0008, 0, 0, 0, 0x7007, 0),
            entry(0x8000_001e, 0, 0, 0, 0, 0),
        ];
        configure_vcpu_cpuid(&mut e, 1, 2);
        assert_eq!(e[0].eax >> 26, 1);
        assert_eq!((e[0].eax >> 14) & 0xfff, 0);
        assert_eq!((e[1].eax >> 14) & 0xfff, 1);
        assert_eq!(e[2].eax, 0, "null cache descriptor left alone");
        assert_eq!(e[3].ecx & 0xff, 1);
        assert_eq!((e[3].ecx >> 12) & 0xf, 1);
        assert_eq!(e[4].eax, 1);
    }
}
