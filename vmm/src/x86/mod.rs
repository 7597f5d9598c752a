//! x86-64 vCPU and platform set-up, done the way production microVMs do it.

pub mod acpi;
pub mod cpuid;
pub mod mptable;
pub mod regs;
pub mod vmgenid;
