//! What the Cloud Hypervisor lab tests share: CH's binaries (CH_BIN_DIR,
//! default /usr/local/bin) and one lab script run against them.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{lab, scratch, skip};

/// The directory holding cloud-hypervisor and ch-remote, or a SKIP line.
pub fn ch_bin_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("CH_BIN_DIR").unwrap_or("/usr/local/bin".into()));
    for name in ["cloud-hypervisor", "ch-remote"] {
        if !dir.join(name).is_file() {
            skip(format_args!(
                "{} is missing (build Cloud Hypervisor as docs/lab.md says, or set CH_BIN_DIR)",
                dir.join(name).display()
            ));
            return None;
        }
    }
    Some(dir)
}

/// Runs `sh SCRIPT ARGS... DIR` from the source tree with CH's binaries and
/// this build's bootscope, DIR a scratch directory named after `tag`, and
/// asserts it succeeded. Returns DIR and the script's stdout and stderr;
/// None (after a SKIP line) without CH or the lab.
pub fn run_lab_script(script: &str, args: &[&str], tag: &str) -> Option<(PathBuf, String)> {
    let bin = ch_bin_dir()?;
    if lab::lab_kernel().is_none() || lab::static_busybox().is_none() {
        return None;
    }
    let dir = scratch(tag);
    let o = Command::new("sh")
        .arg(Path::new("scripts").join(script))
        .args(args)
        .arg(&dir)
        .env("CH_BIN_DIR", &bin)
        .env("BOOTSCOPE", env!("CARGO_BIN_EXE_bootscope"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("sh runs");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "scripts/{script} failed:\n{out}");
    Some((dir, out))
}
