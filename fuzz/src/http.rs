//! The exporter's HTTP request path: any bytes a client may send on one
//! connection, through the real hyper connection and the exporter's
//! answers (`bootscope::exporter_http::answer_bytes`, an in-memory stream).

use std::sync::Arc;
use std::time::Duration;

use bootscope::exporter_http::{answer_bytes, Limits, INDEX, TEXT_TYPE};

/// The exposition the fuzzed server serves.
const EXPOSITION: &str = "# HELP bootscope_exporter_vms VMs followed now (running).\n\
# TYPE bootscope_exporter_vms gauge\n\
bootscope_exporter_vms 2\n\
# HELP bootscope_vm_up Whether the VMM runs.\n\
# TYPE bootscope_vm_up gauge\n\
bootscope_vm_up{pid=\"4242\",comm=\"qemu-system-x86\",vm=\"guest\"} 1\n";

/// Statuses the server may give a first request: the exporter's own (200,
/// 404, 405) and hyper's refusals of a request it cannot read.
const STATUSES: &[u16] = &[200, 400, 404, 405, 408, 413, 414, 431, 501, 505];

/// Any bytes as what one client sends on a connection before closing its
/// side. The server closes the connection in time; every byte it sends
/// belongs to answers (at most one per request that could fit in the
/// input); a whole request head (as httparse reads it) gets an answer; the
/// first answer has a known status, and when it is the exporter's own, the
/// Prometheus content type, a length that matches its body, and the status
/// and body (the exposition, the index page) the first request asks for.
pub fn request(data: &[u8]) {
    let limits = Limits {
        // An input that leaves the connection open is a hang: found
        // quickly.
        header_read_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    // The server closes at once; the margin is for a loaded machine (and
    // AFL++ reports a run past 2 s as a hang anyway).
    let within = limits.header_read_timeout + Duration::from_secs(10);
    let out = answer_bytes(data, limits, Arc::new(|| EXPOSITION.to_string()), within)
        .expect("the server closes the connection once the client closed its side");
    // The shortest request ("GET / HTTP/1.0\n\n") is 16 bytes.
    let most = (data.len() / 16 + 1) * (EXPOSITION.len() + 1024);
    assert!(
        out.len() <= most,
        "{} bytes answered to {}",
        out.len(),
        data.len()
    );
    if out.is_empty() {
        return;
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(&out) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("an answer that is not HTTP ({other:?}): {:?}", head(&out)),
    };
    let status = response.code.expect("a status");
    assert!(
        STATUSES.contains(&status),
        "status {status}: {:?}",
        head(&out)
    );
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let length: Option<usize> = header("content-length").map(|v| v.parse().expect("a length"));
    if matches!(status, 200 | 404 | 405) {
        assert_eq!(header("content-type").as_deref(), Some(TEXT_TYPE));
        let length = length.expect("a content length");
        let asked = first_request(data)
            .unwrap_or_else(|| panic!("answered {status} to an unreadable request"));
        check_own_answer(&asked, status, length, &out[head_len..]);
    }
}

/// The first `n` bytes of an answer, as text.
fn head(out: &[u8]) -> String {
    String::from_utf8_lossy(&out[..out.len().min(200)]).into_owned()
}

/// The first request's method and path, as httparse reads them (None if it
/// does not read a whole head).
fn first_request(data: &[u8]) -> Option<(String, String)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(data) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let uri: hyper::Uri = req.path?.parse().ok()?;
    Some((req.method?.to_string(), uri.path().to_string()))
}

/// The exporter's answer `status` with a body of `length` bytes (`rest`:
/// what followed the head) is the one `asked` calls for.
fn check_own_answer(asked: &(String, String), status: u16, length: usize, rest: &[u8]) {
    let (method, path) = asked;
    let get = method == "GET" || method == "HEAD";
    let expected: (u16, &str) = match (get, path.as_str()) {
        (true, "/metrics") => (200, EXPOSITION),
        (true, "/") => (200, INDEX),
        (true, _) => (404, "not found: try /metrics\n"),
        (false, _) => (405, "only GET\n"),
    };
    assert_eq!(status, expected.0, "{method} {path:?}");
    assert_eq!(length, expected.1.len(), "{method} {path:?}");
    if method != "HEAD" {
        assert!(
            rest.starts_with(expected.1.as_bytes()),
            "{method} {path:?}: {:?}",
            head(rest)
        );
    }
}
