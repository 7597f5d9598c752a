//! An initramfs as one uncompressed cpio archive, kept in bootscope's
//! cache: what `advise` offers for a compressed initrd, whose unpacking
//! the guest's kernel otherwise does on a vCPU (`populate_rootfs`, beside
//! the initcalls after it; a module load and `/init` wait for it).
//!
//! An initrd is a sequence the kernel unpacks in order
//! (Documentation/driver-api/early-userspace/buffer-format.rst): cpio
//! archives (`newc`, magic `070701` or `070702`), compressed streams of
//! them, and zero padding between. Debian's is an uncompressed archive of
//! CPU microcode followed by one zstd stream. The archives are copied as
//! they are, the streams decompressed (gzip, xz, zstd: what the kernel
//! decompressor of the host's bzImages handles too), the padding dropped:
//! the kernel unpacks the result to the same files.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::cache::MappedFile;
use super::decompress::{hex, Compression};

/// The largest archive made (the kernel's own unpacking is bounded by the
/// guest's memory; this by the host's).
pub const MAX_UNPACKED: u64 = 1 << 30;

/// The `newc` header: its magic, then 13 fields of 8 hexadecimal digits.
const HEADER: usize = 110;
const TRAILER: &[u8] = b"TRAILER!!!";

/// An initrd unpacked to one archive.
#[derive(Debug)]
pub struct Unpacked {
    pub bytes: Vec<u8>,
    /// Each compressed stream's compression, in order.
    pub streams: Vec<&'static str>,
}

/// `initrd` as one uncompressed cpio archive; the error says what in it
/// could not be read and where.
pub fn uncompressed(initrd: &[u8]) -> Result<Unpacked, String> {
    let mut out = Vec::new();
    let mut streams = Vec::new();
    let mut at = 0;
    while at < initrd.len() {
        let rest = &initrd[at..];
        if rest[0] == 0 {
            at += 1;
            continue;
        }
        if rest.starts_with(b"070701") || rest.starts_with(b"070702") {
            let end =
                archive_end(rest).map_err(|e| format!("the cpio archive at byte {at}: {e}"))?;
            out.extend_from_slice(&rest[..end]);
            at += end;
        } else {
            let c = Compression::detect(rest).ok_or_else(|| {
                format!(
                    "byte {at} starts neither a cpio archive nor a compressed stream ({})",
                    hex(&rest[..rest.len().min(6)])
                )
            })?;
            let limit = MAX_UNPACKED.saturating_sub(out.len() as u64);
            let used = unpack_stream(c, rest, limit, &mut out)
                .map_err(|e| format!("the {} stream at byte {at}: {e}", c.name()))?;
            streams.push(c.name());
            at += used.max(1);
        }
        if out.len() as u64 > MAX_UNPACKED {
            return Err(format!("it unpacks to more than {MAX_UNPACKED} bytes"));
        }
    }
    if !(out.starts_with(b"070701") || out.starts_with(b"070702")) {
        return Err("it holds no cpio archive".into());
    }
    Ok(Unpacked {
        bytes: out,
        streams,
    })
}

/// One `newc` entry of an archive: where it starts and ends (4-byte
/// aligned), its name (without the NUL) and its data.
pub(crate) struct Entry<'a> {
    pub start: usize,
    pub end: usize,
    pub name: &'a [u8],
    pub data: &'a [u8],
    /// The archive's last entry (`TRAILER!!!`).
    pub trailer: bool,
}

/// The `newc` entry at byte `at` of `a` (an archive starts 4-byte aligned
/// at 0); the error says what is wrong and where.
pub(crate) fn entry_at(a: &[u8], at: usize) -> Result<Entry<'_>, String> {
    let align = |n: usize| n.div_ceil(4) * 4;
    let head = a
        .get(at..at + HEADER)
        .ok_or_else(|| format!("it ends inside the header at byte {at}"))?;
    if !(head.starts_with(b"070701") || head.starts_with(b"070702")) {
        return Err(format!("no cpio header at byte {at}"));
    }
    let field = |i: usize| {
        let digits = &head[6 + 8 * i..6 + 8 * (i + 1)];
        std::str::from_utf8(digits)
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("a header field at byte {at} is not hexadecimal"))
    };
    let (file_size, name_size) = (field(6)?, field(11)?);
    let name_end = at + HEADER + name_size;
    let name = a
        .get(at + HEADER..name_end)
        .ok_or_else(|| format!("it ends inside the name at byte {at}"))?;
    let data = align(name_end);
    let next = data
        .checked_add(file_size)
        .map(align)
        .filter(|&n| n <= align(a.len()))
        .ok_or_else(|| format!("the entry at byte {at} runs past the end"))?;
    let name = name.strip_suffix(b"\0").unwrap_or(name);
    Ok(Entry {
        start: at,
        end: next.min(a.len()),
        name,
        data: &a[data.min(a.len())..(data + file_size).min(a.len())],
        trailer: name == TRAILER,
    })
}

