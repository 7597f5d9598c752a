//! The `After=` ordering of the units a boot ran, read from the unit files
//! in the disk image: the journal says when each unit started, the unit
//! files say what each waited for, and the critical chain needs both.
//!
//! Read as systemd loads a unit: the first file of that name in
//! `/etc/systemd/system`, `/lib/systemd/system`, `/usr/lib/systemd/system`
//! (a template `foo@.service` for an instance `foo@bar.service`), then its
//! drop-ins (`NAME.d/*.conf` in each directory, by name); `After=` lines of
//! the `[Unit]` section accumulate and an empty one resets them. Unless
//! `DefaultDependencies=no`, a service is also ordered after
//! `sysinit.target` and `basic.target`, a socket, timer or path unit after
//! `sysinit.target`, and a target after the units it wants or requires
//! (its `Wants=`/`Requires=` and its `.wants`/`.requires` directories).
//! Units generated at boot (mounts from `/etc/fstab`, devices) have no
//! file and so no `After=` here. The image is the guest's: each file is
//! read within a size bound, and a unit that cannot be read has no
//! ordering rather than failing the rest.

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
/// Names kept in one unit's `After=`.
const MAX_AFTER: usize = 1024;

/// What a unit's files say about its ordering.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ordering {
    pub after: Vec<String>,
    pub wants: Vec<String>,
    pub default_dependencies: bool,
}

/// Applies one unit file's text to `ord`.
pub fn apply_unit_text(ord: &mut Ordering, text: &str) {
    let mut in_unit = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_unit = line == "[Unit]";
            continue;
        }
        if !in_unit || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let list = match key.trim() {
            "After" => &mut ord.after,
            "Wants" | "Requires" | "Requisite" | "BindsTo" => &mut ord.wants,
            "DefaultDependencies" => {
                ord.default_dependencies = !matches!(value.trim(), "no" | "false" | "0" | "off");
                continue;
            }
            _ => continue,
        };
        if value.trim().is_empty() {
            list.clear();
        }
        for name in value.split_whitespace() {
            if list.len() < MAX_AFTER && !list.iter().any(|n| n == name) {
                list.push(name.to_string());
            }
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
                ord.wants
                    .extend(names_in(fs, &format!("{dir}/{unit}.{kind}")));
            }
        }
    }
    Some(ord)
}

/// The `After=` systemd would use: the files' own, and the default
/// dependencies of the unit's type.
pub fn effective_after(unit: &str, ord: &Ordering) -> Vec<String> {
    let mut after = ord.after.clone();
    if ord.default_dependencies {
        let implicit: Vec<String> = match unit.rsplit_once('.').map(|(_, t)| t) {
            Some("service") => vec!["sysinit.target".into(), "basic.target".into()],
            Some("socket" | "timer" | "path") => vec!["sysinit.target".into()],
            Some("target") => ord.wants.clone(),
            _ => Vec::new(),
        };
        for name in implicit {
            if name != unit && after.len() < MAX_AFTER && !after.contains(&name) {
                after.push(name);
            }
        }
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_lines_accumulate_and_reset() {
        let mut ord = Ordering {
            default_dependencies: true,
            ..Ordering::default()
        };
        apply_unit_text(
            &mut ord,
            "[Unit]\nAfter=a.service b.target\n# After=c.service\nAfter=c.service a.service\n[Service]\nAfter=not-unit.service\n",
        );
        assert_eq!(ord.after, ["a.service", "b.target", "c.service"]);
        apply_unit_text(
            &mut ord,
            "[Unit]\nAfter=\nAfter=d.mount\nDefaultDependencies=no\n",
        );
        assert_eq!(ord.after, ["d.mount"]);
        assert!(!ord.default_dependencies);
    }

    #[test]
    fn default_dependencies_by_type() {
        let ord = Ordering {
            after: vec!["x.service".into()],
            wants: vec!["w.service".into(), "t.target".into()],
            default_dependencies: true,
        };
        assert_eq!(
            effective_after("a.service", &ord),
            ["x.service", "sysinit.target", "basic.target"]
        );
        assert_eq!(
            effective_after("m.target", &ord),
            ["x.service", "w.service", "t.target"]
        );
        assert_eq!(effective_after("a.mount", &ord), ["x.service"]);
        let no = Ordering {
            default_dependencies: false,
            ..ord
        };
        assert_eq!(effective_after("a.service", &no), ["x.service"]);
    }

    #[test]
    fn instances_read_their_template() {
        assert_eq!(file_name("getty@tty1.service"), "getty@.service");
        assert_eq!(file_name("a.service"), "a.service");
    }
}
