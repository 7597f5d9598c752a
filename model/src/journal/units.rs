//! What systemd's manager (PID 1) logged about one boot, from journal
//! entries: each unit's start job (`Starting ...` and `Started ...`/
//! `Finished ...`/`Reached target ...`, or its failure), its own
//! `Startup finished` figures, its version, and the kernel's hand-over to
//! the initramfs (`Run /init as init process`) and to the real root.
//!
//! Messages that reached the journal with their structured fields carry
//! `MESSAGE_ID` and `UNIT`; those PID 1 logged before journald ran came
//! through the kernel's log as text only, so their verb and unit are read
//! from the text (`systemd[1]: Starting foo.service - Foo...`).

use std::collections::HashMap;

use super::file::Entry;

/// The fields [`boot_units`] reads; pass them to [`super::file::parse`].
pub const FIELDS: &[&str] = &[
    "MESSAGE",
    "MESSAGE_ID",
    "UNIT",
    "JOB_RESULT",
    "_PID",
    "SYSLOG_PID",
    "SYSLOG_IDENTIFIER",
    "_TRANSPORT",
    "_SOURCE_MONOTONIC_TIMESTAMP",
    "KERNEL_USEC",
    "INITRD_USEC",
    "USERSPACE_USEC",
];

const MESSAGE_UNIT_STARTING: &str = "7d4958e842da4a758f6c1cdc7b36dcc5";
const MESSAGE_UNIT_STARTED: &str = "39f53479d3a045ac8e11786248231fbf";
const MESSAGE_UNIT_FAILED: &str = "be02cf6855d2428ba40df7e9d022f03d";
const MESSAGE_STARTUP_FINISHED: &str = "b07a249cd024414a82dd00cd181378ff";
/// `UNIT: Deactivated successfully.`
const MESSAGE_UNIT_SUCCESS: &str = "7ad2d189f7e94e70a38c781354912448";

/// Units kept for one boot; a boot has a few hundred.
pub const MAX_UNITS: usize = 10_000;

const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".target",
    ".mount",
    ".socket",
    ".device",
    ".swap",
    ".path",
    ".timer",
    ".slice",
    ".scope",
    ".automount",
];

/// One unit's start job in this boot (µs of the guest's `CLOCK_MONOTONIC`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitTimes {
    pub name: String,
    /// `Starting ...`: the job began (absent for targets, which log only
    /// when reached).
    pub starting_us: Option<u64>,
    /// The job ended (`Started`, `Finished`, `Reached target`, or failed).
    pub done_us: Option<u64>,
    /// `done`, `failed`, or empty while the job had not ended.
    pub result: String,
    /// Its start job ended without the unit becoming active: skipped for
    /// an unmet condition (`... was skipped because of an unmet condition
    /// check`), or a oneshot service that ran and went inactive
    /// (`Deactivated successfully` before its job ended). systemd has no
    /// activation time for it, and `systemd-analyze critical-chain` leaves
    /// it off the chain.
    pub never_active: bool,
}

/// systemd's `Startup finished in ...` message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartupFinished {
    pub line: String,
    pub at_us: u64,
    pub kernel_us: u64,
    pub initrd_us: Option<u64>,
    pub userspace_us: u64,
}

/// What PID 1 logged about one boot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BootUnits {
    pub boot_id: [u8; 16],
    /// Boots seen in the entries (this one and others before it).
    pub boots_seen: usize,
    /// This boot's entries.
    pub entries: usize,
    /// Units in the order their first job message came.
    pub units: Vec<UnitTimes>,
    /// Units past [`MAX_UNITS`], not kept.
    pub units_dropped: usize,
    pub startup: Option<StartupFinished>,
    /// `systemd 252.39-1~deb12u2 running in system mode ...`.
    pub systemd_version: Option<String>,
    /// The kernel ran the initramfs's (or the root's) init.
    pub init_run_us: Option<u64>,
    /// PID 1's first message.
    pub systemd_start_us: Option<u64>,
    /// PID 1 switched from the initramfs to the real root.
    pub switch_root_us: Option<u64>,
    /// The messages from the kernel's `Run /init` on (at most
    /// [`MAX_STAGE_LOG`], none after `Switching root.`): what the
    /// initramfs stage did.
    pub stage_log: Vec<LogLine>,
}

/// Messages kept for the initramfs stage.
pub const MAX_STAGE_LOG: usize = 4096;

/// One message of the boot (µs of the guest's `CLOCK_MONOTONIC`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogLine {
    pub at_us: u64,
    /// `SYSLOG_IDENTIFIER` (`kernel` for the kernel's own messages).
    pub ident: String,
    pub text: String,
}

