use vm_memory::{Bytes, GuestAddress};

use super::super::backing::allocate;
use super::super::context::tests::forbid_setaffinity;
use super::super::plan::MemoryOptions;
use super::super::spec::HugePageSize;
use super::super::topology::Topology;
use super::*;

const MIB: u64 = 1 << 20;

fn setup(
    opts: MemoryOptions,
    layout: &[(GuestAddress, usize)],
) -> (MemoryPlan, GuestMemoryBacking) {
    let plan = MemoryPlan::new(&opts, &Topology::host().unwrap()).unwrap();
    let backing = allocate(&plan, layout).unwrap();
    (plan, backing)
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// Pages of `[ptr, ptr + len)` resident in memory, from mincore(2).
fn resident_pages(ptr: *mut u8, len: usize) -> usize {
    let mut vec = vec![0u8; len.div_ceil(4096)];
    // SAFETY: `vec` has one byte per 4 KiB page of the range; the
    // kernel only writes it.
    let r = unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) };
    assert_eq!(r, 0, "{}", io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

fn check_threads(report: &RegionReport, threads: usize, node: u32) {
    assert_eq!(report.threads.len(), threads);
    let page = report.page_size;
    assert_eq!(
        report.threads.iter().map(|t| t.pages_touched).sum::<u64>() * page,
        report.bytes
    );
    let own = sys::thread_affinity(0).unwrap();
    for (i, t) in report.threads.iter().enumerate() {
        assert_eq!(t.name, format!("prealloc-n{node}-{i}"));
        assert!(t.tid > 0 && t.tid != report.context.tid);
        assert_eq!(t.allowed_cpus, report.context.allowed_cpus);
        let cpu = t.last_cpu.expect("last CPU");
        assert!(
            t.allowed_cpus.contains(cpu),
            "{} ran on {cpu}, outside {}",
            t.name,
            t.allowed_cpus
        );
        assert!(own.contains(cpu));
        assert_eq!(t.node, Topology::host().unwrap().cpu_node(cpu));
        assert!(t.pages_touched > 0);
    }
    assert_eq!(report.context.name, format!("memctx-n{node}"));
}

#[test]
fn preallocates_64_mib_with_one_and_two_threads() {
    for threads in [1, 2] {
        let (plan, backing) = setup(
            MemoryOptions {
                total: Some(64 * MIB),
                prealloc: true,
                prealloc_threads: threads,
                ..Default::default()
            },
            &[(GuestAddress(0), (64 * MIB) as usize)],
        );
        let piece = &backing.regions()[0].pieces()[0];
        assert_eq!(resident_pages(piece.host_addr(), piece.len()), 0);
        let report = preallocate(&backing, &plan).unwrap();
        assert_eq!(report.regions.len(), 1);
        let r = &report.regions[0];
        assert_eq!(r.bytes, 64 * MIB);
        if kernel_at_least(5, 14) {
            assert_eq!(r.method, PopulateMethod::MadvPopulateWrite);
        }
        check_threads(r, threads, 0);
        assert_eq!(
            r.threads.iter().map(|t| t.pages_touched).sum::<u64>(),
            64 * MIB / 4096
        );
        assert_eq!(
            resident_pages(piece.host_addr(), piece.len()),
            (64 * MIB / 4096) as usize
        );
        assert_eq!(r.placement.sampled, PLACEMENT_SAMPLES as u64);
        assert!(
            r.placement.all_on(&"0".parse().unwrap()),
            "{:?}",
            r.placement
        );
        assert!(report.elapsed_ns >= r.elapsed_ns);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["regions"][0]["threads"][0]["name"], "prealloc-n0-0");
        assert_eq!(
            json["regions"][0]["context"]["allowed_cpus"],
            r.context.allowed_cpus.to_string()
        );
    }
}

#[test]
fn regions_run_concurrently_on_their_cpus() {
    // Two guest nodes bound to host node 0, over a layout with a hole:
    // region 1 straddles it.
    let own = sys::thread_affinity(0).unwrap();
    let last = own.highest().unwrap();
    let (plan, backing) = setup(
        MemoryOptions {
            numa: vec![
                "node=0,memory=24M,host-nodes=0".parse().unwrap(),
                "node=1,memory=40M,host-nodes=0,policy=interleave"
                    .parse()
                    .unwrap(),
            ],
            prealloc: true,
            prealloc_threads: 2,
            prealloc_cpus: Some(CpuSet::from_iter([last])),
            ..Default::default()
        },
        &[
            (GuestAddress(0), (32 * MIB) as usize),
            (GuestAddress(64 * MIB), (32 * MIB) as usize),
        ],
    );
    let report = preallocate(&backing, &plan).unwrap();
    assert_eq!(report.regions.len(), 2);
    assert_eq!(report.bytes(), 64 * MIB);
    for (r, node) in report.regions.iter().zip([0, 1]) {
        check_threads(r, 2, node);
        assert_eq!(r.context.allowed_cpus, CpuSet::from_iter([last]));
        assert!(r.threads.iter().all(|t| t.last_cpu == Some(last)));
    }
    let total = report.elapsed_ns;
    assert!(report.regions.iter().all(|r| r.elapsed_ns <= total));
    for region in backing.regions() {
        for p in region.pieces() {
            assert_eq!(resident_pages(p.host_addr(), p.len()), p.len() / 4096);
        }
    }
}

