//! The userspace rules' detectors: findings from a systemd guest's units,
//! its critical chain and its initramfs stage (the timeline's `units`
//! object, docs/timeline-schema.md). Each names the time it accounts for
//! in the `userspace` phase.

use bootscope_model::units::UnitsDoc;

use crate::evaluate::{human_ns, thousands, Found};
use crate::evidence::Evidence;

/// Units that only wait (for devices, for the network): their own rule,
/// left out of the slow-chain rule.
pub const WAIT_UNITS: &[&str] = &[
    "systemd-udev-settle.service",
    "systemd-networkd-wait-online.service",
    "NetworkManager-wait-online.service",
    "ifupdown-wait-online.service",
];

/// How many of the critical chain's slowest units are findings.
pub const SLOWEST_ON_CHAIN: usize = 5;

/// Serial ports' console names on the kernel command line.
const SERIAL_CONSOLES: &[&str] = &["console=ttyS", "console=ttyAMA", "console=hvc"];

/// Guest functions that write the console's bytes to the UART.
const SERIAL_FUNCTIONS: &[&str] = &[
    "io_serial_out",
    "io_serial_in",
    "serial8250_console_putchar",
    "wait_for_xmitr",
];

/// What well-known units do, for the risk of masking them.
const WHAT_UNITS_DO: &[(&str, &str)] = &[
    ("systemd-udev-settle.service", "waits until udev has handled every device event (deprecated; only units that still ask for it need it)"),
    ("systemd-networkd-wait-online.service", "waits until systemd-networkd has configured the network"),
    ("NetworkManager-wait-online.service", "waits until NetworkManager has configured the network"),
    ("ifupdown-wait-online.service", "waits until ifupdown has brought the interfaces up"),
    ("networking.service", "brings up the interfaces of /etc/network/interfaces"),
    ("systemd-journal-flush.service", "moves the journal from /run to /var/log/journal (without it this boot's entries stay in memory)"),
    ("e2scrub_reap.service", "removes stale e2scrub snapshots of LVM volumes"),
    ("systemd-update-utmp.service", "records the boot in utmp/wtmp (last, who)"),
    ("systemd-update-utmp-runlevel.service", "records the runlevel change in utmp/wtmp"),
    ("modprobe@drm.service", "loads the graphics drivers' core early (a VM without a display has none to drive)"),
    ("modprobe@efi_pstore.service", "loads efi_pstore early, to keep crash logs in EFI variables (none without EFI firmware)"),
    ("modprobe@dm_mod.service", "loads device-mapper early (LVM, LUKS; the kernel loads it on demand too)"),
    ("modprobe@fuse.service", "loads fuse early (file systems in userspace; loaded on demand too)"),
    ("modprobe@loop.service", "loads the loop device driver early (loaded on demand too)"),
    ("sys-kernel-debug.mount", "mounts debugfs on /sys/kernel/debug (for debugging)"),
    ("sys-kernel-tracing.mount", "mounts tracefs on /sys/kernel/tracing (for tracing)"),
    ("dev-mqueue.mount", "mounts the POSIX message queue file system on /dev/mqueue (to list queues; mq_open() works without it)"),
    ("dev-hugepages.mount", "mounts hugetlbfs on /dev/hugepages (for programs that map huge pages through files)"),
    ("modprobe@configfs.service", "loads configfs early (kernel objects configured from userspace: NVMe-oF or iSCSI targets, USB gadgets)"),
    ("sys-kernel-config.mount", "mounts configfs on /sys/kernel/config (NVMe-oF or iSCSI targets, USB gadgets)"),
    ("sys-fs-fuse-connections.mount", "mounts fusectl on /sys/fs/fuse/connections (to abort stuck FUSE mounts)"),
    ("systemd-timesyncd.service", "synchronizes the clock over NTP"),
    ("systemd-random-seed.service", "loads and saves the random seed across boots"),
    ("systemd-fsck-root.service", "checks the root file system"),
    ("systemd-remount-fs.service", "remounts the root file system with /etc/fstab's options (read-write)"),
    ("systemd-tmpfiles-setup.service", "creates and cleans the files of tmpfiles.d"),
    ("systemd-tmpfiles-setup-dev.service", "creates the static device nodes in /dev (for modules not loaded yet) before udev starts"),
    ("systemd-udevd.service", "manages devices: loads their drivers, names them and tells systemd they are there"),
    ("systemd-sysusers.service", "creates the system users of sysusers.d"),
    ("systemd-logind.service", "manages user logins and seats"),
    ("dbus.service", "the system message bus other services talk through"),
    ("cron.service", "runs scheduled jobs"),
    ("ssh.service", "the SSH server"),
    ("apparmor.service", "loads the AppArmor profiles"),
    ("keyboard-setup.service", "sets up the console keyboard layout"),
    ("console-setup.service", "sets up the console font and keyboard"),
];

