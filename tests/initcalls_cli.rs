//! `bootscope initcalls CONSOLE-LOG` (the console fallback) and the input
//! checks of `run --initcalls`: no KVM needed.

mod support;

use support::bootscope_output as bootscope;
use support::scratch;

#[test]
fn a_console_log_with_initcall_debug_lines_gives_initcalls_and_levels() {
    let d = scratch("console");
    let log = d.join("console.log");
    std::fs::write(
        &log,
        "[    0.000000] Linux version 6.1.0\r\n\
[    0.300000] calling  init_mmap_min_addr+0x0/0x40 @ 1\r\n\
[    0.300010] initcall init_mmap_min_addr+0x0/0x40 returned 0 after 8 usecs\r\n\
[    0.400000] doing core, parsing ARGS: 'console=ttyS0'\r\n\
[    0.410000] calling  pci_subsys_init+0x0/0x7a @ 1\r\n\
[    0.530000] initcall pci_subsys_init+0x0/0x7a returned -19 after 120000 usecs\r\n",
    )
    .unwrap();
    let json = d.join("initcalls.json");
    let o = bootscope(&[
        "initcalls",
        log.to_str().unwrap(),
        "--output",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("initcalls: 2 in 2 levels"), "{stdout}");
    assert!(
        stdout.contains("console lines"),
        "the method is named: {stdout}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let calls = doc["initcalls"].as_array().unwrap();
    assert_eq!(calls[1]["name"], "pci_subsys_init");
    assert_eq!(calls[1]["level"], "core");
    assert_eq!(calls[1]["ret"], -19);
    assert_eq!(calls[1]["duration_ns"], 120_000_000u64);
    assert_eq!(calls[1]["start_ns"], 410_000_000u64);
    assert!(doc["clock"].is_null(), "no alignment from a console log");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_inputs_are_usage_errors() {
    let d = scratch("bad");
    let plain = d.join("plain.log");
    std::fs::write(&plain, "[    0.000000] Linux version 6.1.0\n").unwrap();
    let missing = d.join("missing.log");
    for (args, says) in [
        (
            vec!["initcalls", plain.to_str().unwrap()],
            "no initcall_debug lines",
        ),
        (
            vec!["initcalls", missing.to_str().unwrap()],
            "cannot read the console log",
        ),
        (
            vec![
                "run",
                "--kernel",
                missing.to_str().unwrap(),
                "--initcalls",
                "--initcalls-method",
                "log",
                "--cmdline",
                "console=ttyS0 debug",
                "--no-profile",
            ],
            "remove `debug`",
        ),
        (
            vec![
                "run",
                "--kernel",
                missing.to_str().unwrap(),
                "--initcalls",
                "--cmdline",
                "console=ttyS0 trace_clock=global",
                "--no-profile",
            ],
            "`trace_clock=global`",
        ),
        (
            vec!["run", "--initcalls-method", "log", "--no-profile"],
            "--initcalls",
        ),
        (
            vec!["run", "--initcalls", "--stop-after", "memory"],
            "--stop-after",
        ),
    ] {
        let o = bootscope(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
