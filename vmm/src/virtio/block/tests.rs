//! A disk served end to end: the transport set up as a driver does,
//! requests through the queue, the image read and written.

use std::io::{Read, Seek, SeekFrom, Write};

use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_mmio::VIRTIO_MMIO_CONFIG;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::*;
use crate::timeline::Clock;
use crate::virtio::mmio::MmioTransport;
use crate::virtio::testing::*;

const H: u64 = BUFFERS;
const D: u64 = BUFFERS + 0x1000;
const S: u64 = BUFFERS + 0x8000;
const SIZE: u16 = 16;

struct Rig {
    t: MmioTransport,
    mem: GuestMemoryMmap,
    image: tempfile::NamedTempFile,
    sent: u16,
}

fn rig(readonly: bool) -> Rig {
    let mut image = tempfile::NamedTempFile::new().unwrap();
    let content: Vec<u8> = (0..64 * 512).map(|i| (i % 251) as u8).collect();
    image.write_all(&content).unwrap();
    let disk = DiskImage::open(&DiskSpec {
        path: image.path().to_path_buf(),
        readonly,
    })
    .unwrap();
    let mem = memory();
    let mut t = transport(Box::new(Block::new(disk, Clock::start())), &mem);
    let features = FEATURE_VERSION_1
        | 1 << VIRTIO_BLK_F_FLUSH
        | if readonly { 1 << VIRTIO_BLK_F_RO } else { 0 };
    initialise(&mut t, features, 1, SIZE);
    assert!(t.live());
    Rig {
        t,
        mem,
        image,
        sent: 0,
    }
}

impl Rig {
    /// Sends one request (header, optional data, status) and returns the
    /// status byte and the used length.
    fn request(&mut self, type_: u32, sector: u64, data: Option<(u32, bool)>) -> (u8, u32) {
        let mem = &self.mem;
        mem.write_obj(type_, GuestAddress(H)).unwrap();
        mem.write_obj(sector, GuestAddress(H + 8)).unwrap();
        mem.write_obj(0xffu8, GuestAddress(S)).unwrap();
        write_desc(mem, 0, 0, H, 16, NEXT, 1);
        match data {
            Some((len, device_writes)) => {
                let f = if device_writes { NEXT | WRITE } else { NEXT };
                write_desc(mem, 0, 1, D, len, f, 2);
                write_desc(mem, 0, 2, S, 1, WRITE, 0);
            }
            None => write_desc(mem, 0, 1, S, 1, WRITE, 0),
        }
        publish(mem, 0, SIZE, self.sent, &[0]);
        self.t.process_queue(0);
        let n = self.sent;
        self.sent += 1;
        assert_eq!(used_idx(mem, 0), self.sent);
        let (_, len) = used_elem(mem, 0, SIZE, n);
        (mem.read_obj(GuestAddress(S)).unwrap(), len)
    }

    fn image_bytes(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        let f = self.image.as_file_mut();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut v).unwrap();
        v
    }
}

#[test]
fn config_space_says_capacity_and_seg_max() {
    let mut r = rig(false);
    let mut cap = [0u8; 8];
    r.t.read(u64::from(VIRTIO_MMIO_CONFIG), &mut cap);
    assert_eq!(u64::from_le_bytes(cap), 64);
    let mut seg = [0u8; 4];
    r.t.read(u64::from(VIRTIO_MMIO_CONFIG) + 12, &mut seg);
    assert_eq!(u32::from_le_bytes(seg), SEG_MAX);
    let mut past = [0xffu8; 4];
    r.t.read(u64::from(VIRTIO_MMIO_CONFIG) + 4000, &mut past);
    assert_eq!(past, [0; 4]);
}

