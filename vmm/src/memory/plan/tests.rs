use super::super::topology::fake::FakeSysfs;
use super::*;

fn two_nodes() -> (FakeSysfs, Topology) {
    let t = FakeSysfs::two_nodes();
    let topo = Topology::read(&t.root()).unwrap();
    (t, topo)
}

fn numa(specs: &[&str]) -> Vec<NumaSpec> {
    specs.iter().map(|s| s.parse().unwrap()).collect()
}

fn err(opts: &MemoryOptions, topo: &Topology) -> String {
    MemoryPlan::new(opts, topo).unwrap_err().to_string()
}

#[test]
fn plain_memory_is_one_unbound_region() {
    let (_t, topo) = two_nodes();
    let opts = MemoryOptions {
        total: Some(512 << 20),
        ..Default::default()
    };
    let plan = MemoryPlan::new(&opts, &topo).unwrap();
    assert_eq!(plan.regions().len(), 1);
    let r = &plan.regions()[0];
    assert_eq!(
        (r.guest_node, r.size, &r.binding, &r.prealloc),
        (0, 512 << 20, &None, &None)
    );
    assert_eq!(plan.backing(), PageBacking::Transparent);
    assert_eq!(plan.page_size(), 4096);
    assert!(!plan.prealloc());
}

#[test]
fn two_bound_regions_take_their_node_cpus() {
    let (_t, topo) = two_nodes();
    let opts = MemoryOptions {
        total: Some(3 << 30),
        numa: numa(&[
            "node=1,cpus=2-3,memory=1G,host-nodes=1",
            "node=0,cpus=0-1,memory=2G,host-nodes=0,policy=preferred",
        ]),
        prealloc: true,
        prealloc_threads: 3,
        ..Default::default()
    };
    let plan = MemoryPlan::new(&opts, &topo).unwrap();
    let r = plan.regions();
    // Sorted by guest node.
    assert_eq!((r[0].guest_node, r[0].size), (0, 2 << 30));
    assert_eq!((r[1].guest_node, r[1].size), (1, 1 << 30));
    assert_eq!(r[0].binding.as_ref().unwrap().policy, Policy::Preferred);
    assert_eq!(r[1].binding.as_ref().unwrap().policy, Policy::Bind);
    let p0 = r[0].prealloc.as_ref().unwrap();
    let p1 = r[1].prealloc.as_ref().unwrap();
    assert_eq!(p0.threads, 3);
    assert_eq!(p0.cpus.as_ref().unwrap().to_string(), "0-3");
    assert_eq!(p1.cpus.as_ref().unwrap().to_string(), "4-7");
    assert_eq!(r[1].context_name(), "memctx-n1");
    assert_eq!(r[1].worker_name(3), "prealloc-n1-3");
    assert_eq!(plan.total(), 3 << 30);
    assert_eq!(plan.host_node_of_cpu(6), Some(1));
    plan.check_vcpus(4).unwrap();
    let e = plan.check_vcpus(3).unwrap_err().to_string();
    assert!(
        e.contains("guest CPU 3") && e.contains("3 vCPUs (0-2)"),
        "{e}"
    );
}

#[test]
fn interleave_spans_both_nodes_cpus_and_explicit_cpus_win() {
    let (_t, topo) = two_nodes();
    let mut opts = MemoryOptions {
        numa: numa(&["node=0,memory=1G,host-nodes=0-1,policy=interleave"]),
        prealloc: true,
        ..Default::default()
    };
    let plan = MemoryPlan::new(&opts, &topo).unwrap();
    assert_eq!(
        plan.regions()[0]
            .prealloc
            .as_ref()
            .unwrap()
            .cpus
            .as_ref()
            .unwrap()
            .to_string(),
        "0-7"
    );
    opts.prealloc_cpus = Some("5,7".parse().unwrap());
    let plan = MemoryPlan::new(&opts, &topo).unwrap();
    assert_eq!(
        plan.regions()[0]
            .prealloc
            .as_ref()
            .unwrap()
            .cpus
            .as_ref()
            .unwrap()
            .to_string(),
        "5,7"
    );
}

#[test]
fn unbound_prealloc_keeps_the_process_cpus() {
    let (_t, topo) = two_nodes();
    let opts = MemoryOptions {
        total: Some(64 << 20),
        prealloc: true,
        prealloc_threads: 2,
        ..Default::default()
    };
    let plan = MemoryPlan::new(&opts, &topo).unwrap();
    assert_eq!(
        plan.regions()[0].prealloc,
        Some(PreallocPlan {
            threads: 2,
            cpus: None
        })
    );
}

