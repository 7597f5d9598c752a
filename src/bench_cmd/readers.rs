//! `bootscope compare`, `check` and `plot`: the commands that read bench
//! files (and, for `compare` and `plot --flamegraph`, profiles).

use std::path::{Path, PathBuf};

use bootscope_bench::compare;
use bootscope_bench::{BenchError, CheckOptions, MetricSpec, Sample, TestKind};

use super::{check_output_of, check_push, fail, push, write};
use crate::common::EXIT_FAILURE;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// The configuration to use in files that hold two (a file with one
    /// uses it).
    #[arg(long, value_name = "LABEL")]
    pub config: Option<String>,
    /// Significance test for times: welch (means), mann-whitney (medians),
    /// or wilcoxon (the runs of each round of one interleaved file paired:
    /// the machine's drift between rounds cancels out).
    #[arg(long, default_value = "welch", value_parser = TestKind::ALL_NAMES)]
    pub test: String,
    /// Significance level.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Compare only these metrics (repeatable; names in docs/bench-schema.md).
    #[arg(long = "metric", value_name = "NAME")]
    pub metrics: Vec<String>,
    /// Output format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
    /// The same as --format json.
    #[arg(long, short = 'j', conflicts_with = "format")]
    pub json: bool,
    /// Write the report to this file instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// The base bench file, then the new one; one file holding two
    /// interleaved configurations compares them. Two profiles
    /// (`bootscope.profile`) are compared by exit reason and, where both
    /// have them (`--exit-sites`), by exit site.
    #[arg(required = true, num_args = 1..=2, value_name = "BENCH.json")]
    pub files: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The baseline bench file.
    #[arg(long, value_name = "BASE.json")]
    pub baseline: PathBuf,
    /// Regression allowed, in percent, before a metric fails.
    #[arg(long, default_value_t = 10.0, value_name = "PCT")]
    pub max_regression: f64,
    /// A metric to check, optionally with its own limit: NAME or NAME=PCT
    /// (repeatable). Default: time_to_userspace, every phase, exits:total.
    #[arg(long = "metric", value_name = "NAME[=PCT]")]
    pub metrics: Vec<String>,
    /// Significance level a time regression must reach.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Significance test for times.
    #[arg(long, default_value = "welch", value_parser = TestKind::NAMES)]
    pub test: String,
    /// The configuration to use in files that hold two (a file with one
    /// uses it).
    #[arg(long, value_name = "LABEL")]
    pub config: Option<String>,
    /// Report format.
    #[arg(long, default_value = "text", value_parser = ["text", "json", "junit"])]
    pub format: String,
    /// The same as --format json.
    #[arg(long, short = 'j', conflicts_with = "format")]
    pub json: bool,
    /// Write the report to this file (and print the text report).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Also push the results to the Prometheus Pushgateway at this URL
    /// (http://HOST:PORT), under job bootscope, kind check, host (this
    /// host's name); a failed push is exit status 1.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// The current bench file.
    #[arg(value_name = "CURRENT.json")]
    pub current: PathBuf,
}

#[derive(clap::Args)]
pub struct PlotArgs {
    /// The SVG file to write.
    #[arg(long, short, value_name = "FILE.svg")]
    pub output: PathBuf,
    /// A bench file, a boot timeline or a profile.
    #[arg(value_name = "INPUT.json")]
    pub input: PathBuf,
    /// Draw the profile's exit sites as a flame graph (exit reason, then
    /// guest function), the profile recorded with --exit-sites.
    #[arg(long)]
    pub flamegraph: bool,
}

/// The sample of `path`: its only configuration, or `config` where it
/// holds two (so one `--config` serves a one-configuration baseline and an
/// interleaved current file alike).
fn sample(path: &Path, config: Option<&str>) -> Result<Sample, BenchError> {
    let doc = bootscope_bench::doc::read(path)?;
    let label = if doc.configs.len() == 1 { None } else { config };
    Sample::from_doc(&doc, path, label)
}

fn test_kind(s: &str) -> TestKind {
    // clap has already restricted the value to the known names.
    TestKind::parse(s).unwrap_or(TestKind::Welch)
}

