//! Text parsers: `--numa`, sizes and CPU/node lists from the command line,
//! and tracefs event format files.

use std::str::FromStr;

use bootscope_model::cpulist::IdSet;
use bootscope_model::size::{human_size, parse_size};
use bootscope_profiler::bpf::BsField;
use bootscope_profiler::{patch, reasons, tracefs};
use bootscope_vmm::memory::{HugePageSize, NumaSpec, Policy};

/// Any text as a `--numa` spec, a size, a CPU or node list, a huge page
/// size and a policy. A list that parses prints back to itself; a size
/// that parses formats.
pub fn cli_values(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = NumaSpec::from_str(s) {
        assert!(spec
            .cpus
            .highest()
            .is_none_or(|c| c <= bootscope_model::cpulist::MAX_ID));
    }
    if let Ok(bytes) = parse_size(s) {
        assert!(!human_size(bytes).is_empty());
    }
    if let Ok(set) = IdSet::parse(s) {
        let printed = set.to_string();
        assert_eq!(
            IdSet::parse(&printed).ok(),
            Some(set),
            "{s:?} printed as {printed:?} reads differently"
        );
    }
    let _ = HugePageSize::from_str(s);
    let _ = Policy::from_str(s);
}

/// Any text as a tracefs `format` file: the parser, the exit-reason tables
/// read from its print fmt, and the checks each field gets before its
/// offset is patched into a BPF program (under each event name whose
/// fields are patched).
pub fn tracefs_format(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(format) = tracefs::parse_format(&text) else {
        return;
    };
    let tables = tracefs::parse_symbolic_tables(&format.print_fmt);
    for t in &tables {
        let _ = tracefs::eval_int(&t.expr);
    }
    let _ = reasons::kvm_exit_tables(&format.print_fmt);
    let _ = reasons::userspace_table(&format.print_fmt);
    let names = reasons::ReasonTables::from_formats(Some(&format), Some(&format));
    for code in [0, 1, 2, 30, 0x7c, u32::MAX] {
        let _ = names.exit_name(0, code);
        let _ = names.exit_name(1, code);
        let _ = names.userspace_name(code);
    }
    for field in &format.fields {
        let f = BsField {
            off: field.offset,
            size: field.size,
        };
        for &(event, name) in patch::PATCH_SLOTS {
            if name == field.name && patch::check_field(event, name, f).is_ok() {
                assert!(
                    u64::from(f.off) + u64::from(f.size) <= 2048,
                    "field {name} at {}+{} accepted for direct loads",
                    f.off,
                    f.size
                );
            }
        }
    }
}
