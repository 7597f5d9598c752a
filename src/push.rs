//! `bench --push URL` and `check --push URL`: the results in the
//! Prometheus text format, PUT to a Pushgateway under
//! `URL/metrics/job/bootscope/kind/{bench,check}/host/HOSTNAME` (ureq: a
//! small blocking HTTP client, no async runtime). A PUT replaces what the
//! previous push of the same kind from the same host left there.
//!
//! Credentials in the URL (`http://USER:PASSWORD@HOST:PORT`) are sent as
//! HTTP basic authentication and never printed: every message shows the
//! URL with them replaced by `***` ([`redact`]). What the server says back
//! is printed with its control characters escaped.

use std::time::Duration;

use bootscope_bench::metrics::MetricKind;
use bootscope_bench::{BenchDoc, CheckReport};
use bootscope_model::prometheus::Text;

/// A `--push` URL taken apart: `http://[USERINFO@]HOST[:PORT][/PATH]`.
struct PushUrl<'a> {
    userinfo: Option<&'a str>,
    /// `HOST[:PORT][/PATH]`.
    rest: &'a str,
}

fn split_url(url: &str) -> Option<PushUrl<'_>> {
    let after = url.strip_prefix("http://")?;
    let authority_end = after.find('/').unwrap_or(after.len());
    match after[..authority_end].rfind('@') {
        Some(at) => Some(PushUrl {
            userinfo: Some(&after[..at]),
            rest: &after[at + 1..],
        }),
        None => Some(PushUrl {
            userinfo: None,
            rest: after,
        }),
    }
}

/// `url` with its credentials (user and password) replaced by `***`, for
/// messages: everything between the scheme and the last `@` of the URL.
/// URL parsers disagree on where the authority of `http://u:pa/ss@h` ends
/// (a `/` in a password), so nothing before any `@` is ever shown.
pub fn redact(url: &str) -> String {
    // The scheme: letters, digits, `+`, `-`, `.` before `://`.
    let start = url
        .find("://")
        .filter(|&s| {
            url[..s]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        })
        .map_or(0, |s| s + 3);
    match url[start..].rfind('@') {
        Some(at) => format!("{}***@{}", &url[..start], &url[start + at + 1..]),
        None => url.to_string(),
    }
}

/// Checks a `--push` URL before any work: Err is a bad-input message
/// (which shows the URL without its credentials).
pub fn check_url(url: &str) -> Result<(), String> {
    let shown = crate::push::redact(url);
    let shown = bootscope_model::text::printable(&shown);
    let parts = split_url(url).ok_or_else(|| {
        format!(
            "--push \"{shown}\": give the Pushgateway's http:// address, for example \
             http://127.0.0.1:9091 (this bootscope pushes over plain HTTP)"
        )
    })?;
    if parts.rest.contains('@') {
        return Err(format!(
            "--push \"{shown}\": an `@` after the first `/` of the address: write a `/` or \
             `@` in the user name or password as %2F or %40"
        ));
    }
    let host_port = parts.rest.split('/').next().unwrap_or("");
    if host_port.is_empty() || url.contains(['?', '#', ' ']) || url.chars().any(char::is_control) {
        return Err(format!(
            "--push \"{shown}\": not a Pushgateway address; give http://HOST:PORT"
        ));
    }
    // The port: after the last colon not inside an IPv6 literal's brackets.
    let after_host = host_port.rfind(']').map_or(host_port, |i| &host_port[i..]);
    if let Some(colon) = after_host.find(':') {
        let port = &after_host[colon + 1..];
        if !matches!(port.parse::<u16>(), Ok(p) if p > 0)
            || !port.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(format!(
                "--push \"{shown}\": {port:?} is not a port; give a number from 1 to 65535 \
                 (the Pushgateway's is 9091)"
            ));
        }
    }
    Ok(())
}

