//! Image files: a layout-independent digest of a (sparse) raw image, and a
//! copy that keeps it sparse and checks that digest as it goes.
//!
//! The digest covers the image's length and every 1 MiB block that holds a
//! non-zero byte, with its index: two files with the same bytes have the
//! same digest whatever their holes, and the zero blocks of a mostly empty
//! file system cost neither hashing nor writing. The copy also computes
//! the image's cache seal (`bootscope_model::cache`), over every byte.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

use bootscope_model::cache::{Seal, Sealer};
use sha2::{Digest, Sha256};

/// Size of the blocks the digest and the copy work in.
const BLOCK: u64 = 1 << 20;

/// The data runs of `file` (offset, length), from `SEEK_DATA`/`SEEK_HOLE`;
/// the whole file when the file system cannot say.
fn data_runs(file: &File, len: u64) -> io::Result<Vec<(u64, u64)>> {
    let fd = file.as_raw_fd();
    let mut runs = Vec::new();
    let mut pos: u64 = 0;
    while pos < len {
        // SAFETY: lseek on a file descriptor we own; no memory is touched.
        let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENXIO) => Ok(runs),
                Some(libc::EINVAL) if runs.is_empty() => Ok(vec![(0, len)]),
                _ => Err(e),
            };
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(io::Error::last_os_error());
        }
        let (data, hole) = (data as u64, (hole as u64).min(len));
        if hole > data {
            runs.push((data, hole - data));
        }
        pos = hole.max(data + 1);
    }
    Ok(runs)
}

/// Calls `each(block_index, bytes)` for every block of `file` that holds a
/// non-zero byte, in order.
fn for_each_block(
    file: &mut File,
    mut each: impl FnMut(u64, &[u8]) -> io::Result<()>,
) -> io::Result<u64> {
    let len = file.metadata()?.len();
    let mut buf = vec![0u8; BLOCK as usize];
    let mut last_block = None;
    for (start, run_len) in data_runs(file, len)? {
        let first = start / BLOCK;
        let end = start + run_len;
        let mut index = first;
        while index * BLOCK < end {
            if last_block.is_some_and(|b| b >= index) {
                index += 1;
                continue;
            }
            let at = index * BLOCK;
            let n = BLOCK.min(len - at) as usize;
            file.seek(SeekFrom::Start(at))?;
            file.read_exact(&mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0) {
                each(index, &buf[..n])?;
            }
            last_block = Some(index);
            index += 1;
        }
    }
    Ok(len)
}

fn finish(mut hasher: Sha256, len: u64) -> String {
    hasher.update(b"length");
    hasher.update(len.to_le_bytes());
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The image's digest (lower-case hex SHA-256, see the module comment).
pub fn digest(file: &mut File) -> io::Result<String> {
    digest_and_seal(file).map(|(d, _)| d)
}

/// Feeds `sealer` the non-zero block `index` and the zeros before it.
fn seal_block(sealer: &mut Sealer, index: u64, bytes: &[u8]) {
    sealer.zeros((index * BLOCK).saturating_sub(sealer.len()));
    sealer.update(bytes);
}

/// The image's digest and its cache seal (over every byte, holes as the
/// zeros they read as: `bootscope_model::cache`'s seal of the same bytes).
pub fn digest_and_seal(file: &mut File) -> io::Result<(String, Seal)> {
    let mut hasher = Sha256::new();
    let mut sealer = Sealer::new();
    let len = for_each_block(file, |index, bytes| {
        hasher.update(index.to_le_bytes());
        hasher.update(bytes);
        seal_block(&mut sealer, index, bytes);
        Ok(())
    })?;
    sealer.zeros(len.saturating_sub(sealer.len()));
    Ok((finish(hasher, len), sealer.seal()))
}

/// Copies `src` into the empty file `dst` (writing only non-zero blocks,
/// so the copy is sparse) and returns the digest and the seal of what was
/// copied.
pub fn copy_with_digest(src: &mut File, dst: &mut File) -> io::Result<(String, Seal)> {
    let mut hasher = Sha256::new();
    let mut sealer = Sealer::new();
    let len = for_each_block(src, |index, bytes| {
        hasher.update(index.to_le_bytes());
        hasher.update(bytes);
        seal_block(&mut sealer, index, bytes);
        dst.seek(SeekFrom::Start(index * BLOCK))?;
        dst.write_all(bytes)
    })?;
    dst.set_len(len)?;
    sealer.zeros(len.saturating_sub(sealer.len()));
    Ok((finish(hasher, len), sealer.seal()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(blocks: &[(u64, u8)], len: u64) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.set_len(len).unwrap();
        for &(at, byte) in blocks {
            f.seek(SeekFrom::Start(at)).unwrap();
            f.write_all(&[byte; 100]).unwrap();
        }
        f
    }

    #[test]
    fn digest_ignores_holes_but_not_data_or_length() {
        let len = 5 * BLOCK + 17;
        let mut a = file_with(&[(3, 1), (2 * BLOCK + 5, 2)], len);
        // The same bytes, but block 4 written with zeros (data, not a hole).
        let mut b = file_with(&[(3, 1), (2 * BLOCK + 5, 2), (4 * BLOCK, 0)], len);
        let mut c = file_with(&[(3, 1), (2 * BLOCK + 5, 3)], len);
        let mut d = file_with(&[(3, 1), (2 * BLOCK + 5, 2)], len + 1);
        let da = digest(&mut a).unwrap();
        assert_eq!(da, digest(&mut b).unwrap());
        assert_ne!(da, digest(&mut c).unwrap());
        assert_ne!(da, digest(&mut d).unwrap());
    }

    #[test]
    fn copy_is_equal_and_reports_the_source_digest() {
        let len = 3 * BLOCK + 4096;
        let mut src = file_with(&[(0, 9), (3 * BLOCK + 100, 7)], len);
        let mut dst = tempfile::tempfile().unwrap();
        let (d, seal) = copy_with_digest(&mut src, &mut dst).unwrap();
        assert_eq!(d, digest(&mut src).unwrap());
        assert_eq!((d, seal.clone()), digest_and_seal(&mut dst).unwrap());
        let (mut x, mut y) = (Vec::new(), Vec::new());
        src.seek(SeekFrom::Start(0)).unwrap();
        dst.seek(SeekFrom::Start(0)).unwrap();
        src.read_to_end(&mut x).unwrap();
        dst.read_to_end(&mut y).unwrap();
        assert_eq!(x, y);
        // The seal is the cache's seal of the very bytes, holes included.
        let mut whole = Sealer::new();
        whole.update(&x);
        assert_eq!(seal, whole.seal());
    }
}