/// Units a VM rarely needs, by name; also every getty on a virtual
/// terminal and every timer ([`rarely_needed`]). Not
/// `systemd-journal-flush.service`: without it the boot's journal stays in
/// memory and no units are read from the image.
const RARELY_NEEDED: &[&str] = &[
    "e2scrub_reap.service",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    "modprobe@drm.service",
    "modprobe@efi_pstore.service",
    "modprobe@dm_mod.service",
    "modprobe@fuse.service",
    "modprobe@loop.service",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "dev-mqueue.mount",
    "dev-hugepages.mount",
    "modprobe@configfs.service",
    "sys-kernel-config.mount",
    "sys-fs-fuse-connections.mount",
];

/// [`rarely_needed`]'s units, in words (docs/advise.md).
pub const RARELY_NEEDED_WORDS: &str = "`getty@tty*.service` (a login prompt on a virtual terminal), `e2scrub_reap.service`, `systemd-update-utmp.service`, `systemd-update-utmp-runlevel.service`, the early module loads `modprobe@drm`, `@efi_pstore`, `@dm_mod`, `@fuse`, `@loop`, `@configfs`, the debugfs, tracefs, configfs, fusectl, mqueue and hugetlbfs mounts, timers (`*.timer`)";

/// Whether a VM rarely needs `unit`: a login prompt on a virtual terminal
/// (a VM without a display shows none), a timer started at boot, or one
/// of [`RARELY_NEEDED`].
pub fn rarely_needed(unit: &str) -> bool {
    RARELY_NEEDED.contains(&unit)
        || (unit.starts_with("getty@tty") && unit.ends_with(".service"))
        || (unit.ends_with(".timer") && unit.len() > ".timer".len())
}

/// What `unit` does, in words, for a finding's risk; for several units
/// (separated by spaces), each one's.
pub fn what_it_does(unit: &str) -> String {
    let names: Vec<&str> = unit.split_whitespace().collect();
    if names.len() > 1 {
        return names
            .iter()
            .map(|n| format!("{n} {}", what_one_does(n)))
            .collect::<Vec<_>>()
            .join("; ");
    }
    what_one_does(unit)
}

fn what_one_does(unit: &str) -> String {
    if let Some((_, what)) = WHAT_UNITS_DO.iter().find(|(n, _)| *n == unit) {
        return (*what).to_string();
    }
    if unit.starts_with("getty@tty") {
        return "shows a login prompt on a virtual terminal (a VM without a display shows none)"
            .into();
    }
    if unit.starts_with("serial-getty@") {
        return "shows a login prompt on the serial console".into();
    }
    if unit.ends_with(".timer") {
        return "is a timer that starts its service later".into();
    }
    format!("does what its unit file describes (systemctl cat {unit})")
}

/// The units of a boot, when they are on its timeline.
fn units(ev: &Evidence) -> Option<&UnitsDoc> {
    ev.units.as_ref().filter(|u| u.error.is_none())
}

/// `ns` as a share of the userspace phase, in words.
fn of_userspace(ev: &Evidence, ns: u64) -> String {
    match ev.phase_ns("userspace").filter(|u| *u > 0) {
        Some(user) => format!(
            "{} of the userspace phase's {} ({:.0} %)",
            human_ns(ns),
            human_ns(user),
            ns as f64 * 100.0 / user as f64
        ),
        None => format!("{} of the userspace phase", human_ns(ns)),
    }
}

/// Units on the critical chain that cannot be masked, or should not be:
/// the target, the root mount, the journal, the device manager (devices
/// reach systemd through systemd-udevd: without it a unit bound to the
/// root's device waits for it until its job times out), targets and the
/// like, and the wait units (their own rule's).
fn unmaskable(name: &str, target: &str) -> bool {
    name == target
        || name == "-.mount"
        || name == "systemd-journald.service"
        || name == "systemd-udevd.service"
        || [".target", ".device", ".slice", ".scope", ".socket"]
            .iter()
            .any(|s| name.ends_with(s))
        || WAIT_UNITS.contains(&name)
}

