//! A writer (and a small reader) for uncompressed cpio archives in the
//! SVR4 "newc" format, the format Linux unpacks as an initramfs.
//!
//! Archives are left uncompressed: the kernel accepts them as they are, and
//! under an emulator decompressing a large initramfs would cost seconds of
//! boot time.
//!
//! The kernel's unpacker does not create missing parent directories, so the
//! [`Builder`] adds every parent directory of an entry before the entry
//! itself (mode 0755) unless it was added explicitly before.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::{LabError, Result};

/// The magic number that starts every newc header.
const MAGIC: &[u8; 6] = b"070701";
/// Size of a newc header: the magic and 13 eight-digit hex fields.
const HEADER_LEN: usize = 110;
/// Name of the entry that ends an archive.
const TRAILER: &str = "TRAILER!!!";

/// File type bits (the `S_IFMT` part of `st_mode`).
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// The kind of an archive entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (its data is the target).
    Symlink,
    /// A character device.
    CharDevice,
    /// Anything else (block devices, FIFOs, sockets).
    Other,
}

impl EntryKind {
    fn from_mode(mode: u32) -> Self {
        match mode & S_IFMT {
            S_IFDIR => EntryKind::Dir,
            S_IFREG => EntryKind::File,
            S_IFLNK => EntryKind::Symlink,
            S_IFCHR => EntryKind::CharDevice,
            _ => EntryKind::Other,
        }
    }
}

/// Writes a newc archive entry by entry.
///
/// Paths are archive paths such as `bin/busybox` or `/bin/busybox` (a
/// leading `/` is dropped, as the kernel unpacks relative to `/`). They must
/// not contain `..`.
pub struct Builder<W: Write> {
    out: W,
    /// Bytes written so far, to compute padding.
    offset: u64,
    /// Next inode number; every entry gets its own so no two are hard links.
    next_ino: u32,
    /// Kind of every entry written so far, by normalized name.
    entries: HashMap<Vec<u8>, EntryKind>,
    /// Modification time stored in every header.
    mtime: u32,
}

impl<W: Write> Builder<W> {
    /// Starts an archive written to `out`.
    ///
    /// Every entry gets modification time 0, so archives built from the same
    /// inputs are byte-for-byte identical.
    pub fn new(out: W) -> Self {
        Builder {
            out,
            offset: 0,
            next_ino: 1,
            entries: HashMap::new(),
            mtime: 0,
        }
    }

    /// Whether `path` was already added (explicitly or as a parent).
    pub fn contains(&self, path: impl AsRef<Path>) -> bool {
        normalize(path.as_ref())
            .map(|name| self.entries.contains_key(&name))
            .unwrap_or(false)
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.offset
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.offset == 0
    }

    /// Adds a directory with permission bits `mode`.
    ///
    /// Adding a directory that already exists is allowed and does nothing.
    pub fn add_dir(&mut self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        let name = normalize(path.as_ref())?;
        match self.entries.get(&name) {
            Some(EntryKind::Dir) => return Ok(()),
            Some(_) => return Err(exists(&name)),
            None => {}
        }
        self.add_parents(&name)?;
        self.write_entry(&name, S_IFDIR | (mode & 0o7777), 2, 0, 0, &[])
    }

    /// Adds a regular file holding `bytes`.
    pub fn add_file_bytes(
        &mut self,
        path: impl AsRef<Path>,
        bytes: &[u8],
        mode: u32,
    ) -> Result<()> {
        let name = self.prepare(path.as_ref())?;
        let size = u32::try_from(bytes.len()).map_err(|_| LabError::CpioTooLarge {
            path: PathBuf::from(OsStr::from_bytes(&name)),
            size: bytes.len() as u64,
        })?;
        self.write_header(&name, S_IFREG | (mode & 0o7777), 1, size, 0, 0)?;
        self.write_data(bytes)?;
        self.pad()?;
        self.entries.insert(name, EntryKind::File);
        Ok(())
    }

