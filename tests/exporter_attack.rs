//! The exporter's HTTP server against hostile local clients: thousands of
//! held connections (`GET / HTTP/2.0`, idle ones, a stream of new ones),
//! clients that dribble their request a byte at a time, header lines
//! without an end of many MB, clients that pipeline requests and never
//! read, and a process out of file descriptors. Every scrape of `/metrics`
//! is answered through all of it, the exporter's descriptors and memory
//! stay bounded, and it accepts connections after the attack.
//! (docs/export.md, "Limits".)

mod support;

use support::*;

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest a scrape may take before it counts as failed: a hang, not
/// a slow answer. The tests count scrapes that fail (reset, refused, not
/// answered), with and without an attack; how long they take is
/// measured by scripts/bench-exporter-attack (docs/benchmarks.md), not
/// bounded here, so that a busy machine fails no test.
const SCRAPE_WITHIN: Duration = Duration::from_secs(10);

/// The exporter, killed when the test ends, however it ends.
struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    fn start(dir: &Path) -> Exporter {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = std::fs::File::create(dir.join("exporter.log")).unwrap();
        let child = bootscope()
            .args(["exporter", "--listen", &addr.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut e = Exporter { child, addr };
        let until = Instant::now() + Duration::from_secs(30);
        while scrape(addr, Duration::from_secs(5)).is_err() {
            assert!(
                e.child.try_wait().unwrap().is_none(),
                "the exporter ended: see {}",
                dir.join("exporter.log").display()
            );
            assert!(Instant::now() < until, "the exporter never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        e
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn still_runs(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// One `GET path` on a new connection: the body of a 200 answer within
/// `within`, or what went wrong.
fn get(addr: SocketAddr, path: &str, within: Duration) -> Result<String, String> {
    let began = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, within).map_err(|e| format!("connect: {e}"))?;
    let left = || {
        within
            .checked_sub(began.elapsed())
            .filter(|d| !d.is_zero())
            .ok_or("timed out")
    };
    s.set_write_timeout(Some(left()?)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        s.set_read_timeout(Some(left()?)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("receive after {} bytes: {e}", out.len())),
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(format!("no answer: {text:?}"));
    };
    if !head.starts_with("HTTP/1.1 200 ") {
        return Err(format!("answered {head:?}"));
    }
    Ok(body.to_string())
}

/// A scrape of /metrics: its time, or what went wrong.
fn scrape(addr: SocketAddr, within: Duration) -> Result<Duration, String> {
    let began = Instant::now();
    let body = get(addr, "/metrics", within)?;
    if !body.contains("\nbootscope_exporter_vms ") {
        return Err(format!("not the exposition: {body:?}"));
    }
    Ok(began.elapsed())
}

/// The value of an unlabelled sample in an exposition.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Lets this process hold `n` descriptors.
fn allow_descriptors(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `lim`.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = lim.rlim_cur.max(n);
    lim.rlim_max = lim.rlim_max.max(n);
    // SAFETY: setrlimit reads `lim`; raising the hard limit needs root,
    // which these tests have.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// Sets the descriptor limit (the soft one: the hard one stays) of
/// process `pid`.
fn limit_descriptors_of(pid: u32, n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let pid = pid as libc::pid_t;
    // SAFETY: prlimit writes the old limit into `lim` and sets none.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut lim) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    lim.rlim_cur = n.min(lim.rlim_max);
    // SAFETY: prlimit reads `lim` and writes nothing (no old limit asked).
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// `n` connections opened, about a thousand a second, each sent `what`
/// (possibly nothing), and held.
fn hold(addr: SocketAddr, n: usize, what: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| {
            std::thread::sleep(Duration::from_millis(1));
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
            if !what.is_empty() {
                let _ = s.write_all(what);
            }
            Some(s)
        })
        .collect()
}

/// Scrapes every 100 ms until `stop`: each scrape's outcome.
fn scraper(addr: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<Vec<Result<Duration, String>>> {
    std::thread::spawn(move || {
        let mut outcomes = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            outcomes.push(scrape(addr, SCRAPE_WITHIN));
            std::thread::sleep(Duration::from_millis(100));
        }
        outcomes
    })
}

/// Most descriptors and resident memory of `pid`, sampled every 50 ms
/// until `stop`.
fn watch(pid: u32, stop: Arc<AtomicBool>) -> JoinHandle<(usize, u64)> {
    std::thread::spawn(move || {
        let (mut fds, mut rss) = (0, 0);
        while !stop.load(Ordering::SeqCst) {
            fds = fds.max(open_fds(pid));
            rss = rss.max(rss_bytes(pid));
            std::thread::sleep(Duration::from_millis(50));
        }
        (fds, rss)
    })
}

/// A request head sent one byte every 10 ms per connection, over `n`
/// connections, until `stop`: how many the server had not closed by then
/// (a write failed on those it closed).
fn dribblers(addr: SocketAddr, n: usize, stop: Arc<AtomicBool>) -> JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut conns: Vec<(TcpStream, bool)> =
            hold(addr, n, b"").into_iter().map(|c| (c, true)).collect();
        for (c, _) in &conns {
            c.set_nonblocking(true).unwrap();
        }
        let head = b"GET /metrics HTTP/1.1\r\nX-Slow: ";
        let mut i = 0;
        while !stop.load(Ordering::SeqCst) {
            for (c, open) in conns.iter_mut().filter(|(_, open)| *open) {
                let byte = [*head.get(i).unwrap_or(&b'a')];
                if let Err(e) = c.write(&byte) {
                    *open = e.kind() == ErrorKind::WouldBlock;
                }
            }
            i += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        conns.iter().filter(|(_, open)| *open).count()
    })
}

/// One header line without an end, 1 MiB at a time, up to 64 MiB: the
/// bytes sent before the server cut the connection (Err if it neither
/// read nor closed for 10 s).
fn endless_header(addr: SocketAddr) -> JoinHandle<Result<usize, String>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut sent = 0;
        let chunk = vec![b'a'; 1 << 20];
        s.write_all(b"GET /metrics HTTP/1.1\r\nX-Endless: ")
            .map_err(|e| e.to_string())?;
        while sent < 64 << 20 {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(format!("stalled after {sent} bytes: {e}"))
                }
                Err(_) => return Ok(sent),
            }
        }
        Err(format!("{sent} bytes of one header line taken"))
    })
}

