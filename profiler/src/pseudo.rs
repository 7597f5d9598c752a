//! Reading the kernel's pseudo-files (procfs, sysfs, tracefs).
//!
//! They report a size of 0, so `std::fs::read_to_string` stats the file,
//! then reads it 32 bytes first and doubles from there: eight or nine
//! system calls for a 1 KiB tracepoint format. Reading into a page-sized
//! buffer takes two. It matters where every system call is slow (the
//! profiler's start-up reads about fifty of these files before a guest may
//! run; in an emulated machine each call costs tens of microseconds).

use std::io::Read;
use std::path::Path;

/// Bytes read per call: most of these files fit in one read.
const CHUNK: usize = 8192;

/// The whole file as text (lossy where it is not UTF-8).
pub fn read(path: impl AsRef<Path>) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; CHUNK];
    let mut len = 0;
    loop {
        if buf.len() - len < CHUNK / 2 {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(match String::from_utf8(buf) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pseudo_and_regular_files_whole() {
        let status = read("/proc/self/status").unwrap();
        assert!(status.starts_with("Name:"), "{status}");
        assert!(status.contains("\nTgid:"), "{status}");

        let dir = std::env::temp_dir().join(format!("bootscope-pseudo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Longer than several chunks, so the buffer must grow.
        let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let p = dir.join("long");
        std::fs::write(&p, &text).unwrap();
        assert_eq!(read(&p).unwrap(), text);
        std::fs::write(&p, "").unwrap();
        assert_eq!(read(&p).unwrap(), "");
        let err = read(dir.join("absent")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
