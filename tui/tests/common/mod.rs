//! The profiles the rendering tests draw: a made-up one that grows with
//! time (exits, threads and NUMA, phases and samples), and apps over it.

#![allow(dead_code)]

use std::collections::BTreeMap;

use bootscope_model::profile::*;
use bootscope_tui::app::App;
use bootscope_tui::theme::Theme;

pub const MS: u64 = 1_000_000;

/// A QEMU-like profile `t_ms` into a 2 s run: counters grow linearly.
pub fn fixture(t_ms: u64) -> Profile {
    let f = |n: u64| n * t_ms / 2000;
    let mut p = Profile::new();
    p.duration_ns = t_ms * MS;
    p.target = Target {
        kind: "command".into(),
        command: vec!["qemu-system-x86_64".into()],
        pid: 4242,
        name: "qemu-system-x86".into(),
        ..Default::default()
    };
    p.host = HostInfo {
        kvm: "svm".into(),
        kernel_release: "6.1.0".into(),
        cpus: 2,
        numa_nodes: vec![
            NumaNode {
                id: 0,
                cpus: vec![0],
            },
            NumaNode {
                id: 1,
                cpus: vec![1],
            },
        ],
    };
    let source = |name: &str, status: &str, events: u64| DataSource {
        name: name.into(),
        status: status.into(),
        events,
        ..Default::default()
    };
    p.sources = vec![
        source("tracepoint:kvm:kvm_exit", "attached", f(21191)),
        source("tracepoint:kvm:kvm_entry", "attached", f(21191)),
        source("tracepoint:kvm:kvm_page_fault", "attached", f(608)),
        source("tracepoint:kmem:mm_page_alloc", "attached", f(262_144)),
        source("tracepoint:kvmmmu:kvm_mmu_spte_requested", "fallback", 0),
        source("tracepoint:task:task_rename", "missing", 0),
        source("kvm_stats:debugfs", "attached", f(21191)),
    ];
    add_exits(&mut p, t_ms);
    p.page_faults = PageFaultProfile {
        guest_total: f(608),
        host_total: f(262_400),
        host_user: f(262_144),
        host_kernel: f(256),
        guest_source: "tracepoint:kvm:kvm_page_fault".into(),
        ..Default::default()
    };
    add_threads_and_numa(&mut p, t_ms);
    add_phases_and_samples(&mut p, t_ms);
    p
}

/// The fixture's exits: seven reasons, an I/O latency histogram, two vCPUs.
pub fn add_exits(p: &mut Profile, t_ms: u64) {
    let f = |n: u64| n * t_ms / 2000;
    let reasons: [(&str, u64); 7] = [
        ("io", 17628),
        ("msr", 1159),
        ("interrupt", 1068),
        ("npf", 608),
        ("vintr", 596),
        ("cpuid", 106),
        ("write_cr4", 26),
    ];
    p.exits.source = "tracepoint:kvm:kvm_exit".into();
    p.exits.isa = "svm".into();
    p.exits.total = f(21191);
    p.exits.kvm_stats_exits = Some(f(21191));
    for (i, (r, n)) in reasons.iter().enumerate() {
        let count = f(*n);
        let mut stat = ExitReasonStat {
            reason: r.to_string(),
            code: i as u64,
            count,
            ..Default::default()
        };
        if *r == "io" {
            let shape = [0u64, 3, 40, 250, 400, 200, 80, 20, 6, 1];
            let sum: u64 = shape.iter().sum();
            stat.latency_hist = shape
                .iter()
                .enumerate()
                .map(|(k, &w)| HistBucket {
                    lo_ns: 256 << k,
                    hi_ns: 512 << k,
                    count: count * w / sum,
                })
                .collect();
            stat.latency_total_ns = Some(count * 3_500);
        }
        p.exits.by_reason.push(stat);
    }
    for (v, tid) in [(0u32, 4250u32), (1, 4251)] {
        let by_reason: BTreeMap<String, u64> = reasons
            .iter()
            .map(|(r, n)| {
                let share = if v == 0 {
                    f(*n) * 2 / 3
                } else {
                    f(*n) - f(*n) * 2 / 3
                };
                (r.to_string(), share)
            })
            .collect();
        p.exits.by_vcpu.push(VcpuExits {
            vcpu: v,
            tid,
            by_reason,
        });
    }
}

