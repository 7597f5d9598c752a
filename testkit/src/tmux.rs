//! A terminal as a user has one: a tmux server of the test's own (its own
//! socket) with one shell window of fixed size, keys sent with
//! `send-keys`, the screen read with `capture-pane`.

use std::process::Command;
use std::time::{Duration, Instant};

pub const WIDTH: u16 = 120;
pub const HEIGHT: u16 = 40;

pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server named after `tag` whose shell shows `prompt` (followed by
    /// `$ `); None after a SKIP line where tmux is not installed.
    pub fn start(tag: &str, prompt: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            crate::skip("tmux is not installed (apt-get install tmux)");
            return None;
        }
        let t = Tmux {
            socket: format!("bootscope-test-{tag}-{}", std::process::id()),
        };
        let status = t
            .cmd()
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x"])
            .arg(WIDTH.to_string())
            .arg("-y")
            .arg(HEIGHT.to_string())
            // A plain shell with a known prompt, UTF-8, and no inherited
            // colour switch.
            .args(["env", "-u", "NO_COLOR"])
            .arg(format!("PS1={prompt}$ "))
            .args(["LANG=C.UTF-8", "sh"])
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        let shown = format!("{prompt}$");
        t.wait_for("the shell prompt", Duration::from_secs(10), |s| {
            s.contains(&shown)
        });
        Some(t)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    /// Types `keys` (tmux key names, e.g. "q", "C-c", "Enter").
    pub fn send(&self, keys: &[&str]) {
        let ok = self
            .cmd()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .expect("tmux send-keys")
            .success();
        assert!(ok, "tmux send-keys {keys:?} failed");
    }

    /// Types a shell command line and Enter.
    pub fn type_line(&self, line: &str) {
        self.send(&["-l", line]);
        self.send(&["Enter"]);
    }

    /// The visible screen.
    pub fn screen(&self) -> String {
        self.capture(&[])
    }

    /// The screen and the scrollback above it.
    pub fn screen_and_history(&self) -> String {
        self.capture(&["-S", "-3000"])
    }

    fn capture(&self, extra: &[&str]) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .args(extra)
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A tmux format (`#{alternate_on}`, `#{cursor_flag}`) of the pane.
    pub fn display(&self, format: &str) -> String {
        let o = self
            .cmd()
            .args(["display-message", "-p", "-t", "t", format])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Waits until the screen satisfies `done`, calling `seen` with every
    /// screen; panics with the screen and scrollback after `limit`.
    pub fn watch(
        &self,
        what: &str,
        limit: Duration,
        mut seen: impl FnMut(&str),
        done: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            seen(&s);
            if done(&s) {
                return s;
            }
            assert!(
                start.elapsed() <= limit,
                "timed out waiting for {what}; the screen and scrollback:\n{}",
                self.screen_and_history()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the screen satisfies `done`; panics with the screen
    /// and scrollback after `limit`.
    pub fn wait_for(&self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        self.watch(what, limit, |_| {}, done)
    }

    /// The exit status the command line printed as `EXIT=<n>`, and the
    /// visible screen then.
    pub fn wait_exit(&self, limit: Duration) -> (i32, String) {
        let code = |s: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix("EXIT=")?.trim().parse::<i32>().ok())
        };
        let s = self.wait_for("the command to end", limit, |s| code(s).is_some());
        (code(&s).expect("an exit status"), s)
    }

    /// The terminal's modes among `modes` (a `grep -E` alternation such as
    /// `icanon|echo|isig`) that `stty -a` lists, set ones bare and cleared
    /// ones with `-`, in its order and followed by `MODES`; and the screen.
    pub fn terminal_modes(&self, modes: &str) -> (String, String) {
        self.type_line(&format!(
            "stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?({modes})' | tr '\\n' ' '; echo MODES"
        ));
        let line = |s: &str| {
            s.lines()
                .find(|l| l.ends_with("MODES") && !l.contains("stty"))
                .map(|l| l.trim().to_string())
        };
        let s = self.wait_for("stty", Duration::from_secs(10), |s| line(s).is_some());
        (line(&s).unwrap(), s)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}
