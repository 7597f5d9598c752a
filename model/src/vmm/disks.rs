//! The disk images a VMM command names: QEMU's `-drive file=`, `-hda` to
//! `-hdd` and `-blockdev` (`filename=`, dotted or JSON), Cloud
//! Hypervisor's `--disk path=`, Firecracker's `drives[].path_on_host` in
//! its config file, bootscope's `--disk`.

use std::path::PathBuf;

use super::{firecracker, locate, qemu_is, VmmArgsError, VmmKind};

/// QEMU's `key=value,key=value` options, `,,` a comma inside a value:
/// the pairs in order (a part without `=` gives an empty key).
fn qemu_opts(s: &str) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                cur.push(',');
            } else {
                parts.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (String::new(), p),
        })
        .collect()
}

/// Whether a QEMU `file=` names a local file (not `nbd:`, `json:`, a URL).
fn local(path: &str) -> bool {
    !path.is_empty()
        && !path.contains("://")
        && ![
            "json:",
            "nbd:",
            "iscsi:",
            "rbd:",
            "ssh:",
            "gluster:",
            "sheepdog:",
        ]
        .iter()
        .any(|p| path.starts_with(p))
}

/// Every `filename` in a `-blockdev` given as JSON.
fn json_filenames(v: &serde_json::Value, out: &mut Vec<PathBuf>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("filename", serde_json::Value::String(s)) if local(s) => {
                        out.push(PathBuf::from(s));
                    }
                    _ => json_filenames(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| json_filenames(v, out)),
        _ => {}
    }
}

fn qemu_disks(args: &[String]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < args.len() {
        let (a, v) = (&args[i], &args[i + 1]);
        let keys: &[&str] = if qemu_is(a, "drive") {
            &["file", "file.filename"]
        } else if qemu_is(a, "blockdev") {
            &["filename", "file.filename"]
        } else if ["hda", "hdb", "hdc", "hdd"].iter().any(|n| qemu_is(a, n)) {
            if local(v) {
                out.push(PathBuf::from(v));
            }
            i += 2;
            continue;
        } else {
            i += 1;
            continue;
        };
        if v.trim_start().starts_with('{') {
            if let Ok(j) = serde_json::from_str::<serde_json::Value>(v) {
                json_filenames(&j, &mut out);
            }
        } else {
            out.extend(
                qemu_opts(v)
                    .into_iter()
                    .filter(|(k, v)| keys.contains(&k.as_str()) && local(v))
                    .map(|(_, v)| PathBuf::from(v)),
            );
        }
        i += 2;
    }
    out
}

/// Cloud Hypervisor's `--disk path=A,readonly=on path=B` (several disks
/// after one `--disk`, or `--disk=path=A`).
fn ch_disks(args: &[String]) -> Vec<PathBuf> {
    let mut values = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if let Some(v) = a.strip_prefix("--disk=") {
            values.push(v.to_string());
        } else if a == "--disk" {
            while i < args.len() && !args[i].starts_with('-') {
                values.push(args[i].clone());
                i += 1;
            }
        }
    }
    values
        .iter()
        .filter_map(|v| {
            qemu_opts(v)
                .into_iter()
                .find(|(k, _)| k == "path")
                .map(|(_, p)| PathBuf::from(p.trim_matches('"')))
        })
        .collect()
}

/// The disk images a VMM command names, in the order it names them; a
/// Firecracker configured through its API names none here. A Firecracker
/// config that cannot be read is an error.
pub fn disk_images<S: AsRef<str>>(argv: &[S]) -> Result<Vec<PathBuf>, VmmArgsError> {
    let (kind, at) = locate(argv);
    let args: Vec<String> = argv[at.min(argv.len())..]
        .iter()
        .map(|s| s.as_ref().to_string())
        .collect();
    Ok(match kind {
        VmmKind::Qemu => qemu_disks(&args),
        VmmKind::CloudHypervisor => ch_disks(&args),
        // `run --disk PATH[,readonly]`.
        VmmKind::Bootscope => crate::argv::flag_values(&args, &["--disk"])
            .map(|(_, v)| PathBuf::from(v.strip_suffix(",readonly").unwrap_or(v)))
            .collect(),
        VmmKind::Firecracker => match firecracker::config_path(&args) {
            Some(p) => firecracker::drive_paths(&firecracker::read_config(&p)?),
            None => Vec::new(),
        },
        VmmKind::Other => Vec::new(),
    })
}
