//! The outer guest's `/init`: the shell script `init.sh` with this run's
//! values filled in.
//!
//! The script prepares the file systems bootscope uses (proc, sysfs,
//! devtmpfs, tracefs, debugfs, bpffs), starts the heartbeat, loads the KVM
//! modules, reports whether `/dev/kvm` appeared, runs the program, sends
//! the results over ttyS1 and powers off. The program runs with stdin from
//! `/dev/null`, or, given a [`LabTerminal`], in a session of its own with
//! the console (ttyS0) as its controlling terminal, sized and typed as the
//! host's.
//!
//! `init.sh` is a complete shell script whose values are placeholders
//! `@NAME@`. A placeholder alone on its line stands for a block of lines
//! (none or more, each indented like the placeholder); anywhere else it
//! stands for text within the line. Values are inserted as they are, never
//! scanned for placeholders themselves; everything from the host that
//! reaches the shell is quoted first.

use std::ffi::OsStr;
use std::path::Path;

use super::modules::Module;
use super::plan::ArgPlan;
use super::terminal::LabTerminal;
use crate::guest::DebianKernel;
use crate::{transport, util};

/// The script, with placeholders.
const TEMPLATE: &str = include_str!("init.sh");

/// The value of one placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// Text within a line.
    Text(Vec<u8>),
    /// Whole lines (without their newlines), for a placeholder alone on its
    /// line.
    Lines(Vec<Vec<u8>>),
}

/// How `/init` sets the lab machine up for the program.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct InitOptions<'a> {
    /// Leave address space layout randomization on.
    pub(super) randomize_addresses: bool,
    /// Give the program the console as its terminal.
    pub(super) terminal: Option<&'a LabTerminal>,
}

