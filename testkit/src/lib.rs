//! What the tests of several bootscope crates share, as a dev-dependency
//! only: the capability checks, a console captured in memory, the tmux
//! driver of the terminal tests, and the few helpers that tests of two
//! crates would otherwise each write (a throwaway git repository,
//! `promtool check metrics`, a list lookup that names what it missed).
//!
//! A test that needs something this machine lacks (root, `/dev/kvm`,
//! eBPF, tmux) prints one line `SKIP: reason` and returns: `scripts/test`
//! counts every test whose output has a line starting with `SKIP` as
//! skipped. The `require_*!` macros are the checks: each prints that line
//! and returns from the calling test where the capability is absent. A
//! helper that returns a value uses the function under the macro
//! ([`kvm_available`], [`can_profile`], ...) instead.
//!
//! The root crate's `tests/support/` re-uses all of it.

pub mod btf;
mod capability;
mod capture;
mod programs;
pub mod tmux;

pub use capability::{can_profile, is_root, kvm_available, root, skip};
pub use capture::Capture;
pub use programs::{git, promtool_check};

/// Flags a profiled command may carry that look like bootscope's own
/// output flags (`--serial tty`, `--output x`) but belong to the command:
/// the lab's argument plan and its end-to-end run both pass them through
/// untouched.
pub const OUTPUT_LIKE_ARGS: [&str; 6] = ["--serial", "tty", "-serial", "stdio", "--output", "x"];

/// The first of `items` that `pick` chooses; a panic naming `what` and
/// listing the items where none is.
pub fn find<'a, T: std::fmt::Debug>(
    items: &'a [T],
    what: &str,
    pick: impl Fn(&T) -> bool,
) -> &'a T {
    items
        .iter()
        .find(|x| pick(x))
        .unwrap_or_else(|| panic!("no {what} in {items:?}"))
}
