//! Boot phase marks and the phases between them.
//!
//! Mark names are the VMM timeline's (`port 0x80: kernel 0x40`, ...), so a
//! profile and a timeline of one boot line up. Each mark may open a phase;
//! the phase's index is what the BPF side files exits and faults under
//! (per process, written into the `phase` map when the mark arrives).

use bootscope_model::mark::{debug_port_range, MarkSource};

use crate::profile::{Mark, PhaseSpan};

/// Name of phase index 0: everything before the first phase mark.
pub const BEFORE_FIRST_MARK: &str = "before first mark";

/// The phase a mark opens, if it opens one.
///
/// - port 0x80: its range (`firmware`, `bootloader`, `kernel`,
///   `userspace`), or `custom 0xNN` for 0x80-0xff;
/// - port 0xf4: 1 `firmware`, 3 `bootloader`, 5/6 `kernel`, 7 `userspace`
///   (2 and 4 only end a phase; the next start opens the next one);
/// - the VMM: process start `vmm setup` (and, bootscope's profiler having
///   attached before its VMM started, profiler attached), first `KVM_RUN`
///   `guest boot`, guest shutdown `vmm teardown`;
/// - console milestones: the kernel banner `kernel`, running init
///   `userspace`;
/// - the boot timer: `userspace`.
pub fn phase_of_mark(mark: &Mark) -> Option<String> {
    let v = mark.value.map(|v| v as u8);
    match mark.source {
        MarkSource::DebugPort => v.map(|v| match debug_port_range(v) {
            "custom" => format!("custom 0x{v:02x}"),
            r => r.to_string(),
        }),
        MarkSource::BootTimePort => match v? {
            1 => Some("firmware".into()),
            3 => Some("bootloader".into()),
            5 | 6 => Some("kernel".into()),
            7 => Some("userspace".into()),
            _ => None,
        },
        MarkSource::Vmm => match mark.name.as_str() {
            "vmm: process start" | "vmm: profiler attached" => Some("vmm setup".into()),
            "vmm: first KVM_RUN" => Some("guest boot".into()),
            "vmm: guest shutdown" => Some("vmm teardown".into()),
            _ => None,
        },
        MarkSource::Serial if mark.name.contains("kernel banner") => Some("kernel".into()),
        MarkSource::Serial if mark.name.contains("run init") => Some("userspace".into()),
        MarkSource::BootTimer => Some("userspace".into()),
        _ => None,
    }
}

/// Interns phase names: index 0 is [`BEFORE_FIRST_MARK`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseNames {
    names: Vec<String>,
}

impl Default for PhaseNames {
    fn default() -> Self {
        Self {
            names: vec![BEFORE_FIRST_MARK.to_string()],
        }
    }
}

impl PhaseNames {
    /// The index of `name`, adding it if new.
    pub fn index(&mut self, name: &str) -> u32 {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return i as u32;
        }
        self.names.push(name.to_string());
        (self.names.len() - 1) as u32
    }

    /// The name of an index (unknown ones get a made-up name rather than a
    /// panic: the kernel may hand back anything).
    pub fn name(&self, index: u32) -> String {
        self.names
            .get(index as usize)
            .cloned()
            .unwrap_or_else(|| format!("phase {index}"))
    }
}

