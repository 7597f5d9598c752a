//! The run summary's units section. Everything in it comes from the
//! guest's record, so it is bounded whatever the record holds: at most
//! [`MAX_CHAIN_LINES`] links of the critical chain, indented at most
//! [`MAX_INDENT`] levels, names cut at [`MAX_NAME_CHARS`] and control
//! characters escaped; the timeline keeps the whole chain.

use std::fmt::Write as _;

use bootscope_model::timeline_initramfs::InitramfsStage;
use bootscope_model::units::{Unit, UnitsDoc};

/// The most links of the critical chain the summary prints.
pub const MAX_CHAIN_LINES: usize = 32;
/// The deepest indentation (two spaces a level), as systemd-analyze
/// indents each link under the one that waited for it.
pub const MAX_INDENT: usize = 8;
/// The longest unit name shown (systemd's `UNIT_NAME_MAX`).
pub const MAX_NAME_CHARS: usize = 256;
/// The longest other text from the guest shown (its systemd version, its
/// `Startup finished` line, a reason the record is unreadable).
pub const MAX_TEXT_CHARS: usize = 512;
/// How many of the slowest units the summary lists.
const SLOWEST: usize = 8;

/// `s` as the terminal may show it: its first `max` characters, control
/// characters escaped, `…` when it was cut.
pub fn shown(s: &str, max: usize) -> String {
    let cut = s.char_indices().nth(max).map(|(i, _)| i);
    let head = cut.map_or(s, |i| &s[..i]);
    let mut out = bootscope_model::text::printable(head).into_owned();
    if cut.is_some() {
        out.push('…');
    }
    out
}

/// The summary's units section: the critical chain as systemd-analyze
/// prints it (times from the first `KVM_RUN`), the slowest units, and
/// systemd's own figures beside the timeline's.
pub fn summary(units: &UnitsDoc, zero_ns: u64) -> String {
    let mut out = String::new();
    if let Some(e) = &units.error {
        let _ = writeln!(out, "userspace units: none ({})", shown(e, MAX_TEXT_CHARS));
        return out;
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let _ = writeln!(
        out,
        "userspace units: {} activated (systemd {}); critical chain to {} (@ started or active, + time to start, ms from the first KVM_RUN):",
        units.units.len(),
        shown(&units.systemd_version, MAX_TEXT_CHARS),
        shown(&units.chain_target, MAX_NAME_CHARS)
    );
    let chain = &units.critical_chain;
    for (depth, link) in chain.iter().take(MAX_CHAIN_LINES).enumerate() {
        // As systemd-analyze: when it started and how long it took, or
        // when it became active if it had nothing to wait for.
        let (at, plus) = if link.duration_ns > 0 {
            (
                link.active_ns.saturating_sub(link.duration_ns),
                format!(" +{:.1}", ms(link.duration_ns)),
            )
        } else {
            (link.active_ns, String::new())
        };
        let _ = writeln!(
            out,
            "  {}{} @{:.1}{plus}",
            "  ".repeat(depth.min(MAX_INDENT)),
            shown(&link.name, MAX_NAME_CHARS),
            ms(at.saturating_sub(zero_ns))
        );
    }
    if chain.len() > MAX_CHAIN_LINES {
        let _ = writeln!(
            out,
            "  … {} more units down the chain (the timeline's units.critical_chain lists them all)",
            chain.len() - MAX_CHAIN_LINES
        );
    }
    slowest(&mut out, &units.units);
    if let (Some(s), Some(c)) = (&units.startup, &units.clock) {
        let _ = writeln!(
            out,
            "systemd: {}\ntimeline: {:.1} ms (kernel, from the first KVM_RUN) + {:.1} ms (userspace); userspace ratio {:.4}, total {:.4}: the kernel ran {:.1} ms before its clock started; guest clock aligned within {:.3} ms",
            shown(&s.line, MAX_TEXT_CHARS),
            ms(s.timeline_kernel_ns),
            ms(s.timeline_userspace_ns),
            s.userspace_ratio,
            s.total_ratio,
            s.kernel_before_clock_ns as f64 / 1e6,
            ms(c.error_ns)
        );
    }
    if let Some(stage) = &units.initramfs {
        initramfs(&mut out, stage, zero_ns);
    }
    out
}

/// The initramfs stage: its span and what it did.
fn initramfs(out: &mut String, s: &InitramfsStage, zero_ns: u64) {
    let ms = |ns: u64| ns as f64 / 1e6;
    let _ = writeln!(
        out,
        "initramfs: {:.1} ms, @{:.1} (Run /init) to @{:.1} ({}), {} messages",
        ms(s.duration_ns),
        ms(s.start_ns.saturating_sub(zero_ns)),
        ms(s.end_ns.saturating_sub(zero_ns)),
        shown(&s.end, MAX_NAME_CHARS),
        s.messages
    );
    let mut did = Vec::new();
    if !s.drivers.is_empty() {
        let names: Vec<String> = s.drivers.iter().take(8).map(|d| shown(d, 64)).collect();
        did.push(format!("drivers {}", names.join(" ")));
    }
    if let Some(u) = s.step("udev") {
        did.push(format!("udev @{:.1}", ms(u.t_ns.saturating_sub(zero_ns))));
    }
    if let Some(d) = s.step("device") {
        did.push(format!(
            "disk found @{:.1}",
            ms(d.t_ns.saturating_sub(zero_ns))
        ));
    }
    if let Some(m) = s.step("mount") {
        did.push(format!(
            "root {} mounted @{:.1}",
            shown(&s.root_device, 64),
            ms(m.t_ns.saturating_sub(zero_ns))
        ));
    }
    if !s.fsck.is_empty() {
        did.push(format!("fsck: {}", shown(&s.fsck, 120)));
    }
    if !s.units.is_empty() {
        did.push(format!("{} units", s.units.len()));
    }
    if !did.is_empty() {
        let _ = writeln!(out, "  {}", did.join("; "));
    }
}

/// The slowest units, slowest first (ties by name).
fn slowest(out: &mut String, units: &[Unit]) {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut slowest: Vec<&Unit> = units.iter().collect();
    let by_time = |a: &&Unit, b: &&Unit| {
        b.duration_ns
            .cmp(&a.duration_ns)
            .then_with(|| a.name.cmp(&b.name))
    };
    if slowest.len() > SLOWEST {
        slowest.select_nth_unstable_by(SLOWEST - 1, by_time);
        slowest.truncate(SLOWEST);
    }
    slowest.sort_by(by_time);
    let _ = writeln!(out, "slowest units (ms):");
    for u in slowest {
        let _ = writeln!(
            out,
            "  {:>10.1}  {}",
            ms(u.duration_ns),
            shown(&u.name, MAX_NAME_CHARS)
        );
    }
}
