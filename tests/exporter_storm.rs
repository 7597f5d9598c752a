//! `bootscope exporter` in a storm of short VMs: waves of VMMs started at
//! once (the port fixture guest, `bootscope run --no-profile`), each over in
//! well under a second. Every one of them is served, with its boot phases
//! and its threads' run-queue waits (`--collect ...,sched`), and the
//! exporter's own descriptors and memory stay flat as they come and go.

mod support;

use support::*;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a wave may add to the exporter's anonymous memory per VM served,
/// in the wave at the lower quartile of growth: well under the tens of KiB
/// a VM's profile kept for good would cost. Measured on a loaded host over 30 waves: steps of up to
/// 900 KiB in the first three waves (the allocator's arenas, a worker
/// thread), then 2 KiB a VM (3,648 to 3,876 KiB over 108 VMs); the lower
/// quartile of 16 waves is in that plateau.
const WAVE_KIB_PER_VM: u64 = 12;

const WAVES: usize = 16;
const VMS_PER_WAVE: usize = 4;
/// How long an ended VM stays served (`--keep-ended`).
const KEEP_ENDED_S: f64 = 1.0;

/// GET /metrics, the connection closed after the answer.
fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let (head, text) = body.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| text.to_string())
}

/// What the scrapes showed of each VM (by pid): its phases, its waits,
/// and whether it was served as ended.
#[derive(Default, Debug, Clone, Copy)]
struct Seen {
    phases: bool,
    waits: bool,
    ended: bool,
}

fn note(seen: &mut BTreeMap<u32, Seen>, text: &str) {
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(pid) = line
            .split_once("{pid=\"")
            .and_then(|(_, r)| r.split_once('"'))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        let s = seen.entry(pid).or_default();
        s.phases |= line.starts_with("bootscope_vm_boot_phase_seconds{");
        s.waits |=
            line.starts_with("bootscope_vm_thread_runqueue_waits_total{") && !line.ends_with(" 0");
        s.ended |= line.starts_with("bootscope_vm_up{") && line.ends_with(" 0");
    }
}

/// The exporter's open descriptors and anonymous resident memory (KiB:
/// its heap, stacks and arenas; not the pages of its program, which grow as
/// code paths are first run).
fn footprint(pid: u32) -> (usize, u64) {
    // The fewest descriptors of five looks 50 ms apart: a file the
    // exporter has open for a moment (a VM's /proc or statistics file read
    // by a scan) is in one look, a descriptor kept is in all.
    let fds = (0..5)
        .map(|i| {
            if i > 0 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .count()
        })
        .min()
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (fds, field("RssAnon:"))
}

/// A wave: `VMS_PER_WAVE` VMMs started together, waited for; their pids.
fn wave(dir: &Path, n: usize) -> Vec<u32> {
    let kernel = fixture("mini-bzimage-ports.bin");
    let vms: Vec<Running> = (0..VMS_PER_WAVE)
        .map(|i| {
            let log = std::fs::File::create(dir.join(format!("vm-{n}-{i}.log"))).unwrap();
            Running(
                bootscope()
                    .args([
                        "run",
                        "--kernel",
                        &kernel,
                        "--no-profile",
                        "--serial",
                        "null",
                    ])
                    .arg("--no-summary")
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("bootscope run starts"),
            )
        })
        .collect();
    let mut pids = Vec::new();
    for mut vm in vms {
        pids.push(vm.0.id());
        let st = vm.0.wait().unwrap();
        assert!(
            st.success(),
            "a VM of wave {n} failed; see {}",
            dir.display()
        );
    }
    pids
}