/// The phases the marks open, in time order, each ending where the next
/// begins and the last at `end_ns`. A mark that names the phase already
/// running does not split it.
///
/// A profiler that attached before its VMM started (the mark `vmm: profiler
/// attached`) has the time from process start to then as `profiler
/// attach`.
pub fn derive_spans(marks: &[Mark], end_ns: u64) -> Vec<PhaseSpan> {
    let mut sorted: Vec<&Mark> = marks.iter().collect();
    sorted.sort_by_key(|m| m.t_ns);
    let vmm = |m: &Mark, name: &str| m.source == MarkSource::Vmm && m.name == name;
    let attached = sorted.iter().any(|m| vmm(m, "vmm: profiler attached"));
    let mut spans: Vec<PhaseSpan> = Vec::new();
    for m in sorted {
        let Some(mut name) = phase_of_mark(m) else {
            continue;
        };
        if attached && vmm(m, "vmm: process start") {
            name = "profiler attach".into();
        }
        if spans.last().is_some_and(|s| s.name == name) {
            continue;
        }
        if let Some(last) = spans.last_mut() {
            last.end_ns = m.t_ns;
        }
        spans.push(PhaseSpan {
            name,
            start_ns: m.t_ns,
            end_ns: end_ns.max(m.t_ns),
        });
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(source: MarkSource, name: &str, value: Option<u64>, t_ns: u64) -> Mark {
        Mark {
            name: name.into(),
            source,
            t_ns,
            value,
            tgid: None,
        }
    }

    #[test]
    fn marks_open_phases() {
        let p = |s, n, v| phase_of_mark(&mark(s, n, v, 0));
        assert_eq!(
            p(MarkSource::DebugPort, "", Some(0x41)).as_deref(),
            Some("kernel")
        );
        assert_eq!(
            p(MarkSource::DebugPort, "", Some(0x90)).as_deref(),
            Some("custom 0x90")
        );
        assert_eq!(
            p(MarkSource::BootTimePort, "", Some(7)).as_deref(),
            Some("userspace")
        );
        assert_eq!(p(MarkSource::BootTimePort, "", Some(2)), None);
        assert_eq!(
            p(MarkSource::Vmm, "vmm: first KVM_RUN", None).as_deref(),
            Some("guest boot")
        );
        assert_eq!(p(MarkSource::Vmm, "vmm: memory ready", None), None);
        assert_eq!(
            p(MarkSource::Serial, "serial: run init", None).as_deref(),
            Some("userspace")
        );
    }

    #[test]
    fn spans_follow_marks() {
        let marks = vec![
            mark(MarkSource::DebugPort, "a", Some(0x40), 100),
            mark(MarkSource::BootTimePort, "b", Some(6), 110), // still kernel
            mark(MarkSource::Vmm, "vmm: memory ready", None, 50), // opens nothing
            mark(MarkSource::DebugPort, "c", Some(0x60), 300),
            mark(MarkSource::DebugPort, "d", Some(0x90), 400),
        ];
        let s = derive_spans(&marks, 1000);
        let got: Vec<(&str, u64, u64)> = s
            .iter()
            .map(|p| (p.name.as_str(), p.start_ns, p.end_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                ("kernel", 100, 300),
                ("userspace", 300, 400),
                ("custom 0x90", 400, 1000)
            ]
        );
        // The VMM's own marks; a profiler attached before the VMM started
        // has its own span.
        let vmm = |name: &str, t| mark(MarkSource::Vmm, name, None, t);
        let mut marks = vec![vmm("vmm: process start", 0), vmm("vmm: first KVM_RUN", 60)];
        let names = |m: &[Mark]| -> Vec<(String, u64)> {
            derive_spans(m, 100)
                .into_iter()
                .map(|p| (p.name, p.start_ns))
                .collect()
        };
        assert_eq!(
            names(&marks),
            [("vmm setup".to_string(), 0), ("guest boot".to_string(), 60)]
        );
        marks.push(vmm("vmm: profiler attached", 40));
        assert_eq!(
            names(&marks),
            [
                ("profiler attach".to_string(), 0),
                ("vmm setup".to_string(), 40),
                ("guest boot".to_string(), 60)
            ]
        );
    }

    #[test]
    fn phase_name_interning() {
        let mut n = PhaseNames::default();
        assert_eq!(n.name(0), BEFORE_FIRST_MARK);
        assert_eq!(n.index("kernel"), 1);
        assert_eq!(n.index("userspace"), 2);
        assert_eq!(n.index("kernel"), 1);
        assert_eq!(n.name(2), "userspace");
        assert_eq!(n.name(9), "phase 9");
    }
}
