//! The terminal comes back after a panic and after SIGTERM. This test
//! binary runs itself inside tmux as the TUI process (the `child` test,
//! which does nothing unless BOOTSCOPE_TUI_CHILD is set) and checks the
//! pane afterwards: main screen, cursor shown, canonical mode with echo,
//! and the panic message readable on the normal screen.
//!
//! Skips (printing SKIP) without tmux. The tmux driver is the
//! workspace's test kit (`bootscope_testkit::tmux`), as the root crate's
//! terminal tests use it.

use std::time::Duration;

use bootscope_model::profile::{PhaseSpan, Profile};
use bootscope_testkit::tmux::Tmux;
use bootscope_tui::{run_live, ProfileSource, Theme, TuiOptions};

/// How long each step (the TUI up, the child ended) may take.
const LIMIT: Duration = Duration::from_secs(30);

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

/// Runs `command` in a fresh tmux terminal (the workspace's test kit);
/// None after a SKIP line where tmux is not installed.
fn start(tag: &str, command: &str) -> Option<Tmux> {
    let t = Tmux::start(&format!("restore-{tag}"), "restore")?;
    t.type_line(command);
    Some(t)
}

/// Waits for the child's exit status line; the screen and the scrollback
/// above it then.
fn wait_exited(t: &Tmux) -> String {
    t.wait_for("the child to end", LIMIT, exited);
    t.screen_and_history()
}

/// Main screen, cursor shown, canonical mode with echo.
fn assert_restored(t: &Tmux) {
    assert_eq!(t.display("#{alternate_on}"), "0");
    assert_eq!(t.display("#{cursor_flag}"), "1");
    let (modes, s) = t.terminal_modes("icanon|echo|isig");
    assert_eq!(modes, "isig icanon echo MODES", "{s}");
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
    let Some(t) = start("panic", &child_command("panic", "")) else {
        return;
    };
    let s = wait_exited(&t);
    assert!(
        s.contains("deliberate test panic in the profile source"),
        "{s}"
    );
    assert!(!s.contains("CHILD RETURNED"), "{s}");
    assert!(!s.contains("child phase"), "TUI left on the screen:\n{s}");
    assert_restored(&t);
}

#[test]
fn sigterm_quits_and_restores_the_terminal() {
    let pidfile = std::env::temp_dir().join(format!("bootscope-tui-pid-{}", std::process::id()));
    let _ = std::fs::remove_file(&pidfile);
    let env = format!("BOOTSCOPE_TUI_PIDFILE={}", pidfile.display());
    let Some(t) = start("term", &child_command("wait", &env)) else {
        return;
    };
    t.wait_for("the TUI", LIMIT, |s| s.contains("child phase"));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill has no memory preconditions; the pid is our child test
    // process, which wrote it.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let s = wait_exited(&t);
    assert!(
        s.contains("CHILD RETURNED"),
        "run_live returned normally:\n{s}"
    );
    assert!(!s.contains("child phase"), "TUI left on the screen:\n{s}");
    assert_restored(&t);
    let _ = std::fs::remove_file(&pidfile);
}
