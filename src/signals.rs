//! SIGINT and SIGTERM, for every command, in one place.
//!
//! [`install`] (called once, before any command runs) starts a thread that
//! receives both signals. What it does with one:
//!
//! - In a command that winds down by itself (`run`, `profile`, `bench`,
//!   `lab`, `exporter`: they call [`catch`]), the first signal sets a flag
//!   the command polls: it stops its guest or child, writes what it
//!   measured, removes its temporary files and exits 130 or 143.
//! - Otherwise (every other command, and a second signal in one of those),
//!   the process ends at once with 130 (SIGINT) or 143 (SIGTERM), after
//!   removing the temporary files of the outputs being written
//!   ([`bootscope_model::output::remove_temporary_files`]) and the
//!   snapshot directories being written
//!   ([`bootscope_vmm::snapshot::staging::remove_all`]): an output
//!   being written keeps its previous contents and nothing is left beside
//!   it. The process groups of the commands it launched
//!   ([`bootscope_model::proc::ListedGroup`])
//!   are killed too, so that none outlives it.
//! - While a command that winds down is reading its inputs (an
//!   [`Immediate`] guard is alive: a `--guest-symbols` FIFO whose writer
//!   never writes would otherwise keep it waiting), the first signal ends
//!   it at once, as for any other command: there is nothing to wind down
//!   yet.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

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

/// The process's one set of flags, shared with the signal thread.
struct Shared {
    interrupts: Interrupts,
    /// A command that winds down on the first signal is running.
    winds_down: AtomicBool,
}

static SHARED: OnceLock<std::result::Result<Shared, String>> = OnceLock::new();

/// How many [`Immediate`] guards are alive.
static IMMEDIATE: AtomicUsize = AtomicUsize::new(0);

/// While alive, the first SIGINT or SIGTERM ends the process at once even
/// in a command that winds down (it is reading its inputs: nothing to
/// wind down yet, and a read may wait on a FIFO).
pub struct Immediate(());

impl Immediate {
    pub fn new() -> Self {
        IMMEDIATE.fetch_add(1, Ordering::SeqCst);
        Immediate(())
    }
}

impl Default for Immediate {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Immediate {
    fn drop(&mut self) {
        IMMEDIATE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Starts the signal thread (once; later calls return what the first one
/// did).
pub fn install() -> Result<()> {
    let shared = SHARED.get_or_init(|| {
        let mut signals = Signals::new(SIGNALS).map_err(|e| e.to_string())?;
        let shared = Shared {
            interrupts: Interrupts {
                stop: Arc::new(AtomicBool::new(false)),
                which: Arc::new(AtomicUsize::new(0)),
            },
            winds_down: AtomicBool::new(false),
        };
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    on_signal(sig);
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(shared)
    });
    match shared {
        Ok(_) => Ok(()),
        Err(e) => {
            Err(anyhow::anyhow!("{e}")).context("cannot install the SIGINT and SIGTERM handlers")
        }
    }
}

/// What the signal thread does with one signal.
fn on_signal(sig: i32) {
    let Some(Ok(shared)) = SHARED.get() else {
        return;
    };
    let i = &shared.interrupts;
    // The first signal to a command that winds down by itself: it sees the
    // flag. (A flag already set, by a first signal or by the command itself,
    // e.g. the live view closed, means this one ends the process.)
    let immediate = IMMEDIATE.load(Ordering::SeqCst) > 0;
    if shared.winds_down.load(Ordering::SeqCst) && !i.stop.load(Ordering::SeqCst) && !immediate {
        i.which.store(sig as usize, Ordering::SeqCst);
        i.stop.store(true, Ordering::SeqCst);
        return;
    }
    bootscope_model::output::remove_temporary_files();
    bootscope_vmm::snapshot::staging::remove_all();
    bootscope_model::proc::kill_listed_groups();
    // SAFETY: _exit ends the process at once; it has no preconditions. It
    // is used rather than `exit` so that no destructor or atexit handler
    // runs on this thread while the others are still working.
    unsafe { libc::_exit(exit_status(sig)) }
}

/// Makes the calling command one that winds down on the first SIGINT or
/// SIGTERM, and returns its flags. A second signal after the first exits
/// with 128 + its number (removing temporary files) without waiting for
/// the command to wind down.
pub fn catch() -> Result<Interrupts> {
    install()?;
    let Some(Ok(shared)) = SHARED.get() else {
        anyhow::bail!("cannot install the SIGINT and SIGTERM handlers");
    };
    shared.winds_down.store(true, Ordering::SeqCst);
    Ok(shared.interrupts.clone())
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
