//! JSON documents read as a stream: the input rules of [the module](super),
//! then a parse straight into the reader's types, with no copy of the file
//! and no JSON tree of it in memory.
//!
//! - The first byte that is not white space must be `{`: anything else
//!   (`/dev/zero`'s NUL, a binary file) ends the read at once ("is not
//!   JSON (its first byte is 0x00, and a JSON document starts with
//!   '{')"), after one buffer of at most 64 KiB was read.
//! - The document's head (its `schema` and `version` fields, which
//!   bootscope writes first) is read before the rest
//!   ([`JsonStream::schema`], [`JsonStream::version`]), so a reader can tell a
//!   document of another kind or version before it parses the whole file.
//!   What the head read took is kept and read again by [`JsonStream::parse`]:
//!   a FIFO or `/dev/stdin` is read once.
//! - The parse reads the bounded stream ([`super::Limited`]): past the
//!   input limit it stops with [`InputError::StreamTooLarge`].

use std::fmt;
use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::{Input, InputError, Limited};

/// The most of a document read to find its head: past it, the head is
/// taken as not found and the parse decides.
pub const HEAD_MAX: usize = 64 << 10;

/// Why a document cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The input rules refused it, or it could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Not JSON, or JSON cut short (the detail says where).
    #[error("{} is not JSON ({detail})", path.display())]
    NotJson { path: PathBuf, detail: String },
    /// JSON, but a field is missing or has the wrong type for the reader.
    #[error("{}: {detail}", path.display())]
    Fields { path: PathBuf, detail: String },
}

impl StreamError {
    /// Whether the error is the user's to fix (exit status 2): everything
    /// but a failed read.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Input(e) => e.is_bad_input(),
            Self::NotJson { .. } | Self::Fields { .. } => true,
        }
    }

    /// What is wrong, without the path (for messages that name it
    /// themselves).
    pub fn detail(&self) -> String {
        match self {
            Self::Input(e) => e.to_string(),
            Self::NotJson { detail, .. } => format!("it is not JSON ({detail})"),
            Self::Fields { detail, .. } => detail.clone(),
        }
    }
}

/// A JSON document opened by the input rules, its head read.
pub struct JsonStream {
    path: PathBuf,
    /// What the head read took from the stream, read again first.
    taken: Vec<u8>,
    rest: BufReader<Limited>,
    schema: Option<Value>,
    version: Option<Value>,
    /// Whether the whole document was read for its head (a field it does
    /// not have is then absent from the document, not just from its head).
    whole: bool,
}

