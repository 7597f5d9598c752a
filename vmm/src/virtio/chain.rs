//! Descriptor chains, as every device takes and checks them: the
//! available chains of a queue served and put in the used ring
//! ([`drain_queue`]); a chain's descriptors, whole or refused as broken
//! ([`descriptors`]); each buffer checked for its direction and for lying
//! in guest memory ([`check`]), with one error type ([`ChainError`]); and
//! the tally of refused requests each device reports ([`BadRequests`]).

use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueOwnedT, QueueT};
use vm_memory::{GuestAddress, GuestMemory, GuestMemoryMmap, Permissions};

use super::report::VirtioDeviceDoc;
use super::QueueFault;

/// Which way a buffer goes, as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The device reads it (the driver filled it).
    Readable,
    /// The device writes it (`VRING_DESC_F_WRITE`).
    Writable,
}

impl Access {
    /// How descriptor `d` is marked.
    pub fn of(d: &Descriptor) -> Self {
        if d.is_write_only() {
            Access::Writable
        } else {
            Access::Readable
        }
    }

    fn permissions(self) -> Permissions {
        match self {
            Access::Readable => Permissions::Read,
            Access::Writable => Permissions::Write,
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Access::Readable => "readable",
            Access::Writable => "writable",
        })
    }
}

/// Why a descriptor chain is refused, whatever the device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("empty descriptor chain")]
    Empty,
    #[error("descriptor chain cut short (a loop, a next index past the table, or a descriptor outside guest memory)")]
    Broken,
    #[error("{what} is device-{found} (wrong direction)")]
    Direction { what: &'static str, found: Access },
    #[error("{what} {addr:#x}+{len} is outside guest memory")]
    Outside {
        what: &'static str,
        addr: u64,
        len: u32,
    },
}

/// The descriptors of `chain`; a chain the queue's iterator had to cut
/// (its last descriptor still says "next") is broken.
pub fn descriptors(
    chain: DescriptorChain<&GuestMemoryMmap>,
) -> Result<Vec<Descriptor>, ChainError> {
    let descs: Vec<Descriptor> = chain.collect();
    match descs.last() {
        None => Err(ChainError::Empty),
        Some(d) if d.has_next() => Err(ChainError::Broken),
        Some(_) => Ok(descs),
    }
}

/// Checks that `d`, the chain's `what`, is marked `want`.
pub fn check_direction(d: &Descriptor, want: Access, what: &'static str) -> Result<(), ChainError> {
    let found = Access::of(d);
    if found == want {
        Ok(())
    } else {
        Err(ChainError::Direction { what, found })
    }
}

/// Checks that `len` bytes at `addr` (the chain's `what`) lie in guest
/// memory with the access the device needs.
pub fn check_inside(
    mem: &GuestMemoryMmap,
    addr: GuestAddress,
    len: u32,
    access: Access,
    what: &'static str,
) -> Result<(), ChainError> {
    if len == 0 || GuestMemory::check_range(mem, addr, len as usize, access.permissions()) {
        Ok(())
    } else {
        Err(ChainError::Outside {
            what,
            addr: addr.0,
            len,
        })
    }
}

/// Checks buffer `d` (the chain's `what`): marked `want`, and all of it in
/// guest memory.
pub fn check(
    mem: &GuestMemoryMmap,
    d: &Descriptor,
    want: Access,
    what: &'static str,
) -> Result<(), ChainError> {
    check_direction(d, want, what)?;
    check_inside(mem, d.addr(), d.len(), want, what)
}

/// The requests a device refused: how many, and why the first was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BadRequests {
    pub count: u64,
    pub first: Option<String>,
}

impl BadRequests {
    /// Counts one refused request; the first one's reason is kept.
    pub fn note(&mut self, why: &dyn std::fmt::Display) {
        self.count += 1;
        self.first.get_or_insert_with(|| why.to_string());
    }

    /// Into the device's timeline entry.
    pub fn report(&self, doc: &mut VirtioDeviceDoc) {
        doc.bad_requests = self.count;
        doc.first_bad_request = self.first.clone();
    }
}

/// Takes every available chain of `queue`, hands each to `serve` (which
/// returns the bytes it wrote into the chain's buffers) and puts it in the
/// used ring; loops until the ring is empty. Ring corruption is a
/// [`QueueFault`].
pub fn drain_queue<F>(
    index: usize,
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    mut serve: F,
) -> Result<u32, QueueFault>
where
    F: FnMut(DescriptorChain<&GuestMemoryMmap>) -> u32,
{
    let mut used = 0u32;
    loop {
        let chains: Vec<_> = queue
            .iter(mem)
            .map_err(|source| QueueFault::Avail {
                queue: index,
                source,
            })?
            .collect();
        if chains.is_empty() {
            return Ok(used);
        }
        for chain in chains {
            let head = chain.head_index();
            let len = serve(chain);
            queue
                .add_used(mem, head, len)
                .map_err(|source| QueueFault::Used {
                    queue: index,
                    source,
                })?;
            used = used.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_keeps_the_first_reason() {
        let mut bad = BadRequests::default();
        bad.note(&ChainError::Broken);
        bad.note(&ChainError::Empty);
        let mut doc = VirtioDeviceDoc::default();
        bad.report(&mut doc);
        assert_eq!(doc.bad_requests, 2);
        assert_eq!(
            doc.first_bad_request.as_deref(),
            Some(ChainError::Broken.to_string().as_str())
        );
    }

    #[test]
    fn messages_name_the_buffer() {
        let e = ChainError::Direction {
            what: "transmit buffer",
            found: Access::Writable,
        };
        assert_eq!(
            e.to_string(),
            "transmit buffer is device-writable (wrong direction)"
        );
        let e = ChainError::Outside {
            what: "buffer",
            addr: 0x1000,
            len: 8,
        };
        assert_eq!(e.to_string(), "buffer 0x1000+8 is outside guest memory");
    }
}
