//! `bootscope doctor`: what this host offers, as the VMM and the profiler
//! each report it (KVM, memory and QEMU; tracefs, BPF, BTF), in one table.

use bootscope_vmm::host::{self, HostRoot};

use crate::common::Failure;

pub(crate) fn run(json: bool) -> Result<i32, Failure> {
    let root = HostRoot::default();
    let mut findings = host::kvm_findings(&root);
    findings.extend(bootscope_profiler::host::findings(
        &root,
        host::kvm_flavour(&root),
    ));
    findings.extend(host::memory_findings(&root));
    let text = if json {
        serde_json::to_string_pretty(&findings)? + "\n"
    } else {
        findings
            .iter()
            .map(|f| {
                format!(
                    "{:<10} {:<4} {}\n",
                    f.item,
                    if f.ok { "ok" } else { "--" },
                    f.detail
                )
            })
            .collect()
    };
    crate::stdout::print(text).map_err(crate::stdout::failure)?;
    Ok(0)
}
