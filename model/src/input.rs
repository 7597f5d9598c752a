//! Reading input files: files bootscope did not create (documents,
//! consoles, symbol files, kernels), and its own cache files.
//!
//! The rules, for every such read:
//!
//! - The open never blocks: it is made with `O_NONBLOCK` (a FIFO with no
//!   writer would otherwise hold `open()` forever, where no signal handler
//!   can end it cleanly) and `O_NOCTTY` (a terminal given as a file does
//!   not become the controlling terminal). Once open, the descriptor is
//!   put back to blocking reads.
//! - The file's type is checked on the open descriptor (`fstat`), so that
//!   what is checked is what is read: a directory, a block device or a
//!   socket is refused; a regular file, a character device (`/dev/stdin`)
//!   and a FIFO (a shell's `<(command)`) are read.
//! - Sizes are bounded ([`max_input`]): a regular file larger than the
//!   limit is refused before anything is read (its size is known from
//!   `fstat`); a device or FIFO, whose size is not known, is read until
//!   the limit and refused past it (`/dev/zero` does not exhaust memory).
//!   The limit is [`DEFAULT_MAX_INPUT`], raised (or lowered) with the
//!   environment variable [`MAX_INPUT_ENV`] (`BOOTSCOPE_MAX_INPUT=4G`).
//! - A file that a document names (a timeline's initrd or kernel, a cache
//!   file) is opened only if it is a regular file ([`open_named`]): its
//!   type is checked before the file itself is opened, so a document that
//!   names `/dev/watchdog`, a terminal or a FIFO does not make bootscope
//!   open it.
//! - JSON documents are parsed as a stream from the bounded reader
//!   ([`document`]): a first byte that is not `{` ends the read at once.

pub mod document;

use std::ffi::OsString;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::size::{human_size, parse_size};

/// The largest input read by default: 1 GiB (a profile of a million exit
/// sites is a quarter of that; a vmlinux with full debug information is
/// about half).
pub const DEFAULT_MAX_INPUT: u64 = 1 << 30;

/// The environment variable that sets the input size limit, as a size
/// (`512M`, `4G`; see [`crate::size`]).
pub const MAX_INPUT_ENV: &str = "BOOTSCOPE_MAX_INPUT";

/// Why an input cannot be read. Each message names the path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is a directory; give a file", path.display())]
    Directory { path: PathBuf },
    #[error("{} is a {what}; give a regular file (or a pipe or character device)", path.display())]
    Unsupported { path: PathBuf, what: &'static str },
    #[error("{} is {} ({size} bytes), more than the input limit of {}; raise the limit with {MAX_INPUT_ENV}=SIZE (for example {MAX_INPUT_ENV}=8G) if it is meant", path.display(), human_size(*size), human_size(*limit))]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("{} gives more than the input limit of {} (it is not a regular file, so it was read up to the limit); raise the limit with {MAX_INPUT_ENV}=SIZE if it is meant", path.display(), human_size(*limit))]
    StreamTooLarge { path: PathBuf, limit: u64 },
    #[error("{} is a {what}, not a regular file: bootscope opens only regular files where a document names a file", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{MAX_INPUT_ENV}={value:?} is not a size: {why}; give one such as 2G")]
    BadLimit { value: OsString, why: String },
}

impl InputError {
    /// Whether the error is the user's to fix (a bad path, type, size or
    /// limit: exit status 2) rather than the system's.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, InputError::Read { .. })
    }
}

/// The input size limit: [`MAX_INPUT_ENV`] when set, else
/// [`DEFAULT_MAX_INPUT`].
pub fn max_input() -> Result<u64, InputError> {
    let Some(value) = std::env::var_os(MAX_INPUT_ENV) else {
        return Ok(DEFAULT_MAX_INPUT);
    };
    let text = value.to_str().ok_or_else(|| InputError::BadLimit {
        value: value.clone(),
        why: "it is not UTF-8".into(),
    })?;
    match parse_size(text) {
        Ok(0) => Err(InputError::BadLimit {
            value: value.clone(),
            why: "it is zero".into(),
        }),
        Ok(n) => Ok(n),
        Err(e) => Err(InputError::BadLimit {
            value: value.clone(),
            why: e.to_string(),
        }),
    }
}

