//! The outer initramfs: static busybox and its command links, the program
//! with its shared libraries, the extra programs, the inputs, the KVM
//! modules and the generated `/init`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::init::{init_script, InitOptions};
use super::modules::kvm_modules;
use super::plan::{ArgPlan, InputFile};
use crate::cpio::Builder;
use crate::elf::{self, Linkage};
use crate::guest::DebianKernel;
use crate::{LabError, Result};

/// Where the program under test lives in the guest.
pub(super) const GUEST_EXE: &str = "/bin/bootscope";

/// Directory for the link that gives the program its host name.
const EXE_ALIAS_DIR: &str = "/lab/bin";

/// Builds the outer initramfs at `path` and returns its size in bytes.
pub(super) fn build_outer_initramfs(
    path: &Path,
    kernel: &DebianKernel,
    busybox: &Path,
    exe: &Path,
    programs: &[InputFile],
    plan: &ArgPlan,
    options: InitOptions,
) -> Result<u64> {
    let modules = kvm_modules(kernel)?;
    let libraries = shared_libraries(exe)?;
    let applets = busybox_applets(busybox)?;

    let file = fs::File::create(path).map_err(|e| LabError::io("create", path, e))?;
    let mut cpio = Builder::new(BufWriter::new(file));
    // What the lab itself put at each guest path, to decide what an input
    // landing on the same path means.
    let mut taken: HashMap<PathBuf, Occupant> = HashMap::new();

    for dir in [
        "dev", "proc", "sys", "run", "root", "bin", "sbin", "usr/bin", "usr/sbin",
    ] {
        cpio.add_dir(dir, 0o755)?;
    }
    cpio.add_dir("tmp", 0o1777)?;
    cpio.add_char_device("dev/console", 5, 1, 0o600)?;
    cpio.add_file_from_host("bin/busybox", busybox, 0o755)?;
    taken.insert(PathBuf::from("/bin/busybox"), Occupant::Command);
    for applet in &applets {
        let link = Path::new("/bin").join(applet);
        if !cpio.contains(&link) {
            cpio.add_symlink(&link, "busybox")?;
            taken.insert(link, Occupant::Command);
        }
    }
    cpio.add_file_from_host(GUEST_EXE, exe, 0o755)?;
    taken.insert(PathBuf::from(GUEST_EXE), Occupant::HostFile(host_key(exe)));
    if let Some(link) = exe_alias(exe) {
        cpio.add_symlink(&link, GUEST_EXE)?;
        taken.insert(link, Occupant::Fixed("the link that starts the program"));
    }
    for lib in &libraries {
        if !cpio.contains(lib) {
            cpio.add_file_from_host(lib, lib, 0o755)?;
            taken.insert(lib.clone(), Occupant::HostFile(host_key(lib)));
        }
    }
    for module in &modules {
        cpio.add_file_bytes(&module.guest, &module.contents, 0o644)?;
        taken.insert(module.guest.clone(), Occupant::Fixed("a kernel module"));
    }
    add_programs(&mut cpio, &mut taken, programs)?;
    for input in &plan.inputs {
        let conflict = |existing: String| LabError::InputConflict {
            host: input.host.clone(),
            guest: input.guest.clone(),
            existing,
        };
        match taken.get(&input.guest) {
            None => {}
            // The same file is already there (e.g. a library named as input).
            Some(Occupant::HostFile(key)) if *key == host_key(&input.host) => continue,
            // A command such as /bin/sh named as an argument: the guest's
            // busybox provides it, and the host binary might not run there.
            Some(Occupant::Command) => continue,
            Some(Occupant::HostFile(key)) => return Err(conflict(key.clone())),
            Some(Occupant::Fixed(what)) => return Err(conflict((*what).to_string())),
        }
        match cpio.add_file_from_host(&input.guest, &input.host, 0o644 | exec_bits(&input.host)) {
            Ok(()) => {}
            Err(LabError::CpioName { .. }) => {
                return Err(conflict("a file or directory the lab itself needs".into()))
            }
            Err(e) => return Err(e),
        }
        taken.insert(
            input.guest.clone(),
            Occupant::HostFile(host_key(&input.host)),
        );
    }
    let start = exe_alias(exe).unwrap_or_else(|| PathBuf::from(GUEST_EXE));
    let init = init_script(kernel, &modules, plan, &start, options);
    cpio.add_file_bytes("init", &init, 0o755)?;
    let len = cpio.len();
    let mut writer = cpio.finish()?;
    writer.flush().map_err(|e| LabError::io("write", path, e))?;
    Ok(len)
}