/// Waits until every VM ended so far is no longer served (kept
/// `KEEP_ENDED_S`, then dropped by a scan).
fn wait_retired(port: u16, pids: &[u32]) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let text = scrape(port).unwrap_or_default();
        let served = pids
            .iter()
            .any(|p| text.contains(&format!("bootscope_vm_up{{pid=\"{p}\"")));
        if !served {
            return;
        }
        assert!(Instant::now() < until, "ended VMs still served after 30 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn every_vm_of_a_storm_is_served_and_the_exporter_stays_flat() {
    require_bpf!();
    require_kvm!();
    let dir = scratch("exporter-storm");
    let port = free_port();
    let log = std::fs::File::create(dir.join("exporter.log")).unwrap();
    let exporter = Running(
        bootscope()
            .args(["exporter", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--collect", "exit-counts,threads,phases,sched"])
            .args(["--scan-interval", "0.25"])
            .args(["--keep-ended", &KEEP_ENDED_S.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the exporter starts"),
    );
    let xpid = exporter.0.id();
    let until = Instant::now() + Duration::from_secs(30);
    while scrape(port).is_none() {
        assert!(Instant::now() < until, "the exporter never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Scrapes all along, as Prometheus would (often: the VMs are short).
    // Its connection is closed before the footprint is taken (`turn`).
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let turn = Arc::new(Mutex::new(()));
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (seen, stop, turn) = (seen.clone(), stop.clone(), turn.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let scraped = {
                    let _turn = turn.lock().unwrap();
                    scrape(port)
                };
                if let Some(text) = scraped {
                    note(&mut seen.lock().unwrap(), &text);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut started = Vec::new();
    let mut footprints = Vec::new();
    for n in 0..WAVES {
        let pids = wave(&dir, n);
        started.extend(pids);
        wait_retired(port, &started);
        let _turn = turn.lock().unwrap();
        footprints.push(footprint(xpid));
    }
    stop.store(true, Ordering::SeqCst);
    scraper.join().unwrap();
    let seen = seen.lock().unwrap().clone();
    let missing: Vec<u32> = started
        .iter()
        .copied()
        .filter(|p| !seen.get(p).is_some_and(|s| s.phases && s.waits && s.ended))
        .collect();
    let shown: BTreeMap<u32, Seen> = started
        .iter()
        .map(|p| (*p, seen.get(p).copied().unwrap_or_default()))
        .collect();
    assert!(
        missing.is_empty(),
        "VMs not served with phases, run-queue waits and their end: {missing:?}\n{shown:?}\nsee {}",
        dir.display()
    );
    // Flat: the first wave warms up (code, allocator arenas, the HTTP
    // server's buffers); after it VMs come and go and their descriptors
    // go with them. Resident memory may move with the allocator by a few
    // pages a VM (measured: about 6 KiB a VM in anonymous memory outside
    // the main heap, 2026-11-27); a VM's profile kept for good would be
    // tens of KiB each, a map or a ring buffer per VM far more.
    eprintln!("exporter fds and anonymous RSS (KiB) after each wave: {footprints:?}");
    let distinct: BTreeSet<u32> = started.iter().copied().collect();
    assert_eq!(distinct.len(), WAVES * VMS_PER_WAVE);
    assert_flat(&footprints);
    drop(exporter);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The exporter's footprints after each wave stay flat: no descriptor and
/// no memory kept per VM served.
fn assert_flat(footprints: &[(usize, u64)]) {
    let (warm_fds, warm_rss) = footprints[0];
    // A descriptor kept per VM would add one a VM, wave after wave; a
    // wave's own VMs may still hold theirs (KVM's statistics files) until
    // the scan that drops them, on a loaded host after the look.
    for (i, &(fds, _)) in footprints.iter().enumerate().skip(1) {
        assert!(
            fds <= warm_fds + VMS_PER_WAVE,
            "wave {i}: {fds} descriptors, {warm_fds} after the first"
        );
    }
    // A leak grows with every VM served, so in every wave; the allocator's
    // warm-up and a worker thread started late (its stack and arena) are
    // steps in some waves, and a loaded host spreads them over more waves
    // (with a build beside the test, 15 waves grew 4 to 224 KiB each, half
    // of them over 80, before a plateau). So the wave at the lower quartile
    // of growth is held to less than a kept profile per VM, and the whole
    // to a few MiB.
    let mut growth: Vec<u64> = footprints
        .windows(2)
        .skip(1)
        .map(|w| w[1].1.saturating_sub(w[0].1))
        .collect();
    growth.sort_unstable();
    let quartile = growth[growth.len() / 4];
    assert!(
        quartile <= WAVE_KIB_PER_VM * VMS_PER_WAVE as u64,
        "anonymous memory grew {quartile} KiB or more in three waves of four of {VMS_PER_WAVE} VMs: {footprints:?}"
    );
    let (_, last_rss) = footprints[WAVES - 1];
    assert!(
        last_rss <= warm_rss + 4096,
        "anonymous memory grew {} KiB after the first wave: {footprints:?}",
        last_rss.saturating_sub(warm_rss)
    );
}
