//! The exporter's listening socket, its start-up checks, and its own
//! metrics (the HTTP server itself is `http.rs`, the library's
//! `exporter_http`).

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use bootscope::exporter_http::HttpStats;

use bootscope_model::prometheus::Exposition;
use bootscope_profiler::host_vms::Registry;

/// Binds `listen` (ADDR:PORT); Err is a message naming the input and what
/// to do.
pub fn bind(listen: &str) -> Result<TcpListener, String> {
    let addr: SocketAddr = listen.parse().map_err(|_| {
        format!(
            "--listen {listen:?} is not ADDR:PORT; give an IP address and a port, \
             for example 127.0.0.1:9724 or [::1]:9724"
        )
    })?;
    let listener = TcpListener::bind(addr).map_err(|e| match e.kind() {
        ErrorKind::AddrInUse => format!(
            "--listen {addr}: the port is in use by another program; choose another port \
             (ss -ltnp shows who holds it)"
        ),
        ErrorKind::PermissionDenied => format!(
            "--listen {addr}: not allowed to listen on port {} (ports below 1024 need root \
             or CAP_NET_BIND_SERVICE); choose a port above 1023",
            addr.port()
        ),
        ErrorKind::AddrNotAvailable => format!(
            "--listen {addr}: this host has no such address; give one of its own (or 0.0.0.0)"
        ),
        _ => format!("--listen {addr}: cannot listen: {e}"),
    })?;
    // A longer queue of connections not yet accepted than the 128 std
    // asks for (the kernel caps it at net.core.somaxconn): a burst of
    // connects can fill a short one before the accept loop runs again, and
    // a scraper whose connection finds it full waits a second for its
    // retry. Listening again on a listening socket only sets the queue's
    // length.
    // SAFETY: listen(2) on the socket the listener owns.
    unsafe { libc::listen(listener.as_raw_fd(), 4096) };
    Ok(listener)
}

/// Whether this process may load eBPF programs: root, or CAP_BPF with
/// CAP_PERFMON, or CAP_SYS_ADMIN (the profiler's own check).
pub fn check_can_follow() -> Result<(), String> {
    bootscope_profiler::check_privileges().map_err(|e| {
        format!(
            "the exporter follows VMs with eBPF: run it as root or with CAP_BPF and \
             CAP_PERFMON ({e})"
        )
    })
}

/// This process's CPU time (user + system) and resident memory, from
/// /proc/self/stat.
fn own_usage() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // SAFETY: sysconf takes a constant and has no other preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as f64;
    let field = |n| {
        bootscope_model::proc::stat_field(&stat, n)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    ((field(14) + field(15)) / ticks, field(24) * page)
}

/// The exporter's own families: what it follows, and what it costs.
pub fn write_exporter_metrics<S>(
    x: &mut Exposition,
    r: &Registry<S>,
    running: usize,
    start_s: f64,
) {
    let (cpu_s, rss) = own_usage();
    let gauges: [(&'static str, &'static str, &'static str, f64); 8] = [
        (
            "bootscope_exporter_vms",
            "gauge",
            "VMs followed now (running).",
            running as f64,
        ),
        (
            "bootscope_exporter_vms_followed_total",
            "counter",
            "VMs the exporter started following.",
            r.followed_total as f64,
        ),
        (
            "bootscope_exporter_vms_ended_total",
            "counter",
            "Followed VMs that ended.",
            r.ended_total as f64,
        ),
        (
            "bootscope_exporter_follow_errors_total",
            "counter",
            "VMMs found that the collectors could not follow.",
            r.follow_errors_total as f64,
        ),
        (
            "bootscope_exporter_scan_seconds_total",
            "counter",
            "Time spent looking for VMMs in /proc.",
            r.scan_seconds_total,
        ),
        (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time of the exporter in seconds.",
            cpu_s,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the exporter in bytes.",
            rss,
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the exporter since the Unix epoch in seconds.",
            start_s,
        ),
    ];
    for (name, kind, help, v) in gauges {
        x.family(name, kind, help);
        x.sample(name, "", &[], v);
    }
}

/// Descriptors open in this process (None when they cannot be counted,
/// as when there are none left to open the directory with).
fn open_fds() -> Option<f64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
}

/// The soft limit on this process's descriptors.
fn max_fds() -> Option<f64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into `lim`, which it may.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim.rlim_cur as f64)
}

/// The HTTP server's connections and the process's descriptors.
pub fn write_server_metrics(x: &mut Exposition, s: &HttpStats) {
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed) as f64;
    let families: [(&'static str, &'static str, &'static str, Option<f64>); 8] = [
        (
            "bootscope_exporter_http_connections",
            "gauge",
            "HTTP connections open now.",
            Some(get(&s.open)),
        ),
        (
            "bootscope_exporter_http_connections_accepted_total",
            "counter",
            "HTTP connections accepted.",
            Some(get(&s.accepted)),
        ),
        (
            "bootscope_exporter_http_connections_evicted_total",
            "counter",
            "HTTP connections closed before their client was done, to make room for newer ones or for descriptors.",
            Some(get(&s.evicted)),
        ),
        (
            "bootscope_exporter_http_connections_refused_total",
            "counter",
            "HTTP connections closed at once because every open one was being answered.",
            Some(get(&s.refused)),
        ),
        (
            "bootscope_exporter_http_connections_stalled_total",
            "counter",
            "HTTP connections closed because their client did not read its answer.",
            Some(get(&s.stalled)),
        ),
        (
            "bootscope_exporter_http_accept_errors_total",
            "counter",
            "Failed accepts of HTTP connections (out of descriptors or memory, aborted).",
            Some(get(&s.accept_errors)),
        ),
        (
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            open_fds(),
        ),
        (
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max_fds(),
        ),
    ];
    for (name, kind, help, v) in families {
        if let Some(v) = v {
            x.family(name, kind, help);
            x.sample(name, "", &[], v);
        }
    }
}
