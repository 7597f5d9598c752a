//! The exporter's HTTP side (tiny_http: a small synchronous server, enough
//! for a scrape every few seconds, without an async runtime), its start-up
//! checks, and its own metrics.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::metrics::Exposition;
use super::Registry;

/// Binds `listen` (ADDR:PORT); Err is a message naming the input and what
/// to do.
pub fn bind(listen: &str) -> Result<tiny_http::Server, String> {
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
    tiny_http::Server::from_listener(listener, None)
        .map_err(|e| format!("--listen {addr}: cannot serve: {e}"))
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

/// Answers requests until `stop` is set: GET /metrics with the exposition
/// `render` gives, GET / with a pointer to it, 404 otherwise.
pub fn answer(server: &tiny_http::Server, stop: &AtomicBool, render: impl Fn() -> String) {
    let text_type = "Content-Type: text/plain; version=0.0.4; charset=utf-8";
    let header = |h: &str| h.parse::<tiny_http::Header>().ok();
    while !stop.load(Ordering::SeqCst) {
        let req = match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("exporter: {e}");
                continue;
            }
        };
        let path = req.url().split('?').next().unwrap_or("").to_string();
        let get = matches!(
            req.method(),
            tiny_http::Method::Get | tiny_http::Method::Head
        );
        let response = match (get, path.as_str()) {
            (true, "/metrics") => tiny_http::Response::from_string(render()),
            (true, "/") => {
                tiny_http::Response::from_string("bootscope exporter: metrics at /metrics\n")
            }
            (true, _) => {
                tiny_http::Response::from_string("not found: try /metrics\n").with_status_code(404)
            }
            (false, _) => tiny_http::Response::from_string("only GET\n").with_status_code(405),
        };
        let response = match header(text_type) {
            Some(h) => response.with_header(h),
            None => response,
        };
        // A client gone before its answer is its own loss.
        let _ = req.respond(response);
    }
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
pub fn write_exporter_metrics(x: &mut Exposition, r: &Registry, running: usize, start_s: f64) {
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