impl BootUnits {
    /// The end of the initramfs stage (guest µs) and what ended it:
    /// `Switching root.` of a systemd initramfs, else PID 1's first
    /// message (systemd on the real root after another init).
    pub fn initramfs_end_us(&self) -> Option<(u64, &'static str)> {
        self.switch_root_us
            .map(|t| (t, "switch root"))
            .or_else(|| self.systemd_start_us.map(|t| (t, "systemd started")))
    }
}

/// When an entry happened: the sender's own time where journald kept it
/// (the kernel's log), else when journald received it.
pub fn entry_time_us(entry: &Entry) -> u64 {
    entry
        .field("_SOURCE_MONOTONIC_TIMESTAMP")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(entry.monotonic_us)
}

fn from_pid1(entry: &Entry) -> bool {
    entry.field("_PID") == Some("1")
        || (entry.field("SYSLOG_PID") == Some("1")
            && entry.field("SYSLOG_IDENTIFIER") == Some("systemd"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Starting,
    Done,
    /// Done, the unit skipped for an unmet condition.
    Skipped,
    Failed,
    /// The unit went inactive, its processes having exited successfully.
    Deactivated,
}

/// A unit name in a status text (`foo.service - Foo`, or a bare name).
fn unit_in(text: &str) -> Option<&str> {
    let name = text.split(" - ").next()?.trim();
    let plausible = !name.is_empty()
        && name.len() <= 256
        && !name.contains(char::is_whitespace)
        && UNIT_SUFFIXES.iter().any(|s| name.ends_with(s));
    plausible.then_some(name)
}

/// The job event and unit a PID 1 status text names.
fn event_in_text(message: &str) -> Option<(Event, &str)> {
    const VERBS: &[(&str, &str, Event)] = &[
        ("Starting ", "...", Event::Starting),
        ("Mounting ", "...", Event::Starting),
        ("Started ", ".", Event::Done),
        ("Finished ", ".", Event::Done),
        ("Reached target ", ".", Event::Done),
        ("Mounted ", ".", Event::Done),
        ("Listening on ", ".", Event::Done),
        ("Failed to start ", ".", Event::Failed),
    ];
    VERBS.iter().find_map(|(verb, end, event)| {
        let rest = message.strip_prefix(verb)?;
        let rest = rest.strip_suffix(end).unwrap_or(rest);
        Some((*event, unit_in(rest)?))
    })
}

fn event_of(entry: &Entry) -> Option<(Event, String)> {
    let message = entry.field("MESSAGE").unwrap_or("");
    let by_id = match entry.field("MESSAGE_ID") {
        Some(MESSAGE_UNIT_STARTING) => Some(Event::Starting),
        Some(MESSAGE_UNIT_STARTED) => Some(Event::Done),
        Some(MESSAGE_UNIT_FAILED) => Some(Event::Failed),
        Some(MESSAGE_UNIT_SUCCESS) => Some(Event::Deactivated),
        _ => None,
    };
    let by_id = match by_id {
        Some(Event::Done) if message.contains(" was skipped because ") => Some(Event::Skipped),
        other => other,
    };
    if let (Some(event), Some(unit)) = (by_id, entry.field("UNIT")) {
        return Some((event, unit.to_string()));
    }
    if by_id == Some(Event::Deactivated) {
        return None;
    }
    let (event, unit) = event_in_text(message)?;
    Some((by_id.unwrap_or(event), unit.to_string()))
}

fn startup_of(entry: &Entry, at_us: u64) -> Option<StartupFinished> {
    if entry.field("MESSAGE_ID") != Some(MESSAGE_STARTUP_FINISHED) {
        return None;
    }
    let number = |name| entry.field(name).and_then(|v| v.trim().parse::<u64>().ok());
    Some(StartupFinished {
        line: entry.field("MESSAGE").unwrap_or("").to_string(),
        at_us,
        kernel_us: number("KERNEL_USEC")?,
        initrd_us: number("INITRD_USEC"),
        userspace_us: number("USERSPACE_USEC")?,
    })
}

/// The boot `boot` (else the boot of the last entry) as PID 1 logged it;
/// `None` when no entry belongs to it.
pub fn boot_units<'a, I>(entries: I, boot: Option<[u8; 16]>) -> Option<BootUnits>
where
    I: IntoIterator<Item = &'a Entry>,
    I::IntoIter: Clone,
{
    let entries = entries.into_iter();
    let boot = match boot {
        Some(b) => b,
        None => entries.clone().last()?.boot_id,
    };
    let mut boots: Vec<[u8; 16]> = Vec::new();
    let mut out = BootUnits {
        boot_id: boot,
        ..BootUnits::default()
    };
    let mut index: HashMap<String, usize> = HashMap::new();
    for entry in entries {
        if !boots.contains(&entry.boot_id) && boots.len() < 1024 {
            boots.push(entry.boot_id);
        }
        if entry.boot_id != boot {
            continue;
        }
        out.entries += 1;
        let at = entry_time_us(entry);
        let message = entry.field("MESSAGE").unwrap_or("");
        if entry.field("_TRANSPORT") == Some("kernel")
            && out.init_run_us.is_none()
            && message.starts_with("Run ")
            && message.ends_with(" as init process")
        {
            out.init_run_us = Some(at);
        }
        if out.init_run_us.is_some()
            && out.switch_root_us.is_none()
            && out.stage_log.len() < MAX_STAGE_LOG
        {
            out.stage_log.push(LogLine {
                at_us: at,
                ident: entry
                    .field("SYSLOG_IDENTIFIER")
                    .or_else(|| (entry.field("_TRANSPORT") == Some("kernel")).then_some("kernel"))
                    .unwrap_or("")
                    .to_string(),
                text: message.to_string(),
            });
        }
        if !from_pid1(entry) {
            continue;
        }
        out.systemd_start_us.get_or_insert(at);
        if out.systemd_version.is_none() && message.starts_with("systemd ") {
            if let Some(v) = message.split_whitespace().nth(1) {
                out.systemd_version = Some(v.to_string());
            }
        }
        if message == "Switching root." {
            out.switch_root_us = Some(at);
        }
        if let Some(s) = startup_of(entry, at) {
            out.startup = Some(s);
            continue;
        }
        let Some((event, name)) = event_of(entry) else {
            continue;
        };
        let i = match index.get(&name) {
            Some(&i) => i,
            // A unit that went inactive without a start job in this boot.
            None if event == Event::Deactivated => continue,
            None if out.units.len() >= MAX_UNITS => {
                out.units_dropped += 1;
                continue;
            }
            None => {
                index.insert(name.clone(), out.units.len());
                out.units.push(UnitTimes {
                    name,
                    ..UnitTimes::default()
                });
                out.units.len() - 1
            }
        };
        apply(&mut out.units[i], event, at);
    }
    out.boots_seen = boots.len();
    (out.entries > 0).then_some(out)
}

/// The first start job of a unit counts; a later restart does not move it.
fn apply(unit: &mut UnitTimes, event: Event, at: u64) {
    match event {
        Event::Starting => {
            if unit.starting_us.is_none() && unit.done_us.is_none() {
                unit.starting_us = Some(at);
            }
        }
        Event::Done | Event::Skipped | Event::Failed => {
            if unit.done_us.is_none() {
                unit.done_us = Some(at);
                unit.never_active |= event == Event::Skipped;
                unit.result = if event == Event::Failed {
                    "failed"
                } else {
                    "done"
                }
                .into();
            }
        }
        Event::Deactivated => {
            if unit.starting_us.is_some() && unit.done_us.is_none() {
                unit.never_active = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(mono: u64, fields: &[(&str, &str)]) -> Entry {
        Entry {
            monotonic_us: mono,
            boot_id: [1; 16],
            fields: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Entry::default()
        }
    }

    #[test]
    fn status_texts_name_their_units() {
        assert_eq!(
            event_in_text("Starting systemd-journald.service - Journal Service..."),
            Some((Event::Starting, "systemd-journald.service"))
        );
        assert_eq!(
            event_in_text("Reached target multi-user.target - Multi-User System."),
            Some((Event::Done, "multi-user.target"))
        );
        assert_eq!(
            event_in_text("Mounted tmp.mount - Temporary Directory /tmp."),
            Some((Event::Done, "tmp.mount"))
        );
        // A description alone (older systemd) names no unit.
        assert_eq!(event_in_text("Starting Journal Service..."), None);
        assert_eq!(event_in_text("Started something else entirely."), None);
    }

    #[test]
    fn kernel_log_texts_and_structured_messages_make_one_unit() {
        let pid1 = [("SYSLOG_PID", "1"), ("SYSLOG_IDENTIFIER", "systemd")];
        let entries = vec![
            entry(
                5,
                &[
                    ("_TRANSPORT", "kernel"),
                    ("MESSAGE", "Run /init as init process"),
                ],
            ),
            entry(
                90,
                &[
                    pid1[0],
                    pid1[1],
                    ("_TRANSPORT", "kernel"),
                    (
                        "MESSAGE",
                        "systemd 252.39-1~deb12u2 running in system mode (+PAM)",
                    ),
                ],
            ),
            entry(
                100,
                &[
                    pid1[0],
                    pid1[1],
                    ("MESSAGE", "Starting a.service - A..."),
                    ("_SOURCE_MONOTONIC_TIMESTAMP", "95"),
                ],
            ),
            entry(
                200,
                &[
                    ("_PID", "1"),
                    ("MESSAGE_ID", MESSAGE_UNIT_STARTED),
                    ("UNIT", "a.service"),
                    ("MESSAGE", "Started a.service - A."),
                ],
            ),
            // Another process's message with the same text is not PID 1's.
            entry(
                250,
                &[("_PID", "77"), ("MESSAGE", "Started b.service - B.")],
            ),
            entry(
                300,
                &[
                    ("_PID", "1"),
                    ("MESSAGE_ID", MESSAGE_UNIT_FAILED),
                    ("UNIT", "c.service"),
                ],
            ),
        ];
        let boot = boot_units(&entries, None).unwrap();
        assert_eq!(boot.init_run_us, Some(5));
        assert_eq!(boot.systemd_start_us, Some(90));
        assert_eq!(boot.systemd_version.as_deref(), Some("252.39-1~deb12u2"));
        assert_eq!(boot.units.len(), 2);
        assert_eq!(boot.units[0].name, "a.service");
        assert_eq!(boot.units[0].starting_us, Some(95));
        assert_eq!(boot.units[0].done_us, Some(200));
        assert_eq!(boot.units[1].result, "failed");
        // Everything from `Run /init` on is the initramfs stage's log.
        assert_eq!(boot.stage_log.len(), 6);
        assert_eq!(boot.stage_log[0].ident, "kernel");
        assert_eq!(boot.stage_log[1].ident, "systemd");
        assert_eq!(boot.initramfs_end_us(), Some((90, "systemd started")));
    }

    #[test]
    fn oneshot_and_skipped_units_never_became_active() {
        let pid1 = |at, id, unit, message| {
            entry(
                at,
                &[
                    ("_PID", "1"),
                    ("MESSAGE_ID", id),
                    ("UNIT", unit),
                    ("MESSAGE", message),
                ],
            )
        };
        let entries = vec![
            pid1(10, MESSAGE_UNIT_STARTING, "o.service", "Starting o.service - O..."),
            pid1(20, MESSAGE_UNIT_SUCCESS, "o.service", "o.service: Deactivated successfully."),
            pid1(21, MESSAGE_UNIT_STARTED, "o.service", "Finished o.service - O."),
            pid1(30, MESSAGE_UNIT_STARTED, "f.service", "f.service - F was skipped because of an unmet condition check (ConditionFirstBoot=yes)."),
            pid1(40, MESSAGE_UNIT_STARTING, "s.service", "Starting s.service - S..."),
            pid1(50, MESSAGE_UNIT_STARTED, "s.service", "Started s.service - S."),
            // Stopped later, at shutdown: it was active.
            pid1(90, MESSAGE_UNIT_SUCCESS, "s.service", "s.service: Deactivated successfully."),
            // No start job in this boot: not one of its units.
            pid1(95, MESSAGE_UNIT_SUCCESS, "x.service", "x.service: Deactivated successfully."),
        ];
        let boot = boot_units(&entries, None).unwrap();
        let never: Vec<(&str, bool, &str)> = boot
            .units
            .iter()
            .map(|u| (u.name.as_str(), u.never_active, u.result.as_str()))
            .collect();
        assert_eq!(
            never,
            [
                ("o.service", true, "done"),
                ("f.service", true, "done"),
                ("s.service", false, "done")
            ]
        );
        assert_eq!(boot.units[0].done_us, Some(21));
    }

    #[test]
    fn other_boots_are_left_out_and_counted() {
        let mut old = entry(1, &[("_PID", "1"), ("MESSAGE", "Started x.service - X.")]);
        old.boot_id = [9; 16];
        let new = entry(2, &[("_PID", "1"), ("MESSAGE", "Started y.service - Y.")]);
        let entries = vec![old, new];
        let boot = boot_units(&entries, None).unwrap();
        assert_eq!(boot.boots_seen, 2);
        assert_eq!(boot.entries, 1);
        assert_eq!(boot.units[0].name, "y.service");
        assert!(boot_units(&entries, Some([7; 16])).is_none());
    }
}
