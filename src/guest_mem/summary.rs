//! The guest memory lines of the profile's summary.

use std::fmt::Write as _;

use bootscope_model::guest_read::GuestRead;
use bootscope_model::human::ms;

/// Log lines shown at the end of the summary.
const LOG_TAIL: usize = 5;

/// The lines for `g` (empty when there is nothing to say).
pub fn summary(g: &GuestRead) -> String {
    let mut s = String::new();
    let m = &g.memory_map;
    let _ = writeln!(
        s,
        "guest memory of pid {}: map {} ({} slot(s))",
        g.pid,
        if m.source.is_empty() {
            "none"
        } else {
            &m.source
        },
        m.slots.len()
    );
    for slot in m.slots.iter().take(8) {
        let _ = writeln!(
            s,
            "  slot {:<6} {:#012x}-{:#012x} {:<6} {}",
            slot.slot,
            slot.gpa,
            slot.gpa.saturating_add(slot.size),
            slot.kind,
            slot.backing
        );
    }
    for p in &g.passes {
        let held = p
            .held_ns
            .map(|h| format!(", VMM held {}", ms(h)))
            .unwrap_or_default();
        let at = p
            .held_at
            .as_deref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  read at {}{at}: {} KiB in {}{held}{}",
            p.at,
            p.bytes_read / 1024,
            ms(p.read_ns),
            p.error
                .as_deref()
                .map(|e| format!("; {e}"))
                .unwrap_or_default()
        );
    }
    if let Some(b) = &g.boot_params {
        let _ = writeln!(
            s,
            "  boot parameters at {:#x}: {} e820 entries; command line: {}",
            b.gpa,
            b.e820.len(),
            b.cmdline.as_deref().unwrap_or("(none)")
        );
    }
    if let Some(l) = &g.kernel_log {
        let _ = writeln!(
            s,
            "  kernel log ({}): {} records",
            l.os_release.as_deref().unwrap_or("release unknown"),
            l.records.len()
        );
        for r in l.records.iter().rev().take(LOG_TAIL).rev() {
            let _ = writeln!(
                s,
                "    [{:>5}.{:06}] {}",
                r.ts_ns / 1_000_000_000,
                r.ts_ns % 1_000_000_000 / 1000,
                r.text
            );
        }
    }
    if let Some(i) = g.initcalls.as_ref().filter(|i| !i.initcalls.is_empty()) {
        let _ = write!(s, "{}", bootscope_vmm::kernel_log::summary(i, 5));
    }
    if let Some(m) = &g.modules {
        let names: Vec<&str> = m.modules.iter().map(|m| m.name.as_str()).collect();
        if names.is_empty() && m.warnings.is_empty() {
            let _ = writeln!(s, "  modules: none loaded");
        } else if !names.is_empty() {
            let _ = writeln!(s, "  modules: {}", names.join(", "));
        }
    }
    for p in &g.missing {
        let _ = writeln!(s, "  not read: {}: {}", p.part, p.why);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::guest_read::{KernelLogLine, KernelLogRead, MemorySlot, ReadPass};

    #[test]
    fn the_summary_names_the_map_the_passes_the_log_and_what_is_missing() {
        let mut g = GuestRead {
            pid: 42,
            ..GuestRead::default()
        };
        g.memory_map.source = "ioctl".into();
        g.memory_map.slots.push(MemorySlot {
            size: 0x1000_0000,
            kind: "ram".into(),
            backing: "[anon]".into(),
            ..MemorySlot::default()
        });
        g.passes.push(ReadPass {
            at: "shutdown".into(),
            held_ns: Some(3_000_000),
            held_at: Some("the guest reset".into()),
            bytes_read: 4096,
            ..ReadPass::default()
        });
        g.kernel_log = Some(KernelLogRead {
            records: vec![KernelLogLine {
                ts_ns: 1_500_000_000,
                text: "Run /init as init process".into(),
            }],
            ..KernelLogRead::default()
        });
        g.missing("initcalls", "no trace events");
        let s = summary(&g);
        assert!(s.contains("map ioctl (1 slot(s))"), "{s}");
        assert!(s.contains("0x0010000000 ram    [anon]"), "{s}");
        assert!(
            s.contains("read at shutdown (the guest reset): 4 KiB"),
            "{s}"
        );
        assert!(s.contains("VMM held 3.0 ms"), "{s}");
        assert!(s.contains("[    1.500000] Run /init"), "{s}");
        assert!(s.contains("not read: initcalls: no trace events"), "{s}");
    }
}
