//! The Debian package: built by `scripts/package` from this build's
//! executable, installed with dpkg, used from the installed paths
//! (`/usr/bin/bootscope doctor`, `man bootscope-run`, the completion
//! scripts), then removed, leaving none of its files behind. Needs root and
//! dpkg; prints SKIP with the reason where either is missing.

mod support;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::{is_root, skip_test, text};

const PACKAGE: &str = "bootscope";

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn installed() -> bool {
    let o = run(Command::new("dpkg-query").args(["-W", "-f", "${Status}", PACKAGE]));
    o.status.success() && String::from_utf8_lossy(&o.stdout).contains("ok installed")
}

/// Runs dpkg, waiting while another dpkg or apt holds its lock (other
/// builds share this machine).
fn dpkg(args: &[&str]) -> Output {
    let start = Instant::now();
    loop {
        let o = run(Command::new("dpkg").args(args));
        let locked = String::from_utf8_lossy(&o.stderr).contains("lock");
        if o.status.success() || !locked || start.elapsed() > Duration::from_secs(300) {
            return o;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Removes the package if a failed assertion left it installed.
struct Uninstall;

impl Drop for Uninstall {
    fn drop(&mut self) {
        if installed() {
            let _ = dpkg(&["-r", PACKAGE]);
        }
    }
}

fn skip_reason() -> Option<String> {
    if !is_root() {
        return Some("installing a package needs root".into());
    }
    for tool in ["dpkg", "dpkg-deb", "dpkg-query", "man"] {
        let found = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    if installed() {
        return Some(format!(
            "a {PACKAGE} package is installed already; the test would replace and remove it"
        ));
    }
    None
}

/// The package holds the executable, its manual pages (one per
/// subcommand, none for clap's help) and the shells' completions; returns
/// the files it holds.
fn check_package_files(deb: &Path) -> Vec<String> {
    // What it holds.
    let o = run(Command::new("dpkg-deb").arg("-c").arg(deb));
    assert!(o.status.success(), "{}", text(&o));
    let files: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches('.').to_string())
        .collect();
    let mut expected = vec![
        "/usr/bin/bootscope".to_string(),
        "/usr/share/man/man1/bootscope.1.gz".into(),
        "/usr/share/bash-completion/completions/bootscope".into(),
        "/usr/share/zsh/vendor-completions/_bootscope".into(),
        "/usr/share/fish/vendor_completions.d/bootscope.fish".into(),
    ];
    // A manual page per subcommand.
    for sub in [
        "run",
        "doctor",
        "lab",
        "demo",
        "profile",
        "bench",
        "compare",
        "check",
        "plot",
        "tui",
        "export",
        "completions",
        "man",
    ] {
        expected.push(format!("/usr/share/man/man1/bootscope-{sub}.1.gz"));
    }
    for f in &expected {
        assert!(files.contains(f), "{f} not in the package: {files:?}");
    }
    assert!(
        !files.iter().any(|f| f.contains("bootscope-help.1")),
        "clap's help subcommand has no page: {files:?}"
    );
    files
}

#[test]
fn package_installs_works_and_removes_cleanly() {
    if let Some(why) = skip_reason() {
        skip_test!("{why}");
    }
    // One package test at a time on this machine: others may run it from
    // their own checkouts.
    let lock = std::fs::File::create("/run/lock/bootscope-package-test.lock")
        .or_else(|_| std::fs::File::create("/tmp/bootscope-package-test.lock"))
        .expect("lock file");
    // SAFETY: flock on a descriptor this function owns; released when the
    // file is closed at the end of the test.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    if installed() {
        skip_test!("a {PACKAGE} package is installed already");
    }

    // The package of this build's executable.
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_bootscope"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = run(Command::new("bash")
        .arg(root.join("scripts/package"))
        .arg("--no-build")
        .env("CARGO_TARGET_DIR", exe.parent().unwrap().parent().unwrap()));
    assert!(o.status.success(), "scripts/package failed: {}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let deb = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        deb.is_file() && deb.extension().is_some_and(|e| e == "deb"),
        "scripts/package did not name a .deb: {}",
        text(&o)
    );

    let files = check_package_files(&deb);

    let _uninstall = Uninstall;
    let o = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(o.status.success(), "dpkg -i failed: {}", text(&o));
    assert!(installed());

    // The installed executable, with its eBPF objects built in (nothing
    // else of the build is on the installed paths).
    let o = run(Command::new("/usr/bin/bootscope").arg("doctor"));
    assert!(o.status.success(), "{}", text(&o));
    let doctor = String::from_utf8_lossy(&o.stdout);
    assert!(doctor.lines().any(|l| l.starts_with("kvm ")), "{doctor}");
    let o = run(Command::new("/usr/bin/bootscope").args(["doctor", "--json"]));
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("doctor --json is JSON");

    // man finds the installed page by its name.
    let o = run(Command::new("man").args(["-w", "bootscope-run"]));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "/usr/share/man/man1/bootscope-run.1.gz"
    );
    let o = run(Command::new("man")
        .args(["-P", "cat", "bootscope-run"])
        .env("MANWIDTH", "100"));
    assert!(o.status.success(), "{}", text(&o));
    let page = String::from_utf8_lossy(&o.stdout);
    for needle in ["bootscope-run", "--kernel", "--initrd", "--timeline"] {
        assert!(page.contains(needle), "{needle} not in the page:\n{page}");
    }

    // The installed completions are the ones the executable prints.
    for (shell, path) in [
        ("bash", "/usr/share/bash-completion/completions/bootscope"),
        ("zsh", "/usr/share/zsh/vendor-completions/_bootscope"),
        (
            "fish",
            "/usr/share/fish/vendor_completions.d/bootscope.fish",
        ),
    ] {
        let o = run(Command::new("/usr/bin/bootscope").args(["completions", shell]));
        assert!(o.status.success(), "{}", text(&o));
        let installed = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            installed, o.stdout,
            "{path} differs from `completions {shell}`"
        );
    }
    let o = run(Command::new("bash").args([
        "-c",
        "source /usr/share/bash-completion/completions/bootscope && complete -p bootscope",
    ]));
    assert!(o.status.success(), "{}", text(&o));

    // Removal leaves none of the package's files.
    let o = dpkg(&["-r", PACKAGE]);
    assert!(o.status.success(), "dpkg -r failed: {}", text(&o));
    assert!(!installed(), "still installed after dpkg -r");
    let left: Vec<&String> = files.iter().filter(|f| Path::new(f).exists()).collect();
    assert!(left.is_empty(), "left after dpkg -r: {left:?}");
}
