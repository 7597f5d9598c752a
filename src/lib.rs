//! The part of the `bootscope` command that is also a library: the
//! exporter's HTTP server (`src/exporter/http.rs`), which the executable's
//! `bootscope exporter` serves with and the fuzz crate feeds requests to.

#[path = "exporter/http.rs"]
pub mod exporter_http;
