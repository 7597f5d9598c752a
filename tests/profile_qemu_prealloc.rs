//! `bootscope profile` on QEMU (7.2 or later) preallocating 1 GiB with two
//! `touch_pages` threads in a thread-context bound to node 0: both threads
//! are named, with the CPUs they ran on, their node, and the memory they
//! allocated (bytes, so transparent huge pages count in full).

mod support;

use support::*;

const GIB: u64 = 1 << 30;

#[test]
fn names_prealloc_threads_their_cpus_and_pages() {
    require_bpf!();
    require_kvm!();
    require_qemu_thread_context!();
    let dir = scratch("qemu");
    let out = dir.join("profile.json");
    let o = profile_command(
        &out,
        &[
            "qemu-system-x86_64",
            "-enable-kvm",
            "-S",
            "-M",
            "microvm",
            "-nodefaults",
            "-display",
            "none",
            "-name",
            "debug-threads=on",
            "-m",
            "1G",
            "-object",
            "thread-context,id=tc0,node-affinity=0",
            "-object",
            "memory-backend-ram,id=m0,size=1G,prealloc=on,prealloc-threads=2,prealloc-context=tc0",
            "-machine",
            "memory-backend=m0",
            "-monitor",
            "stdio",
        ],
        Some("quit\n"),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let p = read_profile(&out);
    assert_eq!(p.target.exit_code, Some(0));

    let touch: Vec<_> = p
        .threads
        .iter()
        .filter(|t| t.name == "touch_pages")
        .collect();
    assert_eq!(touch.len(), 2, "threads: {:#?}", p.threads);
    let node0_cpus: Vec<u32> = p
        .host
        .numa_nodes
        .iter()
        .find(|n| n.id == 0)
        .map(|n| n.cpus.clone())
        .unwrap_or_default();
    let mut bytes = 0;
    for t in &touch {
        assert_eq!(t.role, "prealloc");
        assert!(!t.cpus.is_empty(), "{t:?}");
        // node-affinity=0: they ran on node 0's CPUs only.
        assert_eq!(t.nodes, vec![0], "{t:?}");
        for c in &t.cpus {
            assert!(node0_cpus.contains(&c.cpu), "cpu {} not on node 0", c.cpu);
            assert!(c.run_ns > 0);
        }
        assert!(t.end_ns > t.start_ns, "short-lived thread has a lifetime");
        assert_eq!(t.pages_local + t.pages_remote, t.pages_allocated);
        bytes += t.bytes_allocated;
    }
    // The two threads allocated the 1 GiB backend between them (plus their
    // page tables), give or take 3 %.
    assert!(
        bytes > GIB * 97 / 100 && bytes < GIB * 103 / 100,
        "touch_pages threads allocated {bytes} bytes, expected about {GIB}"
    );
    assert!(p.numa.bytes_allocated >= bytes);
    assert_eq!(p.lost_events, 0);
    assert!(err.contains("touch_pages"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
