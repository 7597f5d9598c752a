//! `bootscope advise`: from a boot's timeline and profile to findings
//! (evidence, the time it accounts for, candidate fixes and what each
//! risks), and `--prove`: an interleaved A/B bench per fix, with bench's
//! own runner and statistics, accepting only fixes that keep the boot
//! reaching userspace cleanly and save time significantly.
//!
//! The rules are data ([`rules::RULES`]), evaluated by one function
//! ([`evaluate::evaluate`]); docs/advise.md lists them. The crate depends
//! on `model` and `bench` only (docs/architecture.md).

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

pub mod detector;
pub mod docs;
pub mod error;
pub mod evaluate;
pub mod evidence;
pub mod kernel;
pub mod prove;
pub mod report;
pub mod rules;
pub mod svg;
pub mod target;
pub mod userspace;
pub mod vmm_terms;

pub use error::AdviseError;
pub use evaluate::{advise, evaluate, Advice, Finding};
pub use evidence::Evidence;
