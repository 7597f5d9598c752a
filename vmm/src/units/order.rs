//! The `After=` lists systemd's manager holds once a boot's units are
//! loaded, from what their unit files say ([`super::unit_files`]): what
//! `systemd-analyze critical-chain` follows. A unit is ordered after
//!
//! - the units its files name in `After=`, and every unit whose files
//!   name it in `Before=` (an ordering has two ends);
//! - with `DefaultDependencies=yes` (the default): a service after
//!   `sysinit.target` and `basic.target`; a socket, timer or path unit
//!   after `sysinit.target` and before `sockets.target`, `timers.target`,
//!   `paths.target`; a timer with `OnCalendar=` after `time-set.target`
//!   and `time-sync.target`; a mount after `local-fs-pre.target` and
//!   before `local-fs.target`; a target after each unit it wants, when
//!   that unit also has default dependencies and is not ordered after
//!   the target (so `systemd-update-utmp-runlevel.service`, with
//!   `DefaultDependencies=no` and ordered after `runlevel5.target`, the
//!   alias of `graphical.target`, does not order the target after it);
//! - whatever its defaults: a service with a bus name after
//!   `dbus.socket`; a service, socket, mount or swap whose output goes to
//!   the journal after `systemd-journald.socket`; a mount after the
//!   mounts of the paths above it; the unit a socket, timer or path unit
//!   starts after that unit.
//!
//! Names are the units' own: an alias (a unit file linked to another
//! name) stands for the unit it names. Slices are not in the journal's
//! units, so their ordering is left out. Bounded for a hostile image: at
//! most [`MAX_NAMES`] names per list and [`MAX_ALIAS_LOOKUPS`] alias
//! lookups in all.

use std::collections::{HashMap, HashSet};

use super::unit_files::{Ordering, MAX_NAMES};

/// Alias lookups in the image per boot, at most.
pub const MAX_ALIAS_LOOKUPS: usize = 4096;

/// The unit's type: its name's suffix.
fn kind(unit: &str) -> &str {
    unit.rsplit_once('.').map_or("", |(_, t)| t)
}

/// Whether the unit's output or error goes to the journal (or syslog, or
/// the kernel log), as it does by default.
fn logs_to_journal(ord: &Ordering) -> bool {
    let tty_input = ord.std_input.starts_with("tty");
    let output = match ord.std_output.as_str() {
        "" if tty_input => "tty",
        "" => "journal",
        o => o,
    };
    let error = match ord.std_error.as_str() {
        "" | "inherit" => output,
        e => e,
    };
    [output, error].iter().any(|s| {
        ["journal", "kmsg", "syslog"]
            .iter()
            .any(|p| s.starts_with(p))
    })
}

/// The mounts of the paths above a mount unit's (`sys-kernel-debug.mount`:
/// `sys-kernel.mount`, `sys.mount`, `-.mount`).
fn parent_mounts(unit: &str) -> Vec<String> {
    let Some(path) = unit.strip_suffix(".mount").filter(|p| *p != "-") else {
        return Vec::new();
    };
    let mut parents = vec!["-.mount".to_string()];
    let mut end = 0;
    while let Some(at) = path[end..].find('-') {
        end += at;
        parents.push(format!("{}.mount", &path[..end]));
        end += 1;
    }
    parents
}

/// The unit a socket, timer or path unit starts.
fn triggered(unit: &str, ord: &Ordering) -> String {
    if ord.triggers.is_empty() {
        let stem = unit.rsplit_once('.').map_or(unit, |(s, _)| s);
        format!("{stem}.service")
    } else {
        ord.triggers.clone()
    }
}

