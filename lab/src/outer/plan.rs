//! Argument and output planning: which host files the program needs in the
//! lab guest (at the same paths), which files come back, and what the
//! arguments become.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use crate::util;
use crate::{LabError, Result};

/// Guest directories whose contents come from the guest kernel, not from
/// the archive: host files there are never carried in as inputs.
const GUEST_PSEUDO_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// A host file carried into the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    /// Where to read it on the host.
    pub host: PathBuf,
    /// Absolute path in the guest.
    pub guest: PathBuf,
}

/// The arguments as the guest will see them, and the files involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPlan {
    /// Arguments for the program in the guest.
    pub args: Vec<OsString>,
    /// Files to carry in.
    pub inputs: Vec<InputFile>,
    /// Absolute host (and guest) paths of the output files.
    pub outputs: Vec<PathBuf>,
    /// The directories of the output files as named (relative to `cwd` or
    /// absolute), created in the guest before the program starts.
    pub output_dirs: Vec<PathBuf>,
    /// Directory the program starts in, in the guest as on the host.
    pub cwd: PathBuf,
}

/// Works out which files go into the guest and which come back.
///
/// * Each of `outputs` (relative to `cwd` or absolute) is brought back; see
///   [`LabConfig::outputs`](super::LabConfig::outputs) for what is refused.
/// * Any argument, or the value of any `--flag=VALUE` argument, that names
///   an existing regular file is an input, unless it names one of the
///   outputs. Its text stays as it is: the guest starts in `cwd` and has
///   the file at the same path. The exception is a path through `..` that
///   would not reach the same file in the guest (a `..` after a directory
///   name, or a symbolic link on the way): it becomes the file's canonical
///   path, where the guest has it.
///
/// `extra_inputs` must exist; a directory among them is carried in with
/// all the files under it (see [`LabConfig::extra_inputs`](super::LabConfig::extra_inputs)).
///
/// Host files under `/proc`, `/sys` and `/dev` are not carried in: the
/// guest kernel provides its own.
pub fn plan_arguments(
    args: &[OsString],
    outputs: &[PathBuf],
    extra_inputs: &[PathBuf],
    cwd: &Path,
) -> Result<ArgPlan> {
    let mut plan = ArgPlan {
        args: Vec::with_capacity(args.len()),
        inputs: Vec::new(),
        outputs: Vec::new(),
        output_dirs: Vec::new(),
        cwd: cwd.to_path_buf(),
    };
    for output in outputs {
        plan_output(&mut plan, output)?;
    }
    let mut inputs = Inputs::default();
    for arg in args {
        let planned = plan_argument(arg, cwd, &plan.outputs, &mut inputs)?;
        plan.args.push(planned);
    }
    for extra in extra_inputs {
        plan_extra_input(extra, cwd, &plan.outputs, &mut inputs)?;
    }
    plan.inputs = inputs.files;
    Ok(plan)
}

/// The inputs planned so far, each guest path once.
#[derive(Default)]
struct Inputs {
    files: Vec<InputFile>,
    guest_paths: HashSet<PathBuf>,
}

impl Inputs {
    fn add(&mut self, input: InputFile) {
        if self.guest_paths.insert(input.guest.clone()) {
            self.files.push(input);
        }
    }
}

/// Adds `output` to the plan's outputs (absolute) and its directory to
/// the ones made in the guest, or says why it cannot be brought back.
fn plan_output(plan: &mut ArgPlan, output: &Path) -> Result<()> {
    let bad = |reason: String| LabError::BadOutput {
        path: output.to_path_buf(),
        reason,
    };
    let text = output.as_os_str().as_bytes();
    if text.is_empty() {
        return Err(bad("is an empty path; name a file".into()));
    }
    if text.contains(&0) {
        return Err(bad("contains a NUL byte".into()));
    }
    let absolute = util::absolute_lexical(&plan.cwd, output);
    if absolute == Path::new("/")
        || text.ends_with(b"/")
        || fs::metadata(&absolute).is_ok_and(|m| m.is_dir())
    {
        return Err(bad("is a directory; name a file".into()));
    }
    if plan.outputs.contains(&absolute) {
        return Err(bad(format!(
            "is named twice (as {}); each output file is brought back once, so name it once",
            absolute.display()
        )));
    }
    plan.outputs.push(absolute);
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        plan.output_dirs.push(parent.to_path_buf());
    }
    Ok(())
}

