//! Each rule against evidence: real profiles and timelines captured in the
//! lab (tests/fixtures, README there says how each was made), and made-up
//! evidence for the rules those boots do not trigger. Evidence in,
//! findings and fixes out.

use std::path::PathBuf;

use bootscope_advise::evaluate::{advise, evaluate, ConcreteChange, RuleOutcome, Triable};
use bootscope_advise::evidence::{Evidence, Initcall, Initrd, Vmm};
use bootscope_advise::rules::{Need, Rule, RULES};
use bootscope_advise::{AdviseError, Finding};
use bootscope_testkit::find;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures")).join(name)
}

fn rule(id: &str) -> &'static Rule {
    RULES
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no rule {id}"))
}

fn found(id: &str, ev: &Evidence) -> Vec<Finding> {
    match evaluate(rule(id), ev) {
        RuleOutcome::Found(f) => f,
        other => panic!("{id}: expected a finding, got {other:?}"),
    }
}

fn changes(f: &Finding) -> Vec<ConcreteChange> {
    f.fixes.iter().map(|c| c.change.clone()).collect()
}

fn kernel(a: &str) -> ConcreteChange {
    ConcreteChange::KernelArgs(a.into())
}

fn loud() -> Evidence {
    Evidence::read(&[
        fixture("lab-sites-loud.timeline.json"),
        fixture("lab-sites-loud.profile.json"),
    ])
    .unwrap()
}

#[test]
fn serial_console_from_exit_sites() {
    let ev = loud();
    let f = &found("serial-console", &ev)[0];
    // io_serial_out and io_serial_in, before userspace: 21,568 + 21,137
    // exits in `kernel`, 221 + 214 in `guest boot` (the fixture's sites).
    assert!(
        f.evidence[0].contains("io exits at io_serial_out before userspace: 21,789 of 47,853"),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence[1].contains("io_serial_in before userspace: 21,351"),
        "{:?}",
        f.evidence
    );
    let want = 1_107_857_728 + 122_727_953 + 1_081_140_778 + 63_245_279;
    assert_eq!(f.accounts_ns, Some(want));
    assert_eq!(
        changes(f),
        [
            kernel("quiet"),
            ConcreteChange::RunFlags(vec!["--console".into(), "virtio".into()])
        ]
    );
    assert!(f.fixes.iter().all(|c| c.estimate_ns == Some(want)));
    assert_eq!(f.fixes[0].triable, Triable::Yes);
    // The loud boot's biggest finding is its console.
    assert_eq!(advise(&ev).findings[0].rule, "serial-console");
}

#[test]
fn serial_console_quiet_boot_keeps_only_the_virtio_console() {
    let ev = Evidence::read(&[fixture("lab-sites-quiet.profile.json")]).unwrap();
    assert!(ev.cmdline_has("quiet"), "{:?}", ev.cmdline);
    let f = &found("serial-console", &ev)[0];
    assert_eq!(
        changes(f),
        [ConcreteChange::RunFlags(vec![
            "--console".into(),
            "virtio".into()
        ])]
    );
    let loud_ns = found("serial-console", &loud())[0].accounts_ns.unwrap();
    assert!(
        f.accounts_ns.unwrap() * 5 < loud_ns,
        "quiet {:?} vs loud {loud_ns}",
        f.accounts_ns
    );
}

#[test]
fn serial_console_from_ports_without_sites() {
    let ev = Evidence::read(&[fixture("lab-nosites-quiet.profile.json")]).unwrap();
    let f = &found("serial-console", &ev)[0];
    assert!(
        f.evidence[0].starts_with("port I/O on 0x3f8-0x3ff: "),
        "{:?}",
        f.evidence
    );
    assert!(f.evidence[1].contains("--exit-sites"), "{:?}", f.evidence);
    assert!(f.accounts_ns.is_some_and(|t| t > 0));
}