/// The outer guest's `/init` for `plan`, starting the program as `exe`.
pub(super) fn init_script(
    kernel: &DebianKernel,
    modules: &[Module],
    plan: &ArgPlan,
    exe: &Path,
    options: InitOptions,
) -> Vec<u8> {
    let InitOptions {
        randomize_addresses,
        terminal,
    } = options;
    let q = |s: &OsStr| util::shell_quote(s);
    let load_modules = modules
        .iter()
        .map(|module| {
            let mut line = b"insmod ".to_vec();
            line.extend_from_slice(&q(module.guest.as_os_str()));
            line.extend_from_slice(
                format!(
                    " || echo \"lab: warning: cannot load kernel module {}\"",
                    module.name
                )
                .as_bytes(),
            );
            line
        })
        .collect();
    // LabConfig::randomize_addresses says why it is off by default.
    let address_randomization = if randomize_addresses {
        Vec::new()
    } else {
        vec![b"echo 0 >/proc/sys/kernel/randomize_va_space || echo \"lab: warning: cannot turn address space randomization off\"".to_vec()]
    };
    // As named, from the program's directory: `mkdir -p a/../b` also makes
    // the `a` that the program's path passes through.
    let output_dirs = plan
        .output_dirs
        .iter()
        .map(|dir| [b"mkdir -p -- ".as_slice(), &q(dir.as_os_str())].concat())
        .collect();
    let mut command = q(exe.as_os_str());
    for arg in &plan.args {
        command.push(b' ');
        command.extend_from_slice(&q(arg));
    }
    let (console_mode, run_command) = match terminal {
        // Plain newlines on the console, as on a host terminal or pipe.
        None => (
            vec![b"stty -onlcr 2>/dev/null".to_vec()],
            vec![[command.as_slice(), b" </dev/null"].concat()],
        ),
        // A terminal's newlines (the host terminal is raw), and no echo of
        // keys typed before the program starts.
        Some(t) => (
            vec![b"stty onlcr -echo 2>/dev/null".to_vec()],
            t.env
                .iter()
                .filter(|(k, _)| k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
                .map(|(k, v)| [format!("export {k}=").as_bytes(), &q(OsStr::new(v))].concat())
                .chain([
                    format!(
                        "stty sane onlcr rows {} cols {} </dev/ttyS0 2>/dev/null",
                        t.rows, t.cols
                    )
                    .into_bytes(),
                    [b"setsid -c ", command.as_slice(), b" <>/dev/ttyS0 >&0 2>&1"].concat(),
                ])
                .collect(),
        ),
    };
    let send_outputs = plan
        .outputs
        .iter()
        .enumerate()
        .map(|(index, output)| {
            [
                format!("lab_send {index} ").as_bytes(),
                &q(output.as_os_str()),
            ]
            .concat()
        })
        .collect();
    let send_function = transport::GUEST_SEND_FUNCTION
        .lines()
        .map(|line| line.as_bytes().to_vec())
        .collect();
    fill(
        TEMPLATE,
        &[
            ("LOAD_MODULES", Value::Lines(load_modules)),
            ("KERNEL_VERSION", Value::Text(kernel.version.clone().into())),
            ("ADDRESS_RANDOMIZATION", Value::Lines(address_randomization)),
            ("CWD", Value::Text(q(plan.cwd.as_os_str()))),
            ("OUTPUT_DIRS", Value::Lines(output_dirs)),
            ("CONSOLE_MODE", Value::Lines(console_mode)),
            ("RUN_COMMAND", Value::Lines(run_command)),
            ("LAB_SEND_FUNCTION", Value::Lines(send_function)),
            ("STREAM_HEADER", Value::Text(transport::HEADER.into())),
            ("SEND_OUTPUTS", Value::Lines(send_outputs)),
        ],
    )
}

/// `template` with each placeholder `@NAME@` replaced by its value in
/// `values` (see the module documentation).
///
/// # Panics
///
/// On a placeholder without a value, or a block of lines given for a
/// placeholder within a line: the template is part of the program, so
/// either is a bug the tests catch.
fn fill(template: &str, values: &[(&str, Value)]) -> Vec<u8> {
    let value_of = |name: &str| {
        values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("init.sh placeholder @{name}@ has no value"))
    };
    let mut out = Vec::with_capacity(template.len() * 2);
    for line in template.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let content = body.trim_start_matches([' ', '\t']);
        let indent = &body[..body.len() - content.len()];
        if let Some(name) = placeholder(content).filter(|n| n.len() + 2 == content.len()) {
            if let Value::Lines(lines) = value_of(name) {
                for value_line in lines {
                    out.extend_from_slice(indent.as_bytes());
                    out.extend_from_slice(value_line);
                    out.push(b'\n');
                }
                continue;
            }
        }
        let mut rest = line;
        while let Some(at) = rest.find('@') {
            out.extend_from_slice(&rest.as_bytes()[..at]);
            rest = &rest[at..];
            match placeholder(rest) {
                Some(name) => {
                    match value_of(name) {
                        Value::Text(text) => out.extend_from_slice(text),
                        Value::Lines(_) => {
                            panic!("init.sh placeholder @{name}@ must stand alone on its line")
                        }
                    }
                    rest = &rest[name.len() + 2..];
                }
                None => {
                    out.push(b'@');
                    rest = &rest[1..];
                }
            }
        }
        out.extend_from_slice(rest.as_bytes());
    }
    out
}

