use virtio_bindings::virtio_config::*;
use virtio_bindings::virtio_mmio::*;

use super::*;
use crate::virtio::rng::Rng;
use crate::virtio::testing::*;
use vm_memory::{Bytes, GuestAddress};

fn rng_transport() -> (MmioTransport, GuestMemoryMmap) {
    let mem = memory();
    (transport(Box::new(Rng::default()), &mem), mem)
}

#[test]
fn identifies_as_a_modern_device() {
    let (mut t, _) = rng_transport();
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_MAGIC_VALUE), 0x7472_6976);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_VERSION), 2);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_DEVICE_ID), 4);
    write_reg(&mut t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
    assert_eq!(
        read_reg(&mut t, VIRTIO_MMIO_DEVICE_FEATURES),
        1,
        "VERSION_1"
    );
    write_reg(&mut t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 7);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_DEVICE_FEATURES), 0);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_QUEUE_NUM_MAX), 64);
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_SEL, 1);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_QUEUE_NUM_MAX), 0, "no queue 1");
    // Registers are 32-bit: a byte read reads nothing.
    let mut b = [0xffu8; 1];
    t.read(0, &mut b);
    assert_eq!(b, [0]);
}

#[test]
fn full_initialisation_goes_live_and_marks_the_timeline() {
    let (t, _) = rng_transport();
    let rec = Arc::new(Recorder::new(crate::timeline::Clock::start()));
    let mut t = t.with_recorder(rec.clone());
    let s = initialise(&mut t, FEATURE_VERSION_1, 1, 16);
    assert_eq!(
        s,
        VIRTIO_CONFIG_S_ACKNOWLEDGE
            | VIRTIO_CONFIG_S_DRIVER
            | VIRTIO_CONFIG_S_FEATURES_OK
            | VIRTIO_CONFIG_S_DRIVER_OK
    );
    assert!(t.live());
    assert!(rec
        .snapshot()
        .iter()
        .any(|m| m.name == "vmm: test driver ready"));
    let doc = t.report(&[]);
    assert_eq!((doc.activations, doc.resets), (1, 0));
    assert!(doc.driver_ready_ns.is_some());
}

#[test]
fn features_the_device_lacks_or_a_legacy_driver_get_no_features_ok() {
    for features in [0, FEATURE_VERSION_1 | 1 << 5] {
        let (mut t, _) = rng_transport();
        let s = initialise(&mut t, features, 1, 16);
        assert_eq!(s & VIRTIO_CONFIG_S_FEATURES_OK, 0, "{features:#x}");
        assert_eq!(
            s & VIRTIO_CONFIG_S_DRIVER_OK,
            0,
            "no DRIVER_OK without FEATURES_OK"
        );
        assert!(!t.live());
    }
}

#[test]
fn out_of_order_status_and_late_queue_writes_are_ignored() {
    let (mut t, _) = rng_transport();
    // DRIVER_OK straight away: refused.
    write_reg(&mut t, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_DRIVER_OK);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_STATUS), 0);
    // Queue registers before FEATURES_OK: ignored.
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_READY, 1);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_QUEUE_READY), 0);
    initialise(&mut t, FEATURE_VERSION_1, 1, 16);
    // After DRIVER_OK: ignored, and clearing bits is not allowed.
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_NUM, 4);
    write_reg(&mut t, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE);
    assert!(t.live());
    // Reset clears everything.
    write_reg(&mut t, VIRTIO_MMIO_STATUS, 0);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_STATUS), 0);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_QUEUE_READY), 0);
    assert_eq!(t.report(&[]).resets, 1);
}

#[test]
fn a_queue_outside_memory_breaks_the_device_until_reset() {
    let (mut t, _) = rng_transport();
    write_reg(&mut t, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE);
    write_reg(&mut t, VIRTIO_MMIO_STATUS, 3);
    write_reg(&mut t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
    write_reg(&mut t, VIRTIO_MMIO_DRIVER_FEATURES, 1);
    write_reg(&mut t, VIRTIO_MMIO_STATUS, 11);
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_NUM, 16);
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_DESC_LOW, 0);
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_DESC_HIGH, 0x10);
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_AVAIL_LOW, avail_ring(0) as u32);
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_USED_LOW, used_ring(0) as u32);
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_READY, 1);
    write_reg(&mut t, VIRTIO_MMIO_STATUS, 15);
    let s = read_reg(&mut t, VIRTIO_MMIO_STATUS);
    assert_ne!(s & VIRTIO_CONFIG_S_NEEDS_RESET, 0);
    assert!(!t.live());
    assert!(t.broken().is_some());
    assert_eq!(
        read_reg(&mut t, VIRTIO_MMIO_INTERRUPT_STATUS) & VIRTIO_MMIO_INT_CONFIG,
        VIRTIO_MMIO_INT_CONFIG
    );
    assert_eq!(t.report(&[]).broken.len(), 1);
    // The guest resets and sets it up properly: live again.
    initialise(&mut t, FEATURE_VERSION_1, 1, 16);
    assert!(t.live());
    assert!(t.broken().is_none());
}