/// The slowest units on the critical chain (at least `min_ns` each), one
/// finding each, with the unit that waited for it. A link that became
/// active after the unit above it cannot have held it up (an `After=`
/// read the wrong way round, such as a unit ordered after a target's
/// alias): it is no finding.
pub(crate) fn slow_chain_units(ev: &Evidence, min_ns: u64) -> Vec<Found> {
    let Some(u) = units(ev) else {
        return Vec::new();
    };
    let chain = &u.critical_chain;
    let held_up = |i: usize| {
        i.checked_sub(1)
            .and_then(|w| chain.get(w))
            .is_none_or(|w| chain[i].active_ns <= w.active_ns)
    };
    let mut slow: Vec<(usize, &bootscope_model::units::ChainLink)> = chain
        .iter()
        .enumerate()
        .filter(|(i, l)| {
            l.duration_ns >= min_ns && !unmaskable(&l.name, &u.chain_target) && held_up(*i)
        })
        .collect();
    slow.sort_by_key(|(_, l)| std::cmp::Reverse(l.duration_ns));
    slow.truncate(SLOWEST_ON_CHAIN);
    slow.into_iter()
        .map(|(i, l)| {
            let waiter = i
                .checked_sub(1)
                .and_then(|w| chain.get(w))
                .map_or_else(|| u.chain_target.clone(), |w| w.name.clone());
            Found {
                subject: Some(l.name.clone()),
                evidence: vec![
                    format!(
                        "{} is on the critical chain to {}: +{} to start, {} waited for it; it accounts for {}",
                        l.name,
                        u.chain_target,
                        human_ns(l.duration_ns),
                        waiter,
                        of_userspace(ev, l.duration_ns)
                    ),
                    format!("what it does: {}", what_it_does(&l.name)),
                ],
                accounts_ns: Some(l.duration_ns),
                phase: "userspace",
            }
        })
        .collect()
}

/// Units that only wait (`names`) and ran in this boot, one finding each.
pub(crate) fn wait_units(ev: &Evidence, names: &[&str]) -> Vec<Found> {
    let Some(u) = units(ev) else {
        return Vec::new();
    };
    u.units
        .iter()
        .filter(|unit| names.contains(&unit.name.as_str()) && unit.duration_ns > 0)
        .map(|unit| {
            let on_chain = u.critical_chain.iter().any(|l| l.name == unit.name);
            Found {
                subject: Some(unit.name.clone()),
                evidence: vec![format!(
                    "{} ran for {}{}: it {}; it accounts for {}",
                    unit.name,
                    human_ns(unit.duration_ns),
                    if on_chain {
                        format!(", on the critical chain to {}", u.chain_target)
                    } else {
                        String::new()
                    },
                    what_it_does(&unit.name),
                    of_userspace(ev, unit.duration_ns)
                )],
                accounts_ns: Some(unit.duration_ns),
                phase: "userspace",
            }
        })
        .collect()
}

/// The units a VM rarely needs ([`rarely_needed`]) that ran in this boot:
/// one finding, its subject their names (by start time), the time it
/// accounts for their start-up times summed.
pub(crate) fn rarely_needed_units(ev: &Evidence) -> Vec<Found> {
    let Some(u) = units(ev) else {
        return Vec::new();
    };
    let ran: Vec<&bootscope_model::units::Unit> = u
        .units
        .iter()
        .filter(|unit| rarely_needed(&unit.name))
        .collect();
    if ran.is_empty() {
        return Vec::new();
    }
    let total: u64 = ran.iter().map(|unit| unit.duration_ns).sum();
    let each: Vec<String> = ran
        .iter()
        .map(|unit| format!("{} {}", unit.name, human_ns(unit.duration_ns)))
        .collect();
    let names: Vec<&str> = ran.iter().map(|unit| unit.name.as_str()).collect();
    vec![Found {
        subject: Some(names.join(" ")),
        evidence: vec![
            format!(
                "{} units a VM rarely needs ran in this boot: {}",
                ran.len(),
                each.join(", ")
            ),
            format!(
                "together {} of start-up (they overlap with other units: at most that is saved); {}",
                human_ns(total),
                of_userspace(ev, total)
            ),
        ],
        accounts_ns: (total > 0).then_some(total),
        phase: "userspace",
    }]
}

