//! Initcalls from the kernel log: `initcall_debug` has the kernel log
//! `calling  FN+0x0/0x20 @ 1` before and `initcall FN+0x0/0x20 returned 0
//! after 12 usecs` after each initcall, at `KERN_DEBUG`, which the default
//! console log level keeps off the console. The level each runs in comes
//! from `parse_args`'s own debug line, `doing core, parsing ARGS: '...'`,
//! printed once per level when dynamic debug is enabled for that function;
//! initcalls before the first such line are the `early` ones, except those
//! `start_kernel` calls itself (pid 0) before any level: the `console`
//! initcalls.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::ringbuffer::LogRecord;

/// The kernel's initcall levels in the order they run (`console` from
/// `start_kernel`, `early` from `do_pre_smp_initcalls`, the rest from
/// `do_initcalls`).
pub const LEVELS: &[&str] = &[
    "console", "early", "pure", "core", "postcore", "arch", "subsys", "fs", "device", "late",
];

/// What `--initcalls` adds to the kernel command line: initcall debug lines
/// into the log, `parse_args`'s level lines, and a log buffer large enough
/// to keep them all (the default 128 KiB overflows on a full boot).
pub const CMDLINE_PARAMS: &str = "initcall_debug dyndbg=\"func parse_args +p\" log_buf_len=256K";

/// A kernel command line that would put `initcall_debug`'s lines on the
/// console (thousands of serial port exits: the measurement would distort
/// the boot it measures).
#[derive(Debug, thiserror::Error)]
#[error(
    "--initcalls keeps the initcall lines off the console, but the kernel command line's \
     `{param}` prints debug lines on it: remove `{param}` from --cmdline"
)]
pub struct NoisyCmdline {
    pub param: String,
}

/// `cmdline` with [`CMDLINE_PARAMS`] appended (a `log_buf_len=` already
/// given is kept), or why it cannot be used.
pub fn cmdline_with_initcalls(cmdline: &str) -> Result<String, NoisyCmdline> {
    for word in cmdline.split_whitespace() {
        let noisy = match word.split_once('=') {
            None => matches!(word, "debug" | "ignore_loglevel"),
            Some(("loglevel", n)) => n.parse::<u32>().is_ok_and(|n| n >= 8),
            Some(("ignore_loglevel", _)) => true,
            _ => false,
        };
        if noisy {
            return Err(NoisyCmdline {
                param: word.to_string(),
            });
        }
    }
    let mut out = cmdline.trim_end().to_string();
    for p in [
        "initcall_debug",
        "dyndbg=\"func parse_args +p\"",
        "log_buf_len=256K",
    ] {
        let key = p.split('=').next().unwrap_or(p);
        let present = cmdline
            .split_whitespace()
            .any(|w| w == key || w.starts_with(&format!("{key}=")));
        if !present {
            out.push(' ');
            out.push_str(p);
        }
    }
    Ok(out)
}

/// One initcall as the guest logged it, on the guest's clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GuestInitcall {
    /// The function, without its `+0x0/0x20` offset (and ` [module]`).
    pub name: String,
    pub level: String,
    /// Guest `local_clock()` of the `calling` record, in nanoseconds.
    pub guest_start_ns: u64,
    /// The kernel's own measure (`ktime_get()` around the call), in
    /// nanoseconds (microsecond resolution).
    pub duration_ns: u64,
    /// What the initcall returned (0 is success).
    pub ret: i64,
    /// The `@ PID` of the `calling` line.
    pub pid: u32,
}

/// Function name of a `%pS` symbol: `serial8250_init+0x0/0x130 [8250]`.
fn symbol_name(s: &str) -> &str {
    let s = s.split_whitespace().next().unwrap_or("");
    s.split_once('+').map_or(s, |(name, _)| name)
}

/// `calling  FN+0x0/0x20 @ 1` → (FN, pid).
fn parse_calling(text: &str) -> Option<(&str, u32)> {
    let rest = text.strip_prefix("calling ")?.trim_start();
    let (sym, pid) = rest.rsplit_once(" @ ")?;
    Some((symbol_name(sym), pid.trim().parse().ok()?))
}