/// The name of the placeholder `text` starts with: `@`, one or more of
/// `A-Z` and `_`, `@`.
fn placeholder(text: &str) -> Option<&str> {
    let name_and_rest = text.strip_prefix('@')?;
    let end = name_and_rest.find('@')?;
    let name = &name_and_rest[..end];
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')).then_some(name)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::PathBuf;

    use super::super::initramfs::GUEST_EXE;
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn lines(v: &[&str]) -> Value {
        Value::Lines(v.iter().map(|l| l.as_bytes().to_vec()).collect())
    }

    fn text(s: &str) -> Value {
        Value::Text(s.as_bytes().to_vec())
    }

    #[test]
    fn init_script_is_complete() {
        let kernel = DebianKernel {
            version: "6.1.0-56-amd64".into(),
            vmlinuz: "/boot/vmlinuz-6.1.0-56-amd64".into(),
            modules_dir: "/lib/modules/6.1.0-56-amd64".into(),
        };
        let modules = vec![Module {
            name: "kvm".into(),
            guest: "/lib/modules/6.1.0-56-amd64/kernel/arch/x86/kvm/kvm.ko".into(),
            contents: Vec::new(),
        }];
        let plan = ArgPlan {
            args: os(&["sh", "-c", "echo 'hi'", "--output", "/o/out file"]),
            inputs: Vec::new(),
            outputs: vec![PathBuf::from("/o/out file")],
            output_dirs: vec![PathBuf::from("/o"), PathBuf::from("-rel/..")],
            cwd: PathBuf::from("/home/u"),
        };
        let exe = Path::new(GUEST_EXE);
        let script = String::from_utf8(init_script(
            &kernel,
            &modules,
            &plan,
            exe,
            InitOptions::default(),
        ))
        .unwrap();
        assert!(script.contains("insmod '/lib/modules/6.1.0-56-amd64/kernel/arch/x86/kvm/kvm.ko'"));
        assert!(script.contains("mount -t tracefs tracefs /sys/kernel/tracing"));
        assert!(script.contains("lab: nested KVM ready (kvm_amd npt="));
        let cd = script.find("cd '/home/u'\n").unwrap();
        let mkdir = script.find("mkdir -p -- '/o'\n").unwrap();
        assert!(
            cd < mkdir,
            "output directories are made from the program's directory"
        );
        assert!(script.contains("mkdir -p -- '-rel/..'\n"));
        assert!(script.contains(
            "'/bin/bootscope' 'sh' '-c' 'echo '\\''hi'\\''' '--output' '/o/out file' </dev/null\n"
        ));
        assert!(script.contains("lab_send 0 '/o/out file'\n"));
        assert!(script.contains("echo \"EXIT $lab_code\""));
        assert!(script.trim_end().ends_with("poweroff -f"));
        assert!(script.contains(">/dev/ttyS2"), "the heartbeat");
        assert!(script.contains("echo 0 >/proc/sys/kernel/randomize_va_space"));
        let keep_aslr = InitOptions {
            randomize_addresses: true,
            terminal: None,
        };
        let kept =
            String::from_utf8(init_script(&kernel, &modules, &plan, exe, keep_aslr)).unwrap();
        assert!(!kept.contains("randomize_va_space"));
    }

    #[test]
    fn a_terminal_makes_the_console_the_program_s() {
        let kernel = DebianKernel {
            version: "6.1.0-56-amd64".into(),
            vmlinuz: "/boot/vmlinuz-6.1.0-56-amd64".into(),
            modules_dir: "/lib/modules/6.1.0-56-amd64".into(),
        };
        let plan = ArgPlan {
            args: os(&["run", "--tui"]),
            inputs: Vec::new(),
            outputs: Vec::new(),
            output_dirs: Vec::new(),
            cwd: PathBuf::from("/"),
        };
        let term = LabTerminal {
            rows: 40,
            cols: 120,
            env: vec![
                ("TERM".into(), "tmux-256color".into()),
                ("LANG".into(), "C.UTF-8".into()),
            ],
        };
        let options = InitOptions {
            randomize_addresses: false,
            terminal: Some(&term),
        };
        let script = init_script(&kernel, &[], &plan, Path::new(GUEST_EXE), options);
        let script = String::from_utf8(script).unwrap();
        assert!(
            script.contains("\nstty onlcr -echo 2>/dev/null\n"),
            "{script}"
        );
        assert!(!script.contains("stty -onlcr"), "{script}");
        assert!(
            script.contains("export TERM='tmux-256color'\nexport LANG='C.UTF-8'\n"),
            "{script}"
        );
        assert!(
            script.contains("stty sane onlcr rows 40 cols 120 </dev/ttyS0 2>/dev/null\n"),
            "{script}"
        );
        assert!(
            script.contains(
                "setsid -c '/bin/bootscope' 'run' '--tui' <>/dev/ttyS0 >&0 2>&1\nlab_code=$?\n"
            ),
            "{script}"
        );
        assert!(!script.contains("</dev/null\nlab_code"), "{script}");
        // Without a terminal: no input, plain newlines.
        let plain = init_script(
            &kernel,
            &[],
            &plan,
            Path::new(GUEST_EXE),
            InitOptions::default(),
        );
        let plain = String::from_utf8(plain).unwrap();
        assert!(plain.contains("\nstty -onlcr 2>/dev/null\n"));
        assert!(plain.contains("'/bin/bootscope' 'run' '--tui' </dev/null\nlab_code=$?\n"));
        assert!(!plain.contains("setsid") && !plain.contains("TERM="));
    }

    #[test]
    fn placeholders_are_filled_in_lines_and_blocks() {
        let template = "a @X@ b @X@\n\t\t@BLOCK@\n@EMPTY@\nmail@host @ end @lower@\n";
        let out = fill(
            template,
            &[
                ("X", text("1")),
                ("BLOCK", lines(&["one", "two @X@"])),
                ("EMPTY", lines(&[])),
            ],
        );
        // Blocks take the placeholder's indentation; an empty block leaves
        // no line; values are not scanned again; other `@` stay.
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a 1 b 1\n\t\tone\n\t\ttwo @X@\nmail@host @ end @lower@\n"
        );
        // A placeholder alone on its line may also be text.
        assert_eq!(fill("  @X@\n", &[("X", text("v"))]), b"  v\n");
    }

    #[test]
    #[should_panic(expected = "@MISSING@ has no value")]
    fn a_placeholder_without_a_value_is_a_bug() {
        fill("echo @MISSING@\n", &[]);
    }

    #[test]
    #[should_panic(expected = "must stand alone")]
    fn a_block_within_a_line_is_a_bug() {
        fill("echo @B@\n", &[("B", lines(&["x"]))]);
    }

    #[test]
    fn filled_script_is_valid_shell_without_placeholders() {
        let kernel = DebianKernel {
            version: "6.1.0-56-amd64".into(),
            vmlinuz: "/boot/vmlinuz-6.1.0-56-amd64".into(),
            modules_dir: "/lib/modules/6.1.0-56-amd64".into(),
        };
        let plan = ArgPlan {
            // Argument text that looks like a placeholder stays as it is.
            args: os(&["@CWD@", "it's"]),
            inputs: Vec::new(),
            outputs: vec![PathBuf::from("t.json")],
            output_dirs: Vec::new(),
            cwd: PathBuf::from("/"),
        };
        let script = init_script(
            &kernel,
            &[],
            &plan,
            Path::new(GUEST_EXE),
            InitOptions::default(),
        );
        let script = String::from_utf8(script).unwrap();
        assert!(script.contains("'/bin/bootscope' '@CWD@' 'it'\\''s' </dev/null\n"));
        let leftover = script
            .match_indices('@')
            .filter(|(at, _)| placeholder(&script[*at..]).is_some())
            .count();
        assert_eq!(leftover, 1, "only the argument's @CWD@ remains:\n{script}");
        // The template itself has no placeholder the generator leaves out.
        assert!(!script.contains("@LOAD_MODULES@") && !script.contains("@SEND_OUTPUTS@"));
        let checked = std::process::Command::new("sh")
            .arg("-n")
            .arg("-c")
            .arg(&script)
            .output();
        match checked {
            Ok(out) => assert!(
                out.status.success(),
                "sh -n: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => println!("SKIP shell syntax check: {e}"),
        }
    }
}