/// Where the `newc` archive at the start of `a` ends: after its trailer's
/// entry, 4-byte aligned.
fn archive_end(a: &[u8]) -> Result<usize, String> {
    let mut at = 0;
    loop {
        let e = entry_at(a, at)?;
        if e.trailer {
            return Ok(e.end);
        }
        at = e.end;
    }
}

/// Decompresses the stream at the start of `input` into `out` (at most
/// `limit` bytes more); returns the bytes of `input` it took.
fn unpack_stream(
    c: Compression,
    input: &[u8],
    limit: u64,
    out: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let before = out.len();
    let too_big = |out: &Vec<u8>| (out.len() - before) as u64 > limit;
    let used = match c {
        Compression::Gzip => {
            let mut d = flate2::bufread::GzDecoder::new(input);
            (&mut d).take(limit + 1).read_to_end(out)?;
            input.len() - d.into_inner().len()
        }
        Compression::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(input)?.single_frame();
            (&mut d).take(limit + 1).read_to_end(out)?;
            input.len() - d.finish().len()
        }
        Compression::Xz => {
            use xz2::stream::{Action, Status, Stream};
            let mut s = Stream::new_stream_decoder(u64::MAX, 0)?;
            loop {
                let (ins, outs) = (s.total_in(), out.len());
                out.reserve(1 << 20);
                let rest = &input[ins as usize..];
                let action = if rest.is_empty() {
                    Action::Finish
                } else {
                    Action::Run
                };
                if s.process_vec(rest, out, action)? == Status::StreamEnd || too_big(out) {
                    break;
                }
                if s.total_in() == ins && out.len() == outs {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the stream ends early",
                    ));
                }
            }
            s.total_in() as usize
        }
        other => {
            return Err(std::io::Error::other(format!(
                "{} streams are not unpacked here (gzip, xz and zstd are)",
                other.name()
            )))
        }
    };
    if too_big(out) {
        return Err(std::io::Error::other(format!(
            "it unpacks to more than {MAX_UNPACKED} bytes"
        )));
    }
    Ok(used)
}

/// Where uncompressed initrds are kept: the `initrds` directory of
/// bootscope's cache, private ([`bootscope_model::cache::cache_dir`]).
pub fn user_cache_dir() -> Result<PathBuf, bootscope_model::cache::CacheError> {
    bootscope_model::cache::cache_dir("initrds")
}

