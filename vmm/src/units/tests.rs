//! Tests on a real record: `testdata/debian12-units.txt` (how it was made:
//! `testdata/README.md`).

use super::record::{parse, parse_systemd_span};
use super::*;

const FIXTURE: &str = include_str!("testdata/debian12-units.txt");

fn fixture() -> Record {
    parse(FIXTURE).expect("the fixture parses")
}

/// Marks of a made-up boot whose marker write is at `marker_t_ns`.
fn marks(first_run_ns: u64, marker_t_ns: u64) -> Vec<TimelineMark> {
    let vmm = |name: &str, t_ns| TimelineMark {
        name: name.into(),
        source: MarkSource::Vmm,
        t_ns,
        value: None,
        vcpu: None,
    };
    vec![
        vmm(vmm_marks::PROCESS_START, 0),
        vmm(vmm_marks::FIRST_KVM_RUN, first_run_ns),
        TimelineMark {
            name: bootscope_model::mark::debug_port_mark_name(0x60),
            source: MarkSource::DebugPort,
            t_ns: marker_t_ns,
            value: Some(0x60),
            vcpu: Some(0),
        },
        vmm(vmm_marks::GUEST_SHUTDOWN, marker_t_ns + 2_000_000_000),
        vmm(vmm_marks::VMM_EXIT, marker_t_ns + 2_100_000_000),
    ]
}

#[test]
fn the_fixture_has_the_boot_s_units() {
    let r = fixture();
    assert_eq!(r.marker_value, 0x60);
    let (before, after) = r.marker_guest_ns;
    assert!(before > 0 && after >= before);
    let activated = r.units.iter().filter(|u| u.inactive_exit_us > 0).count();
    assert!(activated >= 30, "{activated} units activated");
    let workload = r.unit(WORKLOAD_UNIT).expect("the workload unit");
    assert!(workload.after.iter().any(|a| a == "multi-user.target"));
    // The workload started after multi-user.target was reached, and wrote
    // the marker after it started.
    let target = r.unit("multi-user.target").unwrap();
    assert!(workload.inactive_exit_us >= target.active_enter_us);
    assert!(before / 1000 >= workload.inactive_exit_us);
    let (userspace, finish) = (
        r.manager_us("UserspaceTimestampMonotonic"),
        r.manager_us("FinishTimestampMonotonic"),
    );
    assert!(finish >= userspace);
    // systemd's own line says the same as its manager's timestamps.
    let (_, kernel_us, userspace_us) = record::startup_finished(&r.analyze).unwrap();
    assert!(
        kernel_us.abs_diff(userspace) <= 1000,
        "{kernel_us} {userspace}"
    );
    assert!(userspace_us.abs_diff(finish - userspace) <= 1000);
}

#[test]
fn alignment_puts_the_marker_where_the_vmm_saw_it() {
    let r = fixture();
    let marker_t_ns = 455_876_543_210;
    let doc = units_doc(FIXTURE, "fixture", &marks(1_000_000, marker_t_ns), None);
    assert_eq!(doc.error, None);
    let clock = doc.clock.as_ref().unwrap();
    let (before, after) = r.marker_guest_ns;
    let mid = (before + (after - before) / 2) as i64;
    assert_eq!(clock.offset_ns + mid, marker_t_ns as i64);
    assert!(clock.error_ns >= (after - before) / 2);
    // Every unit keeps the guest's own timestamps and spans.
    assert!(doc.units.len() >= 30);
    for u in &doc.units {
        let own = r.unit(&u.name).unwrap();
        assert_eq!(u.guest_start_us, own.inactive_exit_us);
        assert_eq!(
            u.start_ns as i64,
            own.inactive_exit_us as i64 * 1000 + clock.offset_ns,
            "{}",
            u.name
        );
        if let Some(active) = u.active_ns {
            assert_eq!(active - u.start_ns, u.duration_ns, "{}", u.name);
        }
    }
    assert!(doc.units.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
}

/// `systemd-analyze critical-chain`'s own output in the record: the unit
/// names, top first.
fn systemd_chain(analyze: &str) -> Vec<String> {
    analyze
        .lines()
        .skip_while(|l| !l.starts_with(WORKLOAD_UNIT))
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let l = l.trim_start_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-');
            l.split_whitespace().next().map(str::to_string)
        })
        .collect()
}

