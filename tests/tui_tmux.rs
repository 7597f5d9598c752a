//! The live TUI as a user runs it: `bootscope run --tui` and `bootscope
//! profile --tui` inside a tmux session of fixed size, keys sent with
//! `send-keys`, the screen read with `capture-pane`. Checks that the
//! phases, the thread rows and the console appear, that the final state
//! stays until `q` (or Ctrl-C), and that quitting leaves the shell's
//! screen as it was: not on the alternate screen, cursor shown, terminal
//! back in canonical mode with echo.
//!
//! Skips (printing SKIP and why) without tmux or /dev/kvm; the QEMU case
//! also needs eBPF profiling (root, BTF, tracefs) and QEMU 7.2 or later.

mod support;

use support::*;

use std::path::Path;
use std::time::{Duration, Instant};

use support::tmux::Tmux;

/// How long a wait for the screen may take before it fails: generous, a
/// loaded host must not fail a test; it only reports what never came.
fn cap() -> Duration {
    Duration::from_secs(120)
}

/// The guest's --timeout where the test stops the guest itself: far
/// beyond [`cap`], so a guest left running shows as a wait that failed.
const GUEST_TIMEOUT: u64 = 600;

/// Asserts the terminal is as the shell left it: main screen, cursor
/// shown, canonical mode with echo, no TUI left on screen.
fn assert_clean(tmux: &Tmux, screen: &str) {
    assert_eq!(
        tmux.display("#{alternate_on}"),
        "0",
        "still on the alternate screen"
    );
    assert_eq!(tmux.display("#{cursor_flag}"), "1", "cursor still hidden");
    for tui_text in ["Boot phases", "Exit reasons", "q quit"] {
        assert!(
            !screen.contains(tui_text),
            "TUI text {tui_text:?} left on the screen:\n{screen}"
        );
    }
    let (modes, s) = tmux.terminal_modes("icanon|echo|isig");
    assert_eq!(
        modes, "isig icanon echo MODES",
        "terminal modes not restored:\n{s}"
    );
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_bootscope")
}

/// Phase durations (ms) from a timeline file.
fn phase_ms(timeline: &Path, name: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(timeline).ok()?).ok()?;
    v["phases"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["duration_ns"].as_u64())
        .map(|ns| ns as f64 / 1e6)
}

