//! The exporter's HTTP server: hyper's HTTP/1 connections on a tokio
//! runtime of one thread, with a bound on everything a client can hold.
//!
//! - the request head: at most [`Limits::max_head_bytes`] (a longer head,
//!   or a header line without its end, is answered 431 and the connection
//!   closed), read within [`Limits::header_read_timeout`] of the
//!   connection's start (a client that dribbles its head is dropped);
//! - a connection: at most [`Limits::max_connection_age`] in all (then it
//!   is closed once its current answer is sent, keep-alive or not);
//! - output: a connection whose client does not read what it is sent
//!   (its output has waited [`Limits::write_stall_timeout`] without going
//!   out) is closed; an answer is not begun while the previous one still
//!   waits to go out, so a client that pipelines requests and reads
//!   nothing has one answer waiting and one request waiting for it, no
//!   more (`http_output.rs`);
//! - connections at once: at most [`Limits::max_connections`]. When that
//!   many are open, a new one takes the place of the one whose output has
//!   waited longest for its client to read, or else of the oldest that is
//!   not being answered (still sending its head, or idle between
//!   requests), so clients that hold connections without asking or without
//!   reading cannot keep a scraper out; only when every open connection is
//!   being answered and its answer going out is the new one closed at
//!   once;
//! - descriptors: an accept that fails for want of them (EMFILE, ENFILE)
//!   or of memory closes the oldest connections not being answered, holds
//!   the number of connections below where it failed for a while, and
//!   tries again (after a pause when there was nothing to close); no error
//!   ends the accept loop;
//! - work: scrapes that arrive while the exposition is being made share
//!   the next one made after they arrived (one at a time, off the
//!   runtime's thread), so a flood of scrapes costs one rendering at a
//!   time, not one each.
//!
//! The collection runs on the exporter's own threads; this runtime only
//! serves. [`answer_bytes`] runs one connection over an in-memory stream
//! with the same code, for the fuzz target.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

#[path = "http_output.rs"]
mod output;
use output::{Output, Watched};

/// The content type of every answer: the Prometheus text format.
pub const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The body of `GET /`.
pub const INDEX: &str = "bootscope exporter: metrics at /metrics\n";

/// What one client may hold (the module's documentation says how each is
/// enforced).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Time from a connection's start to the end of its first request's
    /// head (hyper's `header_read_timeout`).
    pub header_read_timeout: Duration,
    /// A connection's whole life.
    pub max_connection_age: Duration,
    /// Once a connection is that old: time left to finish the answer under
    /// way before it is dropped.
    pub shutdown_grace: Duration,
    /// Bytes of a request head (hyper's `max_buf_size`; at least 8192).
    pub max_head_bytes: usize,
    /// Header lines in a request head.
    pub max_headers: usize,
    /// Time an answer may wait for its client to read (no byte of it going
    /// out) before the connection is closed.
    pub write_stall_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(5),
            max_connection_age: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            write_stall_timeout: Duration::from_secs(5),
        }
    }
}

impl Limits {
    /// These limits, with at most half of the descriptors `RLIMIT_NOFILE`
    /// allows this process spent on connections (the rest are the eBPF
    /// programs', the `/proc` reads' and the listener's).
    pub fn within_descriptor_limit(mut self) -> Self {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the limit into `lim`, which it may.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            let half = usize::try_from(lim.rlim_cur / 2).unwrap_or(usize::MAX);
            self.max_connections = self.max_connections.min(half.max(1));
        }
        self
    }
}

/// What the server did, for the exporter's own metrics.
#[derive(Default, Debug)]
pub struct HttpStats {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections closed to make room for a new one (or for descriptors).
    pub evicted: AtomicU64,
    /// Connections closed at once: every open one was being answered.
    pub refused: AtomicU64,
    /// Connections closed because their client did not read their answer.
    pub stalled: AtomicU64,
    /// Accepts that failed (EMFILE, ENFILE, ENOMEM, ...).
    pub accept_errors: AtomicU64,
}

/// Makes the exposition (called on a thread of its own, one call at a
/// time).
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// The pages served, and the last exposition made.
struct Pages {
    render: Render,
    /// When the last exposition began, and what it was.
    latest: tokio::sync::Mutex<Option<(Instant, Bytes)>>,
}

