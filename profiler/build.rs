//! Compiles the C eBPF collectors in `bpf/` with clang, one object per
//! `NAME.bpf.c`, and links them with `bpftool gen object` into one
//! `bootscope.bpf.o` in OUT_DIR (the collectors share their maps: the
//! followed processes, the phase index, the ring buffer, the counters).
//! `src/bpf.rs` embeds that object once.
//!
//! Tools: `clang` (override with $CLANG) and `bpftool` (override with
//! $BPFTOOL); headers from libbpf-dev. On Debian:
//! `apt-get install clang libbpf-dev bpftool` (scripts/deps.sh does it).

use std::path::{Path, PathBuf};
use std::process::Command;

const INSTALL_HINT: &str = "apt-get install clang libbpf-dev bpftool";

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let bpf_dir = manifest.join("../bpf");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=BPFTOOL");

    let mut sources = Vec::new();
    let mut headers = Vec::new();
    let entries = std::fs::read_dir(&bpf_dir)
        .unwrap_or_else(|e| fail(&format!("cannot list {}: {e}", bpf_dir.display())));
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".bpf.c") {
            sources.push(path);
        } else if name.ends_with(".h") {
            headers.push(path);
        }
    }
    sources.sort();
    headers.sort();
    for p in sources.iter().chain(&headers) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    if sources.is_empty() {
        fail(&format!("no *.bpf.c in {}", bpf_dir.display()));
    }

    let clang = tool("CLANG", "clang");
    let bpftool = tool("BPFTOOL", "bpftool");
    check_tool(&clang, "--version", "clang");
    check_tool(&bpftool, "version", "bpftool");
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        fail(&format!(
            "libbpf headers (/usr/include/bpf/bpf_helpers.h) are missing: {INSTALL_HINT}"
        ));
    }

    let mut objects = Vec::new();
    for src in &sources {
        let stem = src
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".bpf.c"))
            .expect("filtered above");
        let obj = out.join(format!("{stem}.bpf.o"));
        let status = Command::new(&clang)
            .args([
                "-g",
                "-O2",
                "-target",
                "bpf",
                "-D__TARGET_ARCH_x86",
                "-Wall",
            ])
            .arg("-I")
            .arg(&bpf_dir)
            .args(["-I", "/usr/include/x86_64-linux-gnu", "-c"])
            .arg(src)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", clang.display())));
        if !status.success() {
            fail(&format!(
                "clang failed on {} ({status}); its messages are above",
                src.display()
            ));
        }
        objects.push(obj);
    }

    let linked = out.join("bootscope.bpf.o");
    let status = Command::new(&bpftool)
        .args(["gen", "object"])
        .arg(&linked)
        .args(&objects)
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", bpftool.display())));
    if !status.success() {
        fail(&format!(
            "bpftool gen object failed ({status}) linking {} objects into {}",
            objects.len(),
            linked.display()
        ));
    }
}

/// The tool named by $VAR, else `name` from PATH or the sbin directories
/// (Debian installs bpftool in /usr/sbin, which a user's PATH may lack).
fn tool(var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from));
    for d in dirs {
        let p = d.join(name);
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from(name)
}

fn check_tool(path: &Path, arg: &str, what: &str) {
    let ok = Command::new(path)
        .arg(arg)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        fail(&format!(
            "{what} ({}) is needed to compile the eBPF collectors in bpf/ and was not found: {INSTALL_HINT}",
            path.display()
        ));
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: bootscope-profiler: {msg}");
    panic!("bootscope-profiler build: {msg}");
}