#[test]
fn run_tui_shows_phases_threads_console_and_quits_clean() {
    require_kvm!();
    let Some(tmux) = Tmux::start("run", "tui-test") else {
        return;
    };
    let dir = scratch("tui-run");
    let timeline = dir.join("timeline.json");
    tmux.type_line(&format!(
        "cd {} && {} run --tui --kernel {} --timeout 5 --timeline {}; echo EXIT=$?",
        dir.display(),
        bin(),
        fixture("mini-bzimage-hlt.bin"),
        timeline.display()
    ));
    // Live: the guest reached userspace, which is the running phase.
    let live = tmux.wait_for("the live boot", cap(), |s| {
        s.contains("LIVE") && s.contains("userspace") && s.contains("vcpu0")
    });
    assert!(live.contains("Boot phases"), "{live}");
    assert!(live.contains("guest boot"), "{live}");
    // The console went to a file, shown in its pane, not over the screen.
    assert!(
        live.contains("Guest console (moved off the screen)"),
        "{live}"
    );
    // The final state stays on screen after the guest ends.
    let ended = tmux.wait_for("the end of the run", cap(), |s| s.contains("ENDED"));
    assert!(ended.contains("fixture: userspace reached"), "{ended}");
    assert!(ended.contains("vmm teardown"), "{ended}");
    assert!(ended.contains("vcpu0"), "{ended}");
    // How long the final screen was shown, as this test saw it: the run
    // ended before it, so a teardown that counted the time shown would
    // be at least this long, whatever the host's load.
    let shown = Instant::now();
    std::thread::sleep(Duration::from_millis(4000));
    assert!(tmux.screen().contains("ENDED"), "the final state went away");
    tmux.send(&["q"]);
    let held = shown.elapsed();
    let (code, screen) = tmux.wait_exit(cap());
    let all = tmux.screen_and_history();
    // The fixture halts forever: --timeout ends it, an unclean outcome.
    assert_eq!(code, 1, "{all}");
    assert!(all.contains("the guest console is in"), "{all}");
    assert_clean(&tmux, &screen);
    // Looking at the final screen is not VMM teardown.
    let teardown = phase_ms(&timeline, "vmm teardown").expect("a teardown phase");
    assert!(
        teardown < held.as_secs_f64() * 1000.0,
        "vmm teardown {teardown:.0} ms includes the time the final screen was shown"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_before_the_end_leaves_the_terminal_clean() {
    require_kvm!();
    let Some(tmux) = Tmux::start("ctrlc", "tui-test") else {
        return;
    };
    let dir = scratch("tui-ctrlc");
    tmux.type_line(&format!(
        "cd {} && {} run --tui --no-summary --kernel {} --timeout {GUEST_TIMEOUT}; echo EXIT=$?",
        dir.display(),
        bin(),
        fixture("mini-bzimage-hlt.bin"),
    ));
    tmux.wait_for("the live boot", cap(), |s| {
        s.contains("LIVE") && s.contains("userspace")
    });
    tmux.send(&["C-c"]);
    // The UI closes and the guest is stopped: the command ends long
    // before the guest's --timeout, so waiting for its end (capped well
    // under that timeout) tells a stopped guest from one left running.
    let s = tmux.wait_for("the UI to close", cap(), |s| {
        s.contains("stopping the guest")
    });
    assert_eq!(tmux.display("#{alternate_on}"), "0", "{s}");
    let (code, screen) = tmux.wait_exit(cap());
    assert_eq!(code, 1, "{screen}");
    assert_clean(&tmux, &screen);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn profile_tui_shows_qemu_prealloc_threads_and_writes_the_profile() {
    require_bpf!();
    require_kvm!();
    require_qemu_thread_context!();
    let Some(tmux) = Tmux::start("qemu", "tui-test") else {
        return;
    };
    let dir = scratch("tui-qemu");
    let out = dir.join("profile.json");
    // QEMU preallocates 1 GiB with two touch_pages threads, then its
    // monitor reads `quit` and it exits.
    let qemu = "echo quit | qemu-system-x86_64 -enable-kvm -S -M microvm -nodefaults \
        -display none -name debug-threads=on -m 1G \
        -object thread-context,id=tc0,node-affinity=0 \
        -object memory-backend-ram,id=m0,size=1G,prealloc=on,prealloc-threads=2,prealloc-context=tc0 \
        -machine memory-backend=m0 -monitor stdio";
    tmux.type_line(&format!(
        "cd {} && {} profile --tui --no-summary --output {} -- sh -c '{qemu}'; echo EXIT=$?",
        dir.display(),
        bin(),
        out.display()
    ));
    let ended = tmux.wait_for("the end of QEMU", cap(), |s| s.contains("ENDED (exit 0)"));
    assert!(ended.contains("Preallocation threads (2 of"), "{ended}");
    let rows: Vec<&str> = ended
        .lines()
        .filter(|l| l.contains("touch_pages") && l.contains("prealloc"))
        .collect();
    assert_eq!(rows.len(), 2, "two touch_pages rows:\n{ended}");
    for r in &rows {
        assert!(r.contains("MiB"), "pages touched shown: {r}");
    }
    assert!(
        ended.contains("NUMA locality") && ended.contains("node 0"),
        "{ended}"
    );
    // QEMU's monitor output is in the console pane, not over the screen.
    assert!(ended.contains("Command output: "), "{ended}");
    assert!(ended.contains("QEMU"), "{ended}");
    // `e` writes a snapshot of what is shown.
    tmux.send(&["e"]);
    let s = tmux.wait_for("the snapshot", cap(), |s| {
        s.contains("snapshot written to ")
    });
    let snap = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("bootscope-snapshot-") && n.ends_with(".json"))
        })
        .unwrap_or_else(|| panic!("no snapshot file in {}:\n{s}", dir.display()));
    let snap = read_profile(&snap);
    assert_eq!(
        snap.threads.iter().filter(|t| t.role == "prealloc").count(),
        2
    );
    tmux.send(&["q"]);
    let (code, screen) = tmux.wait_exit(cap());
    assert_eq!(code, 0, "{screen}");
    assert_clean(&tmux, &screen);
    // The profile is written as without --tui.
    let p = read_profile(&out);
    assert_eq!(p.target.exit_code, Some(0));
    let touched: u64 = p
        .threads
        .iter()
        .filter(|t| t.name.starts_with("touch_pages"))
        .map(|t| t.bytes_allocated)
        .sum();
    assert!(
        touched >= 900 << 20,
        "touch_pages allocated {touched} bytes"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tui_without_a_terminal_says_to_use_output() {
    let me = std::process::id().to_string();
    for args in [
        vec!["profile", "--tui", "--pid", me.as_str()],
        vec!["run", "--tui", "--kernel", "/nonexistent"],
    ] {
        let o = run(bootscope().args(&args), None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(
                "--tui needs a terminal on standard output; use --output FILE to save the profile instead"
            ),
            "{}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty(), "nothing drawn on a pipe");
    }
}

/// The sample count `sample N/M` of the replay's status line.
fn samples_seen(screen: &str) -> Option<u32> {
    let rest = screen.split("sample ").nth(1)?;
    rest.split('/').next()?.trim().parse().ok()
}

#[test]
fn tui_browses_a_saved_profile_scrubs_switches_panes_and_quits() {
    let Some(tmux) = Tmux::start("browse", "tui-test") else {
        return;
    };
    let dir = scratch("tui-browse");
    tmux.type_line(&format!(
        "cd {} && {} tui {} --timeline {}; echo EXIT=$?",
        dir.display(),
        bin(),
        recorded("lab-replay.profile.json"),
        recorded("lab-replay.timeline.json"),
    ));
    // It opens at the end of the profile: the whole boot, every sample.
    let end = tmux.wait_for("the replay", cap(), |s| {
        s.contains("REPLAY") && s.contains("vmm teardown")
    });
    let total = samples_seen(&end).expect("a sample count");
    assert!(total > 10, "{end}");
    assert!(end.contains(&format!("sample {total}/{total}")), "{end}");
    assert!(end.contains("Exit reasons"), "{end}");
    // Home: the start, nothing seen yet.
    tmux.send(&["Home"]);
    let start = tmux.wait_for("the start", cap(), |s| {
        s.contains(&format!("sample 0/{total}"))
    });
    assert!(!start.contains("vmm teardown"), "{start}");
    // Right steps through the samples (and the phases' starts).
    for _ in 0..6 {
        tmux.send(&["Right"]);
    }
    let stepped = tmux.wait_for("six steps", cap(), |s| {
        samples_seen(s).is_some_and(|n| n > 0 && n < total)
    });
    // `4` jumps to the fourth phase's start (profiler attach, vmm setup,
    // guest boot, kernel); `n` to the next phase.
    tmux.send(&["4"]);
    let kernel = tmux.wait_for("the kernel phase", cap(), |s| s.contains("| kernel |"));
    assert_ne!(kernel, stepped);
    tmux.send(&["n"]);
    tmux.wait_for("the userspace phase", cap(), |s| {
        s.contains("| userspace |")
    });
    // Play runs on by itself.
    tmux.send(&["+", "+", "+", "+", "Space"]);
    let before = samples_seen(&tmux.screen()).unwrap();
    tmux.wait_for("play to move on", cap(), |s| {
        samples_seen(s).is_some_and(|n| n > before)
    });
    tmux.send(&["Space", "End"]);
    tmux.wait_for("the end again", cap(), |s| {
        s.contains(&format!("sample {total}/{total}"))
    });
    // x: the exit sites of the selected reason; i: the kernel's initcalls.
    tmux.send(&["x"]);
    let sites = tmux.wait_for("the exit sites", cap(), |s| s.contains("Exit sites"));
    assert!(sites.contains("io_serial_"), "{sites}");
    tmux.send(&["i"]);
    let ic = tmux.wait_for("the initcalls", cap(), |s| {
        s.contains("initcalls ·") && s.contains("kernel ▾")
    });
    assert!(ic.contains("early ("), "{ic}");
    tmux.send(&["q"]);
    let (code, screen) = tmux.wait_exit(cap());
    assert_eq!(code, 0, "{}", tmux.screen_and_history());
    assert_clean(&tmux, &screen);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tui_refuses_what_it_cannot_browse() {
    let dir = scratch("tui-browse-bad");
    let not_json = dir.join("x.json");
    std::fs::write(&not_json, "not json").unwrap();
    let profile = recorded("lab-replay.profile.json");
    for (args, says) in [
        (
            vec!["tui", "/nonexistent.json"],
            "cannot read /nonexistent.json",
        ),
        (vec!["tui", not_json.to_str().unwrap()], "is not JSON"),
        (
            vec!["tui", &profile, "--timeline", &profile],
            "is not a boot timeline",
        ),
        (vec!["tui", &profile, "--speed", "0"], "is not a speed"),
        // A valid file, but no terminal to draw on.
        (vec!["tui", &profile], "needs a terminal"),
    ] {
        let o = run(bootscope().args(&args), None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