#[test]
fn the_critical_chain_is_systemd_analyze_s() {
    let r = fixture();
    let own = systemd_chain(&r.analyze);
    assert!(
        own.len() >= 3,
        "systemd-analyze's chain in the fixture: {own:?}"
    );
    let ours: Vec<String> = chain::critical_chain(&r, WORKLOAD_UNIT)
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(ours, own);
    // The figures too: systemd-analyze prints, from systemd's start, when
    // each unit started (@) and how long it took (+) if it took time, else
    // when it became active (@); the target itself only with its +.
    let userspace = r.manager_us("UserspaceTimestampMonotonic");
    for link in chain::critical_chain(&r, WORKLOAD_UNIT).into_iter().skip(1) {
        let line = r
            .analyze
            .lines()
            .find(|l| l.contains(&format!("{} @", link.name)))
            .unwrap();
        let at = line.split('@').nth(1).unwrap().split(" +").next().unwrap();
        let at_us = parse_systemd_span(at.trim()).unwrap();
        let ours = if link.duration_us() > 0 {
            assert!(line.contains(" +"), "{line}");
            let plus = parse_systemd_span(line.split(" +").nth(1).unwrap().trim()).unwrap();
            assert!(
                plus.abs_diff(link.duration_us()) <= (plus / 500).max(1000),
                "{line}"
            );
            link.activating_us - userspace
        } else {
            link.activated_us - userspace
        };
        // systemd prints milliseconds with 3 digits at most.
        let tolerance = (at_us / 500).max(1000);
        assert!(at_us.abs_diff(ours) <= tolerance, "{line}: ours {ours} us");
    }
}

