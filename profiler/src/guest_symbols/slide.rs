//! The guest kernel's KASLR slide, inferred from its exits.
//!
//! An exit of an instruction-intercept reason leaves the guest at that
//! instruction: `io` exits sit on IN/OUT, `cpuid` on CPUID, `msr` on
//! RDMSR/WRMSR, `hlt` on HLT. The kernel is moved as a whole, by a multiple
//! of 2 MiB (CONFIG_PHYSICAL_ALIGN) up to 1 GiB; the slide is the one
//! candidate under which those exits' addresses land on those very
//! instructions in the image. Without an image (a symbol map only) the
//! check is weaker: `io` exits must land in functions named for port I/O.
//! No candidate clearly ahead of the rest: the slide is unknown, and no
//! site is named.

use super::SymbolTable;
use crate::sites::{ExitSites, KERNEL_HALF};

/// The slide candidates: 0 and every 2 MiB step up to 1 GiB.
const ALIGN: u64 = 2 << 20;
const MAX_SLIDE: u64 = 1 << 30;

/// What was found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub offset: Option<u64>,
    pub how: String,
    pub warning: Option<String>,
}

/// Skips the prefixes an I/O or system instruction may carry.
fn opcode(bytes: &[u8]) -> &[u8] {
    let n = bytes
        .iter()
        .take(4)
        .take_while(|&&b| {
            matches!(
                b,
                0x66 | 0xf2 | 0xf3 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x40..=0x4f
            )
        })
        .count();
    &bytes[n..]
}

/// Whether the bytes at an exit's address are an instruction of that
/// reason; None for a reason not checked this way.
pub fn instruction_fits(reason: &str, bytes: &[u8]) -> Option<bool> {
    let op = opcode(bytes);
    let first = op.first().copied();
    let second = op.get(1).copied();
    Some(match reason {
        "io" | "IO_INSTRUCTION" => {
            matches!(first, Some(0xe4..=0xe7 | 0xec..=0xef | 0x6c..=0x6f))
        }
        "cpuid" | "CPUID" => first == Some(0x0f) && second == Some(0xa2),
        "msr" | "MSR_READ" | "MSR_WRITE" => {
            first == Some(0x0f) && matches!(second, Some(0x30 | 0x32))
        }
        "hlt" | "HLT" => first == Some(0xf4),
        _ => return None,
    })
}

/// Whether a function's name says it does port I/O (the weaker check).
fn port_io_name(name: &str) -> bool {
    const WORDS: [&str; 10] = [
        "serial", "outb", "inb", "outw", "inw", "outl", "inl", "_io_", "pio", "port",
    ];
    WORDS.iter().any(|w| name.contains(w)) || name.starts_with("io_")
}

/// The distinct kernel addresses of checkable exits, with their counts.
fn checkable(sites: &ExitSites, with_image: bool) -> Vec<(String, u64, u64)> {
    let mut by: std::collections::BTreeMap<(String, u64), u64> = Default::default();
    for s in &sites.sites {
        let Some(rip) = s.rip.filter(|&r| r >= KERNEL_HALF) else {
            continue;
        };
        let checked = if with_image {
            instruction_fits(&s.reason, &[0x90]).is_some()
        } else {
            s.reason == "io" || s.reason == "IO_INSTRUCTION"
        };
        if checked {
            *by.entry((s.reason.clone(), rip)).or_default() += s.count;
        }
    }
    by.into_iter().map(|((r, a), n)| (r, a, n)).collect()
}

