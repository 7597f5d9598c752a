//! What bootscope's crates share, so that each concept has one definition:
//!
//! - [`output`]: the one writer of output files (timelines, profiles,
//!   benchmarks, reports, snapshots, the lab's files), so that every
//!   command treats the paths it is given alike;
//! - [`input`]: the one opener of input files (never blocking, type
//!   checked, size bounded);
//! - [`cache`]: the cache directory, its trust rules and its sealed
//!   entries;
//! - [`host`]: the KVM flavour of this host;
//! - [`hist`]: the log2 histogram every document carries;
//! - [`memory_spec`]: guest memory as the user types it (`--memory`,
//!   `--hugepages`, `--numa node=...,memory=...`), for the VMM and bench;
//! - [`size`]: sizes with binary suffixes (`512M`, `2GiB`); [`human`]:
//!   sizes, counts and durations as reports print them;
//! - [`cpulist`]: Linux CPU lists (`0-3,8`);
//! - [`numa`]: the NUMA node topology from sysfs;
//! - [`argv`]: `FLAG VALUE` and `FLAG=VALUE` in another program's argv;
//! - [`proc`]: a process's threads from procfs; [`threads`]: the names
//!   the VMM gives its threads and what a thread is from its name;
//! - [`kvm_stats`]: KVM's binary statistics format; [`btf`]: the kernel's
//!   type information (BTF), for the VMM's reads of a guest kernel and the
//!   profiler's of the host's;
//! - [`smaps`]: what a process costs the host in memory (RSS, PSS, USS);
//! - [`mark`]: where a timeline mark came from, and the port marks' names;
//! - [`timeline`]: the timeline document, which the VMM fills and every
//!   reader reads;
//! - [`profile`]: the profile document, which the profiler fills and
//!   every reader reads; [`sites`]: its exit sites and their views;
//!   [`samples`]: its samples, held compactly;
//! - [`bench`]: the bench document, which `bench` fills and `compare`,
//!   `check`, `plot` and `advise` read;
//! - [`document`]: which document a file is, read into its type;
//! - [`timeline_profile`]: a timeline as a profile (marks and phases);
//! - [`initcalls`]: the timeline's `initcalls` section;
//! - [`devices`]: the timeline's `devices` section (virtio devices);
//! - [`text`]: text from outside made safe to print on a terminal;
//! - [`units`]: a systemd guest's units on the timeline's clock;
//!   [`timeline_initramfs`]: its initramfs stage;
//! - [`vmm`]: which VMM a command runs, its kernel command line and disks
//!   in its own options;
//! - [`journal`]: systemd's journal files, read from a guest's disk;
//! - [`modules`]: the guest kernel's loaded modules, for naming exit sites;
//! - [`prometheus`]: the Prometheus text format, one writer for every
//!   command and the exporter.

// No print! here: the command line writes standard output through its
// checked writer (src/stdout.rs; print! panics on a closed pipe or a full
// disk). Tests may print.
#![deny(clippy::print_stdout)]

pub mod argv;
pub mod bench;
pub mod btf;
pub mod cache;
pub mod cpulist;
pub mod devices;
pub mod document;
pub mod fault_tail;
pub mod guest_read;
pub mod hist;
pub mod host;
pub mod human;
pub mod initcalls;
pub mod input;
pub mod journal;
pub mod kvm_stats;
pub mod mark;
pub mod memory_spec;
pub mod modules;
pub mod numa;
pub mod output;
pub mod proc;
pub mod profile;
pub mod prometheus;
pub mod restore_memory;
pub mod samples;
pub mod sites;
pub mod size;
pub mod smaps;
pub mod text;
pub mod threads;
pub mod timeline;
pub mod timeline_initramfs;
pub mod timeline_profile;
pub mod units;
pub mod vmm;
