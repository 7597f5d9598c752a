//! The lab machine's console as the program's terminal
//! ([`LabConfig::terminal`](super::LabConfig::terminal)).
//!
//! In the lab machine, `/init` starts the program in a session of its own
//! with the first serial port (the console) as its controlling terminal,
//! sized as the host's terminal and with the host's `TERM`. On the host,
//! the terminal goes into raw mode while QEMU runs, so every key reaches
//! QEMU's console input as typed (Ctrl-C included: a TUI in the lab quits
//! on it as on a host); it is put back when QEMU ends, on every error path,
//! and before a panic's message is printed. Ctrl-A then `x` stops the lab,
//! as it does QEMU's own multiplexed console (Ctrl-A twice sends one
//! Ctrl-A).

use std::io::{self, IsTerminal, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use crate::{LabError, Result};

/// The terminal the program in the lab gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabTerminal {
    /// Its size in character cells.
    pub rows: u16,
    pub cols: u16,
    /// What the program is told of it in its environment: `TERM`, and
    /// `COLORTERM`, `NO_COLOR` and a UTF-8 `LANG` when the host's say so.
    pub env: Vec<(String, String)>,
}

impl LabTerminal {
    /// The `TERM` given when the host has none.
    pub const DEFAULT_TERM: &'static str = "xterm-256color";

    /// The host terminal's size and type, when standard input and standard
    /// output are both terminals (keys come from the one, the screen goes
    /// to the other); the error says which is not.
    pub fn of_host() -> std::result::Result<LabTerminal, String> {
        if !io::stdin().is_terminal() {
            return Err("standard input is not a terminal".into());
        }
        if !io::stdout().is_terminal() {
            return Err("standard output is not a terminal".into());
        }
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ fills the winsize it is given.
        let ok = unsafe { libc::ioctl(io::stdout().as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        if ok != 0 || size.ws_row == 0 || size.ws_col == 0 {
            return Err(format!(
                "the terminal does not say its size ({})",
                if ok != 0 {
                    io::Error::last_os_error().to_string()
                } else {
                    "it reports 0 rows or columns".to_string()
                }
            ));
        }
        Ok(LabTerminal {
            rows: size.ws_row,
            cols: size.ws_col,
            env: terminal_env(|k| std::env::var(k).ok()),
        })
    }
}

/// The environment that describes the host terminal, from the host's
/// variables (`var`): its `TERM` (or [`LabTerminal::DEFAULT_TERM`]), its
/// `COLORTERM` and `NO_COLOR`, and `LANG=C.UTF-8` when the host's locale
/// (the first of `LC_ALL`, `LC_CTYPE`, `LANG` set) is UTF-8: the lab
/// machine has no locales of its own, and the terminal's character set is
/// what the program needs to know.
pub(super) fn terminal_env(var: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty());
    let term = set("TERM")
        .filter(|t| is_term_name(t))
        .unwrap_or_else(|| LabTerminal::DEFAULT_TERM.to_string());
    let mut env = vec![("TERM".to_string(), term)];
    if let Some(c) = set("COLORTERM").filter(|c| is_term_name(c)) {
        env.push(("COLORTERM".into(), c));
    }
    if set("NO_COLOR").is_some() {
        env.push(("NO_COLOR".into(), "1".into()));
    }
    let locale = ["LC_ALL", "LC_CTYPE", "LANG"]
        .iter()
        .find_map(|k| set(k))
        .unwrap_or_default()
        .to_ascii_lowercase();
    if locale.contains("utf-8") || locale.contains("utf8") {
        env.push(("LANG".into(), "C.UTF-8".into()));
    }
    env
}

/// A `TERM` value worth passing on: a terminfo name (letters, digits,
/// `-`, `+`, `.`, `_`), not empty.
pub(super) fn is_term_name(term: &str) -> bool {
    !term.is_empty()
        && term.len() <= 64
        && term
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-+._".contains(&b))
}

/// The host terminal's settings from before raw mode, for the panic hook.
static SAVED: Mutex<Option<(i32, libc::termios)>> = Mutex::new(None);
static PANIC_HOOK: Once = Once::new();

/// Puts the saved settings back, if raw mode is on. Safe to call twice.
fn restore_saved() {
    let saved = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((fd, termios)) = saved {
        // SAFETY: `termios` came from tcgetattr on the same descriptor.
        unsafe { libc::tcsetattr(fd, libc::TCSADRAIN, &termios) };
    }
}

/// The host terminal (standard input) in raw mode until dropped.
pub(super) struct RawMode(());

impl RawMode {
    pub(super) fn enter() -> Result<RawMode> {
        let fd = io::stdin().as_raw_fd();
        // SAFETY: termios is plain data, for which all zeroes is a value.
        let mut termios: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr fills the termios it is given.
        if unsafe { libc::tcgetattr(fd, &mut termios) } != 0 {
            return Err(LabError::io(
                "read the settings of",
                "the terminal on standard input",
                io::Error::last_os_error(),
            ));
        }
        PANIC_HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore_saved();
                previous(info);
            }));
        });
        *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some((fd, termios));
        let mut raw = termios;
        // SAFETY: cfmakeraw edits the copy it is given.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr reads a termios made by tcgetattr and cfmakeraw.
        if unsafe { libc::tcsetattr(fd, libc::TCSADRAIN, &raw) } != 0 {
            let e = io::Error::last_os_error();
            restore_saved();
            return Err(LabError::io(
                "put into raw mode",
                "the terminal on standard input",
                e,
            ));
        }
        Ok(RawMode(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore_saved();
    }
}

