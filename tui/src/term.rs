//! The terminal: raw mode and the alternate screen while the TUI runs, and
//! the way back in every case: a guard that restores on drop (normal exit
//! and unwinding), a panic hook that restores before the panic message is
//! printed (so the message lands on the normal screen), and SIGTERM/SIGINT
//! turned into a quit request. Ctrl-C typed at the keyboard arrives as a
//! key in raw mode and is handled as `q` by the app.

use std::io::{IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crossterm::{cursor, execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

use crate::TuiError;

/// The terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// A signal asked the TUI to quit.
static QUIT_SIGNAL: AtomicBool = AtomicBool::new(false);
static PANIC_HOOK: Once = Once::new();

/// Signals that end the TUI cleanly instead of killing the process with
/// the terminal still raw.
const QUIT_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// True when standard output is a terminal the TUI can draw on.
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

/// Leaves raw mode and the alternate screen and shows the cursor; does
/// nothing if the terminal is not set up. Safe to call more than once and
/// from the panic hook.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
    }
}

/// True once SIGTERM or SIGINT arrived while the TUI ran.
pub fn quit_requested() -> bool {
    QUIT_SIGNAL.load(Ordering::SeqCst)
}

extern "C" fn on_quit_signal(_: libc::c_int) {
    QUIT_SIGNAL.store(true, Ordering::SeqCst);
}

/// The terminal set up for the TUI; dropping it puts everything back.
pub struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
    old_actions: Vec<(libc::c_int, libc::sigaction)>,
}

/// Sets the terminal up: checks it is one, installs the panic hook and the
/// signal handlers, enters raw mode and the alternate screen.
pub fn enter() -> Result<TerminalGuard, TuiError> {
    if !stdout_is_terminal() {
        return Err(TuiError::NotATerminal);
    }
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
    QUIT_SIGNAL.store(false, Ordering::SeqCst);
    let mut old_actions = Vec::new();
    for sig in QUIT_SIGNALS {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask"
        // value; the handler only stores to an atomic, which is
        // async-signal-safe; both pointers are valid for the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_quit_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &sa, &mut old) == 0 {
                old_actions.push((sig, old));
            }
        }
    }
    // From here on the guard owns the way back, whatever fails next.
    let mut guard_actions = Some(old_actions);
    let setup = (|| -> std::io::Result<Terminal<CrosstermBackend<Stdout>>> {
        terminal::enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        let mut t = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        t.clear()?;
        Ok(t)
    })();
    match setup {
        Ok(terminal) => Ok(TerminalGuard {
            terminal,
            old_actions: guard_actions.take().unwrap_or_default(),
        }),
        Err(source) => {
            restore();
            restore_signals(guard_actions.take().unwrap_or_default());
            Err(TuiError::Terminal {
                what: "cannot set up the terminal",
                source,
            })
        }
    }
}

fn restore_signals(actions: Vec<(libc::c_int, libc::sigaction)>) {
    for (sig, old) in actions {
        // SAFETY: `old` is the action sigaction returned for `sig`; the
        // pointer is valid for the call.
        unsafe {
            libc::sigaction(sig, &old, std::ptr::null_mut());
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
        restore_signals(std::mem::take(&mut self.old_actions));
    }
}