#[test]
fn bad_input_errors() {
    let (_t, topo) = two_nodes();
    let base = MemoryOptions {
        total: Some(1 << 30),
        prealloc: true,
        ..Default::default()
    };
    let with = |f: &dyn Fn(&mut MemoryOptions)| {
        let mut o = base.clone();
        f(&mut o);
        err(&o, &topo)
    };
    let cases: Vec<(String, &str)> = vec![
        (with(&|o| o.prealloc_threads = 0), "--prealloc-threads is 0"),
        (
            with(&|o| o.prealloc_threads = 5000),
            "--prealloc-threads 5000 is more than 1024; more threads than host CPUs (8 here)",
        ),
        (
            with(&|o| o.prealloc_cpus = Some("6-9".parse().unwrap())),
            "names CPUs 8-9 that do not exist or are offline on this host; online CPUs are 0-7",
        ),
        (
            with(&|o| o.prealloc_cpus = Some(CpuSet::new())),
            "--prealloc-cpus is empty",
        ),
        (with(&|o| o.total = None), "no guest memory size"),
        (with(&|o| o.total = Some(0)), "--memory 0 bytes is 0"),
        (
            with(&|o| o.total = Some((1 << 30) + 512)),
            "not a multiple of the 4 KiB page size",
        ),
        (
            with(&|o| {
                o.hugepages = Some(HugePageSize::Size2M);
                o.total = Some((1 << 30) + (1 << 20));
            }),
            "is not a multiple of the 2 MiB page size; use 1 GiB or 1026 MiB",
        ),
        (
            with(&|o| o.numa = numa(&["node=0,memory=512M", "node=1,memory=256M"])),
            "--memory 1 GiB does not match the --numa memory sizes (512 MiB + 256 MiB = 768 MiB)",
        ),
        (
            with(&|o| o.numa = numa(&["node=0,memory=512M", "node=0,memory=512M"])),
            "--numa node=0 is given twice",
        ),
        (
            with(&|o| o.numa = numa(&["node=0,memory=512M,cpus=0-1", "node=1,memory=512M,cpus=1"])),
            "guest CPU 1 is listed in --numa node=0 and node=1",
        ),
        (
            with(&|o| o.numa = numa(&["node=0,memory=1G,host-nodes=0,2-3"])),
            "host node 2-3 does not exist or is offline; online host nodes are 0-1",
        ),
        (
            with(&|o| o.numa = numa(&["node=0,memory=1G,policy=bind"])),
            "policy=bind needs host-nodes=LIST",
        ),
        (
            with(&|o| o.numa = numa(&["node=0,memory=1G,host-nodes=0-1,policy=preferred"])),
            "policy=preferred takes one host node, not 0-1",
        ),
        (
            with(&|o| {
                o.thp = ThpChoice::Required;
                o.hugepages = Some(HugePageSize::Size2M)
            }),
            "--thp and --hugepages exclude each other",
        ),
        (
            with(&|o| o.hugepages = Some(HugePageSize::Size1G)),
            "needs 1 pages of 1 GiB but only 0 are free; reserve 1 more",
        ),
        (
            with(&|o| o.hugepages = Some(HugePageSize::Size1G)),
            "hugepagesz=1G hugepages=N",
        ),
    ];
    for (msg, want) in cases {
        assert!(msg.contains(want), "want {want:?} in: {msg}");
    }
}

