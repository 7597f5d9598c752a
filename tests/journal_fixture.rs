//! The journal of an image bootscope did not build, read back: the system
//! journal a Debian 12 image made with mmdebstrap (its own workload unit,
//! no `guest build` record) wrote in one boot under `bootscope run --disk`
//! in the lab, and the timeline that boot wrote
//! (`scripts/bench-lab-userspace`; tests/fixtures/README.md). The reader
//! finds the boot's units and systemd's own `Startup finished` figures in
//! the file, and they are the ones the timeline holds: each unit's start
//! on the guest's clock, the timeline's userspace within 2 % of systemd's.

use std::io::Read;

use bootscope_model::journal::{self, boot_units, units::FIELDS, Limits};
use bootscope_vmm::units::chain::critical_chain;
use bootscope_vmm::units::journal::{chain_target, record_from_image, record_of};
use serde_json::Value;

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn journal_bytes() -> Vec<u8> {
    let file = std::fs::File::open(fixture("journal-debian12-own.journal.gz")).unwrap();
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn timeline() -> Value {
    let text = std::fs::read_to_string(fixture("journal-debian12-own.timeline.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_real_journal_has_the_boots_units_and_systemds_figures() {
    let bytes = journal_bytes();
    let file = journal::parse(&bytes, FIELDS, &Limits::default()).unwrap();
    assert!(file.skipped.is_empty(), "{:?}", file.skipped);
    let boot = boot_units(&file.entries, None).unwrap();
    assert_eq!(boot.boots_seen, 1);
    assert_eq!(boot.boot_id, file.tail_boot_id);
    assert!(boot.units.len() >= 30, "{} units", boot.units.len());
    assert_eq!(boot.units_dropped, 0);
    assert_eq!(boot.systemd_version.as_deref(), Some("252.39-1~deb12u2"));
    // Debian's initramfs-tools ran /init, then systemd on the real root.
    let run = boot.init_run_us.unwrap();
    let started = boot.systemd_start_us.unwrap();
    assert!(run < started, "{run} {started}");
    assert_eq!(boot.switch_root_us, None);
    let startup = boot.startup.as_ref().unwrap();
    assert!(startup.line.contains("(userspace)"), "{}", startup.line);
    // Its own workload ran; every job that started also ended.
    let workload = boot.units.iter().find(|u| u.name == "workload.service");
    assert_eq!(workload.map(|u| u.result.as_str()), Some("done"));
    let unfinished: Vec<&str> = boot
        .units
        .iter()
        .filter(|u| u.done_us.is_none())
        .map(|u| u.name.as_str())
        .collect();
    assert!(unfinished.is_empty(), "{unfinished:?}");
    // Without bootscope's workload the chain ends at the default target.
    let record = record_of(&boot);
    assert_eq!(record.units.len(), boot.units.len());
    assert_eq!(
        chain_target(&record, "bootscope-workload.service").as_deref(),
        Some("graphical.target")
    );
}

#[test]
fn the_timeline_holds_the_journals_units_on_the_guests_clock() {
    let bytes = journal_bytes();
    let file = journal::parse(&bytes, FIELDS, &Limits::default()).unwrap();
    let boot = boot_units(&file.entries, None).unwrap();
    let t = timeline();
    let units = &t["units"];
    assert!(units["error"].is_null(), "{}", units["error"]);
    let list = units["units"].as_array().unwrap();
    assert_eq!(list.len(), boot.units.len());
    let offset = units["clock"]["offset_ns"].as_i64().unwrap();
    for u in list {
        let name = u["name"].as_str().unwrap();
        let j = boot.units.iter().find(|j| j.name == name).unwrap();
        let guest_start = u["guest_start_us"].as_u64().unwrap();
        assert_eq!(Some(guest_start), j.starting_us.or(j.done_us), "{name}");
        let start = u["start_ns"].as_i64().unwrap();
        assert_eq!(start, guest_start as i64 * 1000 + offset, "{name}");
    }
    // systemd's own userspace figure and the timeline's: within 2 %.
    let s = &units["startup"];
    let systemd_ns = boot.startup.as_ref().unwrap().userspace_us * 1000;
    // The timeline has the figure systemd printed (`32.429s`), the journal
    // its microseconds too.
    let printed = s["userspace_ns"].as_u64().unwrap();
    assert!(systemd_ns.abs_diff(printed) < 1_000_000, "{systemd_ns} {s}");
    let ratio = s["timeline_userspace_ns"].as_f64().unwrap() / systemd_ns as f64;
    assert!((0.98..=1.02).contains(&ratio), "{s}");
    // The chain runs from the workload down, and it is the one systemd's
    // `systemd-analyze critical-chain workload.service` printed in that
    // boot, down to the first unit the journal does not hold (`-.mount`).
    let chain = units["critical_chain"].as_array().unwrap();
    assert_eq!(units["chain_target"], "workload.service");
    assert_eq!(chain[0]["name"], units["chain_target"]);
    let ours: Vec<&str> = chain.iter().map(|l| l["name"].as_str().unwrap()).collect();
    let text = std::fs::read_to_string(fixture("journal-debian12-own.critical-chain.txt")).unwrap();
    let systemds = &systemd_chains(&text)[0];
    assert_eq!(systemds[0], "workload.service");
    assert_eq!(ours[..], systemds[..systemds.len() - 2]);
    assert_eq!(systemds[systemds.len() - 2..], ["-.mount", "-.slice"]);
    // The workload's marker came after systemd started, before shutdown.
    let mark = |name: &str| {
        t["marks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["t_ns"].as_u64())
            .unwrap_or_else(|| panic!("no mark {name}"))
    };
    assert!(mark("systemd: started") < mark("port 0x80: userspace 0x60"));
    assert!(mark("port 0x80: userspace 0x60") < mark("vmm: guest shutdown"));
}

/// The names on each chain `systemd-analyze critical-chain` printed, the
/// unit it was asked about first.
fn systemd_chains(text: &str) -> Vec<Vec<String>> {
    let mut chains: Vec<Vec<String>> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let tree = line.trim_start_matches([' ', '│', '├', '└', '─']);
        let Some(name) = tree.split_whitespace().next() else {
            continue;
        };
        if tree.len() == line.len() {
            // Not in a tree: a chain's top, or the header's prose.
            if name.contains('.') && !name.ends_with('.') {
                chains.push(vec![name.to_string()]);
            }
        } else if let Some(chain) = chains.last_mut() {
            chain.push(name.to_string());
        }
    }
    chains
}

/// The image's unit files and its journal of one boot in an ext4 image
/// (`mkfs.ext4 -d`), as `run --disk` finds them after the boot; `None`
/// without mkfs.ext4 or tar.
fn chain_image(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let tree = dir.join("root");
    let machine = tree.join("var/log/journal/5c0a1d3e7b9f4a2c8e6d0b1f3a5c7e90");
    std::fs::create_dir_all(&machine).unwrap();
    std::fs::create_dir_all(tree.join("lib/systemd")).unwrap();
    std::fs::write(tree.join("lib/systemd/systemd"), b"\x7fELF").unwrap();
    let mut journal = Vec::new();
    let file = std::fs::File::open(fixture("journal-debian12-chain.journal.gz")).unwrap();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut journal)
        .unwrap();
    std::fs::write(machine.join("system.journal"), journal).unwrap();
    let untar = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(fixture("journal-debian12-chain.units.tar.gz"))
        .arg("-C")
        .arg(&tree)
        .status()
        .ok()?;
    assert!(untar.success(), "tar failed");
    let mkfs = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let image = dir.join("own.raw");
    let ok = std::process::Command::new(mkfs)
        .args(["-q", "-F", "-d"])
        .arg(&tree)
        .arg(&image)
        .arg("32M")
        .status()
        .ok()?;
    assert!(ok.success(), "mkfs.ext4 failed");
    Some(image)
}

/// The critical chain from the journal and the unit files of a real boot
/// is the one systemd's own `systemd-analyze critical-chain` printed in
/// that boot (the image's workload kept it): to the workload and to
/// `graphical.target`, link by link, down to the first unit the journal
/// does not hold (`-.mount`, mounted before systemd started, and the
/// slices).
#[test]
fn the_chain_from_the_journal_is_the_one_systemd_analyze_printed() {
    let dir = std::env::temp_dir().join(format!("bootscope-chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let Some(image) = chain_image(&dir) else {
        println!("SKIP: mkfs.ext4 or tar is not installed");
        return;
    };
    let read = bootscope_vmm::units::image::with_fs_at(&image, |fs| {
        record_from_image(fs).map_err(|e| e.to_string())
    });
    let (record, journal) = read.unwrap().unwrap();
    assert!(journal.problems.is_empty(), "{:?}", journal.problems);
    let text =
        std::fs::read_to_string(fixture("journal-debian12-chain.critical-chain.txt")).unwrap();
    let chains = systemd_chains(&text);
    let tops: Vec<&str> = chains.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(tops, ["workload.service", "graphical.target"]);
    for systemds in &chains {
        let expected: Vec<&str> = systemds
            .iter()
            .map(String::as_str)
            .take_while(|n| record.unit(n).is_some())
            .collect();
        // Down to systemd-journald.socket: only -.mount and -.slice are left.
        assert_eq!(expected.len(), systemds.len() - 2, "{systemds:?}");
        let ours: Vec<String> = critical_chain(&record, &systemds[0])
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(ours, expected);
    }
    // systemd-update-utmp-runlevel.service became active after
    // graphical.target (ordered after its alias runlevel5.target, without
    // default dependencies): not on the chain.
    assert!(!chains[1].iter().any(|n| n.contains("utmp")));
    let _ = std::fs::remove_dir_all(&dir);
}