#[test]
fn an_impossible_avail_index_breaks_the_device() {
    let (mut t, mem) = rng_transport();
    initialise(&mut t, FEATURE_VERSION_1, 1, 16);
    // 40 new entries on a 16-entry queue.
    mem.write_obj(40u16, GuestAddress(avail_ring(0) + 2))
        .unwrap();
    t.process_queue(0);
    assert!(!t.live());
    let why = t.broken().unwrap().to_string();
    assert!(why.contains("available ring"), "{why}");
}

#[test]
fn rng_fills_writable_buffers_and_interrupts() {
    let (mut t, mem) = rng_transport();
    initialise(&mut t, FEATURE_VERSION_1, 1, 16);
    write_desc(&mem, 0, 0, BUFFERS, 64, WRITE, 0);
    // A readable buffer: wrong direction, nothing given.
    write_desc(&mem, 0, 1, BUFFERS + 0x100, 64, 0, 0);
    publish(&mem, 0, 16, 0, &[0, 1]);
    t.process_queue(0);
    assert_eq!(used_idx(&mem, 0), 2);
    assert_eq!(used_elem(&mem, 0, 16, 0), (0, 64));
    assert_eq!(used_elem(&mem, 0, 16, 1), (1, 0));
    let mut got = [0u8; 64];
    mem.read_slice(&mut got, GuestAddress(BUFFERS)).unwrap();
    assert!(got.iter().any(|&b| b != 0));
    assert_eq!(
        read_reg(&mut t, VIRTIO_MMIO_INTERRUPT_STATUS),
        VIRTIO_MMIO_INT_VRING
    );
    assert_eq!(t.interrupt().irqfd().read().unwrap(), 1);
    write_reg(&mut t, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_VRING);
    assert_eq!(read_reg(&mut t, VIRTIO_MMIO_INTERRUPT_STATUS), 0);
    let doc = t.report(&[]);
    assert_eq!((doc.rng_bytes, doc.bad_requests), (Some(64), 1));
    assert_eq!(
        doc.first_bad_request.as_deref(),
        Some("buffer is device-readable (wrong direction)")
    );
}

#[test]
fn console_transmits_readable_buffers_into_the_sink() {
    let mem = memory();
    let out = bootscope_testkit::Capture::default();
    let rec = Arc::new(Recorder::new(crate::timeline::Clock::start()));
    let sink = crate::console::ConsoleSink::new(Box::new(out.clone()), Vec::new(), rec);
    let console = crate::virtio::console::Console::new(Arc::new(std::sync::Mutex::new(sink)));
    let mut t = transport(Box::new(console), &mem);
    initialise(&mut t, FEATURE_VERSION_1, 2, 16);
    mem.write_slice(b"hello\n", GuestAddress(BUFFERS)).unwrap();
    write_desc(&mem, 1, 0, BUFFERS, 6, 0, 0);
    // A device-writable transmit buffer: wrong direction, dropped.
    write_desc(&mem, 1, 1, BUFFERS, 6, WRITE, 0);
    // A chain that loops on itself.
    write_desc(&mem, 1, 2, BUFFERS, 6, NEXT, 2);
    publish(&mem, 1, 16, 0, &[0, 1, 2]);
    t.process_queue(1);
    assert_eq!(used_idx(&mem, 1), 3);
    assert_eq!(out.text(), "hello\n");
    let doc = t.report(&[]);
    assert_eq!((doc.console_bytes, doc.bad_requests), (Some(6), 2));
    assert_eq!(
        doc.first_bad_request.as_deref(),
        Some("transmit buffer is device-writable (wrong direction)")
    );
}

#[test]
fn a_notification_before_driver_ok_is_not_served() {
    let (mut t, mem) = rng_transport();
    write_desc(&mem, 0, 0, BUFFERS, 8, WRITE, 0);
    publish(&mem, 0, 16, 0, &[0]);
    t.process_queue(0);
    assert_eq!(used_idx(&mem, 0), 0);
    // The notification register reaches the queue's eventfd.
    write_reg(&mut t, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
    assert_eq!(t.queue_evts()[0].read().unwrap(), 1);
}
