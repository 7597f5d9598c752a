//! Measures guest boots for `scripts/bench-lab-boot` and summarises them.
//!
//! ```text
//! boot_bench guest DIR
//!     Builds the default guest initramfs as DIR/guest.cpio and prints the
//!     kernel and initramfs paths (one per line).
//! boot_bench run --csv FILE --vmm NAME --variant NAME --round N
//!                [--marker TEXT] [--timeline FILE] [--log-dir DIR]
//!                [--timeout SECONDS] [--no-exit-trace] -- COMMAND [ARGS...]
//!     Runs one VMM (COMMAND) and appends one row to the CSV file.
//! boot_bench summary FILE.csv
//!     Prints the runs, the medians and the ratios as Markdown tables.
//! ```
//!
//! `run` takes every time on one clock (`CLOCK_MONOTONIC`, through
//! `Instant`) whose zero is taken just before COMMAND is started:
//!
//! * `hello_ms`: when the marker text (the default guest's
//!   `bootscope-guest: hello from userspace` line) arrives on COMMAND's
//!   stdout, i.e. on the guest's serial console;
//! * `wall_ms`: when COMMAND has exited.
//!
//! KVM exits are counted with a histogram trigger on the `kvm:kvm_exit`
//! tracepoint (tracefs at `/sys/kernel/tracing`), keyed by exit reason and
//! reset before each run. It counts every exit of every VM on the machine,
//! so only one VM may run at a time. KVM's debugfs counter
//! (`/sys/kernel/debug/kvm/exits`) cannot be used for this: it sums the
//! statistics of the VMs that still exist, so it reads 0 before a VMM starts
//! and again after it has exited. A second histogram, on `kvm:kvm_pio` keyed
//! by port and direction, says where the I/O exits go (the busiest ports
//! are in the `ports` column).
//!
//! With `--timeline`, COMMAND is a `bootscope run` writing that timeline;
//! the row then also gets bootscope's own view: its userspace mark (the
//! guest's write of 0x60-0x7f to port 0x80), its `serial: hello` mark (if
//! the run had `--serial-pattern hello=...`), both relative to its process
//! start, and the exit count from KVM's binary statistics.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bootscope_model::host::{kvm_flavour, HostRoot, KvmFlavour};
use bootscope_model::mark::MarkSource;
use bootscope_model::timeline::{Timeline, TimelineMark};

/// The default guest's userspace line.
const DEFAULT_MARKER: &str = bootscope_lab::guest::HELLO_LINE;

/// The tracepoint whose histogram counts exits.
const KVM_EXIT_EVENT: &str = "/sys/kernel/tracing/events/kvm/kvm_exit";

/// Its histogram: one bucket per exit reason.
const EXIT_HIST: &str = "hist:keys=exit_reason:vals=hitcount:sort=hitcount:size=256";

/// The tracepoint of port I/O accesses, which says where I/O exits go.
const KVM_PIO_EVENT: &str = "/sys/kernel/tracing/events/kvm/kvm_pio";

/// Its histogram: one bucket per port and direction (rw 1 = write).
const PIO_HIST: &str = "hist:keys=port,rw:vals=hitcount:sort=hitcount:size=1024";

/// How many of the busiest ports the CSV lists.
const TOP_PORTS: usize = 8;

/// CSV columns, in order.
const COLUMNS: [&str; 20] = [
    "variant",
    "round",
    "vmm",
    "status",
    "hello_ms",
    "timeline_userspace_ms",
    "timeline_hello_ms",
    "wall_ms",
    "exits",
    "kvm_stats_exits",
    "io",
    "msr",
    "npf",
    "intr",
    "intr_window",
    "hlt",
    "cpuid",
    "other",
    "reasons",
    "ports",
];

/// Exit categories reported in their own columns.
const CATEGORIES: [&str; 7] = ["io", "msr", "npf", "intr", "intr_window", "hlt", "cpuid"];

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let result = match args.first().and_then(|a| a.to_str()) {
        Some("guest") => cmd_guest(&args[1..]),
        Some("run") => cmd_run(&args[1..]),
        Some("summary") => cmd_summary(&args[1..]),
        _ => Err(format!(
            "usage: boot_bench guest DIR | run --csv FILE --vmm NAME --variant NAME --round N [--marker TEXT] [--timeline FILE] [--log-dir DIR] [--timeout SECONDS] [--no-exit-trace] -- COMMAND [ARGS...] | summary FILE.csv (got {args:?})"
        )),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("boot_bench: {e}");
            ExitCode::from(2)
        }
    }
}