    /// Adds a regular file whose contents are copied from `host_path`.
    ///
    /// Symbolic links on the host are followed; the file is streamed, not
    /// read into memory.
    pub fn add_file_from_host(
        &mut self,
        path_in_archive: impl AsRef<Path>,
        host_path: &Path,
        mode: u32,
    ) -> Result<()> {
        let name = self.prepare(path_in_archive.as_ref())?;
        let file = File::open(host_path).map_err(|e| LabError::io("open", host_path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| LabError::io("inspect", host_path, e))?;
        if !meta.is_file() {
            return Err(LabError::io(
                "archive",
                host_path,
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        let expected = meta.len();
        let size = u32::try_from(expected).map_err(|_| LabError::CpioTooLarge {
            path: host_path.to_path_buf(),
            size: expected,
        })?;
        self.write_header(&name, S_IFREG | (mode & 0o7777), 1, size, 0, 0)?;
        let mut reader = file.take(expected);
        let mut buf = vec![0u8; 256 * 1024];
        let mut copied: u64 = 0;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LabError::io("read", host_path, e)),
            };
            self.write_data(&buf[..n])?;
            copied += n as u64;
        }
        if copied != expected {
            return Err(LabError::FileChanged {
                path: host_path.to_path_buf(),
                expected,
                actual: copied,
            });
        }
        self.pad()?;
        self.entries.insert(name, EntryKind::File);
        Ok(())
    }

    /// Adds a symbolic link at `path` pointing to `target`.
    pub fn add_symlink(&mut self, path: impl AsRef<Path>, target: impl AsRef<Path>) -> Result<()> {
        let name = self.prepare(path.as_ref())?;
        let target = target.as_ref().as_os_str().as_bytes();
        if target.is_empty() {
            return Err(LabError::CpioName {
                name: display(&name),
                reason: "a symbolic link needs a non-empty target",
            });
        }
        self.write_entry(&name, S_IFLNK | 0o777, 1, 0, 0, target)
    }

    /// Adds a character device node `major:minor` with permission bits `mode`.
    ///
    /// Useful for `/dev/console`, which the kernel opens for `/init` before
    /// any devtmpfs can be mounted.
    pub fn add_char_device(
        &mut self,
        path: impl AsRef<Path>,
        major: u32,
        minor: u32,
        mode: u32,
    ) -> Result<()> {
        let name = self.prepare(path.as_ref())?;
        self.write_entry(&name, S_IFCHR | (mode & 0o7777), 1, major, minor, &[])
    }

    /// Writes the `TRAILER!!!` entry and returns the writer, flushed.
    pub fn finish(mut self) -> Result<W> {
        self.write_header(TRAILER.as_bytes(), 0, 1, 0, 0, 0)?;
        self.pad()?;
        self.out
            .flush()
            .map_err(|e| LabError::io("flush", "cpio archive", e))?;
        Ok(self.out)
    }

    /// Normalizes `path`, rejects duplicates and adds missing parents.
    fn prepare(&mut self, path: &Path) -> Result<Vec<u8>> {
        let name = normalize(path)?;
        if self.entries.contains_key(&name) {
            return Err(exists(&name));
        }
        self.add_parents(&name)?;
        Ok(name)
    }

    /// Adds every missing ancestor directory of `name`, outermost first.
    fn add_parents(&mut self, name: &[u8]) -> Result<()> {
        for (i, &b) in name.iter().enumerate() {
            if b != b'/' {
                continue;
            }
            let parent = &name[..i];
            match self.entries.get(parent) {
                Some(EntryKind::Dir) => {}
                Some(_) => {
                    return Err(LabError::CpioName {
                        name: display(name),
                        reason: "one of its parent directories is already a file, link or device",
                    })
                }
                None => {
                    let parent = parent.to_vec();
                    self.write_entry(&parent, S_IFDIR | 0o755, 2, 0, 0, &[])?;
                }
            }
        }
        Ok(())
    }

    /// Writes a complete entry whose data is small and in memory.
    fn write_entry(
        &mut self,
        name: &[u8],
        mode: u32,
        nlink: u32,
        rdev_major: u32,
        rdev_minor: u32,
        data: &[u8],
    ) -> Result<()> {
        let size = u32::try_from(data.len()).map_err(|_| LabError::CpioTooLarge {
            path: PathBuf::from(OsStr::from_bytes(name)),
            size: data.len() as u64,
        })?;
        self.write_header(name, mode, nlink, size, rdev_major, rdev_minor)?;
        self.write_data(data)?;
        self.pad()?;
        self.entries
            .insert(name.to_vec(), EntryKind::from_mode(mode));
        Ok(())
    }

    /// Writes a header and the NUL-terminated, padded name.
    fn write_header(
        &mut self,
        name: &[u8],
        mode: u32,
        nlink: u32,
        size: u32,
        rdev_major: u32,
        rdev_minor: u32,
    ) -> Result<()> {
        let ino = if name == TRAILER.as_bytes() {
            0
        } else {
            let ino = self.next_ino;
            self.next_ino = self.next_ino.wrapping_add(1);
            ino
        };
        let namesize = u32::try_from(name.len() + 1).map_err(|_| LabError::CpioName {
            name: display(name),
            reason: "the name is too long",
        })?;
        let fields: [u32; 13] = [
            ino, mode, 0, // uid
            0, // gid
            nlink, self.mtime, size, 0, // devmajor
            0, // devminor
            rdev_major, rdev_minor, namesize, 0, // check (unused by newc)
        ];
        let mut header = Vec::with_capacity(HEADER_LEN + name.len() + 4);
        header.extend_from_slice(MAGIC);
        for field in fields {
            header.extend_from_slice(format!("{field:08x}").as_bytes());
        }
        header.extend_from_slice(name);
        header.push(0);
        self.write_data(&header)?;
        self.pad()
    }

    fn write_data(&mut self, data: &[u8]) -> Result<()> {
        self.out
            .write_all(data)
            .map_err(|e| LabError::io("write", "cpio archive", e))?;
        self.offset += data.len() as u64;
        Ok(())
    }

    /// Pads with NUL bytes to the next multiple of 4, as newc requires after
    /// each header+name and after each file's data.
    fn pad(&mut self) -> Result<()> {
        let rem = (self.offset % 4) as usize;
        if rem != 0 {
            self.write_data(&[0u8; 4][..4 - rem])?;
        }
        Ok(())
    }
}

/// Turns a path into an archive name: no leading `/`, no `.` components,
/// single separators. `..`, empty names and NUL bytes are rejected.
fn normalize(path: &Path) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(part.as_bytes());
            }
            Component::ParentDir | Component::Prefix(_) => {
                return Err(LabError::CpioName {
                    name: path.display().to_string(),
                    reason: "archive paths must not contain `..`",
                })
            }
        }
    }
    if out.is_empty() {
        return Err(LabError::CpioName {
            name: path.display().to_string(),
            reason: "the path names no file (it is empty or the root directory)",
        });
    }
    if out.contains(&0) {
        return Err(LabError::CpioName {
            name: display(&out),
            reason: "names must not contain NUL bytes",
        });
    }
    if out == TRAILER.as_bytes() {
        return Err(LabError::CpioName {
            name: display(&out),
            reason: "this name marks the end of an archive",
        });
    }
    Ok(out)
}