/// Adds the extra programs at their guest paths, each with the shared
/// libraries and dynamic loader it needs (the ones already in the archive
/// are shared).
fn add_programs<W: Write>(
    cpio: &mut Builder<W>,
    taken: &mut HashMap<PathBuf, Occupant>,
    programs: &[InputFile],
) -> Result<()> {
    for program in programs {
        let key = host_key(&program.host);
        match taken.get(&program.guest) {
            None => {}
            Some(Occupant::HostFile(existing)) if *existing == key => {}
            Some(occupant) => {
                let existing = match occupant {
                    Occupant::Command => "busybox or one of its command links".to_string(),
                    Occupant::HostFile(existing) => existing.clone(),
                    Occupant::Fixed(what) => (*what).to_string(),
                };
                return Err(LabError::InputConflict {
                    host: program.host.clone(),
                    guest: program.guest.clone(),
                    existing,
                });
            }
        }
        if !cpio.contains(&program.guest) {
            match cpio.add_file_from_host(&program.guest, &program.host, 0o755) {
                Ok(()) => {}
                Err(LabError::CpioName { .. }) => {
                    return Err(LabError::InputConflict {
                        host: program.host.clone(),
                        guest: program.guest.clone(),
                        existing: "a file or directory the lab itself needs".into(),
                    })
                }
                Err(e) => return Err(e),
            }
            taken.insert(program.guest.clone(), Occupant::HostFile(key));
        }
        for lib in shared_libraries(&program.host)? {
            if !cpio.contains(&lib) {
                cpio.add_file_from_host(&lib, &lib, 0o755)?;
                taken.insert(lib.clone(), Occupant::HostFile(host_key(&lib)));
            }
        }
    }
    Ok(())
}