/// Ctrl-A, the escape key of the console input.
const ESCAPE: u8 = 0x01;

/// What the keys typed say, after the escape sequences are taken out.
#[derive(Debug, Default)]
pub(super) struct KeyFilter {
    /// The last key was a lone Ctrl-A.
    escaped: bool,
}

impl KeyFilter {
    /// Appends to `out` what goes on to the lab machine; true when Ctrl-A
    /// `x` asked to stop the lab.
    pub(super) fn feed(&mut self, keys: &[u8], out: &mut Vec<u8>) -> bool {
        for &k in keys {
            if self.escaped {
                self.escaped = false;
                match k {
                    b'x' | b'X' => return true,
                    ESCAPE => out.push(ESCAPE),
                    other => out.extend_from_slice(&[ESCAPE, other]),
                }
            } else if k == ESCAPE {
                self.escaped = true;
            } else {
                out.push(k);
            }
        }
        false
    }
}

/// Passes the keys typed on standard input to QEMU's console input until
/// `done` is set; sets `stop` on Ctrl-A `x`. Polls, so it notices `done`
/// within a tenth of a second even when nothing is typed.
pub(super) fn forward_keys(mut to: impl Write, done: &AtomicBool, stop: &AtomicBool) {
    let fd = io::stdin().as_raw_fd();
    let mut filter = KeyFilter::default();
    let mut buf = [0u8; 256];
    let mut out = Vec::with_capacity(buf.len() * 2);
    let mut lab_reads = true;
    while !done.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let wait_ms = Duration::from_millis(100).as_millis() as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, wait_ms) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            if n < 0 {
                return;
            }
            continue;
        }
        if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
            && pfd.revents & libc::POLLIN == 0
        {
            return;
        }
        // SAFETY: reads into a buffer of its length.
        let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if got == 0 {
            return;
        }
        out.clear();
        if filter.feed(&buf[..got as usize], &mut out) {
            stop.store(true, Ordering::SeqCst);
            return;
        }
        // Keys typed after QEMU stopped reading are dropped.
        if lab_reads && !out.is_empty() {
            lab_reads = to.write_all(&out).and_then(|()| to.flush()).is_ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_a_x_stops_and_other_keys_pass() {
        let mut f = KeyFilter::default();
        let mut out = Vec::new();
        assert!(!f.feed(b"q\x03ab", &mut out));
        assert_eq!(out, b"q\x03ab");
        // Ctrl-A Ctrl-A is one Ctrl-A; Ctrl-A and another key pass both.
        out.clear();
        assert!(!f.feed(b"\x01\x01\x01z", &mut out));
        assert_eq!(out, b"\x01\x01z");
        // Split across reads.
        out.clear();
        assert!(!f.feed(b"k\x01", &mut out));
        assert!(f.feed(b"x", &mut out));
        assert_eq!(out, b"k");
    }

    #[test]
    fn the_host_terminal_s_environment() {
        let env = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            terminal_env(move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
        };
        let pairs = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(env(&[]), pairs(&[("TERM", "xterm-256color")]));
        assert_eq!(
            env(&[
                ("TERM", "tmux-256color"),
                ("COLORTERM", "truecolor"),
                ("NO_COLOR", "yes"),
                ("LANG", "en_GB.UTF-8"),
                ("HOME", "/home/u"),
            ]),
            pairs(&[
                ("TERM", "tmux-256color"),
                ("COLORTERM", "truecolor"),
                ("NO_COLOR", "1"),
                ("LANG", "C.UTF-8"),
            ])
        );
        // LC_ALL decides over LANG; a bad TERM is not passed on.
        assert_eq!(
            env(&[("TERM", "x;y"), ("LC_ALL", "C"), ("LANG", "C.UTF-8")]),
            pairs(&[("TERM", "xterm-256color")])
        );
    }

    #[test]
    fn term_names() {
        for good in [
            "xterm-256color",
            "screen.xterm-256color",
            "tmux-256color",
            "vt100",
        ] {
            assert!(is_term_name(good), "{good}");
        }
        for bad in ["", "xterm; reboot", "a b", "x'y", "$(id)"] {
            assert!(!is_term_name(bad), "{bad}");
        }
    }
}
