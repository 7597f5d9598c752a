//! Boot storms (`bench --parallel N`): every round of a configuration boots
//! one VM alone (when N > 1: the single-VM figure beside the storm's), then
//! N VMs started at the same moment, each by its own thread released from
//! one barrier. Every VM is a run of its own (`runs[]`, with its position
//! `vm`); the storm adds its own metrics (`storms[]`):
//!
//! - `storm:makespan`: the first VM's spawn to the last VM's exit;
//! - `storm:METRIC:p50|p90|p99|max` over the storm's successful VMs, for
//!   every per-VM time and memory metric (`time_to_userspace`, `wall`,
//!   `console:NAME`, `memory_ready`, `prealloc`, `memory:pss`, ...; the
//!   phases are left to the per-VM values), quantiles interpolated linearly
//!   between order statistics as everywhere in `bench`;
//! - `storm:memory:KIND:sum`: the memory of all N VMs together.
//!
//! Boots per second (successful VMs over the makespan) is kept beside
//! them. Only storms whose every VM succeeded enter the statistics; a
//! failed VM is a failed run with its outcome and error, and the others'
//! values are still kept.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::metrics::{self, MetricKind};
use crate::runner::{BenchPlan, ConfigPlan, Side};
use crate::stats;
use bootscope_model::bench::RunRecord;
pub use bootscope_model::bench::StormRecord;
use bootscope_model::memory_spec::NumaSpec;

pub use crate::metrics::STATISTICS;

pub use crate::runner::{group_memory, USERSPACE_PATTERN};

/// Whether a per-VM metric gets storm statistics.
fn distributed(name: &str) -> bool {
    !name.starts_with("phase:")
        && matches!(metrics::kind(name), MetricKind::Time | MetricKind::Bytes)
}

/// The storm's own metrics from its VMs' runs and its makespan.
pub fn storm_metrics(runs: &[RunRecord], makespan: Duration) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let makespan_ns = u64::try_from(makespan.as_nanos()).unwrap_or(u64::MAX);
    out.insert("storm:makespan".to_string(), makespan_ns);
    let mut values: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.ok) {
        for (name, v) in r.metrics.iter().filter(|(n, _)| distributed(n)) {
            values.entry(name).or_default().push(*v as f64);
        }
    }
    for (name, mut v) in values {
        v.sort_by(f64::total_cmp);
        for (stat, p) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
            let q = stats::quantile_sorted(&v, p).round() as u64;
            out.insert(format!("storm:{name}:{stat}"), q);
        }
        if metrics::kind(name) == MetricKind::Bytes {
            out.insert(format!("storm:{name}:sum"), v.iter().sum::<f64>() as u64);
        }
    }
    out
}

