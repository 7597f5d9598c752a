//! The units record read from a disk image the guest wrote, through a
//! bounded, validating path: the image is the guest's, so everything in it
//! is hostile. The ext4 crate sizes what it allocates by the superblock
//! (one descriptor per block group, `Vec::with_capacity` of the group
//! count) and by the file's inode (`read` allocates the size the inode
//! claims), so before the crate sees the image its superblock is held
//! against the image's real size and against what mkfs.ext4 can make
//! (docs/guest.md lists the checks, which the crate should make itself);
//! the crate reads through [`BoundedReader`], which refuses reads past the
//! image and past a budget of bytes and calls; the record is refused above
//! [`MAX_RECORD_BYTES`] before a byte of it is read; and a panic in the
//! crate is an unreadable image, not a lost timeline.

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::rc::Rc;

/// The largest record read (4 MiB): a Debian boot's record is about
/// 47 KB for 155 units; a record above this is refused unread.
pub const MAX_RECORD_BYTES: u64 = 4 << 20;
/// The most block groups an image may have (2^18: 32 TiB with 4 KiB blocks),
/// which bounds the crate's descriptor table (about 60 bytes a group).
pub const MAX_BLOCK_GROUPS: u64 = 1 << 18;
/// What the crate may read from an image for one record: bytes (the
/// descriptors, the path's directories, a journal to replay, the record)...
pub const READ_BUDGET_BYTES: u64 = 1 << 30;
/// ... and reads (one per descriptor, per cached run of blocks).
pub const READ_BUDGET_CALLS: u64 = 1 << 21;

const SUPERBLOCK_OFFSET: u64 = 1024;
const SUPERBLOCK_SIZE: usize = 1024;
const EXT4_MAGIC: u16 = 0xef53;
const INCOMPAT_64BIT: u32 = 0x80;

fn u16_at(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}

/// Whether a superblock (the 1024 bytes at offset 1024) is an ext4
/// superblock at all (its magic).
pub fn is_ext4(superblock: &[u8]) -> bool {
    superblock.len() >= SUPERBLOCK_SIZE && u16_at(superblock, 0x38) == u64::from(EXT4_MAGIC)
}

/// Holds an ext4 superblock against the size of the image it is in and
/// against what mkfs.ext4 makes: an error names the first field out of
/// bounds. Only then does the crate see the image.
pub fn check_superblock(sb: &[u8], image_len: u64) -> Result<(), String> {
    if sb.len() < SUPERBLOCK_SIZE {
        return Err("its superblock is cut short".into());
    }
    let log_block = u32_at(sb, 0x18);
    if log_block > 6 {
        return Err(format!(
            "its block size is 2^{} bytes (ext4's are 1 KiB to 64 KiB)",
            log_block.saturating_add(10)
        ));
    }
    let block_size = 1024u64 << log_block;
    // As the crate reads it: the high half whether or not the file system
    // is 64-bit.
    let blocks = u32_at(sb, 0x150) << 32 | u32_at(sb, 0x4);
    let fs_bytes = blocks.saturating_mul(block_size);
    if blocks == 0 || fs_bytes > image_len {
        return Err(format!(
            "its superblock claims {blocks} blocks of {block_size} bytes, more than the image's {image_len} bytes"
        ));
    }
    let first_data_block = u32_at(sb, 0x14);
    if first_data_block >= blocks || first_data_block > 1 {
        return Err(format!(
            "its first data block is {first_data_block} (0 or 1 in ext4)"
        ));
    }
    let per_group = u32_at(sb, 0x20);
    if !(8..=8 * block_size).contains(&per_group) {
        return Err(format!(
            "it has {per_group} blocks per group (8 to {} with {block_size}-byte blocks)",
            8 * block_size
        ));
    }
    let groups = (blocks - first_data_block).div_ceil(per_group);
    let desc_size = if u32_at(sb, 0x60) & u64::from(INCOMPAT_64BIT) != 0 {
        u16_at(sb, 0xfe)
    } else {
        32
    };
    if !(32..=1024).contains(&desc_size) || !desc_size.is_power_of_two() {
        return Err(format!(
            "its group descriptors are {desc_size} bytes (32 to 1024, a power of two)"
        ));
    }
    if groups > MAX_BLOCK_GROUPS || groups.saturating_mul(desc_size) > fs_bytes {
        return Err(format!(
            "it has {groups} block groups (at most {MAX_BLOCK_GROUPS}, their descriptors within the file system)"
        ));
    }
    check_inodes(sb, block_size, groups)
}