#[test]
fn msr_exits_propose_an_unsafe_fix_only_listed() {
    let f = &found("msr-exits", &loud())[0];
    assert!(
        f.evidence[0].starts_with("msr exits: 1,260 of 47,853, about 413.4 ms"),
        "{:?}",
        f.evidence
    );
    assert_eq!(changes(f), [kernel("mitigations=off")]);
    assert_eq!(f.fixes[0].triable, Triable::NeedsAllowUnsafe);
}

#[test]
fn profile_without_initcalls_says_which_rules_it_could_not_check() {
    let advice = advise(&loud());
    for id in [
        "legacy-uarts",
        "crypto-self-tests",
        "failed-probe",
        "compressed-initramfs",
    ] {
        let u = find(&advice.unchecked, &format!("unchecked {id}"), |u| {
            u.rule == id
        });
        assert_eq!(u.needs, Need::Initcalls);
        assert!(u.flag.contains("run --initcalls"), "{}", u.flag);
    }
    // A profile alone has no timeline: the guest's set-up is unknown.
    let ev = Evidence::read(&[fixture("lab-nosites-quiet.profile.json")]).unwrap();
    let advice = advise(&ev);
    assert!(advice
        .unchecked
        .iter()
        .any(|u| u.rule == "copied-initrd" && u.needs == Need::Guest));
}

/// Evidence of a boot with initcalls, as a timeline gives it.
fn with_initcalls(calls: &[(&str, u64, i64)]) -> Evidence {
    Evidence {
        vmm: Vmm::Bootscope,
        kernel_format: Some("bzimage".into()),
        cmdline: Some("console=ttyS0".into()),
        initcalls: Some(
            calls
                .iter()
                .map(|(name, ns, ret)| Initcall {
                    name: (*name).into(),
                    level: "device".into(),
                    start_ns: 0,
                    duration_ns: *ns,
                    ret: *ret,
                })
                .collect(),
        ),
        ..Evidence::default()
    }
}

#[test]
fn slow_named_initcalls() {
    let ev = with_initcalls(&[
        ("serial8250_init", 4_000_000, 0),
        ("crypto_algapi_init", 250_000_000, 0),
        ("i8042_init", 30_000_000, -19),
        ("pci_subsys_init", 12_000_000, 0),
        ("raid6_select_algo", 40_000_000, 0),
        ("inet_init", 170_000_000, 0),
    ]);
    assert_eq!(
        changes(&found("legacy-uarts", &ev)[0]),
        [kernel("8250.nr_uarts=1")]
    );
    let crypto = &found("crypto-self-tests", &ev)[0];
    assert_eq!(crypto.accounts_ns, Some(250_000_000));
    assert_eq!(crypto.fixes[0].change, kernel("cryptomgr.notests"));
    assert_eq!(crypto.fixes[1].triable, Triable::No);
    assert_eq!(
        changes(&found("i8042-probe", &ev)[0]),
        [kernel("i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd")]
    );
    assert_eq!(changes(&found("pci-probe", &ev)[0]), [kernel("pci=off")]);
    assert_eq!(
        found("raid-benchmarks", &ev)[0].fixes[0].triable,
        Triable::No
    );
    // i8042_init returned -ENODEV, but its own rule covers it.
    assert!(matches!(
        evaluate(rule("failed-probe"), &ev),
        RuleOutcome::Clear
    ));
    // Ranked by time: the crypto self-tests first.
    assert_eq!(advise(&ev).findings[0].rule, "crypto-self-tests");
    // Under the threshold, or already fixed: nothing.
    let ev = with_initcalls(&[("serial8250_init", 900_000, 0)]);
    assert!(matches!(
        evaluate(rule("legacy-uarts"), &ev),
        RuleOutcome::Clear
    ));
    let mut ev = with_initcalls(&[("pci_subsys_init", 12_000_000, 0)]);
    ev.cmdline = Some("console=ttyS0 pci=off".into());
    assert!(matches!(
        evaluate(rule("pci-probe"), &ev),
        RuleOutcome::Clear
    ));
    // The self-tests switched off: crypto_algapi_init's time (registering
    // the algorithms) is not theirs, and the kernel-configuration advice
    // that does the same is moot.
    let mut ev = with_initcalls(&[("crypto_algapi_init", 31_600_000, 0)]);
    ev.cmdline = Some("console=ttyS0 cryptomgr.notests".into());
    assert!(matches!(
        evaluate(rule("crypto-self-tests"), &ev),
        RuleOutcome::Clear
    ));
}