/// The unit's implicit `After=` and `Before=` (its type's and its
/// defaults'), a target's on its wanted units aside.
pub fn implicit(unit: &str, ord: &Ordering) -> (Vec<String>, Vec<String>) {
    let dd = ord.default_dependencies;
    let mut after: Vec<&str> = Vec::new();
    let mut before: Vec<String> = Vec::new();
    let mut dd_before = |names: &[&str]| {
        if dd {
            before.extend(names.iter().map(|n| n.to_string()));
        }
    };
    match kind(unit) {
        "service" => {
            dd_before(&["shutdown.target"]);
            if dd {
                after.extend(["sysinit.target", "basic.target"]);
            }
            if ord.bus_name {
                after.push("dbus.socket");
            }
        }
        k @ ("socket" | "timer" | "path") => {
            let target = match k {
                "socket" => "sockets.target",
                "timer" => "timers.target",
                _ => "paths.target",
            };
            dd_before(&[target, "shutdown.target"]);
            if dd {
                after.push("sysinit.target");
                if ord.on_calendar && k == "timer" {
                    after.extend(["time-set.target", "time-sync.target"]);
                }
            }
            before.push(triggered(unit, ord));
        }
        "mount" if unit != "-.mount" => {
            dd_before(&["local-fs.target", "umount.target"]);
            if dd {
                after.push("local-fs-pre.target");
            }
        }
        "swap" => dd_before(&["swap.target"]),
        _ => {}
    }
    let mut after: Vec<String> = after.into_iter().map(str::to_string).collect();
    after.extend(parent_mounts(unit));
    if matches!(kind(unit), "service" | "socket" | "mount" | "swap") && logs_to_journal(ord) {
        after.push("systemd-journald.socket".into());
    }
    (after, before)
}

/// A list of names without repeats, at most [`MAX_NAMES`].
#[derive(Default)]
struct Names {
    list: Vec<String>,
    seen: HashSet<String>,
}

impl Names {
    fn push(&mut self, name: String) {
        if self.list.len() < MAX_NAMES && !self.seen.contains(&name) {
            self.seen.insert(name.clone());
            self.list.push(name);
        }
    }
}

/// Each unit's `After=` list as systemd's manager holds it (see the
/// module's documentation). `units`: the boot's units and what their
/// files say ([`Ordering::default`] for a unit without a file); `alias`:
/// the unit a name not among them is an alias of, asked at most
/// [`MAX_ALIAS_LOOKUPS`] times.
pub fn after_lists(
    units: &[(String, Ordering)],
    alias: &mut dyn FnMut(&str) -> Option<String>,
) -> HashMap<String, Vec<String>> {
    let known: HashMap<&str, &Ordering> = units.iter().map(|(n, o)| (n.as_str(), o)).collect();
    let mut aliases: HashMap<String, String> = HashMap::new();
    let mut resolve = |name: &str| -> String {
        if known.contains_key(name) {
            return name.to_string();
        }
        if let Some(a) = aliases.get(name) {
            return a.clone();
        }
        let found = (aliases.len() < MAX_ALIAS_LOOKUPS)
            .then(|| alias(name))
            .flatten()
            .filter(|a| known.contains_key(a.as_str()))
            .unwrap_or_else(|| name.to_string());
        aliases.insert(name.to_string(), found.clone());
        found
    };
    let mut after: HashMap<&str, Names> = known.keys().map(|n| (*n, Names::default())).collect();
    for (unit, ord) in units {
        let (imp_after, imp_before) = implicit(unit, ord);
        for name in ord.after.iter().chain(&imp_after) {
            let name = resolve(name);
            if let Some(list) = after.get_mut(unit.as_str()).filter(|_| name != *unit) {
                list.push(name);
            }
        }
        for name in ord.before.iter().chain(&imp_before) {
            let name = resolve(name);
            if let Some(list) = after.get_mut(name.as_str()).filter(|_| name != *unit) {
                list.push(unit.clone());
            }
        }
    }
    for (target, ord) in units {
        if kind(target) != "target" || !ord.default_dependencies {
            continue;
        }
        for wanted in &ord.wants {
            let wanted = resolve(wanted);
            let Some(w) = known.get(wanted.as_str()) else {
                continue;
            };
            let after_target = after
                .get(wanted.as_str())
                .is_some_and(|l| l.seen.contains(target));
            if wanted != *target && w.default_dependencies && !after_target {
                if let Some(list) = after.get_mut(target.as_str()) {
                    list.push(wanted);
                }
            }
        }
    }
    after
        .into_iter()
        .map(|(n, l)| (n.to_string(), l.list))
        .collect()
}
