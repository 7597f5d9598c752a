//! Boot phase marks and the phases between them.
//!
//! Mark names are the VMM timeline's (`port 0x80: kernel 0x40`, ...), so a
//! profile and a timeline of one boot line up. Each mark may open a phase;
//! the phase's index is what the BPF side files exits and faults under
//! (per process). A port write switches its process's phase in the kernel
//! at the write itself, by a table filled from [`port_write_phase`]; the
//! VMM's and the console's marks are told to the kernel when read.

use bootscope_model::mark::{debug_port_mark_name, debug_port_range, MarkSource};

use crate::profile::{Mark, PhaseSpan};

/// Name of phase index 0: everything before the first phase mark.
pub const BEFORE_FIRST_MARK: &str = "before first mark";

/// Guest code at or above this address is the kernel's: the upper half of
/// x86-64's canonical addresses (bpf/phases.h `BS_KERNEL_HALF`). Firmware
/// and boot loaders run below it.
pub const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

/// True when a port-0x80 write is the kernel's own and not a marker: a
/// value below the kernel's range (Linux's `io_delay` writes 0x00 to port
/// 0x80 from kernel text), made by code in the kernel half.
fn kernel_non_marker(value: u8, guest_rip: Option<u64>) -> bool {
    value < 0x40 && guest_rip.is_some_and(|rip| rip >= KERNEL_HALF)
}

/// True when a port-0x80 write is 0x00 made below the kernel half: what
/// Linux's boot code (`io_delay()` of its real-mode set-up, on the way to
/// the decompressor) writes, not a firmware marker.
fn boot_code_io_delay(value: u8, guest_rip: Option<u64>) -> bool {
    value == 0 && guest_rip.is_some_and(|rip| rip < KERNEL_HALF)
}

/// True when a port-0x80 write is none of the guest's marks but the
/// kernel's or its boot code's `io_delay` (named `... by kernel code`,
/// `... by boot code`).
pub fn io_delay_write(value: u8, guest_rip: Option<u64>) -> bool {
    kernel_non_marker(value, guest_rip) || boot_code_io_delay(value, guest_rip)
}

/// The name of a port-0x80 write's mark: `port 0x80: kernel 0x40` (its
/// range and value), or, for a write that is no marker, `port 0x80: 0x00
/// by kernel code` / `port 0x80: 0x00 by boot code`.
pub fn debug_port_write_name(value: u8, guest_rip: Option<u64>) -> String {
    if kernel_non_marker(value, guest_rip) {
        format!("port 0x80: 0x{value:02x} by kernel code")
    } else if boot_code_io_delay(value, guest_rip) {
        "port 0x80: 0x00 by boot code".to_string()
    } else {
        debug_port_mark_name(value)
    }
}

/// The start of the name of the mark of the first port I/O the guest's
/// kernel made.
pub const FIRST_KERNEL_PIO: &str = "port I/O: first by kernel code";

/// The mark of the first port I/O the guest's kernel made (on `port`, from
/// `guest_rip`, at `t_ns`): the kernel runs by then.
pub fn first_kernel_pio_mark(port: u16, t_ns: u64, tgid: u32, guest_rip: u64) -> Mark {
    Mark {
        name: format!("{FIRST_KERNEL_PIO} (port 0x{port:x})"),
        source: MarkSource::DebugPort,
        t_ns,
        value: None,
        tgid: Some(tgid),
        guest_rip: Some(guest_rip),
    }
}

