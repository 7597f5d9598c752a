//! `bootscope compare` of two profiles: real lab profiles with exit sites
//! (tests/fixtures/README.md says how they were made), compared per reason
//! and per site with exact expected lines, the JSON form checked against
//! the profiles themselves, and bad input (a profile beside a bench
//! document, a profile alone, bench-only options) refused with exit 2.

mod support;

use std::path::Path;

use bootscope_profiler::Profile;

use support::bootscope_output as bootscope;
use support::{lab_baseline, recorded, scratch, stderr as err, stdout as out};

#[test]
fn loud_against_quiet_per_reason_and_site() {
    let (a, b) = (
        recorded("lab-sites-loud.profile.json"),
        recorded("lab-sites-quiet.profile.json"),
    );
    let o = bootscope(&["compare", &a, &b]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    print!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    // The phases first, with the caveat that one boot against one is no
    // significance test; then the exits.
    assert_eq!(lines[0], format!("phases: {a} -> {b}"));
    assert!(
        lines[1].contains("no significance test") && lines[1].contains("bootscope bench"),
        "{text}"
    );
    assert!(
        lines.contains(&format!("exits: {a} -> {b}").as_str()),
        "{text}"
    );
    for want in EXPECTED {
        assert!(lines.contains(want), "missing {want:?} in\n{text}");
    }
    // Largest change first: the serial console's functions lead.
    let first_site = lines
        .iter()
        .position(|l| l.starts_with("exit sites"))
        .expect("site section");
    assert!(
        lines[first_site + 1].starts_with("  io at io_serial_"),
        "{text}"
    );
}

/// Lines of `compare loud quiet`, from the fixtures' own counts and
/// phases (the quiet boot's console has no kernel banner: no `kernel`
/// phase, its `guest boot` runs until userspace).
const EXPECTED: &[&str] = &[
    "  profiler attach: 1,610.8 ms -> 638.9 ms (-971.9 ms, -60.3 %)",
    "  vmm setup: 12,142.9 ms -> 12,579.3 ms (+436.5 ms, +3.6 %)",
    "  guest boot: 2,089.1 ms -> 39,297.7 ms (+37,208.6 ms, +1781.1 %)",
    "  kernel: 9,783.4 ms -> absent",
    "  total: 47,853 -> 3,974 (-43,879, -91.7 %)",
    "  io: 43,446 -> 444 (-43,002, -99.0 %)",
    "  msr: 1,260 -> 1,062 (-198, -15.7 %)",
    "  npf: 558 -> 558 (0, +0.0 %)",
    "exit sites (reason at guest function), largest change first:",
    "  io at io_serial_out: 21,939 -> 198 (-21,741, -99.1 %)",
    "  io at io_serial_in: 21,389 -> 128 (-21,261, -99.4 %)",
    "  msr at native_write_msr: 988 -> 795 (-193, -19.5 %)",
    "  vintr at console_emit_next_record.constprop.0: 161 -> 2 (-159, -98.8 %)",
    "  ... 802 more changed (--json lists them all)",
    "  832 changed, 121 unchanged",
];

#[test]
fn json_agrees_with_the_profiles() {
    let (a, b) = (
        recorded("lab-sites-loud.profile.json"),
        recorded("lab-sites-quiet.profile.json"),
    );
    let dir = scratch("cmp");
    let file = dir.join("cmp.json");
    let o = bootscope(&["compare", "--json", "-o", file.to_str().unwrap(), &a, &b]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).is_empty());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(v["schema"], "bootscope.profile-compare");
    assert_eq!(v["sites_compared"], true);
    let (pa, pb) = (
        Profile::read(Path::new(&a)).unwrap(),
        Profile::read(Path::new(&b)).unwrap(),
    );
    assert_eq!(v["total"]["base"], pa.exits.total);
    assert_eq!(v["total"]["new"], pb.exits.total);
    // Every reason of either profile, with its count in each.
    for r in v["reasons"].as_array().unwrap() {
        let name = r["reason"].as_str().unwrap();
        let count = |p: &Profile| {
            p.exits
                .by_reason
                .iter()
                .find(|x| x.reason == name)
                .map_or(0, |x| x.count)
        };
        assert_eq!(r["base"], count(&pa), "{name}");
        assert_eq!(r["new"], count(&pb), "{name}");
        assert_eq!(
            r["change"].as_i64().unwrap(),
            count(&pb) as i64 - count(&pa) as i64
        );
    }
    // The changed sites and the unchanged ones account for every exit:
    // per reason, base and new sums equal the reason's count, less what
    // the unchanged sites hold (the same in both).
    let sites = v["sites"].as_array().unwrap();
    let changes: Vec<u64> = sites
        .iter()
        .map(|s| s["change"].as_i64().unwrap().unsigned_abs())
        .collect();
    assert!(
        changes.windows(2).all(|w| w[0] >= w[1]),
        "sorted by size of change"
    );
    for r in &pa.exits.by_reason {
        let base: u64 = sites
            .iter()
            .filter(|s| s["reason"] == r.reason.as_str())
            .map(|s| s["base"].as_u64().unwrap())
            .sum();
        let new: u64 = sites
            .iter()
            .filter(|s| s["reason"] == r.reason.as_str())
            .map(|s| s["new"].as_u64().unwrap())
            .sum();
        let count_b = pb
            .exits
            .by_reason
            .iter()
            .find(|x| x.reason == r.reason)
            .map_or(0, |x| x.count);
        assert_eq!(
            r.count as i64 - base as i64,
            count_b as i64 - new as i64,
            "{}",
            r.reason
        );
    }
}

#[test]
fn without_sites_per_reason_only() {
    let (a, b) = (
        recorded("lab-sites-loud.profile.json"),
        recorded("lab-nosites-quiet.profile.json"),
    );
    let o = bootscope(&["compare", &a, &b]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    assert!(text.contains("  io: "), "{text}");
    assert!(
        text.ends_with(&format!(
            "exit sites: not collected in {b} (profile with --exit-sites to compare them)\n"
        )),
        "{text}"
    );
}

#[test]
fn bad_input_is_exit_2() {
    let p = recorded("lab-sites-loud.profile.json");
    let bench = lab_baseline();
    let o = bootscope(&["compare", &p, &bench]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("is a profile but") && err(&o).contains("a bootscope.bench document"),
        "{}",
        err(&o)
    );
    assert!(out(&o).is_empty());
    let o = bootscope(&["compare", &bench, &p]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let o = bootscope(&["compare", &p]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("give a second profile"), "{}", err(&o));
    let o = bootscope(&["compare", "--metric", "wall", &p, &p]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("--metric and --config apply to bench files"),
        "{}",
        err(&o)
    );
}
