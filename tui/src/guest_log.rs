//! The guest kernel's log that `bootscope profile` read from a traced VM's
//! memory, as the console pane shows it while a saved profile is browsed:
//! the records logged by the position when the console placed the guest's
//! clock on the profile's (`profile --initcalls`), else every record on
//! the guest's clock alone. The text is the guest's: each line made
//! printable (`bootscope_model::text::printable`).

use bootscope_model::guest_read::KernelLogLine;
use bootscope_model::profile::Profile;
use bootscope_model::text::printable;

use crate::Console;

/// A record's lines as the kernel's console prints them:
/// `[    0.150000] text`, a continuation line under its first.
fn record_lines(r: &KernelLogLine) -> impl Iterator<Item = String> + '_ {
    let stamp = format!(
        "[{:>5}.{:06}]",
        r.ts_ns / 1_000_000_000,
        r.ts_ns % 1_000_000_000 / 1000
    );
    let pad = " ".repeat(stamp.len());
    r.text.split('\n').enumerate().map(move |(i, l)| {
        let lead = if i == 0 { &stamp } else { &pad };
        format!("{lead} {}", printable(l))
    })
}

/// The pane for `p` at `t_ns` on its clock; None when the profile read no
/// guest kernel log.
pub fn console_at(p: &Profile, t_ns: u64) -> Option<Console> {
    let g = p.guest_read.as_ref()?;
    let log = g.kernel_log.as_ref()?;
    let total = log.records.len();
    let (records, title): (Vec<&KernelLogLine>, String) = match g.log_clock() {
        Some(clock) => {
            let by_now: Vec<&KernelLogLine> = log
                .records
                .iter()
                .filter(|r| r.profile_ns(clock).is_some_and(|t| t <= t_ns))
                .collect();
            let title = format!(
                "guest kernel log, read from memory: {} of {total} records by the position",
                by_now.len()
            );
            (by_now, title)
        }
        None => (
            log.records.iter().collect(),
            format!(
                "guest kernel log, read from memory: {total} records (on the guest's clock; the console did not place it on the profile's)"
            ),
        ),
    };
    Some(Console {
        title,
        lines: records.into_iter().flat_map(record_lines).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::guest_read::{GuestRead, KernelLogRead};
    use bootscope_model::initcalls::{ClockAlignment, InitcallsDoc};

    /// Three records at guest 0, 1 and 2 s (the second with an escape
    /// sequence, the third of two lines); on the profile's clock 0.5 s
    /// later with `on_clock`.
    fn profile(on_clock: bool) -> Profile {
        let line = |ts_ns, text: &str| KernelLogLine {
            ts_ns,
            text: text.into(),
        };
        let mut p = Profile::new();
        p.duration_ns = 4_000_000_000;
        p.guest_read = Some(GuestRead {
            kernel_log: Some(KernelLogRead {
                at: "shutdown".into(),
                records: vec![
                    line(0, "Linux version 6.1"),
                    line(1_000_000_000, "title \u{1b}]0;pwned\u{7}"),
                    line(
                        2_000_000_000,
                        "Run /init as init process\n  with arguments:",
                    ),
                ],
                ..Default::default()
            }),
            initcalls: on_clock.then(|| InitcallsDoc {
                clock: Some(ClockAlignment {
                    offset_ns: 500_000_000,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn records_by_the_position_on_the_profiles_clock() {
        let p = profile(true);
        let at = |t| console_at(&p, t).unwrap();
        assert!(at(0).lines.is_empty());
        assert_eq!(at(500_000_000).lines, ["[    0.000000] Linux version 6.1"]);
        let c = at(1_600_000_000);
        assert_eq!(c.lines.len(), 2);
        assert_eq!(c.lines[1], "[    1.000000] title \\e]0;pwned\\u{07}");
        assert!(c.title.contains("2 of 3 records"), "{}", c.title);
        let end = at(4_000_000_000);
        assert_eq!(
            end.lines[2..],
            [
                "[    2.000000] Run /init as init process",
                "                 with arguments:"
            ]
        );
        assert!(end.lines.iter().all(|l| !l.chars().any(char::is_control)));
    }

    #[test]
    fn off_the_clock_every_record_and_none_without_a_log() {
        let c = console_at(&profile(false), 0).unwrap();
        assert_eq!(c.lines.len(), 4);
        assert!(c.title.contains("on the guest's clock"), "{}", c.title);
        assert!(console_at(&Profile::new(), 0).is_none());
        let mut p = profile(true);
        p.guest_read.as_mut().unwrap().kernel_log = None;
        assert!(console_at(&p, 0).is_none());
    }
}