#[test]
fn reads_writes_flushes_and_get_id() {
    let mut r = rig(false);
    let (status, len) = r.request(VIRTIO_BLK_T_IN, 2, Some((1024, true)));
    assert_eq!((status, len), (VIRTIO_BLK_S_OK as u8, 1025));
    let mut got = vec![0u8; 1024];
    r.mem.read_slice(&mut got, GuestAddress(D)).unwrap();
    let want: Vec<u8> = (1024..2048).map(|i| (i % 251) as u8).collect();
    assert_eq!(got, want);

    r.mem.write_slice(&[0xab; 512], GuestAddress(D)).unwrap();
    let (status, len) = r.request(VIRTIO_BLK_T_OUT, 5, Some((512, false)));
    assert_eq!((status, len), (VIRTIO_BLK_S_OK as u8, 1));
    let img = r.image_bytes();
    assert!(img[5 * 512..6 * 512].iter().all(|&b| b == 0xab));
    assert_eq!(img[6 * 512], (6 * 512 % 251) as u8);

    assert_eq!(
        r.request(VIRTIO_BLK_T_FLUSH, 0, None).0,
        VIRTIO_BLK_S_OK as u8
    );
    let (status, len) = r.request(VIRTIO_BLK_T_GET_ID, 0, Some((20, true)));
    assert_eq!((status, len), (VIRTIO_BLK_S_OK as u8, 21));
    let mut id = [0u8; 20];
    r.mem.read_slice(&mut id, GuestAddress(D)).unwrap();
    let name = r
        .image
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.as_bytes().starts_with(&id[..name.len().min(20)]));

    let doc = r.t.report(&[]);
    let disk = doc.disk.unwrap();
    assert_eq!(disk.total.requests, 4);
    assert_eq!((disk.total.reads, disk.total.writes), (1, 1));
    assert_eq!((disk.total.flushes, disk.total.get_id), (1, 1));
    assert_eq!(
        (disk.total.bytes_read, disk.total.bytes_written),
        (1024, 512)
    );
    assert_eq!(disk.total.errors, 0);
    assert_eq!(disk.latency.iter().map(|b| b.count).sum::<u64>(), 4);
    assert_eq!(
        disk.by_phase.len(),
        1,
        "all outside phases: {:?}",
        disk.by_phase
    );
}

#[test]
fn a_readonly_disk_refuses_writes_and_stays_unchanged() {
    let mut r = rig(true);
    let before = r.image_bytes();
    r.mem.write_slice(&[0xcd; 512], GuestAddress(D)).unwrap();
    let (status, _) = r.request(VIRTIO_BLK_T_OUT, 0, Some((512, false)));
    assert_eq!(status, VIRTIO_BLK_S_IOERR as u8);
    assert_eq!(
        r.request(VIRTIO_BLK_T_FLUSH, 0, None).0,
        VIRTIO_BLK_S_OK as u8
    );
    assert_eq!(r.image_bytes(), before);
    let disk = r.t.report(&[]).disk.unwrap();
    assert_eq!(disk.total.errors, 1);
    assert!(disk.readonly);
}

#[test]
fn bad_requests_get_an_error_status_and_the_device_goes_on() {
    let mut r = rig(false);
    let (status, len) = r.request(VIRTIO_BLK_T_IN, 63, Some((1024, true)));
    assert_eq!((status, len), (VIRTIO_BLK_S_IOERR as u8, 1));
    assert_eq!(r.request(42, 0, None).0, VIRTIO_BLK_S_UNSUPP as u8);
    // Still serving.
    assert_eq!(
        r.request(VIRTIO_BLK_T_IN, 0, Some((512, true))).0,
        VIRTIO_BLK_S_OK as u8
    );
    assert!(r.t.live());
    let doc = r.t.report(&[]);
    assert_eq!(doc.bad_requests, 2);
    assert!(doc
        .first_bad_request
        .unwrap()
        .contains("past the disk's end"));
}

#[test]
fn requests_split_by_the_phase_they_started_in() {
    let mut r = rig(false);
    r.request(VIRTIO_BLK_T_IN, 0, Some((512, true)));
    let phases = [crate::timeline::TimelinePhase {
        name: "kernel".into(),
        start_ns: 0,
        end_ns: u64::MAX,
        duration_ns: u64::MAX,
        from: String::new(),
        to: String::new(),
    }];
    let disk = r.t.report(&phases).disk.unwrap();
    assert_eq!(disk.by_phase.len(), 1);
    assert_eq!(disk.by_phase[0].phase, "kernel");
    assert_eq!(disk.by_phase[0].io.bytes_read, 512);
}
