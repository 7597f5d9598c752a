//! The exporter and the Pushgateway push against Debian's real
//! `prometheus` and `prometheus-pushgateway` on the loopback address:
//! Prometheus scrapes the exporter while bootscope's VMM boots the
//! `mini-bzimage-ports.bin` fixture (exactly 1002 writes to port 0x80),
//! and the exit counts are read back through Prometheus's HTTP API; a
//! bench pushed to the Pushgateway is read back the same way.

mod support;

use support::*;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn have(program: &str) -> bool {
    find_program(program).is_some()
}

/// Whether prometheus, promtool and prometheus-pushgateway are here,
/// installing them with apt-get where they are not and we are root.
fn prometheus_available() -> bool {
    let all = || {
        ["prometheus", "promtool", "prometheus-pushgateway"]
            .iter()
            .all(|p| have(p))
    };
    if all() {
        return true;
    }
    if !have("apt-get") {
        skip("prometheus and prometheus-pushgateway are missing and there is no apt-get");
        return false;
    }
    let installed = Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "prometheus",
            "prometheus-pushgateway",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed || !all() {
        skip("prometheus and prometheus-pushgateway could not be installed with apt-get");
        return false;
    }
    true
}

fn get(url: &str) -> Option<String> {
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .new_agent();
    agent
        .get(url)
        .call()
        .ok()?
        .into_body()
        .read_to_string()
        .ok()
}

/// The value of the instant query `q` (one series), once Prometheus has one.
fn query(prom: u16, q: &str) -> Option<f64> {
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .new_agent();
    let body = agent
        .get(&format!("http://127.0.0.1:{prom}/api/v1/query"))
        .query("query", q)
        .call()
        .ok()?
        .into_body()
        .read_to_string()
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    assert!(result.len() <= 1, "{q}: more than one series: {body}");
    result.first()?["value"][1].as_str()?.parse().ok()
}

fn spawn(cmd: &mut Command, log: &Path) -> Running {
    let f = std::fs::File::create(log).unwrap();
    Running(
        cmd.stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
    )
}

fn start_prometheus(dir: &Path, exporter: u16, gateway: u16, prom: u16) -> Running {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n\
             \x20 - job_name: bootscope-exporter\n\
             \x20   static_configs: [{{targets: ['127.0.0.1:{exporter}']}}]\n\
             \x20 - job_name: pushgateway\n\
             \x20   honor_labels: true\n\
             \x20   static_configs: [{{targets: ['127.0.0.1:{gateway}']}}]\n"
        ),
    )
    .unwrap();
    spawn(
        Command::new("prometheus").args([
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", dir.join("data").display()),
            &format!("--web.listen-address=127.0.0.1:{prom}"),
        ]),
        &dir.join("prometheus.log"),
    )
}

/// Starts the fixture VM and stops it (SIGSTOP) once it holds its KVM VM,
/// while it preallocates guest memory, before any vCPU exists.
fn held_vm(dir: &Path) -> Running {
    let vm = port_fixture_vm(dir, "vm", &["--memory", "512M", "--prealloc"]);
    let pid = vm.0.id();
    let until = Instant::now() + Duration::from_secs(30);
    let proc_fd = format!("/proc/{pid}/fd");
    loop {
        let holds = std::fs::read_dir(&proc_fd)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:kvm-vm")
            });
        if holds {
            break;
        }
        assert!(Instant::now() < until, "the VM never created its KVM VM");
        std::thread::sleep(Duration::from_micros(500));
    }
    // SAFETY: kill(2) with our child's pid and a signal.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let vcpus: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|c| c.starts_with("vcpu"))
        .collect();
    assert!(
        vcpus.is_empty(),
        "the guest already runs ({vcpus:?}): preallocation was too quick to hold it before"
    );
    vm
}

