//! virtio-rng (`--rng`, virtio 1.x 5.4): one queue of device-writable
//! buffers, each filled from the host's `getrandom`. Without it a guest
//! whose kernel has no other entropy source can wait for seconds before
//! userspace gets its first random bytes.

use virtio_queue::{DescriptorChain, Queue};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

use super::chain::{self, drain_queue, Access, BadRequests, ChainError};
use super::report::VirtioDeviceDoc;
use super::{DeviceKind, QueueFault, VirtioDevice, FEATURE_VERSION_1};
use crate::timeline::TimelinePhase;

/// The request queue's size.
pub const QUEUE_SIZE: u16 = 64;
/// Most bytes given for one request (Linux asks for at most a page or so
/// at a time; a guest asking for more gets this much).
pub const MAX_REQUEST: usize = 64 << 10;

/// The buffers of a chain, checked: all device-writable, in guest memory.
pub fn parse(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
) -> Result<Vec<(GuestAddress, u32)>, ChainError> {
    let descs = chain::descriptors(chain)?;
    let mut out = Vec::with_capacity(descs.len());
    for d in &descs {
        chain::check(mem, d, Access::Writable, "buffer")?;
        out.push((d.addr(), d.len()));
    }
    Ok(out)
}

/// Fills `buf` from the kernel's random pool.
pub(crate) fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
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
    bad: BadRequests,
}

impl Rng {
    fn serve(&mut self, chain: DescriptorChain<&GuestMemoryMmap>, mem: &GuestMemoryMmap) -> u32 {
        let bufs = match parse(chain, mem) {
            Ok(b) => b,
            Err(e) => {
                self.bad.note(&e);
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
        self.bad.report(doc);
    }
}
