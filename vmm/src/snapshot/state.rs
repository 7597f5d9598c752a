//! The snapshot's documents (docs/snapshot-schema.md): the manifest
//! (`snapshot.json`: schema, version, the files and their digests) and the
//! machine state (`state.json`: what the snapshot depends on, every
//! vCPU, the VM's in-kernel devices, the emulated devices, the memory's
//! layout).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::images::SavedImages;
use super::memory::MemoryRegion;
use super::vcpu::VcpuState;
use super::vm_state::VmState;
use crate::devices::DevicesState;

/// The manifest's schema name.
pub const SCHEMA: &str = "bootscope-snapshot";
/// The version this VMM writes and the newest it reads.
pub const VERSION: u32 = 2;
pub const MANIFEST_FILE: &str = "snapshot.json";
pub const STATE_FILE: &str = "state.json";
pub const MEMORY_FILE: &str = "memory.raw";

/// `snapshot.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: String,
    pub version: u32,
    /// SHA-256 of `state.json`'s bytes, hex.
    pub state_sha256: String,
    /// The memory file's length in bytes.
    pub memory_bytes: u64,
    /// xxh3-128 of the memory file's whole content, hex (`--verify`).
    pub memory_xxh3: String,
}

/// A file the snapshot depends on, as it was when the snapshot was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileIdentity {
    pub path: String,
    pub bytes: u64,
    pub dev: u64,
    pub inode: u64,
    pub mtime_ns: i64,
    /// SHA-256 of the content (kernel and initrd, not disks), hex: the
    /// same file copied elsewhere still matches.
    pub sha256: Option<String>,
}

impl FileIdentity {
    /// The file's identity; `digest`: with the SHA-256 of its content.
    pub fn of(path: &Path, digest: bool) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        let sha256 = if digest {
            Some(sha256_file(path)?)
        } else {
            None
        };
        Ok(Self {
            path: path.display().to_string(),
            bytes: m.len(),
            dev: m.dev(),
            inode: m.ino(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            sha256,
        })
    }

    /// True when `path` is this file: the same device, inode, size and
    /// modification time, or (with a digest) the same content.
    pub fn matches(&self, path: &Path) -> std::io::Result<bool> {
        let now = Self::of(path, false)?;
        if now.bytes != self.bytes {
            return Ok(false);
        }
        if (now.dev, now.inode, now.mtime_ns) == (self.dev, self.inode, self.mtime_ns) {
            return Ok(true);
        }
        match &self.sha256 {
            Some(d) => Ok(sha256_file(path)? == *d),
            None => Ok(false),
        }
    }
}

/// SHA-256 of a file's content, hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One CPUID leaf the guest saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidLeaf {
    pub function: u32,
    pub index: u32,
    pub flags: u32,
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

/// What the snapshot depends on: a restore refuses another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub kernel: FileIdentity,
    pub initrd: Option<FileIdentity>,
    pub disks: Vec<FileIdentity>,
    /// Whether each disk was given read-only.
    pub disks_readonly: Vec<bool>,
    pub cmdline: String,
    pub memory_bytes: u64,
    pub vcpus: u32,
    pub acpi: bool,
    pub rng: bool,
    pub virtio_console: bool,
    /// The guest memory's regions and where each is in the memory file.
    pub regions: Vec<MemoryRegion>,
    /// The CPUID the guest saw (vCPU 0's).
    pub cpuid: Vec<CpuidLeaf>,
}

/// `state.json`.
#[derive(Serialize, Deserialize)]
pub struct MachineState {
    /// The point it was taken at (`--snapshot-at`).
    pub taken_at: String,
    pub identity: Identity,
    /// Where the boot put the kernel and initrd (the restore's timeline
    /// describes them; they are not loaded again).
    pub images: SavedImages,
    pub vcpus: Vec<VcpuState>,
    pub vm: VmState,
    pub devices: DevicesState,
    /// Bytes of the memory file that are data (the rest are holes).
    pub memory_data_bytes: u64,
}