/// New idle connections, one every 5 ms, the last 1,000 held, until
/// `stop`.
fn stream_of_new(addr: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut held = VecDeque::new();
        let mut opened = 0;
        while !stop.load(Ordering::SeqCst) {
            if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                held.push_back(s);
                opened += 1;
            }
            if held.len() > 1000 {
                held.pop_front();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        opened
    })
}

/// Whether a held `GET / HTTP/2.0` connection was answered 400 (hyper's
/// answer to a version it does not speak) and closed by the server.
fn refused_http2(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).is_ok() && out.starts_with(b"HTTP/1.1 400 ")
}

fn check_scrapes(outcomes: &[Result<Duration, String>], log: &Path) {
    let failed: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} scrapes failed during the attack: {failed:?} (log: {})",
        failed.len(),
        outcomes.len(),
        log.display()
    );
    let slowest = outcomes.iter().flatten().max().unwrap();
    eprintln!(
        "{} scrapes during the attack, the slowest {slowest:?}",
        outcomes.len()
    );
}

#[test]
fn hostile_clients_do_not_keep_scrapes_out() {
    require_bpf!();
    allow_descriptors(16384);
    let dir = scratch("exporter-attack");
    let mut exporter = Exporter::start(&dir);
    let (addr, pid) = (exporter.addr, exporter.pid());
    let (fds_before, rss_before) = (open_fds(pid), rss_bytes(pid));
    let stop = Arc::new(AtomicBool::new(false));
    let scrapes = scraper(addr, stop.clone());
    let watched = watch(pid, stop.clone());
    let endless: Vec<_> = (0..4).map(|_| endless_header(addr)).collect();
    let slow = dribblers(addr, 200, stop.clone());
    let stream = stream_of_new(addr, stop.clone());
    let mut http2 = hold(addr, 3000, b"GET / HTTP/2.0\r\n\r\n");
    let idle = hold(addr, 1000, b"");
    assert_eq!((http2.len(), idle.len()), (3000, 1000), "connections held");
    // Past the head timeout: the dribblers are cut, the stream goes on.
    std::thread::sleep(Duration::from_secs(8));
    stop.store(true, Ordering::SeqCst);
    let outcomes = scrapes.join().unwrap();
    let (fds_most, rss_most) = watched.join().unwrap();
    let slow_open = slow.join().unwrap();
    let opened = stream.join().unwrap();
    let log = dir.join("exporter.log");
    check_scrapes(&outcomes, &log);
    // Scrapes throughout the attack (how many depends on how fast they
    // are answered).
    assert!(outcomes.len() >= 10, "{} scrapes", outcomes.len());
    assert_eq!(slow_open, 0, "dribbling clients still connected");
    for e in endless {
        let sent = e
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("endless header: {e}"));
        eprintln!("an endless header line was cut after {sent} bytes sent");
    }
    let refused = http2
        .iter_mut()
        .take(100)
        .map(refused_http2)
        .filter(|r| *r)
        .count();
    assert_eq!(refused, 100, "HTTP/2.0 requests answered 400 and closed");
    eprintln!(
        "exporter: descriptors {fds_before} -> at most {fds_most}, \
         resident memory {} -> at most {} MiB; {opened} connections streamed in",
        rss_before >> 20,
        rss_most >> 20
    );
    // At most 256 connections, each a socket (and a few the scan of /proc
    // and the exposition open for a moment).
    assert!(fds_most <= fds_before + 256 + 32, "{fds_most} descriptors");
    assert!(
        rss_most <= rss_before + (64 << 20),
        "{rss_most} bytes resident"
    );
    drop((http2, idle));
    assert!(exporter.still_runs());
    // It still accepts: a hundred new connections, each answered.
    for i in 0..100 {
        scrape(addr, SCRAPE_WITHIN).unwrap_or_else(|e| panic!("scrape {i} after: {e}"));
    }
    let text = get(addr, "/metrics", SCRAPE_WITHIN).unwrap();
    assert!(sample(&text, "bootscope_exporter_http_connections_accepted_total") >= 4000.0);
    assert!(sample(&text, "bootscope_exporter_http_connections_evicted_total") >= 1000.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn running_out_of_descriptors_does_not_end_the_accept_loop() {
    require_bpf!();
    allow_descriptors(4096);
    let dir = scratch("exporter-emfile");
    let mut exporter = Exporter::start(&dir);
    let (addr, pid) = (exporter.addr, exporter.pid());
    // Room for about 20 connections more than it holds now (the limit of
    // connections it set itself at start is 256).
    let limit = open_fds(pid) as u64 + 24;
    limit_descriptors_of(pid, limit);
    let mut held = hold(addr, 300, b"");
    std::thread::sleep(Duration::from_millis(500));
    let stop = Arc::new(AtomicBool::new(false));
    let scrapes = scraper(addr, stop.clone());
    // More connections keep coming while it has none to spare.
    let stream = stream_of_new(addr, stop.clone());
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::SeqCst);
    let outcomes = scrapes.join().unwrap();
    stream.join().unwrap();
    let log = dir.join("exporter.log");
    check_scrapes(&outcomes, &log);
    assert!(open_fds(pid) as u64 <= limit);
    let text = get(addr, "/metrics", SCRAPE_WITHIN).unwrap();
    let errors = sample(&text, "bootscope_exporter_http_accept_errors_total");
    assert!(errors >= 1.0, "no accept failed: the limit was not reached");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("cannot accept a connection: ") && said.contains("Too many open files"),
        "{said}"
    );
    // Recovered: with the attackers gone and the limit as it was, new
    // connections are accepted and answered.
    held.clear();
    limit_descriptors_of(pid, 1024);
    for i in 0..50 {
        scrape(addr, SCRAPE_WITHIN).unwrap_or_else(|e| panic!("scrape {i} after: {e}"));
    }
    assert!(exporter.still_runs());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A connection made with the smallest receive buffer the kernel allows
