//! Memory set-up through the CLI: preallocation through thread contexts
//! (also under the sandbox), set-up-only runs, and bad memory options.

mod support;

use support::bootscope_output as bootscope;
use support::*;

/// Allowed CPUs of this process, as the kernel reports them.
fn own_cpus() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn prealloc_threads_run_where_their_context_says_even_sandboxed() {
    require_kvm!();
    let d = scratch("prealloc");
    let t = d.join("t.json");
    let o = bootscope(&[
        "run",
        "--stop-after",
        "memory",
        "--memory",
        "256M",
        "--prealloc",
        "--prealloc-threads",
        "2",
        "--prealloc-cpus",
        "0",
        "--sandbox",
        "--timeline",
        t.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("prealloc-n0-0") && err.contains("prealloc-n0-1"),
        "{err}"
    );
    let doc = read_json(&t);
    assert_eq!(doc["outcome"]["reason"], "stopped_after_setup");
    let marks: Vec<&str> = doc["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    // The sandbox went up before preallocation started.
    let sandbox = marks
        .iter()
        .position(|m| *m == "vmm: sandbox installed")
        .expect("sandbox mark");
    let ready = marks
        .iter()
        .position(|m| *m == "vmm: memory ready")
        .unwrap();
    assert!(sandbox < ready);
    let region = &doc["memory"]["regions"][0];
    let threads = region["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    let mut pages = 0;
    for th in threads {
        // Created through a context pinned to CPU 0, under a sandbox that
        // forbids setting affinity: they ran on CPU 0 all the same.
        assert_eq!(th["allowed_cpus"], "0", "{th}");
        assert_eq!(th["last_cpu"], 0, "{th}");
        assert_eq!(th["node"], 0);
        pages += th["pages_touched"].as_u64().unwrap();
    }
    // Every 4 KiB page of 256 MiB, counted by the threads that touched it.
    assert_eq!(pages, (256 << 20) / 4096);
    // Where pages landed, checked independently with move_pages(2).
    let placement = &region["placement"];
    assert_eq!(placement["absent"], 0);
    assert_eq!(placement["per_node"]["0"], placement["sampled"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn default_context_cpus_are_the_nodes_cpus() {
    require_kvm!();
    let d = scratch("default-cpus");
    let t = d.join("t.json");
    let o = bootscope(&[
        "run",
        "--stop-after",
        "memory",
        "--memory",
        "64M",
        "--prealloc",
        "--timeline",
        t.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let node0 = std::fs::read_to_string("/sys/devices/system/node/node0/cpulist")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| own_cpus());
    let th = &read_json(&t)["memory"]["regions"][0]["threads"][0];
    assert_eq!(th["allowed_cpus"].as_str().unwrap(), node0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sandboxed_guest_still_boots() {
    require_kvm!();
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--memory",
        "64M",
        "--prealloc",
        "--sandbox",
        "--no-summary",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("fixture: userspace reached"));
}

#[test]
fn stop_after_load_stops_before_the_guest_runs() {
    require_kvm!();
    let d = scratch("load");
    let t = d.join("t.json");
    let o = bootscope(&[
        "run",
        "--kernel",
        &fixture("mini-bzimage-reset.bin"),
        "--memory",
        "64M",
        "--stop-after",
        "load",
        "--timeline",
        t.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty(), "the guest printed something");
    let doc = read_json(&t);
    let marks: Vec<&str> = doc["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(marks.contains(&"vmm: kernel and initrd loaded"));
    assert!(!marks.contains(&"vmm: first KVM_RUN"));
    assert_eq!(doc["guest"]["kernel_format"], "bzimage");
    let _ = std::fs::remove_dir_all(&d);
}

fn expect_usage_error(args: &[&str], needle: &str) {
    support::expect_usage_error(args, &[needle]);
}

#[test]
fn bad_memory_options_exit_2() {
    require_kvm!();
    let base = ["run", "--stop-after", "memory"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    expect_usage_error(
        &with(&["--prealloc", "--prealloc-threads", "0"]),
        "--prealloc-threads is 0",
    );
    expect_usage_error(
        &with(&["--prealloc", "--prealloc-cpus", "0-4095"]),
        "do not exist or are offline",
    );
    expect_usage_error(
        &with(&["--numa", "node=0,memory=128M,host-nodes=63"]),
        "host node 63 does not exist",
    );
    expect_usage_error(&with(&["--memory", "1000001K"]), "4 KiB");
    expect_usage_error(
        &with(&[
            "--memory",
            "512M",
            "--numa",
            "node=0,memory=128M",
            "--numa",
            "node=1,memory=128M",
        ]),
        "512",
    );
    expect_usage_error(&with(&["--numa", "memory=lots"]), "--numa");
    expect_usage_error(&with(&["--hugepages", "3M"]), "--hugepages");
    expect_usage_error(&["run", "--stop-after", "never"], "give memory or load");
    // A huge page pool too small: the message says how many to reserve.
    let free: u64 =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
    let want_mib = (free + 64) * 2;
    let mem = format!("{want_mib}M");
    let o = bootscope(&[
        "run",
        "--stop-after",
        "memory",
        "--hugepages",
        "2M",
        "--memory",
        &mem,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("needs {} pages", free + 64)) && err.contains("nr_hugepages"),
        "{err}"
    );
}
