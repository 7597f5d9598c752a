//! What the lab tests need: the lab itself (QEMU, Debian's kernel and kvm
//! modules) and, for real boots, the default guest's initramfs. Each check
//! prints the SKIP line with the reason when something is missing.

use std::path::{Path, PathBuf};

use super::skip;

pub struct Prereqs {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// A scratch directory of this test (the initramfs is in it).
    pub dir: PathBuf,
}

/// Debian's kernel when the lab can run here.
pub fn lab_kernel() -> Option<PathBuf> {
    if let Err(e) = bootscope_lab::outer::check_prerequisites(Path::new("qemu-system-x86_64")) {
        skip(format_args!("the lab is unavailable here: {e}"));
        return None;
    }
    match bootscope_lab::guest::find_debian_kernel() {
        Ok(k) => Some(k.vmlinuz),
        Err(e) => {
            skip(e);
            None
        }
    }
}

/// The lab, plus the default guest built into a scratch directory named
/// after `tag`.
pub fn prereqs(tag: &str) -> Option<Prereqs> {
    let kernel = lab_kernel()?;
    let dir = super::scratch(&format!("lab-{tag}"));
    let initrd = dir.join("guest.cpio");
    if let Err(e) = bootscope_lab::guest::build_default_initramfs(&initrd) {
        skip(format_args!("cannot build the default guest: {e}"));
        return None;
    }
    Some(Prereqs {
        kernel,
        initrd,
        dir,
    })
}

/// QEMU on this host, to carry into the lab, and the directory of its
/// microvm firmware (carried in with `--input`).
pub fn qemu_for_the_lab() -> Option<(PathBuf, &'static Path)> {
    let qemu = super::program("qemu-system-x86_64", "apt-get install qemu-system-x86")?;
    let firmware = Path::new("/usr/share/qemu");
    if !firmware.join("bios-microvm.bin").is_file() {
        skip("QEMU's microvm firmware /usr/share/qemu/bios-microvm.bin is missing");
        return None;
    }
    Some((qemu, firmware))
}

/// A static busybox to carry into the lab, or a SKIP line saying why
/// there is none.
pub fn static_busybox() -> Option<PathBuf> {
    bootscope_lab::guest::static_busybox().map_err(skip).ok()
}

/// The restore guest (`bootscope_lab::restore_guest`) with its virtio disk
/// driver, built into `dir` as `restore.cpio`, or a SKIP line saying why
/// there is none.
pub fn restore_guest(dir: &Path) -> Option<PathBuf> {
    let kernel = bootscope_lab::guest::find_debian_kernel()
        .map_err(skip)
        .ok()?;
    let initrd = dir.join("restore.cpio");
    match bootscope_lab::restore_guest::build_restore_initramfs_with_disk(&initrd, &kernel) {
        Ok(()) => Some(initrd),
        Err(e) => {
            skip(format_args!("cannot build the restore guest: {e}"));
            None
        }
    }
}