#[test]
fn failed_probes_name_their_initcall() {
    let ev = with_initcalls(&[
        ("fake_hw_init", 20_000_000, -19),
        ("quick_absent_init", 200_000, -19),
        ("slow_present_init", 20_000_000, 0),
    ]);
    let f = found("failed-probe", &ev);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].subject.as_deref(), Some("fake_hw_init"));
    assert!(f[0].evidence[0].contains("-ENODEV"), "{:?}", f[0].evidence);
    assert_eq!(
        f[0].fixes[0].change,
        kernel("initcall_blacklist=fake_hw_init")
    );
    assert_eq!(f[0].fixes[0].triable, Triable::Yes);
}

#[test]
fn compressed_initramfs_by_its_magic() {
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("initrd.cpio.gz");
    std::fs::write(&gz, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0]).unwrap();
    let plain = dir.path().join("initrd.cpio");
    std::fs::write(&plain, b"070701000000").unwrap();
    let timeline = |initrd: &std::path::Path| {
        let path = dir.path().join("t.json");
        let doc = serde_json::json!({
            "schema": "bootscope.timeline", "version": 1,
            "guest": {"kernel": "k", "kernel_format": "bzimage", "cmdline": "console=ttyS0",
                      "initrd": initrd, "initrd_mapped_from_file": false},
            "marks": [], "phases": [],
            "initcalls": {"method": "m", "initcalls": [
                {"name": "populate_rootfs", "level": "rootfs", "start_ns": 1, "duration_ns": 380_000_000, "ret": 0}]}
        });
        std::fs::write(&path, doc.to_string()).unwrap();
        Evidence::read(&[path]).unwrap()
    };
    let f = &found("compressed-initramfs", &timeline(&gz))[0];
    assert!(
        f.evidence[0].starts_with("populate_rootfs: 380.0 ms unpacking the initramfs"),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence[0].contains("gzip-compressed, 8 bytes"),
        "{:?}",
        f.evidence
    );
    // No uncompressed archive made (advise makes it): advice to make one.
    assert_eq!(f.fixes[0].triable, Triable::No);
    assert!(matches!(
        evaluate(rule("compressed-initramfs"), &timeline(&plain)),
        RuleOutcome::Clear
    ));
}

