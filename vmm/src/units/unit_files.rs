//! What a boot's unit files say about its ordering, read from the disk
//! image: the journal says when each unit started, the unit files say
//! what each was ordered after, and the critical chain needs both
//! (`order.rs` turns these into the `After=` lists systemd's manager has).
//!
//! Read as systemd loads a unit: the first file of that name in
//! `/etc/systemd/system`, `/lib/systemd/system`, `/usr/lib/systemd/system`
//! (a template `foo@.service` for an instance `foo@bar.service`), then its
//! drop-ins (`NAME.d/*.conf` in each directory, by name); list settings
//! accumulate and an empty one resets them. Kept: `After=`, `Before=`,
//! what the unit wants (`Wants=`, `Requires=`, `Requisite=`, `BindsTo=`
//! and, for a target, its `.wants`/`.requires` directories),
//! `DefaultDependencies=`, and what adds implicit ordering: a service's
//! `BusName=` or `Type=dbus`, its `StandardOutput=`/`StandardError=`, the
//! unit a socket, timer or path unit triggers (`Service=`, `Unit=`) and a
//! timer's `OnCalendar=`. Units generated at boot (mounts from
//! `/etc/fstab`, devices) have no file. The image is the guest's: each
//! file is read within a size bound, and a unit that cannot be read has
//! no ordering rather than failing the rest.

use std::io::Read;

/// Where unit files are looked up, first found wins.
pub const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
];
/// One unit file or drop-in read at most.
const MAX_FILE_BYTES: u64 = 64 << 10;
/// Drop-ins and `.wants` entries looked at per unit and directory.
const MAX_DIR_ENTRIES: usize = 256;
/// Names kept in one unit's list (`After=`, `Before=`, wants).
pub const MAX_NAMES: usize = 1024;

/// What a unit's files say about its ordering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ordering {
    pub after: Vec<String>,
    pub before: Vec<String>,
    /// `Wants=`, `Requires=`, `Requisite=`, `BindsTo=` (and a target's
    /// `.wants`/`.requires` directories).
    pub wants: Vec<String>,
    pub default_dependencies: bool,
    /// A service with `BusName=` (or `Type=dbus`): ordered after
    /// `dbus.socket`.
    pub bus_name: bool,
    /// `StandardInput=`, `StandardOutput=` and `StandardError=` as set
    /// (empty: the manager's default, the journal for the output).
    pub std_input: String,
    pub std_output: String,
    pub std_error: String,
    /// The unit a socket (`Service=`), timer or path unit (`Unit=`)
    /// starts; empty: the one of its own name.
    pub triggers: String,
    /// A timer with `OnCalendar=`: ordered after `time-set.target` and
    /// `time-sync.target`.
    pub on_calendar: bool,
}

impl Default for Ordering {
    /// A unit with no file of its own: default dependencies, no list.
    fn default() -> Ordering {
        Ordering {
            after: Vec::new(),
            before: Vec::new(),
            wants: Vec::new(),
            default_dependencies: true,
            bus_name: false,
            std_input: String::new(),
            std_output: String::new(),
            std_error: String::new(),
            triggers: String::new(),
            on_calendar: false,
        }
    }
}

/// A unit file's yes or no.
fn boolean(value: &str) -> bool {
    !matches!(value.trim(), "no" | "false" | "0" | "off")
}

/// Adds the names of a list setting's value to `list` (an empty value
/// resets it).
fn extend(list: &mut Vec<String>, value: &str) {
    if value.trim().is_empty() {
        list.clear();
    }
    for name in value.split_whitespace() {
        if list.len() < MAX_NAMES && !list.iter().any(|n| n == name) {
            list.push(name.to_string());
        }
    }
}

/// Applies one setting of `section` to `ord`.
fn apply_setting(ord: &mut Ordering, section: &str, key: &str, value: &str) {
    match (section, key) {
        ("Unit", "After") => extend(&mut ord.after, value),
        ("Unit", "Before") => extend(&mut ord.before, value),
        ("Unit", "Wants" | "Requires" | "Requisite" | "BindsTo") => extend(&mut ord.wants, value),
        ("Unit", "DefaultDependencies") => ord.default_dependencies = boolean(value),
        ("Service", "BusName") => ord.bus_name = !value.trim().is_empty(),
        ("Service", "Type") if value.trim() == "dbus" => ord.bus_name = true,
        ("Service" | "Socket" | "Mount" | "Swap", "StandardInput") => {
            ord.std_input = value.trim().to_string();
        }
        ("Service" | "Socket" | "Mount" | "Swap", "StandardOutput") => {
            ord.std_output = value.trim().to_string();
        }
        ("Service" | "Socket" | "Mount" | "Swap", "StandardError") => {
            ord.std_error = value.trim().to_string();
        }
        ("Socket", "Service") | ("Timer" | "Path", "Unit") => {
            ord.triggers = value.trim().to_string();
        }
        ("Timer", "OnCalendar") => ord.on_calendar = !value.trim().is_empty(),
        _ => {}
    }
}

