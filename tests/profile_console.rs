//! `bootscope profile` reads the launched command's console for boot
//! milestones: its standard output (passed through unchanged), or a
//! `-serial file:PATH` it names (what the file held before the command
//! rewrote it is not read). The milestones open the kernel and userspace
//! phases.

mod support;

use support::*;

/// The `serial:` marks of a profile, in time order, with their times.
fn console_marks(p: &bootscope_profiler::Profile) -> Vec<(String, u64)> {
    let mut m: Vec<(String, u64)> = p
        .marks
        .iter()
        .filter(|m| m.source == bootscope_model::mark::MarkSource::Serial)
        .map(|m| (m.name.clone(), m.t_ns))
        .collect();
    m.sort_by_key(|(_, t)| *t);
    m
}

fn phase_names(p: &bootscope_profiler::Profile) -> Vec<&str> {
    p.phases.iter().map(|s| s.name.as_str()).collect()
}

#[test]
fn standard_output_passes_through_and_gives_the_milestones() {
    require_bpf!();
    let dir = scratch("console-stdout");
    let out = dir.join("p.json");
    let script = "echo 'SeaBIOS (version 1.16.2)'; sleep 0.2; \
                  echo '[    0.000000] Linux version 6.1.0-56-amd64 (test)'; sleep 0.3; \
                  printf 'Run /init as init process'";
    let o = profile_command(&out, &["sh", "-c", script], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Every byte reached bootscope's own standard output, unchanged.
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "SeaBIOS (version 1.16.2)\n[    0.000000] Linux version 6.1.0-56-amd64 (test)\n\
         Run /init as init process"
    );
    let p = read_profile(&out);
    let marks = console_marks(&p);
    let names: Vec<&str> = marks.iter().map(|(n, _)| n.as_str()).collect();
    // The last line has no newline: it is matched at the end of output.
    assert_eq!(
        names,
        [
            "serial: firmware banner",
            "serial: kernel banner",
            "serial: run init"
        ]
    );
    // The sleeps between the lines are in the marks' times.
    assert!(marks[1].1 - marks[0].1 >= 150_000_000, "{marks:?}");
    assert!(marks[2].1 - marks[1].1 >= 250_000_000, "{marks:?}");
    assert_eq!(phase_names(&p), ["firmware", "kernel", "userspace"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_named_serial_file_is_read_from_its_rewrite() {
    require_bpf!();
    let dir = scratch("console-file");
    let out = dir.join("p.json");
    let console = dir.join("console.log");
    // An earlier run's console: not this boot's.
    std::fs::write(&console, "Run /init as init process\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let c = console.to_str().unwrap();
    let script = format!(
        "sleep 0.2; echo 'Linux version 6.1.0' > {c}; sleep 0.3; \
         echo 'Run /init as init process' >> {c}; sleep 0.2"
    );
    // `sh -c SCRIPT NAME ARGS...`: the QEMU-style option is an argument
    // the script ignores.
    let serial = format!("file:{c}");
    let o = profile_command(&out, &["sh", "-c", &script, "sh", "-serial", &serial], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = read_profile(&out);
    let marks = console_marks(&p);
    let names: Vec<&str> = marks.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["serial: kernel banner", "serial: run init"],
        "{marks:?}"
    );
    // Not before the rewrite (0.2 s in), and read every 20 ms.
    assert!(marks[0].1 >= 150_000_000, "{marks:?}");
    assert!(marks[1].1 - marks[0].1 >= 250_000_000, "{marks:?}");
    assert_eq!(phase_names(&p), ["kernel", "userspace"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