#[test]
fn the_initramfs_unpacked_beside_the_initcalls_is_timed_to_its_freeing() {
    let dir = tempfile::tempdir().unwrap();
    let zst = dir.path().join("initrd.img");
    std::fs::write(&zst, [0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0]).unwrap();
    let ms = 1_000_000u64;
    let path = dir.path().join("t.json");
    // populate_rootfs returns at once; the unpacking ends 2.7 s later, as
    // a module load that waited for it does.
    let doc = serde_json::json!({
        "schema": "bootscope.timeline", "version": 1,
        "guest": {"kernel": "k", "kernel_format": "bzimage", "cmdline": "console=ttyS0",
                  "initrd": zst, "initrd_mapped_from_file": false},
        // The console showed the line 3 s after the kernel logged it at
        // 2.7 s on its own clock (the initcalls' offset: 1 s).
        "marks": [{"name": "serial: initrd freed", "t_ns": 6_700 * ms, "source": "serial", "value": 2_700 * ms}],
        "phases": [],
        "initcalls": {"method": "m", "clock": {"offset_ns": 1_000 * ms, "error_ns": 1000, "anchors": 3}, "initcalls": [
            {"name": "populate_rootfs", "level": "rootfs", "start_ns": 1_000 * ms, "duration_ns": 6 * ms, "ret": 0},
            {"name": "inet_init", "level": "fs", "start_ns": 1_100 * ms, "duration_ns": 200 * ms, "ret": 0},
            {"name": "crypto_kdf108_init", "level": "late", "start_ns": 1_400 * ms, "duration_ns": 2_305 * ms, "ret": 0}]}
    });
    std::fs::write(&path, doc.to_string()).unwrap();
    let mut ev = Evidence::read(&[path]).unwrap();
    let f = &found("compressed-initramfs", &ev)[0];
    assert_eq!(f.accounts_ns, Some(2_700 * ms));
    assert!(
        f.evidence[0].contains("zstd-compressed"),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence[1].starts_with("crypto_kdf108_init ran across its end (2.31 s)"),
        "{:?}",
        f.evidence
    );
    // With the archive made, bootscope's run boots it in place of the initrd.
    ev.initrd.as_mut().unwrap().cpio = Some("/cache/initrd-ab.cpio".into());
    let f = &found("compressed-initramfs", &ev)[0];
    assert_eq!(
        f.fixes[0].change,
        ConcreteChange::VmmOptions {
            vmm: Vmm::Bootscope,
            args: vec!["--initrd".into(), "/cache/initrd-ab.cpio".into()],
            replace: vec!["--initrd".into()],
            machine: None,
            kernel: String::new(),
        }
    );
    assert_eq!(f.fixes[0].triable, Triable::Yes);
    // QEMU's own option, for a QEMU boot.
    ev.vmm = Vmm::Qemu;
    ev.vmm_command = ["qemu-system-x86_64", "-kernel", "k", "-initrd", "i"]
        .map(String::from)
        .to_vec();
    let f = &found("compressed-initramfs", &ev)[0];
    assert!(
        matches!(&f.fixes[0].change, ConcreteChange::VmmOptions { args, .. } if args[0] == "-initrd"),
        "{:?}",
        f.fixes[0].change
    );
}

#[test]
fn vmm_set_up_rules() {
    let mut ev = Evidence {
        vmm: Vmm::Bootscope,
        kernel_format: Some("bzimage".into()),
        decompressed_by: Some("guest".into()),
        kaslr: Some(true),
        phases: vec![("firmware/boot loader".into(), 90_000_000)],
        initrd: Some(Initrd {
            path: "/i".into(),
            mapped: false,
            compression: Some("none".into()),
            bytes: Some(64 << 20),
            ..Initrd::default()
        }),
        prealloc_ns: Some(300_000_000),
        ..Evidence::default()
    };
    assert_eq!(
        found("copied-initrd", &ev)[0].fixes[0].change,
        ConcreteChange::RunFlags(vec!["--map-initrd".into()])
    );
    assert_eq!(
        found("guest-decompression", &ev)[0].accounts_ns,
        Some(90_000_000)
    );
    assert_eq!(
        found("kaslr", &ev)[0].fixes[0].triable,
        Triable::NeedsAllowUnsafe
    );
    let prealloc = &found("serial-prealloc", &ev)[0];
    assert_eq!(prealloc.accounts_ns, Some(300_000_000));
    assert_eq!(
        prealloc.fixes[0].change,
        ConcreteChange::RunFlags(vec!["--prealloc-threads".into(), "2".into()])
    );
    // Another VMM: its options are advice, not bootscope run flags to try.
    ev.vmm = Vmm::Other;
    ev.kernel_format = None;
    ev.prealloc_threads = vec![("touch_pages".into(), 400_000_000)];
    let prealloc = &found("serial-prealloc", &ev)[0];
    assert!(
        prealloc.evidence[0].contains("touch_pages"),
        "{:?}",
        prealloc.evidence
    );
    assert_eq!(prealloc.fixes[0].triable, Triable::BootscopeOnly);
    assert!(matches!(
        evaluate(rule("copied-initrd"), &ev),
        RuleOutcome::Unchecked(Need::Guest)
    ));
}