/// The fixture's threads (QEMU, two preallocation threads, two vCPUs) and
/// NUMA locality on two nodes.
pub fn add_threads_and_numa(p: &mut Profile, t_ms: u64) {
    let f = |n: u64| n * t_ms / 2000;
    let thread = |tid: u32, name: &str, role: &str, cpu: u32, pages: u64, local: u64| {
        let pages = f(pages);
        let local = f(local);
        ThreadProfile {
            tid,
            name: name.into(),
            role: role.into(),
            start_ns: 0,
            end_ns: t_ms * MS,
            cpus: vec![CpuResidency {
                cpu,
                node: cpu,
                run_ns: f(300) * MS,
            }],
            nodes: vec![cpu],
            pages_allocated: pages,
            pages_local: local,
            pages_remote: pages - local,
            tgid: 4242,
            run_ns: f(300) * MS,
            bytes_allocated: pages * 4096,
            ..Default::default()
        }
    };
    p.threads = vec![
        thread(4242, "qemu-system-x86", "main", 0, 2_000, 2_000),
        thread(4243, "touch_pages", "prealloc", 0, 131_072, 131_072),
        thread(4244, "touch_pages", "prealloc", 1, 131_072, 120_000),
        thread(4250, "CPU 0/KVM", "vcpu", 0, 0, 0),
        thread(4251, "CPU 1/KVM", "vcpu", 1, 0, 0),
    ];
    p.numa = NumaProfile {
        pages_local: f(253_072),
        pages_remote: f(11_072),
        by_node: vec![
            NodeLocality {
                node: 0,
                pages_local: f(133_072),
                pages_remote: 0,
            },
            NodeLocality {
                node: 1,
                pages_local: f(120_000),
                pages_remote: f(11_072),
            },
        ],
        source: "tracepoint:kmem:mm_page_alloc".into(),
        page_size: 4096,
        pages_allocated: f(264_144),
        bytes_allocated: f(264_144) * 4096,
        pages_unknown_node: 0,
        pfn_map_source: "sysfs memory blocks".into(),
    };
}

/// The phases begun by `t_ms`, and samples every 100 ms.
pub fn add_phases_and_samples(p: &mut Profile, t_ms: u64) {
    let f = |n: u64| n * t_ms / 2000;
    let all_phases = [
        ("vmm setup", 0, 350),
        ("guest boot", 350, 900),
        ("kernel", 900, 1700),
        ("userspace", 1700, 2000),
    ];
    for (name, a, b) in all_phases {
        if a <= t_ms {
            p.marks.push(Mark {
                name: format!("mark: {name}"),
                source: MarkSource::Vmm,
                t_ns: a * MS,
                ..Default::default()
            });
            p.phases.push(PhaseSpan {
                name: name.into(),
                start_ns: a * MS,
                end_ns: b.min(t_ms) * MS,
            });
        }
    }
    // Samples every 100 ms; faults come in a burst in the middle.
    let mut guest = 0;
    let mut host = 0;
    for k in 0..=(t_ms / 100) {
        let burst = if (5..12).contains(&k) { 30_000 } else { 1_000 };
        host += burst;
        guest += k % 4 * 10;
        p.samples.push(Sample {
            t_ns: k * 100 * MS,
            exits_total: f(21191) * k * 100 / t_ms.max(1),
            exits_by_reason: Default::default(),
            guest_faults: guest,
            host_faults: host,
        });
    }
}

/// An app that has seen two snapshots (rates) of the fixture.
pub fn live_app(theme: Theme) -> App {
    let mut app = App::new("qemu-system-x86_64 (pid 4242)", theme);
    app.update(fixture(1900));
    app.update(fixture(2000));
    app
}

pub fn empty_app(theme: Theme) -> App {
    let mut app = App::new("pid 4242 (qemu-system-x86)", theme);
    app.update(Profile::new());
    app
}