/// What a file type is called in messages.
pub fn kind_name(t: std::fs::FileType) -> &'static str {
    if t.is_file() {
        "regular file"
    } else if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Opens `path` for reading without blocking (`O_NONBLOCK`, `O_NOCTTY`,
/// plus `extra_flags`), then puts the descriptor back to blocking reads.
/// Returns the file and its metadata (from the descriptor).
pub fn open_nonblocking(path: &Path, extra_flags: i32) -> std::io::Result<(File, Metadata)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | extra_flags)
        .open(path)?;
    let meta = file.metadata()?;
    set_blocking(&file)?;
    Ok((file, meta))
}

/// Clears `O_NONBLOCK` on an open file.
pub fn set_blocking(file: &File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor owned by `file`, with integer flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Opens a file that a document names (an initrd, a kernel, a cache
/// file) for reading, if it is a regular file: never a device, FIFO or
/// socket, whatever the document says.
///
/// The path is first opened with `O_PATH`, which does not open the file
/// itself (no device driver's `open` runs, a FIFO does not wait); its type
/// is checked on that descriptor, and only a regular file is then opened
/// for reading, through the same descriptor (`/proc/self/fd/N`), so what
/// was checked is what is read. The result is checked again.
pub fn open_named(path: &Path) -> Result<(File, Metadata), InputError> {
    let open_err = |source| InputError::Open {
        path: path.to_path_buf(),
        source,
    };
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .map_err(open_err)?;
    let meta = handle.metadata().map_err(open_err)?;
    if !meta.is_file() {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
            what: kind_name(meta.file_type()),
        });
    }
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
    let (file, opened) = match open_nonblocking(&by_fd, 0) {
        Ok(f) => f,
        // Without /proc: the path again, checked to be the same file below.
        Err(_) => open_nonblocking(path, 0).map_err(open_err)?,
    };
    use std::os::unix::fs::MetadataExt;
    if !opened.is_file() || (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
            what: kind_name(opened.file_type()),
        });
    }
    Ok((file, opened))
}

/// An input file opened by the rules of [this module](self), to read
/// whole or to stream.
pub struct Input {
    path: PathBuf,
    file: File,
    meta: Metadata,
    limit: u64,
}

impl Input {
    /// Opens `path` with the limit [`max_input`] gives.
    pub fn open(path: &Path) -> Result<Input, InputError> {
        Self::open_with_limit(path, max_input()?)
    }

    /// Opens `path`, refusing a regular file larger than `limit` bytes.
    pub fn open_with_limit(path: &Path, limit: u64) -> Result<Input, InputError> {
        let (file, meta) = open_nonblocking(path, 0).map_err(|source| InputError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let t = meta.file_type();
        if t.is_dir() {
            return Err(InputError::Directory {
                path: path.to_path_buf(),
            });
        }
        if !(t.is_file() || t.is_fifo() || t.is_char_device()) {
            return Err(InputError::Unsupported {
                path: path.to_path_buf(),
                what: kind_name(t),
            });
        }
        Input::within_limit(path, file, meta, limit)
    }

    /// An opened input, refused when it is a regular file larger than
    /// `limit` (a device or FIFO is bounded as it is read).
    fn within_limit(
        path: &Path,
        file: File,
        meta: Metadata,
        limit: u64,
    ) -> Result<Input, InputError> {
        if meta.file_type().is_file() && meta.len() > limit {
            return Err(InputError::TooLarge {
                path: path.to_path_buf(),
                size: meta.len(),
                limit,
            });
        }
        Ok(Input {
            path: path.to_path_buf(),
            file,
            meta,
            limit,
        })
    }

    /// Opens a file that a document names ([`open_named`]: a regular file
    /// only), with the limit [`max_input`] gives.
    pub fn open_named(path: &Path) -> Result<Input, InputError> {
        let limit = max_input()?;
        let (file, meta) = open_named(path)?;
        Input::within_limit(path, file, meta, limit)
    }

    /// The file's metadata, from the open descriptor.
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Reads the whole input (at most the limit).
    pub fn read_all(self) -> Result<Vec<u8>, InputError> {
        let path = self.path.clone();
        let hint = if self.meta.is_file() {
            self.meta.len() as usize
        } else {
            0
        };
        let mut out = Vec::with_capacity(hint);
        let mut r = self.reader();
        match r.read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(e) => Err(r.get_ref().error(e, path)),
        }
    }