impl Pages {
    fn new(render: Render) -> Arc<Self> {
        Arc::new(Self {
            render,
            latest: tokio::sync::Mutex::new(None),
        })
    }

    /// An exposition begun no earlier than `asked`: the one under way or
    /// just made if it qualifies, else a new one. None if rendering
    /// failed (a panic, already reported on standard error).
    async fn exposition(self: Arc<Self>, asked: Instant) -> Option<Bytes> {
        // In a task of its own: a client that goes away while it waits does
        // not leave the next ones to render again.
        let made = tokio::spawn(async move {
            let mut latest = self.latest.lock().await;
            if let Some((began, body)) = latest.as_ref() {
                if *began >= asked {
                    return Some(body.clone());
                }
            }
            let began = Instant::now();
            let render = self.render.clone();
            let text = tokio::task::spawn_blocking(move || render()).await.ok()?;
            let body = Bytes::from(text);
            *latest = Some((began, body.clone()));
            Some(body)
        });
        made.await.ok().flatten()
    }
}

/// Counts an answer under way on its connection while it lives (from the
/// request's head to the end of its body): such a connection is not closed
/// to make room.
struct Answering(Arc<AtomicUsize>);

impl Answering {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A whole answer body, sent in one frame.
pub struct Page {
    data: Option<Bytes>,
    _answering: Option<Answering>,
}

impl Body for Page {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

fn page(status: StatusCode, body: Bytes, answering: Answering) -> Response<Page> {
    let mut r = Response::new(Page {
        data: Some(body).filter(|b| !b.is_empty()),
        _answering: Some(answering),
    });
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_TYPE));
    r
}

/// GET (or HEAD) /metrics: the exposition; GET / : a pointer to it; 404
/// for any other path, 405 for any other method.
async fn answer(
    req: Request<Incoming>,
    pages: Arc<Pages>,
    answering: Answering,
    output: Arc<Output>,
) -> Result<Response<Page>, Infallible> {
    // A pipelined request waits for the previous answer to go out.
    output.drained().await;
    let asked = Instant::now();
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    let text = |s: &'static str| Bytes::from_static(s.as_bytes());
    let response = match (get, req.uri().path()) {
        (true, "/metrics") => {
            drop(req);
            match pages.exposition(asked).await {
                Some(body) => page(StatusCode::OK, body, answering),
                None => page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    text("the exposition could not be made: see the exporter's log\n"),
                    answering,
                ),
            }
        }
        (true, "/") => page(StatusCode::OK, text(INDEX), answering),
        (true, _) => page(
            StatusCode::NOT_FOUND,
            text("not found: try /metrics\n"),
            answering,
        ),
        (false, _) => {
            let mut r = page(
                StatusCode::METHOD_NOT_ALLOWED,
                text("only GET\n"),
                answering,
            );
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
    };
    Ok(response)
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The client was done, a limit of age ended it, or it was closed to
    /// make room.
    Served,
    /// Its client did not read its answer.
    Stalled,
}

/// Serves one connection on `io` until the client is done with it, a limit
/// ends it, or `close` is notified (dropped at once: it was not being
/// answered, or its output waited).
async fn serve_connection<I>(io: I, limits: Limits, pages: Arc<Pages>, slot: Slot) -> Ended
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Slot {
        answering,
        close,
        output,
    } = slot;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_head_bytes.max(8192))
        .max_header_size(limits.max_head_bytes)
        .max_headers(limits.max_headers)
        .keep_alive(true)
        // A client that closes its sending side after its request still
        // gets the answer.
        .half_close(true);
    let served = output.clone();
    let service = hyper::service::service_fn(move |req| {
        answer(
            req,
            pages.clone(),
            Answering::new(&answering),
            served.clone(),
        )
    });
    let io = Watched {
        io,
        output: output.clone(),
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return Ended::Served,
        () = close.notified() => return Ended::Served,
        () = output.stalled(limits.write_stall_timeout) => return Ended::Stalled,
        () = tokio::time::sleep(limits.max_connection_age) => {}
    }
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        _ = tokio::time::timeout(limits.shutdown_grace, conn) => Ended::Served,
        () = output.stalled(limits.write_stall_timeout) => Ended::Stalled,
    }
}