/// (`SO_RCVBUF` 1, set before connecting, so the window stays small).
fn tiny_receiver(addr: SocketAddr) -> Option<TcpStream> {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(v4) = addr else {
        return None;
    };
    // SAFETY: a new socket, owned here until it becomes the TcpStream; the
    // option and the address are read from locals of the sizes given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::connect(fd, (&sa as *const libc::sockaddr_in).cast(), len) != 0 {
            libc::close(fd);
            return None;
        }
        let s = TcpStream::from_raw_fd(fd);
        s.set_nonblocking(true).ok()?;
        Some(s)
    }
}

/// One client holding `n` connections with a tiny receive buffer, each
/// sent as many pipelined `GET /metrics` as it takes, every 10 ms, and
/// never read; a connection the server closes is opened again. Until
/// `stop`: how many connections it opened.
fn pipeliner(addr: SocketAddr, n: usize, stop: Arc<AtomicBool>) -> JoinHandle<usize> {
    std::thread::spawn(move || {
        let requests = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
        let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        let mut opened = 0;
        while !stop.load(Ordering::SeqCst) {
            for c in &mut conns {
                if c.is_none() {
                    *c = tiny_receiver(addr);
                    opened += usize::from(c.is_some());
                }
                let Some(s) = c else { continue };
                match s.write(requests.as_bytes()) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => *c = None,
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        opened
    })
}

/// Scrapes every 100 ms for `phase`: each scrape's outcome.
fn scrapes_for(addr: SocketAddr, phase: Duration) -> Vec<Result<Duration, String>> {
    let until = Instant::now() + phase;
    let mut outcomes = Vec::new();
    while Instant::now() < until {
        outcomes.push(scrape(addr, SCRAPE_WITHIN));
        std::thread::sleep(Duration::from_millis(100));
    }
    outcomes
}

#[test]
fn clients_that_pipeline_and_never_read_do_not_keep_scrapes_out() {
    require_bpf!();
    allow_descriptors(4096);
    let dir = scratch("exporter-pipeline");
    let mut exporter = Exporter::start(&dir);
    let addr = exporter.addr;
    let log = dir.join("exporter.log");
    // The same scrapes, without and with the attack.
    let quiet = scrapes_for(addr, Duration::from_secs(3));
    let stop = Arc::new(AtomicBool::new(false));
    // Three clients, more connections together than the exporter keeps
    // open (256).
    let clients: Vec<_> = (0..3).map(|_| pipeliner(addr, 100, stop.clone())).collect();
    std::thread::sleep(Duration::from_secs(1));
    // Past the write stall timeout (5 s): the first connections are closed
    // for not reading, and opened again.
    let attacked = scrapes_for(addr, Duration::from_secs(8));
    stop.store(true, Ordering::SeqCst);
    let opened: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    let failed = |o: &[Result<Duration, String>]| o.iter().filter(|r| r.is_err()).count();
    eprintln!(
        "scrapes failed: {} of {} quiet, {} of {} during the attack ({opened} connections \
         pipelining without reading)",
        failed(&quiet),
        quiet.len(),
        failed(&attacked),
        attacked.len()
    );
    check_scrapes(&quiet, &log);
    check_scrapes(&attacked, &log);
    assert!(
        opened > 256,
        "{opened} connections: the attack did not fill the server"
    );
    assert!(exporter.still_runs());
    let text = get(addr, "/metrics", SCRAPE_WITHIN).unwrap();
    let stalled = sample(&text, "bootscope_exporter_http_connections_stalled_total");
    let evicted = sample(&text, "bootscope_exporter_http_connections_evicted_total");
    let refused = sample(&text, "bootscope_exporter_http_connections_refused_total");
    // Every connection the clients opened again was one the exporter
    // closed: to make room (whose client read least), for not reading, or
    // at once while every open one was being answered (on a loaded
    // machine the kernel completes more connections than the exporter
    // gets to answer).
    assert!(
        stalled + evicted + refused + 300.0 >= opened as f64,
        "{opened} opened, {evicted} evicted, {stalled} stalled, {refused} refused"
    );
    eprintln!(
        "closed: {evicted} to make room, {stalled} for not reading, {refused} refused at once"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
