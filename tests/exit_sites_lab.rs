//! Exit sites in the lab (real nested SVM): the default guest booted with
//! its default command line (console on, KASLR on) under bootscope's VMM
//! with `--exit-sites --guest-decompress` (the guest's own decompressor,
//! which applies KASLR). Its io exits come from the guest kernel's serial
//! console functions, every reason's sites add up to the reason, which
//! adds up to KVM's own exit count, the slide is not 0, and a `nokaslr`
//! boot names the same functions at a slide of 0.

mod support;

use support::*;

use bootscope_profiler::Profile;

/// `run`'s default command line, to which `nokaslr` is added: read from
/// `bootscope run --help` (the binary's own default; the constant in
/// src/common.rs is not reachable from an integration test).
fn default_cmdline() -> String {
    let o = bootscope()
        .args(["run", "--help"])
        .output()
        .expect("bootscope run --help runs");
    let help = String::from_utf8_lossy(&o.stdout);
    let after = help
        .split_once("--cmdline")
        .and_then(|(_, rest)| rest.split_once("[default: \""))
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no --cmdline default in run --help: {help}"));
    let (cmdline, _) = after.split_once('"').expect("quoted default");
    assert!(cmdline.contains("console=ttyS0"), "{cmdline}");
    cmdline.to_string()
}

/// Boots the default guest in the lab with `extra` run arguments and
/// returns its profile (None: the lab is unavailable, said why).
fn boot_with_sites(tag: &str, extra: &[&str]) -> Option<Profile> {
    let p = lab::prereqs(tag)?;
    let out = p.dir.join("profile.json");
    let o = bootscope()
        .args(["lab", "--timeout", "900", "--", "run", "--exit-sites"])
        .arg("--kernel")
        .arg(&p.kernel)
        .arg("--initrd")
        .arg(&p.initrd)
        // The guest's own decompressor: KASLR is its work (entered past
        // it, the kernel runs at its link address whatever the command
        // line says).
        .args(["--timeout", "600", "--serial", "null", "--guest-decompress"])
        .args(extra)
        .arg("--output")
        .arg(&out)
        .output()
        .expect("bootscope lab runs");
    // The lab streams its guest's console, where the inner run's summary
    // goes, to its standard output; its own messages to standard error.
    let console = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{console}{stderr}");
    assert!(
        console.contains("exit sites ("),
        "no site summary: {console}{stderr}"
    );
    print!("{console}");
    let profile = Profile::read(&out).expect("profile copied back");
    let _ = std::fs::remove_dir_all(&p.dir);
    Some(profile)
}

/// The checks every boot must pass; returns the top io function.
fn check_sites(p: &Profile) -> String {
    let sites = p.exits.sites.as_ref().expect("exits.sites");
    assert_eq!(p.exits.kvm_stats_exits, Some(p.exits.total));
    let totals = sites.reason_totals();
    for r in &p.exits.by_reason {
        assert_eq!(totals.get(&r.reason), Some(&r.count), "{}", r.reason);
    }
    assert_eq!(totals.values().sum::<u64>(), p.exits.total);
    let info = sites.symbols.as_ref().expect("symbols");
    assert!(info.kaslr_offset.is_some(), "{info:?}");
    assert!(info.source.contains("kallsyms recovered from"), "{info:?}");
    let top = sites.top_functions("io");
    let first = &top[0];
    assert!(
        first.name.contains("serial") || first.name.starts_with("io_serial"),
        "top io function {first:?} of {top:?}"
    );
    first.name.clone()
}

/// The KASLR slide the profile's exit sites were resolved under.
fn slide(p: &Profile) -> Option<u64> {
    p.exits.sites.as_ref()?.symbols.as_ref()?.kaslr_offset
}

#[test]
fn exit_sites_name_the_serial_console_with_and_without_kaslr() {
    let nokaslr = format!("{} nokaslr", default_cmdline());
    let Some(kaslr) = boot_with_sites("sites-kaslr", &[]) else {
        return;
    };
    let top = check_sites(&kaslr);
    // The decompressor picks one of ~490 2 MiB slots, slot 0 (no slide)
    // once in that many boots: a boot in slot 0 is booted again, and two
    // boots in a row without a slide fail (once in ~240,000).
    if slide(&kaslr) == Some(0) {
        println!("the KASLR boot landed in slot 0 (no slide): booting it again");
        let Some(again) = boot_with_sites("sites-kaslr-again", &[]) else {
            return;
        };
        assert_eq!(check_sites(&again), top);
        assert_ne!(
            slide(&again),
            Some(0),
            "KASLR on, yet no slide in two boots"
        );
    }
    let Some(plain) = boot_with_sites("sites-nokaslr", &["--cmdline", &nokaslr]) else {
        return;
    };
    assert_eq!(check_sites(&plain), top);
    let info = plain
        .exits
        .sites
        .as_ref()
        .unwrap()
        .symbols
        .as_ref()
        .unwrap();
    assert_eq!(info.kaslr_offset, Some(0), "{info:?}");
}
