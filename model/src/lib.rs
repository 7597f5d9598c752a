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
//! - [`size`]: sizes with binary suffixes (`512M`, `2GiB`);
//! - [`cpulist`]: Linux CPU lists (`0-3,8`);
//! - [`numa`]: the NUMA node topology from sysfs;
//! - [`proc`]: a process's threads from procfs;
//! - [`kvm_stats`]: KVM's binary statistics format;
//! - [`smaps`]: what a process costs the host in memory (RSS, PSS, USS);
//! - [`mark`]: where a timeline mark came from, and the port marks' names;
//! - [`timeline`]: the timeline document, which the VMM fills and every
//!   reader reads;
//! - [`profile`]: the profile document, which the profiler fills and
//!   every reader reads; [`sites`]: its exit sites and their views;
//!   [`samples`]: its samples, held compactly;
//! - [`bench`]: the bench document, which `bench` fills and `compare`,
//!   `check`, `plot` and `advise` read;
//! - [`timeline_profile`]: a timeline as a profile (marks and phases);
//! - [`initcalls`]: the timeline's `initcalls` section;
//! - [`devices`]: the timeline's `devices` section (virtio devices);
//! - [`text`]: text from outside made safe to print on a terminal;
//! - [`units`]: a systemd guest's units on the timeline's clock;
//! - [`modules`]: the guest kernel's loaded modules, for naming exit sites;
//! - [`prometheus`]: the Prometheus text format, one writer for every
//!   command and the exporter.

pub mod bench;
pub mod cache;
pub mod cpulist;
pub mod devices;
pub mod host;
pub mod initcalls;
pub mod input;
pub mod kvm_stats;
pub mod mark;
pub mod modules;
pub mod numa;
pub mod output;
pub mod proc;
pub mod profile;
pub mod prometheus;
pub mod samples;
pub mod sites;
pub mod size;
pub mod smaps;
pub mod text;
pub mod timeline;
pub mod timeline_profile;
pub mod units;
