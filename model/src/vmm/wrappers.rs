//! Commands that run another command (`sudo`, `env`, `taskset`,
//! `numactl`): their options skipped to find the program they run.

use std::path::Path;

/// How a wrapper's command line is read.
struct Wrapper {
    name: &'static str,
    /// Short options that take a value (`-u USER`, or `-uUSER`).
    short_valued: &'static str,
    /// Long options that take a value (`--user USER`, or `--user=USER`).
    long_valued: &'static [&'static str],
    /// Words before the command that are not options (taskset's mask).
    positional: usize,
    /// `NAME=VALUE` words before the command are assignments (env, sudo).
    assignments: bool,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "sudo",
        short_valued: "ugCDhprtUTR",
        long_valued: &[
            "--user",
            "--group",
            "--chdir",
            "--close-from",
            "--prompt",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
            "--host",
            "--chroot",
        ],
        positional: 0,
        assignments: true,
    },
    Wrapper {
        name: "env",
        short_valued: "uCS",
        long_valued: &["--unset", "--chdir", "--split-string"],
        positional: 0,
        assignments: true,
    },
    Wrapper {
        name: "taskset",
        short_valued: "",
        long_valued: &[],
        positional: 1,
        assignments: false,
    },
    Wrapper {
        name: "numactl",
        short_valued: "iwmCNpPSfLMV",
        long_valued: &[
            "--interleave",
            "--weighted-interleave",
            "--membind",
            "--physcpubind",
            "--cpunodebind",
            "--preferred",
            "--preferred-many",
            "--shm",
            "--file",
            "--length",
            "--mode",
            "--offset",
            "--shmid",
        ],
        positional: 0,
        assignments: false,
    },
];

/// The wrapper a program is, by its file name.
fn wrapper(program: &str) -> Option<&'static Wrapper> {
    let base = Path::new(program).file_name()?.to_str()?;
    WRAPPERS.iter().find(|w| w.name == base)
}

/// The index of the first word after a wrapper's options, assignments and
/// positional words: the program it runs.
fn after(w: &Wrapper, args: &[&str], mut i: usize) -> usize {
    let mut positional = w.positional;
    while i < args.len() {
        let a = args[i];
        if a == "--" {
            i += 1;
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            i += 1;
            if !long.contains('=') && w.long_valued.contains(&a) {
                i += 1;
            }
            continue;
        }
        if let Some(short) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            i += 1;
            // `-u USER`: the value is the next word; `-uUSER` holds it. Flags
            // may be grouped before a valued one (`-Eu USER`).
            if let Some(pos) = short.find(|c| w.short_valued.contains(c)) {
                if pos + 1 == short.len() {
                    i += 1;
                }
            }
            continue;
        }
        if w.assignments && a.contains('=') && !a.starts_with('=') {
            i += 1;
            continue;
        }
        if positional > 0 {
            positional -= 1;
            i += 1;
            continue;
        }
        break;
    }
    i.min(args.len())
}

/// The index of the program a command runs once its wrappers are skipped
/// (`sudo -E taskset -c 0 qemu-system-x86_64 ...` gives 4).
pub(super) fn program_index<S: AsRef<str>>(argv: &[S]) -> usize {
    let args: Vec<&str> = argv.iter().map(AsRef::as_ref).collect();
    let mut i = 0;
    while let Some(w) = args.get(i).and_then(|p| wrapper(p)) {
        i = after(w, &args, i + 1);
    }
    i
}
