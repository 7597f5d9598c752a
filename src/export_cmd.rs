//! `bootscope export`: a profile or a boot timeline converted to JSON, CSV,
//! Prometheus text or a Chrome trace (docs/export.md).

use std::path::Path;

use crate::common::{check_outputs_of, usage, write_output, Failure};

pub(crate) fn run(
    format: &str,
    table: Option<&str>,
    output: Option<&Path>,
    input: &Path,
) -> Result<i32, Failure> {
    use bootscope_profiler::export;
    // The library's messages already include their causes: print them once.
    let bad_input = |e: &dyn std::fmt::Display| usage(anyhow::anyhow!("{e}"));
    let format = export::Format::parse(format, table).map_err(|e| bad_input(&e))?;
    if let Some(o) = output {
        check_outputs_of(&[("--output", o)], &[("INPUT", input)]).map_err(usage)?;
    }
    let (profile, _) = export::read_input(input).map_err(|e| bad_input(&e))?;
    let text = export::render_bytes(&profile, format);
    match output {
        Some(path) => write_output(path, &text)?,
        None => crate::stdout::print(text).map_err(crate::stdout::failure)?,
    }
    Ok(0)
}
