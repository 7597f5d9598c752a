//! What can go wrong in `advise`, typed; the CLI turns it into a message
//! and an exit status (2 for bad input, 1 otherwise).

use std::path::PathBuf;

use bootscope_bench::BenchError;

/// Why `advise` could not read its input, or could not prove.
#[derive(Debug, thiserror::Error)]
pub enum AdviseError {
    /// The document could not be read.
    #[error("cannot read {path}: {source}; give a timeline (bootscope run --timeline FILE) or a profile (bootscope profile --output FILE)")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not JSON.
    #[error("{path} is not JSON ({source}); give a timeline (bootscope run --timeline FILE) or a profile (bootscope profile --output FILE)")]
    NotJson {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The document could not be read as JSON (the input rules, or
    /// not JSON).
    #[error("{source}; give a timeline (bootscope run --timeline FILE) or a profile (bootscope profile --output FILE)")]
    Document {
        #[from]
        source: bootscope_model::input::document::StreamError,
    },
    /// JSON, but not a document advise reads.
    #[error("{path}: {problem}; give a timeline (bootscope run --timeline FILE) or a profile (bootscope profile --output FILE)")]
    WrongDocument { path: PathBuf, problem: String },
    /// Bad options or arguments.
    #[error("{0}")]
    Usage(String),
    /// The boot to prove with does not boot as it is.
    #[error("the boot to prove with does not boot as given: {0}")]
    DoesNotBoot(String),
    /// The benchmark machinery failed.
    #[error(transparent)]
    Bench(#[from] BenchError),
}

impl AdviseError {
    /// Bad input (exit status 2): anything found before a measured boot.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Read { .. }
            | Self::NotJson { .. }
            | Self::WrongDocument { .. }
            | Self::Usage(_)
            | Self::DoesNotBoot(_) => true,
            Self::Document { source } => source.is_bad_input(),
            Self::Bench(e) => e.is_bad_input(),
        }
    }
}