fn cmd_guest(args: &[OsString]) -> Result<ExitCode, String> {
    let [dir] = args else {
        return Err("guest needs exactly one directory".into());
    };
    let dir = PathBuf::from(dir);
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let kernel = bootscope_lab::find_debian_kernel().map_err(|e| e.to_string())?;
    let initrd = dir.join("guest.cpio");
    bootscope_lab::build_default_initramfs(&initrd).map_err(|e| e.to_string())?;
    println!("{}", kernel.vmlinuz.display());
    println!("{}", initrd.display());
    Ok(ExitCode::SUCCESS)
}

/// Options of `run`.
struct RunOptions {
    csv: PathBuf,
    vmm: String,
    variant: String,
    round: u32,
    marker: String,
    timeline: Option<PathBuf>,
    log_dir: Option<PathBuf>,
    timeout: Duration,
    exit_trace: bool,
    command: Vec<OsString>,
}

fn parse_run(args: &[OsString]) -> Result<RunOptions, String> {
    let mut csv = None;
    let mut vmm = None;
    let mut variant = None;
    let mut round = None;
    let mut marker = DEFAULT_MARKER.to_string();
    let mut timeline = None;
    let mut log_dir = None;
    let mut timeout = Duration::from_secs(600);
    let mut exit_trace = true;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].to_string_lossy().into_owned();
        if flag == "--" {
            i += 1;
            break;
        }
        if flag == "--no-exit-trace" {
            exit_trace = false;
            i += 1;
            continue;
        }
        let value = args
            .get(i + 1)
            .ok_or_else(|| format!("{flag} needs a value"))?;
        let text = || value.to_string_lossy().into_owned();
        match flag.as_str() {
            "--csv" => csv = Some(PathBuf::from(value)),
            "--vmm" => vmm = Some(text()),
            "--variant" => variant = Some(text()),
            "--round" => {
                round = Some(
                    text()
                        .parse()
                        .map_err(|_| format!("--round {value:?} is not a number"))?,
                )
            }
            "--marker" => marker = text(),
            "--timeline" => timeline = Some(PathBuf::from(value)),
            "--log-dir" => log_dir = Some(PathBuf::from(value)),
            "--timeout" => {
                let secs: f64 = text()
                    .parse()
                    .map_err(|_| format!("--timeout {value:?} is not a number"))?;
                if !(secs > 0.0 && secs.is_finite()) {
                    return Err("--timeout must be positive".into());
                }
                timeout = Duration::from_secs_f64(secs);
            }
            _ => return Err(format!("unknown option {flag}")),
        }
        i += 2;
    }
    let command = args[i..].to_vec();
    if command.is_empty() {
        return Err("run needs a command after --".into());
    }
    if marker.is_empty() {
        return Err("--marker must not be empty".into());
    }
    Ok(RunOptions {
        csv: csv.ok_or("run needs --csv")?,
        vmm: vmm.ok_or("run needs --vmm")?,
        variant: variant.ok_or("run needs --variant")?,
        round: round.ok_or("run needs --round")?,
        marker,
        timeline,
        log_dir,
        timeout,
        exit_trace,
        command,
    })
}

/// A tracepoint histogram trigger, installed for one run.
struct Histogram {
    /// The event's `trigger` file.
    trigger: PathBuf,
    /// The event's `hist` file.
    hist: PathBuf,
    /// The trigger text.
    spec: &'static str,
}

/// What a histogram counted: the total and one count per key tuple.
struct HistCounts {
    hits: u64,
    buckets: Vec<(Vec<u64>, u64)>,
}

