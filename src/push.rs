//! `bench --push URL` and `check --push URL`: the results in the
//! Prometheus text format, PUT to a Pushgateway under
//! `URL/metrics/job/bootscope/kind/{bench,check}/host/HOSTNAME` (ureq: a
//! small blocking HTTP client, no async runtime). A PUT replaces what the
//! previous push of the same kind from the same host left there.

use std::fmt::Write as _;
use std::time::Duration;

use bootscope_bench::metrics::MetricKind;
use bootscope_bench::{BenchDoc, CheckReport};

/// Checks a `--push` URL before any work: Err is a bad-input message.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!(
            "--push {url:?}: give the Pushgateway's http:// address, for example \
             http://127.0.0.1:9091 (this bootscope pushes over plain HTTP)"
        )
    })?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || rest.contains(['?', '#', ' ']) {
        return Err(format!(
            "--push {url:?}: not a Pushgateway address; give http://HOST:PORT"
        ));
    }
    Ok(())
}

/// URL-safe base64 with padding, as the Pushgateway takes label values in
/// a path (`label@base64/VALUE`).
fn base64url(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
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

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

fn line(out: &mut String, name: &str, labels: &[(&str, &str)], v: f64) {
    let l: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    let _ = writeln!(out, "{name}{{{}}} {v}", l.join(","));
}

/// A benchmark's summaries: per configuration and metric, each statistic;
/// times in seconds.
pub fn bench_text(doc: &BenchDoc) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "bootscope_bench_runs",
        "Measured runs of each configuration, by outcome.",
    );
    for c in &doc.configs {
        let measured: Vec<_> = c.runs.iter().filter(|r| !r.warmup).collect();
        let ok = measured.iter().filter(|r| r.ok).count() as f64;
        let failed = measured.len() as f64 - ok;
        line(
            &mut out,
            "bootscope_bench_runs",
            &[("config", &c.label), ("outcome", "ok")],
            ok,
        );
        line(
            &mut out,
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
        family(&mut out, name, help);
        for c in &doc.configs {
            for (metric, s) in c.summary.iter().filter(|(_, s)| s.kind == kind) {
                let st = &s.stats;
                for (stat, v) in [
                    ("mean", st.mean), ("median", st.median), ("min", st.min), ("max", st.max),
                    ("q1", st.q1), ("q3", st.q3), ("sd", st.sd),
                ] {
                    let l = [("config", c.label.as_str()), ("metric", metric.as_str()), ("stat", stat)];
                    line(&mut out, name, &l, v * scale);
                }
            }
        }
    }
    out
}

/// A check's verdict and, per metric, the change and whether it failed.
pub fn check_text(report: &CheckReport) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "bootscope_check_regressions",
        "Metrics that regressed against the baseline (0: the check passed).",
    );
    let _ = writeln!(out, "bootscope_check_regressions {}", report.regressions);
    family(
        &mut out,
        "bootscope_check_change_ratio",
        "Change of each checked metric against the baseline, (new - base) / base.",
    );
    for r in &report.results {
        let v = r.comparison.change_pct / 100.0;
        line(
            &mut out,
            "bootscope_check_change_ratio",
            &[("metric", &r.metric)],
            v,
        );
    }
    family(
        &mut out,
        "bootscope_check_regression",
        "1 where a checked metric regressed, else 0.",
    );
    for r in &report.results {
        let v = if r.status == "regression" { 1.0 } else { 0.0 };
        line(
            &mut out,
            "bootscope_check_regression",
            &[("metric", &r.metric)],
            v,
        );
    }
    out
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
    let target = format!(
        "{}{}",
        url.trim_end_matches('/'),
        group_path(kind, &hostname())
    );
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(15)))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let resp = agent
        .put(&target)
        .header("Content-Type", "text/plain; version=0.0.4")
        .send(text)
        .map_err(|e| format!("cannot push to {target}: {e}; is the Pushgateway running there?"))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(target);
    }
    let body = resp.into_body().read_to_string().unwrap_or_default();
    Err(format!(
        "the Pushgateway at {target} refused the push: {status} {}",
        body.trim()
    ))
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
}