/// One open connection, as the accept loop sees it.
#[derive(Clone, Default)]
struct Slot {
    /// Answers under way on it.
    answering: Arc<AtomicUsize>,
    close: Arc<Notify>,
    /// Whether its output waits for the client to read.
    output: Arc<Output>,
}

/// The open connections, oldest first, and how many may be open.
struct Connections {
    next_id: u64,
    open: BTreeMap<u64, Slot>,
    /// At most `Limits::max_connections`; lower for a while after running
    /// out of descriptors.
    cap: usize,
    lowered_at: Option<Instant>,
}

/// How long the number of connections stays lowered after running out of
/// descriptors.
const LOWERED_FOR: Duration = Duration::from_secs(60);

impl Connections {
    /// Closes the connection whose output has waited longest for its
    /// client to read, or else the oldest one not being answered; false if
    /// every one is being answered and its answer going out.
    fn evict_one(&mut self, stats: &HttpStats) -> bool {
        let waiting = self
            .open
            .iter()
            .filter_map(|(&id, s)| Some((s.output.waiting_for()?, id)))
            .max()
            .map(|(_, id)| id);
        let oldest = || {
            self.open
                .iter()
                .find(|(_, s)| s.answering.load(Ordering::SeqCst) == 0)
                .map(|(&id, _)| id)
        };
        let Some(id) = waiting.or_else(oldest) else {
            return false;
        };
        if let Some(slot) = self.open.remove(&id) {
            slot.close.notify_one();
        }
        stats.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Out of descriptors or memory: closes a quarter of the connections
    /// (at least one) among those not being answered, and holds the number
    /// open there for a while. How many were closed.
    fn shed(&mut self, stats: &HttpStats) -> usize {
        let n = self.open.len().div_ceil(4).max(1);
        let closed = (0..n).take_while(|_| self.evict_one(stats)).count();
        self.cap = self.open.len().max(1);
        self.lowered_at = Some(Instant::now());
        closed
    }

    /// The number allowed back to `limits` once lowered long enough.
    fn recover(&mut self, limits: &Limits) {
        if self.lowered_at.is_some_and(|t| t.elapsed() >= LOWERED_FOR) {
            self.cap = limits.max_connections;
            self.lowered_at = None;
        }
    }
}

/// What the accept loop shares with its connections.
struct Server {
    limits: Limits,
    pages: Arc<Pages>,
    stats: Arc<HttpStats>,
    connections: Mutex<Connections>,
}

impl Server {
    fn connections(&self) -> MutexGuard<'_, Connections> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves `stream` in a task of its own, making room for it if need be.
    fn admit(self: &Arc<Self>, stream: TcpStream) {
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        // Small answers: no waiting for more to fill a segment.
        let _ = stream.set_nodelay(true);
        let (id, slot) = {
            let mut c = self.connections();
            c.recover(&self.limits);
            if c.open.len() >= c.cap && !c.evict_one(&self.stats) {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let id = c.next_id;
            c.next_id += 1;
            let slot = Slot {
                output: Arc::new(Output::of_socket(stream.as_raw_fd())),
                ..Slot::default()
            };
            c.open.insert(id, slot.clone());
            self.stats
                .open
                .store(c.open.len() as u64, Ordering::Relaxed);
            (id, slot)
        };
        let me = self.clone();
        tokio::spawn(async move {
            let ended = serve_connection(stream, me.limits, me.pages.clone(), slot).await;
            if ended == Ended::Stalled {
                me.stats.stalled.fetch_add(1, Ordering::Relaxed);
            }
            let mut c = me.connections();
            c.open.remove(&id);
            me.stats.open.store(c.open.len() as u64, Ordering::Relaxed);
        });
    }
}

/// Whether a failed accept is for want of descriptors or memory.
fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Says what went wrong at most every 10 s, with how often it did since.
#[derive(Default)]
struct Complaints {
    last: Option<Instant>,
    since: u64,
}

impl Complaints {
    fn complain(&mut self, what: impl FnOnce() -> String) {
        self.since += 1;
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        let more = match self.since - 1 {
            0 => String::new(),
            n => format!(" ({n} more failures since the last report)"),
        };
        eprintln!("exporter: {}{more}", what());
        self.last = Some(Instant::now());
        self.since = 0;
    }
}

/// Accepts connections until `stop` is set. No accept error ends it.
async fn accept_loop(listener: TcpListener, server: Arc<Server>, stop: Arc<AtomicBool>) {
    const PAUSE_MIN: Duration = Duration::from_millis(10);
    const PAUSE_MAX: Duration = Duration::from_secs(1);
    let mut pause = PAUSE_MIN;
    let mut complaints = Complaints::default();
    let mut stop_check = tokio::time::interval(Duration::from_millis(100));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop_check.tick() => {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
        };
        let e = match accepted {
            Ok((stream, _)) => {
                pause = PAUSE_MIN;
                server.admit(stream);
                // Its task reads what the client sent (a whole request head
                // marks it as being answered) and the closed ones drop
                // their sockets before the next accept can evict it.
                tokio::task::yield_now().await;
                continue;
            }
            Err(e) => e,
        };
        server.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
        if matches!(
            e.raw_os_error(),
            Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO | libc::EPERM)
        ) {
            // This connection's own trouble: the next one may be fine.
            continue;
        }
        let closed = if out_of_resources(&e) {
            let mut c = server.connections();
            let closed = c.shed(&server.stats);
            let cap = c.cap;
            drop(c);
            complaints.complain(|| {
                format!(
                    "cannot accept a connection: {e}; closed {closed} idle connections, \
                     serving at most {cap} for {} s",
                    LOWERED_FOR.as_secs()
                )
            });
            closed
        } else {
            complaints.complain(|| format!("cannot accept a connection: {e}; trying again"));
            0
        };
        if closed > 0 {
            // Let the closed connections' tasks drop their sockets first.
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(PAUSE_MAX);
        }
    }
}

