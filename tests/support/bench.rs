//! Bench documents written for `compare` and `check` to read.

use std::path::Path;

use serde_json::{json, Value};

/// A bench document with one configuration whose runs have these metrics.
pub fn bench_doc(label: &str, runs: &[&[(&str, u64)]]) -> Value {
    let runs: Vec<Value> = runs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let metrics: serde_json::Map<String, Value> =
                m.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            json!({"index": i, "round": i, "warmup": false, "ok": true, "exit_code": 0,
                   "metrics": metrics})
        })
        .collect();
    json!({
        "schema": "bootscope.bench", "version": 1, "created": "2026-01-01T00:00:00Z",
        "bootscope": "bootscope 0.1.0",
        "machine": {"hostname": "h", "kernel_release": "6.1", "cpu_model": "cpu", "cpus": 2,
                    "memory_bytes": 1, "host_kvm": "svm"},
        "settings": {"runs": runs.len(), "warmup": 0, "interleaved": false, "profile": false},
        "configs": [{"label": label, "kind": "bootscope", "command": ["--kernel", "k"],
                     "runs": runs}]
    })
}

pub fn write_json(dir: &Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p.display().to_string()
}
