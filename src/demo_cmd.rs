//! `bootscope demo`: the built-in default guest booted by `run` on host KVM
//! when it boots a stock kernel, else by `run` inside the lab. The demo is
//! that command line, which the dispatcher then runs.

use std::ffi::OsString;
use std::path::PathBuf;

use bootscope_vmm::host::{self, HostRoot, KvmFlavour};

use crate::common::{check_output, default_guest, usage, Failure};

/// The bootscope arguments (after the program name) the demo runs:
/// `run ...` natively, or `lab ... -- run ...`.
pub(crate) fn command_line(timeline: Option<PathBuf>) -> Result<Vec<OsString>, Failure> {
    let flavour = host::kvm_flavour(&HostRoot::default());
    // The default guest is prepared on this host, so the lab only carries the
    // two files in.
    let (kernel, initrd) = default_guest().map_err(usage)?;
    let mut run_args: Vec<OsString> = vec![
        "run".into(),
        "--kernel".into(),
        kernel.into(),
        "--initrd".into(),
        initrd.into(),
        "--timeout".into(),
        "300".into(),
    ];
    if let Some(t) = &timeline {
        check_output("--timeline", t).map_err(usage)?;
        run_args.push("--timeline".into());
        run_args.push(t.clone().into());
    }
    if flavour.boots_stock_kernels() {
        eprintln!("bootscope: host KVM is {flavour}: booting the default guest natively");
        return Ok(run_args);
    }
    let why = match flavour {
        KvmFlavour::Pvm => "host KVM is PVM, which cannot boot a stock kernel",
        _ => "host has no usable KVM",
    };
    eprintln!(
        "bootscope: {why}: booting the default guest in the lab (nested KVM under QEMU's emulator)"
    );
    Ok(in_the_lab(run_args))
}

/// `lab ... -- RUN-ARGS`: the lab machine the demo boots its guest in.
pub(crate) fn in_the_lab(run_args: Vec<OsString>) -> Vec<OsString> {
    let lab = [
        "lab",
        "--memory",
        "2G",
        "--numa-nodes",
        "1",
        "--timeout",
        "900",
        "--retries",
        "1",
        "--",
    ];
    lab.into_iter()
        .map(OsString::from)
        .chain(run_args)
        .collect()
}
