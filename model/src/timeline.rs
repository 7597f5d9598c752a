//! The boot timeline document (`bootscope run --timeline`,
//! docs/timeline-schema.md): one type, [`Timeline`], which the VMM fills
//! and writes and every reader reads, tolerant of fields it does not name.
//!
//! [`Timeline::parse`] checks the schema name and version and reads what
//! is there; [`Timeline::parse_complete`] also requires complete marks and
//! phases and names the first field that is missing or wrong.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::devices::VirtioDeviceDoc;
pub use crate::initcalls::InitcallsDoc;
use crate::mark::MarkSource;

/// The timeline's `schema` field.
pub const TIMELINE_SCHEMA_NAME: &str = "bootscope.timeline";
/// The timeline version the VMM writes (2 added the `units` object; 3
/// wrote `disk.latency` in the profile's bucket shape, `lo_ns`/`hi_ns`).
pub const TIMELINE_SCHEMA_VERSION: u32 = 3;
/// The oldest version this reader reads (version 2 only added to 1;
/// version 2's `le_ns` buckets are read into the shape of 3).
pub const TIMELINE_SCHEMA_MIN_VERSION: u32 = 1;

/// Why a JSON document is not a readable timeline.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimelineError {
    /// Not a timeline at all.
    #[error("its \"schema\" field is {found}, not \"{TIMELINE_SCHEMA_NAME}\"")]
    NotATimeline { found: String },
    /// A timeline of another version.
    #[error(
        "it is a version {found} timeline; this bootscope reads versions {TIMELINE_SCHEMA_MIN_VERSION} to {TIMELINE_SCHEMA_VERSION}"
    )]
    Version { found: u64 },
    /// A field is missing or has the wrong type or value.
    #[error("field {field} {problem}")]
    Field { field: String, problem: String },
}

/// A boot timeline. The VMM fills it and writes it (serialized in field
/// order: that order is the file's); readers parse it, and every field may
/// be absent from what they read (older versions, other writers), which
/// the `Option`s and defaults stand for. The VMM always fills `guest`,
/// `outcome` and `kvm_stats`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeline {
    pub schema: String,
    pub version: u64,
    /// What `t_ns` counts from.
    pub clock: String,
    /// The VMM's name and version (`bootscope 0.1.0`).
    pub vmm: String,
    /// `vmx`, `svm`, `pvm` or `none`.
    pub host_kvm: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest: Option<TimelineGuest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<TimelineOutcome>,
    pub marks: Vec<TimelineMark>,
    pub phases: Vec<TimelinePhase>,
    /// KVM's own per-VM statistics summed over vCPUs (KVM_GET_STATS_FD),
    /// empty where the kernel does not offer them; None when absent or
    /// null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm_stats: Option<BTreeMap<String, u64>>,
    /// The guest memory preallocation (`run --prealloc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<TimelineMemory>,
    /// The kernel's initcalls as sub-phases of `kernel` (`run --initcalls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initcalls: Option<InitcallsDoc>,
    /// A systemd guest's units, from the record its workload left on the
    /// disk (version 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<crate::units::UnitsDoc>,
    /// The virtio devices and what each did (`--disk`, `--rng`, `--console
    /// virtio`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<VirtioDeviceDoc>,
    /// What the VMM process cost the host in memory (RSS, PSS, USS from
    /// `/proc/self/smaps_rollup`) at the first userspace mark, or at the
    /// end of the set-up `--stop-after` asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<crate::smaps::MemorySample>,
    /// A restored run's memory: its working set, prefetch and faults
    /// (`run --restore`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore_memory: Option<crate::restore_memory::RestoreMemoryDoc>,
}

/// The `guest` object: what the guest was.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineGuest {
    pub kernel: String,
    /// `bzimage`, `elf`, `elf-pvh`, or `none` for a run stopped before
    /// loading.
    pub kernel_format: String,
    /// The initrd file, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd: Option<String>,
    /// The initrd's pages are the file's page cache (`--map-initrd`)
    /// rather than a copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd_mapped_from_file: Option<bool>,
    /// Bytes of the kernel image mapped from its file. Kernels are copied
    /// into guest RAM (where KVM can map them with large pages), so this is
    /// 0; the field stays for readers of the schema.
    pub kernel_mapped_bytes: u64,
    /// How a bzImage was booted: decompressed by the VMM and entered
    /// directly, or by its own decompressor in the guest. Absent for ELF
    /// kernels and for runs that stopped before loading.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_boot: Option<TimelineKernelBoot>,
    /// The kernel command line the guest booted with.
    pub cmdline: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u64>,
    /// What the VMM placed where in guest-physical memory (boot
    /// structures, kernel, initrd, RAM, MMIO), in address order; absent
    /// for runs that stopped before loading.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<GuestRegion>,
}

