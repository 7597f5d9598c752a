//! systemd's journal as a source of a guest's userspace timeline: any
//! systemd image keeps one (a persistent journal under
//! `/var/log/journal/MACHINE-ID/` is Debian's default), so the units of an
//! image bootscope did not build can be read from its disk after the guest
//! stopped, with no agent in the guest.
//!
//! - [`file`]: one journal file's entries, read from untrusted bytes
//!   within fixed limits;
//! - [`units`]: what PID 1 logged about one boot (unit jobs, `Startup
//!   finished`, the initramfs hand-over).
//!
//! A reader of our own rather than a crate: the file is written by the
//! guest, so every offset in it is checked and every walk bounded, and
//! only the few fields the timeline needs are kept (fuzzed by the
//! `journal` target, docs/fuzzing.md).

pub mod file;
pub mod units;

pub use file::{parse, Entry, JournalError, JournalFile, Limits, Skipped};
pub use units::{boot_units, BootUnits, LogLine, StartupFinished, UnitTimes};
