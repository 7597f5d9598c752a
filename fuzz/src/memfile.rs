//! Fuzz input as a file: the loaders and readers under test take paths.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;

/// An anonymous in-memory file (memfd) holding some bytes, reachable by
/// path through `/proc/self/fd`. Nothing touches the disk, and the file
/// goes away when this is dropped.
pub struct MemFile {
    file: File,
    path: PathBuf,
}

impl MemFile {
    /// A memfd holding `bytes`.
    pub fn new(bytes: &[u8]) -> Self {
        // SAFETY: memfd_create with a NUL-terminated name and plain flags;
        // the result is checked before use.
        let fd = unsafe { libc::memfd_create(c"bootscope-fuzz".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(
            fd >= 0,
            "memfd_create failed: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(bytes).expect("writing a memfd");
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Self { file, path }
    }

    /// A path that opens this file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
}
