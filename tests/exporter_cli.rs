//! `bootscope exporter` and `--push` refusing bad input, and failing a push
//! that cannot be made, without losing the results.

mod support;

use support::*;

#[test]
fn a_listen_address_that_is_not_one_is_refused() {
    expect_usage_error(
        &["exporter", "--listen", "localhost"],
        &["--listen \"localhost\" is not ADDR:PORT", "127.0.0.1:9724"],
    );
    expect_usage_error(&["exporter", "--scan-interval", "0"], &["--scan-interval"]);
    expect_usage_error(
        &["exporter", "--labels", "vcpu,cpu"],
        &["\"cpu\"", "vcpu, phase, port"],
    );
}

#[test]
fn a_busy_port_is_named() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    expect_usage_error(
        &["exporter", "--listen", &addr],
        &[&addr, "in use by another program", "choose another port"],
    );
}

#[test]
fn a_push_url_that_is_not_http_is_refused_before_any_work() {
    let base = lab_baseline();
    let base = base.as_str();
    expect_usage_error(
        &["check", "--baseline", base, "--push", "ftp://gw:9091", base],
        &["--push \"ftp://gw:9091\"", "http://"],
    );
    expect_usage_error(
        &[
            "bench",
            "--push",
            "gw:9091",
            "--",
            "run",
            "--kernel",
            "/nonexistent",
        ],
        &["--push \"gw:9091\""],
    );
}

/// An unreachable Pushgateway: exit status 1, the URL named, and the
/// report still written.
#[test]
fn an_unreachable_pushgateway_fails_the_check_but_keeps_the_report() {
    let base = lab_baseline();
    let base = base.as_str();
    let dir = scratch("push-refused");
    let report = dir.join("report.json");
    // A port just closed: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let o = bootscope_output(&[
        "check",
        "--baseline",
        base,
        "--format",
        "json",
        "-o",
        report.to_str().unwrap(),
        "--push",
        &url,
        base,
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(&format!(
            "cannot push to {url}/metrics/job/bootscope/kind/check/host/"
        )),
        "{err}"
    );
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("the report is written")).unwrap();
    assert_eq!(written["verdict"], "pass", "{written}");
    std::fs::remove_dir_all(&dir).unwrap();
}
