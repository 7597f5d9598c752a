//! Every document bench reads is read by the model's one document reader
//! ([`bootscope_model::document`]: its `schema` and `version` checked
//! first, then read into its type; a file as a bounded stream by the input
//! rules); here its refusals become bench's errors, naming the file and
//! what to give instead.

use std::path::Path;

use bootscope_model::bench::BenchDoc;
use bootscope_model::document::{parse_document, read_document, DocumentError};
pub use bootscope_model::document::{DocKind, Document};
use bootscope_model::profile::Profile;
use bootscope_model::timeline::Timeline;

use crate::error::BenchError;

/// The schemas of `kinds` for a message: `a`, `a or b`, `a, b or c`.
fn expected(kinds: &[DocKind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.schema()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// Reads a document of one of the kinds in `accept`; `path` is for
/// messages, `hint` says what file to give instead.
pub fn parse_any(
    bytes: &[u8],
    path: &Path,
    hint: &'static str,
    accept: &[DocKind],
) -> Result<Document, BenchError> {
    parse_document(bytes, accept).map_err(|e| bench_error(e, path, hint, accept))
}

/// Reads the file at `path` as a document of one of the kinds in
/// `accept`, as a bounded stream by the input rules
/// ([`bootscope_model::document::read_document`]); `hint` says what file
/// to give instead.
pub fn read_any(
    path: &Path,
    hint: &'static str,
    accept: &[DocKind],
) -> Result<Document, BenchError> {
    read_document(path, accept).map_err(|e| bench_error(e, path, hint, accept))
}

/// A refusal of the document reader as a [`BenchError`].
fn bench_error(
    e: DocumentError,
    path: &Path,
    hint: &'static str,
    accept: &[DocKind],
) -> BenchError {
    match e {
        DocumentError::NotJson(source) => BenchError::NotJson {
            path: path.into(),
            hint,
            source,
        },
        DocumentError::Schema { found } => BenchError::WrongSchema {
            path: path.into(),
            found: found.unwrap_or_else(|| "(none)".into()),
            expected: expected(accept),
            hint,
        },
        DocumentError::NoVersion { .. } => BenchError::Malformed {
            path: path.into(),
            schema: "bootscope",
            detail: "no numeric \"version\" field".into(),
        },
        DocumentError::Version { kind, found } => BenchError::WrongVersion {
            path: path.into(),
            schema: kind.schema().into(),
            found,
            supported: kind.versions().1,
        },
        DocumentError::Malformed { kind, detail } => BenchError::Malformed {
            path: path.into(),
            schema: kind.schema(),
            detail,
        },
        DocumentError::Read(bootscope_model::input::document::StreamError::Input(e)) => {
            BenchError::Input(e)
        }
        DocumentError::Read(source) => BenchError::Document { source, hint },
    }
}

/// Reads a document of `kind` and takes its type out of it.
fn parse_one<T>(
    bytes: &[u8],
    path: &Path,
    hint: &'static str,
    kind: DocKind,
    take: fn(Document) -> Option<T>,
) -> Result<T, BenchError> {
    take(parse_any(bytes, path, hint, &[kind])?).ok_or_else(|| BenchError::Malformed {
        path: path.into(),
        schema: kind.schema(),
        detail: "read as another kind of document".into(),
    })
}

/// Reads the file at `path` as a document of `kind` ([`read_any`]) and
/// takes its type out of it.
fn read_one<T>(
    path: &Path,
    hint: &'static str,
    kind: DocKind,
    take: fn(Document) -> Option<T>,
) -> Result<T, BenchError> {
    take(read_any(path, hint, &[kind])?).ok_or_else(|| BenchError::Malformed {
        path: path.into(),
        schema: kind.schema(),
        detail: "read as another kind of document".into(),
    })
}

/// [`parse_timeline`] of the file at `path`, read as a stream.
pub fn read_timeline(path: &Path, hint: &'static str) -> Result<Timeline, BenchError> {
    read_one(path, hint, DocKind::Timeline, Document::into_timeline)
}

/// [`parse_profile`] of the file at `path`, read as a stream.
pub fn read_profile(path: &Path, hint: &'static str) -> Result<Profile, BenchError> {
    read_one(path, hint, DocKind::Profile, Document::into_profile)
}

/// [`parse_bench`] of the file at `path`, read as a stream.
pub fn read_bench(path: &Path, hint: &'static str) -> Result<BenchDoc, BenchError> {
    read_one(path, hint, DocKind::Bench, Document::into_bench)
}

/// Reads a `bootscope.timeline` document (`bootscope run --timeline`)
/// into its type.
pub fn parse_timeline(
    bytes: &[u8],
    path: &Path,
    hint: &'static str,
) -> Result<Timeline, BenchError> {
    parse_one(
        bytes,
        path,
        hint,
        DocKind::Timeline,
        Document::into_timeline,
    )
}

/// Reads a `bootscope.profile` document (`bootscope profile --output`)
/// into its type.
pub fn parse_profile(bytes: &[u8], path: &Path, hint: &'static str) -> Result<Profile, BenchError> {
    parse_one(bytes, path, hint, DocKind::Profile, Document::into_profile)
}

/// Reads a `bootscope.bench` document (`bootscope bench --output`) into
/// its type (bench's `doc::parse` checks it further).
pub fn parse_bench(bytes: &[u8], path: &Path, hint: &'static str) -> Result<BenchDoc, BenchError> {
    parse_one(bytes, path, hint, DocKind::Bench, Document::into_bench)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_kinds_read_as_a_list() {
        assert_eq!(expected(&[DocKind::Timeline]), "bootscope.timeline");
        assert_eq!(
            expected(&[DocKind::Bench, DocKind::Timeline, DocKind::Profile]),
            "bootscope.bench, bootscope.timeline or bootscope.profile"
        );
    }
}