impl Histogram {
    /// Installs a fresh trigger `spec` on the event directory `event`;
    /// `None` (with a warning) where tracefs or the tracepoint is missing.
    fn start(event: &str, spec: &'static str) -> Option<Self> {
        let dir = Path::new(event);
        let hist = Histogram {
            trigger: dir.join("trigger"),
            hist: dir.join("hist"),
            spec,
        };
        // A trigger left over from an interrupted run would keep old counts.
        hist.remove();
        match fs::write(&hist.trigger, spec) {
            Ok(()) => Some(hist),
            Err(e) => {
                eprintln!(
                    "boot_bench: warning: cannot install a histogram on {}: {e}",
                    hist.trigger.display()
                );
                None
            }
        }
    }

    fn remove(&self) {
        let _ = fs::write(&self.trigger, format!("!{}", self.spec));
    }

    /// Reads the histogram and removes the trigger.
    fn finish(self) -> Option<HistCounts> {
        let text = fs::read_to_string(&self.hist);
        self.remove();
        let text = text
            .map_err(|e| {
                eprintln!(
                    "boot_bench: warning: cannot read {}: {e}",
                    self.hist.display()
                )
            })
            .ok()?;
        let parsed = parse_hist(&text);
        if parsed.is_none() {
            eprintln!(
                "boot_bench: warning: cannot use the histogram {}:\n{text}",
                self.hist.display()
            );
        }
        parsed
    }
}

/// Parses a histogram with numeric keys: lines such as
/// `{ exit_reason:        123 } hitcount:      84480` or
/// `{ port:       1016, rw:          1 } hitcount:         12`, and the
/// `Hits:` and `Dropped:` totals. Dropped events make it unusable.
fn parse_hist(text: &str) -> Option<HistCounts> {
    let mut buckets = Vec::new();
    let mut hits = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('{') {
            let (keys, value) = rest.split_once('}')?;
            let keys: Vec<u64> = keys
                .split(',')
                .map(|kv| kv.split_once(':').and_then(|(_, v)| v.trim().parse().ok()))
                .collect::<Option<_>>()?;
            let count: u64 = value
                .trim()
                .strip_prefix("hitcount:")?
                .trim()
                .parse()
                .ok()?;
            buckets.push((keys, count));
        } else if let Some(v) = line.strip_prefix("Hits:") {
            hits = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("Dropped:") {
            if v.trim() != "0" {
                eprintln!(
                    "boot_bench: warning: a histogram dropped {} events",
                    v.trim()
                );
                return None;
            }
        }
    }
    Some(HistCounts {
        hits: hits?,
        buckets,
    })
}

/// Which exit reasons belong to each category, for AMD SVM and Intel VMX.
fn category(svm: bool, reason: u32) -> Option<&'static str> {
    let name = if svm {
        match reason {
            0x7b => "io",
            0x7c => "msr",
            0x400 => "npf",
            0x60 => "intr",
            0x64 => "intr_window",
            0x78 => "hlt",
            0x72 => "cpuid",
            _ => return None,
        }
    } else {
        match reason {
            30 => "io",
            31 | 32 => "msr",
            48 | 49 => "npf",
            1 => "intr",
            7 => "intr_window",
            12 => "hlt",
            10 => "cpuid",
            _ => return None,
        }
    };
    Some(name)
}

/// Whether this machine's KVM uses AMD SVM exit codes (else Intel VMX).
fn host_is_svm() -> bool {
    kvm_flavour(&HostRoot::default()) == KvmFlavour::Svm
}

/// What bootscope's timeline says about the run.
#[derive(Default)]
struct TimelineFacts {
    userspace_ms: Option<f64>,
    hello_ms: Option<f64>,
    kvm_stats_exits: Option<u64>,
}

fn read_timeline(path: &Path) -> Result<TimelineFacts, String> {
    let text = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let doc: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let t = Timeline::parse(&doc).map_err(|e| format!("{}: {e}", path.display()))?;
    let ms = |m: &TimelineMark| m.t_ns as f64 / 1e6;
    let facts = TimelineFacts {
        userspace_ms: t
            .marks
            .iter()
            .find(|m| {
                m.source == MarkSource::DebugPort
                    && m.value.is_some_and(|v| (0x60..=0x7f).contains(&v))
            })
            .map(ms),
        hello_ms: t.marks.iter().find(|m| m.name == "serial: hello").map(ms),
        kvm_stats_exits: t.kvm_stats.and_then(|s| s.get("exits").copied()),
    };
    Ok(facts)
}