/// The phase a mark opens on its own, if it opens one.
///
/// - port 0x80: its range (`firmware`, `bootloader`, `kernel`,
///   `userspace`), or `custom 0xNN` for 0x80-0xff; a write below the
///   kernel's range that the kernel made (its guest RIP in the kernel half:
///   `io_delay`'s 0x00) is no marker but shows the kernel running: `kernel`;
///   0x00 from below the kernel half is Linux's boot code (its real-mode
///   set-up's `io_delay`, before the decompressor): `bootloader`;
/// - the first port I/O of the guest's kernel (any port): `kernel`;
/// - port 0xf4: 1 `firmware`, 3 `bootloader`, 5/6 `kernel`, 7 `userspace`
///   (2 and 4 only end a phase; the next start opens the next one);
/// - the VMM: process start `vmm setup` (and, bootscope's profiler having
///   attached before its VMM started, profiler attached), first `KVM_RUN`
///   `guest boot`, guest shutdown `vmm teardown`;
/// - console milestones: the firmware's banner `firmware`, the kernel
///   banner `kernel`, running init `userspace`;
/// - the boot timer: `userspace`.
///
/// Whether it does open it depends on the boot so far: [`PhaseTracker`].
pub fn phase_of_mark(mark: &Mark) -> Option<String> {
    let v = mark.value.map(|v| v as u8);
    match mark.source {
        MarkSource::DebugPort if mark.name.starts_with(FIRST_KERNEL_PIO) => Some("kernel".into()),
        MarkSource::DebugPort => v.map(|v| {
            if kernel_non_marker(v, mark.guest_rip) {
                return "kernel".to_string();
            }
            if boot_code_io_delay(v, mark.guest_rip) {
                return "bootloader".to_string();
            }
            match debug_port_range(v) {
                "custom" => format!("custom 0x{v:02x}"),
                r => r.to_string(),
            }
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
        MarkSource::Serial if mark.name.contains("firmware banner") => Some("firmware".into()),
        MarkSource::Serial if mark.name.contains("kernel banner") => Some("kernel".into()),
        MarkSource::Serial if mark.name.contains("run init") => Some("userspace".into()),
        MarkSource::BootTimer => Some("userspace".into()),
        _ => None,
    }
}

/// The order of the boot's own phases: a boot goes from firmware to the
/// boot loader, the kernel and userspace, never back.
pub fn boot_rank(phase: &str) -> Option<u8> {
    match phase {
        "firmware" => Some(0),
        "bootloader" => Some(1),
        "kernel" => Some(2),
        "userspace" => Some(3),
        _ => None,
    }
}

/// How far one guest's boot has got, by its marks: a mark naming a boot
/// phase before the one reached opens nothing (the kernel's writes of
/// firmware-range values to port 0x80 once it runs, a console line matched
/// late). The live collector and [`derive_spans`] both go through it, so
/// the phases exits are filed under and the spans agree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseTracker {
    reached: Option<u8>,
}

impl PhaseTracker {
    /// The phase `mark` opens, given the marks before it (in time order).
    /// The rank ([`boot_rank`]) of the furthest boot phase reached.
    pub fn reached(&self) -> Option<u8> {
        self.reached
    }

    pub fn open(&mut self, mark: &Mark) -> Option<String> {
        let name = phase_of_mark(mark)?;
        if let Some(rank) = boot_rank(&name) {
            if self.reached.is_some_and(|r| rank < r) {
                return None;
            }
            self.reached = Some(rank);
        }
        Some(name)
    }
}

/// The mark a kind of port write is, as [`phase_of_mark`] sees it: what
/// the phases collector's `mark_phases` table (bpf/phases.h) is filled
/// from, so that a port write opens in the kernel the phase its mark
/// opens here.
pub fn port_write_mark(port: PortWrite) -> Mark {
    let (name, source, value, guest_rip) = match port {
        PortWrite::Debug { who, value } => {
            let rip = match who {
                0 => None,
                1 => Some(0),
                _ => Some(KERNEL_HALF),
            };
            (
                debug_port_write_name(value, rip),
                MarkSource::DebugPort,
                Some(u64::from(value)),
                rip,
            )
        }
        PortWrite::BootTime { value } => (
            String::new(),
            MarkSource::BootTimePort,
            Some(u64::from(value)),
            None,
        ),
        PortWrite::KernelFirst => (
            FIRST_KERNEL_PIO.to_string(),
            MarkSource::DebugPort,
            None,
            Some(KERNEL_HALF),
        ),
    };
    Mark {
        name,
        source,
        t_ns: 0,
        value,
        tgid: None,
        guest_rip,
    }
}

/// A kind of port write the BPF side decides a phase for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortWrite {
    /// A write to port 0x80 of `value`, by `who` (0 unknown, 1 code below
    /// the kernel half, 2 the kernel).
    Debug { who: u8, value: u8 },
    /// A write to port 0xf4 of `value`.
    BootTime { value: u8 },
    /// The first port I/O of the guest's kernel.
    KernelFirst,
}

