//! Which document a file is, decided in one place: [`parse_document`]
//! reads the `schema` and `version` fields first (a skim of the JSON that
//! builds no tree of the rest), then the whole document straight into its
//! type: a [`Timeline`], a [`Profile`] or a [`BenchDoc`].
//! [`read_document`] does the same for a file, read as a bounded stream
//! by the input rules ([`crate::input::document`]): the same decision, on
//! the head the stream read, then the typed parse of the stream.

use std::path::Path;

use serde::Deserialize;

use crate::bench::BenchDoc;
use crate::profile::Profile;
use crate::timeline::Timeline;

/// The kinds of document bootscope writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocKind {
    /// `bootscope run --timeline` (docs/timeline-schema.md).
    Timeline,
    /// `bootscope profile --output` (docs/profile-schema.md).
    Profile,
    /// `bootscope bench --output` (docs/bench-schema.md).
    Bench,
}

impl DocKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Timeline, Self::Profile, Self::Bench];

    /// The `schema` field that names it.
    pub fn schema(self) -> &'static str {
        match self {
            Self::Timeline => crate::timeline::TIMELINE_SCHEMA_NAME,
            Self::Profile => crate::profile::PROFILE_SCHEMA_NAME,
            Self::Bench => crate::bench::SCHEMA,
        }
    }

    /// The oldest and the newest version this bootscope reads.
    pub fn versions(self) -> (u32, u32) {
        match self {
            Self::Timeline => (
                crate::timeline::TIMELINE_SCHEMA_MIN_VERSION,
                crate::timeline::TIMELINE_SCHEMA_VERSION,
            ),
            Self::Profile => (
                crate::profile::PROFILE_SCHEMA_OLDEST,
                crate::profile::PROFILE_SCHEMA_VERSION,
            ),
            Self::Bench => (crate::bench::OLDEST_VERSION, crate::bench::VERSION),
        }
    }

    /// Its short name in messages: `timeline`, `profile`, `bench file`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Timeline => "timeline",
            Self::Profile => "profile",
            Self::Bench => "bench file",
        }
    }

    /// The kind a `schema` field names.
    pub fn of_schema(schema: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.schema() == schema)
    }
}

/// A document read into its type.
#[derive(Debug)]
pub enum Document {
    Timeline(Box<Timeline>),
    Profile(Box<Profile>),
    Bench(Box<BenchDoc>),
}

impl Document {
    pub fn kind(&self) -> DocKind {
        match self {
            Self::Timeline(_) => DocKind::Timeline,
            Self::Profile(_) => DocKind::Profile,
            Self::Bench(_) => DocKind::Bench,
        }
    }

    /// The timeline, if it is one.
    pub fn into_timeline(self) -> Option<Timeline> {
        match self {
            Self::Timeline(t) => Some(*t),
            _ => None,
        }
    }

    /// The profile, if it is one.
    pub fn into_profile(self) -> Option<Profile> {
        match self {
            Self::Profile(p) => Some(*p),
            _ => None,
        }
    }

    /// The bench document, if it is one.
    pub fn into_bench(self) -> Option<BenchDoc> {
        match self {
            Self::Bench(b) => Some(*b),
            _ => None,
        }
    }
}

/// A document's `schema` and `version` fields as they are (null where
/// absent).
#[derive(Debug, Default, Deserialize)]
pub struct Head {
    #[serde(default)]
    pub schema: serde_json::Value,
    #[serde(default)]
    pub version: serde_json::Value,
}

impl Head {
    /// The `schema` field when it is a string.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_str()
    }
}

