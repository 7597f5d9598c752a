//! The files `bootscope lab` writes back and reads, checked before the lab
//! starts by the rules of every other command's outputs
//! ([`crate::common::check_output`]: the safe writer's link and directory
//! rules, a memory device that takes no data refused) and refused where an
//! output is one of the files carried in ([`crate::common::check_not_inputs`]),
//! with one exception: a file named by both `--input` and the lab's own
//! `--output` is carried in, and the copy the command in the lab wrote is
//! brought back over it after the run (a disk image the guest writes,
//! `bootscope lab --input IMG --output IMG -- run --disk IMG ...`).

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::common::{check_not_inputs, check_output};

/// The label of an output named by the command run in the lab.
const INNER_OUTPUT: &str = "the output of the command in the lab";

/// Checks the lab's own `--output` files (`own`), the outputs of the
/// command it runs (`inner`), and that none of them is one of the files it
/// carries in (`--program`, the `--exe` program or bootscope; `--input`
/// too, unless the lab's own `--output` names it: that file is carried in
/// and brought back). An output whose directory does not exist yet is not
/// probed: the lab makes that directory when it writes the file back.
pub(crate) fn check(
    own: &[PathBuf],
    inner: &[PathBuf],
    inputs: &[PathBuf],
    programs: &[PathBuf],
    exe: &Path,
) -> Result<()> {
    let own: Vec<(&str, &Path)> = own.iter().map(|p| ("--output", p.as_path())).collect();
    let inner: Vec<(&str, &Path)> = inner.iter().map(|p| (INNER_OUTPUT, p.as_path())).collect();
    for (flag, p) in own.iter().chain(&inner) {
        if directory_exists(p) {
            check_output(flag, p)?;
        }
    }
    let programs: Vec<(&str, &Path)> = programs
        .iter()
        .map(|p| ("--program", p.as_path()))
        .chain(std::iter::once(("the program run in the lab", exe)))
        .collect();
    let all: Vec<(&str, &Path)> = inputs
        .iter()
        .map(|p| ("--input", p.as_path()))
        .chain(programs.iter().copied())
        .collect();
    check_not_inputs(&own, &programs)?;
    check_not_inputs(&inner, &all)
}

/// Whether the directory `p` would be written in exists (a relative name's
/// is the current directory).
fn directory_exists(p: &Path) -> bool {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.is_dir(),
        _ => true,
    }
}
