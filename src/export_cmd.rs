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
        None => {
            crate::stdout::print(for_terminal(text, format)?).map_err(crate::stdout::failure)?
        }
    }
    Ok(0)
}

/// What goes to standard output: as rendered, unless it is a terminal.
/// There text gets its control characters shown escaped (the text rule:
/// names come from the target and the guest), and a binary format (pprof)
/// is refused, as its bytes would be taken as escape sequences.
fn for_terminal(
    text: Vec<u8>,
    format: bootscope_profiler::export::Format,
) -> Result<Vec<u8>, Failure> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Ok(text);
    }
    use bootscope_profiler::export::Format;
    if matches!(format, Format::Pprof | Format::FaultTailPprof) {
        return Err(usage(anyhow::anyhow!(
            "--format pprof is binary and standard output is a terminal: give --output FILE \
             or redirect standard output"
        )));
    }
    Ok(bootscope_model::text::printable_bytes(&text, &['\n', '\t']).into_bytes())
}
