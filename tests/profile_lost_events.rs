//! Records the kernel cannot hand over are counted and reported, never
//! silently dropped: a one-page ring buffer that is read only once, while
//! the profiled process starts and ends hundreds of threads.

mod support;

use support::*;

use std::time::Duration;

use bootscope_profiler::{Collector, CollectorConfig, TargetSpec};

#[test]
fn a_full_ring_buffer_counts_lost_events() {
    require_bpf!();
    let mut cfg = CollectorConfig::new(TargetSpec::CurrentProcess);
    cfg.ring_buffer_bytes = 4096;
    cfg.drain_interval = Some(Duration::from_secs(3600));
    let c = Collector::start(cfg).expect("collector starts");
    // Each thread is at least a birth and an exit record (56 bytes + 8 of
    // header): 400 threads are about 50 KiB for a 4 KiB buffer.
    for i in 0..400 {
        std::thread::Builder::new()
            .name(format!("flood{i}"))
            .spawn(|| {})
            .unwrap()
            .join()
            .unwrap();
    }
    let live = c.snapshot();
    assert!(live.lost_events > 0, "snapshot: no lost events");
    let p = c.finish();
    assert!(p.lost_events >= live.lost_events);
    // 800 records were produced; the buffer held at most 64.
    assert!(p.lost_events >= 700, "lost {}", p.lost_events);
    let ring = p
        .sources
        .iter()
        .find(|s| s.name == "ringbuf:events")
        .unwrap();
    assert!(
        ring.events + p.lost_events >= 800,
        "{ring:?} lost {}",
        p.lost_events
    );
    // And it survives the round trip through the document.
    let json = serde_json::to_string(&p).unwrap();
    let back: bootscope_profiler::Profile = serde_json::from_str(&json).unwrap();
    assert_eq!(back.lost_events, p.lost_events);
}