/// `initcall FN+0x0/0x20 returned 0 after 12 usecs` → (FN, ret, usecs);
/// a duration too large for 64-bit nanoseconds is `u64::MAX` usecs (the
/// console reader refuses it).
fn parse_returned(text: &str) -> Option<(&str, i64, u64)> {
    let rest = text.strip_prefix("initcall ")?;
    let (sym, rest) = rest.split_once(" returned ")?;
    let (ret, rest) = rest.split_once(" after ")?;
    let usecs = rest.strip_suffix(" usecs")?;
    Some((
        symbol_name(sym),
        ret.trim().parse().ok()?,
        usecs.trim().parse().ok()?,
    ))
}

/// `doing core, parsing ARGS: '...'` → the level, when it is one.
fn parse_level(text: &str) -> Option<&'static str> {
    let rest = text.strip_prefix("doing ")?;
    let (doing, _) = rest.split_once(", parsing ARGS")?;
    LEVELS.iter().copied().find(|l| *l == doing)
}

/// The initcalls in the log, in the order they started. A `calling` line
/// without its `returned` line (the log was cut, or the initcall never
/// returned) is left out; so is a module's init (level `module`) when its
/// `doing MODULE` line has no level name.
///
/// Linear in the log: the initcalls started and not yet returned are
/// indexed by name, then pid (a `returned` line has no pid: it closes the
/// open call of that name with the lowest pid).
pub fn parse(records: &[LogRecord]) -> Vec<GuestInitcall> {
    let mut level = "early";
    let mut open: HashMap<String, BTreeMap<u32, (u64, &'static str)>> = HashMap::new();
    let mut done = Vec::new();
    let mut past_levels = false;
    for r in records {
        for line in r.text.lines() {
            if let Some(l) = parse_level(line) {
                level = l;
            } else if line.starts_with("doing ") && level == "late" {
                past_levels = true;
            }
            if let Some((name, pid)) = parse_calling(line) {
                let lvl = match (past_levels, level, pid) {
                    (true, _, _) => "module",
                    (false, "early", 0) => "console",
                    _ => level,
                };
                open.entry(name.to_string())
                    .or_default()
                    .insert(pid, (r.ts_nsec, lvl));
            } else if let Some((name, ret, usecs)) = parse_returned(line) {
                let Some(by_pid) = open.get_mut(name) else {
                    continue;
                };
                let Some((pid, (start, lvl))) = by_pid.pop_first() else {
                    continue;
                };
                if by_pid.is_empty() {
                    open.remove(name);
                }
                done.push(GuestInitcall {
                    name: name.to_string(),
                    level: lvl.to_string(),
                    guest_start_ns: start,
                    duration_ns: usecs.saturating_mul(1000),
                    ret,
                    pid,
                });
            }
        }
    }
    done.sort_by_key(|c| c.guest_start_ns);
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, ts: u64, text: &str) -> LogRecord {
        LogRecord {
            seq,
            ts_nsec: ts,
            caller_id: 1,
            text: text.into(),
        }
    }

    #[test]
    fn pairs_calls_with_returns_and_tags_levels() {
        let log = [
            rec(0, 50, "calling  con_init+0x0/0x22c @ 0"),
            rec(
                0,
                60,
                "initcall con_init+0x0/0x22c returned 0 after 0 usecs",
            ),
            rec(1, 100, "calling  init_mmap_min_addr+0x0/0x40 @ 1"),
            rec(
                2,
                150,
                "initcall init_mmap_min_addr+0x0/0x40 returned 0 after 0 usecs",
            ),
            rec(3, 200, "doing core, parsing ARGS: 'console=ttyS0'"),
            rec(4, 300, "calling  pci_subsys_init+0x0/0x7a @ 1"),
            rec(
                5,
                900,
                "initcall pci_subsys_init+0x0/0x7a returned -19 after 550 usecs",
            ),
            rec(6, 950, "doing device, parsing ARGS: 'console=ttyS0'"),
            rec(7, 1000, "calling  serial8250_init+0x0/0x130 @ 1"),
            rec(
                8,
                1100,
                "Serial: 8250/16550 driver, 4 ports, IRQ sharing enabled",
            ),
            rec(
                9,
                5000,
                "initcall serial8250_init+0x0/0x130 returned 0 after 3900 usecs",
            ),
            rec(10, 6000, "calling  never_returns+0x0/0x10 @ 1"),
        ];
        let calls = parse(&log);
        let names: Vec<_> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "con_init",
                "init_mmap_min_addr",
                "pci_subsys_init",
                "serial8250_init"
            ]
        );
        assert_eq!(calls[0].level, "console");
        assert_eq!(calls[1].level, "early");
        assert_eq!(calls[2].level, "core");
        assert_eq!(calls[2].ret, -19);
        assert_eq!(calls[2].duration_ns, 550_000);
        assert_eq!(calls[3].level, "device");
        assert_eq!(calls[3].guest_start_ns, 1000);
    }

    #[test]
    fn command_line_gets_the_parameters_once_and_refuses_debug() {
        let c = cmdline_with_initcalls("console=ttyS0 log_buf_len=8M").unwrap();
        assert_eq!(
            c,
            "console=ttyS0 log_buf_len=8M initcall_debug dyndbg=\"func parse_args +p\""
        );
        assert_eq!(cmdline_with_initcalls(&c).unwrap(), c);
        assert!(cmdline_with_initcalls("quiet loglevel=4").is_ok());
        let e = cmdline_with_initcalls("console=ttyS0 loglevel=8").unwrap_err();
        assert_eq!(e.param, "loglevel=8");
        assert!(e.to_string().contains("remove `loglevel=8`"));
        assert!(cmdline_with_initcalls("debug").is_err());
        assert!(cmdline_with_initcalls("ignore_loglevel").is_err());
    }

    /// Many calls open at once (a log cut short, or junk): each return is
    /// matched through the index by name, the lowest pid first, and the
    /// unmatched ones are left out.
    #[test]
    fn many_open_calls_are_matched_by_name_and_pid() {
        let mut log = Vec::new();
        for i in 0..100_000u64 {
            log.push(rec(
                i,
                i,
                &format!("calling  never_returns_{i}+0x0/0x10 @ 1"),
            ));
        }
        for pid in [7u32, 3, 5] {
            log.push(rec(
                0,
                200_000 + u64::from(pid),
                &format!("calling  same+0x0/0x10 @ {pid}"),
            ));
        }
        for i in 0..100_000u64 {
            log.push(rec(
                0,
                300_000 + i,
                &format!("initcall unknown_{i}+0x0/0x10 returned 0 after 1 usecs"),
            ));
        }
        for _ in 0..4 {
            log.push(rec(
                0,
                400_000,
                "initcall same+0x0/0x10 returned 0 after 2 usecs",
            ));
        }
        log.push(rec(
            0,
            500_000,
            "initcall huge+0x0/0x10 returned 0 after 18446744073709551615 usecs",
        ));
        let calls = parse(&log);
        let pids: Vec<u32> = calls.iter().map(|c| c.pid).collect();
        assert_eq!(pids, [3, 5, 7]);
        assert!(calls
            .iter()
            .all(|c| c.name == "same" && c.duration_ns == 2000));
        let huge = parse(&[
            rec(0, 1, "calling  huge+0x0/0x10 @ 1"),
            rec(
                0,
                2,
                "initcall huge+0x0/0x10 returned 0 after 18446744073709551615 usecs",
            ),
        ]);
        assert_eq!(huge[0].duration_ns, u64::MAX, "overflow is not wrapped");
    }

    #[test]
    fn module_symbols_and_odd_lines() {
        assert_eq!(
            parse_calling("calling  virtio_init+0x0/0x1000 [virtio] @ 57"),
            Some(("virtio_init", 57))
        );
        assert_eq!(parse_calling("calling  x"), None);
        assert_eq!(
            parse_returned("initcall x returned zero after 1 usecs"),
            None
        );
        assert_eq!(parse_level("doing dyndbg params, parsing ARGS: ''"), None);
        assert_eq!(parse_level("doing late, parsing ARGS: ''"), Some("late"));
    }
}
