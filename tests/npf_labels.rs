//! Nested page fault ranges labelled with what bootscope's VMM placed in
//! guest memory, on a real lab boot (tests/fixtures/README.md): the labels
//! come from the run's timeline (`guest.regions`), and two independent
//! attributions of the same faults agree: by guest-physical address (the
//! range's label) and by guest RIP (the exit sites' functions).

mod support;

use std::path::Path;

use bootscope_profiler::sites::GuestRegion;
use bootscope_profiler::Profile;

use support::{read_json, recorded};

fn regions() -> Vec<GuestRegion> {
    let t = read_json(recorded("lab-sites-loud.timeline.json"));
    serde_json::from_value(t["guest"]["regions"].clone()).unwrap()
}

#[test]
fn labels_follow_the_timeline_and_agree_with_the_faulting_code() {
    let p = Profile::read(Path::new(&recorded("lab-sites-loud.profile.json"))).unwrap();
    let mut sites = p.exits.sites.clone().expect("exits.sites");
    // The labels the run wrote are the ones its timeline's regions give.
    let written: Vec<Option<String>> = sites.npf_ranges.iter().map(|r| r.label.clone()).collect();
    assert!(written.iter().all(Option::is_some), "every range labelled");
    for r in &mut sites.npf_ranges {
        r.label = None;
    }
    sites.label_npf_ranges(&regions());
    let again: Vec<Option<String>> = sites.npf_ranges.iter().map(|r| r.label.clone()).collect();
    assert_eq!(written, again);
    // The ranges add up to the npf reason.
    let npf = p
        .exits
        .by_reason
        .iter()
        .find(|r| r.reason == "npf")
        .unwrap()
        .count;
    assert_eq!(sites.npf_ranges.iter().map(|r| r.count).sum::<u64>(), npf);
    // Faults in the I/O APIC's page are exactly those of the guest's I/O
    // APIC code, those in the local APIC's page those of its local APIC
    // code: the address and the instruction tell the same story.
    let in_range = |what: &str| -> u64 {
        let v = sites
            .npf_ranges
            .iter()
            .filter(|r| r.label.as_deref().is_some_and(|l| l.starts_with(what)));
        v.map(|r| r.count).sum()
    };
    let by_code = |pred: &dyn Fn(&str) -> bool| -> u64 {
        let v = sites
            .sites
            .iter()
            .filter(|s| s.reason == "npf" && pred(&s.function_name()));
        v.map(|s| s.count).sum()
    };
    let ioapic = in_range("I/O APIC (MMIO)");
    assert!(ioapic > 100, "{ioapic}");
    assert_eq!(
        ioapic,
        by_code(&|f| f.contains("ioapic") || f.contains("io_apic"))
    );
    assert_eq!(
        in_range("local APIC (MMIO)"),
        by_code(&|f| f.starts_with("native_apic_mem_"))
    );
    // The kernel image's ranges are where the VMM put the kernel.
    let kernel = regions()
        .into_iter()
        .find(|g| g.name == "kernel image")
        .unwrap();
    for r in sites
        .npf_ranges
        .iter()
        .filter(|r| r.label.as_deref() == Some("kernel image"))
    {
        assert!(
            r.gpa_start >= kernel.start && r.gpa_end <= kernel.end,
            "{r:?}"
        );
    }
}
