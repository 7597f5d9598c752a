//! virtio-rng (`--rng`, virtio 1.x 5.4): one queue of device-writable
//! buffers, each filled from the host's `getrandom`. Without it a guest
//! whose kernel has no other entropy source can wait for seconds before
//! userspace gets its first random bytes.

use virtio_queue::{DescriptorChain, Queue};
use vm_memory::{Address, Bytes, GuestMemory, GuestMemoryMmap, Permissions};

use super::report::VirtioDeviceDoc;
use super::{drain_queue, DeviceKind, QueueFault, VirtioDevice, FEATURE_VERSION_1};
use crate::timeline::TimelinePhase;

/// The request queue's size.
pub const QUEUE_SIZE: u16 = 64;
/// Most bytes given for one request (Linux asks for at most a page or so
/// at a time; a guest asking for more gets this much).
pub const MAX_REQUEST: usize = 64 << 10;

/// Why a chain gets nothing.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RngError {
    #[error("descriptor chain cut short (a loop or a next index past the table)")]
    Broken,
    #[error("buffer is device-readable (wrong direction)")]
    Direction,
    #[error("buffer {addr:#x}+{len} is outside guest memory")]
    Outside { addr: u64, len: u32 },
}

/// The buffers of a chain, checked: all device-writable, in guest memory.
pub fn parse(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
) -> Result<Vec<(vm_memory::GuestAddress, u32)>, RngError> {
    let mut out = Vec::new();
    let mut cut = false;
    for d in chain {
        cut = d.has_next();
        if !d.is_write_only() {
            return Err(RngError::Direction);
        }
        if d.len() > 0 && !mem.check_range(d.addr(), d.len() as usize, Permissions::Write) {
            return Err(RngError::Outside {
                addr: d.addr().0,
                len: d.len(),
            });
        }
        out.push((d.addr(), d.len()));
    }
    if cut {
        return Err(RngError::Broken);
    }
    Ok(out)
}

/// Fills `buf` from the kernel's random pool.
fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// A virtio-rng device.
#[derive(Default)]
pub struct Rng {
    bytes: u64,
    bad_requests: u64,
    first_bad: Option<String>,
}

impl Rng {
    fn serve(&mut self, chain: DescriptorChain<&GuestMemoryMmap>, mem: &GuestMemoryMmap) -> u32 {
        let bufs = match parse(chain, mem) {
            Ok(b) => b,
            Err(e) => {
                self.bad_requests += 1;
                self.first_bad.get_or_insert_with(|| e.to_string());
                return 0;
            }
        };
        let mut given = 0usize;
        let mut random = vec![0u8; 4096];
        for (addr, len) in bufs {
            let mut off = 0usize;
            while off < len as usize && given < MAX_REQUEST {
                let n = (len as usize - off)
                    .min(random.len())
                    .min(MAX_REQUEST - given);
                if getrandom(&mut random[..n]).is_err() {
                    return given as u32;
                }
                let Some(at) = addr.checked_add(off as u64) else {
                    return given as u32;
                };
                if mem.write_slice(&random[..n], at).is_err() {
                    return given as u32;
                }
                off += n;
                given += n;
            }
        }
        self.bytes += given as u64;
        given as u32
    }
}

impl VirtioDevice for Rng {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Rng
    }

    fn features(&self) -> u64 {
        FEATURE_VERSION_1
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[QUEUE_SIZE]
    }

    /// virtio-rng has no config space.
    fn read_config(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn process_queue(
        &mut self,
        index: usize,
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<u32, QueueFault> {
        drain_queue(index, queue, mem, |chain| self.serve(chain, mem))
    }

    fn report(&self, doc: &mut VirtioDeviceDoc, _phases: &[TimelinePhase]) {
        doc.rng_bytes = Some(self.bytes);
        doc.bad_requests = self.bad_requests;
        doc.first_bad_request = self.first_bad.clone();
    }
}
