//! SIGINT and SIGTERM for the commands that run something (`run`,
//! `profile`, `bench`): the first one sets a flag the command polls (it then
//! stops its guest or child, writes what it measured, removes its temporary
//! files and exits 130 or 143); a second one ends the process at once,
//! for a command that does not stop by itself.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;

/// The signals that interrupt a command.
pub const SIGNALS: [i32; 2] = [SIGINT, SIGTERM];

/// The interruption flags of a command; cloned handles see the same signal.
#[derive(Clone)]
pub struct Interrupts {
    /// Set by the first SIGINT or SIGTERM.
    stop: Arc<AtomicBool>,
    /// The number of the last one received (0: none).
    which: Arc<AtomicUsize>,
}

/// Installs the handlers. A second signal after the first exits with
/// 128 + its number without waiting for the command to wind down.
pub fn catch() -> Result<Interrupts> {
    let stop = Arc::new(AtomicBool::new(false));
    let which = Arc::new(AtomicUsize::new(0));
    for sig in SIGNALS {
        // Registered before the flag: on the first signal the condition is
        // still false, so only a second one ends the process.
        flag::register_conditional_shutdown(sig, 128 + sig, stop.clone())
            .and_then(|_| flag::register_usize(sig, which.clone(), sig as usize))
            .and_then(|_| flag::register(sig, stop.clone()))
            .with_context(|| format!("cannot install a handler for {}", name(sig)))?;
    }
    Ok(Interrupts { stop, which })
}

impl Interrupts {
    /// The flag the first signal sets (the VMM's stop request).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The signal that arrived, if one did.
    pub fn received(&self) -> Option<i32> {
        if !self.stop.load(Ordering::SeqCst) {
            return None;
        }
        match self.which.load(Ordering::SeqCst) {
            0 => None,
            s => i32::try_from(s).ok(),
        }
    }
}

/// SIGINT or SIGTERM, for messages and outcomes.
pub fn name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// The conventional exit status of a command ended by `sig`: 130 for
/// SIGINT, 143 for SIGTERM.
pub fn exit_status(sig: i32) -> i32 {
    128 + sig
}