/// Threads of the concurrency test that reached their first madvise.
static ARRIVED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Waits (up to 10 s) until all 4 threads of the test are inside
/// madvise, then does the real thing. Only possible if the threads of
/// both regions run at the same time.
fn rendezvous(ptr: *mut u8, len: usize, advice: libc::c_int) -> io::Result<()> {
    use std::sync::atomic::Ordering;
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while ARRIVED.load(Ordering::SeqCst) < 4 {
        if Instant::now() > deadline {
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        std::thread::yield_now();
    }
    sys::madvise(ptr, len, advice)
}

#[test]
fn regions_are_preallocated_at_the_same_time() {
    let (plan, backing) = setup(
        MemoryOptions {
            numa: vec![
                "node=0,memory=8M".parse().unwrap(),
                "node=1,memory=8M".parse().unwrap(),
            ],
            prealloc: true,
            prealloc_threads: 2,
            ..Default::default()
        },
        &[(GuestAddress(0), (16 * MIB) as usize)],
    );
    let contexts = PreallocContexts::new(&plan).unwrap();
    // One span per thread here, so one madvise call each.
    let report = run(&contexts, &backing, &plan, MethodChoice::Auto, rendezvous).unwrap();
    assert_eq!(report.regions.len(), 2);
    assert_eq!(report.bytes(), 16 * MIB);
}

/// The workers of one region, doing real preallocation, run at the
/// same time: their start-to-end intervals overlap. (A worker created
/// while another is inside MADV_POPULATE_WRITE waits for the memory-map
/// lock until that one finishes, so without the start gate they run one
/// after the other.) Each worker's share is large enough (128 MiB, tens
/// of milliseconds) that both are running before either ends.
#[test]
fn workers_of_a_region_overlap_in_a_real_preallocation() {
    for method in [MethodChoice::Auto, MethodChoice::Touch] {
        let (plan, backing) = setup(
            MemoryOptions {
                total: Some(256 * MIB),
                prealloc: true,
                prealloc_threads: 2,
                ..Default::default()
            },
            &[(GuestAddress(0), (256 * MIB) as usize)],
        );
        let report = preallocate_with(&backing, &plan, method).unwrap();
        let threads = &report.regions[0].threads;
        assert_eq!(threads.len(), 2);
        let last_start = threads.iter().map(|t| t.started_ns).max().unwrap();
        let first_end = threads
            .iter()
            .map(|t| t.started_ns + t.elapsed_ns)
            .min()
            .unwrap();
        assert!(
            last_start < first_end,
            "{method:?}: workers ran one after the other: {:?}",
            threads
                .iter()
                .map(|t| (t.started_ns, t.started_ns + t.elapsed_ns))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn splits_cover_every_page_once() {
    let (_plan, backing) = setup(
        MemoryOptions {
            total: Some(10 * MIB + 3 * 4096),
            ..Default::default()
        },
        &[
            (GuestAddress(0), (4 * MIB) as usize),
            (GuestAddress(8 * MIB), (6 * MIB + 3 * 4096) as usize),
        ],
    );
    let region = &backing.regions()[0];
    for threads in [1, 2, 3, 7, 100_000] {
        let parts = split(region, threads, 4096);
        assert_eq!(parts.len(), threads.min((region.size() / 4096) as usize));
        let mut covered: Vec<(usize, usize)> = parts
            .iter()
            .flatten()
            .map(|s| (s.piece.host_addr() as usize + s.offset, s.len))
            .collect();
        assert_eq!(
            covered.iter().map(|c| c.1 as u64).sum::<u64>(),
            region.size()
        );
        assert!(covered.iter().all(|c| c.1 % 4096 == 0 && c.1 > 0));
        covered.sort();
        for w in covered.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "overlap");
        }
    }
}

fn einval(_: *mut u8, _: usize, _: libc::c_int) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

fn enomem(_: *mut u8, _: usize, _: libc::c_int) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOMEM))
}