/// Serves `listener` (bound, blocking or not) until `stop` is set: GET and
/// HEAD of /metrics with what `render` makes, of / with a pointer to it,
/// 404 for other paths, 405 for other methods. Err if the runtime or the
/// listener cannot be set up.
pub fn serve(
    listener: std::net::TcpListener,
    limits: Limits,
    stats: Arc<HttpStats>,
    stop: Arc<AtomicBool>,
    render: Render,
) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(2)
        .thread_name("bootscope-http")
        .build()?;
    listener.set_nonblocking(true)?;
    let server = Arc::new(Server {
        limits,
        pages: Pages::new(render),
        stats,
        connections: Mutex::new(Connections {
            next_id: 0,
            open: BTreeMap::new(),
            cap: limits.max_connections.max(1),
            lowered_at: None,
        }),
    });
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        accept_loop(listener, server, stop).await;
        Ok::<(), io::Error>(())
    })?;
    // A rendering under way has its thread; the answers are abandoned.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

thread_local! {
    static ONE_CONNECTION: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime of the current thread");
}

/// Serves one connection over an in-memory stream with the server's own
/// code: sends `request` and closes the sending side, and returns every
/// byte the server sent until it closed the connection. Err(TimedOut) if
/// the server has not closed it `within` that time. (The fuzz target's
/// entry point.)
pub fn answer_bytes(
    request: &[u8],
    limits: Limits,
    render: Render,
    within: Duration,
) -> io::Result<Vec<u8>> {
    ONE_CONNECTION.with(|rt| {
        rt.block_on(async {
            let (client, server_side) = tokio::io::duplex(64 * 1024);
            let conn = tokio::spawn(serve_connection(
                server_side,
                limits,
                Pages::new(render),
                Slot::default(),
            ));
            let (mut from_server, mut to_server) = tokio::io::split(client);
            let send = async {
                // The server may close before it has read it all.
                if to_server.write_all(request).await.is_ok() {
                    let _ = to_server.shutdown().await;
                }
            };
            let receive = async {
                let mut out = Vec::new();
                from_server.read_to_end(&mut out).await.map(|_| out)
            };
            let both = async { tokio::join!(send, receive).1 };
            let out = tokio::time::timeout(within, both).await;
            conn.abort();
            out.map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
        })
    })
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