/// Standard base64 with padding (RFC 4648 section 4), for basic
/// authentication.
fn base64(bytes: &[u8]) -> String {
    use ::base64::Engine;
    ::base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// URL-safe base64 with padding, as the Pushgateway takes label values in
/// a path (`label@base64/VALUE`).
fn base64url(bytes: &[u8]) -> String {
    use ::base64::Engine;
    ::base64::engine::general_purpose::URL_SAFE.encode(bytes)
}

/// `/NAME/VALUE`, or `/NAME@base64/...` for a value that is not plain.
fn path_label(name: &str, value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if plain {
        format!("/{name}/{value}")
    } else if value.is_empty() {
        format!("/{name}@base64/=")
    } else {
        format!("/{name}@base64/{}", base64url(value.as_bytes()))
    }
}

/// The grouping key's path for `kind` from `host`.
pub fn group_path(kind: &str, host: &str) -> String {
    format!(
        "/metrics/job/bootscope{}{}",
        path_label("kind", kind),
        path_label("host", host)
    )
}

/// A benchmark's summaries: per configuration and metric, each statistic;
/// times in seconds.
pub fn bench_text(doc: &BenchDoc) -> String {
    let mut out = Text::default();
    out.family(
        "bootscope_bench_runs",
        "gauge",
        "Measured runs of each configuration, by outcome.",
    );
    for c in &doc.configs {
        let measured: Vec<_> = c.runs.iter().filter(|r| !r.warmup).collect();
        let ok = measured.iter().filter(|r| r.ok).count() as f64;
        let failed = measured.len() as f64 - ok;
        out.sample_f64(
            "bootscope_bench_runs",
            &[("config", &c.label), ("outcome", "ok")],
            ok,
        );
        out.sample_f64(
            "bootscope_bench_runs",
            &[("config", &c.label), ("outcome", "failed")],
            failed,
        );
    }
    for (name, kind, scale, help) in [
        ("bootscope_bench_time_seconds", MetricKind::Time, 1e-9, "Boot times of the benchmark's successful measured runs, by configuration, metric and statistic."),
        ("bootscope_bench_count", MetricKind::Count, 1.0, "Event counts of the benchmark's successful measured runs, by configuration, metric and statistic."),
        ("bootscope_bench_bytes", MetricKind::Bytes, 1.0, "Host memory (RSS, PSS, USS) of the benchmark's successful measured runs, by configuration, metric and statistic."),
    ] {
        out.family(name, "gauge", help);
        for c in &doc.configs {
            for (metric, s) in c.summary.iter().filter(|(_, s)| s.kind == kind) {
                let st = &s.stats;
                for (stat, v) in [
                    ("mean", st.mean), ("median", st.median), ("min", st.min), ("max", st.max),
                    ("q1", st.q1), ("q3", st.q3), ("sd", st.sd),
                ] {
                    let l = [("config", c.label.as_str()), ("metric", metric.as_str()), ("stat", stat)];
                    out.sample_f64(name, &l, v * scale);
                }
            }
        }
    }
    out.finish()
}

/// A check's verdict and, per metric, the change and whether it failed.
pub fn check_text(report: &CheckReport) -> String {
    let mut out = Text::default();
    out.family(
        "bootscope_check_regressions",
        "gauge",
        "Metrics that regressed against the baseline (0: the check passed).",
    );
    out.sample(
        "bootscope_check_regressions",
        &[],
        &report.regressions.to_string(),
    );
    out.family(
        "bootscope_check_change_ratio",
        "gauge",
        "Change of each checked metric against the baseline, (new - base) / base.",
    );
    for r in &report.results {
        let v = r.comparison.change_pct / 100.0;
        out.sample_f64("bootscope_check_change_ratio", &[("metric", &r.metric)], v);
    }
    out.family(
        "bootscope_check_regression",
        "gauge",
        "1 where a checked metric regressed, else 0.",
    );
    for r in &report.results {
        let v = if r.status == "regression" { 1.0 } else { 0.0 };
        out.sample_f64("bootscope_check_regression", &[("metric", &r.metric)], v);
    }
    out.finish()
}

/// This host's name, for the grouping key.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// PUTs `text` to the Pushgateway at `url` under the group of `kind` from
/// this host; Err names the URL and what went wrong.
pub fn push(url: &str, kind: &str, text: &str) -> Result<String, String> {
    check_url(url)?;
    let parts =
        split_url(url).ok_or_else(|| format!("--push {}: not an http:// URL", redact(url)))?;
    let path = group_path(kind, &hostname());
    let target = format!("http://{}{path}", parts.rest.trim_end_matches('/'));
    let shown =
        bootscope_model::text::printable(&redact(&format!("{}{path}", url.trim_end_matches('/'))))
            .into_owned();
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(15)))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut request = agent
        .put(&target)
        .header("Content-Type", "text/plain; version=0.0.4");
    if let Some(userinfo) = parts.userinfo {
        request = request.header(
            "Authorization",
            format!("Basic {}", base64(percent_decode(userinfo).as_slice())),
        );
    }
    let resp = request.send(text).map_err(|e| {
        // The client's message may quote the URL: without credentials
        // (there are none in `target`) and without control characters.
        let e = bootscope_model::text::printable(&e.to_string()).into_owned();
        format!("cannot push to {shown}: {e}; is the Pushgateway running there?")
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(shown);
    }
    // At most 4 KiB of the server's answer, its control characters escaped.
    let body = resp
        .into_body()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default();
    Err(format!(
        "the Pushgateway at {shown} refused the push: {status} {}",
        bootscope_model::text::printable(body.trim())
    ))
}