fn display(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

fn exists(name: &[u8]) -> LabError {
    LabError::CpioName {
        name: display(name),
        reason: "an entry with this name was already added",
    }
}

/// One entry read back from an archive by [`read_entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name as stored (no leading `/`).
    pub name: PathBuf,
    /// Full `st_mode`: type and permission bits.
    pub mode: u32,
    /// The entry's kind, decoded from `mode`.
    pub kind: EntryKind,
    /// Inode number.
    pub ino: u32,
    /// Link count.
    pub nlink: u32,
    /// Device major number for device nodes.
    pub rdev_major: u32,
    /// Device minor number for device nodes.
    pub rdev_minor: u32,
    /// File contents, or the target of a symbolic link.
    pub data: Vec<u8>,
}

/// Parses a newc archive up to its trailer.
///
/// Used to check archives this crate writes; it accepts only the `070701`
/// variant and requires the trailer to be present.
pub fn read_entries(archive: &[u8]) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    loop {
        let malformed = |offset: usize, reason: String| LabError::CpioMalformed { offset, reason };
        let header = archive
            .get(pos..pos + HEADER_LEN)
            .ok_or_else(|| malformed(pos, "archive ends inside a header (no trailer)".into()))?;
        if &header[..6] != MAGIC {
            return Err(malformed(pos, "bad magic, expected 070701".into()));
        }
        let mut fields = [0u32; 13];
        for (i, field) in fields.iter_mut().enumerate() {
            let start = 6 + i * 8;
            let text = std::str::from_utf8(&header[start..start + 8])
                .map_err(|_| malformed(pos + start, "header field is not ASCII".into()))?;
            *field = u32::from_str_radix(text, 16)
                .map_err(|_| malformed(pos + start, format!("header field {text:?} is not hex")))?;
        }
        let [ino, mode, _uid, _gid, nlink, _mtime, filesize, _devmaj, _devmin, rdev_major, rdev_minor, namesize, _check] =
            fields;
        let name_start = pos + HEADER_LEN;
        let name_end = name_start + namesize as usize;
        let name_with_nul = archive
            .get(name_start..name_end)
            .ok_or_else(|| malformed(name_start, "archive ends inside a name".into()))?;
        let (&last, name) = name_with_nul
            .split_last()
            .ok_or_else(|| malformed(name_start, "zero name size".into()))?;
        if last != 0 {
            return Err(malformed(name_start, "name is not NUL-terminated".into()));
        }
        let data_start = align4(name_end);
        let data_end = data_start + filesize as usize;
        let data = archive
            .get(data_start..data_end)
            .ok_or_else(|| malformed(data_start, "archive ends inside file data".into()))?;
        pos = align4(data_end);
        if name == TRAILER.as_bytes() {
            return Ok(entries);
        }
        entries.push(Entry {
            name: PathBuf::from(OsStr::from_bytes(name)),
            mode,
            kind: EntryKind::from_mode(mode),
            ino,
            nlink,
            rdev_major,
            rdev_minor,
            data: data.to_vec(),
        });
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn sample() -> Vec<u8> {
        let mut b = Builder::new(Vec::new());
        b.add_dir("/dev", 0o755).unwrap();
        b.add_char_device("/dev/console", 5, 1, 0o600).unwrap();
        b.add_file_bytes("/bin/busybox", b"\x7fELF....", 0o755)
            .unwrap();
        b.add_symlink("bin/sh", "busybox").unwrap();
        b.add_file_bytes("init", b"#!/bin/sh\n", 0o755).unwrap();
        b.add_file_bytes("/empty", b"", 0o644).unwrap();
        b.add_file_bytes("a/b/c/odd len", b"12345", 0o600).unwrap();
        b.finish().unwrap()
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        assert_eq!(bytes.len() % 4, 0);
        let entries = read_entries(&bytes).unwrap();
        let names: Vec<_> = entries.iter().map(|e| e.name.to_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "dev",
                "dev/console",
                "bin",
                "bin/busybox",
                "bin/sh",
                "init",
                "empty",
                "a",
                "a/b",
                "a/b/c",
                "a/b/c/odd len"
            ]
        );
        let get = |n: &str| entries.iter().find(|e| e.name == Path::new(n)).unwrap();
        assert_eq!(get("dev").kind, EntryKind::Dir);
        assert_eq!(get("dev").mode, 0o040755);
        let console = get("dev/console");
        assert_eq!(console.kind, EntryKind::CharDevice);
        assert_eq!((console.rdev_major, console.rdev_minor), (5, 1));
        assert_eq!(console.mode & 0o7777, 0o600);
        assert_eq!(get("bin/busybox").data, b"\x7fELF....");
        assert_eq!(get("bin/busybox").mode, 0o100755);
        assert_eq!(get("bin/sh").kind, EntryKind::Symlink);
        assert_eq!(get("bin/sh").data, b"busybox");
        assert_eq!(get("empty").data, b"");
        assert_eq!(get("a/b/c/odd len").data, b"12345");
        assert_eq!(get("a/b").mode, 0o040755);
        let mut inos: Vec<u32> = entries.iter().map(|e| e.ino).collect();
        inos.sort_unstable();
        inos.dedup();
        assert_eq!(inos.len(), entries.len(), "inode numbers must be unique");
        // The trailer is the last thing in the archive.
        let tail = String::from_utf8_lossy(&bytes[bytes.len() - 16..]).into_owned();
        assert!(tail.contains("TRAILER!!!"), "{tail:?}");
    }

    #[test]
    fn every_name_length_is_padded() {
        // Names of every length mod 4 and data of every length mod 4.
        let mut b = Builder::new(Vec::new());
        for n in 1..=8 {
            let name = "x".repeat(n);
            let data = vec![b'd'; n];
            b.add_file_bytes(&name, &data, 0o644).unwrap();
        }
        let bytes = b.finish().unwrap();
        let entries = read_entries(&bytes).unwrap();
        assert_eq!(entries.len(), 8);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.data.len(), i + 1);
            assert_eq!(e.name.as_os_str().len(), i + 1);
        }
    }

    #[test]
    fn host_file_is_streamed() {
        let dir = crate::util::temp_dir("cpio-test").unwrap();
        let path = dir.path().join("data.bin");
        let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let mut b = Builder::new(Vec::new());
        b.add_file_from_host("/srv/data.bin", &path, 0o640).unwrap();
        let bytes = b.finish().unwrap();
        let entries = read_entries(&bytes).unwrap();
        let e = entries
            .iter()
            .find(|e| e.name == Path::new("srv/data.bin"))
            .unwrap();
        assert_eq!(e.data, content);
        assert_eq!(e.mode, 0o100640);
    }

    #[test]
    fn rejects_bad_names_and_duplicates() {
        let mut b = Builder::new(Vec::new());
        assert!(b.add_file_bytes("../x", b"", 0o644).is_err());
        assert!(b.add_file_bytes("/", b"", 0o644).is_err());
        assert!(b.add_file_bytes("", b"", 0o644).is_err());
        assert!(b.add_file_bytes("TRAILER!!!", b"", 0o644).is_err());
        b.add_file_bytes("f", b"1", 0o644).unwrap();
        assert!(b.add_file_bytes("/f", b"2", 0o644).is_err());
        assert!(b.add_file_bytes("f/child", b"", 0o644).is_err());
        assert!(b.add_dir("f", 0o755).is_err());
        b.add_dir("d", 0o755).unwrap();
        b.add_dir("/d/", 0o755).unwrap();
        assert!(b.contains("/d"));
        assert!(b.contains("./f"));
        assert!(!b.contains("g"));
    }

    #[test]
    fn truncated_archive_is_an_error() {
        let bytes = sample();
        assert!(read_entries(&bytes[..bytes.len() - 20]).is_err());
        assert!(read_entries(&bytes[..50]).is_err());
    }

    /// Cross-checks the format with GNU cpio, when it is installed.
    #[test]
    fn gnu_cpio_lists_the_archive() {
        let bytes = sample();
        let child = Command::new("cpio")
            .args(["-t", "-v", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                println!("SKIP gnu_cpio_lists_the_archive: cannot run `cpio` ({e}); install it with `apt-get install cpio`");
                return;
            }
        };
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "cpio failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listing = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = listing.lines().collect();
        assert_eq!(lines.len(), 11, "{listing}");
        assert!(lines[1].starts_with("crw-------"), "{listing}");
        assert!(lines[1].contains("5,"), "{listing}");
        assert!(lines[3].starts_with("-rwxr-xr-x"), "{listing}");
        assert!(lines[4].starts_with("lrwxrwxrwx"), "{listing}");
        assert!(lines[4].ends_with("bin/sh -> busybox"), "{listing}");
        assert!(lines[10].ends_with("a/b/c/odd len"), "{listing}");
    }
}