#[test]
fn prometheus_reads_exit_counts_from_the_exporter_and_a_pushed_bench() {
    require_bpf!();
    require_kvm!();
    if !prometheus_available() {
        return;
    }
    let dir = scratch("prometheus");
    let (exporter, gateway, prom) = (free_port(), free_port(), free_port());
    let _exporter = spawn(
        bootscope().args([
            "exporter",
            "--listen",
            &format!("127.0.0.1:{exporter}"),
            "--scan-interval",
            "0.1",
            "--labels",
            "port",
        ]),
        &dir.join("exporter.log"),
    );
    let _gateway = spawn(
        Command::new("prometheus-pushgateway").args([
            format!("--web.listen-address=127.0.0.1:{gateway}"),
            format!(
                "--persistence.file={}",
                dir.join("pushgateway.data").display()
            ),
        ]),
        &dir.join("pushgateway.log"),
    );
    let _prometheus = start_prometheus(&dir, exporter, gateway, prom);
    let metrics_url = format!("http://127.0.0.1:{exporter}/metrics");
    wait_for(20, "the exporter", || get(&metrics_url));

    // The VM is followed before its guest runs: every exit is counted.
    let mut vm = held_vm(&dir);
    let pid = vm.0.id();
    let up = format!("bootscope_vm_up{{pid=\"{pid}\",comm=\"bootscope\",vm=\"\"}} 1");
    wait_for(30, "the exporter to follow the VM", || {
        get(&metrics_url).filter(|m| m.contains(&up))
    });
    // SAFETY: kill(2) with our child's pid and a signal.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    assert!(
        vm.0.wait().unwrap().success(),
        "the VM failed: see {}",
        dir.join("vm.log").display()
    );

    let writes =
        format!("bootscope_vm_port_io_total{{pid=\"{pid}\",port=\"0x80\",direction=\"write\"}}");
    let n = wait_for(30, "Prometheus to have the port writes", || {
        query(prom, &writes).filter(|&v| v >= 1002.0)
    });
    assert_eq!(n, 1002.0, "the fixture writes port 0x80 exactly 1002 times");
    let exits = query(
        prom,
        &format!("sum(bootscope_vm_exits_total{{pid=\"{pid}\"}})"),
    )
    .unwrap();
    assert!(exits >= 1002.0, "every port write is an exit: {exits}");
    wait_for(10, "the ended VM's up = 0", || {
        query(prom, &format!("bootscope_vm_up{{pid=\"{pid}\"}}")).filter(|&v| v == 0.0)
    });
    // KVM's own count, held from before the guest ran to its end, covers
    // every exit the programs counted (KVM also counts those it handles
    // itself).
    let kvm = wait_for(10, "KVM's own exit count", || {
        query(
            prom,
            &format!("bootscope_vm_kvm_stats_exits_total{{pid=\"{pid}\"}}"),
        )
        .filter(|&v| v >= exits)
    });
    assert!(kvm >= exits, "{kvm} < {exits}");
    let own_cpu = query(
        prom,
        &format!("process_cpu_seconds_total{{instance=\"127.0.0.1:{exporter}\"}}"),
    );
    assert!(own_cpu.is_some_and(|c| c > 0.0), "{own_cpu:?}");
    bootscope_testkit::promtool_check("promtool", &get(&metrics_url).unwrap())
        .expect("promtool runs");

    check_pushed_bench(&dir, gateway, prom);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bench pushed to the Pushgateway, read back through Prometheus.
