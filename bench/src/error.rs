//! Errors of the bench library. Each names the input at fault and says what
//! to do about it; [`BenchError::is_bad_input`] tells the CLI which ones
//! are the caller's to fix (exit status 2).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An input file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An input file cannot be opened or is beyond the input limits
    /// ([`bootscope_model::input`]: a directory, a socket, too large).
    #[error("{0}")]
    Input(#[from] bootscope_model::input::InputError),
    /// An input file is not JSON at all.
    #[error("{} is not JSON ({source}); {hint}", path.display())]
    NotJson {
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// An input document cannot be read as JSON (the input rules, or not
    /// JSON: [`bootscope_model::input::document`]).
    #[error("{source}; {hint}")]
    Document {
        #[source]
        source: bootscope_model::input::document::StreamError,
        hint: &'static str,
    },
    /// An input file is JSON of another kind.
    #[error("{}: schema {found:?}, expected {expected}; {hint}", path.display())]
    WrongSchema {
        path: PathBuf,
        found: String,
        expected: String,
        hint: &'static str,
    },
    /// An input file has a version this build cannot read.
    #[error(
        "{}: {schema} version {found}, this bootscope reads version {supported}; \
         make the file again with this bootscope (bootscope bench --output)",
        path.display()
    )]
    WrongVersion {
        path: PathBuf,
        schema: String,
        found: u64,
        supported: u32,
    },
    /// An input file has the right schema but the wrong shape.
    #[error("{}: malformed {schema} file: {detail}", path.display())]
    Malformed {
        path: PathBuf,
        schema: &'static str,
        detail: String,
    },
    /// A bench file holds several configurations and none was chosen.
    #[error(
        "{} holds {} configurations ({}): choose one with --config LABEL",
        path.display(),
        labels.len(),
        labels.join(", ")
    )]
    AmbiguousConfig { path: PathBuf, labels: Vec<String> },
    /// The chosen configuration is not in the file.
    #[error(
        "{} has no configuration {label:?}; it has: {}",
        path.display(),
        labels.join(", ")
    )]
    NoSuchConfig {
        path: PathBuf,
        label: String,
        labels: Vec<String>,
    },
    /// A configuration has no successful measured run.
    #[error(
        "{}: configuration {label:?} has no successful measured run; \
         rerun bootscope bench and look at the failed runs' errors in the file",
        path.display()
    )]
    NoRuns { path: PathBuf, label: String },
    /// A metric asked for is absent from a file.
    #[error(
        "metric {metric:?} is not in {} ({label}); it has: {}",
        path.display(),
        available.join(", ")
    )]
    MissingMetric {
        metric: String,
        path: PathBuf,
        label: String,
        available: Vec<String>,
    },
    /// The two sides have different boot phases.
    #[error(
        "the boot phases differ: only in {}: {}; only in {}: {}. \
         The runs did not boot the same way (another kernel, or a failed marker): \
         compare chosen metrics with --metric",
        a_path.display(),
        list_or_none(only_a),
        b_path.display(),
        list_or_none(only_b)
    )]
    PhaseMismatch {
        a_path: PathBuf,
        only_a: Vec<String>,
        b_path: PathBuf,
        only_b: Vec<String>,
    },
    /// The two sides share no metric at all.
    #[error(
        "{} and {} have no metric in common; nothing to compare",
        a_path.display(),
        b_path.display()
    )]
    NothingInCommon { a_path: PathBuf, b_path: PathBuf },
    /// Too few runs for the statistics asked for.
    #[error("metric {metric:?}: {detail}")]
    TooFewRuns { metric: String, detail: String },
    /// A command-line value is wrong.
    #[error("{0}")]
    Usage(String),
    /// A run could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// A run was refused as bad input (exit status 2): every other run
    /// would be refused too.
    #[error("the run was refused as bad input (exit status 2): {command}\n{stderr}")]
    RunRefused { command: String, stderr: String },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

impl BenchError {
    /// True for errors the caller fixes by changing the input (exit status
    /// 2); false for failures while running.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, Self::Write { .. })
            && !matches!(self, Self::Spawn { source, .. } if source.kind() != std::io::ErrorKind::NotFound && source.kind() != std::io::ErrorKind::PermissionDenied)
    }
}