/// The argument as the guest gets it; a file it names (itself or as the
/// value of `--flag=VALUE`) is added to `inputs`.
fn plan_argument(
    arg: &OsStr,
    cwd: &Path,
    outputs: &[PathBuf],
    inputs: &mut Inputs,
) -> Result<OsString> {
    if arg.as_bytes().contains(&0) {
        return Err(LabError::InvalidConfig(format!(
            "argument {arg:?} contains a NUL byte"
        )));
    }
    let text = arg.as_bytes();
    if text.starts_with(b"-") {
        if let Some(eq) = text.iter().position(|&b| b == b'=') {
            let (flag, value) = (&text[..eq], OsStr::from_bytes(&text[eq + 1..]));
            let new_value = match input_for(value, cwd, outputs)? {
                Some((input, rewritten)) => {
                    inputs.add(input);
                    rewritten
                }
                None => value.to_os_string(),
            };
            let mut joined = flag.to_vec();
            joined.push(b'=');
            joined.extend_from_slice(new_value.as_bytes());
            return Ok(OsString::from_vec(joined));
        }
    }
    match input_for(arg, cwd, outputs)? {
        Some((input, rewritten)) => {
            inputs.add(input);
            Ok(rewritten)
        }
        None => with_options(arg, cwd, outputs, inputs),
    }
}

/// An argument `PATH,OPTIONS` whose `PATH` is an existing file (`run
/// --disk IMAGE,readonly`): the file is carried in, and the argument names
/// it where the guest has it, options kept.
fn with_options(
    arg: &OsStr,
    cwd: &Path,
    outputs: &[PathBuf],
    inputs: &mut Inputs,
) -> Result<OsString> {
    let text = arg.as_bytes();
    let Some(comma) = text.iter().position(|&b| b == b',') else {
        return Ok(arg.to_os_string());
    };
    let (path, options) = (OsStr::from_bytes(&text[..comma]), &text[comma..]);
    match input_for(path, cwd, outputs)? {
        Some((input, rewritten)) => {
            inputs.add(input);
            let mut joined = rewritten.into_vec();
            joined.extend_from_slice(options);
            Ok(OsString::from_vec(joined))
        }
        None => Ok(arg.to_os_string()),
    }
}

/// Adds an `--input` (a file, or a directory with everything under it) to
/// `inputs`; refuses an output inside a carried-in directory.
fn plan_extra_input(
    extra: &Path,
    cwd: &Path,
    outputs: &[PathBuf],
    inputs: &mut Inputs,
) -> Result<()> {
    let host = if extra.is_absolute() {
        extra.to_path_buf()
    } else {
        cwd.join(extra)
    };
    if fs::metadata(&host).map(|m| m.is_dir()).unwrap_or(false) {
        let (guest_dir, _) = guest_location(extra.as_os_str(), cwd, &host)?;
        if let Some(output) = outputs.iter().find(|o| {
            o.starts_with(&guest_dir) || o.starts_with(util::absolute_lexical(cwd, extra))
        }) {
            return Err(LabError::BadOutput {
                path: output.clone(),
                reason: format!(
                    "lies in the directory {} that --input carries in; bring back a file outside it, or carry in only the files it needs",
                    extra.display()
                ),
            });
        }
        if GUEST_PSEUDO_DIRS
            .iter()
            .any(|dir| guest_dir.starts_with(dir))
        {
            return Ok(());
        }
        let mut files = Vec::new();
        directory_inputs(&host, &guest_dir, &mut HashSet::new(), &mut files)?;
        for input in files {
            inputs.add(input);
        }
        return Ok(());
    }
    match input_for(extra.as_os_str(), cwd, &[])? {
        Some((input, _)) => {
            inputs.add(input);
            Ok(())
        }
        None => Err(LabError::InputMissing {
            path: extra.to_path_buf(),
        }),
    }
}

/// Adds every regular file under the host directory `host_dir` to `out`, at
/// the same relative path under `guest_dir`, in name order.
///
/// Symbolic links are followed, so the guest gets the files they point to
/// (even outside the directory); links that point nowhere, and special
/// files such as sockets, are skipped. `visited` holds the canonical paths
/// of the directories already walked, so a link back up the tree ends the
/// walk there instead of looping.
fn directory_inputs(
    host_dir: &Path,
    guest_dir: &Path,
    visited: &mut HashSet<PathBuf>,
    out: &mut Vec<InputFile>,
) -> Result<()> {
    let canonical = fs::canonicalize(host_dir).map_err(|e| LabError::io("resolve", host_dir, e))?;
    if !visited.insert(canonical) {
        return Ok(());
    }
    let mut names: Vec<OsString> = fs::read_dir(host_dir)
        .map_err(|e| LabError::io("list", host_dir, e))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<io::Result<_>>()
        .map_err(|e| LabError::io("list", host_dir, e))?;
    names.sort();
    for name in names {
        let host = host_dir.join(&name);
        let guest = guest_dir.join(&name);
        // `metadata` follows links; a dangling link has none.
        let Ok(meta) = fs::metadata(&host) else {
            continue;
        };
        if meta.is_dir() {
            directory_inputs(&host, &guest, visited, out)?;
        } else if meta.is_file() {
            out.push(InputFile { host, guest });
        }
    }
    Ok(())
}