impl fmt::Debug for JsonStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonStream")
            .field("path", &self.path)
            .field("schema", &self.schema)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl JsonStream {
    /// Opens `path` by the input rules and reads its head.
    pub fn open(path: &Path) -> Result<JsonStream, StreamError> {
        let input = Input::open(path)?;
        Self::from_input(input)
    }

    /// [`JsonStream::open`] on an input already open.
    pub fn from_input(input: Input) -> Result<JsonStream, StreamError> {
        let path = input.path().to_path_buf();
        let mut rest = input.reader();
        first_brace(&mut rest, &path)?;
        let mut doc = JsonStream {
            path,
            taken: Vec::new(),
            rest,
            schema: None,
            version: None,
            whole: false,
        };
        doc.read_head()?;
        Ok(doc)
    }

    /// The path the document was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `schema` field when the head has it.
    pub fn schema_value(&self) -> Option<&Value> {
        self.schema.as_ref()
    }

    /// The `schema` field when the head has it as a string.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_ref().and_then(Value::as_str)
    }

    /// The `version` field when the head has it.
    pub fn version_value(&self) -> Option<&Value> {
        self.version.as_ref()
    }

    /// The `version` field when the head has it as a whole number.
    pub fn version(&self) -> Option<u64> {
        self.version.as_ref().and_then(Value::as_u64)
    }

    /// Whether the head was read to the document's end: a field the head
    /// does not have is then not in the document at all.
    pub fn head_is_whole(&self) -> bool {
        self.whole
    }

    /// Parses the whole document into `T`, as a stream.
    pub fn parse<T: DeserializeOwned>(mut self) -> Result<T, StreamError> {
        let taken = std::mem::take(&mut self.taken);
        let result = {
            let chain = Cursor::new(taken).chain(&mut self.rest);
            // By value: `io::Bytes` over a `BufReader` reads from its
            // buffer, not through a call per byte.
            serde_json::from_reader(BufReader::with_capacity(1 << 16, chain))
        };
        result.map_err(|e| self.error(e))
    }

    /// Reads the head: the top-level `schema` and `version` fields, up to
    /// [`HEAD_MAX`] bytes in.
    fn read_head(&mut self) -> Result<(), StreamError> {
        let mut taker = Taker {
            inner: &mut self.rest,
            taken: Vec::new(),
        };
        let mut head = Head::default();
        let result = {
            let mut de = serde_json::Deserializer::from_reader(&mut taker);
            HeadSeed(&mut head).deserialize(&mut de)
        };
        self.taken = taker.taken;
        self.schema = head.schema;
        self.version = head.version;
        self.whole = head.whole;
        match result {
            Ok(()) => Ok(()),
            // Both found, or the head's bytes all taken: the parse goes on.
            Err(_) if head.done || self.taken.len() >= HEAD_MAX => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    fn error(&self, e: serde_json::Error) -> StreamError {
        use serde_json::error::Category;
        let path = self.path.clone();
        match e.classify() {
            Category::Io => {
                let io = std::io::Error::other(e.to_string());
                StreamError::Input(self.rest.get_ref().error(io, path))
            }
            Category::Syntax => StreamError::NotJson {
                path,
                detail: e.to_string(),
            },
            Category::Eof => StreamError::NotJson {
                path,
                detail: format!("it ends early ({e})"),
            },
            Category::Data => StreamError::Fields {
                path,
                detail: e.to_string(),
            },
        }
    }
}

/// Reads the JSON document at `path` into `T` ([`JsonStream`]).
pub fn read_document<T: DeserializeOwned>(path: &Path) -> Result<T, StreamError> {
    JsonStream::open(path)?.parse()
}

/// Skips white space and checks that the document starts with `{`,
/// reading no more than one buffer.
fn first_brace(r: &mut BufReader<Limited>, path: &Path) -> Result<(), StreamError> {
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) => return Err(r.get_ref().error(e, path.to_path_buf()).into()),
        };
        let Some(&first) = buf.first() else {
            return Err(StreamError::NotJson {
                path: path.to_path_buf(),
                detail: "it is empty".into(),
            });
        };
        let ws = buf
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .count();
        if ws == 0 {
            return if first == b'{' {
                Ok(())
            } else {
                Err(StreamError::NotJson {
                    path: path.to_path_buf(),
                    detail: format!(
                        "its first byte is {}, and a JSON document starts with '{{'",
                        describe_byte(first)
                    ),
                })
            };
        }
        r.consume(ws);
    }
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("0x{b:02x}")
    }
}

/// A reader that keeps what it reads, up to [`HEAD_MAX`] bytes.
struct Taker<'a> {
    inner: &'a mut BufReader<Limited>,
    taken: Vec<u8>,
}

impl Read for Taker<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = HEAD_MAX.saturating_sub(self.taken.len());
        if room == 0 {
            return Err(std::io::Error::other("head read"));
        }
        let want = buf.len().min(room);
        let n = self.inner.read(&mut buf[..want])?;
        self.taken.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

#[derive(Default)]
struct Head {
    schema: Option<Value>,
    version: Option<Value>,
    /// Both found: the head read stops.
    done: bool,
    /// The document's end was reached.
    whole: bool,
}

struct HeadSeed<'a>(&'a mut Head);

