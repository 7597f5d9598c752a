//! Each run leads a process group of its own, and nothing of it outlives
//! it: a run that ends leaving a background job, one stopped and one that
//! overstays, each a shell with children.

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bootscope_bench::runner::{execute, ConsolePattern};

/// Processes whose command line is `words`.
fn processes(words: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.trim_end() == words).then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

fn sh(script: &str) -> Vec<OsString> {
    ["sh", "-c", script].iter().map(OsString::from).collect()
}

#[test]
fn a_run_that_ends_leaves_no_background_job() {
    let started = ConsolePattern::parse("started=^started$").unwrap();
    let e = execute(
        &sh("sleep 987.25 & echo started"),
        &[started],
        Duration::from_secs(30),
        None,
    )
    .unwrap();
    assert_eq!(e.exit_code, Some(0));
    assert!(!e.timed_out);
    assert!(processes("sleep 987.25").is_empty(), "left behind");
    // The job held standard output open: it was ended with the group, so
    // the console reader saw the end of its pipe and handed over what it
    // read. Had the job been left to run, the reader would have been given
    // up after its grace and the console would be empty, however long
    // the host took.
    assert!(e.console.contains_key("started"), "{:?}", e.console);
}

#[test]
fn a_stopped_run_is_ended_with_its_group() {
    let stop = Arc::new(AtomicBool::new(false));
    let setter = stop.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        setter.store(true, Ordering::SeqCst);
    });
    let e = execute(
        &sh("sleep 986.25 & sleep 986.25"),
        &[],
        Duration::from_secs(30),
        Some(&stop),
    )
    .unwrap();
    t.join().unwrap();
    assert_ne!(e.exit_code, Some(0));
    assert!(processes("sleep 986.25").is_empty(), "left behind");
}

#[test]
fn an_overstaying_run_is_killed_with_its_group() {
    let e = execute(
        &sh("sleep 985.25 & sleep 985.25"),
        &[],
        Duration::from_millis(300),
        None,
    )
    .unwrap();
    assert!(e.timed_out);
    assert!(processes("sleep 985.25").is_empty(), "left behind");
}