/// Copies `from` to `log`, noting when `marker` has fully arrived.
fn watch_console(
    mut from: impl Read,
    mut log: impl Write,
    marker: &[u8],
    t0: Instant,
) -> Option<Duration> {
    let mut seen: Option<Duration> = None;
    // The end of the previous chunk, so a marker split across reads is found.
    let mut window: Vec<u8> = Vec::with_capacity(marker.len() * 2 + 4096);
    let mut buf = [0u8; 4096];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let now = t0.elapsed();
        let _ = log.write_all(&buf[..n]);
        if seen.is_none() {
            window.extend_from_slice(&buf[..n]);
            if window.windows(marker.len()).any(|w| w == marker) {
                seen = Some(now);
            } else if window.len() >= marker.len() {
                window.drain(..window.len() + 1 - marker.len());
            }
        }
    }
    let _ = log.flush();
    seen
}

/// Prints the last lines of a log file to stderr.
fn show_tail(label: &str, path: &Path) {
    let Ok(file) = File::open(path) else { return };
    let lines: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    eprintln!(
        "boot_bench: last lines of the {label} ({}):",
        path.display()
    );
    for line in &lines[lines.len().saturating_sub(15)..] {
        eprintln!("  {line}");
    }
}

fn cmd_run(args: &[OsString]) -> Result<ExitCode, String> {
    let opts = parse_run(args)?;
    let log_dir = opts.log_dir.clone().unwrap_or_else(std::env::temp_dir);
    fs::create_dir_all(&log_dir)
        .map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
    let stem = format!("{}-{}-{}", opts.variant, opts.round, opts.vmm);
    let console_path = log_dir.join(format!("{stem}.console"));
    let stderr_path = log_dir.join(format!("{stem}.stderr"));
    let console_log = File::create(&console_path)
        .map_err(|e| format!("cannot create {}: {e}", console_path.display()))?;
    let stderr_log = File::create(&stderr_path)
        .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
    if let Some(t) = &opts.timeline {
        let _ = fs::remove_file(t);
    }

    let (exit_hist, pio_hist) = if opts.exit_trace {
        (
            Histogram::start(KVM_EXIT_EVENT, EXIT_HIST),
            Histogram::start(KVM_PIO_EVENT, PIO_HIST),
        )
    } else {
        (None, None)
    };
    let (status, hello, wall) = run_watched(&opts, console_log, stderr_log)?;
    let exits = exit_hist.and_then(Histogram::finish);
    let pio = pio_hist.and_then(Histogram::finish);

    let facts = match &opts.timeline {
        Some(t) => read_timeline(t).unwrap_or_else(|e| {
            eprintln!("boot_bench: warning: {e}");
            TimelineFacts::default()
        }),
        None => TimelineFacts::default(),
    };

    let ok = status.success() && hello.is_some();
    let status_text = match (status.code(), hello.is_some()) {
        (Some(0), true) => "ok".to_string(),
        (Some(0), false) => "no-marker".to_string(),
        (Some(c), _) => format!("exit-{c}"),
        (None, _) => "killed".to_string(),
    };
    if !ok {
        show_tail("console", &console_path);
        show_tail("stderr", &stderr_path);
    }

    let (categories, other, reasons_text) = exit_breakdown(exits.as_ref());
    let ports_text = busiest_ports(pio.as_ref());
    let ms = |d: Option<Duration>| {
        d.map(|d| format!("{:.3}", d.as_secs_f64() * 1e3))
            .unwrap_or_default()
    };
    let opt_ms = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut row: Vec<String> = vec![
        opts.variant.clone(),
        opts.round.to_string(),
        opts.vmm.clone(),
        status_text.clone(),
        ms(hello),
        opt_ms(facts.userspace_ms),
        opt_ms(facts.hello_ms),
        ms(Some(wall)),
        opt(exits.as_ref().map(|e| e.hits)),
        opt(facts.kvm_stats_exits),
    ];
    for c in CATEGORIES {
        row.push(if exits.is_some() {
            categories[c].to_string()
        } else {
            String::new()
        });
    }
    row.push(if exits.is_some() {
        other.to_string()
    } else {
        String::new()
    });
    row.push(reasons_text);
    row.push(ports_text);
    append_csv(&opts.csv, &row)?;

    println!(
        "bench: {:<6} round {:>2} {:<10} {:<9} userspace {:>9} ms (timeline {:>9} ms)  wall {:>9} ms  exits {:>7} (KVM stats {:>7})",
        opts.variant,
        opts.round,
        opts.vmm,
        status_text,
        ms(hello),
        opt_ms(facts.userspace_ms),
        ms(Some(wall)),
        opt(exits.as_ref().map(|e| e.hits)),
        opt(facts.kvm_stats_exits),
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Exits per category (and those in none), and every reason with its
/// count, busiest first (`0x7b=120;0x7c=3`).
fn exit_breakdown(exits: Option<&HistCounts>) -> (BTreeMap<&'static str, u64>, u64, String) {
    let svm = host_is_svm();
    let mut categories: BTreeMap<&str, u64> = CATEGORIES.iter().map(|c| (*c, 0)).collect();
    let mut other = 0u64;
    let mut reasons_text = String::new();
    if let Some(counts) = exits {
        let mut by_count: Vec<(u64, u64)> = counts
            .buckets
            .iter()
            .filter_map(|(keys, count)| Some((*keys.first()?, *count)))
            .collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (reason, count) in by_count {
            match u32::try_from(reason).ok().and_then(|r| category(svm, r)) {
                Some(c) => *categories.entry(c).or_insert(0) += count,
                None => other += count,
            }
            if !reasons_text.is_empty() {
                reasons_text.push(';');
            }
            reasons_text.push_str(&format!("{reason:#x}={count}"));
        }
    }
    (categories, other, reasons_text)
}

/// The [`TOP_PORTS`] busiest I/O ports with their direction and count
/// (`0x3f8out=812;...`), and the total when there are more.
fn busiest_ports(pio: Option<&HistCounts>) -> String {
    let mut ports_text = String::new();
    if let Some(counts) = pio {
        let mut by_count: Vec<&(Vec<u64>, u64)> = counts.buckets.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (keys, count) in by_count.into_iter().take(TOP_PORTS) {
            let [port, rw] = keys.as_slice() else {
                continue;
            };
            if !ports_text.is_empty() {
                ports_text.push(';');
            }
            let dir = if *rw == 1 { "out" } else { "in" };
            ports_text.push_str(&format!("{port:#x}{dir}={count}"));
        }
        if counts.buckets.len() > TOP_PORTS {
            ports_text.push_str(&format!(";total={}", counts.hits));
        }
    }
    ports_text
}

/// Runs the command with its stdout watched for the marker, killed when it
/// overstays the timeout; returns its status, when the marker appeared and
/// the wall time.
fn run_watched(
    opts: &RunOptions,
    console_log: File,
    stderr_log: File,
) -> Result<(std::process::ExitStatus, Option<Duration>, Duration), String> {
    let t0 = Instant::now();
    let mut child = Command::new(&opts.command[0])
        .args(&opts.command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_log)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", opts.command[0]))?;
    let pid = child.id();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let timeout = opts.timeout;
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(timeout) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!(
                "boot_bench: the run exceeded {} s; killing it",
                timeout.as_secs_f64()
            );
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let stdout = child.stdout.take().ok_or("no stdout pipe")?;
    let hello = watch_console(
        stdout,
        io::BufWriter::new(console_log),
        opts.marker.as_bytes(),
        t0,
    );
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for the VMM: {e}"))?;
    let wall = t0.elapsed();
    let _ = done_tx.send(());
    let _ = watchdog.join();
    Ok((status, hello, wall))
}

fn append_csv(path: &Path, row: &[String]) -> Result<(), String> {
    let fresh = fs::metadata(path).map(|m| m.len() == 0).unwrap_or(true);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut text = String::new();
    if fresh {
        text.push_str(&COLUMNS.join(","));
        text.push('\n');
    }
    text.push_str(&row.join(","));
    text.push('\n');
    f.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// One CSV row, by column name.
type Row = BTreeMap<String, String>;

fn read_csv(path: &Path) -> Result<Vec<Row>, String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or("the CSV file is empty")?
        .split(',')
        .collect();
    Ok(lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect())
}

/// The median (bench's), None for no values.
fn median(values: Vec<f64>) -> Option<f64> {
    (!values.is_empty()).then(|| bootscope_bench::stats::median(&values))
}

fn cmd_summary(args: &[OsString]) -> Result<ExitCode, String> {
    let [csv] = args else {
        return Err("summary needs exactly one CSV file".into());
    };
    let rows = read_csv(Path::new(csv))?;
    let mut variants: Vec<String> = Vec::new();
    let mut vmms: Vec<String> = Vec::new();
    for r in &rows {
        for (list, key) in [(&mut variants, "variant"), (&mut vmms, "vmm")] {
            let v = r.get(key).cloned().unwrap_or_default();
            if !list.contains(&v) {
                list.push(v);
            }
        }
    }
    let get = |r: &Row, k: &str| r.get(k).cloned().unwrap_or_default();

    print_runs(&rows);
    for variant in &variants {
        print_variant_medians(variant, &rows, &vmms);
    }
    println!("\n### Busiest I/O ports (round 1; `kvm:kvm_pio`, accesses by port and direction)\n");
    for r in rows.iter().filter(|r| get(r, "round") == "1") {
        let ports = get(r, "ports");
        if !ports.is_empty() {
            println!(
                "- {} {}: {}",
                get(r, "variant"),
                get(r, "vmm"),
                ports.replace(';', ", ")
            );
        }
    }
    let failed = rows.iter().filter(|r| get(r, "status") != "ok").count();
    if failed > 0 {
        println!("\n{failed} run(s) did not reach the marker or exited with an error; they are left out of the medians.");
    }
    Ok(ExitCode::SUCCESS)
}

/// The table of every run.
fn print_runs(rows: &[Row]) {
    let get = |r: &Row, k: &str| r.get(k).cloned().unwrap_or_default();
    println!("### Runs\n");
    println!("Round 0 is a warm-up and is left out of the medians. Times in ms from the start of the VMM process; exits from the `kvm:kvm_exit` tracepoint.\n");
    println!("| variant | round | VMM | status | userspace (console) | userspace (timeline) | wall | exits | KVM stats exits | io | msr | npf | intr | intr window | hlt | cpuid | other |");
    println!("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let cells: Vec<String> = [
            "variant",
            "round",
            "vmm",
            "status",
            "hello_ms",
            "timeline_userspace_ms",
            "wall_ms",
            "exits",
            "kvm_stats_exits",
            "io",
            "msr",
            "npf",
            "intr",
            "intr_window",
            "hlt",
            "cpuid",
            "other",
        ]
        .iter()
        .map(|k| {
            let v = get(r, k);
            if v.is_empty() {
                "-".into()
            } else {
                v
            }
        })
        .collect();
        println!("| {} |", cells.join(" | "));
    }
}

/// One variant's medians per VMM, their ratio, and with two VMMs a
/// Mann-Whitney test of the times.
fn print_variant_medians(variant: &str, rows: &[Row], vmms: &[String]) {
    let get = |r: &Row, k: &str| r.get(k).cloned().unwrap_or_default();
    let metrics: [(&str, &str, u32); 9] = [
        ("hello_ms", "time to userspace, console line (ms)", 1),
        (
            "timeline_userspace_ms",
            "time to userspace, port 0x80 mark in the timeline (ms)",
            1,
        ),
        (
            "timeline_hello_ms",
            "time to userspace, console line in the timeline (ms)",
            1,
        ),
        ("wall_ms", "wall time to VMM exit (ms)", 1),
        ("exits", "KVM exits (kvm:kvm_exit tracepoint)", 0),
        ("kvm_stats_exits", "KVM exits (KVM's own statistics)", 0),
        ("io", "I/O port exits", 0),
        ("msr", "MSR exits", 0),
        ("npf", "nested page fault exits", 0),
    ];
    println!("\n### Medians, variant `{variant}`\n");
    let used: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            get(r, "variant") == variant && get(r, "round") != "0" && get(r, "status") == "ok"
        })
        .collect();
    let mut header = String::from("| metric |");
    let mut rule = String::from("|---|");
    for vmm in vmms {
        let n = used.iter().filter(|r| &get(r, "vmm") == vmm).count();
        header.push_str(&format!(" {vmm} (n={n}) |"));
        rule.push_str("---:|");
    }
    if vmms.len() == 2 {
        header.push_str(&format!(" ratio {}/{} |", vmms[0], vmms[1]));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    for (key, label, decimals) in metrics {
        let medians: Vec<Option<f64>> = vmms
            .iter()
            .map(|vmm| {
                median(
                    used.iter()
                        .filter(|r| &get(r, "vmm") == vmm)
                        .filter_map(|r| get(r, key).parse::<f64>().ok())
                        .collect(),
                )
            })
            .collect();
        if medians.iter().all(Option::is_none) {
            continue;
        }
        let mut line = format!("| {label} |");
        for m in &medians {
            match m {
                Some(v) => line.push_str(&format!(" {v:.prec$} |", prec = decimals as usize)),
                None => line.push_str(" - |"),
            }
        }
        if let [Some(a), Some(b)] = medians.as_slice() {
            if *b > 0.0 {
                line.push_str(&format!(" {:.2} |", a / b));
            } else {
                line.push_str(" - |");
            }
        } else if medians.len() == 2 {
            line.push_str(" - |");
        }
        println!("{line}");
    }
    if let [a, b] = vmms {
        let values = |vmm: &String, key: &str| -> Vec<f64> {
            used.iter()
                .filter(|r| &get(r, "vmm") == vmm)
                .filter_map(|r| get(r, key).parse::<f64>().ok())
                .collect()
        };
        let mut notes = Vec::new();
        for (key, what) in [("hello_ms", "time to userspace"), ("wall_ms", "wall time")] {
            let (va, vb) = (values(a, key), values(b, key));
            if !va.is_empty() && !vb.is_empty() {
                let p = bootscope_bench::stats::mann_whitney(&va, &vb).p_value;
                notes.push(format!("{what} p = {p:.3}"));
            }
        }
        if !notes.is_empty() {
            println!(
                "\n{a} vs {b}, two-sided Mann-Whitney test: {}.",
                notes.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_parsed() {
        let text = "# event histogram\n#\n{ exit_reason:        123 } hitcount:      84480\n{ exit_reason:         96 } hitcount:       3683\n\nTotals:\n    Hits: 88163\n    Entries: 2\n    Dropped: 0\n";
        let counts = parse_hist(text).unwrap();
        assert_eq!(counts.hits, 88163);
        assert_eq!(
            counts.buckets,
            vec![(vec![0x7b], 84480), (vec![0x60], 3683)]
        );
        assert!(parse_hist("Totals:\n Hits: 5\n Dropped: 3\n").is_none());
        let pio = "{ port:       1016, rw:          1 } hitcount:         12\nTotals:\n Hits: 12\n Dropped: 0\n";
        assert_eq!(parse_hist(pio).unwrap().buckets, vec![(vec![1016, 1], 12)]);
    }

    #[test]
    fn marker_split_across_reads_is_found() {
        struct Chunks(Vec<&'static [u8]>);
        impl Read for Chunks {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Ok(0);
                }
                let c = self.0.remove(0);
                buf[..c.len()].copy_from_slice(c);
                Ok(c.len())
            }
        }
        let mut log = Vec::new();
        let seen = watch_console(
            Chunks(vec![
                b"boot\nbootscope-gu",
                b"est: hello from user",
                b"space\n",
            ]),
            &mut log,
            DEFAULT_MARKER.as_bytes(),
            Instant::now(),
        );
        assert!(seen.is_some());
        assert_eq!(log, b"boot\nbootscope-guest: hello from userspace\n");
        let none = watch_console(
            Chunks(vec![b"no marker\n"]),
            io::sink(),
            b"hello",
            Instant::now(),
        );
        assert!(none.is_none());
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }
}