fn check_inodes(sb: &[u8], block_size: u64, groups: u64) -> Result<(), String> {
    let per_group = u32_at(sb, 0x28);
    if per_group == 0 || per_group > 8 * block_size {
        return Err(format!(
            "it has {per_group} inodes per group (1 to {} with {block_size}-byte blocks)",
            8 * block_size
        ));
    }
    let inode_size = u16_at(sb, 0x58);
    // Revision 0 file systems have 128-byte inodes and a zero here.
    let inode_size = if u32_at(sb, 0x4c) == 0 {
        128
    } else {
        inode_size
    };
    if !(128..=block_size).contains(&inode_size) || !inode_size.is_power_of_two() {
        return Err(format!(
            "its inodes are {inode_size} bytes (128 to the block size, a power of two)"
        ));
    }
    let inodes = u32_at(sb, 0x0);
    if inodes != per_group.saturating_mul(groups) {
        return Err(format!(
            "it counts {inodes} inodes, not {per_group} per group in {groups} groups"
        ));
    }
    Ok(())
}

/// What the crate read from an image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    pub bytes: u64,
    pub calls: u64,
}

/// The image as the crate reads it: reads inside the image only, within
/// [`READ_BUDGET_BYTES`] and [`READ_BUDGET_CALLS`].
pub struct BoundedReader {
    file: File,
    len: u64,
    used: Rc<Cell<ReadStats>>,
}

impl BoundedReader {
    /// A reader of `file`, `len` bytes long, counting what it reads in
    /// `used`.
    pub fn new(file: File, len: u64, used: Rc<Cell<ReadStats>>) -> BoundedReader {
        BoundedReader { file, len, used }
    }
}

/// Why the bounded reader refused a read.
#[derive(Debug, thiserror::Error)]
pub enum ReadRefused {
    #[error("a read of {len} bytes at {at} is past the image's end ({image} bytes)")]
    PastEnd { at: u64, len: usize, image: u64 },
    #[error("the file system needs more than {READ_BUDGET_BYTES} bytes or {READ_BUDGET_CALLS} reads to reach the record")]
    Budget,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl ext4_view::Ext4Read for BoundedReader {
    fn read(
        &mut self,
        start_byte: u64,
        dst: &mut [u8],
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync + 'static>> {
        let len = dst.len() as u64;
        if start_byte.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Box::new(ReadRefused::PastEnd {
                at: start_byte,
                len: dst.len(),
                image: self.len,
            }));
        }
        let mut used = self.used.get();
        used.calls += 1;
        used.bytes = used.bytes.saturating_add(len);
        if used.calls > READ_BUDGET_CALLS || used.bytes > READ_BUDGET_BYTES {
            return Err(Box::new(ReadRefused::Budget));
        }
        self.used.set(used);
        self.file
            .read_exact_at(dst, start_byte)
            .map_err(|e| Box::new(ReadRefused::Io(e)) as _)
    }
}

/// The file at `path` in the ext4 file system of `image` (open, `len`
/// bytes long): `Ok(None)` when the image holds no ext4 file system (no
/// magic) or no such file; an error naming the problem when the file
/// system is implausible, the file is not a regular file or larger than
/// [`MAX_RECORD_BYTES`], or it cannot be read.
pub fn read_file(image: File, len: u64, path: &str) -> Result<Option<Vec<u8>>, String> {
    read_file_counted(image, len, path).0
}

