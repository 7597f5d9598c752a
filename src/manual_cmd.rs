//! `bootscope completions` and `bootscope man`: the shell completion
//! scripts and the manual pages, rendered from the command line's clap
//! definition (given by the dispatcher), so they cannot fall out of step
//! with the flags.

use std::path::Path;

use anyhow::Context;

use crate::common::{usage, write_output, Failure};

/// `bootscope completions SHELL`: the script on standard output.
pub(crate) fn completions(
    mut cmd: clap::Command,
    shell: clap_complete::Shell,
) -> Result<i32, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "bootscope", &mut script);
    crate::stdout::print(script).map_err(crate::stdout::failure)?;
    Ok(0)
}

/// Writes `bootscope.1` and `bootscope-SUBCOMMAND.1` for every subcommand
/// into `dir`.
pub(crate) fn man(cmd: clap::Command, dir: &Path) -> Result<i32, Failure> {
    if dir.exists() && !dir.is_dir() {
        return Err(usage(anyhow::anyhow!(
            "--out-dir {}: not a directory; give a directory to write the manual pages into",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out-dir {}: cannot create the directory", dir.display()))
        .map_err(usage)?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut written = 0;
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    for page in pages {
        let man = clap_mangen::Man::new(page).manual("bootscope manual");
        let path = dir.join(man.get_filename());
        let mut roff = Vec::new();
        man.render(&mut roff)?;
        write_output(&path, &roff)?;
        written += 1;
    }
    eprintln!("bootscope: {written} manual pages in {}", dir.display());
    Ok(0)
}