#[test]
fn falls_back_to_touching_without_populate_write() {
    let (plan, backing) = setup(
        MemoryOptions {
            total: Some(16 * MIB),
            prealloc: true,
            prealloc_threads: 2,
            ..Default::default()
        },
        &[(GuestAddress(0), (16 * MIB) as usize)],
    );
    // Contents survive the touch.
    backing
        .guest_memory()
        .write_obj(0xabcd_u32, GuestAddress(8 * MIB))
        .unwrap();
    let contexts = PreallocContexts::new(&plan).unwrap();
    let report = run(&contexts, &backing, &plan, MethodChoice::Auto, einval).unwrap();
    let r = &report.regions[0];
    assert_eq!(r.method, PopulateMethod::Touch);
    assert!(r.threads.iter().all(|t| t.method == PopulateMethod::Touch));
    assert_eq!(
        r.threads.iter().map(|t| t.pages_touched).sum::<u64>(),
        16 * MIB / 4096
    );
    let piece = &backing.regions()[0].pieces()[0];
    assert_eq!(
        resident_pages(piece.host_addr(), piece.len()),
        (16 * MIB / 4096) as usize
    );
    assert_eq!(
        backing
            .guest_memory()
            .read_obj::<u32>(GuestAddress(8 * MIB))
            .unwrap(),
        0xabcd
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["regions"][0]["method"], "touch");
}

#[test]
fn forced_touch_and_real_errors() {
    let (plan, backing) = setup(
        MemoryOptions {
            total: Some(8 * MIB),
            prealloc: true,
            ..Default::default()
        },
        &[(GuestAddress(0), (8 * MIB) as usize)],
    );
    let report = preallocate_with(&backing, &plan, MethodChoice::Touch).unwrap();
    assert_eq!(report.regions[0].method, PopulateMethod::Touch);
    assert_eq!(report.regions[0].threads[0].pages_touched, 8 * MIB / 4096);
    let contexts = PreallocContexts::new(&plan).unwrap();
    let e = run(&contexts, &backing, &plan, MethodChoice::Auto, enomem).unwrap_err();
    assert!(matches!(e, MemoryError::Populate { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("prealloc-n0-0 cannot populate guest node 0's memory"),
        "{e}"
    );
}

#[test]
fn no_prealloc_means_an_empty_report() {
    let (plan, backing) = setup(
        MemoryOptions {
            total: Some(4 * MIB),
            ..Default::default()
        },
        &[(GuestAddress(0), (4 * MIB) as usize)],
    );
    let report = preallocate(&backing, &plan).unwrap();
    assert!(report.regions.is_empty());
    assert_eq!(report.bytes(), 0);
}

#[test]
fn preallocation_under_a_sandbox() {
    // Contexts are created (and pinned) first; then the sandbox forbids
    // sched_setaffinity for each context and everything it creates;
    // preallocation still places its threads.
    let last = sys::thread_affinity(0).unwrap().highest().unwrap();
    let (plan, backing) = setup(
        MemoryOptions {
            total: Some(32 * MIB),
            prealloc: true,
            prealloc_threads: 2,
            prealloc_cpus: Some(CpuSet::from_iter([last])),
            ..Default::default()
        },
        &[(GuestAddress(0), (32 * MIB) as usize)],
    );
    let contexts = PreallocContexts::new(&plan).unwrap();
    for c in contexts.contexts() {
        c.run(forbid_setaffinity).unwrap().unwrap();
    }
    let report = preallocate_in(&contexts, &backing, &plan, MethodChoice::Auto).unwrap();
    let r = &report.regions[0];
    check_threads(r, 2, 0);
    assert!(r
        .threads
        .iter()
        .all(|t| t.allowed_cpus == CpuSet::from_iter([last])));
}

#[test]
fn hugetlb_preallocation() {
    let topo = Topology::host().unwrap();
    if topo
        .hugepages
        .get(&HugePageSize::Size2M)
        .map_or(0, |p| p.free)
        < 16
    {
        eprintln!("SKIP: fewer than 16 free 2 MiB huge pages (echo 16 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)");
        return;
    }
    let (plan, backing) = setup(
        MemoryOptions {
            numa: vec!["node=0,memory=32M,host-nodes=0".parse().unwrap()],
            hugepages: Some(HugePageSize::Size2M),
            prealloc: true,
            prealloc_threads: 2,
            ..Default::default()
        },
        &[(GuestAddress(0), (32 * MIB) as usize)],
    );
    let report = preallocate(&backing, &plan).unwrap();
    let r = &report.regions[0];
    assert_eq!(r.page_size, 2 * MIB);
    check_threads(r, 2, 0);
    assert_eq!(r.threads.iter().map(|t| t.pages_touched).sum::<u64>(), 16);
    assert!(
        r.placement.all_on(&"0".parse().unwrap()),
        "{:?}",
        r.placement
    );
}