/// One region of guest-physical memory and what it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestRegion {
    pub name: String,
    pub start: u64,
    /// First byte past the region.
    pub end: u64,
}

/// The `guest.kernel_boot` object (bzImage kernels only): how the kernel
/// was decompressed and entered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineKernelBoot {
    /// `host`: the VMM decompressed the payload and the vCPU entered the
    /// kernel proper; `guest`: the bzImage's own decompressor ran in the
    /// guest.
    pub decompressed_by: String,
    /// The payload's compression (`xz`, `gzip`, `zstd`, `lzma`, `bzip2`,
    /// `lzo`, `lz4`), when recognized.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// How the vCPU entered: `pvh` (the decompressed kernel's PVH note),
    /// `linux64` (the decompressed kernel's 64-bit entry with a zero page
    /// from the bzImage's setup header), or `bzimage-linux64` (the
    /// bzImage's 64-bit entry, into its decompressor).
    pub entry: String,
    /// Whether the kernel's base can be randomized: only the guest's
    /// decompressor does KASLR, so a kernel entered past it runs at its
    /// link address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kaslr: Option<bool>,
    /// Host path: `hit` (read from the cache), `miss` (decompressed, then
    /// stored), `rebuilt` or `off` (decompressed, not stored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// The cache file read or written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_file: Option<String>,
    /// Why the cache was not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_note: Option<String>,
    /// Size of the decompressed kernel (host path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decompressed_bytes: Option<u64>,
    /// Host path: nanoseconds spent hashing the payload (absent when the
    /// cache's index by file identity named the kernel without a hash) and
    /// decompressing it (0 on a cache hit), on the decompression thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decompress_ns: Option<u64>,
    /// Guest path: why the host did not decompress (`--guest-decompress`,
    /// an unsupported compression, a result without a usable entry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The `outcome` object: how the run ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineOutcome {
    /// The stop reason's name (`acpi_power_off`, `guest_halt`, ...).
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean: Option<bool>,
    pub detail: String,
}

/// One of `marks[]`: an instant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineMark {
    pub name: String,
    pub source: MarkSource,
    /// Nanoseconds since VMM start.
    pub t_ns: u64,
    /// The byte written, for port and MMIO marks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// The vCPU that wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<u32>,
}

/// One of `phases[]`: an interval between two marks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelinePhase {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    /// The mark that opened the phase.
    pub from: String,
    /// The mark that closed it.
    pub to: String,
}

/// The `memory` object: the guest memory preallocation. Its fields, and
/// those of the objects in it, are in alphabetical order, which is the
/// order the file has them in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineMemory {
    /// Wall time for all regions together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_ns: Option<u64>,
    /// Regions in guest-physical order.
    pub regions: Vec<PreallocRegion>,
}

/// One region's preallocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreallocRegion {
    /// Bytes faulted in.
    pub bytes: u64,
    /// Its thread context.
    pub context: PreallocContext,
    /// From the first thread's creation to the last thread's end.
    pub elapsed_ns: u64,
    /// Guest node number.
    pub guest_node: u32,
    /// `madv_populate_write`, or `touch` if any of its threads had to fall
    /// back to touching.
    pub method: String,
    /// Page size of the backing.
    pub page_size: u64,
    /// Where sampled pages landed afterwards.
    pub placement: PagePlacement,
    /// Its threads.
    pub threads: Vec<PreallocThread>,
}

/// A region's thread context.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreallocContext {
    /// CPUs it and its threads may run on (a CPU list).
    pub allowed_cpus: String,
    /// Thread name (`memctx-n<node>`).
    pub name: String,
    /// Kernel thread id.
    pub tid: i32,
}

/// Where sampled pages of a range live.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PagePlacement {
    /// Sampled pages not present (never touched, or swapped out).
    pub absent: u64,
    /// Sampled pages per host node (the node number as text).
    pub per_node: BTreeMap<String, u64>,
    /// Pages sampled.
    pub sampled: u64,
}

/// One preallocation thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreallocThread {
    /// CPUs it was allowed to run on (a CPU list).
    pub allowed_cpus: String,
    /// Bytes it faulted in.
    pub bytes: u64,
    /// From its first to its last page.
    pub elapsed_ns: u64,
    /// CPU it last ran on.
    pub last_cpu: Option<u32>,
    /// `madv_populate_write` or `touch`.
    pub method: String,
    /// Thread name (`prealloc-n<node>-<index>`).
    pub name: String,
    /// Host node of that CPU.
    pub node: Option<u32>,
    /// Pages (of the backing's page size) it faulted in.
    pub pages_touched: u64,
    /// When it started, from the start of the whole preallocation.
    pub started_ns: u64,
    /// Kernel thread id.
    pub tid: i32,
}

