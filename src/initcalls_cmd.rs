//! `bootscope initcalls CONSOLE-LOG`: the initcalls of a boot under another
//! VMM, from `initcall_debug` lines its guest printed on the console. The
//! fallback where bootscope cannot read guest memory (`run --initcalls`
//! reads the log from it instead and costs no console lines).

use std::path::PathBuf;

use crate::common::{check_outputs_of, usage, write_output, Failure};

#[derive(clap::Args)]
#[command(after_help = "Example (QEMU, profiled):
  bootscope profile -o qemu.json -- qemu-system-x86_64 ... \\
      -append \"console=ttyS0 initcall_debug ignore_loglevel\" -serial file:console.log
  bootscope initcalls console.log --output initcalls.json

Printing initcall_debug on the console costs the guest two console lines per
initcall (thousands of serial port exits); `bootscope run --initcalls` does
not (docs/initcalls.md).")]
pub struct InitcallsArgs {
    /// A guest console log with `initcall_debug` lines and printk
    /// timestamps (the kernel command line needs `initcall_debug
    /// ignore_loglevel`; add `dyndbg="func parse_args +p"` for the levels).
    #[arg(value_name = "CONSOLE-LOG")]
    pub console: PathBuf,
    /// Write the initcalls as JSON (the timeline's `initcalls` object,
    /// docs/timeline-schema.md).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// How many of the slowest initcalls to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

pub fn run(args: InitcallsArgs) -> Result<i32, Failure> {
    if let Some(o) = &args.output {
        check_outputs_of(&[("--output", o)], &[("CONSOLE-LOG", &args.console)]).map_err(usage)?;
    }
    let bytes = bootscope_model::input::read_input(&args.console).map_err(|e| {
        usage(anyhow::anyhow!(
            "cannot read the console log {}: {e}",
            args.console.display()
        ))
    })?;
    let doc = bootscope_vmm::kernel_log::from_console(&String::from_utf8_lossy(&bytes))
        .map_err(|e| usage(anyhow::anyhow!("{}: {e}", args.console.display())))?;
    if doc.initcalls.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "{} has no initcall_debug lines with printk timestamps: boot the guest with \
             `initcall_debug ignore_loglevel` on its kernel command line and its console \
             written to a file (QEMU: -serial file:FILE)",
            args.console.display()
        )));
    }
    if let Some(o) = &args.output {
        write_output(o, &serde_json::to_vec_pretty(&doc)?)?;
    }
    let text = format!(
        "{}method: {}\n",
        bootscope_vmm::kernel_log::summary(&doc, args.top),
        doc.method
    );
    crate::stdout::print(text).map_err(crate::stdout::failure)?;
    Ok(0)
}