/// Distinct sites whose address fits under each candidate slide (sites,
/// not exits: the few sites of a console's IN and OUT, with most of the
/// exits, may fit under another slide too, where a look-alike pair of
/// functions lies; the many other sites do not).
fn scores(table: &SymbolTable, sites: &[(String, u64, u64)]) -> Vec<(u64, u64)> {
    let (lo, hi) = table.text_range();
    let candidates = (0..=MAX_SLIDE / ALIGN).map(|k| k * ALIGN);
    match &table.image {
        Some(img) => candidates
            .map(|slide| {
                let fit: u64 = sites
                    .iter()
                    .filter(|(reason, rip, _)| {
                        let a = rip.wrapping_sub(slide);
                        (lo..hi).contains(&a)
                            && img
                                .at(a, 8)
                                .and_then(|b| instruction_fits(reason, b))
                                .unwrap_or(false)
                    })
                    .count() as u64;
                (slide, fit)
            })
            .collect(),
        None => candidates
            .map(|slide| {
                let addrs: Vec<u64> = sites
                    .iter()
                    .map(|(_, r, _)| r.wrapping_sub(slide))
                    .collect();
                let fit: u64 = table
                    .names(&addrs)
                    .iter()
                    .zip(sites)
                    .filter(|(name, _)| name.as_ref().is_some_and(|(f, _)| port_io_name(f)))
                    .count() as u64;
                (slide, fit)
            })
            .collect(),
    }
}

/// Picks the slide: the best candidate must fit at least half the checked
/// sites, at least three, and two more than any other.
pub fn pick(scores: &[(u64, u64)], total: u64) -> Option<u64> {
    let mut sorted: Vec<&(u64, u64)> = scores.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let best = sorted.first()?;
    let second = sorted.get(1).map_or(0, |s| s.1);
    (best.1 * 2 >= total && best.1 >= 3 && best.1 >= second + 2).then_some(best.0)
}

/// The slide of the guest that made `sites`, from `table`.
pub fn infer(table: &SymbolTable, sites: &ExitSites) -> Found {
    let with_image = table.image.is_some();
    let checked = checkable(sites, with_image);
    let total = checked.len() as u64;
    let check = if with_image {
        "io/cpuid/msr/hlt exits on their IN/OUT/CPUID/RDMSR/WRMSR/HLT instructions in the image"
    } else {
        "io exits in port-I/O functions of the symbol map"
    };
    if total == 0 {
        return Found {
            offset: None,
            how: "unknown: no exit of a reason that pins its instruction".into(),
            warning: Some(
                "the KASLR slide is unknown, so guest kernel addresses are left as hex".into(),
            ),
        };
    }
    let s = scores(table, &checked);
    match pick(&s, total) {
        Some(offset) => {
            let fit = s.iter().find(|x| x.0 == offset).map_or(0, |x| x.1);
            Found {
                offset: Some(offset),
                how: format!("inferred: {fit} of {total} {check} under a slide of {offset:#x}"),
                warning: None,
            }
        }
        None => Found {
            offset: None,
            how: format!("unknown: no single 2 MiB slide puts the {check}"),
            warning: Some(format!(
                "the symbols do not fit the guest's exits under any KASLR slide ({} may be \
                 another kernel than the guest's): guest kernel addresses are left as hex",
                table.source
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_of_each_reason() {
        assert_eq!(instruction_fits("io", &[0xee]), Some(true));
        assert_eq!(instruction_fits("io", &[0x66, 0xef]), Some(true));
        assert_eq!(instruction_fits("io", &[0x89, 0xc8]), Some(false));
        assert_eq!(instruction_fits("cpuid", &[0x0f, 0xa2]), Some(true));
        assert_eq!(instruction_fits("msr", &[0x0f, 0x30]), Some(true));
        assert_eq!(instruction_fits("hlt", &[0xf4]), Some(true));
        assert_eq!(instruction_fits("npf", &[0xf4]), None);
        assert!(port_io_name("io_serial_out") && port_io_name("serial8250_console_putchar"));
        assert!(!port_io_name("memcpy"));
    }

    #[test]
    fn a_slide_must_stand_out() {
        assert_eq!(pick(&[(0, 9), (2 << 20, 2)], 10), Some(0));
        assert_eq!(pick(&[(0, 9), (2 << 20, 8)], 10), None);
        assert_eq!(pick(&[(0, 3), (2 << 20, 0)], 10), None);
        assert_eq!(pick(&[(0, 2)], 2), None);
    }
}
