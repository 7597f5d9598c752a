//! The live TUI in the lab, as a user runs it: `bootscope lab -- run --tui`
//! inside a tmux session of fixed size. The program in the lab machine has
//! the console as its terminal (the host's size and `TERM`), and the keys
//! typed reach it through the host terminal in raw mode. Checks that the
//! phases pane moves while the nested guest boots, that the final state
//! stays until `q`, and that quitting leaves the shell's terminal as it
//! was: main screen, cursor shown, canonical mode with echo and signals.
//!
//! Skips (printing SKIP and why) without tmux or the lab (QEMU, Debian's
//! kernel with kvm_amd, static busybox). A lab boot under QEMU's emulator
//! takes minutes.

mod support;

use support::*;

use std::collections::BTreeSet;
use std::time::Duration;

use support::tmux::Tmux;

/// The phases pane's title (` Boot phases · 1.2 s `: the boot so far) and
/// its running phase (the row marked `▶`, `>` in ASCII), from a screen.
fn phases_pane(screen: &str) -> Option<(String, Option<String>)> {
    let title = screen.lines().find_map(|l| {
        let rest = l.split("Boot phases").nth(1)?;
        let total = rest.trim_start_matches([' ', '·', '-']);
        Some(
            total
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" "),
        )
    })?;
    let running = screen.lines().find_map(|l| {
        let rest = l.split_once("│▶ ").or_else(|| l.split_once("|> "))?.1;
        let name: Vec<&str> = rest
            .split_whitespace()
            .take_while(|w| w.chars().all(char::is_alphabetic))
            .collect();
        Some(name.join(" "))
    });
    Some((title, running))
}

#[test]
fn lab_run_tui_moves_while_the_guest_boots_and_quits_clean() {
    let p = require_lab_guest!("tui-tmux");
    let Some(tmux) = Tmux::start("run", "lab-tui") else {
        return;
    };
    let console = p.dir.join("console.log");
    let timeline = p.dir.join("timeline.json");
    tmux.type_line(&format!(
        "cd {} && {} lab -- run --tui --kernel {} --initrd {} --timeout 300 --serial {} \
         --timeline {}; echo EXIT=$?",
        p.dir.display(),
        env!("CARGO_BIN_EXE_bootscope"),
        p.kernel.display(),
        p.initrd.display(),
        console.display(),
        timeline.display()
    ));
    // The lab machine boots (minutes under emulation), then the TUI comes
    // up live on its console and follows the nested guest's boot.
    let mut titles = BTreeSet::new();
    let mut running = Vec::<String>::new();
    let ended = tmux.watch(
        "the TUI to show the end of the boot",
        Duration::from_secs(1200),
        |s| {
            if s.contains("LIVE") {
                if let Some((title, run)) = phases_pane(s) {
                    titles.insert(title);
                    if let Some(r) = run.filter(|r| running.last() != Some(r)) {
                        running.push(r);
                    }
                }
            }
        },
        |s| s.contains("ENDED"),
    );
    assert!(
        titles.len() >= 3,
        "the phases pane's total moved only through {titles:?} while live"
    );
    assert!(
        running.len() >= 2,
        "the running phase never changed while live: {running:?}"
    );
    assert!(ended.contains("Boot phases"), "{ended}");
    assert!(ended.contains("userspace"), "{ended}");
    assert_eq!(tmux.display("#{alternate_on}"), "1", "{ended}");
    // The final state stays until `q`, typed on the host.
    std::thread::sleep(Duration::from_secs(2));
    assert!(tmux.screen().contains("ENDED"));
    tmux.send(&["q"]);
    let (code, _) = tmux.wait_exit(Duration::from_secs(300));
    let all = tmux.screen_and_history();
    assert_eq!(code, 0, "{all}");
    // The host terminal is as the shell left it.
    assert_eq!(tmux.display("#{alternate_on}"), "0", "{all}");
    assert_eq!(tmux.display("#{cursor_flag}"), "1", "cursor hidden:\n{all}");
    let (modes, s) = tmux.terminal_modes("icanon|echo|isig|opost");
    assert_eq!(modes, "opost isig icanon echo MODES", "{s}");
    // The run's files came back from the lab: the timeline with the
    // phases the TUI showed, and the guest console.
    let t: serde_json::Value = read_json(&timeline);
    let names: Vec<&str> = t["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for want in ["vmm setup", "kernel", "userspace"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(!std::fs::read(&console).unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// Without a terminal on the host there is none to give: exit 2 at once,
/// before the lab starts, saying what to do.
#[test]
fn lab_tui_without_a_terminal_is_refused() {
    for args in [
        vec!["lab", "--", "run", "--tui", "--kernel", "/nonexistent"],
        vec!["lab", "--tty", "--exe", "/bin/sh", "--", "-c", "true"],
    ] {
        let o = bootscope()
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("bootscope runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("needs a terminal")
                && err.contains("standard input is not a terminal")
                && err.contains("run `bootscope lab` in a terminal"),
            "{args:?}: {err}"
        );
    }
}