#[test]
fn no_entropy_source_unless_one_is_given() {
    let words = |w: &[&str]| w.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    let mut ev = with_initcalls(&[]);
    ev.vmm_command = words(&["bootscope", "run", "--no-rng"]);
    let f = &found("no-entropy-source", &ev)[0];
    assert_eq!(f.accounts_ns, None);
    assert_eq!(
        f.fixes[0].change,
        ConcreteChange::RunFlags(vec!["--rng".into()])
    );
    assert_eq!(f.fixes[1].triable, Triable::NeedsAllowUnsafe);
    // Without ACPI, run's guest has no virtio-rng either.
    ev.vmm_command = words(&["bootscope", "run", "--no-acpi"]);
    assert_eq!(found("no-entropy-source", &ev).len(), 1);
    // run gives one by default (with ACPI), and the last of --rng and
    // --no-rng wins.
    for cmd in [
        &["bootscope", "run"][..],
        &["bootscope", "run", "--no-rng", "--rng"],
    ] {
        ev.vmm_command = words(cmd);
        assert!(
            matches!(evaluate(rule("no-entropy-source"), &ev), RuleOutcome::Clear),
            "{cmd:?}"
        );
    }
    // Another VMM has one only when its command names one.
    ev.vmm = Vmm::Other;
    ev.vmm_command = words(&["qemu-system-x86_64", "-M", "microvm"]);
    assert_eq!(found("no-entropy-source", &ev).len(), 1);
    ev.vmm_command
        .extend(words(&["-device", "virtio-rng-device"]));
    assert!(matches!(
        evaluate(rule("no-entropy-source"), &ev),
        RuleOutcome::Clear
    ));
    ev.vmm_command.clear();
    ev.cmdline = Some("console=ttyS0 random.trust_cpu=on".into());
    assert!(matches!(
        evaluate(rule("no-entropy-source"), &ev),
        RuleOutcome::Clear
    ));
}

#[test]
fn run_options_in_place_only_with_their_value() {
    let mut ev = loud();
    let console = |ev: &Evidence| {
        advise(ev)
            .findings
            .iter()
            .flat_map(|f| f.fixes.iter())
            .any(|c| {
                c.change == ConcreteChange::RunFlags(vec!["--console".into(), "virtio".into()])
            })
    };
    assert!(console(&ev));
    // --console serial is not the fix in place.
    ev.vmm_command = ["bootscope", "run", "--console", "serial"]
        .map(String::from)
        .to_vec();
    assert!(console(&ev));
    for given in [&["--console", "virtio"][..], &["--console=virtio"]] {
        ev.vmm_command = ["bootscope", "run"].map(String::from).to_vec();
        ev.vmm_command
            .extend(given.iter().map(|s| (*s).to_string()));
        assert!(!console(&ev), "{given:?}");
    }
}

#[test]
fn unreadable_or_wrong_documents_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (dir.path().join("missing.json"), "cannot read"),
        (write("a.json", "not json"), "is not JSON"),
        (
            write("b.json", r#"{"schema": "bootscope.bench", "version": 1}"#),
            "its \"schema\" is \"bootscope.bench\"",
        ),
        (
            write("c.json", r#"{"schema": "bootscope.profile", "version": 9}"#),
            "version 9 profile",
        ),
        (
            write(
                "d.json",
                r#"{"schema": "bootscope.timeline", "version": 4}"#,
            ),
            "version 4 timeline",
        ),
    ];
    for (path, want) in cases {
        let e: AdviseError = Evidence::read(std::slice::from_ref(&path)).unwrap_err();
        assert!(e.is_bad_input());
        let msg = e.to_string();
        assert!(
            msg.contains(want) && msg.contains(&*path.to_string_lossy()),
            "{msg}"
        );
    }
    let p = fixture("lab-sites-loud.profile.json");
    let e = Evidence::read(&[p.clone(), p]).unwrap_err().to_string();
    assert!(e.contains("a second bootscope.profile document"), "{e}");
}