/// Applies one unit file's text to `ord`.
pub fn apply_unit_text(ord: &mut Ordering, text: &str) {
    let mut section = "";
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name;
            continue;
        }
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            apply_setting(ord, section, key.trim(), value);
        }
    }
}

/// The name a unit's file has: the template for an instance.
fn file_name(unit: &str) -> String {
    match (unit.split_once('@'), unit.rsplit_once('.')) {
        (Some((prefix, _)), Some((_, suffix))) => format!("{prefix}@.{suffix}"),
        _ => unit.to_string(),
    }
}

fn read_small(fs: &ext4_view::Ext4, path: &str) -> Option<String> {
    let len = fs.metadata(path).ok()?.len();
    if len > MAX_FILE_BYTES {
        return None;
    }
    let mut text = String::new();
    fs.open(path)
        .ok()?
        .take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn names_in(fs: &ext4_view::Ext4, dir: &str) -> Vec<String> {
    let Ok(entries) = fs.read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().as_str().ok().map(str::to_string))
        .filter(|n| n != "." && n != "..")
        .take(MAX_DIR_ENTRIES)
        .collect();
    names.sort();
    names
}

/// The unit's ordering from the image; `None` when no file of it is there.
pub fn ordering(fs: &ext4_view::Ext4, unit: &str) -> Option<Ordering> {
    let file = file_name(unit);
    let mut ord = Ordering {
        default_dependencies: true,
        ..Ordering::default()
    };
    let main = UNIT_DIRS
        .iter()
        .find_map(|dir| read_small(fs, &format!("{dir}/{file}")))?;
    apply_unit_text(&mut ord, &main);
    for dir in UNIT_DIRS {
        for drop_dir in [format!("{dir}/{file}.d"), format!("{dir}/{unit}.d")] {
            for name in names_in(fs, &drop_dir) {
                if let Some(text) = name
                    .ends_with(".conf")
                    .then(|| read_small(fs, &format!("{drop_dir}/{name}")))
                    .flatten()
                {
                    apply_unit_text(&mut ord, &text);
                }
            }
            if file == unit {
                break;
            }
        }
        if unit.ends_with(".target") {
            for kind in ["wants", "requires"] {
                for name in names_in(fs, &format!("{dir}/{unit}.{kind}")) {
                    extend(&mut ord.wants, &name);
                }
            }
        }
    }
    Some(ord)
}

/// The unit `name` is an alias of (a unit file that is a symbolic link to
/// another of a different name, such as `runlevel5.target` to
/// `graphical.target`), as systemd loads it: `None` when it is no alias.
pub fn alias_of(fs: &ext4_view::Ext4, name: &str) -> Option<String> {
    let path = UNIT_DIRS.iter().find_map(|dir| {
        let path = format!("{dir}/{name}");
        fs.symlink_metadata(path.as_str()).ok().map(|m| (path, m))
    })?;
    if !path.1.is_symlink() {
        return None;
    }
    let target = fs.read_link(path.0.as_str()).ok()?;
    let target = target.to_str().ok()?;
    let base = target.rsplit('/').next()?;
    (base != name && base.contains('.') && !target.starts_with("/dev/")).then(|| base.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_accumulate_and_reset_by_section() {
        let mut ord = Ordering::default();
        apply_unit_text(
            &mut ord,
            "[Unit]\nAfter=a.service b.target\n# After=c.service\nAfter=c.service a.service\nBefore=z.target\n[Service]\nAfter=not-unit.service\nType=dbus\nStandardOutput=tty\n",
        );
        assert_eq!(ord.after, ["a.service", "b.target", "c.service"]);
        assert_eq!(ord.before, ["z.target"]);
        assert!(ord.bus_name);
        assert_eq!(ord.std_output, "tty");
        apply_unit_text(
            &mut ord,
            "[Unit]\nAfter=\nAfter=d.mount\nDefaultDependencies=no\nRequires=r.service\n[Timer]\nOnCalendar=daily\nUnit=other.service\n",
        );
        assert_eq!(ord.after, ["d.mount"]);
        assert_eq!(ord.wants, ["r.service"]);
        assert!(!ord.default_dependencies);
        assert!(ord.on_calendar);
        assert_eq!(ord.triggers, "other.service");
        // A [Socket]'s Service= is its trigger, a [Unit]'s is nothing.
        let mut sock = Ordering::default();
        apply_unit_text(
            &mut sock,
            "[Unit]\nService=x.service\n[Socket]\nService=y.service\n",
        );
        assert_eq!(sock.triggers, "y.service");
    }

    #[test]
    fn instances_read_their_template() {
        assert_eq!(file_name("getty@tty1.service"), "getty@.service");
        assert_eq!(file_name("a.service"), "a.service");
    }
}