impl<'de> DeserializeSeed<'de> for HeadSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeadSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'_, str>>()? {
            match &*key {
                "schema" => self.0.schema = Some(map.next_value()?),
                "version" => self.0.version = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if self.0.schema.is_some() && self.0.version.is_some() {
                self.0.done = true;
                // Stops the read: the rest is the parse's.
                return Err(A::Error::custom("head read"));
            }
        }
        self.0.whole = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Doc {
        schema: String,
        version: u32,
        n: Vec<u32>,
    }

    #[test]
    fn a_document_reads_its_head_then_parses_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.json",
            b" \n{\"schema\": \"s\", \"version\": 2, \"n\": [1, 2]}\n",
        );
        let doc = JsonStream::open(&p).unwrap();
        assert_eq!((doc.schema(), doc.version()), (Some("s"), Some(2)));
        assert!(!doc.head_is_whole());
        let v: Doc = doc.parse().unwrap();
        assert_eq!(v.n, [1, 2]);
        // Head fields after a long field: found all the same, the parse
        // reads the whole again.
        let long = format!(
            "{{\"n\": [{}], \"version\": 1, \"schema\": \"s\"}}",
            vec!["7"; 100_000].join(",")
        );
        let p = write(d.path(), "b.json", long.as_bytes());
        let doc = JsonStream::open(&p).unwrap();
        assert_eq!((doc.schema(), doc.version()), (None, None));
        let v: Doc = doc.parse().unwrap();
        assert_eq!((v.n.len(), v.version), (100_000, 1));
    }

    #[test]
    fn what_is_not_json_ends_at_its_first_byte() {
        let d = tempfile::tempdir().unwrap();
        for (text, says) in [
            (&b"\0\0\0"[..], "0x00"),
            (b"[1, 2]", "'['"),
            (b"", "empty"),
            (b"  \n", "empty"),
        ] {
            let p = write(d.path(), "x", text);
            let e = JsonStream::open(&p).unwrap_err();
            assert!(matches!(e, StreamError::NotJson { .. }), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        let e = JsonStream::open(Path::new("/dev/zero")).unwrap_err();
        assert!(
            e.to_string()
                .contains("is not JSON (its first byte is 0x00"),
            "{e}"
        );
        // Cut short, or broken within the head: not JSON.
        let p = write(d.path(), "cut", b"{\"schema\": \"s\"");
        let e = JsonStream::open(&p).unwrap_err();
        assert!(matches!(e, StreamError::NotJson { .. }), "{e}");
        let p = write(d.path(), "bad", b"{\"schema\" 1}");
        assert!(matches!(
            JsonStream::open(&p).unwrap_err(),
            StreamError::NotJson { .. }
        ));
        // JSON of the wrong shape: a field error.
        let p = write(d.path(), "shape", b"{\"schema\": \"s\", \"n\": \"x\"}");
        let doc = JsonStream::open(&p).unwrap();
        assert!(doc.head_is_whole());
        let e = doc.parse::<Doc>().unwrap_err();
        assert!(matches!(e, StreamError::Fields { .. }), "{e}");
    }

    #[test]
    fn an_endless_document_stops_at_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "big.json", &[b'{'; 1]);
        let mut text = b"{\"schema\": \"s\", \"version\": 1, \"n\": [".to_vec();
        text.extend(std::iter::repeat_n(b' ', 1 << 20));
        std::fs::write(&p, &text).unwrap();
        let input = Input::open_with_limit(Path::new("/dev/zero"), 1 << 20).unwrap();
        assert!(JsonStream::from_input(input).is_err());
        let f = std::fs::File::open(&p).unwrap();
        let meta = f.metadata().unwrap();
        let input = Input {
            path: p.clone(),
            file: f,
            meta,
            limit: 1 << 19,
        };
        let e = JsonStream::from_input(input)
            .unwrap()
            .parse::<Doc>()
            .unwrap_err();
        assert!(
            matches!(e, StreamError::Input(InputError::StreamTooLarge { .. })),
            "{e}"
        );
    }
}