/// The lab's slow guest (tests/fixtures/README.md): a verbose console, a
/// gzip-compressed initramfs, no `pci=off` or `i8042.*` options, no
/// entropy device. Each cause is found from its timeline and profile.
#[test]
fn slow_guest_every_known_cause_found() {
    let dir = tempfile::tempdir().unwrap();
    // The initrd the timeline names was on the machine that made it: a
    // gzip file in its place.
    let gz = dir.path().join("guest.cpio.gz");
    std::fs::write(&gz, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0]).unwrap();
    let mut t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("advise-slow.timeline.json")).unwrap())
            .unwrap();
    t["guest"]["initrd"] = serde_json::json!(gz);
    let tp = dir.path().join("t.json");
    std::fs::write(&tp, t.to_string()).unwrap();
    // The guest had no entropy device: recorded by a bootscope whose run
    // had no virtio-rng; today's run says so with --no-rng.
    let mut p: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("advise-slow.profile.json")).unwrap())
            .unwrap();
    p["target"]["command"]
        .as_array_mut()
        .unwrap()
        .push("--no-rng".into());
    let pp = dir.path().join("p.json");
    std::fs::write(&pp, p.to_string()).unwrap();
    let ev = Evidence::read(&[tp, pp]).unwrap();
    let advice = advise(&ev);
    // A guest without systemd: only the rules on its units are unchecked.
    assert!(
        advice.unchecked.iter().all(|u| u.needs == Need::Units),
        "{:?}",
        advice.unchecked
    );
    let rules: Vec<&str> = advice.findings.iter().map(|f| f.rule).collect();
    // The console first: some 43,500 port exits in the kernel phase.
    assert_eq!(rules[0], "serial-console", "{rules:?}");
    for want in [
        "legacy-uarts",
        "i8042-probe",
        "pci-probe",
        "compressed-initramfs",
        "failed-probe",
        "crypto-self-tests",
        "no-entropy-source",
    ] {
        assert!(rules.contains(&want), "{want} not in {rules:?}");
    }
    let f = |id: &str| advice.findings.iter().find(|f| f.rule == id).unwrap();
    assert!(f("compressed-initramfs").evidence[0].contains("gzip-compressed"));
    // Both PCI initcalls are one finding, one fix.
    let pci = f("pci-probe");
    assert_eq!(
        pci.subject.as_deref(),
        Some("pci_arch_init, pci_subsys_init")
    );
    assert_eq!(changes(pci), [kernel("pci=off")]);
    assert_eq!(
        f("failed-probe").fixes[0].change,
        kernel("initcall_blacklist=pmc_atom_init")
    );
    let timed: Vec<u64> = advice
        .findings
        .iter()
        .filter_map(|f| f.accounts_ns)
        .collect();
    assert!(timed.windows(2).all(|w| w[0] >= w[1]), "{timed:?}");
    // The run's default command line already holds what these rules
    // would add: nothing left to propose.
    let mut quiet_default = ev.clone();
    quiet_default.cmdline =
        Some("console=ttyS0 reboot=k panic=-1 pci=off io_delay=none i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd".into());
    let a = advise(&quiet_default);
    assert!(
        a.clear.contains(&"pci-probe") && a.clear.contains(&"i8042-probe"),
        "{:?}",
        a.clear
    );
}

/// A QEMU microvm boot's exits as the nested lab showed them: the serial
/// console and the CMOS RTC polled 20,000 times, by port (no sites).
fn qemu_microvm() -> Evidence {
    let mut ev = Evidence::read(&[fixture("lab-nosites-quiet.profile.json")]).unwrap();
    ev.vmm = Vmm::Qemu;
    ev.vmm_command =
        "qemu-system-x86_64 -M microvm -nographic -serial stdio -kernel k -append console=ttyS0"
            .split(' ')
            .map(String::from)
            .collect();
    ev.cmdline = Some("console=ttyS0".into());
    let exits = ev.exits.as_mut().unwrap();
    exits
        .pio
        .extend([(0x70, 20_001), (0x71, 20_000), (0x3f8, 21_000)]);
    exits.total += 61_001;
    ev
}