/// systemd's status lines written to a serial console: the console is a
/// UART (`console=ttyS0`) and nothing keeps systemd quiet.
pub(crate) fn status_on_console(ev: &Evidence) -> Vec<Found> {
    let Some(u) = units(ev) else {
        return Vec::new();
    };
    let words = ev.cmdline_words();
    let Some(console) = words
        .iter()
        .rev()
        .find(|w| w.starts_with("console="))
        .filter(|w| SERIAL_CONSOLES.iter().any(|s| w.starts_with(s)))
    else {
        return Vec::new();
    };
    let mut evidence = vec![format!(
        "systemd writes a status line per unit it starts to the console ({console}): {} units in this boot, each line a port exit per byte",
        thousands(u.units.len() as u64)
    )];
    // The userspace console's exits, where the profile has exit sites.
    let sites = ev.exits.as_ref().and_then(|e| e.sites.as_ref());
    let (count, ns) = sites
        .into_iter()
        .flatten()
        .filter(|s| {
            s.phase == "userspace"
                && s.function
                    .as_deref()
                    .is_some_and(|f| SERIAL_FUNCTIONS.contains(&f))
        })
        .fold((0, 0), |(c, n), s| (c + s.count, n + s.latency_ns));
    let accounts = (ns > 0).then_some(ns);
    match accounts {
        Some(ns) => evidence.push(format!(
            "{} serial port exits in the userspace phase, about {} by exit count x latency: {}",
            thousands(count),
            human_ns(ns),
            of_userspace(ev, ns)
        )),
        None => evidence.push(
            "no time attributed: a profile with exit sites (run --output P.json --exit-sites) counts the userspace console's port exits".into(),
        ),
    }
    vec![Found {
        subject: None,
        evidence,
        accounts_ns: accounts,
        phase: "userspace",
    }]
}

/// Targets a workload unit is commonly ordered after (`After=`) to run at
/// the end of the boot.
pub const DEFAULT_TARGETS: &[&str] = &["multi-user.target", "graphical.target"];

/// The workload (the chain's target, a service found by the marker)
/// waits on the chain for a default target ([`DEFAULT_TARGETS`]), which
/// itself waited at least `min_ns` after `basic.target` for the units it
/// pulls in (logins, gettys, cron...). One finding, its subject the
/// workload; the time it accounts for is that wait on the chain, an upper
/// bound of the saving: the workload still needs what it requires itself.
pub(crate) fn workload_behind_target(ev: &Evidence, min_ns: u64) -> Vec<Found> {
    let Some(u) = units(ev) else {
        return Vec::new();
    };
    let workload = u.chain_target.as_str();
    if workload.ends_with(".target") || workload.is_empty() {
        return Vec::new();
    }
    let chain = &u.critical_chain;
    let link = |name: &str| chain.iter().find(|l| l.name == name);
    let Some(target) = chain
        .iter()
        .find(|l| DEFAULT_TARGETS.contains(&l.name.as_str()))
    else {
        return Vec::new();
    };
    let Some(basic) = link("basic.target") else {
        return Vec::new();
    };
    let wait = target.active_ns.saturating_sub(basic.active_ns);
    if wait < min_ns {
        return Vec::new();
    }
    // The units the target pulled in: started after basic.target, done
    // by the time the target was reached (or still starting then).
    let mut pulled: Vec<&bootscope_model::units::Unit> = u
        .units
        .iter()
        .filter(|x| {
            x.name != workload
                && x.name != target.name
                && !unmaskable(&x.name, workload)
                && x.start_ns >= basic.active_ns
                && x.start_ns <= target.active_ns
        })
        .collect();
    pulled.sort_by_key(|x| std::cmp::Reverse(x.duration_ns));
    let slowest: Vec<String> = pulled
        .iter()
        .take(SLOWEST_ON_CHAIN)
        .map(|x| format!("{} {}", x.name, human_ns(x.duration_ns)))
        .collect();
    let mut evidence = vec![format!(
        "{workload} is ordered after {}: on the critical chain it waited for it, and {} waited {} after basic.target; it accounts for {}",
        target.name,
        target.name,
        human_ns(wait),
        of_userspace(ev, wait)
    )];
    if !pulled.is_empty() {
        evidence.push(format!(
            "{} units started in that time{}: {}",
            pulled.len(),
            if pulled.len() > slowest.len() {
                ", the slowest"
            } else {
                ""
            },
            slowest.join(", ")
        ));
    }
    vec![Found {
        subject: Some(workload.to_string()),
        evidence,
        accounts_ns: Some(wait),
        phase: "userspace",
    }]
}