/// What a field must hold, for [`Timeline::parse_complete`]'s messages.
#[derive(Clone, Copy)]
enum Expect {
    /// A string, required.
    Text,
    /// A mark source name, required.
    Source,
    /// A non-negative integer, required.
    Count,
    /// A non-negative integer or null, optional.
    OptionalCount,
}

const MARK_FIELDS: [(&str, Expect); 4] = [
    ("name", Expect::Text),
    ("source", Expect::Source),
    ("t_ns", Expect::Count),
    ("value", Expect::OptionalCount),
];

const PHASE_FIELDS: [(&str, Expect); 3] = [
    ("name", Expect::Text),
    ("start_ns", Expect::Count),
    ("end_ns", Expect::Count),
];

fn field_error(field: impl Into<String>, problem: impl Into<String>) -> TimelineError {
    TimelineError::Field {
        field: field.into(),
        problem: problem.into(),
    }
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, TimelineError> {
    v.as_object()
        .ok_or_else(|| field_error(field, "is not a JSON object"))
}

/// Checks the fields `expected` of the object `v` (named `at`).
fn check_fields(v: &Value, at: &str, expected: &[(&str, Expect)]) -> Result<(), TimelineError> {
    let obj = object(v, at)?;
    for &(key, expect) in expected {
        let field = format!("{at}.{key}");
        let value = obj.get(key);
        let ok = match (expect, value) {
            (Expect::OptionalCount, None | Some(Value::Null)) => true,
            (_, None) => return Err(field_error(field, "is missing")),
            (Expect::Text, Some(v)) => v.is_string(),
            (Expect::Source, Some(v)) => MarkSource::deserialize(v).is_ok(),
            (Expect::Count | Expect::OptionalCount, Some(v)) => v.is_u64(),
        };
        if !ok {
            let problem = match expect {
                Expect::Text => "is not a string",
                Expect::Source if value.is_some_and(Value::is_string) => {
                    "is not vmm, debug_port, boot_timer, boot_time_port, serial or guest_clock"
                }
                Expect::Source => "is not a string",
                Expect::Count | Expect::OptionalCount => "is not a non-negative integer",
            };
            return Err(field_error(field, problem));
        }
    }
    Ok(())
}

/// Checks that `root[key]` is an array of complete elements.
fn check_array(
    root: &Map<String, Value>,
    key: &str,
    expected: &[(&str, Expect)],
) -> Result<(), TimelineError> {
    let items = root
        .get(key)
        .ok_or_else(|| field_error(key, "is missing"))?
        .as_array()
        .ok_or_else(|| field_error(key, "is not an array"))?;
    for (i, item) in items.iter().enumerate() {
        check_fields(item, &format!("{key}[{i}]"), expected)?;
    }
    Ok(())
}

/// The document as an object, after checking its schema name and version.
fn check_schema(doc: &Value) -> Result<&Map<String, Value>, TimelineError> {
    let root = object(doc, "(document)")?;
    match root.get("schema") {
        Some(Value::String(s)) if s == TIMELINE_SCHEMA_NAME => {}
        other => {
            return Err(TimelineError::NotATimeline {
                found: other.map_or_else(|| "missing".to_string(), Value::to_string),
            })
        }
    }
    let found = root.get("version").and_then(Value::as_u64).unwrap_or(0);
    if !(u64::from(TIMELINE_SCHEMA_MIN_VERSION)..=u64::from(TIMELINE_SCHEMA_VERSION))
        .contains(&found)
    {
        return Err(TimelineError::Version { found });
    }
    Ok(root)
}

impl Timeline {
    /// Reads a timeline after checking its schema name and version.
    /// Fields it names must have their documented types; any may be
    /// absent.
    pub fn parse(doc: &Value) -> Result<Self, TimelineError> {
        check_schema(doc)?;
        Self::deserialize(doc).map_err(|e| field_error("(document)", e.to_string()))
    }

    /// As [`Timeline::parse`], and marks and phases must be complete:
    /// name, source and time; name, start and end with end >= start.
    /// KVM statistics, when present, must be counts.
    pub fn parse_complete(doc: &Value) -> Result<Self, TimelineError> {
        let root = check_schema(doc)?;
        check_array(root, "marks", &MARK_FIELDS)?;
        check_array(root, "phases", &PHASE_FIELDS)?;
        match root.get("kvm_stats") {
            None | Some(Value::Null) => {}
            Some(v) => {
                for (key, count) in object(v, "kvm_stats")? {
                    if !count.is_u64() {
                        let field = format!("kvm_stats.{key}");
                        return Err(field_error(field, "is not a non-negative integer"));
                    }
                }
            }
        }
        let timeline = Self::parse(doc)?;
        for (i, ph) in timeline.phases.iter().enumerate() {
            if ph.end_ns < ph.start_ns {
                return Err(field_error(
                    format!("phases[{i}].end_ns"),
                    format!("({}) is before start_ns ({})", ph.end_ns, ph.start_ns),
                ));
            }
        }
        Ok(timeline)
    }

    /// The phase called `name`.
    pub fn phase(&self, name: &str) -> Option<&TimelinePhase> {
        self.phases.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> Value {
        json!({"schema": "bootscope.timeline", "version": 1, "marks": [], "phases": []})
    }

    #[test]
    fn reads_what_is_there() {
        let t = Timeline::parse(&json!({
            "schema": "bootscope.timeline", "version": 1, "future": [1, 2],
            "guest": {"kernel": "/k", "vcpus": 2},
            "outcome": {"reason": "guest_halt", "clean": true},
            "marks": [{"name": "m", "source": "debug_port", "t_ns": 5, "value": 96, "vcpu": 0}],
            "phases": [{"name": "kernel", "start_ns": 1, "end_ns": 5, "duration_ns": 4}],
            "kvm_stats": {"exits": 3},
            "memory": {"elapsed_ns": 7, "regions": []}
        }))
        .unwrap();
        assert_eq!(t.guest.as_ref().unwrap().vcpus, Some(2));
        assert_eq!(t.outcome.as_ref().unwrap().clean, Some(true));
        assert_eq!(t.marks[0].source, MarkSource::DebugPort);
        assert_eq!(t.marks[0].value, Some(96));
        assert_eq!(t.phase("kernel").unwrap().duration_ns, 4);
        assert_eq!(t.kvm_stats.as_ref().unwrap()["exits"], 3);
        assert_eq!(t.memory.as_ref().unwrap().elapsed_ns, Some(7));
        assert!(t.initcalls.is_none());
        let t = Timeline::parse(&json!({
            "schema": "bootscope.timeline", "version": 1,
            "guest": {"cmdline": "console=ttyS0", "initrd": "/i.cpio",
                      "kernel_boot": {"decompressed_by": "host", "compression": "xz"}},
            "initcalls": {"method": "m", "initcalls": [
                {"name": "i8042_init", "level": "device", "start_ns": 3, "duration_ns": 9,
                 "ret": -19, "io_exits": 2}]}
        }))
        .unwrap();
        let g = t.guest.unwrap();
        assert_eq!(
            (g.cmdline.as_str(), g.initrd.as_deref()),
            ("console=ttyS0", Some("/i.cpio"))
        );
        assert_eq!(g.kernel_boot.unwrap().decompressed_by, "host");
        let i = &t.initcalls.unwrap().initcalls[0];
        assert_eq!(
            (i.name.as_str(), i.ret, i.io_exits),
            ("i8042_init", -19, Some(2))
        );
        assert!(Timeline::parse_complete(&minimal())
            .unwrap()
            .marks
            .is_empty());
    }

    #[test]
    fn a_timeline_the_vmm_wrote_reads_back_and_writes_again_byte_for_byte() {
        // Written by `bootscope run --prealloc --rng --numa ... --timeline`.
        let text = include_str!("../tests/fixtures/vmm-written.timeline.json");
        let doc: Value = serde_json::from_str(text).unwrap();
        let t = Timeline::parse_complete(&doc).unwrap();
        assert!(t.memory.is_some() && !t.devices.is_empty());
        assert_eq!(serde_json::to_string_pretty(&t).unwrap(), text.trim_end());
    }

    #[test]
    fn names_what_it_cannot_read() {
        let err = |v: Value| Timeline::parse_complete(&v).unwrap_err().to_string();
        assert_eq!(
            Timeline::parse(&json!({"schema": "bootscope.timeline", "version": 4})),
            Err(TimelineError::Version { found: 4 })
        );
        let mut v = minimal();
        v["marks"] = json!([{"name": "a", "source": "port", "t_ns": 1}]);
        assert!(err(v).contains("marks[0].source is not vmm, debug_port"));
        let mut v = minimal();
        v["phases"] = json!([{"name": "a", "start_ns": 1}]);
        assert_eq!(err(v), "field phases[0].end_ns is missing");
        let mut v = minimal();
        v["guest"] = json!({"vcpus": "two"});
        assert!(err(v).starts_with("field (document) invalid type"));
    }
}