/// Skims a JSON document for its [`Head`]: the rest is checked to be JSON
/// and skipped, not built into a tree.
pub fn head(bytes: &[u8]) -> Result<Head, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Why bytes are not a document of the kinds asked for.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// Not JSON at all.
    #[error("it is not JSON ({0})")]
    NotJson(#[source] serde_json::Error),
    /// JSON whose `schema` (the string, or `None` when it is missing or no
    /// string) is none of the kinds asked for.
    #[error("its \"schema\" is {}", found.as_deref().map_or_else(|| "missing".into(), |s| format!("{s:?}")))]
    Schema { found: Option<String> },
    /// No numeric `version` field.
    #[error("no numeric \"version\" field")]
    NoVersion { kind: DocKind },
    /// A version this bootscope does not read.
    #[error("it is a version {found} {}; this bootscope reads versions {} to {}", kind.name(), kind.versions().0, kind.versions().1)]
    Version { kind: DocKind, found: u64 },
    /// The right schema and version, the wrong shape.
    #[error("malformed {} document: {detail}", kind.schema())]
    Malformed { kind: DocKind, detail: String },
    /// The file could not be read as JSON: the input rules refused it, it
    /// could not be read, or it is not JSON ([`read_document`]).
    #[error(transparent)]
    Read(#[from] crate::input::document::StreamError),
}

/// Reads a document of one of the kinds in `accept`: its `schema` and
/// `version` checked first, on a skim, then read into its type.
pub fn parse_document(bytes: &[u8], accept: &[DocKind]) -> Result<Document, DocumentError> {
    let head = head(bytes).map_err(DocumentError::NotJson)?;
    let kind = kind_of(&head.schema, &head.version, accept)?;
    let malformed = |e: serde_json::Error| DocumentError::Malformed {
        kind,
        detail: e.to_string(),
    };
    Ok(match kind {
        DocKind::Timeline => Document::Timeline(serde_json::from_slice(bytes).map_err(malformed)?),
        DocKind::Profile => Document::Profile(serde_json::from_slice(bytes).map_err(malformed)?),
        DocKind::Bench => Document::Bench(serde_json::from_slice(bytes).map_err(malformed)?),
    })
}

/// The one decision of which document a `schema` and a `version` field
/// (null where absent) make, among the kinds in `accept`.
pub fn kind_of(
    schema: &serde_json::Value,
    version: &serde_json::Value,
    accept: &[DocKind],
) -> Result<DocKind, DocumentError> {
    let schema = schema.as_str();
    let Some(kind) = schema
        .and_then(DocKind::of_schema)
        .filter(|k| accept.contains(k))
    else {
        return Err(DocumentError::Schema {
            found: schema.map(str::to_string),
        });
    };
    let found = version.as_u64().ok_or(DocumentError::NoVersion { kind })?;
    let (oldest, newest) = kind.versions();
    if !(u64::from(oldest)..=u64::from(newest)).contains(&found) {
        return Err(DocumentError::Version { kind, found });
    }
    Ok(kind)
}

/// Reads the file at `path` as a document of one of the kinds in
/// `accept`, as a bounded stream ([`crate::input::document::JsonStream`]):
/// the input rules first (a FIFO, a device or a file past the input limit
/// is refused; the first byte must be `{`), then [`kind_of`] on the head
/// the stream read, then the typed parse of the stream, with no JSON tree
/// of the document.
pub fn read_document(path: &Path, accept: &[DocKind]) -> Result<Document, DocumentError> {
    from_stream(crate::input::document::JsonStream::open(path)?, accept)
}

/// [`read_document`] of a stream already open.
pub fn from_stream(
    doc: crate::input::document::JsonStream,
    accept: &[DocKind],
) -> Result<Document, DocumentError> {
    use crate::input::document::StreamError as ReadError;
    let found = doc.schema_value().is_some() && doc.version_value().is_some();
    if !(found || doc.head_is_whole()) {
        // The head did not tell (its fields not among the first 64 KiB,
        // which bootscope does not write): the fields of what was read.
        let v: serde_json::Value = doc.parse()?;
        let null = serde_json::Value::Null;
        let field = |name| v.get(name).unwrap_or(&null);
        let kind = kind_of(field("schema"), field("version"), accept)?;
        let malformed = |e: serde_json::Error| DocumentError::Malformed {
            kind,
            detail: e.to_string(),
        };
        return Ok(match kind {
            DocKind::Timeline => {
                Document::Timeline(Deserialize::deserialize(&v).map_err(malformed)?)
            }
            DocKind::Profile => Document::Profile(Deserialize::deserialize(&v).map_err(malformed)?),
            DocKind::Bench => Document::Bench(Deserialize::deserialize(&v).map_err(malformed)?),
        });
    }
    let null = serde_json::Value::Null;
    let kind = kind_of(
        doc.schema_value().unwrap_or(&null),
        doc.version_value().unwrap_or(&null),
        accept,
    )?;
    let malformed = |e: ReadError| match e {
        ReadError::Fields { detail, .. } => DocumentError::Malformed { kind, detail },
        other => DocumentError::Read(other),
    };
    Ok(match kind {
        DocKind::Timeline => Document::Timeline(doc.parse().map_err(malformed)?),
        DocKind::Profile => Document::Profile(doc.parse().map_err(malformed)?),
        DocKind::Bench => Document::Bench(doc.parse().map_err(malformed)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_into_its_type() {
        let profile = serde_json::to_vec(&Profile::new()).unwrap();
        let doc = parse_document(&profile, &DocKind::ALL).unwrap();
        assert_eq!(doc.kind(), DocKind::Profile);
        let timeline = br#"{"schema": "bootscope.timeline", "version": 2, "phases": []}"#;
        assert!(matches!(
            parse_document(timeline, &DocKind::ALL).unwrap(),
            Document::Timeline(_)
        ));
        for k in DocKind::ALL {
            assert_eq!(DocKind::of_schema(k.schema()), Some(k));
        }
    }

    #[test]
    fn the_wrong_document_is_refused_before_it_is_read() {
        let profile = serde_json::to_vec(&Profile::new()).unwrap();
        let e = parse_document(&profile, &[DocKind::Timeline]).unwrap_err();
        assert!(matches!(&e, DocumentError::Schema { found: Some(s) } if s == "bootscope.profile"));
        let e = parse_document(b"{\"schema\": 3}", &DocKind::ALL).unwrap_err();
        assert!(matches!(e, DocumentError::Schema { found: None }));
        assert_eq!(e.to_string(), "its \"schema\" is missing");
        let e = parse_document(b"<html>", &DocKind::ALL).unwrap_err();
        assert!(matches!(e, DocumentError::NotJson(_)));
        let e = parse_document(b"{\"schema\": \"bootscope.bench\"}", &DocKind::ALL).unwrap_err();
        assert!(matches!(
            e,
            DocumentError::NoVersion {
                kind: DocKind::Bench
            }
        ));
        let e = parse_document(
            b"{\"schema\": \"bootscope.profile\", \"version\": 9}",
            &DocKind::ALL,
        )
        .unwrap_err();
        assert!(matches!(e, DocumentError::Version { found: 9, .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "it is a version 9 profile; this bootscope reads versions 1 to 2"
        );
        let e = parse_document(
            b"{\"schema\": \"bootscope.timeline\", \"version\": 1, \"phases\": 3}",
            &DocKind::ALL,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                DocumentError::Malformed {
                    kind: DocKind::Timeline,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_file_is_read_as_a_stream_and_decided_alike() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p.json");
        std::fs::write(&p, serde_json::to_vec(&Profile::new()).unwrap()).unwrap();
        let doc = read_document(&p, &DocKind::ALL).unwrap();
        assert_eq!(doc.kind(), DocKind::Profile);
        let e = read_document(&p, &[DocKind::Timeline]).unwrap_err();
        assert!(matches!(&e, DocumentError::Schema { found: Some(s) } if s == "bootscope.profile"));
        std::fs::write(&p, b"{\"schema\": \"bootscope.profile\", \"version\": 9}").unwrap();
        let e = read_document(&p, &DocKind::ALL).unwrap_err();
        assert!(matches!(e, DocumentError::Version { found: 9, .. }), "{e}");
        std::fs::write(
            &p,
            b"{\"schema\": \"bootscope.timeline\", \"version\": 1, \"phases\": 3}",
        )
        .unwrap();
        let e = read_document(&p, &DocKind::ALL).unwrap_err();
        assert!(
            matches!(
                e,
                DocumentError::Malformed {
                    kind: DocKind::Timeline,
                    ..
                }
            ),
            "{e}"
        );
        let e = read_document(Path::new("/dev/zero"), &DocKind::ALL).unwrap_err();
        assert!(matches!(e, DocumentError::Read(_)), "{e}");
        assert!(e.to_string().contains("its first byte is 0x00"), "{e}");
    }
}