/// The programs of [`LabConfig::extra_programs`](super::LabConfig::extra_programs) as files to carry in at
/// their host paths (relative paths are taken from `cwd`).
pub fn plan_programs(programs: &[PathBuf], cwd: &Path) -> Result<Vec<InputFile>> {
    let mut planned: Vec<InputFile> = Vec::with_capacity(programs.len());
    for program in programs {
        let missing = |reason: &str| LabError::ProgramMissing {
            path: program.clone(),
            reason: reason.to_string(),
        };
        if program.as_os_str().as_bytes().contains(&0) {
            return Err(missing("its path contains a NUL byte"));
        }
        let host = if program.is_absolute() {
            program.clone()
        } else {
            cwd.join(program)
        };
        match fs::metadata(&host) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => return Err(missing("it is not a regular file")),
            Err(e) => return Err(missing(&e.to_string())),
        }
        let (guest, _) = guest_location(program.as_os_str(), cwd, &host)?;
        if GUEST_PSEUDO_DIRS.iter().any(|dir| guest.starts_with(dir)) {
            return Err(missing(
                "it lives under /proc, /sys or /dev, which the guest kernel provides",
            ));
        }
        if !planned.iter().any(|p| p.guest == guest) {
            planned.push(InputFile { host, guest });
        }
    }
    Ok(planned)
}

/// If `value` names an existing regular file other than one of `outputs`
/// (absolute paths), where to put it in the guest and what the argument
/// becomes.
fn input_for(
    value: &OsStr,
    cwd: &Path,
    outputs: &[PathBuf],
) -> Result<Option<(InputFile, OsString)>> {
    if value.is_empty() {
        return Ok(None);
    }
    let path = Path::new(value);
    let host = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    if !fs::metadata(&host).map(|m| m.is_file()).unwrap_or(false) {
        return Ok(None);
    }
    if outputs.contains(&util::absolute_lexical(cwd, path)) {
        return Ok(None);
    }
    let (guest, rewritten) = guest_location(value, cwd, &host)?;
    if GUEST_PSEUDO_DIRS.iter().any(|dir| guest.starts_with(dir)) {
        return Ok(None);
    }
    Ok(Some((InputFile { host, guest }, rewritten)))
}