    /// The input as a buffered stream that fails once more than the limit
    /// has been read (a regular file that grows while read, a device).
    pub fn reader(self) -> BufReader<Limited> {
        BufReader::with_capacity(
            1 << 16,
            Limited {
                file: self.file,
                left: self.limit,
                limit: self.limit,
                over: false,
            },
        )
    }

    /// The path the input was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A file read at most up to a limit; reading past it is an error
/// ([`Limited::error`] turns it into [`InputError::StreamTooLarge`]).
pub struct Limited {
    file: File,
    left: u64,
    limit: u64,
    over: bool,
}

impl Limited {
    /// The [`InputError`] of a failed read from this stream.
    pub fn error(&self, e: std::io::Error, path: PathBuf) -> InputError {
        if self.over {
            InputError::StreamTooLarge {
                path,
                limit: self.limit,
            }
        } else {
            InputError::Read { path, source: e }
        }
    }

    /// Whether the stream was refused for passing its limit.
    pub fn over_limit(&self) -> bool {
        self.over
    }
}

impl Read for Limited {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // One byte more tells a stream of exactly the limit from a
            // longer one.
            let mut probe = [0u8; 1];
            return match self.file.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.over = true;
                    Err(std::io::Error::new(
                        std::io::ErrorKind::FileTooLarge,
                        format!("more than {} bytes", self.limit),
                    ))
                }
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Reads the input at `path` whole, by the rules of [this module](self).
pub fn read_input(path: &Path) -> Result<Vec<u8>, InputError> {
    Input::open(path)?.read_all()
}

/// [`read_input`] with an explicit limit.
pub fn read_input_with_limit(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    Input::open_with_limit(path, limit)?.read_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    fn mkfifo(p: &Path) {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_regular_file_is_read_whole_within_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("doc.json");
        std::fs::write(&p, b"{\"a\": 1}").unwrap();
        assert_eq!(read_input_with_limit(&p, 8).unwrap(), b"{\"a\": 1}");
        let e = read_input_with_limit(&p, 7).unwrap_err();
        assert!(matches!(e, InputError::TooLarge { size: 8, .. }), "{e}");
        assert!(e.to_string().contains(MAX_INPUT_ENV), "{e}");
    }

    #[test]
    fn an_endless_device_is_read_only_up_to_the_limit() {
        let t = Instant::now();
        let e = read_input_with_limit(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(matches!(e, InputError::StreamTooLarge { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        // A device that ends within the limit is read.
        assert!(read_input_with_limit(Path::new("/dev/null"), 1)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_fifo_without_a_writer_does_not_block_the_open() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fifo");
        mkfifo(&p);
        // No writer: the open returns at once and the read sees the end.
        assert!(read_input(&p).unwrap().is_empty());
        // With a writer: read as a stream. The reader opens first (it does
        // not wait for a writer), so the writer's open does not block.
        let input = Input::open(&p).unwrap();
        let mut w = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .unwrap();
        std::io::Write::write_all(&mut w, b"through").unwrap();
        drop(w);
        assert_eq!(input.read_all().unwrap(), b"through");
    }

    #[test]
    fn a_named_file_is_opened_only_if_regular() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        for (p, what) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/null"), "character device"),
            (d.path(), "directory"),
        ] {
            let e = open_named(p).unwrap_err();
            assert!(matches!(e, InputError::NotRegular { .. }), "{e}");
            assert!(e.to_string().contains(what), "{e}");
        }
        let f = d.path().join("initrd");
        std::fs::write(&f, b"070701").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(
            Input::open_named(&link).unwrap().read_all().unwrap(),
            b"070701"
        );
        // A link to a device is the device.
        let dev = d.path().join("dev");
        std::os::unix::fs::symlink("/dev/null", &dev).unwrap();
        assert!(matches!(
            open_named(&dev).unwrap_err(),
            InputError::NotRegular { .. }
        ));
    }

    #[test]
    fn directories_and_bad_limits_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = read_input(d.path()).unwrap_err();
        assert!(matches!(e, InputError::Directory { .. }), "{e}");
        let e = read_input(&d.path().join("missing")).unwrap_err();
        assert!(matches!(e, InputError::Open { .. }), "{e}");
        assert!(e.is_bad_input());
    }
}