#[test]
fn thp_is_advised_by_default_where_the_host_allows_it() {
    let (_t, madvise) = two_nodes();
    let never = FakeSysfs::new();
    never.file("devices/system/cpu/online", "0-1\n").file(
        "kernel/mm/transparent_hugepage/enabled",
        "always madvise [never]\n",
    );
    let never = Topology::read(&never.root()).unwrap();
    let backing = |thp, topo: &Topology| {
        let opts = MemoryOptions {
            total: Some(64 << 20),
            thp,
            ..Default::default()
        };
        MemoryPlan::new(&opts, topo).map(|p| p.backing())
    };
    assert_eq!(
        backing(ThpChoice::Auto, &madvise).unwrap(),
        PageBacking::Transparent
    );
    assert_eq!(
        backing(ThpChoice::Required, &madvise).unwrap(),
        PageBacking::Transparent
    );
    assert_eq!(
        backing(ThpChoice::Off, &madvise).unwrap(),
        PageBacking::Small
    );
    assert_eq!(
        backing(ThpChoice::Auto, &never).unwrap(),
        PageBacking::Small
    );
    assert!(backing(ThpChoice::Required, &never).is_err());
    // Huge pages win over the default advice.
    let opts = MemoryOptions {
        total: Some(64 << 20),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    assert_eq!(
        MemoryPlan::new(&opts, &madvise).unwrap().backing(),
        PageBacking::HugeTlb(HugePageSize::Size2M)
    );
}

#[test]
fn numa_errors_on_hosts_without_it() {
    let t = FakeSysfs::new();
    t.file("devices/system/cpu/online", "0-1\n").file(
        "kernel/mm/transparent_hugepage/enabled",
        "always madvise [never]\n",
    );
    let topo = Topology::read(&t.root()).unwrap();
    let opts = MemoryOptions {
        numa: numa(&["node=0,memory=1G,host-nodes=0"]),
        ..Default::default()
    };
    assert!(err(&opts, &topo).contains("needs a kernel with NUMA support"));
    let opts = MemoryOptions {
        total: Some(1 << 30),
        thp: ThpChoice::Required,
        ..Default::default()
    };
    let e = err(&opts, &topo);
    assert!(
        e.contains("transparent huge pages are never") && e.contains("echo madvise >"),
        "{e}"
    );
    let opts = MemoryOptions {
        total: Some(1 << 30),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    assert!(err(&opts, &topo).contains("has no 2 MiB huge page pool"));
}

#[test]
fn memory_only_node_needs_prealloc_cpus() {
    let t = FakeSysfs::two_nodes();
    t.file("devices/system/node/online", "0-2\n")
        .file("devices/system/node/node2/cpulist", "\n");
    let topo = Topology::read(&t.root()).unwrap();
    let mut opts = MemoryOptions {
        numa: numa(&["node=0,memory=1G,host-nodes=2"]),
        prealloc: true,
        ..Default::default()
    };
    let e = err(&opts, &topo);
    assert!(
        e.contains("host node 2 has no online CPUs") && e.contains("--prealloc-cpus"),
        "{e}"
    );
    opts.prealloc_cpus = Some("0-1".parse().unwrap());
    MemoryPlan::new(&opts, &topo).unwrap();
}

#[test]
fn hugepage_shortfall_says_how_many_and_how_to_reserve() {
    let (t, topo) = two_nodes();
    // Node 1 has 100 free 2 MiB pages; 300 MiB bound there needs 150.
    let opts = MemoryOptions {
        numa: numa(&[
            "node=0,memory=100M,host-nodes=0",
            "node=1,memory=300M,host-nodes=1",
        ]),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    let e = MemoryPlan::new(&opts, &topo).unwrap_err();
    match &e {
        PlanError::HugePagePoolShort {
            needed,
            free,
            nodes,
            reserve_total,
            ..
        } => {
            assert_eq!((*needed, *free, *reserve_total), (150, 100, 150));
            assert_eq!(nodes.as_ref().unwrap().to_string(), "1");
        }
        other => panic!("{other}"),
    }
    let path =
        t.0.join("devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages");
    assert_eq!(
        e.to_string(),
        format!(
            "--hugepages 2 MiB: guest memory needs 150 pages of 2 MiB on host node 1 but only 100 are free; \
             reserve 50 more with `echo 150 > {}`",
            path.display()
        )
    );

    // Unbound: the global pool (200 free, 200 reserved) is what counts.
    let opts = MemoryOptions {
        total: Some(500 << 20),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    let e = err(&opts, &topo);
    assert!(
        e.contains(
            "needs 250 pages of 2 MiB but only 200 are free; reserve 50 more with `echo 250 >"
        ),
        "{e}"
    );
    assert!(
        e.contains("kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        "{e}"
    );

    // Interleaved over both nodes: 300 pages = 150 per node, 100 free each.
    let opts = MemoryOptions {
        numa: numa(&["node=0,memory=600M,host-nodes=0-1,policy=interleave"]),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    assert!(
        err(&opts, &topo).contains("needs 150 pages of 2 MiB on host node 0 but only 100 are free")
    );

    // Bound to both nodes: 180 pages fit in 200, 220 do not.
    let mut opts = MemoryOptions {
        numa: numa(&["node=0,memory=360M,host-nodes=0-1"]),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    MemoryPlan::new(&opts, &topo).unwrap();
    opts.numa = numa(&["node=0,memory=440M,host-nodes=0-1"]);
    let e = err(&opts, &topo);
    assert!(e.contains("needs 220 pages of 2 MiB on host nodes 0-1 but only 200 are free; reserve 20 more with `echo 120 >"), "{e}");
    assert!(
        e.contains("node0/hugepages/hugepages-2048kB/nr_hugepages"),
        "{e}"
    );

    // A partly used pool: 20 free of 100 reserved on node 0.
    t.pool(Some(0), "hugepages-2048kB", 100, 20);
    let topo = Topology::read(&t.root()).unwrap();
    let opts = MemoryOptions {
        numa: numa(&["node=0,memory=64M,host-nodes=0"]),
        hugepages: Some(HugePageSize::Size2M),
        ..Default::default()
    };
    let e = err(&opts, &topo);
    assert!(e.contains("needs 32 pages of 2 MiB on host node 0 but only 20 are free; reserve 12 more with `echo 112 >"), "{e}");
}

#[test]
fn hugepage_plan_that_fits() {
    let (_t, topo) = two_nodes();
    let opts = MemoryOptions {
        numa: numa(&[
            "node=0,memory=200M,host-nodes=0",
            "node=1,memory=200M,host-nodes=1",
        ]),
        hugepages: Some(HugePageSize::Size2M),
        prealloc: true,
        prealloc_threads: 2,
        ..Default::default()
    };
    let plan = MemoryPlan::new(&opts, &topo).unwrap();
    assert_eq!(plan.backing(), PageBacking::HugeTlb(HugePageSize::Size2M));
    assert_eq!(plan.page_size(), 2 << 20);
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["regions"][1]["binding"]["nodes"], "1");
    assert_eq!(json["regions"][1]["prealloc"]["cpus"], "4-7");
}