/// The phase a port write opens and its boot rank ([`boot_rank`]), as the
/// BPF side applies it: the name is interned in `names`.
pub fn port_write_phase(port: PortWrite, names: &mut PhaseNames) -> Option<(u32, Option<u8>)> {
    let name = phase_of_mark(&port_write_mark(port))?;
    Some((names.index(&name), boot_rank(&name)))
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
/// running does not split it, nor does one naming a boot phase the boot
/// has gone past ([`PhaseTracker`]).
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
    let mut tracker = PhaseTracker::default();
    for m in sorted {
        let Some(mut name) = tracker.open(m) else {
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
            guest_rip: None,
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

    /// QEMU booting Debian in the lab: the kernel's io_delay writes 0x00
    /// to port 0x80 from kernel text (guest RIP known from the I/O exit);
    /// its console gives the banner and the start of init.
    #[test]
    fn kernel_io_delay_writes_are_not_firmware() {
        let rip = |m: Mark, r| Mark {
            guest_rip: Some(r),
            ..m
        };
        let kernel_text = 0xffff_ffff_8100_1234;
        let marks = vec![
            mark(MarkSource::Serial, "serial: firmware banner", None, 10),
            rip(mark(MarkSource::DebugPort, "", Some(0), 100), kernel_text),
            mark(MarkSource::Serial, "serial: kernel banner", None, 150),
            mark(MarkSource::Serial, "serial: run init", None, 900),
            // After init: io_delay again (RIP unknown here): no phase.
            mark(MarkSource::DebugPort, "", Some(0), 950),
        ];
        let got: Vec<(String, u64, u64)> = derive_spans(&marks, 1000)
            .into_iter()
            .map(|p| (p.name, p.start_ns, p.end_ns))
            .collect();
        assert_eq!(
            got,
            [
                ("firmware".to_string(), 10, 100),
                ("kernel".to_string(), 100, 900),
                ("userspace".to_string(), 900, 1000)
            ]
        );
        assert_eq!(
            debug_port_write_name(0, Some(kernel_text)),
            "port 0x80: 0x00 by kernel code"
        );
        // Below the kernel half (firmware, a boot loader): its range, but
        // for 0x00, the value of the boot code's io_delay.
        assert_eq!(
            debug_port_write_name(0x05, Some(0xf_1234)),
            "port 0x80: firmware 0x05"
        );
        assert_eq!(
            debug_port_write_name(0, Some(0x15b6)),
            "port 0x80: 0x00 by boot code"
        );
        assert_eq!(
            phase_of_mark(&rip(mark(MarkSource::DebugPort, "", Some(0), 0), 0x15b6)).as_deref(),
            Some("bootloader")
        );
        // Without a RIP, a 0x00 is still firmware's range.
        assert_eq!(debug_port_write_name(0, None), "port 0x80: firmware 0x00");
        let first = first_kernel_pio_mark(0x21, 5, 1, kernel_text);
        assert_eq!(first.name, "port I/O: first by kernel code (port 0x21)");
        assert_eq!(phase_of_mark(&first).as_deref(), Some("kernel"));
        assert_eq!(
            phase_of_mark(&rip(
                mark(MarkSource::DebugPort, "", Some(0x05), 0),
                0xf_1234
            ))
            .as_deref(),
            Some("firmware")
        );
        // A kernel marker from kernel code is the kernel's marker.
        assert_eq!(
            debug_port_write_name(0x41, Some(kernel_text)),
            "port 0x80: kernel 0x41"
        );
    }

    /// The marks of QEMU microvm booting Debian's kernel in the lab (SVM,
    /// times in ms): the set-up code's io_delay, the kernel's first port
    /// I/O, its console, init's marker written through /dev/port.
    #[test]
    fn a_qemu_boot_in_the_lab() {
        let ms = 1_000_000;
        let with_rip = |m: Mark, r| Mark {
            guest_rip: Some(r),
            ..m
        };
        let marks = vec![
            with_rip(mark(MarkSource::DebugPort, "", Some(0), 6833 * ms), 0x15b6),
            first_kernel_pio_mark(0xcf8, 9100 * ms, 1, 0xffff_ffff_a100_0000),
            mark(
                MarkSource::Serial,
                "serial: kernel banner",
                None,
                20848 * ms,
            ),
            mark(MarkSource::Serial, "serial: run init", None, 101505 * ms),
            with_rip(
                mark(MarkSource::DebugPort, "", Some(0x60), 102256 * ms),
                0xffff_ffff_a10b_c26d,
            ),
        ];
        let got: Vec<(String, u64)> = derive_spans(&marks, 103409 * ms)
            .into_iter()
            .map(|p| (p.name, (p.end_ns - p.start_ns) / ms))
            .collect();
        assert_eq!(
            got,
            [
                ("bootloader".to_string(), 2267),
                ("kernel".to_string(), 92405),
                ("userspace".to_string(), 1904)
            ]
        );
    }

    #[test]
    fn boot_phases_do_not_go_back() {
        let mut t = PhaseTracker::default();
        let dp = |v| mark(MarkSource::DebugPort, "", Some(v), 0);
        assert_eq!(t.open(&dp(0x00)).as_deref(), Some("firmware"));
        assert_eq!(t.open(&dp(0x40)).as_deref(), Some("kernel"));
        // Firmware- and boot-loader-range values once the kernel runs.
        assert_eq!(t.open(&dp(0x00)), None);
        assert_eq!(t.open(&dp(0x21)), None);
        // Custom values and the VMM's own marks are not boot phases.
        assert_eq!(t.open(&dp(0x90)).as_deref(), Some("custom 0x90"));
        let shutdown = mark(MarkSource::Vmm, "vmm: guest shutdown", None, 0);
        assert_eq!(t.open(&shutdown).as_deref(), Some("vmm teardown"));
        assert_eq!(t.open(&dp(0x41)).as_deref(), Some("kernel"));
        assert_eq!(t.open(&dp(0x60)).as_deref(), Some("userspace"));
        let banner = mark(MarkSource::Serial, "serial: kernel banner", None, 0);
        assert_eq!(t.open(&banner), None);
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