/// Where the existing host file or directory `host`, named `value` relative
/// to `cwd`, goes in the guest, and what an argument naming it becomes.
///
/// The guest starts in `cwd` and holds no symbolic links of the host, so a
/// path without `..` reaches the same place there as its lexically
/// resolved absolute path, and stays as it is. So does a relative path
/// whose `..` components all come first (they only climb out of `cwd`,
/// which exists in the guest with all its parents) when it leads to the
/// file's canonical path. Any other path through `..` may pass through a
/// link or a directory the guest lacks: the guest gets the file at its
/// canonical path, and the argument becomes that path.
fn guest_location(value: &OsStr, cwd: &Path, host: &Path) -> Result<(PathBuf, OsString)> {
    let path = Path::new(value);
    let lexical = util::absolute_lexical(cwd, path);
    if !path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Ok((lexical, value.to_os_string()));
    }
    let canonical = fs::canonicalize(host).map_err(|e| LabError::io("resolve", host, e))?;
    let leading_only = !path.is_absolute()
        && path
            .components()
            .skip_while(|c| matches!(c, Component::ParentDir | Component::CurDir))
            .all(|c| !matches!(c, Component::ParentDir));
    if leading_only && canonical == lexical {
        Ok((lexical, value.to_os_string()))
    } else {
        Ok((canonical.clone(), canonical.into_os_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::temp_dir;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_are_planned() {
        let dir = temp_dir("plan-test").unwrap();
        let cwd = dir.path().join("work");
        fs::create_dir_all(cwd.join("images")).unwrap();
        fs::write(cwd.join("images/vmlinux"), b"k").unwrap();
        fs::write(cwd.join("run"), b"not a subcommand").unwrap();
        fs::write(cwd.join("old.json"), b"an earlier output").unwrap();
        fs::write(dir.path().join("up.img"), b"i").unwrap();
        let abs_initrd = dir.path().join("up.img");
        let mut args = os(&[
            "run",
            "--kernel",
            "images/vmlinux",
            "--initrd=../up.img",
            "images/../../up.img",
        ]);
        args.extend(os(&bootscope_testkit::OUTPUT_LIKE_ARGS));
        args.extend(os(&["-o", "old.json", "--timeline=t.json"]));
        let mut all = args.clone();
        all.push(abs_initrd.clone().into_os_string());
        let outputs = [
            PathBuf::from("out/../t.json"),
            PathBuf::from("/abs/o.txt"),
            PathBuf::from("old.json"),
        ];
        let plan = plan_arguments(&all, &outputs, &[], &cwd).unwrap();
        // Only the path through a directory and back is replaced; nothing
        // else is touched, output-like flags included.
        let canonical_img = fs::canonicalize(&abs_initrd).unwrap();
        let mut want = args.clone();
        want[4] = canonical_img.clone().into_os_string();
        want.push(abs_initrd.clone().into_os_string());
        assert_eq!(plan.args, want);
        assert_eq!(
            plan.outputs,
            vec![
                cwd.join("t.json"),
                PathBuf::from("/abs/o.txt"),
                cwd.join("old.json")
            ]
        );
        assert_eq!(
            plan.output_dirs,
            vec![PathBuf::from("out/.."), PathBuf::from("/abs")]
        );
        let guests: Vec<&Path> = plan.inputs.iter().map(|i| i.guest.as_path()).collect();
        assert!(guests.contains(&cwd.join("run").as_path()));
        assert!(guests.contains(&cwd.join("images/vmlinux").as_path()));
        assert!(guests.contains(&canonical_img.as_path()));
        // An earlier copy of an output is not carried in.
        assert!(!guests.contains(&cwd.join("old.json").as_path()));
        assert_eq!(plan.inputs.len(), 3, "{:?}", plan.inputs);
        assert_eq!(plan.cwd, cwd);

        let err = plan_arguments(&[], &[], &[cwd.join("missing")], &cwd).unwrap_err();
        assert!(matches!(err, LabError::InputMissing { .. }), "{err}");
        assert!(err.is_bad_input());
        let extra = plan_arguments(&[], &[], &[PathBuf::from("images/vmlinux")], &cwd).unwrap();
        assert_eq!(extra.inputs[0].guest, cwd.join("images/vmlinux"));
        // /proc files are the guest kernel's business.
        let proc_arg = plan_arguments(&os(&["/proc/self/status"]), &[], &[], &cwd).unwrap();
        assert!(proc_arg.inputs.is_empty());
    }

    #[test]
    fn a_file_with_options_is_carried_in() {
        let dir = temp_dir("plan-options-test").unwrap();
        let img = dir.path().join("disk.img");
        std::fs::write(&img, b"x").unwrap();
        let arg = format!("{},readonly", img.display());
        let plan = plan_arguments(
            &[OsString::from("--disk"), OsString::from(&arg)],
            &[],
            &[],
            dir.path(),
        )
        .unwrap();
        assert_eq!(plan.args[1], OsString::from(&arg));
        assert!(plan.inputs.iter().any(|i| i.host == img));
        // Not a file before the comma: left alone, nothing carried.
        let plan = plan_arguments(&[OsString::from("a,b")], &[], &[], dir.path()).unwrap();
        assert_eq!(plan.args[0], OsString::from("a,b"));
        assert!(plan.inputs.is_empty());
    }

    #[test]
    fn bad_outputs_are_refused() {
        let dir = temp_dir("plan-output-test").unwrap();
        let cwd = dir.path().join("work");
        fs::create_dir_all(cwd.join("data/sub")).unwrap();
        fs::write(cwd.join("data/sub/f"), b"f").unwrap();
        let refused = |outputs: &[&str], inputs: &[&str], what: &str| {
            let outputs: Vec<PathBuf> = outputs.iter().map(PathBuf::from).collect();
            let inputs: Vec<PathBuf> = inputs.iter().map(PathBuf::from).collect();
            let err = plan_arguments(&[], &outputs, &inputs, &cwd).unwrap_err();
            assert!(matches!(err, LabError::BadOutput { .. }), "{err}");
            assert!(err.is_bad_input());
            let text = err.to_string();
            assert!(text.contains(what), "{text}");
            text
        };
        let text = refused(&["p.json", "./p.json"], &[], "named twice");
        assert!(text.contains("p.json"), "{text}");
        refused(&["data"], &[], "is a directory");
        refused(&["new/"], &[], "is a directory");
        refused(&[""], &[], "empty path");
        let text = refused(
            &["data/sub/p.json"],
            &["data"],
            "lies in the directory data",
        );
        assert!(
            text.contains(&*cwd.join("data/sub/p.json").to_string_lossy()),
            "{text}"
        );
        refused(
            &[&*cwd.join("data/x").to_string_lossy()],
            &["data/sub/.."],
            "lies in",
        );
        // Beside a carried-in directory, or carried in as a file: fine.
        let ok = plan_arguments(
            &[],
            &[PathBuf::from("data2/p.json"), PathBuf::from("data/sub/f")],
            &[PathBuf::from("data/sub/f")],
            &cwd,
        )
        .unwrap();
        assert_eq!(ok.inputs.len(), 1);
        assert_eq!(ok.outputs.len(), 2);
    }

    #[test]
    fn directory_inputs_are_carried_recursively() {
        let dir = temp_dir("plan-dir-test").unwrap();
        let cwd = dir.path().join("work");
        let data = cwd.join("data");
        fs::create_dir_all(data.join("sub/deeper")).unwrap();
        fs::write(data.join("a.rom"), b"a").unwrap();
        fs::write(data.join("sub/b.bin"), b"b").unwrap();
        fs::write(data.join("sub/deeper/c"), b"c").unwrap();
        let outside = dir.path().join("outside.bin");
        fs::write(&outside, b"o").unwrap();
        use std::os::unix::fs::symlink;
        symlink("a.rom", data.join("alias.rom")).unwrap();
        symlink(&outside, data.join("sub/outside.bin")).unwrap();
        symlink("missing", data.join("dangling")).unwrap();
        // Links back up the tree must not make the walk loop.
        symlink("..", data.join("sub/up")).unwrap();
        symlink(".", data.join("self")).unwrap();

        let plan = plan_arguments(&[], &[], &[PathBuf::from("data")], &cwd).unwrap();
        let got: Vec<(PathBuf, PathBuf)> = plan
            .inputs
            .iter()
            .map(|i| (i.host.clone(), i.guest.clone()))
            .collect();
        let host = |rel: &str| cwd.join("data").join(rel);
        let guest = |rel: &str| cwd.join("data").join(rel);
        assert_eq!(
            got,
            vec![
                (host("a.rom"), guest("a.rom")),
                (host("alias.rom"), guest("alias.rom")),
                (host("sub/b.bin"), guest("sub/b.bin")),
                (host("sub/deeper/c"), guest("sub/deeper/c")),
                (host("sub/outside.bin"), guest("sub/outside.bin")),
            ]
        );
        assert!(plan.args.is_empty() && plan.outputs.is_empty());

        // An absolute directory keeps its path; a file inside it named as an
        // argument too is carried once.
        let abs = plan_arguments(
            &[data.join("a.rom").into_os_string()],
            &[],
            std::slice::from_ref(&data),
            &cwd,
        )
        .unwrap();
        assert_eq!(abs.inputs.len(), 5);
        assert_eq!(abs.inputs[0].guest, data.join("a.rom"));
        // Directories under /proc, /sys and /dev stay the guest kernel's.
        let sys = plan_arguments(&[], &[], &[PathBuf::from("/sys/kernel")], &cwd).unwrap();
        assert!(sys.inputs.is_empty());
    }

    #[test]
    fn extra_programs_are_planned() {
        let dir = temp_dir("plan-programs-test").unwrap();
        let cwd = dir.path().to_path_buf();
        fs::create_dir_all(cwd.join("bin")).unwrap();
        fs::write(cwd.join("bin/tool"), b"#!/bin/sh\n").unwrap();
        let planned = plan_programs(
            &[
                PathBuf::from("bin/tool"),
                cwd.join("bin/tool"),
                PathBuf::from("/bin/busybox"),
            ],
            &cwd,
        );
        if !Path::new("/bin/busybox").is_file() {
            assert!(matches!(planned, Err(LabError::ProgramMissing { .. })));
            return;
        }
        let planned = planned.unwrap();
        assert_eq!(
            planned,
            vec![
                InputFile {
                    host: cwd.join("bin/tool"),
                    guest: cwd.join("bin/tool"),
                },
                InputFile {
                    host: PathBuf::from("/bin/busybox"),
                    guest: PathBuf::from("/bin/busybox"),
                },
            ]
        );
        for bad in [cwd.join("missing"), cwd.join("bin")] {
            let err = plan_programs(std::slice::from_ref(&bad), &cwd).unwrap_err();
            assert!(matches!(err, LabError::ProgramMissing { .. }), "{err}");
            assert!(err.to_string().contains(&*bad.to_string_lossy()), "{err}");
        }
    }
}
