//! The part of the `bootscope` command that is also a library: the
//! exporter's HTTP server (`src/exporter/http.rs`), which the executable's
//! `bootscope exporter` serves with and the fuzz crate feeds requests to.

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

#[path = "exporter/http.rs"]
pub mod exporter_http;
