//! The timeline's `devices` section (docs/timeline-schema.md): what each
//! virtio device did during a run, as the VMM writes it and readers read it.

use serde::{Deserialize, Serialize};

use crate::hist::HistBucket;

/// One virtio device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtioDeviceDoc {
    /// `virtio-blk0`, `virtio-rng`, `virtio-console`.
    pub name: String,
    /// `block`, `rng` or `console`.
    pub kind: String,
    /// Its register window in guest-physical memory (end: first byte past).
    pub mmio_start: u64,
    pub mmio_end: u64,
    /// Its I/O APIC interrupt line.
    pub irq: u32,
    /// When the driver first set DRIVER_OK (ns since VMM start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_ready_ns: Option<u64>,
    /// Times the driver set DRIVER_OK, and reset the device.
    pub activations: u64,
    pub resets: u64,
    /// The device status register at the end.
    pub status: u32,
    /// Queue notifications the device thread handled.
    pub notifications: u64,
    /// Interrupts raised.
    pub interrupts: u64,
    /// Why the device was marked as needing a reset (the guest corrupted a
    /// ring), in order; at most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken: Vec<String>,
    /// Requests the device refused because their descriptors were wrong
    /// (each got an error status, or none where it had no status byte).
    pub bad_requests: u64,
    /// The first of those, as an example.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad_request: Option<String>,
    /// virtio-blk: the disk and its I/O.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskDoc>,
    /// virtio-rng: bytes of randomness given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rng_bytes: Option<u64>,
    /// virtio-console: bytes the guest wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_bytes: Option<u64>,
}

/// A virtio-blk disk and what the guest did with it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskDoc {
    pub path: String,
    pub readonly: bool,
    pub capacity_bytes: u64,
    /// What `GET_ID` answers.
    pub serial: String,
    /// Every request.
    pub total: IoCounts,
    /// The same split by the boot phase each request started in (filled
    /// in with the timeline's phases; requests outside every phase are
    /// under `outside phases`).
    #[serde(default)]
    pub by_phase: Vec<PhaseIo>,
    /// Request latency (notification seen to request completed), log2
    /// buckets `[lo_ns, hi_ns)` (version 2's `le_ns` buckets read too).
    #[serde(default, deserialize_with = "crate::hist::deserialize_buckets")]
    pub latency: Vec<HistBucket>,
    /// Requests whose start time was not kept for the phase split (past
    /// the per-disk record limit); they are in `total` and `latency`.
    #[serde(default)]
    pub unrecorded: u64,
}

/// Request counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCounts {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub get_id: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Requests answered with an error status (I/O error, unsupported, a
    /// write to a read-only disk, a malformed request).
    pub errors: u64,
}

impl std::ops::AddAssign for IoCounts {
    fn add_assign(&mut self, io: IoCounts) {
        self.requests += io.requests;
        self.reads += io.reads;
        self.writes += io.writes;
        self.flushes += io.flushes;
        self.get_id += io.get_id;
        self.bytes_read += io.bytes_read;
        self.bytes_written += io.bytes_written;
        self.errors += io.errors;
    }
}

/// The I/O of one phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseIo {
    pub phase: String,
    #[serde(flatten)]
    pub io: IoCounts,
}