fn describes(f: &Finding) -> Vec<String> {
    f.fixes.iter().map(|c| c.change.describe()).collect()
}

#[test]
fn qemu_boots_get_qemu_options() {
    let ev = qemu_microvm();
    let rtc = &found("cmos-rtc", &ev)[0];
    assert!(
        rtc.evidence[0].contains("port I/O on 0x70-0x71: 40,065 of 64,975 exits"),
        "{:?}",
        rtc.evidence
    );
    assert_eq!(
        describes(rtc),
        [
            "kernel command line: initcall_blacklist=cmos_init",
            "QEMU options: -M ...,rtc=off"
        ]
    );
    assert!(rtc.fixes.iter().all(|f| f.triable == Triable::Yes));
    let console = &found("serial-console", &ev)[0];
    assert_eq!(
        describes(console)[1],
        "QEMU options: -serial none -chardev stdio,id=virtiocon0 -device virtio-serial-device -device virtconsole,chardev=virtiocon0 (in place of its -serial); kernel command line: console=hvc0"
    );
    // On q35 the transport is PCI, and there is no rtc=off: the kernel's
    // own fix is left.
    let mut q35 = qemu_microvm();
    q35.vmm_command[2] = "q35".into();
    assert!(describes(&found("serial-console", &q35)[0])[1].contains("virtio-serial-pci"));
    let kernel_only = ["kernel command line: initcall_blacklist=cmos_init"];
    assert_eq!(describes(&found("cmos-rtc", &q35)[0]), kernel_only);
    // rtc=off done already (the guest polled all the same): the kernel's.
    let mut off = qemu_microvm();
    off.vmm_command[2] = "microvm,rtc=off".into();
    assert_eq!(describes(&found("cmos-rtc", &off)[0]), kernel_only);
    // Done already on the command line too: no fix, no finding.
    off.cmdline = Some("console=ttyS0 initcall_blacklist=cmos_init".into());
    assert!(matches!(
        evaluate(rule("cmos-rtc"), &off),
        RuleOutcome::Clear
    ));
    // A few reads of the CMOS (bootscope's VM: 60 in a lab boot) are no
    // finding.
    let mut few = qemu_microvm();
    let pio = &mut few.exits.as_mut().unwrap().pio;
    pio.retain(|(p, _)| *p != 0x70 && *p != 0x71);
    pio.extend([(0x70, 30), (0x71, 30)]);
    assert!(matches!(
        evaluate(rule("cmos-rtc"), &few),
        RuleOutcome::Clear
    ));
    // No QEMU fix names a bootscope run option.
    for f in advise(&ev).findings {
        for c in &f.fixes {
            assert!(
                !matches!(c.change, ConcreteChange::RunFlags(_)),
                "{}: {c:?}",
                f.rule
            );
        }
    }
}

#[test]
fn each_vmm_in_its_own_terms() {
    let mut ev = qemu_microvm();
    ev.vmm = Vmm::CloudHypervisor;
    ev.vmm_command = "cloud-hypervisor --serial tty --console off --kernel k"
        .split(' ')
        .map(String::from)
        .collect();
    let console = &found("serial-console", &ev)[0];
    assert_eq!(
        describes(console)[1],
        "Cloud Hypervisor options: --serial off --console tty (in place of its --serial, --console); kernel command line: console=hvc0"
    );
    // Cloud Hypervisor always gives its guest a virtio-rng.
    assert!(matches!(
        evaluate(rule("no-entropy-source"), &ev),
        RuleOutcome::Clear
    ));
    ev.vmm = Vmm::Firecracker;
    ev.vmm_command = vec!["firecracker".into()];
    let console = &found("serial-console", &ev)[0];
    assert_eq!(
        describes(console)[1],
        "Firecracker: Firecracker has no virtio console: keep quiet (or loglevel=4) on the kernel command line"
    );
    assert_eq!(console.fixes[1].triable, Triable::No);
    // A VMM advise does not know: bootscope's terms, with a note.
    ev.vmm = Vmm::Other;
    ev.vmm_command = vec!["myvmm".into()];
    let console = &found("serial-console", &ev)[0];
    assert_eq!(describes(console)[1], "bootscope run --console virtio");
    assert_eq!(console.fixes[1].triable, Triable::BootscopeOnly);
    assert!(
        ev.notes()
            .iter()
            .any(|n| n.contains("bootscope run's terms")),
        "{:?}",
        ev.notes()
    );
}