#[test]
fn applied_units_end_the_kernel_phase_at_systemd_s_start() {
    let marks = marks(1_000_000, 455_000_000_000);
    let mut doc: Timeline = serde_json::from_value(serde_json::json!({
        "schema": "bootscope.timeline", "version": 2, "clock": "", "vmm": "", "host_kvm": "svm",
        "guest": {"kernel": "k", "kernel_format": "bzimage", "cmdline": "", "memory_bytes": 1, "vcpus": 1},
        "outcome": {"reason": "acpi_power_off", "clean": true, "detail": ""},
        "marks": marks, "phases": derive_phases(&marks, None), "kvm_stats": {}
    }))
    .unwrap();
    let units = units_doc(FIXTURE, "fixture", &doc.marks, None);
    let startup = units.startup.clone().expect("systemd's startup line");
    apply(&mut doc, units, None);
    let kernel = doc.phase("kernel").unwrap();
    assert_eq!(kernel.to, SYSTEMD_STARTED);
    assert_eq!(kernel.end_ns, startup.systemd_start_ns);
    let user = doc.phase("userspace").unwrap();
    assert_eq!(user.from, SYSTEMD_STARTED);
    assert!(doc.marks.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    // systemd's userspace figure is the timeline's (one clock, aligned),
    // within 5 %; the kernel's differs by the time before its clock started.
    assert!(
        (0.95..=1.05).contains(&startup.userspace_ratio),
        "{startup:?}"
    );
    assert!(startup.timeline_userspace_ns.abs_diff(startup.userspace_ns) <= 1_000_000);
    let clock = doc.units.as_ref().unwrap().clock.clone().unwrap();
    assert_eq!(startup.kernel_before_clock_ns, clock.offset_ns - 1_000_000);
    let kernel_gap = startup.timeline_kernel_ns as i64 - startup.kernel_ns as i64;
    assert!(
        (kernel_gap - startup.kernel_before_clock_ns).abs() <= 1_000_000,
        "{startup:?}"
    );
    let text = summary(doc.units.as_ref().unwrap(), 0);
    assert!(
        text.contains("critical chain to bootscope-workload.service"),
        "{text}"
    );
    assert!(text.contains("Startup finished in"), "{text}");
    // Booted without an initrd: no initramfs stage.
    assert!(!text.contains("initramfs:"), "{text}");
}

#[test]
fn an_initrd_boot_has_its_stage_from_run_init_to_systemd() {
    let mut marks = marks(1_000_000, 455_000_000_000);
    marks.push(TimelineMark {
        name: "serial: run init".into(),
        source: MarkSource::Serial,
        t_ns: 2_000_000,
        value: None,
        vcpu: None,
    });
    marks.sort_by_key(|m| m.t_ns);
    let mut doc = Timeline {
        guest: Some(crate::timeline::TimelineGuest {
            initrd: Some("initrd.img".into()),
            ..Default::default()
        }),
        marks,
        ..Timeline::default()
    };
    let units = units_doc(FIXTURE, "fixture", &doc.marks, None);
    let systemd_start = units.startup.as_ref().unwrap().systemd_start_ns;
    apply(&mut doc, units, None);
    let units = doc.units.as_ref().unwrap();
    let stage = units.initramfs.as_ref().expect("an initramfs stage");
    assert_eq!((stage.start_ns, stage.end_ns), (2_000_000, systemd_start));
    assert_eq!(stage.duration_ns, systemd_start - 2_000_000);
    let text = summary(units, 1_000_000);
    assert!(text.contains("initramfs: "), "{text}");
    assert!(text.contains("(Run /init)"), "{text}");
}

#[test]
fn a_record_without_this_boot_s_marker_is_stale() {
    let mut m = marks(1_000_000, 5_000_000_000);
    m.retain(|m| m.source != MarkSource::DebugPort);
    let doc = units_doc(FIXTURE, "fixture", &m, None);
    assert!(doc.error.unwrap().contains("earlier boot"));
    assert!(doc.units.is_empty());
    let doc = units_doc("not a record", "fixture", &m, None);
    assert!(doc.error.unwrap().contains("unreadable"));
}

#[test]
fn a_named_workload_unit_ends_the_record_s_chain() {
    let m = marks(1_000_000, 5_000_000_000);
    let own = units_doc(FIXTURE, "fixture", &m, None);
    assert_eq!(own.chain_target, WORKLOAD_UNIT);
    let named = units_doc(FIXTURE, "fixture", &m, Some("multi-user.target"));
    assert_eq!(named.chain_target, "multi-user.target");
    assert_eq!(named.source, "fixture");
    // The chain below multi-user.target is the workload's, one link shorter.
    let names =
        |d: &UnitsDoc| -> Vec<String> { d.critical_chain.iter().map(|l| l.name.clone()).collect() };
    assert_eq!(names(&named)[..], names(&own)[1..]);
    let absent = units_doc(FIXTURE, "fixture", &m, Some("app.service"));
    assert_eq!(absent.chain_target, WORKLOAD_UNIT);
    assert!(
        absent
            .source
            .contains("app.service (--workload-unit) did not start in this boot"),
        "{}",
        absent.source
    );
}

#[test]
fn a_workload_unit_name_is_checked() {
    for good in [
        "app.service",
        "multi-user.target",
        "getty@ttyS0.service",
        "x.scope",
    ] {
        assert_eq!(check_unit_name(good), Ok(()), "{good}");
    }
    let long = format!("{}.service", "a".repeat(250));
    for bad in [
        "",
        "app",
        ".service",
        "my app.service",
        "../app.service",
        long.as_str(),
    ] {
        let e = check_unit_name(bad).unwrap_err();
        assert!(e.contains("is not a systemd unit name"), "{bad}: {e}");
    }
}