/// `%XX` escapes of a URL's user information decoded (`p%40ss` is
/// `p@ss`); anything else kept as it is.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_grouping_keys() {
        assert!(check_url("http://127.0.0.1:9091").is_ok());
        assert!(check_url("http://gw.example/prefix/").is_ok());
        assert!(check_url("https://gw:9091")
            .unwrap_err()
            .contains("http://"));
        assert!(check_url("127.0.0.1:9091").is_err());
        assert!(check_url("http://").is_err());
        assert_eq!(
            group_path("bench", "ci-7.lan"),
            "/metrics/job/bootscope/kind/bench/host/ci-7.lan"
        );
        // RFC 4648 test vectors, URL-safe alphabet.
        assert_eq!(base64url(b"f"), "Zg==");
        assert_eq!(base64url(b"foob"), "Zm9vYg==");
        assert_eq!(base64url(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8=");
        assert_eq!(path_label("host", "a/b"), "/host@base64/YS9i");
        assert_eq!(path_label("host", ""), "/host@base64/=");
    }

    #[test]
    fn credentials_are_never_shown_and_ports_are_checked() {
        assert_eq!(
            redact("http://user:secret@gw:9091/p"),
            "http://***@gw:9091/p"
        );
        assert_eq!(redact("http://gw:9091"), "http://gw:9091");
        assert_eq!(redact("https://u:s@gw"), "https://***@gw");
        for bad in [
            "http://user:secret@gw:99999",
            "https://user:secret@gw:9091",
            "http://user:secret@gw:9091/?x",
        ] {
            let e = check_url(bad).unwrap_err();
            assert!(!e.contains("secret") && !e.contains("user"), "{e}");
        }
        assert!(check_url("http://gw:99999")
            .unwrap_err()
            .contains("not a port"));
        assert!(check_url("http://gw:0").is_err());
        assert!(check_url("http://gw:+80").is_err());
        assert!(check_url("http://gw:").is_err());
        assert!(check_url("http://[::1]:9091").is_ok());
        assert!(check_url("http://[::1]").is_ok());
        assert!(check_url("http://u:p@gw:9091").is_ok());
        assert!(check_url("http://gw\u{1b}[2J:9091").is_err());
        assert_eq!(base64(b"user:p@ss?"), "dXNlcjpwQHNzPw==");
        assert_eq!(percent_decode("p%40ss%zz%4"), b"p@ss%zz%4");
    }

    #[test]
    fn nothing_before_the_last_at_is_shown() {
        // A `/` in the password: parsers take `u:pa` for the host.
        for (url, shown) in [
            ("http://u:pa/ss@h:1", "http://***@h:1"),
            ("http://u:p@ss@h:1/x", "http://***@h:1/x"),
            ("http://u:pa/ss@h:1/x@y", "http://***@y"),
            ("ftp://u:s/e@h", "ftp://***@h"),
            ("u:s/e@h:1", "***@h:1"),
            ("u@x://h", "***@x://h"),
            ("http://h:1/p", "http://h:1/p"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        for bad in [
            "http://USER:PA/SS@h:1",
            "http://US/ER:PASS@h",
            "http://USER:PASS@h:1/a@b",
            "http://USER:PA/SS@h:99999",
        ] {
            let e = check_url(bad).unwrap_err();
            for secret in ["USER", "US", "PA", "SS", "ER"] {
                assert!(!e.contains(secret), "{bad}: {e}");
            }
        }
        assert!(check_url("http://u:pa%2Fss@h:1").is_ok());
    }
}