/// What the lab put at a guest path.
enum Occupant {
    /// Busybox or one of its applet links.
    Command,
    /// A copy of a host file, identified by [`host_key`].
    HostFile(String),
    /// Something generated, described for error messages.
    Fixed(&'static str),
}

/// Where the program is started from when its file name on the host is not
/// `bootscope`: a link with that name, so the program sees the same
/// `argv[0]` as on the host (multi-call programs such as busybox depend on
/// it).
fn exe_alias(exe: &Path) -> Option<PathBuf> {
    let name = exe.file_name()?;
    if name == OsStr::new("bootscope") {
        return None;
    }
    Some(Path::new(EXE_ALIAS_DIR).join(name))
}

/// Identifies a host file for duplicate detection (its canonical path).
fn host_key(host: &Path) -> String {
    fs::canonicalize(host)
        .unwrap_or_else(|_| host.to_path_buf())
        .display()
        .to_string()
}

/// Keeps the execute bits of an input (a script or program passed as an
/// argument must stay runnable).
fn exec_bits(host: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(host)
        .map(|m| m.permissions().mode() & 0o111)
        .unwrap_or(0)
}

/// The applet names busybox was built with (`busybox --list`).
fn busybox_applets(busybox: &Path) -> Result<Vec<String>> {
    let out = Command::new(busybox)
        .arg("--list")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::HostTool {
            program: "busybox --list".into(),
            subject: busybox.to_path_buf(),
            reason: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(LabError::HostTool {
            program: "busybox --list".into(),
            subject: busybox.to_path_buf(),
            reason: format!("it exited with {}", out.status),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_string)
        .collect())
}

/// The shared libraries (and dynamic loader) `exe` needs, at the paths the
/// host's dynamic loader resolves them to. Static programs need none.
fn shared_libraries(exe: &Path) -> Result<Vec<PathBuf>> {
    let interp = match elf::linkage(exe)? {
        Linkage::Static | Linkage::NotElf64 => return Ok(Vec::new()),
        Linkage::Dynamic(interp) => interp,
    };
    let out = Command::new("ldd")
        .arg(exe)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::HostTool {
            program: "ldd".into(),
            subject: exe.to_path_buf(),
            reason: format!("{e}; install it with `apt-get install libc-bin`"),
        })?;
    if !out.status.success() {
        return Err(LabError::HostTool {
            program: "ldd".into(),
            subject: exe.to_path_buf(),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let mut libs = parse_ldd(&String::from_utf8_lossy(&out.stdout)).map_err(|library| {
        LabError::LibraryNotFound {
            exe: exe.to_path_buf(),
            library,
        }
    })?;
    if !libs.contains(&interp) {
        libs.push(interp);
    }
    Ok(libs)
}

/// Parses `ldd` output. Lines look like `libc.so.6 => /lib/.../libc.so.6
/// (0x...)`, `/lib64/ld-linux-x86-64.so.2 (0x...)` or `linux-vdso.so.1
/// (0x...)` (provided by the kernel, skipped). A `not found` library is
/// returned as the error.
fn parse_ldd(text: &str) -> std::result::Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let target = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(name.trim().to_string());
                }
                rest
            }
            None => line,
        };
        let path = target.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            let path = PathBuf::from(path);
            if !libs.contains(&path) {
                libs.push(path);
            }
        }
    }
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::super::plan::plan_programs;
    use super::*;

    #[test]
    fn ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert_eq!(
            parse_ldd("\tlibbpf.so.1 => not found\n").unwrap_err(),
            "libbpf.so.1"
        );
    }

    #[test]
    fn extra_programs_bring_their_libraries() {
        // The test binary itself is dynamically linked on Debian.
        let me = std::env::current_exe().unwrap();
        let programs = plan_programs(std::slice::from_ref(&me), Path::new("/")).unwrap();
        let mut cpio = Builder::new(Vec::new());
        let mut taken = HashMap::new();
        add_programs(&mut cpio, &mut taken, &programs).unwrap();
        // Adding the same program again is harmless.
        add_programs(&mut cpio, &mut taken, &programs).unwrap();
        let bytes = cpio.finish().unwrap();
        let entries = crate::cpio::read_entries(&bytes).unwrap();
        let find = |p: &Path| {
            let rel = p.strip_prefix("/").unwrap();
            entries.iter().find(|e| e.name == rel)
        };
        let exe = find(&me).expect("the program is in the archive");
        assert_eq!(exe.mode, 0o100755);
        assert_eq!(exe.data.len() as u64, fs::metadata(&me).unwrap().len());
        let Linkage::Dynamic(interp) = elf::linkage(&me).unwrap() else {
            panic!("the test binary should be dynamically linked");
        };
        assert!(find(&interp).is_some(), "the dynamic loader is missing");
        for lib in shared_libraries(&me).unwrap() {
            assert!(find(&lib).is_some(), "{} is missing", lib.display());
        }

        // A path the lab already uses for something else is a conflict.
        let mut cpio = Builder::new(Vec::new());
        let mut taken = HashMap::new();
        taken.insert(me.clone(), Occupant::Fixed("a kernel module"));
        let err = add_programs(&mut cpio, &mut taken, &programs).unwrap_err();
        assert!(matches!(err, LabError::InputConflict { .. }), "{err}");
        assert!(err.to_string().contains("a kernel module"), "{err}");
    }
}
