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

mod lab_common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

const WIDTH: u16 = 120;
const HEIGHT: u16 = 40;

/// A tmux server of our own (its own socket) with one shell window.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(tag: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("SKIP: tmux is not installed (apt-get install tmux)");
            return None;
        }
        let t = Tmux {
            socket: format!("bootscope-labtest-{tag}-{}", std::process::id()),
        };
        let status = t
            .cmd()
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x"])
            .arg(WIDTH.to_string())
            .arg("-y")
            .arg(HEIGHT.to_string())
            .args([
                "env",
                "-u",
                "NO_COLOR",
                "PS1=lab-tui$ ",
                "LANG=C.UTF-8",
                "sh",
            ])
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        t.wait_for("the shell prompt", Duration::from_secs(10), |s| {
            s.contains("lab-tui$")
        });
        Some(t)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn send(&self, keys: &[&str]) {
        let ok = self
            .cmd()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .expect("tmux send-keys")
            .success();
        assert!(ok, "tmux send-keys {keys:?} failed");
    }

    fn type_line(&self, line: &str) {
        self.send(&["-l", line]);
        self.send(&["Enter"]);
    }

    fn capture(&self, history: bool) -> String {
        let mut c = self.cmd();
        c.args(["capture-pane", "-p", "-t", "t"]);
        if history {
            c.args(["-S", "-3000"]);
        }
        let o = c.output().expect("tmux capture-pane");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn display(&self, format: &str) -> String {
        let o = self
            .cmd()
            .args(["display-message", "-p", "-t", "t", format])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Waits until the screen satisfies `done`, calling `seen` with every
    /// screen; panics with the screen and scrollback after `limit`.
    fn watch(
        &self,
        what: &str,
        limit: Duration,
        mut seen: impl FnMut(&str),
        done: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            let s = self.capture(false);
            seen(&s);
            if done(&s) {
                return s;
            }
            assert!(
                start.elapsed() <= limit,
                "timed out waiting for {what}; the screen and scrollback:\n{}",
                self.capture(true)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_for(&self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        self.watch(what, limit, |_| {}, done)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

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
    let Some(p) = lab_common::prereqs("tui-tmux") else {
        return;
    };
    let Some(tmux) = Tmux::start("run") else {
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
    assert!(tmux.capture(false).contains("ENDED"));
    tmux.send(&["q"]);
    let code_of = |s: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix("EXIT=")?.trim().parse::<i32>().ok())
    };
    let done = tmux.wait_for("the lab to end", Duration::from_secs(300), |s| {
        code_of(s).is_some()
    });
    let all = tmux.capture(true);
    assert_eq!(code_of(&done), Some(0), "{all}");
    // The host terminal is as the shell left it.
    assert_eq!(tmux.display("#{alternate_on}"), "0", "{all}");
    assert_eq!(tmux.display("#{cursor_flag}"), "1", "cursor hidden:\n{all}");
    tmux.type_line(
        "stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo|isig|opost)' | tr '\\n' ' '; echo MODES",
    );
    let s = tmux.wait_for("stty", Duration::from_secs(10), |s| {
        s.lines()
            .any(|l| l.ends_with("MODES") && !l.contains("stty"))
    });
    let modes = s
        .lines()
        .find(|l| l.ends_with("MODES") && !l.contains("stty"))
        .unwrap();
    assert_eq!(modes.trim(), "opost isig icanon echo MODES", "{s}");
    // The run's files came back from the lab: the timeline with the
    // phases the TUI showed, and the guest console.
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&timeline).unwrap()).unwrap();
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
        let o = Command::new(env!("CARGO_BIN_EXE_bootscope"))
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
