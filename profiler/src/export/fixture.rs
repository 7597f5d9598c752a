//! A hand-built profile and the documented timeline example, shared by the
//! exporters' tests.

use std::collections::BTreeMap;

use crate::profile::*;

/// A reason name with every character CSV, Prometheus and JSON must escape.
pub const AWKWARD_REASON: &str = "pio_write \"0x3f8\", \\ line\nend";

/// The example of docs/timeline-schema.md.
pub const TIMELINE_EXAMPLE: &str = r#"{
  "schema": "bootscope.timeline",
  "version": 1,
  "clock": "CLOCK_MONOTONIC nanoseconds since VMM start",
  "vmm": "bootscope 0.1.0",
  "host_kvm": "svm",
  "guest": {
    "kernel": "/boot/vmlinuz-6.1.0-56-amd64",
    "kernel_format": "bzimage",
    "initrd": "/root/.cache/bootscope/default-guest.cpio",
    "initrd_mapped_from_file": true,
    "cmdline": "console=ttyS0 reboot=k panic=-1 ...",
    "memory_bytes": 268435456,
    "vcpus": 1
  },
  "outcome": { "reason": "guest_halt", "clean": true, "detail": "..." },
  "marks": [
    { "name": "vmm: process start", "source": "vmm", "t_ns": 0 },
    { "name": "port 0x80: userspace 0x60", "source": "debug_port", "t_ns": 812345678, "value": 96, "vcpu": 0 }
  ],
  "phases": [
    { "name": "kernel", "start_ns": 4100000, "end_ns": 812345678, "duration_ns": 808245678,
      "from": "vmm: first KVM_RUN", "to": "port 0x80: userspace 0x60" }
  ],
  "kvm_stats": { "exits": 21191, "io_exits": 17628, "insn_emulation": 12 }
}"#;

fn bucket(lo_ns: u64, hi_ns: u64, count: u64) -> HistBucket {
    HistBucket {
        lo_ns,
        hi_ns,
        count,
    }
}

fn reason_counts(pairs: &[(&str, u64)]) -> crate::profile::ReasonCounts {
    pairs.iter().map(|(k, v)| (*k, *v)).collect()
}

