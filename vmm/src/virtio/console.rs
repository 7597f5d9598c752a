//! virtio-console (`--console virtio`, virtio 1.x 5.3) with one port and
//! no multiport: queue 0 receives (the guest's input; none is ever
//! given), queue 1 transmits. What the guest transmits goes into the same
//! console sink as the serial port's bytes (its milestones, halt and panic
//! lines, `--serial FILE`), one queue notification per write instead of
//! one exit per byte. The guest needs `console=hvc0`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use virtio_queue::{DescriptorChain, Queue};
use vm_memory::{Bytes, GuestMemoryMmap};

use super::chain::{self, drain_queue, Access, BadRequests, ChainError};
use super::report::VirtioDeviceDoc;
use super::{DeviceKind, QueueFault, VirtioDevice, FEATURE_VERSION_1};
use crate::console::ConsoleSink;
use crate::timeline::TimelinePhase;

/// Both queues' size.
pub const QUEUE_SIZE: u16 = 64;
/// The transmit queue.
pub const TRANSMIT_QUEUE: usize = 1;
/// Most bytes taken from one transmit chain; the rest is dropped.
pub const MAX_CHAIN_BYTES: usize = 1 << 20;

/// The bytes of a transmit chain, at most [`MAX_CHAIN_BYTES`].
pub fn parse_transmit(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
) -> Result<Vec<u8>, ChainError> {
    const WHAT: &str = "transmit buffer";
    let mut out = Vec::new();
    for d in chain::descriptors(chain)? {
        chain::check_direction(&d, Access::Readable, WHAT)?;
        let take = d.len().min((MAX_CHAIN_BYTES - out.len()) as u32);
        if take == 0 {
            continue;
        }
        chain::check_inside(mem, d.addr(), take, Access::Readable, WHAT)?;
        let start = out.len();
        out.resize(start + take as usize, 0);
        mem.read_slice(&mut out[start..], d.addr())
            .map_err(|_| ChainError::Outside {
                what: WHAT,
                addr: d.addr().0,
                len: d.len(),
            })?;
    }
    Ok(out)
}

/// A virtio console writing into the shared console sink.
pub struct Console {
    sink: Arc<Mutex<ConsoleSink>>,
    bytes: u64,
    bad: BadRequests,
}

impl Console {
    pub fn new(sink: Arc<Mutex<ConsoleSink>>) -> Self {
        Self {
            sink,
            bytes: 0,
            bad: BadRequests::default(),
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
            Err(e) => self.bad.note(&e),
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
        self.bad.report(doc);
    }
}
