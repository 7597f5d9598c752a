//! virtio-console (`--console virtio`, virtio 1.x 5.3) with one port and
//! no multiport: queue 0 receives (the guest's input; none is ever
//! given), queue 1 transmits. What the guest transmits goes into the same
//! console sink as the serial port's bytes (its milestones, halt and panic
//! lines, `--serial FILE`), one queue notification per write instead of
//! one exit per byte. The guest needs `console=hvc0`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use virtio_queue::{DescriptorChain, Queue};
use vm_memory::{Bytes, GuestMemory, GuestMemoryMmap, Permissions};

use super::report::VirtioDeviceDoc;
use super::{drain_queue, DeviceKind, QueueFault, VirtioDevice, FEATURE_VERSION_1};
use crate::console::ConsoleSink;
use crate::timeline::TimelinePhase;

/// Both queues' size.
pub const QUEUE_SIZE: u16 = 64;
/// The transmit queue.
pub const TRANSMIT_QUEUE: usize = 1;
/// Most bytes taken from one transmit chain; the rest is dropped.
pub const MAX_CHAIN_BYTES: usize = 1 << 20;

/// Why a transmit chain is dropped.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConsoleError {
    #[error("descriptor chain cut short (a loop or a next index past the table)")]
    Broken,
    #[error("transmit buffer is device-writable (wrong direction)")]
    Direction,
    #[error("transmit buffer {addr:#x}+{len} is outside guest memory")]
    Outside { addr: u64, len: u32 },
}

/// The bytes of a transmit chain, at most [`MAX_CHAIN_BYTES`].
pub fn parse_transmit(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
) -> Result<Vec<u8>, ConsoleError> {
    let mut out = Vec::new();
    let mut cut = false;
    for d in chain {
        cut = d.has_next();
        if d.is_write_only() {
            return Err(ConsoleError::Direction);
        }
        let take = (d.len() as usize).min(MAX_CHAIN_BYTES - out.len());
        if take == 0 {
            continue;
        }
        if !mem.check_range(d.addr(), take, Permissions::Read) {
            return Err(ConsoleError::Outside {
                addr: d.addr().0,
                len: d.len(),
            });
        }
        let start = out.len();
        out.resize(start + take, 0);
        mem.read_slice(&mut out[start..], d.addr())
            .map_err(|_| ConsoleError::Outside {
                addr: d.addr().0,
                len: d.len(),
            })?;
    }
    if cut {
        return Err(ConsoleError::Broken);
    }
    Ok(out)
}

/// A virtio console writing into the shared console sink.
pub struct Console {
    sink: Arc<Mutex<ConsoleSink>>,
    bytes: u64,
    bad_requests: u64,
    first_bad: Option<String>,
}

impl Console {
    pub fn new(sink: Arc<Mutex<ConsoleSink>>) -> Self {
        Self {
            sink,
            bytes: 0,
            bad_requests: 0,
            first_bad: None,
        }
    }

    fn transmit(&mut self, chain: DescriptorChain<&GuestMemoryMmap>, mem: &GuestMemoryMmap) {
        match parse_transmit(chain, mem) {
            Ok(bytes) => {
                self.bytes += bytes.len() as u64;
                let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
                // The sink keeps its own write errors for the report.
                let _ = sink.write_all(&bytes);
            }
            Err(e) => {
                self.bad_requests += 1;
                self.first_bad.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

impl VirtioDevice for Console {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Console
    }

    fn features(&self) -> u64 {
        FEATURE_VERSION_1
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[QUEUE_SIZE, QUEUE_SIZE]
    }

    /// `struct virtio_console_config` (cols, rows, max_nr_ports,
    /// emerg_wr): nothing the offered features make the driver read.
    fn read_config(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn process_queue(
        &mut self,
        index: usize,
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<u32, QueueFault> {
        if index != TRANSMIT_QUEUE {
            // Receive buffers wait for input that never comes.
            return Ok(0);
        }
        drain_queue(index, queue, mem, |chain| {
            self.transmit(chain, mem);
            0
        })
    }

    fn report(&self, doc: &mut VirtioDeviceDoc, _phases: &[TimelinePhase]) {
        doc.console_bytes = Some(self.bytes);
        doc.bad_requests = self.bad_requests;
        doc.first_bad_request = self.first_bad.clone();
    }
}