fn reasons(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The fixture's exits: four reasons, two with latency histograms.
fn exits() -> ExitProfile {
    ExitProfile {
        source: "tracepoint:kvm:kvm_exit".into(),
        isa: "svm".into(),
        total: 1_000,
        by_reason: vec![
            ExitReasonStat {
                reason: "io".into(),
                code: 123,
                count: 600,
                latency_total_ns: Some(1_200_000),
                latency_hist: vec![
                    bucket(1024, 2048, 100),
                    bucket(2048, 4096, 450),
                    bucket(4096, 8192, 50),
                ],
            },
            ExitReasonStat {
                reason: "npf".into(),
                code: 1024,
                count: 300,
                latency_total_ns: Some(3_000_000),
                latency_hist: vec![bucket(8192, 16384, 250), bucket(16384, 32768, 50)],
            },
            ExitReasonStat {
                reason: "hlt".into(),
                code: 120,
                count: 75,
                latency_total_ns: None,
                latency_hist: Vec::new(),
            },
            ExitReasonStat {
                reason: AWKWARD_REASON.into(),
                code: 7,
                count: 25,
                latency_total_ns: Some(50_000),
                latency_hist: vec![bucket(1024, 2048, 5), bucket(2048, 4096, 20)],
            },
        ],
        by_vcpu: vec![VcpuExits {
            vcpu: 0,
            tid: 4244,
            by_reason: reasons(&[("io", 600), ("npf", 300), ("hlt", 75)]),
        }],
        by_phase: vec![PhaseExits {
            phase: "kernel".into(),
            by_reason: reasons(&[("io", 500)]),
        }],
        kvm_stats_exits: Some(1_003),
        ..Default::default()
    }
}

/// The fixture's three threads.
fn threads() -> Vec<ThreadProfile> {
    vec![
        ThreadProfile {
            tid: 4242,
            name: "qemu-system-x86".into(),
            role: "main".into(),
            start_ns: 0,
            end_ns: 900_000_000,
            cpus: vec![CpuResidency {
                cpu: 0,
                node: 0,
                run_ns: 50_000_000,
            }],
            nodes: vec![0],
            pages_allocated: 100,
            pages_local: 100,
            pages_remote: 0,
            ..Default::default()
        },
        ThreadProfile {
            tid: 4243,
            name: "touch_pages".into(),
            role: "prealloc".into(),
            start_ns: 10_000_000,
            end_ns: 60_000_000,
            cpus: vec![
                CpuResidency {
                    cpu: 1,
                    node: 0,
                    run_ns: 20_000_000,
                },
                CpuResidency {
                    cpu: 2,
                    node: 1,
                    run_ns: 30_000_000,
                },
            ],
            nodes: vec![0, 1],
            pages_allocated: 131_072,
            pages_local: 100_000,
            pages_remote: 31_072,
            ..Default::default()
        },
        ThreadProfile {
            tid: 4244,
            name: "CPU 0/KVM, \"main\"".into(),
            role: "vcpu".into(),
            start_ns: 70_000_000,
            end_ns: 890_000_000,
            cpus: vec![CpuResidency {
                cpu: 3,
                node: 1,
                run_ns: 700_000_000,
            }],
            nodes: vec![1],
            pages_allocated: 10,
            pages_local: 4,
            pages_remote: 6,
            ..Default::default()
        },
    ]
}

/// The fixture's counter samples.
fn samples() -> Vec<Sample> {
    vec![
        Sample {
            t_ns: 100_000_000,
            exits_total: 200,
            exits_by_reason: reason_counts(&[("io", 150), ("npf", 50)]),
            guest_faults: 50,
            host_faults: 4_500,
        },
        Sample {
            t_ns: 500_000_000,
            exits_total: 700,
            exits_by_reason: reason_counts(&[("io", 400), ("npf", 250), ("hlt", 50)]),
            guest_faults: 250,
            host_faults: 4_900,
        },
        Sample {
            t_ns: 900_000_000,
            exits_total: 1_000,
            exits_by_reason: reason_counts(&[
                ("io", 600),
                ("npf", 300),
                ("hlt", 75),
                (AWKWARD_REASON, 25),
            ]),
            guest_faults: 300,
            host_faults: 5_000,
        },
    ]
}

/// Three marks and the four phases they make.
fn marks_and_phases() -> (Vec<Mark>, Vec<PhaseSpan>) {
    let marks = vec![
        Mark {
            name: "vmm: first KVM_RUN".into(),
            source: MarkSource::Vmm,
            t_ns: 70_000_000,
            value: None,
            ..Default::default()
        },
        Mark {
            name: "port 0x80: kernel 0x40".into(),
            source: MarkSource::DebugPort,
            t_ns: 80_000_000,
            value: Some(0x40),
            ..Default::default()
        },
        Mark {
            name: "port 0x80: userspace 0x60".into(),
            source: MarkSource::DebugPort,
            t_ns: 800_000_000,
            value: Some(0x60),
            ..Default::default()
        },
    ];
    let phases = vec![
        PhaseSpan {
            name: "vmm setup".into(),
            start_ns: 0,
            end_ns: 70_000_000,
        },
        PhaseSpan {
            name: "firmware/boot loader".into(),
            start_ns: 70_000_000,
            end_ns: 80_000_000,
        },
        PhaseSpan {
            name: "kernel".into(),
            start_ns: 80_000_000,
            end_ns: 800_000_000,
        },
        PhaseSpan {
            name: "userspace".into(),
            start_ns: 800_000_000,
            end_ns: 890_000_000,
        },
    ];
    (marks, phases)
}

/// Four exit reasons (two with latency histograms, one with a name that
/// needs escaping everywhere), phases, marks, three threads, samples.
pub fn profile() -> Profile {
    let mut p = Profile::new();
    p.target = Target {
        kind: "command".into(),
        command: vec!["qemu-system-x86_64".into(), "-m".into(), "512".into()],
        pid: 4242,
        name: "qemu-system-x86".into(),
        exit_code: Some(0),
        ..Default::default()
    };
    p.host = HostInfo {
        kvm: "svm".into(),
        kernel_release: "6.1.0-56-amd64".into(),
        cpus: 4,
        numa_nodes: vec![
            NumaNode {
                id: 0,
                cpus: vec![0, 1],
            },
            NumaNode {
                id: 1,
                cpus: vec![2, 3],
            },
        ],
    };
    p.duration_ns = 900_000_000;
    p.sources = vec![DataSource {
        name: "tracepoint:kvm:kvm_exit".into(),
        status: "attached".into(),
        detail: String::new(),
        events: 1_000,
        ..Default::default()
    }];
    p.exits = exits();
    p.page_faults = PageFaultProfile {
        guest_total: 300,
        host_total: 5_000,
        by_thread: vec![ThreadFaults {
            tid: 4243,
            name: "touch_pages".into(),
            guest: 0,
            host: 4_000,
        }],
        by_phase: vec![PhaseFaults {
            phase: "kernel".into(),
            guest: 300,
            host: 100,
        }],
        host_latency_hist: vec![bucket(512, 1024, 5_000)],
        ..Default::default()
    };
    p.threads = threads();
    p.numa = NumaProfile {
        pages_local: 100_104,
        pages_remote: 31_078,
        by_node: vec![
            NodeLocality {
                node: 0,
                pages_local: 100_100,
                pages_remote: 0,
            },
            NodeLocality {
                node: 1,
                pages_local: 4,
                pages_remote: 31_078,
            },
        ],
        ..Default::default()
    };
    (p.marks, p.phases) = marks_and_phases();
    p.samples = samples();
    p.lost_events = 3;
    p
}

/// [`profile`] with the guest kernel's log read from its memory: four
/// records, one with an escape sequence and a comma, one of two lines;
/// with `on_clock`, the console anchored the guest's clock 1 ms after the
/// profile's (profile ns = guest ns + 1,000,000).
pub fn with_guest_log(on_clock: bool) -> Profile {
    use bootscope_model::guest_read::{GuestRead, KernelLogLine, KernelLogRead};
    use bootscope_model::initcalls::{ClockAlignment, InitcallsDoc};
    let line = |ts_ns, text: &str| KernelLogLine {
        ts_ns,
        text: text.into(),
    };
    let mut p = profile();
    p.guest_read = Some(GuestRead {
        pid: 4242,
        kernel_log: Some(KernelLogRead {
            os_release: Some("6.1.0-56-amd64".into()),
            at: "shutdown".into(),
            first_seq: 12,
            records: vec![
                line(0, "Linux version 6.1.0-56-amd64"),
                line(150_000_000, "evil \u{1b}[2J, cleared"),
                line(300_000_000, "Run /init as init process\n  with arguments:"),
                line(700_000_000, "reboot: Power down"),
            ],
        }),
        initcalls: on_clock.then(|| InitcallsDoc {
            clock: Some(ClockAlignment {
                offset_ns: 1_000_000,
                error_ns: 500,
                anchors: 40,
                lower_anchors: 3,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    p
}
