//! `bootscope advise` on profiles captured in the lab (tests/fixtures),
//! and its refusals: bad input is exit status 2 with a message naming it,
//! before any boot.

mod support;

use support::*;

use std::process::Output;

fn advise(args: &[&str]) -> Output {
    bootscope()
        .arg("advise")
        .args(args)
        .output()
        .expect("bootscope runs")
}

#[test]
fn advice_from_a_loud_boot() {
    let t = recorded("lab-sites-loud.timeline.json");
    let p = recorded("lab-sites-loud.profile.json");
    let o = advise(&[&t, &p]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("1. kernel messages written to the serial console"),
        "{text}"
    );
    assert!(
        text.contains("fix: kernel command line: quiet (gives up; --prove tries it)"),
        "{text}"
    );
    assert!(
        text.contains("estimated saving: up to 2.37 s (estimate)"),
        "{text}"
    );
    assert!(
        text.contains(
            "kernel command line: mitigations=off (UNSAFE; tried only with --allow-unsafe)"
        ),
        "{text}"
    );
    assert!(text.contains("legacy-uarts (8250 driver probing legacy UARTs the VM does not have): needs `run --initcalls`"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.json");
    let svg = dir.path().join("a.svg");
    let o = advise(&[
        "--json",
        "--output",
        out.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        &p,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        doc,
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(&out).unwrap()).unwrap()
    );
    assert_eq!(
        (doc["schema"].as_str(), doc["version"].as_u64()),
        (Some("bootscope.advise"), Some(1))
    );
    assert_eq!(doc["findings"][0]["rule"], "serial-console");
    assert_eq!(
        doc["findings"][0]["fixes"][0]["change"]["kind"],
        "kernel_args"
    );
    assert!(doc.get("prove").is_none());
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg") && picture.contains("serial-console"),
        "{picture}"
    );
}

/// Exit status 2, a message holding `want`, and nothing booted.
fn refused(args: &[&str], want: &str) {
    let o = advise(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: {err}");
    assert!(
        !err.contains("advise: check boot"),
        "{args:?} booted: {err}"
    );
}

#[test]
fn bad_input_is_refused_before_any_boot() {
    let p = recorded("lab-sites-loud.profile.json");
    let p = p.as_str();
    refused(
        &[
            p,
            "--prove",
            "--prove-command",
            "qemu-system-x86_64 -hda d.img",
        ],
        "has no {cmdline} (QEMU is given no -kernel",
    );
    refused(
        &[p, "--prove", "--prove-command", "myvmm -append quiet"],
        "has no {cmdline} (another VMM is not rewritten by advise): put it where the VMM takes the kernel command line",
    );
    refused(
        &["--prove", "--budget", "0", "--", "run"],
        "--budget \"0\": give a number of boots",
    );
    refused(
        &["--prove", "--budget", "0s", "--", "run"],
        "--budget \"0s\"",
    );
    refused(
        &["--prove", "--budget", "5", "--", "run"],
        "--budget 5 boots cannot hold the check boot and one A/B bench",
    );
    refused(
        &["--prove", "--runs", "5", "--", "run"],
        "--runs 5: the paired test on 5 rounds can never give p below 0.05 (its smallest p is 0.062, every round faster); give --runs 6 or more",
    );
    refused(
        &["--prove", "--runs", "6", "--level", "0.01", "--", "run"],
        "give --runs 8 or more, or a larger --level",
    );
    refused(
        &["--prove", "--kinds", "kernel,firmware", "--", "run"],
        "firmware",
    );
    refused(
        &["--prove", "--", "run", "--timeline", "t.json"],
        "leave --timeline out of the run arguments",
    );
    refused(&["--prove"], "--prove needs the boot to measure");
    refused(&[p, "--", "run"], "add --prove");
    refused(&[], "give a timeline");
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{}").unwrap();
    refused(
        &[junk.to_str().unwrap()],
        "junk.json: its \"schema\" is missing",
    );
    refused(&["/nonexistent/t.json"], "cannot read /nonexistent/t.json");
}

#[test]
fn a_prove_command_that_does_not_boot_is_bad_input() {
    let p = recorded("lab-sites-loud.profile.json");
    let o = advise(&[&p, "--prove", "--prove-command", "false {cmdline}"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the boot to prove with does not boot as given: false"),
        "{err}"
    );
    assert!(err.contains("exit status 1"), "{err}");
    assert!(!err.contains("A/B"), "{err}");
    // A boot that ends well but never prints the userspace line.
    let o = advise(&[&p, "--prove", "--prove-command", "echo {cmdline}"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("never printed the userspace line"), "{err}");
    // bootscope run refusing its arguments.
    let o = advise(&["--prove", "--", "run", "--kernel", "/nonexistent/bzImage"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("does not boot as given") && err.contains("exit status 2"),
        "{err}"
    );
}

/// A profile of a QEMU microvm boot (the recorded quiet boot's exits
/// with the CMOS RTC polls QEMU's microvm RTC causes), as `profile` of
/// QEMU records it: advise names QEMU's options, not bootscope's.
#[test]
fn advice_on_a_qemu_profile_names_qemu_options() {
    let mut p = read_json(recorded("lab-nosites-quiet.profile.json"));
    let command = [
        "qemu-system-x86_64",
        "-M",
        "microvm",
        "-nographic",
        "-serial",
        "stdio",
        "-kernel",
        "k",
        "-append",
        "console=ttyS0",
    ];
    p["target"]["kind"] = "command".into();
    p["target"]["command"] = serde_json::json!(command);
    p["target"]["vmm"] = serde_json::json!({"kind": "qemu", "cmdline": "console=ttyS0"});
    p["exits"]["total"] = (p["exits"]["total"].as_u64().unwrap() + 40_001).into();
    let pio = p["exits"]["pio"].as_array_mut().unwrap();
    for (port, direction, count) in [(0x70, "write", 20_001), (0x71, "read", 20_000)] {
        pio.push(
            serde_json::json!({"port": port, "direction": direction, "size": 1, "count": count}),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qemu.profile.json");
    std::fs::write(&path, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = advise(&[path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("the CMOS RTC polled for the wall clock")
            && text.contains("fix: QEMU options: -M ...,rtc=off (gives up; --prove tries it)"),
        "{text}"
    );
    assert!(!text.contains("fix: bootscope run"), "{text}");
    assert!(
        text.contains("bootscope profile --initcalls -- VMM"),
        "{text}"
    );
    assert!(!stderr(&o).contains("inferred"), "{}", stderr(&o));
    // Without target.vmm, the VMM is inferred from the command, and said so.
    p["target"].as_object_mut().unwrap().remove("vmm");
    std::fs::write(&path, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = advise(&["--json", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("QEMU inferred from its command"),
        "{}",
        stderr(&o)
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["vmm"], "qemu");
}

/// A timeline of a systemd guest booted from its disk: kernel 0.5 s,
/// userspace 2.6 s with an initramfs, udev settle and a slow unit on the
/// chain to the workload, status lines on ttyS0.
fn systemd_guest_timeline(dir: &std::path::Path) -> String {
    let ms = 1_000_000u64;
    let unit = |name: &str, start: u64, d: u64| {
        serde_json::json!({"name": name, "start_ns": start * ms, "active_ns": (start + d) * ms,
                           "duration_ns": d * ms, "state": "active",
                           "guest_start_us": start * 1000, "guest_active_us": (start + d) * 1000})
    };
    let link = |name: &str, active: u64, d: u64| serde_json::json!({"name": name, "active_ns": active * ms, "duration_ns": d * ms});
    let phase = |name: &str, start: u64, end: u64, from: &str, to: &str| {
        serde_json::json!({"name": name, "start_ns": start * ms, "end_ns": end * ms,
                           "duration_ns": (end - start) * ms, "from": from, "to": to})
    };
    let doc = serde_json::json!({
        "schema": "bootscope.timeline", "version": 3, "clock": "CLOCK_MONOTONIC", "vmm": "bootscope 0.1.0",
        "host_kvm": "svm",
        "guest": {"kernel": "vmlinuz", "kernel_format": "bzimage", "cmdline": "console=ttyS0 root=/dev/vda1",
                  "kernel_mapped_bytes": 0},
        "outcome": {"reason": "acpi_power_off", "clean": true, "detail": ""},
        "marks": [
            {"name": "vmm: first KVM_RUN", "source": "vmm", "t_ns": 100 * ms},
            {"name": "systemd: started", "source": "guest_clock", "t_ns": 600 * ms},
            {"name": "port 0x80: userspace 0x60", "source": "debug_port", "t_ns": 3_200 * ms, "value": 96}
        ],
        "phases": [
            phase("kernel", 100, 600, "vmm: first KVM_RUN", "systemd: started"),
            phase("userspace", 600, 3_200, "systemd: started", "vmm: guest shutdown")
        ],
        "units": {
            "source": "systemd's journal in the disk image debian.raw",
            "systemd_version": "252.39-1~deb12u2",
            "units": [
                unit("systemd-fsck-root.service", 1_100, 80),
                unit("systemd-udev-settle.service", 1_200, 700),
                unit("e2scrub_reap.service", 1_300, 400),
                unit("bootscope-workload.service", 3_000, 10)
            ],
            "chain_target": "bootscope-workload.service",
            "critical_chain": [
                link("bootscope-workload.service", 3_010, 10),
                link("multi-user.target", 3_000, 0),
                link("e2scrub_reap.service", 1_700, 400),
                link("systemd-udev-settle.service", 1_900, 700)
            ],
            "initramfs": {"source": "journal", "start_ns": 100 * ms, "end_ns": 600 * ms,
                          "duration_ns": 500 * ms, "end": "systemd started",
                          "steps": [], "drivers": ["virtio_blk"], "root_device": "vda1", "messages": 12}
        }
    });
    let path = dir.join("debian.timeline.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn advice_on_a_systemd_guest_s_userspace() {
    let dir = tempfile::tempdir().unwrap();
    let t = systemd_guest_timeline(dir.path());
    let o = advise(&["--json", &t]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = doc["findings"].as_array().unwrap();
    let rule = |id: &str| {
        findings
            .iter()
            .find(|f| f["rule"] == id)
            .unwrap_or_else(|| panic!("no {id} in {findings:?}"))
    };
    // Ranked by the userspace time each accounts for.
    assert_eq!(findings[0]["rule"], "wait-units");
    assert_eq!(findings[0]["accounts_ns"], 700_000_000u64);
    assert_eq!(rule("initramfs-stage")["accounts_ns"], 500_000_000u64);
    let slow = rule("slow-unit-on-chain");
    assert_eq!(slow["subject"], "e2scrub_reap.service");
    assert_eq!(slow["phase"], "userspace");
    assert_eq!(
        slow["fixes"][0]["change"]["value"],
        "systemd.mask=e2scrub_reap.service"
    );
    assert_eq!(slow["fixes"][0]["triable"], "yes");
    assert_eq!(
        rule("systemd-status-on-serial")["fixes"][0]["change"]["value"],
        "systemd.show_status=false"
    );
    assert_eq!(
        rule("root-fsck")["fixes"][0]["change"]["value"],
        "fsck.mode=skip"
    );

    let o = advise(&[&t]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("multi-user.target waited for it; it accounts for 400.0 ms of the userspace phase's 2.60 s"),
        "{text}"
    );
    assert!(
        text.contains("kernel command line: systemd.mask=systemd-udev-settle.service"),
        "{text}"
    );
}

/// `--together-first`: two fixes that only save together (a VMM that is
/// quick only with both words) are proven as a set, where one by one
/// neither is, and the proven line is both; without the option nothing is
/// accepted. The stand-in VMM prints the userspace line after 0.4 s, or
/// after 0.1 s with both words.
#[test]
fn fixes_proven_together_first() {
    let p = recorded("lab-sites-loud.profile.json");
    let dir = scratch("together-first");
    let vmm = dir.join("vmm.sh");
    std::fs::write(
        &vmm,
        r#"case " $* " in *" quiet "*) q=1 ;; *) q=0 ;; esac
case " $* " in *" mitigations=off "*) m=1 ;; *) m=0 ;; esac
if [ "$q$m" = 11 ]; then sleep 0.1; else sleep 0.4; fi
echo "Run /init as init process"
"#,
    )
    .unwrap();
    let template = format!("sh {} {{cmdline}}", vmm.display());
    let prove = |extra: &[&str], json: &std::path::Path| {
        let mut args = vec![
            p.as_str(),
            "--prove",
            "--prove-command",
            &template,
            "--cmdline",
            "console=ttyS0",
            "--kinds",
            "kernel",
            "--allow-unsafe",
            "--output",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        advise(&args)
    };
    let json = dir.join("together.json");
    let o = prove(&["--together-first"], &json);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let doc = read_json(&json);
    let proof = &doc["prove"];
    assert_eq!(proof["combined_first"], true, "{proof}");
    let combined = &proof["combined"];
    assert_eq!(combined["verdict"], "accepted", "{combined}");
    assert_eq!(
        combined["changes"].as_array().unwrap().len(),
        2,
        "{combined}"
    );
    let line = proof["final_cmdline"].as_str().unwrap();
    assert!(
        line.contains("quiet") && line.contains("mitigations=off"),
        "{line}"
    );
    assert!(
        out.contains(
            "all 2 fixes together, measured first, against the original (the proven line)"
        ),
        "{out}"
    );
    // Each fix was still measured alone, after the set.
    assert_eq!(proof["fixes"].as_array().unwrap().len(), 2, "{proof}");

    // One by one, neither saves anything, so the line does not get both
    // (a fix alone can pass the test by chance: all six rounds faster in
    // noise, p = 1/64; both would also need their combination to pass).
    let json = dir.join("alone.json");
    let o = prove(&[], &json);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let proof = &read_json(&json)["prove"];
    assert!(proof.get("combined_first").is_none(), "{proof}");
    assert!(proof.get("together").is_none(), "{proof}");
    let line = proof["final_cmdline"].as_str().unwrap();
    assert!(
        !(line.contains("quiet") && line.contains("mitigations=off")),
        "{proof}"
    );
}