#[test]
fn the_initramfs_stage_is_tried_with_only_the_modules_the_boot_loaded() {
    let mut ev = Evidence::read(&[fixture("journal-debian12-own.timeline.json")]).unwrap();
    let fix = |ev: &Evidence| found("initramfs-stage", ev)[0].fixes[0].clone();
    // The boot's modules not read (a timeline alone): advice that says so.
    let f = fix(&ev);
    assert_eq!(f.triable, Triable::No);
    assert!(
        matches!(&f.change, ConcreteChange::Advice(a) if a.contains("loaded modules were not read")),
        "{:?}",
        f.change
    );
    // Read, but no archive could be made: advice with why.
    ev.guest_modules = Some(vec!["ext4".into(), "virtio_blk".into()]);
    ev.initrd.as_mut().unwrap().modules_cpio_error = Some("it has no modules.dep".into());
    let f = fix(&ev);
    assert!(
        matches!(&f.change, ConcreteChange::Advice(a) if a.contains("none was made here: it has no modules.dep")),
        "{:?}",
        f.change
    );
    // Made: bootscope's run boots it in place of the initrd, --prove tries it.
    ev.initrd.as_mut().unwrap().modules_cpio = Some("/cache/initrd-ab-modules-cd.cpio".into());
    let f = fix(&ev);
    assert_eq!(
        f.change,
        ConcreteChange::VmmOptions {
            vmm: Vmm::Bootscope,
            args: vec!["--initrd".into(), "/cache/initrd-ab-modules-cd.cpio".into()],
            replace: vec!["--initrd".into()],
            machine: None,
            kernel: String::new(),
        }
    );
    assert_eq!(f.triable, Triable::Yes);
    // Cloud Hypervisor's own option, for its boot.
    ev.vmm = Vmm::CloudHypervisor;
    ev.vmm_command = ["cloud-hypervisor", "--kernel", "k", "--initramfs", "i"]
        .map(String::from)
        .to_vec();
    let f = fix(&ev);
    assert!(
        matches!(&f.change, ConcreteChange::VmmOptions { args, .. } if args[0] == "--initramfs"),
        "{:?}",
        f.change
    );
}

#[test]
fn the_boots_loaded_modules_come_from_its_exit_sites_or_guest_read() {
    let dir = tempfile::tempdir().unwrap();
    let base: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("lab-sites-loud.profile.json")).unwrap(),
    )
    .unwrap();
    let read = |doc: &serde_json::Value| {
        let path = dir.path().join("p.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        Evidence::read(&[path]).unwrap().guest_modules
    };
    let module = |name: &str| serde_json::json!({"name": name, "text_base": 1, "text_size": 4096, "text_symbols": 0});
    let mut own = base.clone();
    own["exits"]["sites"]["symbols"]["modules"] =
        serde_json::json!([module("virtio_blk"), module("ext4")]);
    assert_eq!(
        read(&own),
        Some(vec!["virtio_blk".to_string(), "ext4".into()])
    );
    // Another VMM's boot: the guest memory reader's list.
    let mut other = base.clone();
    other["guest_read"] = serde_json::json!({"modules": {"modules": [module("virtio_pci")]}});
    assert_eq!(read(&other), Some(vec!["virtio_pci".to_string()]));
    // Neither read: not known (no archive is made, the fix stays advice).
    let mut none = base;
    none["exits"]["sites"]["symbols"]["modules"] = serde_json::json!([]);
    assert_eq!(read(&none), None);
}
