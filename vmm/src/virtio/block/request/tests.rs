//! Hostile and well-formed chains through the parser.

use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::*;
use crate::virtio::testing::*;

const SIZE: u16 = 16;
const CAPACITY: u64 = 64;

fn queue(mem: &GuestMemoryMmap) -> Queue {
    let mut q = Queue::new(SIZE).unwrap();
    q.set_size(SIZE);
    q.set_desc_table_address(Some(desc_table(0) as u32), Some(0));
    q.set_avail_ring_address(Some(avail_ring(0) as u32), Some(0));
    q.set_used_ring_address(Some(used_ring(0) as u32), Some(0));
    q.set_ready(true);
    assert!(q.is_valid(mem));
    q
}

fn header(mem: &GuestMemoryMmap, at: u64, type_: u32, sector: u64) {
    mem.write_obj(type_, GuestAddress(at)).unwrap();
    mem.write_obj(sector, GuestAddress(at + 8)).unwrap();
}

/// Parses the chain at head 0.
fn parse_head(mem: &GuestMemoryMmap) -> Parsed {
    let mut q = queue(mem);
    publish(mem, 0, SIZE, 0, &[0]);
    let chain = q.iter(mem).unwrap().next().expect("a chain");
    parse(chain, mem, CAPACITY)
}

const H: u64 = BUFFERS;
const D: u64 = BUFFERS + 0x1000;
const S: u64 = BUFFERS + 0x3000;

fn read_chain(mem: &GuestMemoryMmap, sector: u64, data_len: u32) {
    header(mem, H, VIRTIO_BLK_T_IN, sector);
    write_desc(mem, 0, 0, H, 16, NEXT, 1);
    write_desc(mem, 0, 1, D, data_len, NEXT | WRITE, 2);
    write_desc(mem, 0, 2, S, 1, WRITE, 0);
}

#[test]
fn a_read_parses() {
    let mem = memory();
    read_chain(&mem, 3, 1024);
    let p = parse_head(&mem);
    assert_eq!(p.status, Some(GuestAddress(S)));
    let r = p.request.unwrap();
    assert_eq!(r.kind, RequestKind::Read);
    assert_eq!((r.sector, r.data_len, r.data.len()), (3, 1024, 1));
}

#[test]
fn a_write_needs_readable_data() {
    let mem = memory();
    header(&mem, H, VIRTIO_BLK_T_OUT, 0);
    write_desc(&mem, 0, 0, H, 16, NEXT, 1);
    write_desc(&mem, 0, 1, D, 512, NEXT | WRITE, 2);
    write_desc(&mem, 0, 2, S, 1, WRITE, 0);
    let p = parse_head(&mem);
    assert_eq!(p.status, Some(GuestAddress(S)));
    assert!(matches!(
        p.request,
        Err(RequestError::Chain(ChainError::Direction {
            what: "write's data buffer",
            found: Access::Writable
        }))
    ));
    write_desc(&mem, 0, 1, D, 512, NEXT, 2);
    assert_eq!(parse_head(&mem).request.unwrap().kind, RequestKind::Write);
}

#[test]
fn data_outside_memory_or_past_the_disk_is_refused() {
    let mem = memory();
    read_chain(&mem, 0, 512);
    write_desc(&mem, 0, 1, MEM_SIZE as u64 - 256, 512, NEXT | WRITE, 2);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::Chain(ChainError::Outside { .. }))
    ));
    write_desc(&mem, 0, 1, u64::MAX - 100, 512, NEXT | WRITE, 2);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::Chain(ChainError::Outside { .. }))
    ));
    read_chain(&mem, CAPACITY - 1, 1024);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::PastEnd { .. })
    ));
    read_chain(&mem, u64::MAX, 512);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::PastEnd { .. })
    ));
}

#[test]
fn wrong_lengths_are_refused() {
    let mem = memory();
    read_chain(&mem, 0, 100);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::Unaligned(100))
    ));
    read_chain(&mem, 0, 512);
    write_desc(&mem, 0, 0, H, 8, NEXT, 1);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::HeaderLength(8))
    ));
    // No data at all on a read.
    read_chain(&mem, 0, 512);
    write_desc(&mem, 0, 0, H, 16, NEXT, 2);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::NoData(RequestKind::Read))
    ));
    // A zero-length status.
    read_chain(&mem, 0, 512);
    write_desc(&mem, 0, 2, S, 0, WRITE, 0);
    let p = parse_head(&mem);
    assert_eq!(p.status, None);
    assert!(matches!(p.request, Err(RequestError::StatusEmpty)));
}

#[test]
fn the_status_must_be_writable_and_in_memory() {
    let mem = memory();
    read_chain(&mem, 0, 512);
    write_desc(&mem, 0, 2, S, 1, 0, 0);
    let p = parse_head(&mem);
    assert_eq!(p.status, None);
    assert!(matches!(
        p.request,
        Err(RequestError::Chain(ChainError::Direction {
            what: "status byte",
            found: Access::Readable
        }))
    ));
    write_desc(&mem, 0, 2, MEM_SIZE as u64, 1, WRITE, 0);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::Chain(ChainError::Outside {
            what: "status byte",
            ..
        }))
    ));
    // A header alone has no status.
    write_desc(&mem, 0, 0, H, 16, 0, 0);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::NoStatus)
    ));
}

#[test]
fn loops_and_bad_next_indexes_are_broken_chains() {
    let mem = memory();
    read_chain(&mem, 0, 512);
    // 2 -> 1 -> 2 -> ...: the iterator stops after SIZE descriptors.
    write_desc(&mem, 0, 2, S, 1, WRITE | NEXT, 1);
    let p = parse_head(&mem);
    assert_eq!(p.status, None);
    assert!(matches!(
        p.request,
        Err(RequestError::Chain(ChainError::Broken))
    ));
    // A next index past the table.
    read_chain(&mem, 0, 512);
    write_desc(&mem, 0, 1, D, 512, NEXT | WRITE, 999);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::Chain(ChainError::Broken))
    ));
}

#[test]
fn the_header_must_be_readable_and_the_type_known() {
    let mem = memory();
    read_chain(&mem, 0, 512);
    write_desc(&mem, 0, 0, H, 16, NEXT | WRITE, 1);
    assert!(matches!(
        parse_head(&mem).request,
        Err(RequestError::Chain(ChainError::Direction {
            what: "header",
            found: Access::Writable
        }))
    ));
    read_chain(&mem, 0, 512);
    header(&mem, H, 11, 0);
    let p = parse_head(&mem);
    assert!(matches!(p.request, Err(RequestError::Unsupported(11))));
    assert_eq!(p.status, Some(GuestAddress(S)), "UNSUPP goes in the status");
}

#[test]
fn flush_and_get_id() {
    let mem = memory();
    header(&mem, H, VIRTIO_BLK_T_FLUSH, 0);
    write_desc(&mem, 0, 0, H, 16, NEXT, 1);
    write_desc(&mem, 0, 1, S, 1, WRITE, 0);
    assert_eq!(parse_head(&mem).request.unwrap().kind, RequestKind::Flush);
    header(&mem, H, VIRTIO_BLK_T_GET_ID, 0);
    write_desc(&mem, 0, 0, H, 16, NEXT, 1);
    write_desc(&mem, 0, 1, D, 20, NEXT | WRITE, 2);
    write_desc(&mem, 0, 2, S, 1, WRITE, 0);
    assert_eq!(parse_head(&mem).request.unwrap().kind, RequestKind::GetId);
    assert_eq!(&id_bytes("disk.raw")[..9], b"disk.raw\0");
}
