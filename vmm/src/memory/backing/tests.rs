//! Guest memory mapped over RAM ranges: pieces, alignment, THP advice and
//! hugetlb reservations.

use vm_memory::{Bytes, GuestMemoryBackend, GuestMemoryRegion};

use super::super::plan::MemoryOptions;
use super::super::spec::Policy;
use super::super::sys::mempolicy_at;
use super::super::topology::fake::FakeSysfs;
use super::*;

fn plan(opts: MemoryOptions) -> MemoryPlan {
    MemoryPlan::new(&opts, &Topology::host().unwrap()).unwrap()
}

#[test]
fn plain_memory_over_two_ranges() {
    let p = plan(MemoryOptions {
        total: Some(16 << 20),
        ..Default::default()
    });
    // A 4 MiB hole, as the MMIO gap makes for large guests.
    let layout = [
        (GuestAddress(0), 12 << 20),
        (GuestAddress(16 << 20), 4 << 20),
    ];
    let b = allocate(&p, &layout).unwrap();
    let mem = b.guest_memory();
    assert_eq!(mem.num_regions(), 2);
    assert_eq!(b.regions().len(), 1);
    assert_eq!(b.regions()[0].pieces().len(), 2);
    assert_eq!(b.page_size(), 4096);
    mem.write_obj(0x1234_u32, GuestAddress((12 << 20) - 4))
        .unwrap();
    mem.write_obj(0x5678_u32, GuestAddress((20 << 20) - 4))
        .unwrap();
    assert!(
        mem.write_obj(1_u8, GuestAddress(13 << 20)).is_err(),
        "the hole is not memory"
    );
    assert_eq!(
        mem.read_obj::<u32>(GuestAddress((12 << 20) - 4)).unwrap(),
        0x1234
    );
    assert_eq!(
        mem.read_obj::<u32>(GuestAddress((20 << 20) - 4)).unwrap(),
        0x5678
    );
}

#[test]
fn regions_cut_across_ranges() {
    let p = plan(MemoryOptions {
        numa: vec![
            "node=0,memory=6M,host-nodes=0".parse().unwrap(),
            "node=1,memory=10M,host-nodes=0,policy=interleave"
                .parse()
                .unwrap(),
        ],
        ..Default::default()
    });
    let layout = [
        (GuestAddress(0), 8 << 20),
        (GuestAddress(32 << 20), 8 << 20),
    ];
    let b = allocate(&p, &layout).unwrap();
    let r = b.regions();
    let spans = |i: usize| {
        r[i].pieces()
            .iter()
            .map(|p| (p.guest_addr().0 >> 20, p.len() >> 20))
            .collect::<Vec<_>>()
    };
    assert_eq!(spans(0), vec![(0, 6)]);
    assert_eq!(spans(1), vec![(6, 2), (32, 8)]);
    assert_eq!(b.guest_memory().num_regions(), 3);
    // Each piece carries its region's policy.
    let (pol, nodes) = mempolicy_at(r[0].pieces()[0].host_addr()).unwrap();
    assert_eq!((pol, nodes.to_string().as_str()), (Some(Policy::Bind), "0"));
    for piece in r[1].pieces() {
        let (pol, nodes) = mempolicy_at(piece.host_addr()).unwrap();
        assert_eq!(
            (pol, nodes.to_string().as_str()),
            (Some(Policy::Interleave), "0")
        );
    }
    // Host addresses are what KVM slots are built from.
    for region in b.guest_memory().iter() {
        assert!(b
            .guest_memory()
            .get_host_address(region.start_addr())
            .is_ok());
    }
}

#[test]
fn layout_must_cover_the_plan() {
    let p = plan(MemoryOptions {
        total: Some(16 << 20),
        ..Default::default()
    });
    let e = allocate(&p, &[(GuestAddress(0), 8 << 20)]).unwrap_err();
    assert!(
        matches!(
            e,
            MemoryError::LayoutMismatch {
                layout: 0x80_0000,
                plan: 0x100_0000
            }
        ),
        "{e}"
    );
    let e = allocate(&p, &[(GuestAddress(0x800), 16 << 20)]).unwrap_err();
    assert!(matches!(e, MemoryError::LayoutUnaligned { .. }), "{e}");
    let e = allocate(
        &p,
        &[(GuestAddress(8 << 20), 8 << 20), (GuestAddress(0), 8 << 20)],
    )
    .unwrap_err();
    assert!(
        matches!(e, MemoryError::LayoutUnsorted { addr: 0, .. }),
        "{e}"
    );
    let e = allocate(
        &p,
        &[(GuestAddress(0), 8 << 20), (GuestAddress(4 << 20), 8 << 20)],
    )
    .unwrap_err();
    assert!(e.to_string().contains("0x400000+0x800000 overlaps"), "{e}");
}

#[test]
fn anonymous_pieces_are_aligned_and_unmapped_on_drop() {
    let p = plan(MemoryOptions {
        total: Some(6 << 20),
        thp: super::super::plan::ThpChoice::Off,
        ..Default::default()
    });
    let layout = [(GuestAddress(0), 2 << 20), (GuestAddress(8 << 20), 4 << 20)];
    let b = allocate(&p, &layout).unwrap();
    let addrs: Vec<usize> = b.regions()[0]
        .pieces()
        .iter()
        .map(|p| p.host_addr() as usize)
        .collect();
    for a in &addrs {
        assert_eq!(a % ANON_ALIGN, 0, "{a:#x} is not 2 MiB aligned");
    }
    let mapped = |a: usize| {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .any(|l| {
                let (lo, hi) = l.split_once(' ').unwrap().0.split_once('-').unwrap();
                let lo = usize::from_str_radix(lo, 16).unwrap();
                let hi = usize::from_str_radix(hi, 16).unwrap();
                (lo..hi).contains(&a)
            })
    };
    // Write through vm-memory, read back through the raw address.
    b.guest_memory()
        .write_obj(0xfeed_u32, GuestAddress(8 << 20))
        .unwrap();
    // SAFETY: the piece is mapped and 4 bytes long at least.
    assert_eq!(unsafe { *(addrs[1] as *const u32) }, 0xfeed);
    assert!(addrs.iter().all(|&a| mapped(a)));
    drop(b);
    assert!(
        addrs.iter().all(|&a| !mapped(a)),
        "pieces still mapped after the backing was dropped"
    );
}