/// The initramfs stage, when it took at least `min_ns`.
pub(crate) fn initramfs_stage(ev: &Evidence, min_ns: u64) -> Vec<Found> {
    let Some(s) = units(ev).and_then(|u| u.initramfs.as_ref()) else {
        return Vec::new();
    };
    if s.duration_ns < min_ns {
        return Vec::new();
    }
    let mut evidence = vec![format!(
        "the initramfs ran from the kernel's \"Run /init\" to {} ({} messages); it accounts for {}",
        s.end,
        s.messages,
        of_userspace(ev, s.duration_ns)
    )];
    let mut did = Vec::new();
    if !s.drivers.is_empty() {
        did.push(format!("drivers that logged: {}", s.drivers.join(", ")));
    }
    if !s.root_device.is_empty() {
        did.push(format!("root on {}", s.root_device));
    }
    if let Some(m) = s.step("mount") {
        did.push(format!(
            "root mounted {} after Run /init",
            human_ns(m.t_ns.saturating_sub(s.start_ns))
        ));
    }
    if !did.is_empty() {
        evidence.push(did.join("; "));
    }
    vec![Found {
        subject: None,
        evidence,
        accounts_ns: Some(s.duration_ns),
        phase: "userspace",
    }]
}

/// fsck of the root file system: `systemd-fsck-root.service`'s time, or
/// the initramfs's fsck line.
pub(crate) fn root_fsck(ev: &Evidence) -> Vec<Found> {
    let Some(u) = units(ev) else {
        return Vec::new();
    };
    if let Some(unit) = u
        .unit("systemd-fsck-root.service")
        .filter(|x| x.duration_ns > 0)
    {
        return vec![Found {
            subject: Some(unit.name.clone()),
            evidence: vec![format!(
                "systemd-fsck-root.service checked the root file system for {}: {}",
                human_ns(unit.duration_ns),
                of_userspace(ev, unit.duration_ns)
            )],
            accounts_ns: Some(unit.duration_ns),
            phase: "userspace",
        }];
    }
    let Some(s) = u.initramfs.as_ref().filter(|s| !s.fsck.is_empty()) else {
        return Vec::new();
    };
    vec![Found {
        subject: None,
        evidence: vec![format!(
            "the initramfs checked the root file system: {} (no time attributed: the log has its line, not its span)",
            s.fsck
        )],
        accounts_ns: None,
        phase: "userspace",
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::{advise, ConcreteChange};
    use bootscope_model::timeline_initramfs::InitramfsStage;
    use bootscope_model::units::{ChainLink, Unit};

    const MS: u64 = 1_000_000;

    fn unit(name: &str, start_ms: u64, ms: u64) -> Unit {
        Unit {
            name: name.into(),
            start_ns: start_ms * MS,
            active_ns: Some((start_ms + ms) * MS),
            duration_ns: ms * MS,
            state: "active".into(),
            ..Unit::default()
        }
    }

    fn link(name: &str, active_ms: u64, ms: u64) -> ChainLink {
        ChainLink {
            name: name.into(),
            active_ns: active_ms * MS,
            duration_ns: ms * MS,
        }
    }

    /// A Debian boot: an initramfs, udev settle and a slow service on the
    /// chain, status lines on ttyS0.
    fn evidence() -> Evidence {
        let units = UnitsDoc {
            units: vec![
                unit("systemd-fsck-root.service", 1_100, 80),
                unit("systemd-udev-settle.service", 1_200, 700),
                unit("e2scrub_reap.service", 1_300, 400),
                unit("getty@tty1.service", 2_000, 150),
                unit("serial-getty@ttyS0.service", 2_000, 150),
                unit("apt-daily.timer", 2_100, 5),
                unit("systemd-sysctl.service", 2_100, 50),
                unit("multi-user.target", 3_000, 0),
                unit("bootscope-workload.service", 3_000, 10),
            ],
            chain_target: "bootscope-workload.service".into(),
            critical_chain: vec![
                link("bootscope-workload.service", 3_010, 10),
                link("multi-user.target", 3_000, 0),
                link("e2scrub_reap.service", 1_700, 400),
                link("systemd-udev-settle.service", 1_900, 700),
                link("basic.target", 1_100, 0),
            ],
            initramfs: Some(InitramfsStage {
                start_ns: 500 * MS,
                end_ns: 1_000 * MS,
                duration_ns: 500 * MS,
                end: "systemd started".into(),
                drivers: vec!["virtio_blk".into()],
                root_device: "vda1".into(),
                ..InitramfsStage::default()
            }),
            ..UnitsDoc::default()
        };
        Evidence {
            cmdline: Some("console=ttyS0 root=/dev/vda1".into()),
            phases: vec![
                ("kernel".into(), 500 * MS),
                ("userspace".into(), 2_600 * MS),
            ],
            units: Some(units),
            // A timeline: bootscope's run, with its virtio-rng.
            vmm: crate::evidence::Vmm::Bootscope,
            ..Evidence::default()
        }
    }

    /// A real boot: the timeline of a Debian 12 image made with mmdebstrap
    /// (its own workload, units from its journal) booted with `run --disk`
    /// in the lab, not quiet (tests/fixtures/README.md).
    fn lab_boot() -> Evidence {
        Evidence::read(&[std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/journal-debian12-own.timeline.json"
        ))])
        .unwrap()
    }

    #[test]
    fn a_real_debian_boot_has_userspace_findings_with_units_and_seconds() {
        let ev = lab_boot();
        let advice = advise(&ev);
        let user: Vec<_> = advice
            .findings
            .iter()
            .filter(|f| f.phase == "userspace")
            .collect();
        let with_units: Vec<_> = user
            .iter()
            .filter(|f| {
                f.rule == "slow-unit-on-chain"
                    || f.rule != "workload-behind-default-target"
                        && f.subject
                            .as_deref()
                            .is_some_and(|s| s.ends_with(".service") && !s.contains(' '))
            })
            .collect();
        let listed: Vec<_> = user.iter().map(|f| (f.rule, &f.subject)).collect();
        // Each with its time: the initramfs and the units (the status
        // lines are timed by a profile's exit sites, not given here).
        assert!(
            user.iter().filter(|f| f.accounts_ns.is_some()).count() >= 3,
            "{listed:?}"
        );
        assert!(with_units.len() >= 2, "{listed:?}");
        let chain = &ev.units.as_ref().unwrap().critical_chain;
        for f in &with_units {
            assert_eq!(f.rule, "slow-unit-on-chain");
            let unit = f.subject.as_deref().unwrap();
            let link = chain.iter().find(|l| l.name == unit).unwrap();
            assert_eq!(f.accounts_ns, Some(link.duration_ns));
            assert!(link.duration_ns >= 20 * MS, "{unit}");
            assert_eq!(
                f.fixes[0].change,
                ConcreteChange::KernelArgs(format!("systemd.mask={unit}"))
            );
        }
        // systemd-update-utmp-runlevel.service is ordered after the
        // default target (After=runlevel5.target, its alias) and became
        // active after it: on the chain as read, but it held nothing up.
        assert!(
            !with_units
                .iter()
                .any(|f| f.subject.as_deref() == Some("systemd-update-utmp-runlevel.service")),
            "{with_units:?}"
        );
        // systemd-udevd is on that chain (1.62 s, slower than all but
        // logind), but devices reach systemd through it: no unit to mask.
        assert!(chain.iter().any(|l| l.name == "systemd-udevd.service"));
        assert!(
            !user
                .iter()
                .any(|f| f.subject.as_deref() == Some("systemd-udevd.service")),
            "{listed:?}"
        );
        // Not quiet on ttyS0: systemd's status lines, a fix --prove tries.
        let status = user
            .iter()
            .find(|f| f.rule == "systemd-status-on-serial")
            .unwrap();
        assert_eq!(
            status.fixes[0].change,
            ConcreteChange::KernelArgs("systemd.show_status=false".into())
        );
        assert_eq!(status.fixes[0].triable, crate::evaluate::Triable::Yes);
        // Debian's initramfs-tools found the disk and mounted the root.
        let stage = user.iter().find(|f| f.rule == "initramfs-stage").unwrap();
        assert!(stage.accounts_ns.unwrap() > 1_000 * MS);
        assert!(
            stage.evidence.iter().any(|e| e.contains("virtio_blk")),
            "{:?}",
            stage.evidence
        );
    }

    #[test]
    fn a_slow_unit_on_the_chain_is_masked_and_says_what_it_does() {
        let ev = evidence();
        let found = slow_chain_units(&ev, 20 * MS);
        // The workload (the target), targets and the wait unit are left out.
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.subject.as_deref(), Some("e2scrub_reap.service"));
        assert_eq!(f.accounts_ns, Some(400 * MS));
        assert!(
            f.evidence[0].contains("multi-user.target waited for it"),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence[0].contains("of the userspace phase's"),
            "{:?}",
            f.evidence
        );
        let advice = advise(&ev);
        let finding = advice
            .findings
            .iter()
            .find(|f| f.rule == "slow-unit-on-chain")
            .unwrap();
        assert_eq!(
            finding.fixes[0].change,
            ConcreteChange::KernelArgs("systemd.mask=e2scrub_reap.service".into())
        );
        assert!(
            finding.fixes[0].gives_up.contains("LVM"),
            "{}",
            finding.fixes[0].gives_up
        );
        assert_eq!(finding.fixes[0].triable, crate::evaluate::Triable::Yes);
    }

    #[test]
    fn a_unit_with_no_known_description_reads_as_a_sentence() {
        // Every description follows "it" in a fix's cost and "{unit}" in a
        // list: a verb phrase, for known and unknown units alike.
        let unknown = what_it_does("local-thing.service");
        assert_eq!(
            unknown,
            "does what its unit file describes (systemctl cat local-thing.service)"
        );
        for unit in [
            "getty@tty1.service",
            "serial-getty@ttyS0.service",
            "fstrim.timer",
        ] {
            let what = what_it_does(unit);
            assert!(
                what.starts_with("shows ") || what.starts_with("is "),
                "{unit}: {what}"
            );
        }
        let two = what_it_does("fstrim.timer x.service");
        assert_eq!(
            two,
            "fstrim.timer is a timer that starts its service later; x.service does what its unit file describes (systemctl cat x.service)"
        );
    }

    #[test]
    fn units_a_vm_rarely_needs_are_masked_together() {
        let ev = evidence();
        let found = rarely_needed_units(&ev);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        // The serial console's getty stays: it is the VM's login prompt.
        assert_eq!(
            f.subject.as_deref(),
            Some("e2scrub_reap.service getty@tty1.service apt-daily.timer")
        );
        assert_eq!(f.accounts_ns, Some(555 * MS));
        assert!(
            f.evidence[0].starts_with(
                "3 units a VM rarely needs ran in this boot: e2scrub_reap.service 400"
            ),
            "{:?}",
            f.evidence
        );
        let advice = advise(&ev);
        let finding = advice
            .findings
            .iter()
            .find(|f| f.rule == "rarely-needed-units")
            .unwrap();
        assert_eq!(
            finding.fixes[0].change,
            ConcreteChange::KernelArgs(
                "systemd.mask=e2scrub_reap.service systemd.mask=getty@tty1.service systemd.mask=apt-daily.timer".into()
            )
        );
        assert!(
            finding.fixes[0]
                .gives_up
                .contains("getty@tty1.service shows a login prompt on a virtual terminal"),
            "{}",
            finding.fixes[0].gives_up
        );
        assert_eq!(
            finding.fixes[1].change,
            ConcreteChange::Advice("mask them in the image for good: systemctl --root=MOUNTED-IMAGE mask e2scrub_reap.service getty@tty1.service apt-daily.timer".into())
        );
        // A word already on the command line is not added again; all of
        // them there, no fix to try.
        let mut masked = ev.clone();
        masked.cmdline = Some("console=ttyS0 systemd.mask=getty@tty1.service".into());
        let advice = advise(&masked);
        let finding = advice
            .findings
            .iter()
            .find(|f| f.rule == "rarely-needed-units")
            .unwrap();
        assert_eq!(
            finding.fixes[0].change,
            ConcreteChange::KernelArgs(
                "systemd.mask=e2scrub_reap.service systemd.mask=apt-daily.timer".into()
            )
        );
        let mut none = ev;
        none.units
            .as_mut()
            .unwrap()
            .units
            .retain(|u| !rarely_needed(&u.name));
        assert!(rarely_needed_units(&none).is_empty());
        assert!(!rarely_needed(".timer") && !rarely_needed("getty@tty1.socket"));
    }

    #[test]
    fn every_userspace_rule_finds_its_part_of_a_debian_boot() {
        let advice = advise(&evidence());
        let rules: Vec<&str> = advice.findings.iter().map(|f| f.rule).collect();
        for r in [
            "slow-unit-on-chain",
            "wait-units",
            "systemd-status-on-serial",
            "initramfs-stage",
            "root-fsck",
            "rarely-needed-units",
            "workload-behind-default-target",
        ] {
            assert!(rules.contains(&r), "{r} missing from {rules:?}");
        }
        // Ranked by time: udev settle (700 ms) before the initramfs (500 ms).
        let at = |r: &str| rules.iter().position(|x| *x == r).unwrap();
        assert!(at("wait-units") < at("initramfs-stage"));
        let all_userspace = advice
            .findings
            .iter()
            .filter(|f| f.phase == "userspace")
            .count();
        assert_eq!(
            all_userspace,
            7,
            "{:?}",
            advice
                .findings
                .iter()
                .map(|f| (f.rule, &f.phase))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn quiet_or_a_non_serial_console_clears_the_status_rule() {
        let mut ev = evidence();
        ev.cmdline = Some("console=ttyS0 quiet".into());
        assert!(!advise(&ev)
            .findings
            .iter()
            .any(|f| f.rule == "systemd-status-on-serial"));
        ev.cmdline = Some("console=ttyS0 console=tty0".into());
        assert!(status_on_console(&ev).is_empty());
        ev.cmdline = Some("console=ttyS0 systemd.show_status=false".into());
        assert!(!advise(&ev)
            .findings
            .iter()
            .any(|f| f.rule == "systemd-status-on-serial"));
    }

    #[test]
    fn without_units_the_rules_are_unchecked_and_say_what_records_them() {
        let mut ev = evidence();
        ev.units = None;
        let advice = advise(&ev);
        let unchecked: Vec<&str> = advice.unchecked.iter().map(|u| u.rule).collect();
        assert!(unchecked.contains(&"slow-unit-on-chain"), "{unchecked:?}");
        assert!(
            advice.findings.iter().all(|f| f.phase != "userspace"),
            "{:?}",
            advice
                .findings
                .iter()
                .map(|f| (f.rule, &f.phase))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn short_stages_and_fast_units_are_no_findings() {
        let mut ev = evidence();
        assert!(initramfs_stage(&ev, 600 * MS).is_empty());
        assert!(slow_chain_units(&ev, 500 * MS).is_empty());
        ev.units
            .as_mut()
            .unwrap()
            .units
            .retain(|u| !u.name.contains("fsck"));
        assert!(root_fsck(&ev).is_empty());
    }

    #[test]
    fn a_workload_behind_the_default_target_boots_to_itself() {
        let ev = evidence();
        let found = workload_behind_target(&ev, 100 * MS);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.subject.as_deref(), Some("bootscope-workload.service"));
        // multi-user.target at 3.0 s, basic.target at 1.1 s.
        assert_eq!(f.accounts_ns, Some(1_900 * MS));
        // Started in between, the slowest first; not the wait unit (its
        // own rule), the targets or the workload.
        let started = &f.evidence[1];
        assert!(
            started.starts_with(
                "6 units started in that time, the slowest: e2scrub_reap.service 400.0 ms"
            ),
            "{started}"
        );
        for left_out in ["udev-settle", "multi-user.target", "bootscope-workload"] {
            assert!(!started.contains(left_out), "{started}");
        }
        let advice = advise(&ev);
        let finding = advice
            .findings
            .iter()
            .find(|f| f.rule == "workload-behind-default-target")
            .expect("a finding");
        assert_eq!(
            finding.fixes[0].change,
            ConcreteChange::KernelArgs("systemd.unit=bootscope-workload.service".into())
        );
        assert_eq!(finding.fixes[0].triable, crate::evaluate::Triable::Yes);
        assert!(
            finding.fixes[1]
                .gives_up
                .contains("bootscope-workload.service starts as soon as"),
            "{:?}",
            finding.fixes[1]
        );
    }

    #[test]
    fn a_boot_to_its_workload_or_a_chain_to_a_target_is_no_such_finding() {
        // Booted with systemd.unit= already: the rule is clear.
        let mut ev = evidence();
        ev.cmdline = Some("console=ttyS0 root=/dev/vda1 systemd.unit=other.service".into());
        assert!(!advise(&ev)
            .findings
            .iter()
            .any(|f| f.rule == "workload-behind-default-target"));
        // No workload known: the chain ends at a target.
        let mut ev = evidence();
        let u = ev.units.as_mut().unwrap();
        u.chain_target = "multi-user.target".into();
        u.critical_chain.remove(0);
        assert!(workload_behind_target(&ev, 100 * MS).is_empty());
        // A workload not ordered after a default target.
        let mut ev = evidence();
        let u = ev.units.as_mut().unwrap();
        u.critical_chain.retain(|l| l.name != "multi-user.target");
        assert!(workload_behind_target(&ev, 100 * MS).is_empty());
        // A short wait.
        assert!(workload_behind_target(&evidence(), 2_000 * MS).is_empty());
    }

    #[test]
    fn a_real_debian_boot_waited_for_logind_behind_multi_user() {
        let ev = lab_boot();
        let found = workload_behind_target(&ev, 100 * MS);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.subject.as_deref(), Some("workload.service"));
        // multi-user.target 51.268 s, basic.target 47.430 s on the chain.
        assert_eq!(f.accounts_ns, Some(51_267_668_418 - 47_430_102_418));
        assert!(
            f.evidence[0].contains("3.84 s after basic.target"),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence[1].contains("systemd-logind.service 2.07 s"),
            "{:?}",
            f.evidence
        );
    }
}
