//! What every document bench reads is checked for first: its `schema` and
//! `version` fields; and the timeline and the profile, read into the
//! model's types.

use std::path::Path;

use bootscope_model::input::document::{Document, DocumentError};
use bootscope_model::profile::{
    Profile, PROFILE_SCHEMA_NAME, PROFILE_SCHEMA_OLDEST, PROFILE_SCHEMA_VERSION,
};
use bootscope_model::timeline::{
    Timeline, TIMELINE_SCHEMA_MIN_VERSION, TIMELINE_SCHEMA_NAME, TIMELINE_SCHEMA_VERSION,
};
use serde::Deserialize;

use crate::error::BenchError;

/// A JSON document's `schema` and `version` fields (null where absent),
/// as a small object for [`check_schema`]: the rest of the document is
/// checked to be JSON and skipped, not built into a tree.
pub fn head(bytes: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        schema: serde_json::Value,
        #[serde(default)]
        version: serde_json::Value,
    }
    let h: Head = serde_json::from_slice(bytes)?;
    Ok(serde_json::json!({ "schema": h.schema, "version": h.version }))
}

/// Opens the document at `path` by the input rules and reads its head
/// ([`Document`]); `hint` says what file to give instead.
pub fn open(path: &Path, hint: &'static str) -> Result<Document, BenchError> {
    Document::open(path).map_err(|e| document_error(e, hint))
}

/// A [`DocumentError`] as a [`BenchError`].
pub fn document_error(e: DocumentError, hint: &'static str) -> BenchError {
    match e {
        DocumentError::Input(e) => BenchError::Input(e),
        other => BenchError::Document {
            source: other,
            hint,
        },
    }
}

/// The head of `doc` as [`head`] gives it from bytes; `None` when the
/// head did not tell (its `schema` or `version` not among its first
/// fields): the document's own fields are then checked once it is read.
pub fn document_head(doc: &Document) -> Option<serde_json::Value> {
    let found = doc.schema_value().is_some() && doc.version_value().is_some();
    (found || doc.head_is_whole()).then(|| {
        serde_json::json!({
            "schema": doc.schema_value().cloned().unwrap_or_default(),
            "version": doc.version_value().cloned().unwrap_or_default(),
        })
    })
}

/// Checks a document's `schema` and `version` fields.
pub fn check_schema(
    value: &serde_json::Value,
    path: &Path,
    schema: &str,
    version: u32,
    hint: &'static str,
) -> Result<(), BenchError> {
    check_schema_versions(value, path, schema, version, version, hint)
}

/// As [`check_schema`], for a document read in any version from `oldest`
/// to `version`.
pub fn check_schema_versions(
    value: &serde_json::Value,
    path: &Path,
    schema: &str,
    oldest: u32,
    version: u32,
    hint: &'static str,
) -> Result<(), BenchError> {
    let found = value.get("schema").and_then(|s| s.as_str());
    if found != Some(schema) {
        return Err(BenchError::WrongSchema {
            path: path.into(),
            found: found.unwrap_or("(none)").into(),
            expected: schema.into(),
            hint,
        });
    }
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if (u64::from(oldest)..=u64::from(version)).contains(&v) => Ok(()),
        Some(v) => Err(BenchError::WrongVersion {
            path: path.into(),
            schema: schema.into(),
            found: v,
            supported: version,
        }),
        None => Err(BenchError::Malformed {
            path: path.into(),
            schema: "bootscope",
            detail: "no numeric \"version\" field".into(),
        }),
    }
}

/// Which document a reader takes: its `schema` name and the versions it
/// reads.
pub struct Kind {
    pub schema: &'static str,
    pub oldest: u32,
    pub newest: u32,
}

