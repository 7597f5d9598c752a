//! The HTTP server's unit tests (`http.rs`).

use super::*;

/// Time for the server to close a connection after the client did:
/// wide, as the machine may be loaded.
const WITHIN: Duration = Duration::from_secs(10);

fn render() -> Render {
    Arc::new(|| "bootscope_exporter_vms 3\n".to_string())
}

fn ask(request: &str) -> String {
    let out = answer_bytes(request.as_bytes(), Limits::default(), render(), WITHIN).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_pages_and_their_headers() {
    let metrics = ask("GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    assert!(metrics.contains(&format!("\r\ncontent-type: {TEXT_TYPE}\r\n")));
    assert!(metrics.contains("\r\ncontent-length: 25\r\n"), "{metrics}");
    assert!(metrics.ends_with("\r\n\r\nbootscope_exporter_vms 3\n"));
    let head = ask("HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head.contains("\r\ncontent-length: 25\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head}");
    assert!(ask("GET / HTTP/1.1\r\n\r\n").ends_with(INDEX));
    let missing = ask("GET /metric HTTP/1.1\r\n\r\n");
    assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
    let post = ask("POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab");
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    assert!(post.contains("\r\nallow: GET, HEAD\r\n"), "{post}");
}

#[test]
fn pipelined_requests_are_answered_in_turn() {
    let out = ask("GET / HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
    let statuses: Vec<_> = out
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &out[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["200", "200", "404"], "{out}");
}

#[test]
fn a_head_too_long_or_unfinished_ends_the_connection() {
    let endless = format!("GET /metrics HTTP/1.1\r\nX: {}", "a".repeat(1 << 20));
    let out = ask(&endless);
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    let many: String = (0..100).map(|i| format!("X-{i}: v\r\n")).collect();
    let out = ask(&format!("GET /metrics HTTP/1.1\r\n{many}\r\n"));
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    assert!(ask("GET /metrics HTTP/1.1\r\nHost").is_empty());
    assert!(ask("GET / HTTP/2.0\r\n\r\n").starts_with("HTTP/1.1 400 "));
}

#[test]
fn a_failed_rendering_is_a_500() {
    let broken: Render = Arc::new(|| panic!("a rendering that fails"));
    let out = answer_bytes(
        b"GET /metrics HTTP/1.1\r\n\r\n",
        Limits::default(),
        broken,
        WITHIN,
    )
    .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.starts_with("HTTP/1.1 500 "), "{out}");
}

#[test]
fn scrapes_that_wait_share_the_next_exposition() {
    let made = Arc::new(AtomicUsize::new(0));
    let counted = made.clone();
    let pages = Pages::new(Arc::new(move || {
        std::thread::sleep(Duration::from_millis(50));
        format!("{}\n", counted.fetch_add(1, Ordering::SeqCst))
    }));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let bodies = rt.block_on(async {
        let mut asks = vec![tokio::spawn(pages.clone().exposition(Instant::now()))];
        // The first is being made when the others ask.
        tokio::time::sleep(Duration::from_millis(20)).await;
        asks.extend((0..19).map(|_| tokio::spawn(pages.clone().exposition(Instant::now()))));
        let mut bodies = Vec::new();
        for a in asks {
            bodies.push(a.await.unwrap().unwrap());
        }
        bodies
    });
    // The first asked alone; the 19 that waited share the second.
    assert_eq!(made.load(Ordering::SeqCst), 2);
    assert!(bodies[1..].iter().all(|b| b == &bodies[1]));
    assert_ne!(bodies[0], bodies[1]);
}

fn connections(n: usize) -> (Connections, Vec<Slot>) {
    let mut c = Connections {
        next_id: 0,
        open: BTreeMap::new(),
        cap: n,
        lowered_at: None,
    };
    let mut slots = Vec::new();
    for id in 0..n as u64 {
        let slot = Slot::default();
        slots.push(slot.clone());
        c.open.insert(id, slot);
    }
    (c, slots)
}

#[test]
fn the_oldest_connection_not_being_answered_makes_room() {
    let stats = HttpStats::default();
    let (mut c, slots) = connections(3);
    slots[0].answering.store(1, Ordering::SeqCst);
    assert!(c.evict_one(&stats));
    assert_eq!(c.open.keys().copied().collect::<Vec<_>>(), [0, 2]);
    slots[2].answering.store(1, Ordering::SeqCst);
    assert!(!c.evict_one(&stats), "every one left is being answered");
    assert_eq!(stats.evicted.load(Ordering::SeqCst), 1);
}

#[test]
fn first_the_connection_whose_client_has_not_read_longest_makes_room() {
    let stats = HttpStats::default();
    let (mut c, slots) = connections(4);
    for s in &slots[1..] {
        s.answering.store(1, Ordering::SeqCst);
    }
    slots[2].output.block();
    std::thread::sleep(Duration::from_millis(5));
    slots[1].output.block();
    assert!(c.evict_one(&stats));
    assert_eq!(c.open.keys().copied().collect::<Vec<_>>(), [0, 1, 3]);
    assert!(c.evict_one(&stats));
    assert_eq!(c.open.keys().copied().collect::<Vec<_>>(), [0, 3]);
    // Then the one not being answered.
    assert!(c.evict_one(&stats));
    assert_eq!(c.open.keys().copied().collect::<Vec<_>>(), [3]);
    assert!(!c.evict_one(&stats), "the one left is answered and sending");
}

/// A client that pipelines `n` requests for /metrics over a stream that
/// holds `room` bytes and reads nothing: how its connection ended, and
/// how many expositions were made for it.
fn pipelined_unread(n: usize, room: usize, limits: Limits) -> (Ended, usize) {
    let made = Arc::new(AtomicUsize::new(0));
    let counted = made.clone();
    let render: Render = Arc::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        format!("bootscope_exporter_vms 3\n{}\n", "#".repeat(4096))
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let ended = rt.block_on(async {
        let (mut client, server_side) = tokio::io::duplex(room);
        let conn = tokio::spawn(serve_connection(
            server_side,
            limits,
            Pages::new(render),
            Slot::default(),
        ));
        let requests = "GET /metrics HTTP/1.1\r\n\r\n".repeat(n);
        // The server stops reading once its answers wait: so does the
        // client's sending.
        let send = tokio::time::timeout(
            Duration::from_secs(30),
            client.write_all(requests.as_bytes()),
        );
        let (ended, _) = tokio::join!(conn, send);
        ended.unwrap()
    });
    (ended, made.load(Ordering::SeqCst))
}

#[test]
fn a_client_that_pipelines_and_never_reads_is_closed_after_one_answer() {
    let limits = Limits {
        write_stall_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let (ended, made) = pipelined_unread(1000, 1024, limits);
    assert_eq!(ended, Ended::Stalled);
    assert_eq!(made, 1, "expositions made for a client that read nothing");
}

#[test]
fn out_of_descriptors_a_quarter_goes_and_the_cap_holds_for_a_while() {
    let stats = HttpStats::default();
    let (mut c, _slots) = connections(20);
    assert_eq!(c.shed(&stats), 5);
    assert_eq!((c.open.len(), c.cap), (15, 15));
    let limits = Limits::default();
    c.recover(&limits);
    assert_eq!(c.cap, 15);
    c.lowered_at = Some(Instant::now() - LOWERED_FOR);
    c.recover(&limits);
    assert_eq!(c.cap, limits.max_connections);
}
