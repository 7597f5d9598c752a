//! Fuzz targets for everything in bootscope that reads input it does not
//! control: kernel images, initrds and command lines, the guest's port and
//! MMIO accesses, the descriptor chains and rings of its virtio devices,
//! the JSON documents it reads back, the units record and the systemd
//! journal a guest leaves on its disk image, the tracefs format files, the
//! command-line value parsers and the requests the exporter's HTTP server
//! reads.
//!
//! Each target is a plain function over bytes that calls the real code and
//! panics only on a bug (a crash, a broken invariant). The AFL++ driver
//! (`src/bin/bootscope-fuzz.rs`, `cargo afl build --features afl`) runs
//! them coverage-guided; `tests/replay.rs` feeds every file of
//! `corpus/<target>/` to the same functions under plain `cargo test`.
//! docs/fuzzing.md says how to run them.

pub mod devices;
pub mod documents;
pub mod http;
pub mod images;
pub mod journal;
pub mod memfile;
pub mod text;
pub mod units;
pub mod virtio;

/// A fuzz target: its name (the corpus directory under `corpus/`) and its
/// function.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    Target {
        name: "bzimage",
        run: images::bzimage,
    },
    Target {
        name: "elf",
        run: images::elf,
    },
    Target {
        name: "initrd_cmdline",
        run: images::initrd_cmdline,
    },
    Target {
        name: "devices",
        run: devices::port_and_mmio_accesses,
    },
    Target {
        name: "profile_json",
        run: documents::profile_or_timeline,
    },
    Target {
        name: "bench_json",
        run: documents::bench,
    },
    Target {
        name: "cli_values",
        run: text::cli_values,
    },
    Target {
        name: "tracefs_format",
        run: text::tracefs_format,
    },
    Target {
        name: "http_request",
        run: http::request,
    },
    Target {
        name: "virtio",
        run: virtio::queues_and_requests,
    },
    Target {
        name: "units_record",
        run: units::record_or_image,
    },
    Target {
        name: "journal",
        run: journal::file_and_units,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