/// Reads a document of `kind` into its type `T`, its `schema` and `version`
/// checked first (from the head, without building a tree of the rest);
/// `path` is for messages, `hint` says what file to give instead.
fn parse_document<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    path: &Path,
    hint: &'static str,
    kind: Kind,
) -> Result<T, BenchError> {
    let value = head(bytes).map_err(|source| BenchError::NotJson {
        path: path.into(),
        hint,
        source,
    })?;
    check_schema_versions(&value, path, kind.schema, kind.oldest, kind.newest, hint)?;
    serde_json::from_slice(bytes).map_err(|e| BenchError::Malformed {
        path: path.into(),
        schema: kind.schema,
        detail: e.to_string(),
    })
}

/// Reads the document at `path`, of `kind`, into its type `T` as a
/// stream ([`Document`]): its `schema` and `version` checked from its head
/// (or, when its head does not have them, from what was read).
fn read_document<T: serde::de::DeserializeOwned>(
    path: &Path,
    hint: &'static str,
    kind: Kind,
) -> Result<T, BenchError> {
    from_document(open(path, hint)?, hint, kind)
}

/// [`read_document`] of a document already open.
pub fn from_document<T: serde::de::DeserializeOwned>(
    doc: Document,
    hint: &'static str,
    kind: Kind,
) -> Result<T, BenchError> {
    let path = &doc.path().to_path_buf();
    let check = |v: &serde_json::Value| {
        check_schema_versions(v, path, kind.schema, kind.oldest, kind.newest, hint)
    };
    match document_head(&doc) {
        Some(h) => {
            check(&h)?;
            doc.parse()
                .map_err(|e| malformed(e, path, kind.schema, hint))
        }
        None => {
            let v: serde_json::Value = doc.parse().map_err(|e| document_error(e, hint))?;
            check(&v)?;
            T::deserialize(&v).map_err(|e| BenchError::Malformed {
                path: path.into(),
                schema: kind.schema,
                detail: e.to_string(),
            })
        }
    }
}

/// A document's field error as [`BenchError::Malformed`], others as
/// [`document_error`] gives them.
pub fn malformed(
    e: DocumentError,
    path: &Path,
    schema: &'static str,
    hint: &'static str,
) -> BenchError {
    match e {
        DocumentError::Fields { detail, .. } => BenchError::Malformed {
            path: path.into(),
            schema,
            detail,
        },
        other => document_error(other, hint),
    }
}

/// [`parse_timeline`] of the file at `path`, read as a stream.
pub fn read_timeline(path: &Path, hint: &'static str) -> Result<Timeline, BenchError> {
    let kind = Kind {
        schema: TIMELINE_SCHEMA_NAME,
        oldest: TIMELINE_SCHEMA_MIN_VERSION,
        newest: TIMELINE_SCHEMA_VERSION,
    };
    read_document(path, hint, kind)
}

/// [`parse_profile`] of the file at `path`, read as a stream.
pub fn read_profile(path: &Path, hint: &'static str) -> Result<Profile, BenchError> {
    let kind = Kind {
        schema: PROFILE_SCHEMA_NAME,
        oldest: PROFILE_SCHEMA_OLDEST,
        newest: PROFILE_SCHEMA_VERSION,
    };
    read_document(path, hint, kind)
}

/// Reads a `bootscope.timeline` document (`bootscope run --timeline`)
/// into its type; see [`parse_document`].
pub fn parse_timeline(
    bytes: &[u8],
    path: &Path,
    hint: &'static str,
) -> Result<Timeline, BenchError> {
    let kind = Kind {
        schema: TIMELINE_SCHEMA_NAME,
        oldest: TIMELINE_SCHEMA_MIN_VERSION,
        newest: TIMELINE_SCHEMA_VERSION,
    };
    parse_document(bytes, path, hint, kind)
}

/// Reads a `bootscope.profile` document (`bootscope profile --output`)
/// into its type; see [`parse_document`].
pub fn parse_profile(bytes: &[u8], path: &Path, hint: &'static str) -> Result<Profile, BenchError> {
    let kind = Kind {
        schema: PROFILE_SCHEMA_NAME,
        oldest: PROFILE_SCHEMA_OLDEST,
        newest: PROFILE_SCHEMA_VERSION,
    };
    parse_document(bytes, path, hint, kind)
}