/// [`read_file`], and what the crate read from the image for it.
pub fn read_file_counted(
    image: File,
    len: u64,
    path: &str,
) -> (Result<Option<Vec<u8>>, String>, ReadStats) {
    let used = Rc::new(Cell::new(ReadStats::default()));
    let result = read_checked(image, len, path, &used);
    (result, used.get())
}

fn read_checked(
    image: File,
    len: u64,
    path: &str,
    used: &Rc<Cell<ReadStats>>,
) -> Result<Option<Vec<u8>>, String> {
    with_checked_fs(image, len, used, |fs| read_in(fs, path)).map(Option::flatten)
}

/// Runs `f` over the image's ext4 file system once its superblock passed
/// [`check_superblock`], with the crate reading through the bounded
/// reader: `Ok(None)` when the image holds no ext4 file system.
fn with_checked_fs<T>(
    image: File,
    len: u64,
    used: &Rc<Cell<ReadStats>>,
    f: impl FnOnce(&ext4_view::Ext4) -> Result<T, String>,
) -> Result<Option<T>, String> {
    let mut sb = vec![0u8; SUPERBLOCK_SIZE];
    if len < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE as u64
        || image.read_exact_at(&mut sb, SUPERBLOCK_OFFSET).is_err()
        || !is_ext4(&sb)
    {
        return Ok(None);
    }
    check_superblock(&sb, len).map_err(|e| format!("the ext4 file system is implausible: {e}"))?;
    let reader = BoundedReader::new(image, len, Rc::clone(used));
    // The crate's own asserts and unwraps: a panic is an unreadable image.
    catch_unwind(AssertUnwindSafe(|| {
        let fs = ext4_view::Ext4::load(Box::new(reader))
            .map_err(|e| format!("the ext4 file system cannot be read: {e}"))?;
        f(&fs).map(Some)
    }))
    .unwrap_or_else(|_| Err("the ext4 reader failed on this file system".into()))
}

/// Runs `f` over the ext4 file system of the image at `image` (a file or
/// a block device), opened read-only and without blocking, through the
/// same checks and bounded reader as the record: `Ok(None)` when it
/// cannot be opened or holds no ext4 file system.
pub fn with_fs_at<T>(
    image: &Path,
    f: impl FnOnce(&ext4_view::Ext4) -> Result<T, String>,
) -> Result<Option<T>, String> {
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(image)
    else {
        return Ok(None);
    };
    let len = (&file).seek(SeekFrom::End(0)).unwrap_or(0);
    with_checked_fs(file, len, &Rc::default(), f)
}

pub(super) fn read_in(fs: &ext4_view::Ext4, path: &str) -> Result<Option<Vec<u8>>, String> {
    let meta = match fs.metadata(path) {
        Ok(m) => m,
        Err(ext4_view::Ext4Error::NotFound) => return Ok(None),
        Err(e) => return Err(format!("cannot look up {path}: {e}")),
    };
    if !meta.file_type().is_regular_file() {
        return Err(format!("{path} is not a regular file"));
    }
    if meta.len() > MAX_RECORD_BYTES {
        return Err(format!(
            "{path} is {} bytes, more than the {MAX_RECORD_BYTES} a record may hold",
            meta.len()
        ));
    }
    let file = fs
        .open(path)
        .map_err(|e| format!("cannot open {path}: {e}"))?;
    let mut data = Vec::new();
    file.take(MAX_RECORD_BYTES)
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    Ok(Some(data))
}

/// [`read_file`] of the image at `image` (a file or a block device),
/// opened read-only and without blocking: `Ok(None)` when it cannot be
/// opened.
pub fn read_file_at(image: &Path, path: &str) -> Result<Option<Vec<u8>>, String> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(image)
    {
        Ok(f) => f,
        Err(_) => return Ok(None),
    };
    // The end, not the metadata's length, which is 0 for a block device.
    let len = (&file).seek(SeekFrom::End(0)).unwrap_or(0);
    read_file(file, len, path)
}