fn check_pushed_bench(dir: &Path, gateway: u16, prom: u16) {
    let bench = dir.join("bench.json");
    let o = run(
        bootscope()
            .args([
                "bench",
                "--runs",
                "1",
                "--warmup",
                "0",
                "-o",
                bench.to_str().unwrap(),
                "--push",
                &format!("http://127.0.0.1:{gateway}"),
                "--",
            ])
            .args(port_fixture_run()),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = read_json(&bench);
    let exits_total = doc["configs"][0]["summary"]["exits:total"]["median"]
        .as_f64()
        .expect("exits:total in the bench file");
    let pushed = wait_for(30, "the pushed bench in Prometheus", || {
        query(
            prom,
            "bootscope_bench_count{job=\"bootscope\",kind=\"bench\",config=\"a\",metric=\"exits:total\",stat=\"median\"}",
        )
    });
    assert_eq!(pushed, exits_total);
    let gateway_text = get(&format!("http://127.0.0.1:{gateway}/metrics")).unwrap();
    assert!(
        gateway_text.contains("bootscope_bench_time_seconds{"),
        "{gateway_text}"
    );
}

/// `run` of the port fixture (exactly 1002 writes to port 0x80), without
/// the profiler.
fn port_fixture_run() -> Vec<String> {
    ["run", "--kernel", &fixture("mini-bzimage-ports.bin")]
        .into_iter()
        .map(String::from)
        .chain(["--no-profile", "--serial", "null"].map(String::from))
        .collect()
}

/// Starts the port fixture VM (`--no-profile`, with `extra` run
/// arguments), its output in `dir/TAG.log`.
fn port_fixture_vm(dir: &Path, tag: &str, extra: &[&str]) -> Running {
    spawn(
        bootscope()
            .args(port_fixture_run())
            .arg("--no-summary")
            .args(extra),
        &dir.join(format!("{tag}.log")),
    )
}

/// Port 0x80 writes in a profile.
fn debug_port_writes(p: &bootscope_profiler::Profile) -> u64 {
    p.exits
        .pio
        .iter()
        .filter(|s| s.port == 0x80 && s.direction == "write")
        .map(|s| s.count)
        .sum()
}

/// One set of programs follows every VM from its first exit, keeps each
/// VM's counts apart, and forgets an ended VM's counts when told.
#[test]
fn one_program_set_counts_each_vm_apart_and_forgets_the_ended() {
    use bootscope_profiler::{Collector, CollectorConfig, TargetSpec};
    require_bpf!();
    require_kvm!();
    let dir = scratch("every-vm");
    let c = Collector::start(CollectorConfig::new(TargetSpec::AnyVm)).expect("collector starts");
    let mut a = port_fixture_vm(&dir, "a", &[]);
    let mut b = port_fixture_vm(&dir, "b", &[]);
    let (pa, pb) = (a.0.id(), b.0.id());
    for vm in [&mut a, &mut b] {
        assert!(vm.0.wait().unwrap().success(), "see {}", dir.display());
    }
    // Their ends arrive through the ring buffer.
    wait_for(20, "both VMs' ends", || {
        let vms = c.followed_vms();
        [pa, pb]
            .iter()
            .all(|p| vms.iter().any(|v| v.tgid == *p && v.ended_ns.is_some()))
            .then_some(())
    });
    let (all, each) = c.snapshot_each();
    for pid in [pa, pb] {
        let p = &each[&pid];
        assert_eq!(p.target.pid, pid);
        assert_eq!(p.target.name, "bootscope");
        assert_eq!(debug_port_writes(p), 1002, "pid {pid}: {:?}", p.exits.pio);
        assert!(p.threads.iter().all(|t| t.tgid == pid), "{:?}", p.threads);
    }
    // Other VMs of the host (other tests) may add to the whole, also
    // between the two snapshots: what they add is taken out of the check.
    assert!(debug_port_writes(&all) >= 2004);
    let others = |each: &std::collections::BTreeMap<u32, bootscope_profiler::Profile>| -> u64 {
        each.iter()
            .filter(|(pid, _)| **pid != pa)
            .map(|(_, p)| debug_port_writes(p))
            .sum()
    };
    let others_before = others(&each);
    c.forget(&[pa]);
    let (after, each) = c.snapshot_each();
    assert!(!each.contains_key(&pa));
    assert_eq!(debug_port_writes(&each[&pb]), 1002);
    let others_grew = others(&each).saturating_sub(others_before);
    assert!(
        debug_port_writes(&after) <= debug_port_writes(&all) - 1002 + others_grew,
        "the forgotten VM's counts are gone from the maps: {} after, {} before, others grew by {others_grew}",
        debug_port_writes(&after),
        debug_port_writes(&all)
    );
    assert!(c.followed_vms().iter().all(|v| v.tgid != pa));
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A VM that starts and ends between two scans of `/proc` is served all
/// the same, with every exit, and as ended: the programs found it.
#[test]
fn a_vm_shorter_than_a_scan_is_served() {
    require_bpf!();
    require_kvm!();
    let dir = scratch("short-vm");
    let port = free_port();
    let _exporter = spawn(
        bootscope().args([
            "exporter",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--scan-interval",
            "3600",
            "--labels",
            "port",
        ]),
        &dir.join("exporter.log"),
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    // Its one scan has been made once it answers.
    wait_for(20, "the exporter", || get(&url));
    let mut vm = port_fixture_vm(&dir, "vm", &[]);
    let pid = vm.0.id();
    assert!(vm.0.wait().unwrap().success(), "see {}", dir.display());
    let writes =
        format!("bootscope_vm_port_io_total{{pid=\"{pid}\",comm=\"bootscope\",vm=\"\",port=\"0x80\",direction=\"write\"}} 1002");
    let ended = format!("bootscope_vm_up{{pid=\"{pid}\",comm=\"bootscope\",vm=\"\"}} 0");
    wait_for(20, "the ended VM's counts", || {
        get(&url).filter(|m| m.contains(&writes) && m.contains(&ended))
    });
    // KVM's own count of a VM is served after the VM ended: a VM whose
    // statistics the exporter found while it ran (one that halts until
    // it is stopped, so that finding them does not race its end) keeps
    // them to its last exit, the count the VMM read itself.
    let timeline = dir.join("halted.timeline.json");
    let mut halted = spawn(
        bootscope().args([
            "run",
            "--kernel",
            &fixture("mini-bzimage-hlt.bin"),
            "--no-profile",
            "--no-summary",
            "--serial",
            "null",
            "--timeout",
            "900",
            "--timeline",
            timeline.to_str().unwrap(),
        ]),
        &dir.join("halted.log"),
    );
    let pid = halted.0.id();
    let kvm =
        format!("bootscope_vm_kvm_stats_exits_total{{pid=\"{pid}\",comm=\"bootscope\",vm=\"\"}} ");
    let up = format!("bootscope_vm_up{{pid=\"{pid}\",comm=\"bootscope\",vm=\"\"}} ");
    let value = |text: &str, prefix: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix)?.parse().ok())
    };
    wait_for(120, "KVM's statistics of the running VM", || {
        get(&url).filter(|m| value(m, &up) == Some(1.0) && value(m, &kvm).is_some())
    });
    // SAFETY: a signal to a child this test spawned and has not waited for.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    halted.0.wait().unwrap();
    let own: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&timeline)
            .unwrap_or_else(|e| panic!("{}: {e}; see {}", timeline.display(), dir.display())),
    )
    .unwrap();
    let own = own["kvm_stats"]["exits"]
        .as_f64()
        .unwrap_or_else(|| panic!("no kvm_stats.exits in {}", timeline.display()));
    let text = wait_for(20, "the halted VM's last counts", || {
        get(&url).filter(|m| value(m, &up) == Some(0.0))
    });
    assert_eq!(
        value(&text, &kvm),
        Some(own),
        "the exporter's KVM count of the ended VM against the VMM's own"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