/// Guest memory one VM of a configuration asks for, when it can be told
/// from its arguments: `run --memory` (or the sum of its `--numa` nodes'
/// `memory=`; 256 MiB by default), QEMU's `-m` (128 MiB by default).
/// `None` for other commands.
pub fn guest_memory(side: &Side) -> Option<u64> {
    let text: Vec<String> = match side {
        Side::Bootscope(a) | Side::Command(a) => {
            a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
        }
    };
    let value_of = |flag: &'static str| bootscope_model::argv::flag_value(&text, &[flag]);
    let size = |s: &str| bootscope_model::size::parse_size(s).ok();
    match side {
        Side::Bootscope(_) => {
            if let Some(m) = value_of("--memory") {
                return size(m);
            }
            // The VMM's own grammar of `--numa`: every spelling it takes.
            let numa: Option<u64> = bootscope_model::argv::flag_values(&text, &["--numa"])
                .map(|(_, spec)| spec.parse::<NumaSpec>().ok().map(|n| n.memory))
                .sum();
            match numa {
                Some(n) if n > 0 => Some(n),
                _ => Some(256 << 20),
            }
        }
        Side::Command(_) => {
            let program = text.first()?;
            let name = program.rsplit('/').next().unwrap_or(program);
            if !name.starts_with("qemu-system") && !name.starts_with("qemu-kvm") {
                return None;
            }
            match value_of("-m") {
                Some(m) => {
                    let first = m.split(',').next().unwrap_or("");
                    size(first.strip_prefix("size=").unwrap_or(first))
                }
                None => Some(128 << 20),
            }
        }
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    bootscope_model::proc::meminfo("MemAvailable")
}

/// Refuses a storm of `n` VMs whose guest memory exceeds `available`
/// bytes: the message says what N needs and what there is.
pub fn check_memory(configs: &[ConfigPlan], n: u32, available: u64) -> Result<(), BenchError> {
    for c in configs {
        let Some(per_vm) = guest_memory(&c.side) else {
            continue;
        };
        let need = per_vm.saturating_mul(u64::from(n));
        if need > available {
            let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
            return Err(BenchError::Usage(format!(
                "--parallel {n}: configuration {} boots {n} VMs of {} guest memory each, \
                 {:.1} GiB together, but this host has {:.1} GiB available (MemAvailable, \
                 /proc/meminfo): give a smaller N (at most {}) or less guest memory",
                c.label,
                bootscope_model::size::human_size(per_vm),
                gib(need),
                gib(available),
                available / per_vm.max(1)
            )));
        }
    }
    Ok(())
}

impl BenchPlan {
    /// Checks `--parallel` before any boot: at least 1, and guest memory
    /// for N VMs of each configuration within `MemAvailable`.
    pub fn validate_parallel(&self) -> Result<(), BenchError> {
        let Some(n) = self.parallel else {
            return Ok(());
        };
        if n == 0 {
            return Err(BenchError::Usage(
                "--parallel 0: give the number of VMs to boot at once, 1 or more".into(),
            ));
        }
        let available = mem_available().ok_or_else(|| {
            BenchError::Usage(
                "--parallel: /proc/meminfo has no MemAvailable line to check the guests' \
                 memory against"
                    .into(),
            )
        })?;
        check_memory(&self.configs, n, available)
    }

    /// One storm: `n` VMs of `config`, runs `first_index..first_index + n`,
    /// released together from a barrier. A VM that bootscope refused (exit
    /// status 2) while others of the storm booted is a failed run (a storm
    /// may exhaust what one VM had, such as the hugetlb pool); when all were
    /// refused the refusal ends the benchmark.
    pub fn run_storm(
        &self,
        config: &ConfigPlan,
        n: u32,
        first_index: u32,
        round: u32,
        warmup: bool,
    ) -> Result<(Vec<RunRecord>, StormRecord), BenchError> {
        let barrier = Barrier::new(n as usize);
        let results: Vec<(Instant, Result<RunRecord, BenchError>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|vm| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        let start = Instant::now();
                        (
                            start,
                            self.run_once(config, first_index + vm, round, warmup),
                        )
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        (
                            Instant::now(),
                            Err(BenchError::Usage("a storm thread panicked".into())),
                        )
                    })
                })
                .collect()
        });
        let any_ok = results.iter().any(|(_, r)| r.is_ok());
        let mut runs = Vec::with_capacity(n as usize);
        let (mut first, mut last) = (None::<Instant>, None::<Instant>);
        for (vm, (start, result)) in (0u32..).zip(results) {
            let mut record = match result {
                Ok(r) => r,
                Err(BenchError::RunRefused { command, stderr }) if any_ok => RunRecord {
                    index: first_index + vm,
                    round,
                    warmup,
                    vm: None,
                    solo: false,
                    ok: false,
                    exit_code: Some(2),
                    outcome: None,
                    error: Some(format!(
                        "refused in the storm (exit status 2): {command}; stderr: {}",
                        stderr.trim()
                    )),
                    metrics: BTreeMap::new(),
                    userspace_mark: None,
                },
                Err(e) => return Err(e),
            };
            record.vm = Some(vm);
            let wall = Duration::from_nanos(record.metrics.get("wall").copied().unwrap_or(0));
            first = Some(first.map_or(start, |f| f.min(start)));
            last = Some(last.map_or(start + wall, |l| l.max(start + wall)));
            runs.push(record);
        }
        let makespan = match (first, last) {
            (Some(f), Some(l)) => l.duration_since(f),
            _ => Duration::ZERO,
        };
        let ok_vms = runs.iter().filter(|r| r.ok).count() as u32;
        let storm = StormRecord {
            round,
            warmup,
            vms: n,
            ok: ok_vms == n,
            failed: n - ok_vms,
            makespan_ns: u64::try_from(makespan.as_nanos()).unwrap_or(u64::MAX),
            boots_per_second: if makespan.is_zero() {
                0.0
            } else {
                f64::from(ok_vms) / makespan.as_secs_f64()
            },
            metrics: storm_metrics(&runs, makespan),
        };
        Ok((runs, storm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn run(vm: u32, ok: bool, ttu: u64, pss: u64) -> RunRecord {
        RunRecord {
            index: vm,
            round: 0,
            warmup: false,
            vm: Some(vm),
            solo: false,
            ok,
            exit_code: Some(0),
            outcome: None,
            error: None,
            userspace_mark: None,
            metrics: [
                ("time_to_userspace".to_string(), ttu),
                ("phase:kernel".to_string(), ttu),
                ("memory:pss".to_string(), pss),
                ("exits:total".to_string(), 7),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn storm_statistics() {
        let runs: Vec<RunRecord> = (0..10)
            .map(|i| run(i, true, 100 + u64::from(i) * 10, 1000))
            .chain([run(10, false, 1, 1)])
            .collect();
        let m = storm_metrics(&runs, Duration::from_millis(300));
        assert_eq!(m["storm:makespan"], 300_000_000);
        // 100, 110, ..., 190 (the failed VM left out).
        assert_eq!(m["storm:time_to_userspace:p50"], 145);
        assert_eq!(m["storm:time_to_userspace:p90"], 181);
        assert_eq!(m["storm:time_to_userspace:p99"], 189);
        assert_eq!(m["storm:time_to_userspace:max"], 190);
        assert_eq!(m["storm:memory:pss:sum"], 10_000);
        assert_eq!(m["storm:memory:pss:max"], 1000);
        assert!(!m.contains_key("storm:time_to_userspace:sum"));
        assert!(!m
            .keys()
            .any(|k| k.contains("phase:") || k.contains("exits")));
        assert_eq!(
            metrics::kind("storm:time_to_userspace:p99"),
            MetricKind::Time
        );
        assert_eq!(metrics::kind("storm:memory:pss:sum"), MetricKind::Bytes);
        assert_eq!(metrics::kind("storm:makespan"), MetricKind::Time);
        assert_eq!(metrics::kind("solo:time_to_userspace"), MetricKind::Time);
        assert_eq!(
            metrics::kind("storm:console:run init:p90"),
            MetricKind::Time
        );
        assert_eq!(
            metrics::display_name("storm:time_to_userspace:p99"),
            "time to userspace p99 per storm"
        );
    }

    fn plan(configs: Vec<ConfigPlan>, n: u32) -> BenchPlan {
        BenchPlan {
            exe: std::path::PathBuf::from("/nonexistent/bootscope"),
            configs,
            runs: 2,
            warmup: 0,
            profile: false,
            run_profiles_itself: false,
            console_patterns: vec![
                crate::ConsolePattern::parse("userspace=^up").unwrap(),
                crate::ConsolePattern::parse("kernel banner=Linux version").unwrap(),
            ],
            run_timeout: Duration::from_secs(30),
            work_dir: std::env::temp_dir().join(format!(
                "bench-storm-{}-{n}-{:?}",
                std::process::id(),
                std::thread::current().id()
            )),
            machine: crate::doc::Machine::default(),
            stop: None,
            parallel: Some(n),
        }
    }

    /// Storms of real processes: the N of a storm run at the same time
    /// (the makespan is about one VM's time, not N), each VM is a run of
    /// its own, the one alone comes first, and a failing VM fails its
    /// storm but keeps the others' values.
    #[test]
    fn storms_of_commands() {
        let cmd = |s: &str| Side::Command(os(&["sh", "-c", s]));
        let dir = tempfile::tempdir().unwrap();
        let counter = dir.path().join("count");
        let p = plan(
            vec![
                ConfigPlan {
                    label: "ok".into(),
                    side: cmd("echo up; echo Linux version 1; sleep 0.3"),
                },
                ConfigPlan {
                    label: "flaky".into(),
                    // Runs count themselves under a lock: the second of
                    // each round (one VM of its storm, after the one
                    // alone) fails.
                    side: cmd(&format!(
                        "n=$(flock {c} sh -c 'echo x >> {c}; wc -l < {c}'); \
                         echo Linux version 1; sleep 0.05; [ $((n % 5)) -ne 2 ] || exit 3",
                        c = counter.display()
                    )),
                },
            ],
            4,
        );
        let mut storms_seen = 0;
        let doc = p
            .run(|pr| storms_seen += usize::from(pr.storm.is_some()))
            .unwrap();
        assert_eq!(storms_seen, 4);
        assert_eq!(doc.settings.parallel, Some(4));
        let ok = &doc.configs[0];
        assert_eq!(ok.runs.len(), 2 * 5);
        assert!(ok.runs[0].solo && ok.runs[0].vm.is_none());
        let vms: Vec<Option<u32>> = ok.runs[1..5].iter().map(|r| r.vm).collect();
        assert_eq!(vms, [Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(ok.storms.len(), 2);
        for s in &ok.storms {
            assert!(s.ok && s.failed == 0 && s.vms == 4, "{s:?}");
            // The four VMs ran at once: the storm lasted as long as its
            // longest VM, less than the four one after the other.
            let makespan = s.metrics["storm:makespan"];
            let walls: Vec<u64> = ok
                .runs
                .iter()
                .filter(|r| r.round == s.round && r.vm.is_some())
                .map(|r| r.metrics["wall"])
                .collect();
            assert_eq!(walls.len(), 4, "{s:?}");
            assert!(walls.iter().all(|&w| w >= 300_000_000), "{walls:?}");
            assert!(
                makespan >= *walls.iter().max().unwrap(),
                "{makespan} {walls:?}"
            );
            assert!(makespan < walls.iter().sum::<u64>(), "{makespan} {walls:?}");
            let rate = 4.0 / (makespan as f64 / 1e9);
            assert!((s.boots_per_second - rate).abs() < rate * 1e-6, "{s:?}");
            assert!(s.metrics["storm:wall:p99"] >= s.metrics["storm:wall:p50"]);
            // Memory read at the `userspace` console line.
            assert!(s.metrics["storm:memory:pss:sum"] > 0);
            assert!(s.metrics["storm:memory:uss:sum"] >= s.metrics["storm:memory:uss:max"]);
        }
        assert!(ok.runs.iter().all(|r| r.metrics.contains_key("memory:pss")));
        assert!(ok.summary.contains_key("solo:wall"));
        assert!(ok.summary.contains_key("storm:console:kernel banner:p90"));
        assert_eq!(ok.summary["storm:makespan"].stats.n, 2);
        let flaky = &doc.configs[1];
        assert_eq!(flaky.storms.len(), 2);
        assert_eq!(flaky.failures(), 2, "{:?}", flaky.runs);
        for s in &flaky.storms {
            assert!(!s.ok && s.failed == 1, "{s:?}");
            // The others' values are kept.
            assert!(s.metrics.contains_key("storm:wall:p50"), "{s:?}");
        }
        assert!(!flaky.summary.contains_key("storm:makespan"));
        let failed = flaky.runs.iter().find(|r| !r.ok).unwrap();
        assert!(
            failed.vm.is_some() && failed.exit_code == Some(3),
            "{failed:?}"
        );
        assert!(failed.error.as_deref().unwrap().contains("exit status 3"));
        let _ = std::fs::remove_dir_all(&p.work_dir);
    }

    #[test]
    fn guest_memory_from_arguments() {
        let b = |v: &[&str]| guest_memory(&Side::Bootscope(os(v)));
        let c = |v: &[&str]| guest_memory(&Side::Command(os(v)));
        assert_eq!(b(&[]), Some(256 << 20));
        assert_eq!(b(&["--memory", "1G"]), Some(1 << 30));
        assert_eq!(b(&["--memory=512"]), Some(512 << 20));
        assert_eq!(
            b(&[
                "--numa",
                "node=0,cpus=0,memory=128M",
                "--numa",
                "node=1,cpus=1,memory=128M"
            ]),
            Some(256 << 20)
        );
        // Every spelling the VMM takes: `--numa=`, `mem=`/`size=`, lists
        // going on after a comma.
        assert_eq!(
            b(&[
                "--numa=node=0,cpus=0-1,3,mem=1G",
                "--numa",
                "nodeid=1,size=512M,host-nodes=0"
            ]),
            Some(1536 << 20)
        );
        assert_eq!(c(&["qemu-system-x86_64", "-M", "microvm"]), Some(128 << 20));
        assert_eq!(
            c(&["/usr/bin/qemu-system-x86_64", "-m", "size=1G,maxmem=2G"]),
            Some(1 << 30)
        );
        assert_eq!(c(&["qemu-system-x86_64", "-m", "300"]), Some(300 << 20));
        assert_eq!(c(&["firecracker", "--config-file", "x"]), None);
    }

    #[test]
    fn storms_the_host_cannot_hold_are_refused() {
        let configs = vec![ConfigPlan {
            label: "a".into(),
            side: Side::Bootscope(os(&["--memory", "1G"])),
        }];
        check_memory(&configs, 4, 8 << 30).unwrap();
        let e = check_memory(&configs, 16, 8 << 30).unwrap_err();
        let msg = e.to_string();
        assert!(e.is_bad_input());
        assert!(msg.contains("16 VMs of 1 GiB"), "{msg}");
        assert!(msg.contains("16.0 GiB together"), "{msg}");
        assert!(msg.contains("8.0 GiB available"), "{msg}");
        assert!(msg.contains("at most 8"), "{msg}");
    }
}