/// A profile's first mark whose name starts with `name` (its time, ns).
pub fn profile_mark_t(p: &serde_json::Value, name: &str) -> u64 {
    p["marks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str().unwrap().starts_with(name))
        .unwrap_or_else(|| panic!("no mark {name}: {:#}", p["marks"]))["t_ns"]
        .as_u64()
        .unwrap()
}

/// The script run in the lab for `profile --pid`: the VMM command `vmm`
/// started in the background (its output into `console`), given 2 s to
/// map its guest's memory and start the kernel, then profiled by its pid
/// into `out` while its guest boots; the script waits for the VMM.
pub fn pid_script(exe: &Path, vmm: &[String], out: &Path, console: &Path) -> String {
    let quoted: Vec<String> = vmm.iter().map(|a| format!("'{a}'")).collect();
    format!(
        "set -e\n{} > {} 2>&1 &\nq=$!\nsleep 2\n{} profile --pid $q --output {}\nwait $q || true\n",
        quoted.join(" "),
        console.display(),
        exe.display(),
        out.display()
    )
}

/// The guest kernel's own log, read from memory (`guest_read` of a
/// profile): at least 100 records, its banner and the start of init.
pub fn assert_kernel_log(g: &serde_json::Value) {
    let log = g["kernel_log"]["records"]
        .as_array()
        .expect("the kernel log");
    assert!(log.len() >= 100, "{} records", log.len());
    for start in ["Linux version", "Run /init"] {
        assert!(
            log.iter()
                .any(|r| r["text"].as_str().unwrap().starts_with(start)),
            "no `{start}` record"
        );
    }
}

/// Every initcall of profile `p` on the profile's clock (at least 300,
/// aligned by at least 10 anchors), between the kernel's first port I/O
/// and init's start as the console has them, with exits of their own
/// (the profiler's counts per slot) that are a part of the boot's.
pub fn assert_initcalls_on_the_clock(p: &serde_json::Value) {
    let doc = &p["guest_read"]["initcalls"];
    let calls = doc["initcalls"].as_array().expect("initcalls");
    assert!(calls.len() >= 300, "{} initcalls", calls.len());
    assert!(doc["clock"]["anchors"].as_u64().unwrap() >= 10, "{doc:#}");
    let first_pio = profile_mark_t(p, "port I/O: first by kernel code");
    let run_init = profile_mark_t(p, "serial: run init");
    for c in calls {
        let start = c["start_ns"].as_u64().unwrap();
        let end = start + c["duration_ns"].as_u64().unwrap();
        assert!(
            first_pio <= start && end <= run_init,
            "{c:#} outside {first_pio}..{run_init}"
        );
    }
    let total = p["exits"]["total"].as_u64().unwrap();
    let in_initcalls: u64 = calls
        .iter()
        .filter_map(|c| c["counted"]["exits"].as_u64())
        .sum();
    assert!(
        in_initcalls > 0 && in_initcalls <= total,
        "{in_initcalls} of {total}"
    );
}

/// One `bootscope run` of the default guest among several in one lab
/// machine ([`runs_in_one_lab`]).
pub struct LabRun {
    /// Names its files (`out/TAG-*`).
    pub tag: &'static str,
    /// `run`'s arguments after the kernel, initrd, memory and timeout.
    pub args: Vec<String>,
    /// Files the run writes besides its timeline and serial log (a
    /// profile's `--output`), brought back too.
    pub extra: Vec<PathBuf>,
}

/// What one [`LabRun`] left.
pub struct LabRunResult {
    pub status: Option<i32>,
    /// Its standard output and error.
    pub output: String,
    pub timeline: serde_json::Value,
    pub serial: String,
    /// The [`LabRun::extra`] files' bytes, in order.
    pub extra: Vec<Vec<u8>>,
}

/// Runs `runs` one after another in one lab machine (one lab start
/// instead of one each: the suite's lab time is mostly starts and
/// boots), with the default guest of `p`; `None` after a SKIP line when
/// there is no static busybox to run them with.
pub fn runs_in_one_lab(p: &Prereqs, runs: &[LabRun]) -> Option<Vec<LabRunResult>> {
    let busybox = static_busybox()?;
    let exe = Path::new(env!("CARGO_BIN_EXE_bootscope"));
    let out = p.dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let file = |tag: &str, what: &str| out.join(format!("{tag}-{what}"));
    let q = |p: &Path| format!("'{}'", p.display());
    let mut script = format!("mkdir -p {}\n", q(&out));
    let mut outputs = Vec::new();
    for r in runs {
        let args: Vec<String> = r.args.iter().map(|a| format!("'{a}'")).collect();
        script += &format!(
            "{} run --kernel {} --initrd {} --memory 256M --timeout 600 {} --timeline {} --serial {} > {} 2>&1\necho $? > {}\n",
            q(exe),
            q(&p.kernel),
            q(&p.initrd),
            args.join(" "),
            q(&file(r.tag, "timeline.json")),
            q(&file(r.tag, "serial.log")),
            q(&file(r.tag, "output.txt")),
            q(&file(r.tag, "status")),
        );
        for what in ["timeline.json", "serial.log", "output.txt", "status"] {
            outputs.push(file(r.tag, what));
        }
        outputs.extend(r.extra.iter().cloned());
    }
    let script_path = p.dir.join("runs.sh");
    std::fs::write(&script_path, script).unwrap();
    let timeout = (600 * runs.len()).to_string();
    let mut cmd = super::bootscope();
    cmd.args(["lab", "--timeout", &timeout, "--exe"])
        .arg(&busybox)
        .arg("--program")
        .arg(exe)
        .arg("--input")
        .arg(&p.kernel)
        .arg("--input")
        .arg(&p.initrd);
    for o in &outputs {
        cmd.arg("--output").arg(o);
    }
    cmd.args(["--", "sh"]).arg(&script_path);
    let o = super::run(&mut cmd, None);
    let console = super::text(&o);
    println!("--- lab ---\n{console}---");
    assert_eq!(o.status.code(), Some(0), "{console}");
    let read = |p: &Path| {
        std::fs::read(p)
            .unwrap_or_else(|e| panic!("{} not brought back: {e}\n{console}", p.display()))
    };
    Some(
        runs.iter()
            .map(|r| {
                let text =
                    |what: &str| String::from_utf8_lossy(&read(&file(r.tag, what))).into_owned();
                let output = text("output.txt");
                println!("--- {} ---\n{output}---", r.tag);
                LabRunResult {
                    status: text("status").trim().parse().ok(),
                    timeline: serde_json::from_slice(&read(&file(r.tag, "timeline.json")))
                        .unwrap_or_else(|e| panic!("{} timeline: {e}\n{output}", r.tag)),
                    serial: text("serial.log"),
                    extra: r.extra.iter().map(|x| read(x)).collect(),
                    output,
                }
            })
            .collect(),
    )
}
