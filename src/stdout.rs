//! Standard output, for every command: one checked writer.
//!
//! Rust ignores SIGPIPE, so a write to a pipe whose reader has gone
//! (`bootscope check ... | head`) fails with `EPIPE`, and `print!` panics on
//! any write error. Every command writes its standard output through
//! [`print`] instead:
//!
//! - a reader that has gone is not an error: the rest of the output is
//!   dropped and the command finishes its work (writing its files, pushing
//!   its metrics) with the exit status it would have had;
//! - any other write error (`>/dev/full`: `ENOSPC`) is returned, and the
//!   command fails with exit status 1 and `cannot write standard output:
//!   ...`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once standard output's reader has gone: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output and flushes it, by the rules of [this
/// module](self).
pub fn print(text: impl AsRef<[u8]>) -> std::io::Result<()> {
    checked(|out| out.write_all(text.as_ref()).and_then(|()| out.flush()))
}

/// Runs `write` on standard output unless its reader has gone; a reader
/// going away is not an error, and nothing is written after it.
fn checked(
    write: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    match write(&mut std::io::stdout().lock()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}

/// The first error [`pass_on`] met, for the command's report.
static LOST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Passes `bytes` on to standard output by the rules of [this
/// module](self), for a copy that must go on reading whatever happens to
/// its output (a profiled command's standard output): the first write
/// error is kept for [`lost`].
pub fn pass_on(bytes: &[u8]) {
    if let Err(e) = print(bytes) {
        let mut lost = LOST.lock().unwrap_or_else(|e| e.into_inner());
        lost.get_or_insert_with(|| e.to_string());
    }
}

/// The exit status `code` of a command that passed output on: where
/// [`pass_on`] met an error the output lost is reported, and a status of
/// 0 becomes 1.
pub fn after_lost_output(code: i32) -> i32 {
    let lost = LOST.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match lost {
        Some(e) => {
            eprintln!("bootscope: error: cannot write standard output (the command's output): {e}");
            if code == 0 {
                crate::common::EXIT_FAILURE
            } else {
                code
            }
        }
        None => code,
    }
}

/// Standard output as a stream written as it goes (the guest console of
/// `run --serial stdout` and of `lab`), by the rules of [this
/// module](self): line buffered as `std::io::stdout` is, a reader that has
/// gone takes the rest without error, and any other write error is
/// returned, the first one also kept for the command's report
/// ([`Stream::error`]).
#[derive(Default)]
pub struct Stream {
    error: Option<std::io::Error>,
}

impl Stream {
    /// The first write error (other than a reader gone), if any.
    pub fn error(&self) -> Option<&std::io::Error> {
        self.error.as_ref()
    }

    fn keep(&mut self, r: std::io::Result<()>) -> std::io::Result<()> {
        if let Err(e) = &r {
            if self.error.is_none() {
                self.error = Some(std::io::Error::new(e.kind(), e.to_string()));
            }
        }
        r
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = checked(|out| out.write_all(buf));
        self.keep(r).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = checked(|out| out.flush());
        self.keep(r)
    }
}

/// Prints the error of a failed [`print`], for commands that return their
/// exit status; exit status 1.
pub fn report(e: std::io::Error) -> i32 {
    eprintln!("bootscope: error: cannot write standard output: {e}");
    crate::common::EXIT_FAILURE
}

/// The error of a failed [`print`], for commands that return anyhow
/// errors (exit status 1).
pub fn failure(e: std::io::Error) -> crate::common::Failure {
    anyhow::Error::new(e)
        .context("cannot write standard output")
        .into()
}

/// The error of a failed [`print`], for the bench commands (exit status
/// 1).
pub fn bench_error(source: std::io::Error) -> bootscope_bench::error::BenchError {
    bootscope_bench::error::BenchError::Write {
        path: "standard output".into(),
        source,
    }
}
