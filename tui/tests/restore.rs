//! The terminal comes back after a panic and after SIGTERM. This test
//! binary runs itself inside tmux as the TUI process (the `child` test,
//! which does nothing unless BOOTSCOPE_TUI_CHILD is set) and checks the
//! pane afterwards: main screen, cursor shown, canonical mode with echo,
//! and the panic message readable on the normal screen.
//!
//! Skips (printing SKIP) without tmux.

use std::process::Command;
use std::time::{Duration, Instant};

use bootscope_model::profile::{PhaseSpan, Profile};
use bootscope_tui::{run_live, ProfileSource, Theme, TuiOptions};

/// A source whose snapshots panic after a few refreshes (`panic`) or that
/// never ends (`wait`).
struct ChildSource {
    mode: String,
    snapshots: u32,
}

impl ProfileSource for ChildSource {
    fn snapshot(&mut self) -> Profile {
        self.snapshots += 1;
        if self.mode == "panic" && self.snapshots == 8 {
            panic!("deliberate test panic in the profile source");
        }
        let mut p = Profile::new();
        p.duration_ns = u64::from(self.snapshots) * 100_000_000;
        p.phases = vec![PhaseSpan {
            name: "child phase".into(),
            start_ns: 0,
            end_ns: p.duration_ns,
        }];
        p
    }

    fn finished(&mut self) -> bool {
        false
    }

    fn title(&self) -> String {
        format!("restore test ({})", self.mode)
    }
}

/// The TUI process, when run by the tests below.
#[test]
fn child() {
    let Ok(mode) = std::env::var("BOOTSCOPE_TUI_CHILD") else {
        return;
    };
    if let Ok(pidfile) = std::env::var("BOOTSCOPE_TUI_PIDFILE") {
        std::fs::write(pidfile, std::process::id().to_string()).unwrap();
    }
    let mut source = ChildSource { mode, snapshots: 0 };
    let opts = TuiOptions {
        refresh: Duration::from_millis(100),
        theme: Theme::unicode(),
        ..TuiOptions::default()
    };
    run_live(&mut source, opts).unwrap();
    println!("CHILD RETURNED");
}

struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(tag: &str, command: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("SKIP: tmux is not installed (apt-get install tmux)");
            return None;
        }
        let t = Tmux {
            socket: format!("bootscope-tui-{tag}-{}", std::process::id()),
        };
        let ok = t
            .cmd()
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "t"])
            .args(["-x", "100", "-y", "30"])
            .args(["env", "PS1=restore$ ", "LANG=C.UTF-8", "sh"])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        t.wait(|s| s.contains("restore$"), "the prompt");
        t.send(&["-l", command]);
        t.send(&["Enter"]);
        Some(t)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn send(&self, keys: &[&str]) {
        assert!(self
            .cmd()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap()
            .success());
    }

    fn screen(&self) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-S", "-200", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn display(&self, f: &str) -> String {
        let o = self
            .cmd()
            .args(["display-message", "-p", "-t", "t", f])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn wait(&self, done: impl Fn(&str) -> bool, what: &str) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if done(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn assert_restored(&self) {
        assert_eq!(self.display("#{alternate_on}"), "0");
        assert_eq!(self.display("#{cursor_flag}"), "1");
        self.send(&[
            "-l",
            "stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo|isig)' | tr '\\n' ' '; echo MODES",
        ]);
        self.send(&["Enter"]);
        let s = self.wait(
            |s| {
                s.lines()
                    .any(|l| l.ends_with("MODES") && !l.contains("stty"))
            },
            "stty",
        );
        let modes = s
            .lines()
            .find(|l| l.ends_with("MODES") && !l.contains("stty"))
            .unwrap();
        assert_eq!(modes.trim(), "isig icanon echo MODES");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// The child's exit status line (not the typed command's `echo EXIT=$?`).
fn exited(screen: &str) -> bool {
    screen.lines().any(|l| {
        l.strip_prefix("EXIT=")
            .is_some_and(|v| v.trim().parse::<i32>().is_ok())
    })
}

fn child_command(mode: &str, extra_env: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    format!(
        "BOOTSCOPE_TUI_CHILD={mode} {extra_env} {} child --exact --nocapture --test-threads=1; echo EXIT=$?",
        exe.display()
    )
}

#[test]
fn a_panic_restores_the_terminal_and_its_message_is_readable() {
    let Some(t) = Tmux::start("panic", &child_command("panic", "")) else {
        return;
    };
    let s = t.wait(exited, "the child to end");
    assert!(
        s.contains("deliberate test panic in the profile source"),
        "{s}"
    );
    assert!(!s.contains("CHILD RETURNED"), "{s}");
    assert!(!s.contains("child phase"), "TUI left on the screen:\n{s}");
    t.assert_restored();
}

#[test]
fn sigterm_quits_and_restores_the_terminal() {
    let pidfile = std::env::temp_dir().join(format!("bootscope-tui-pid-{}", std::process::id()));
    let _ = std::fs::remove_file(&pidfile);
    let env = format!("BOOTSCOPE_TUI_PIDFILE={}", pidfile.display());
    let Some(t) = Tmux::start("term", &child_command("wait", &env)) else {
        return;
    };
    t.wait(|s| s.contains("child phase"), "the TUI");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill has no memory preconditions; the pid is our child test
    // process, which wrote it.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let s = t.wait(exited, "the child to end");
    assert!(
        s.contains("CHILD RETURNED"),
        "run_live returned normally:\n{s}"
    );
    assert!(!s.contains("child phase"), "TUI left on the screen:\n{s}");
    t.assert_restored();
    let _ = std::fs::remove_file(&pidfile);
}