/// `bootscope compare`.
pub fn compare(args: CompareArgs) -> i32 {
    match compare_inner(&args) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

fn compare_inner(args: &CompareArgs) -> Result<i32, BenchError> {
    if let Some(o) = &args.output {
        let inputs: Vec<(&str, &Path)> = args.files.iter().map(|f| ("BENCH.json", &**f)).collect();
        check_output_of("--output", o, &inputs)?;
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        return Err(BenchError::Usage(format!(
            "--alpha {}: give a significance level between 0 and 1 (for example 0.01)",
            args.alpha
        )));
    }
    let bench_options = !args.metrics.is_empty() || args.config.is_some();
    let format = if args.json { "json" } else { &args.format };
    let profiles = crate::profile_reports::compare_profiles(
        &args.files,
        bench_options,
        format,
        args.output.as_deref(),
    )?;
    if let Some(code) = profiles {
        return Ok(code);
    }
    let (base, new) = match args.files.as_slice() {
        [one] => {
            let doc = bootscope_bench::doc::read(one)?;
            if doc.configs.len() != 2 {
                return Err(BenchError::Usage(format!(
                    "{} holds one configuration: give a second bench file to compare it with",
                    one.display()
                )));
            }
            (
                Sample::from_doc(&doc, one, Some(&doc.configs[0].label))?,
                Sample::from_doc(&doc, one, Some(&doc.configs[1].label))?,
            )
        }
        [a, b] => (
            sample(a, args.config.as_deref())?,
            sample(b, args.config.as_deref())?,
        ),
        _ => return Err(BenchError::Usage("give one or two bench files".into())),
    };
    let report = compare::compare(
        &base,
        &new,
        &args.metrics,
        test_kind(&args.test),
        args.alpha,
    )?;
    let text = match if args.json { "json" } else { &args.format } {
        "json" => report.json(),
        _ => report.text(),
    };
    match &args.output {
        Some(o) => Ok(write(o, text.as_bytes())),
        None => {
            crate::stdout::print(text).map_err(crate::stdout::bench_error)?;
            Ok(0)
        }
    }
}

/// `bootscope check`: 0 pass, 1 regression, 2 bad input.
pub fn check(args: CheckArgs) -> i32 {
    match check_inner(&args) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

fn check_inner(args: &CheckArgs) -> Result<i32, BenchError> {
    if let Some(o) = &args.output {
        let inputs = [
            ("--baseline", &*args.baseline),
            ("CURRENT.json", &args.current),
        ];
        check_output_of("--output", o, &inputs)?;
    }
    check_push(args.push.as_deref())?;
    let metrics = args
        .metrics
        .iter()
        .map(|m| MetricSpec::parse(m))
        .collect::<Result<Vec<_>, _>>()?;
    let baseline = sample(&args.baseline, args.config.as_deref())?;
    let current = sample(&args.current, args.config.as_deref())?;
    let opts = CheckOptions {
        metrics,
        max_regression_pct: args.max_regression,
        alpha: args.alpha,
        test: test_kind(&args.test),
    };
    let report = compare::check(&baseline, &current, &opts)?;
    let formatted = match if args.json { "json" } else { &args.format } {
        "json" => report.json(),
        "junit" => report.junit(),
        _ => report.text(),
    };
    match &args.output {
        Some(o) => {
            let code = write(o, formatted.as_bytes());
            if code != 0 {
                return Ok(code);
            }
            crate::stdout::print(report.text()).map_err(crate::stdout::bench_error)?;
        }
        None => crate::stdout::print(formatted).map_err(crate::stdout::bench_error)?,
    }
    let pushed = push(
        args.push.as_deref(),
        "check",
        &crate::push::check_text(&report),
    );
    Ok(if report.regressions > 0 || !pushed {
        EXIT_FAILURE
    } else {
        0
    })
}

/// `bootscope plot`.
pub fn plot(args: PlotArgs) -> i32 {
    let run = || -> Result<i32, BenchError> {
        check_output_of("--output", &args.output, &[("INPUT.json", &args.input)])?;
        if args.flamegraph {
            let svg = crate::profile_reports::flamegraph(&args.input).map_err(BenchError::Usage)?;
            return Ok(write(&args.output, &svg));
        }
        let svg = bootscope_bench::plot::render_file(&args.input)?;
        Ok(write(&args.output, svg.as_bytes()))
    };
    match run() {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}