#[test]
fn thp_mapping_is_advised() {
    let topo = Topology::host().unwrap();
    if matches!(
        topo.thp,
        super::super::topology::ThpMode::Never | super::super::topology::ThpMode::Unsupported
    ) {
        eprintln!("SKIP: transparent huge pages are {} on this host", topo.thp);
        return;
    }
    let p = plan(MemoryOptions {
        total: Some(8 << 20),
        thp: super::super::plan::ThpChoice::Required,
        ..Default::default()
    });
    let b = allocate(&p, &[(GuestAddress(0), 8 << 20)]).unwrap();
    let addr = b.regions()[0].pieces()[0].host_addr() as usize;
    assert_eq!(addr % ANON_ALIGN, 0, "{addr:#x} is not 2 MiB aligned");
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut in_vma = false;
    let mut advised = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((lo, _)) = range.split_once('-') {
                if let Ok(lo) = usize::from_str_radix(lo, 16) {
                    in_vma = lo == addr;
                    continue;
                }
            }
        }
        if in_vma && line.starts_with("VmFlags:") {
            advised = line.split_whitespace().any(|f| f == "hg");
        }
    }
    assert!(
        advised,
        "the THP mapping at {addr:#x} lacks the hg (MADV_HUGEPAGE) flag"
    );
}

#[test]
fn hugetlb_pool_shortfall_is_caught_before_mapping() {
    // A fake tree that claims a pool of 4 free pages.
    let t = FakeSysfs::two_nodes();
    t.pool(None, "hugepages-2048kB", 4, 4)
        .pool(Some(0), "hugepages-2048kB", 4, 4);
    let topo = Topology::read(&t.root()).unwrap();
    let opts = MemoryOptions {
        total: Some(8 << 20),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    let p = MemoryPlan::new(&opts, &topo).unwrap();
    // The pool shrinks between planning and allocating.
    t.pool(None, "hugepages-2048kB", 4, 1);
    let e = allocate(&p, &[(GuestAddress(0), 8 << 20)]).unwrap_err();
    assert!(
        e.to_string()
            .contains("needs 4 pages of 2 MiB but only 1 are free; reserve 3 more with `echo 7 >"),
        "{e}"
    );
}

#[test]
fn hugetlb_reservation_failure_is_typed() {
    // The plan is checked against a fake tree claiming free pages; the
    // real, smaller pool then refuses the reservation at mmap time.
    let real = Topology::host().unwrap();
    if real
        .hugepages
        .get(&HugePageSize::Size2M)
        .map_or(0, |p| p.free)
        >= 4
    {
        eprintln!("SKIP: this host's 2 MiB pool has free pages; the failure cannot be provoked");
        return;
    }
    if !real.hugepages.contains_key(&HugePageSize::Size2M) {
        eprintln!("SKIP: no 2 MiB huge page support");
        return;
    }
    let t = FakeSysfs::two_nodes();
    let opts = MemoryOptions {
        total: Some(8 << 20),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    let p = MemoryPlan::new(&opts, &Topology::read(&t.root()).unwrap()).unwrap();
    let e = allocate(&p, &[(GuestAddress(0), 8 << 20)]).unwrap_err();
    assert!(
        matches!(e, MemoryError::HugePageReserve { pages: 4, .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("hugepages-2048kB/nr_hugepages"),
        "{e}"
    );
}

#[test]
fn hugetlb_memfd_backing() {
    let topo = Topology::host().unwrap();
    let free = topo
        .hugepages
        .get(&HugePageSize::Size2M)
        .map_or(0, |p| p.free);
    if free < 4 {
        eprintln!("SKIP: fewer than 4 free 2 MiB huge pages (echo 4 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)");
        return;
    }
    let p = plan(MemoryOptions {
        numa: vec!["node=0,memory=8M,host-nodes=0".parse().unwrap()],
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    });
    let b = allocate(
        &p,
        &[(GuestAddress(0), 4 << 20), (GuestAddress(8 << 20), 4 << 20)],
    )
    .unwrap();
    let pieces = b.regions()[0].pieces();
    assert_eq!(pieces.len(), 2);
    for piece in pieces {
        assert_eq!(piece.host_addr() as usize % (2 << 20), 0);
        assert_eq!(piece.mapping().is_hugetlbfs(), Some(true));
    }
    // Both pieces share one memfd at consecutive offsets.
    let offs: Vec<u64> = pieces
        .iter()
        .map(|p| p.mapping().file_offset().unwrap().start())
        .collect();
    assert_eq!(offs, vec![0, 4 << 20]);
    b.guest_memory()
        .write_obj(7_u64, GuestAddress(8 << 20))
        .unwrap();
    assert_eq!(
        b.guest_memory()
            .read_obj::<u64>(GuestAddress(8 << 20))
            .unwrap(),
        7
    );
}