/// The uncompressed archive of the initrd at `path` in the cache `dir`,
/// named by the SHA-256 of the initrd, made there (sealed) when it is
/// missing or does not match its seal. `Ok(None)`: the initrd is an
/// uncompressed archive already.
pub fn cached_cpio(path: &Path, dir: &Path) -> Result<Option<PathBuf>, String> {
    use bootscope_model::cache;
    let initrd = bootscope_model::input::read_input(path).map_err(|e| e.to_string())?;
    let file = dir.join(format!("initrd-{}.cpio", hex(&Sha256::digest(&initrd))));
    if let Ok(Some((f, meta))) = cache::open_file(&file) {
        if let Ok(m) = MappedFile::map(&f, meta.len()) {
            if cache::verify(&file, m.as_slice()) == cache::Verdict::Sound {
                return Ok(Some(file));
            }
        }
    }
    let unpacked = uncompressed(&initrd)?;
    if unpacked.streams.is_empty() {
        return Ok(None);
    }
    cache::private_dir(dir, dir)
        .map_err(|e| e.to_string())
        .and_then(|()| cache::store(&file, &unpacked.bytes).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(Some(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A `newc` archive of `files` (name, contents) and its trailer.
    fn cpio(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut entry = |name: &str, data: &[u8], ino: usize| {
            let mut h = String::from("070701");
            let mode = if data.is_empty() && name == "TRAILER!!!" {
                0
            } else {
                0o100644
            };
            for v in [
                ino,
                mode,
                0,
                0,
                1,
                0,
                data.len(),
                0,
                0,
                0,
                0,
                name.len() + 1,
                0,
            ] {
                h.push_str(&format!("{v:08x}"));
            }
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(name.as_bytes());
            out.push(0);
            while out.len() % 4 != 0 {
                out.push(0);
            }
            out.extend_from_slice(data);
            while out.len() % 4 != 0 {
                out.push(0);
            }
        };
        for (i, (name, data)) in files.iter().enumerate() {
            entry(name, data, i + 1);
        }
        entry("TRAILER!!!", b"", 0);
        out
    }

    fn zstd(b: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(b, 3).unwrap()
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn xz(b: &[u8]) -> Vec<u8> {
        let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_debian_like_initrd_becomes_its_archives_in_order() {
        // Microcode uncompressed, padding, then the main archive compressed.
        let early = cpio(&[("kernel/x86/microcode/GenuineIntel.bin", b"ucode")]);
        let main = cpio(&[("init", b"#!/bin/sh\n"), ("bin/busybox", &[7u8; 5000])]);
        for (name, packed) in [
            ("zstd", zstd(&main)),
            ("gzip", gzip(&main)),
            ("xz", xz(&main)),
        ] {
            let mut initrd = early.clone();
            initrd.extend_from_slice(&[0; 512]);
            initrd.extend_from_slice(&packed);
            let u = uncompressed(&initrd).unwrap();
            assert_eq!(u.streams, [name]);
            assert_eq!(u.bytes, [early.clone(), main.clone()].concat(), "{name}");
        }
        // Two streams, padding after the last.
        let two = [zstd(&early), gzip(&main), vec![0; 7]].concat();
        let u = uncompressed(&two).unwrap();
        assert_eq!(u.streams, ["zstd", "gzip"]);
        assert_eq!(u.bytes, [early.clone(), main.clone()].concat());
        // An uncompressed archive is itself.
        let u = uncompressed(&main).unwrap();
        assert!(u.streams.is_empty());
        assert_eq!(u.bytes, main);
    }

    #[test]
    fn damaged_initrds_are_errors_that_say_where() {
        let main = cpio(&[("init", b"#!/bin/sh\n")]);
        let mut cut = zstd(&main);
        cut.truncate(cut.len() / 2);
        let e = uncompressed(&[main.clone(), cut].concat()).unwrap_err();
        assert!(e.contains("the zstd stream at byte"), "{e}");
        let e = uncompressed(b"not an initrd at all").unwrap_err();
        assert!(e.contains("byte 0 starts neither"), "{e}");
        // An archive without its trailer, and one whose entry runs past the end.
        let e = uncompressed(&main[..main.len() - 120]).unwrap_err();
        assert!(e.contains("the cpio archive at byte 0"), "{e}");
        let mut long = main.clone();
        long[6 + 8 * 6..6 + 8 * 7].copy_from_slice(b"7fffffff");
        let e = uncompressed(&long).unwrap_err();
        assert!(e.contains("runs past the end"), "{e}");
        assert!(uncompressed(&[0; 64]).unwrap_err().contains("no cpio"));
        assert!(uncompressed(&[]).is_err());
    }

    #[test]
    fn the_cache_keeps_a_sealed_copy_and_remakes_a_damaged_one() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("initrds");
        let main = cpio(&[("init", b"#!/bin/sh\n")]);
        let initrd = base.path().join("initrd.img");
        std::fs::write(&initrd, zstd(&main)).unwrap();
        let file = cached_cpio(&initrd, &dir).unwrap().unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), main);
        assert_eq!(cached_cpio(&initrd, &dir).unwrap().unwrap(), file);
        // A copy changed behind the seal's back is made again.
        std::fs::write(&file, b"070701 tampered").unwrap();
        assert_eq!(cached_cpio(&initrd, &dir).unwrap().unwrap(), file);
        assert_eq!(std::fs::read(&file).unwrap(), main);
        // An uncompressed initrd needs no copy.
        let plain = base.path().join("plain.cpio");
        std::fs::write(&plain, &main).unwrap();
        assert_eq!(cached_cpio(&plain, &dir).unwrap(), None);
        let e = cached_cpio(&base.path().join("missing"), &dir).unwrap_err();
        assert!(e.contains("missing"), "{e}");
    }
}
